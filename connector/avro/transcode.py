"""Programs for the compiled transcoder: a rows event's images straight to Avro bytes.

connector/_transcode.c reads the binlog's row images and writes each row's Avro record
with no Python object per value. What it writes for a column is decided here, once per
schema version and table shape, as a program of one small struct per column; a table with
any column it does not cover gets no program and takes the Python path (`_RowsPlan`'s
generated functions), which stays the reference: tests/test_transcode.py holds the two
to the same bytes. Covered: the integer types, FLOAT, DOUBLE, DECIMAL up to 38 digits,
DATE, DATETIME(0-6), TIMESTAMP(0-6), TIME(0-6), YEAR, BIT, ENUM and SET (by their labels),
binary strings and BLOBs, and text in utf8mb3, utf8mb4 or a single-byte charset (latin1,
cp1250, koi8r, ...: each byte's character from a table the charset's own decoder makes). Not
covered (Python): JSON, geometry, VECTOR, multi-byte charsets other than UTF-8 (gbk, sjis,
ucs2, ...), pre-5.6 temporal types, wider DECIMALs, and MariaDB's UUID/INET types.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from connector.avro.values import STRING_TYPES, bit_width
from connector.binlog.charsets import BINARY_COLLATION, codec_of, max_char_len
from connector.binlog.constants import ColumnType as T
from connector.binlog.constants import RowsKind
from connector.binlog.rowcodec import PREFIXED_STRING_TYPES, bit_bytes, length_prefix
from connector.binlog.tablemap import ColumnMeta
from connector.binlog.values import decimal_size, frac_size
from connector.native import transcoder
from connector.native_spec import KINDS as SPEC_KINDS
from connector.native_spec import OPS, record
from connector.schema.model import BINARY_TYPES, Column

# The column operations and record layouts the C code reads, from their one spec.
OP_INT, OP_UINT, OP_UINT64, OP_FLOAT = OPS["OP_INT"], OPS["OP_UINT"], OPS["OP_UINT64"], OPS["OP_FLOAT"]
OP_DOUBLE, OP_DECIMAL, OP_DATE, OP_DATETIME2 = OPS["OP_DOUBLE"], OPS["OP_DECIMAL"], OPS["OP_DATE"], OPS["OP_DATETIME2"]
OP_TIMESTAMP2, OP_YEAR, OP_UTF8, OP_BYTES = OPS["OP_TIMESTAMP2"], OPS["OP_YEAR"], OPS["OP_UTF8"], OPS["OP_BYTES"]
OP_TIME2, OP_BIT, OP_BIT64, OP_ENUM = OPS["OP_TIME2"], OPS["OP_BIT"], OPS["OP_BIT64"], OPS["OP_ENUM"]
OP_SET, OP_TEXT8 = OPS["OP_SET"], OPS["OP_TEXT8"]
COLUMN = record("column_t")  # op, width, a, b, null branch, value branch, (unused)
KEY = record("key_t_")  # column, null branch, value branch
KINDS = {RowsKind.WRITE: SPEC_KINDS["KIND_WRITE"], RowsKind.UPDATE: SPEC_KINDS["KIND_UPDATE"],
         RowsKind.DELETE: SPEC_KINDS["KIND_DELETE"]}  # fmt: skip

# binlog type -> (the tracked type it must be, width)
_INTEGERS: dict[int, tuple[str, int]] = {
    T.MYSQL_TYPE_TINY: ("tinyint", 1), T.MYSQL_TYPE_SHORT: ("smallint", 2), T.MYSQL_TYPE_INT24: ("mediumint", 3),
    T.MYSQL_TYPE_LONG: ("int", 4), T.MYSQL_TYPE_LONGLONG: ("bigint", 8),
}  # fmt: skip
_FLOATS: dict[int, tuple[str, int, int]] = {
    T.MYSQL_TYPE_FLOAT: ("float", OP_FLOAT, 4), T.MYSQL_TYPE_DOUBLE: ("double", OP_DOUBLE, 8),
}  # fmt: skip
_TEMPORALS: dict[int, tuple[str, int, int]] = {
    T.MYSQL_TYPE_DATE: ("date", OP_DATE, 3), T.MYSQL_TYPE_NEWDATE: ("date", OP_DATE, 3),
    T.MYSQL_TYPE_DATETIME2: ("datetime", OP_DATETIME2, 5), T.MYSQL_TYPE_TIMESTAMP2: ("timestamp", OP_TIMESTAMP2, 4),
}  # fmt: skip
_TEMPORAL_AVRO = {OP_DATE: ("int", "date"), OP_DATETIME2: ("long", "timestamp-micros"),
                  OP_TIMESTAMP2: ("long", "timestamp-micros")}  # fmt: skip
_MAX_DIGITS = 38  # an __int128 holds every unscaled value up to 10^38 - 1


@dataclass(frozen=True, slots=True)
class Program:
    """What the compiled transcoder needs of one schema version and table shape."""

    columns: bytes  # COLUMN per column
    keys: bytes  # KEY per key field, in the key record's order
    strings: bytes = b""  # ENUM and SET labels, single-byte charsets' characters (native_spec.STRINGS_HEADER)


class Strings:
    """A program's strings as they are gathered: each column's run of them is (its first, how many)."""

    def __init__(self) -> None:
        self.texts: list[bytes] = []

    def add(self, texts: list[bytes]) -> int:
        first = len(self.texts)
        self.texts += texts
        return first

    def packed(self) -> bytes:
        if not self.texts:
            return b""
        offsets, at = [], 0
        for text in self.texts:
            offsets.append(at)
            at += len(text)
        offsets.append(at)
        return struct.pack(f"<i{len(offsets)}i", len(self.texts), *offsets) + b"".join(self.texts)


def program(
    numbers: tuple[ColumnMeta, ...], columns: tuple[Column, ...], row: dict[str, Any],
    key: dict[str, Any] | None, key_columns: list[int],
) -> Program | None:  # fmt: skip
    """The program for rows of `numbers` (the binlog's columns) written as `row` (the Avro
    record of one row) and `key` (of the `key_columns`); None if any column is not covered,
    or the compiled module was not built."""
    if transcoder is None or len(numbers) != len(columns) or len(row["fields"]) != len(columns):
        return None
    out, strings = [], Strings()
    for meta, col, field in zip(numbers, columns, row["fields"]):
        null, value, avro = _branches(field["type"])
        op = _op(meta, col, avro, strings)
        if op is None or (op[0] in _TEMPORAL_AVRO and null < 0):
            return None  # zero dates are null: a temporal field must admit it
        out.append(COLUMN.pack(*op, null, value, 0))
    keys = []
    for field, index in zip(key["fields"] if key else (), key_columns):
        null, value, avro = _branches(field["type"])
        if avro != _branches(row["fields"][index]["type"])[2]:
            return None
        keys.append(KEY.pack(index, null, value))
    return Program(b"".join(out), b"".join(keys), strings.packed())


def _branches(kind: Any) -> tuple[int, int, Any]:
    """(null branch, value branch, the non-null type) of a field type; -1: not a union."""
    if isinstance(kind, list) and len(kind) == 2 and "null" in kind:
        null = kind.index("null")
        return null, 1 - null, kind[1 - null]
    return -1, -1, kind


def _op(meta: ColumnMeta, col: Column, avro: Any, strings: Strings) -> tuple[int, int, int, int] | None:
    """(op, width, a, b) of one column, if the compiled transcoder writes what Python would."""
    kind = meta.real_type
    if meta.element_type is not None or meta.compressed:  # MariaDB's COMPRESSED: inflated in Python
        return None
    if kind in _INTEGERS:
        return _integer(meta, col, avro)
    if kind == T.MYSQL_TYPE_YEAR:
        return (OP_YEAR, 1, 0, 0) if col.data_type == "year" and avro == "int" else None
    if kind in _FLOATS:
        name, op, width = _FLOATS[kind]
        return (op, width, 0, 0) if col.data_type == name and avro == name else None
    if kind == T.MYSQL_TYPE_NEWDECIMAL:
        return _decimal(meta, col, avro)
    if kind in _TEMPORALS:
        return _temporal(meta, col, avro)
    if kind == T.MYSQL_TYPE_TIME2:
        return _time(meta, col, avro)
    if kind == T.MYSQL_TYPE_BIT:
        return _bit(meta, col, avro)
    if kind in (T.MYSQL_TYPE_ENUM, T.MYSQL_TYPE_SET):
        return _labels(meta, col, avro, strings)
    if kind in PREFIXED_STRING_TYPES and meta.collation is not None:
        return _text(meta, meta.collation, col, avro, strings)
    return None


def _time(meta: ColumnMeta, col: Column, avro: Any) -> tuple[int, int, int, int] | None:
    """TIME(fsp): the signed microseconds avro/values._time reads from values.decode_time2's text."""
    fsp = meta.meta
    if col.data_type != "time" or not 0 <= fsp <= 6 or avro != {"type": "long", "logicalType": "time-micros"}:
        return None
    return OP_TIME2, 3 + frac_size(fsp), fsp, 0


