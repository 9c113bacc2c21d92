"""The servers' own character sets: every code a column of a charset stores, and its text.

Each `<charset>.txt` here (or `<charset>.<flavour>.txt`, where MariaDB and MySQL differ) was
made by deploy/charmaps.py, which asks a live server what `CONVERT(col USING utf8mb4)` returns
for every code a column of the charset accepts in strict mode; a code the server refuses to
store can never be in a binlog. The files are the reference Sluice decodes text by
(connector/binlog/charsets.py); Python's codecs are not MySQL's charsets.

A file is lines of text; `#` starts a comment. `codes R1 R2 ..` opens a block: the codes whose
first byte is in R1, second in R2, and so on (each R is hex bytes and ranges, `81-9f,e0-fc`),
taken in order with the last byte counting fastest. Each following line `code count text` is a
run of `count` codes of the block from `code` on: the first code's text is the code point
`text` (hex) and each next code's is one more; `?` instead: the server stores them but shows
`?` (an unassigned code); several code points joined by `+` (count 1): one code, that text.
The runs of a block cover all of it: what a block holds is exactly what the server stores.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import TypeVar

from connector.errors import FormatError

FLAVOURS = ("mariadb", "mysql")

Block = tuple[bytes, ...]  # the byte values each position of a code takes, ascending
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Run:
    code: bytes  # the first code
    count: int
    text: tuple[int, ...] | None  # the first code's code points (one unless count is 1); None: "?"


@dataclass(frozen=True, slots=True)
class Charmap:
    charset: str
    blocks: tuple[tuple[Block, tuple[Run, ...]], ...]

    @property
    def widths(self) -> frozenset[int]:
        return frozenset(len(block) for block, _ in self.blocks)

    def items(self) -> Iterator[tuple[bytes, str | None]]:
        """Every code and its text (None: the server shows "?"), block by block, in order."""
        for block, runs in self.blocks:
            codes = block_codes(block)
            for run in runs:
                for k in range(run.count):
                    yield next(codes), text_of(run, k)

    def size(self) -> int:
        return sum(run.count for _, runs in self.blocks for run in runs)


def text_of(run: Run, k: int) -> str | None:
    """The text of a run's k-th code (None: "?")."""
    if run.text is None:
        return None
    if len(run.text) > 1:
        return "".join(map(chr, run.text))
    return chr(run.text[0] + k)


def block_codes(block: Block) -> Iterator[bytes]:
    """A block's codes in order (the last byte counting fastest)."""
    return (bytes(code) for code in itertools.product(*block))


def block_size(block: Block) -> int:
    return math.prod(len(values) for values in block)


# -- the text format --------------------------------------------------------------------------


def _byte_set(text: str) -> bytes:
    values: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        values.update(range(int(first, 16), int(last or first, 16) + 1))
    if not values or max(values) > 0xFF:
        raise FormatError(f"byte set {text!r} is empty or past ff")
    return bytes(sorted(values))


def _byte_set_text(values: bytes) -> str:
    parts, start = [], 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[i - 1] + 1:
            first, last = values[start], values[i - 1]
            parts.append(f"{first:02x}" if first == last else f"{first:02x}-{last:02x}")
            start = i
    return ",".join(parts)


def parse(charset: str, text: str) -> Charmap:
    """A charmap file's blocks and runs; FormatError naming the line where it does not add up
    (for a block its runs do not cover, the line that opens it)."""
    blocks: list[tuple[Block, tuple[Run, ...]]] = []
    opened: tuple[int, Block] | None = None  # the block being read, and its line
    runs: list[Run] = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if fields and fields[0] == "codes":
            blocks += _closed(charset, opened, runs)
            opened, runs = (number, _read(charset, number, _block, fields[1:])), []
        elif fields:
            if opened is None:
                raise FormatError(f"charmap {charset} line {number}: a run outside a block")
            runs.append(_read(charset, number, _run, fields))
    return Charmap(charset, tuple(blocks + _closed(charset, opened, runs)))


def _read(charset: str, number: int, read: Callable[[list[str]], T], fields: list[str]) -> T:
    try:
        return read(fields)
    except (FormatError, ValueError) as exc:
        raise FormatError(f"charmap {charset} line {number}: {exc}") from exc


def _block(fields: list[str]) -> Block:
    if not fields:
        raise FormatError("a block of no bytes")
    return tuple(_byte_set(f) for f in fields)


def _run(fields: list[str]) -> Run:
    if len(fields) != 3:
        raise FormatError("a run is `code count text`")
    code, count = bytes.fromhex(fields[0]), int(fields[1])
    text = None if fields[2] == "?" else tuple(int(cp, 16) for cp in fields[2].split("+"))
    if count < 1 or (text is not None and len(text) > 1 and count != 1):
        raise FormatError(f"run {' '.join(fields)}: a count below 1, or several code points for several codes")
    return Run(code, count, text)


