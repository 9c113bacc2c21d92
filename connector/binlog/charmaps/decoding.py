"""Decoders of text as a server has it, from its tables (connector/binlog/charmaps/).

Each decoder has `text(data)`, the exact text or UnicodeDecodeError (what a rows decoder calls
first), and `decode(data, errors)`, a codec's decode (connector/binlog/charsets.py registers
them). Where the text is not exact, errors=REPLACE makes each byte that starts no character of
the charset U+FFFD (a character without a UTF-8 form: one U+FFFD for all its bytes).
"""

from __future__ import annotations

import array
import bisect
import codecs
import functools
import re
from collections.abc import Iterator

from connector.binlog.charmaps import Block, Charmap, Run, block_bytes, text_of

REPLACE = "sluice_replace"  # the error handler of lenient decoding


def _replace_errors(err: UnicodeError) -> tuple[str, int]:
    """REPLACE: U+FFFD for what could not be decoded; a UTF-8 surrogate (ED A0-BF 80-BF, which
    MariaDB's utf8mb3 and utf8mb4 store: strings/ctype-utf8.h, IS_UTF8MB3_STEP2 checks no more
    than an overlong form) is one character, so one U+FFFD for its three bytes."""
    if not isinstance(err, UnicodeDecodeError):
        raise err
    data, at = err.object, err.start
    if err.encoding in ("utf-8", "utf8") and _UTF8_SURROGATE.match(data, at):
        return "\ufffd", at + 3
    return "\ufffd", err.end


_UTF8_SURROGATE = re.compile(b"\xed[\xa0-\xbf][\x80-\xbf]")


codecs.register_error(REPLACE, _replace_errors)


def _fail(name: str, data: bytes, start: int, end: int, errors: str, reason: str) -> str:
    """What `errors` makes of bytes [start, end) that cannot be decoded (raising if strict)."""
    exc = UnicodeDecodeError(name, data, start, end, reason)
    if errors == "strict":
        raise exc
    text, _ = codecs.lookup_error(errors)(exc)
    assert isinstance(text, str)
    return text


# -- ucs2, collations with no table, single-byte charsets ---------------------------------------

_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


class _Walked:
    """A charset whose text is fast unless its codec raises; then walked code by code, where
    `errors` says what becomes of a code it cannot read."""

    def text(self, data: bytes) -> str:
        raise NotImplementedError

    def walk(self, data: bytes, errors: str) -> str:
        raise NotImplementedError

    def decode(self, data: bytes, errors: str = "strict") -> tuple[str, int]:
        data = bytes(data)
        try:
            return self.text(data), len(data)
        except UnicodeDecodeError:
            return self.walk(data, errors), len(data)


class Ucs2(_Walked):
    """ucs2: two bytes a character, big-endian. Python's UTF-16 makes one character of a pair of
    surrogates, ucs2 two, unpaired, without a UTF-8 form: text holding a pair is walked."""

    name = "ucs2"
    exact_or_raises: str | None = None

    def text(self, data: bytes) -> str:
        text = data.decode("utf-16-be")
        if not text.isascii() and _ASTRAL.search(text) is not None:
            return self.walk(data, "strict")
        return text

    def walk(self, data: bytes, errors: str) -> str:
        out = []
        for at in range(0, len(data) - 1, 2):
            unit = data[at] << 8 | data[at + 1]
            if 0xD800 <= unit <= 0xDFFF:
                out.append(_fail(self.name, data, at, at + 2, errors, "a surrogate: no UTF-8 form"))
            else:
                out.append(chr(unit))
        if len(data) % 2:
            out.append(_fail(self.name, data, len(data) - 1, len(data), errors, "half a character"))
        return "".join(out)


class Unknown:
    """A collation id with no table: no text is exact (but the empty one); leniently, the bytes
    read as UTF-8."""

    name = "unknown collation"
    exact_or_raises: str | None = None

    def text(self, data: bytes) -> str:
        if data:
            raise UnicodeDecodeError(self.name, data, 0, len(data), "a collation id Sluice has no table for")
        return ""

    def decode(self, data: bytes, errors: str = "strict") -> tuple[str, int]:
        data = bytes(data)
        if errors == "strict":
            return self.text(data), len(data)
        return data.decode("utf-8", errors), len(data)