def _bit(meta: ColumnMeta, col: Column, avro: Any) -> tuple[int, int, int, int] | None:
    """BIT(n): the big-endian number; a long, or for BIT(64) a decimal(20,0) (avro/values.converter)."""
    width = bit_bytes(meta.meta)
    if col.data_type != "bit" or not 1 <= width <= 8:
        return None
    if bit_width(col) == 64:
        return (OP_BIT64, 8, 0, 0) if width == 8 and _is_decimal(avro, 0) else None
    return (OP_BIT, width, 0, 0) if avro == "long" else None


def _labels(meta: ColumnMeta, col: Column, avro: Any, strings: Strings) -> tuple[int, int, int, int] | None:
    """ENUM and SET: the labels the decoder names values by (values.decode_enum, decode_set), as UTF-8."""
    enum = meta.real_type == T.MYSQL_TYPE_ENUM
    labels = meta.enum_values if enum else meta.set_values
    width = meta.meta & 0xFF
    if labels is None or avro != "string" or col.data_type != ("enum" if enum else "set"):
        return None
    if not (width in (1, 2) if enum else 1 <= width <= 8 and len(labels) <= 64):
        return None
    try:
        texts = [label.encode("utf-8") for label in labels]
    except UnicodeEncodeError:  # a label Python cannot write as Avro either: it says so
        return None
    return OP_ENUM if enum else OP_SET, width, strings.add(texts), len(texts)


