"""How the compiled code reads a table's row images: one operation per column, from the binlog alone.

`column_op` is the one description of a binlog column for the compiled module (connector/csrc/):
its operation (native_spec.OPS), its width or length prefix, its fraction digits or precision and
scale, and the strings it names values by (ENUM and SET labels, a single-byte charset's
characters) or the code table of a multi-byte one (the module learns each once, by number).
Three consumers are derived from it: the Avro transcoder's program
(connector/avro/transcode.program adds what the table's Avro schema says of each field), the
canal-JSON renderer of JSON lines (`json_program`, for `sluice decode` and `sluice tail`), and
the walk `count_rows` checks a rows event's images with before their decoding is deferred
(`walk_layout`, for the parser: connector/binlog/rows.py). A column it does not describe puts
its table on the Python path, which stays the reference for all three.
"""

from __future__ import annotations

import array
import functools
import itertools
import struct
from dataclasses import dataclass

from connector import native
from connector.binlog import charmaps
from connector.binlog.charmaps import FLAVOURS
from connector.binlog.charsets import BINARY_COLLATION, UTF8_CHARSETS, charset_of, flavour, single_byte_texts
from connector.binlog.coltypes import STRING_TYPES, Op, fixed
from connector.binlog.constants import ColumnType as T
from connector.binlog.constants import RowsKind
from connector.binlog.rowcodec import length_prefix
from connector.binlog.tablemap import ColumnMeta
from connector.native_spec import CODE_TABLES, COLUMN_FLAGS, NUMBERS, OPS, WALK_CHECKS, WIDE_FORMS, record
from connector.native_spec import KINDS as SPEC_KINDS

OP_INT, OP_UINT, OP_UINT64, OP_FLOAT = OPS["OP_INT"], OPS["OP_UINT"], OPS["OP_UINT64"], OPS["OP_FLOAT"]
OP_DOUBLE, OP_DECIMAL, OP_DATE, OP_DATETIME2 = OPS["OP_DOUBLE"], OPS["OP_DECIMAL"], OPS["OP_DATE"], OPS["OP_DATETIME2"]
OP_TIMESTAMP2, OP_YEAR, OP_UTF8, OP_BYTES = OPS["OP_TIMESTAMP2"], OPS["OP_YEAR"], OPS["OP_UTF8"], OPS["OP_BYTES"]
OP_TIME2, OP_BIT, OP_BIT64, OP_ENUM = OPS["OP_TIME2"], OPS["OP_BIT"], OPS["OP_BIT64"], OPS["OP_ENUM"]
OP_SET, OP_TEXT8, OP_JSON, OP_TEXTMB = OPS["OP_SET"], OPS["OP_TEXT8"], OPS["OP_JSON"], OPS["OP_TEXTMB"]
OP_WIDE, OP_GEOMETRY, OP_VECTOR = OPS["OP_WIDE"], OPS["OP_GEOMETRY"], OPS["OP_VECTOR"]
# Ops the flat text of a value is not compiled for (GEOMETRY's hex, VECTOR's "%.5e" list): the
# JSON renderer's tables and a hashed column's text take the Python path. canal-json's Kafka texts
# of both are compiled (connector/csrc/canaltext.c, canal_cell).
NO_TEXT_OPS = frozenset({OP_GEOMETRY, OP_VECTOR})
# The Unicode charsets of wider units, by the form OP_WIDE reads them in (charsets.py's codecs for them).
WIDE = {"utf16": WIDE_FORMS["WIDE_UTF16"], "utf16le": WIDE_FORMS["WIDE_UTF16LE"], "utf32": WIDE_FORMS["WIDE_UTF32"],
        "ucs2": WIDE_FORMS["WIDE_UCS2"]}  # fmt: skip
COL_ASCII = COLUMN_FLAGS["COL_ASCII"]
# A rows event's operation as the compiled code numbers it (the transcoder's and the renderer's `kind`).
KINDS = {RowsKind.WRITE: SPEC_KINDS["KIND_WRITE"], RowsKind.UPDATE: SPEC_KINDS["KIND_UPDATE"],
         RowsKind.DELETE: SPEC_KINDS["KIND_DELETE"]}  # fmt: skip