class SingleByte:
    """A single-byte charset: each byte's text (codecs.charmap_decode's table)."""

    exact_or_raises: str | None = None

    def __init__(self, name: str, table: Charmap) -> None:
        self.name = name
        chars = ["\ufffe"] * 256  # charmap_decode's "undefined": bytes the server does not store
        for code, text in table.items():
            chars[code[0]] = "?" if text is None else text
        self.table: str | dict[int, str] = "".join(chars)
        if any(len(c) != 1 for c in chars):  # a byte of several characters: a mapping takes it
            self.table = {byte: c for byte, c in enumerate(chars) if c != "\ufffe"}

    def text(self, data: bytes) -> str:
        return codecs.charmap_decode(data, "strict", self.table)[0]

    def decode(self, data: bytes, errors: str = "strict") -> tuple[str, int]:
        return codecs.charmap_decode(data, errors, self.table)


# -- the servers' tables ----------------------------------------------------------------------


class _Block:
    """One block of a charmap, to look codes up in: each byte's place at each position, and
    the place each run starts at."""

    __slots__ = ("places", "runs", "sizes", "starts", "width")

    def __init__(self, block: Block, runs: tuple[Run, ...]) -> None:
        self.width = len(block)
        self.places = tuple(_places(values) for values in block)
        self.sizes = tuple(len(values) for values in block)
        self.runs = runs
        self.starts, at = [], 0
        for run in runs:
            self.starts.append(at)
            at += run.count

    def text(self, data: bytes, at: int) -> str | None:
        """The text of the code at `at` if it is one of this block's, else None."""
        place = 0
        for k in range(self.width):
            p = self.places[k][data[at + k]]
            if p < 0:
                return None
            place = place * self.sizes[k] + p
        i = bisect.bisect_right(self.starts, place) - 1
        run = self.runs[i]
        if run.text is None:
            return "?"
        return chr(run.text[0] + place - self.starts[i]) if len(run.text) == 1 else "".join(map(chr, run.text))


def _places(values: bytes) -> list[int]:
    places = [-1] * 256
    for place, byte in enumerate(values):
        places[byte] = place
    return places


class MultiByte(_Walked):
    """A multi-byte charset as one server has it.

    Decoding tries Python's nearest codec. Its text is the server's unless it raises, or the
    bytes hold a code whose server text is another (`odd_codes`: looked for anywhere, so a hit
    across two characters only costs a walk), or the text holds what the codec makes of bytes
    the server does not store (`odd_chars`); then the table is walked, code by code. Both are
    found once, when the codec is first looked up, from every unit Python's codec reads (up to
    three bytes: Python reads four-byte units only in gb18030, in GB 18030's four-byte form,
    which MySQL's table covers whole and compares to code by code)."""

    def __init__(self, name: str, table: Charmap, nearest: str | None) -> None:
        self.name = name
        leads: list[list[_Block]] = [[] for _ in range(256)]
        for block, runs in table.blocks:
            looked_up = _Block(block, runs)
            for byte in block[0]:
                leads[byte].append(looked_up)
        self.leads = tuple(tuple(sorted(blocks, key=lambda b: b.width)) for blocks in leads)
        self.nearest = nearest
        codes, chars = _odd(self, nearest, table) if nearest is not None else (set(), set())
        self.odd_codes = re.compile(b"|".join(map(re.escape, sorted(codes)))) if codes else None
        self.odd_chars = re.compile("[" + "".join(map(re.escape, sorted(chars))) + "]") if chars else None
        # Python's codec, where its text is always the server's when it has one (it raises on the rest:
        # codes the server shows as "?", say): a rows decoder calls it inline, and decodes an event
        # where it raised again leniently, which then walks the table (connector/binlog/rowcodec.py).
        self.exact_or_raises = nearest if not codes and not chars else None

    def text(self, data: bytes) -> str:
        if self.nearest is None:
            return self.walk(data, "strict")
        try:
            text = data.decode(self.nearest)
        except UnicodeDecodeError:
            return self.walk(data, "strict")
        if (self.odd_codes is not None and self.odd_codes.search(data) is not None) or (
            self.odd_chars is not None and self.odd_chars.search(text) is not None
        ):
            return self.walk(data, "strict")
        return text

    def text_at(self, data: bytes, at: int) -> tuple[str, int] | None:
        """The text and width of the code at `at`; None if no code of the charset starts there."""
        for block in self.leads[data[at]]:
            if at + block.width <= len(data):
                text = block.text(data, at)
                if text is not None:
                    return text, block.width
        return None

    def walk(self, data: bytes, errors: str) -> str:
        out, at, end = [], 0, len(data)
        while at < end:
            found = self.text_at(data, at)
            if found is None:
                out.append(_fail(self.name, data, at, at + 1, errors, "no character of the charset starts here"))
                at += 1
            else:
                out.append(found[0])
                at += found[1]
        return "".join(out)