def _closed(charset: str, opened: tuple[int, Block] | None, runs: list[Run]) -> list[tuple[Block, tuple[Run, ...]]]:
    """The block read (none before the first), checked: each run starts where the one before
    ended, in the block, and together they cover it."""
    if opened is None:
        return []
    number, block = opened
    at = 0
    for run in runs:
        if place_of(block, run.code) != at:
            raise FormatError(f"charmap {charset} line {number}: run at {run.code.hex()} is not the block's code {at}")
        at += run.count
    if at != block_size(block):
        raise FormatError(f"charmap {charset} line {number}: runs of {at} codes, not {block_size(block)}")
    return [(block, tuple(runs))]


def place_of(block: Block, code: bytes) -> int | None:
    """A code's place in its block's order; None if it is not in the block."""
    if len(code) != len(block):
        return None
    place = 0
    for values, byte in zip(block, code):
        k = values.find(byte)
        if k < 0:
            return None
        place = place * len(values) + k
    return place


def code_at(block: Block, place: int) -> bytes:
    """The code at a place of its block's order (place_of's inverse)."""
    out = []
    for values in reversed(block):
        place, k = divmod(place, len(values))
        out.append(values[k])
    return bytes(reversed(out))


def block_bytes(block: Block) -> bytes:
    """A block's codes in order, one after another (built a position at a time, not code by code)."""
    width = len(block)
    if width == 1:
        return block[0]
    inner, count = block_bytes(block[1:]), block_size(block[1:])
    out = []
    for first in block[0]:
        codes = bytearray(count * width)
        codes[0::width] = bytes((first,)) * count
        for k in range(width - 1):
            codes[k + 1 :: width] = inner[k :: width - 1]
        out.append(bytes(codes))
    return b"".join(out)


def render(charmap: Charmap, header: str) -> str:
    """The file of a charmap, `header` (lines of comment) first."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for block, runs in charmap.blocks:
        lines.append("codes " + " ".join(map(_byte_set_text, block)))
        for run in runs:
            text = "?" if run.text is None else "+".join(f"{cp:04x}" for cp in run.text)
            lines.append(f"{run.code.hex()} {run.count} {text}")
    return "\n".join(lines) + "\n"


def runs_of(codes: list[tuple[bytes, str | None]]) -> tuple[Run, ...]:
    """The runs of a block's codes and texts, given in the block's order."""
    runs: list[Run] = []
    for code, text in codes:
        cps = None if text is None else tuple(map(ord, text))
        last = runs[-1] if runs else None
        if last is not None and _extends(last, cps):
            runs[-1] = Run(last.code, last.count + 1, last.text)
        else:
            runs.append(Run(code, 1, cps))
    return tuple(runs)


def _extends(run: Run, cps: tuple[int, ...] | None) -> bool:
    if run.text is None or cps is None:
        return run.text is None and cps is None
    return len(run.text) == len(cps) == 1 and run.text[0] + run.count == cps[0]


def blocks_of(codes: set[bytes]) -> list[Block]:
    """The fewest blocks (byte sets by position) whose codes are exactly `codes`, all one width:
    first bytes that are followed by the same set of rest go in one block."""
    if not codes:
        return []
    if len(next(iter(codes))) == 1:
        return [(bytes(sorted(c[0] for c in codes)),)]
    rests: dict[int, set[bytes]] = {}
    for code in codes:
        rests.setdefault(code[0], set()).add(code[1:])
    firsts: dict[frozenset[bytes], list[int]] = {}
    for first, rest in rests.items():
        firsts.setdefault(frozenset(rest), []).append(first)
    out = []
    for rest_set, leads in firsts.items():
        out += [(bytes(sorted(leads)), *sub) for sub in _cached_blocks(rest_set)]
    return sorted(out)


@functools.lru_cache(maxsize=256)
def _cached_blocks(codes: frozenset[bytes]) -> tuple[Block, ...]:
    return tuple(blocks_of(set(codes)))


# -- the files shipped here -------------------------------------------------------------------


@functools.cache
def load(charset: str, flavour: str) -> Charmap | None:
    """The charmap of a charset as the flavour's server has it; None where there is no file."""
    root = resources.files(__name__)
    for name in (f"{charset}.{flavour}.txt", f"{charset}.txt"):
        entry = root.joinpath(name)
        if entry.is_file():
            return parse(charset, entry.read_text(encoding="utf-8"))
    return None


def shipped() -> list[str]:
    """The names of the files here."""
    return sorted(e.name for e in resources.files(__name__).iterdir() if e.name.endswith(".txt"))