# A row change's `type` in flat and canal-json messages, by kind; and by the number KINDS gives it.
TYPE_NAMES = {RowsKind.WRITE: "INSERT", RowsKind.UPDATE: "UPDATE", RowsKind.DELETE: "DELETE"}
KIND_TYPES = tuple(TYPE_NAMES[kind] for kind in sorted(KINDS, key=KINDS.__getitem__))
COLUMN = record("column_t")  # op, width, a, b, null branch, value branch, flags
WALK = record("walk_t")  # fixed width, length prefix size, what is checked (WALK_CHECKS), code table
WALK_BYTES, WALK_UTF8, WALK_JSON = WALK_CHECKS["WALK_BYTES"], WALK_CHECKS["WALK_UTF8"], WALK_CHECKS["WALK_JSON"]
WALK_CODES, WALK_WIDE, WALK_FLOATS = WALK_CHECKS["WALK_CODES"], WALK_CHECKS["WALK_WIDE"], WALK_CHECKS["WALK_FLOATS"]



class Strings:
    """A program's strings as they are gathered: each column's run of them is (its first, how many)."""

    def __init__(self) -> None:
        self.texts: list[bytes] = []

    def add(self, texts: list[bytes]) -> int:
        first = len(self.texts)
        self.texts += texts
        return first

    def packed(self) -> bytes:
        """The layout native_spec.STRINGS_HEADER states: the count, the offsets, the bytes."""
        if not self.texts:
            return b""
        offsets = [0, *itertools.accumulate(len(text) for text in self.texts)]
        return struct.pack(f"<i{len(offsets)}i", len(self.texts), *offsets) + b"".join(self.texts)


@dataclass(frozen=True, slots=True)
class Program:
    """What the compiled code needs of one table shape (and, for Avro, one schema version)."""

    columns: bytes  # COLUMN per column
    keys: bytes  # KEY per key field, in the key record's order (Avro's; b"" for JSON)
    strings: bytes = b""  # ENUM and SET labels, single-byte charsets' characters


# Length-prefixed values whose op reads them as stored (no collation).
_AS_STORED: dict[int, int] = {
    T.MYSQL_TYPE_JSON: OP_JSON, T.MYSQL_TYPE_GEOMETRY: OP_GEOMETRY, T.MYSQL_TYPE_VECTOR: OP_VECTOR,
}


def column_op(meta: ColumnMeta, strings: Strings) -> Op | None:
    """How the compiled code reads one binlog column, from its metadata alone; None where it does not."""
    kind = meta.real_type
    if meta.element_type is not None or meta.compressed:  # typed arrays, MariaDB's COMPRESSED: Python's
        return None
    entry = fixed(meta)
    if entry is not None:  # its entry says
        return None if entry.op is None or entry.width is None else entry.op(meta, entry.width(meta.meta), strings)
    if kind in _AS_STORED:  # MySQL's binary JSON (MariaDB's JSON is a LONGTEXT), GEOMETRY, VECTOR
        prefix = length_prefix(meta)
        return (_AS_STORED[kind], 0, prefix, 0) if 1 <= prefix <= 4 else None
    if kind in STRING_TYPES and meta.collation is not None:
        return _text(meta, meta.collation, strings)
    return None


def _text(meta: ColumnMeta, collation: int, strings: Strings) -> Op | None:
    prefix = length_prefix(meta)
    if not 1 <= prefix <= 4:
        return None
    if collation == BINARY_COLLATION:
        pad = meta.meta if meta.real_type == T.MYSQL_TYPE_STRING else 0  # BINARY(n) is logged unpadded
        return OP_BYTES, 0, prefix, pad
    if charset_of(collation) in UTF8_CHARSETS:  # strict UTF-8, as the rows decoder's 'utf-8'
        return OP_UTF8, 0, prefix, 0
    form = WIDE.get(charset_of(collation) or "")
    if form is not None:  # UTF-16, UTF-32, UCS-2: each character's code point as UTF-8
        return OP_WIDE, 0, prefix, form
    table = single_byte_table(collation, meta.mariadb)
    if table is not None:
        return OP_TEXT8, 0, prefix, strings.add(table)
    number = code_table_number(charset_of(collation), meta.mariadb)
    return None if number is None else (OP_TEXTMB, 0, prefix, number)


_ASCII = [bytes([b]) for b in range(0x80)]