def _odd(codec: MultiByte, nearest: str, table: Charmap) -> tuple[set[bytes], set[str]]:
    """The server's codes the nearest codec reads otherwise, and the text it makes of units the
    server does not store."""
    codes: set[bytes] = set()
    chars: set[str] = set()
    for unit, text in _units(nearest, 3):
        found = codec.text_at(unit, 0)
        if found is None or found[1] != len(unit):
            chars.update(text)
        elif found[0] != text:
            codes.add(unit)
    for block, runs in table.blocks:
        if len(block) > 3:
            codes.update(_differing(nearest, block, runs))
    return codes, chars


def _units(nearest: str, widths: int) -> Iterator[tuple[bytes, str]]:
    """Every byte string of up to `widths` bytes the codec reads as one unit, and its text."""
    make = codecs.getincrementaldecoder(nearest)
    prefixes = [b""]
    for width in range(1, widths + 1):
        longer = []
        for prefix in prefixes:
            if width == widths and not _decodes_any(nearest, prefix):
                continue  # the last width: only a prefix some byte completes is looked into
            for byte in range(256):
                unit, decoder = prefix + bytes((byte,)), make()
                try:
                    text = decoder.decode(unit, False)
                except UnicodeDecodeError:
                    continue
                if not text:
                    longer.append(unit)  # a unit's beginning
                elif not decoder.getstate()[0]:
                    yield unit, text
        prefixes = longer


def _decodes_any(nearest: str, prefix: bytes) -> bool:
    """Does the codec read anything of the prefix followed by each byte, all 256 one after
    another (what it cannot read skipped up to the next of them)?"""
    return str(block_bytes((*(bytes((b,)) for b in prefix), _EVERY_BYTE)), nearest, _skip_to(len(prefix) + 1)) != ""


_EVERY_BYTE = bytes(range(256))


def _code_points(first: int, count: int) -> str:
    """The text of `count` code points from `first` on (made in C: a million of them in gb18030)."""
    return array.array("I", range(first, first + count)).tobytes().decode("utf-32-le", "surrogatepass")


@functools.cache
def _skip_to(width: int) -> str:
    """An error handler that drops what it is given up to the next multiple of `width` bytes:
    codes of one width one after another are then read each from its own start."""
    name = f"sluice_skip{width}"
    codecs.register_error(name, lambda exc: ("", (exc.start // width + 1) * width))  # type: ignore[attr-defined]
    return name


def _differing(nearest: str, block: Block, runs: tuple[Run, ...]) -> set[bytes]:
    """The block's codes the codec reads as a text other than the server's; a run whose text
    the codec gives whole, code after code, is not looked into code by code."""
    odd: set[bytes] = set()
    width, every = len(block), block_bytes(block)
    skip, at = _skip_to(width), 0
    for run in runs:
        codes = every[at * width : (at + run.count) * width]
        at += run.count
        if run.text is None or len(run.text) == 1:
            expected = "" if run.text is None else _code_points(run.text[0], run.count)
            if str(codes, nearest, skip) == expected:
                continue
        for k in range(run.count):
            code = codes[k * width : (k + 1) * width]
            try:
                text = str(code, nearest)
            except UnicodeDecodeError:
                continue
            if text != ("?" if run.text is None else text_of(run, k)):
                odd.add(code)
    return odd