def _integer(meta: ColumnMeta, col: Column, avro: Any) -> tuple[int, int, int, int] | None:
    name, width = _INTEGERS[meta.real_type]
    if col.data_type != name or col.unsigned != meta.unsigned:
        return None
    if width == 8 and meta.unsigned:  # BIGINT UNSIGNED: an Avro decimal(20, 0)
        return (OP_UINT64, 8, 0, 0) if _is_decimal(avro, 0) else None
    if avro not in ("int", "long"):
        return None
    return OP_UINT if meta.unsigned else OP_INT, width, 0, 0


def _decimal(meta: ColumnMeta, col: Column, avro: Any) -> tuple[int, int, int, int] | None:
    precision, scale = meta.meta >> 8, meta.meta & 0xFF
    if col.data_type != "decimal" or not 0 < precision <= _MAX_DIGITS or scale > precision:
        return None
    return (OP_DECIMAL, decimal_size(precision, scale), precision, scale) if _is_decimal(avro, scale) else None


def _is_decimal(avro: Any, scale: int) -> bool:
    return (
        isinstance(avro, dict) and avro.get("type") == "bytes" and avro.get("logicalType") == "decimal"
        and avro.get("scale", 0) == scale
    )  # fmt: skip


def _temporal(meta: ColumnMeta, col: Column, avro: Any) -> tuple[int, int, int, int] | None:
    name, op, width = _TEMPORALS[meta.real_type]
    fsp = meta.meta if op != OP_DATE else 0
    base, logical = _TEMPORAL_AVRO[op]
    if col.data_type != name or not 0 <= fsp <= 6 or not isinstance(avro, dict):
        return None
    if avro.get("type") != base or avro.get("logicalType") != logical:
        return None
    return op, width + frac_size(fsp), fsp, 0


def _text(
    meta: ColumnMeta, collation: int, col: Column, avro: Any, strings: Strings
) -> tuple[int, int, int, int] | None:
    prefix = length_prefix(meta)
    if not 1 <= prefix <= 4:
        return None
    if collation == BINARY_COLLATION:
        if col.data_type not in BINARY_TYPES or avro != "bytes":
            return None
        pad = meta.meta if meta.real_type == T.MYSQL_TYPE_STRING else 0  # BINARY(n) is logged unpadded
        return OP_BYTES, 0, prefix, pad
    text_types = STRING_TYPES - {"enum", "set", "json", "long"}
    codec = codec_of(collation)
    if codec is None or col.data_type not in text_types or avro != "string":
        return None
    if codec == "utf-8":
        return OP_UTF8, 0, prefix, 0
    table = single_byte_table(collation)
    return None if table is None else (OP_TEXT8, 0, prefix, strings.add(table))


def single_byte_table(collation: int) -> list[bytes] | None:
    """A single-byte charset's character of each byte as UTF-8, decoded by the codec the rows
    decoder uses (b"" where it raises); None for charsets of wider characters."""
    codec = codec_of(collation)
    if codec is None or max_char_len(collation) != 1:
        return None
    table = []
    for byte in range(256):
        try:
            char = bytes([byte]).decode(codec)
        except UnicodeDecodeError:
            char = ""
        table.append(char.encode("utf-8", "surrogatepass") if len(char) == 1 else b"")
    return table