def packed_column(op: Op, strings: Strings, null_branch: int = -1, value_branch: int = -1, flags: int = 0) -> bytes:
    """One column of a program, with its flags (native_spec.COLUMN_FLAGS): `flags`, and a TEXT8
    column whose table keeps ASCII as it is says so."""
    ascii_kept = op[0] == OP_TEXT8 and strings.texts[op[3] : op[3] + 0x80] == _ASCII
    return COLUMN.pack(*op, null_branch, value_branch, flags | (COL_ASCII if ascii_kept else 0))


def single_byte_table(collation: int, mariadb: bool | None = None) -> list[bytes] | None:
    """A single-byte charset's text of each byte as UTF-8, from the server's own table (the one
    the rows decoder reads: connector/binlog/charsets.py; `mariadb` None: the table both servers
    share); b"" where the server stores no such byte (the compiled code declines it, and the
    Python path replaces it). None for charsets of wider characters."""
    texts = single_byte_texts(collation, mariadb)
    if texts is None:
        return None
    return [b"" if text is None else text.encode("utf-8") for text in texts]


def code_table_number(charset: str | None, mariadb: bool = False) -> int | None:
    """The number among native_spec.CODE_TABLES of a multi-byte charset's table as a column of
    that server reads it, the table handed to the compiled module the first time a column asks;
    None for the rest (their columns are Python's), and where the module is not built."""
    own = f"{charset}.{flavour(mariadb)}"
    return _learnt(own if own in CODE_TABLES else charset)


@functools.cache
def _learnt(name: str | None) -> int | None:
    if name not in CODE_TABLES or native.transcoder is None:
        return None
    table = code_table(name)
    if table is None:
        return None
    number = CODE_TABLES.index(name)
    native.transcoder.learn_code_table(number, *table)
    return number


def code_table(name: str) -> tuple[bytes, bytes, bytes] | None:
    """The code table of native_spec.CODE_TABLES's `name` as it lays them out (its nodes, its
    texts, its range), from the servers' own table: `charset.flavour`'s, or for a bare charset the
    one both servers have (None unless they have the same). None too where the module could not
    read it as the rows decoder does: a block too wide for nodes that is not a range (below)."""
    charset, _, server = name.partition(".")
    tables = {charmaps.load(charset, f) for f in ((server,) if server else FLAVOURS)}
    if len(tables) != 1 or None in tables:
        return None
    (charmap,) = tables
    assert charmap is not None
    nodes, texts = array.array("I", [0] * 256), bytearray()
    range_ = b""
    # Shorter codes first: where a code begins a longer one, the decoder's walk reads the shorter.
    for block, runs in sorted(charmap.blocks, key=lambda item: len(item[0])):
        if len(block) >= _RANGE_FROM:  # one range a table
            if range_:
                return None
            range_ = _range(block, runs)
            if not range_ or not _insert_range(nodes, block):
                return None
            continue
        codes = charmaps.block_codes(block)
        for run in runs:
            for k in range(run.count):
                text = charmaps.text_of(run, k)
                _insert(nodes, next(codes), ("?" if text is None else text).encode("utf-8"), texts)
    return nodes.tobytes(), bytes(texts), range_


_CHILD, _SHIFT, _LENGTH = NUMBERS["CODE_CHILD"], NUMBERS["CODE_TEXT_SHIFT"], NUMBERS["CODE_TEXT_LENGTH"]
_RANGE, _RANGE_WIDTHS, _NO_TEXT = NUMBERS["CODE_RANGE"], NUMBERS["CODE_RANGE_WIDTHS"], NUMBERS["CODE_RANGE_NO_TEXT"]
_RANGE_FROM = 4  # codes this wide are a range: as nodes, gb18030's would take about 160 MB


def _insert(nodes: array.array[int], code: bytes, text: bytes, texts: bytearray) -> None:
    """One code into a code table: the nodes its bytes but the last go through (made as needed),
    its text at the last; nothing where a shorter code or one read before it takes those bytes."""
    node = 0
    for byte in code[:-1]:
        found = _child(nodes, node, byte)
        if found is None:
            return  # a shorter code ends here
        node = found
    if nodes[node * 256 + code[-1]] == 0 and 0 < len(text) <= _LENGTH:
        nodes[node * 256 + code[-1]] = len(texts) << _SHIFT | len(text)
        texts += text


def _child(nodes: array.array[int], node: int, byte: int) -> int | None:
    """The node a code goes on in after `byte` in `node` (made as needed); None where a shorter
    code ends there."""
    entry = nodes[node * 256 + byte]
    if entry and not entry & _CHILD:
        return None
    if not entry:
        entry = _CHILD | len(nodes) // 256
        nodes[node * 256 + byte] = entry
        nodes.extend([0] * 256)
    return entry & ~_CHILD


def _range(block: charmaps.Block, runs: tuple[charmaps.Run, ...]) -> bytes:
    """A block as a code table's range (native_spec.CODE_TABLES); b"" if it cannot be one: a
    position whose bytes are not one span, a run of more than one code point a code."""
    spans = [(values[0], values[-1]) for values in block]
    if len(block) > _RANGE_WIDTHS or any(hi - lo + 1 != len(v) for (lo, hi), v in zip(spans, block, strict=True)):
        return b""
    words, place = [len(block)], 0
    for lo, hi in spans + [(0, 0)] * (_RANGE_WIDTHS - len(block)):
        words += [lo, hi]
    for run in runs:
        if run.text is not None and len(run.text) != 1:
            return b""
        words += [place, _NO_TEXT if run.text is None else run.text[0]]
        place += run.count
    return array.array("I", words).tobytes()


def _insert_range(nodes: array.array[int], block: charmaps.Block) -> bool:
    """The range's entry at each of its codes' first two bytes (made as needed), where no shorter
    code ends first; False where a longer code goes on through them: the walk reads that one
    first, the nodes could not say so."""
    for first in block[0]:
        node = _child(nodes, 0, first)
        if node is None:
            continue  # a one-byte code
        for second in block[1]:
            entry = nodes[node * 256 + second]
            if entry & _CHILD:
                return False
            if not entry:
                nodes[node * 256 + second] = _RANGE
    return True


def json_program(columns: tuple[ColumnMeta, ...]) -> Program | None:
    """The canal-JSON renderer's program for images of these columns; None if any is not covered.
    (canal-json's Kafka messages: connector/canal.canal_program.)"""
    ops, strings = [], Strings()
    for meta in columns:
        op = column_op(meta, strings)
        if op is None or op[0] in NO_TEXT_OPS:
            return None
        ops.append(packed_column(op, strings))
    return Program(b"".join(ops), b"", strings.packed()) if ops else None


# What the walk checks of each length-prefixed op's bytes (native_spec.WALK_CHECKS); those of
# _WALK_TABLE's ops by the op's code table or wide form (its `b`).
_WALK_CHECK = {OP_BYTES: WALK_BYTES, OP_GEOMETRY: WALK_BYTES, OP_UTF8: WALK_UTF8, OP_JSON: WALK_JSON,
               OP_VECTOR: WALK_FLOATS, OP_TEXTMB: WALK_CODES, OP_WIDE: WALK_WIDE}  # fmt: skip
_WALK_TABLE = frozenset({OP_TEXTMB, OP_WIDE})


def walk_layout(columns: tuple[ColumnMeta, ...]) -> bytes | None:
    """How `count_rows` steps over each column of a row image (WALK per column), for images whose
    Python decoding is deferred until it cannot fail (length-prefixed bytes or strict UTF-8,
    TEXT8 where its server stores every byte: latin1, ...). None unless column_op describes every
    column: a fixed-width one whose entry is `deferrable` (coltypes.TYPES), OP_BYTES, OP_UTF8, OP_TEXT8
    of a charset whose every byte is a character, OP_TEXTMB (each value codes of its code table),
    OP_WIDE (each value characters of its form), OP_GEOMETRY (bytes as they are), OP_VECTOR
    (whole floats) or OP_JSON (checked by the compiled printer, which takes only documents the Python decoding
    reads)."""
    out, strings = [], Strings()
    for meta in columns:
        op = column_op(meta, strings)
        if op is None:
            return None
        code, width, prefix, b = op
        entry = fixed(meta)
        if entry is not None:
            if not entry.deferrable:
                return None
            out.append(WALK.pack(width, 0, 0, 0))
        elif code in _WALK_CHECK:
            out.append(WALK.pack(0, prefix, _WALK_CHECK[code], b if code in _WALK_TABLE else 0))
        elif code == OP_TEXT8 and meta.collation is not None and _every_byte(meta.collation, meta.mariadb):
            out.append(WALK.pack(0, prefix, WALK_BYTES, 0))
        else:
            return None
    return b"".join(out)


def _every_byte(collation: int, mariadb: bool) -> bool:
    """Is every byte a character of the collation's single-byte charset (its server stores any)?"""
    table = single_byte_table(collation, mariadb)
    return table is not None and all(table)
