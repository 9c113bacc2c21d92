"""Programs for the compiled transcoder: a rows event's images straight to Avro bytes.

connector/csrc/rowimage.c reads the binlog's row images and writes each row's Avro record with
no Python object per value. Each column's operation is connector/binlog/rowplan.column_op's (read off
the binlog's metadata); what is added here, once per schema version and table shape, is what the
table's Avro schema says of it: the union branches of its field, and whether the field's type is
the one the operation writes (the tracked column's type and the Avro type the schema gives it).
A table with any column not covered or not matching gets no program and takes the Python path
(`_RowsPlan`'s generated functions), which stays the reference: tests/test_transcode.py and
tests/test_lane_live.py hold the two to the same bytes. Covered: the integer types, FLOAT,
DOUBLE, DECIMAL (all 65 digits), DATE, DATETIME(0-6), TIMESTAMP(0-6), TIME(0-6), YEAR, BIT,
ENUM and SET (by their labels), binary strings and BLOBs, and text in utf8mb3, utf8mb4, a
single-byte charset (latin1, cp1250, koi8r, ascii, ...: each byte's character from the server's
table) or big5, cp932, euckr, gb2312, gbk, gb18030, sjis, ujis or eucjpms (each code's text from the
server's table, a code table the module learns once: native_spec.CODE_TABLES; where MariaDB's
and MySQL's tables differ, the column's server's, ColumnMeta.mariadb) or ucs2, utf16, utf16le or
utf32 (each character's code point: native_spec.WIDE_FORMS), and MySQL's
binary JSON (as MySQL prints it: connector/csrc/jsonb.c; a document with an opaque value, a
DECIMAL or a date made by SQL, is declined and its event goes to Python). Text with bytes its
charset's server does not store is declined too (the Python path replaces them and says so). Not
covered (Python): pre-5.6 temporal types. MariaDB's UUID, INET4 and INET6 are their stored bytes;
GEOMETRY (its bytes as stored) and VECTOR (its floats as the Python path writes them, a NaN
declined) are covered for Avro, not for canal's text (the JSON renderer, a hashed column's digest).
"""

from __future__ import annotations

from typing import Any

from connector.avro.binary import varint
from connector.avro.values import STRING_TYPES, bit_width
from connector.binlog.coltypes import Op, fixed
from connector.binlog.rowplan import (
    NO_TEXT_OPS,
    OP_BIT,
    OP_BIT64,
    OP_BYTES,
    OP_DATE,
    OP_DATETIME2,
    OP_DECIMAL,
    OP_DOUBLE,
    OP_ENUM,
    OP_FLOAT,
    OP_GEOMETRY,
    OP_INT,
    OP_JSON,
    OP_SET,
    OP_TEXT8,
    OP_TEXTMB,
    OP_TIME2,
    OP_TIMESTAMP2,
    OP_UINT,
    OP_UINT64,
    OP_UTF8,
    OP_VECTOR,
    OP_WIDE,
    OP_YEAR,
    Program,
    Strings,
    column_op,
    packed_column,
)
from connector.binlog.tablemap import ColumnMeta
from connector.columns import DROP, HASH, KEEP, MASK
from connector.native import transcoder
from connector.native_spec import COL_STRING_SHIFT, COLUMN_FLAGS, record
from connector.schema.model import BINARY_TYPES, GEOMETRY_TYPES, STORED_BINARY_TYPES, Column

KEY = record("key_t_")  # column, null branch, value branch

# op -> the Avro type and logical type the schema writes it as
_TEMPORAL_AVRO: dict[int, tuple[str, str]] = {
    OP_DATE: ("int", "date"), OP_DATETIME2: ("long", "timestamp-micros"),
    OP_TIMESTAMP2: ("long", "timestamp-micros"), OP_TIME2: ("long", "time-micros"),
}  # fmt: skip
_ZERO_NULL = frozenset({OP_DATE, OP_DATETIME2, OP_TIMESTAMP2})  # zero dates are null: the field must admit it
_TEXT_TYPES = STRING_TYPES - {"enum", "set", "json", "long"}


def program(
    numbers: tuple[ColumnMeta, ...], columns: tuple[Column, ...], row: dict[str, Any],
    key: dict[str, Any] | None, key_columns: list[int],
) -> Program | None:  # fmt: skip
    """The program for rows of `numbers` (the binlog's columns) written as `row` (the Avro
    record of one row) and `key` (of the `key_columns`); None if any column is not covered
    (`uncovered` says which), or the compiled module was not built."""
    return shaped_program(numbers, columns, (KEEP,) * len(columns), "", "", row, key, key_columns)


def shaped_program(
    numbers: tuple[ColumnMeta, ...], columns: tuple[Column, ...], treatment: tuple[int, ...], mask: str,
    salt: str, row: dict[str, Any], key: dict[str, Any] | None, key_columns: list[int],
) -> Program | None:  # fmt: skip
    """`program` for a table a [[kafka.columns]] rule shapes: `numbers` and `columns` the binlog's
    and the table's, `treatment` what the rule does to each (KEEP, DROP, MASK or HASH), `mask` a
    masked value's text, `salt` what a hashed value's text follows into SHA-256; `row` the shaped
    table's Avro record (the kept, masked and hashed columns, in order, a masked or hashed one a
    string) and `key_columns` its key's fields among them (a masked or hashed one keyed by its mask
    or digest, as the Python path keys it). None where any column is not covered."""
    kept = [i for i, treat in enumerate(treatment) if treat != DROP]
    if transcoder is None or not len(numbers) == len(columns) == len(treatment) or len(row["fields"]) != len(kept):
        return None
    out, strings = [], Strings()
    masked, salted = mask.encode(), salt.encode("utf-8", "surrogatepass")
    written = {  # the flags of each treatment, with the string it writes (an Avro string) or hashes
        DROP: _DROP,
        MASK: _MASK | strings.add([varint(len(masked)) + masked]) << COL_STRING_SHIFT if MASK in treatment else 0,
        HASH: _HASH | strings.add([salted]) << COL_STRING_SHIFT if HASH in treatment else 0,
    }
    fields = iter(row["fields"])
    for meta, col, treat in zip(numbers, columns, treatment):
        if treat == KEEP:
            packed = _column(meta, col, next(fields), strings)
        else:
            packed = _shaped_column(meta, None if treat == DROP else next(fields), written[treat], strings)
        if packed is None:
            return None
        out.append(packed)
    keys = []
    for field, index in zip(key["fields"] if key else (), key_columns):
        null, value, avro = _branches(field["type"])
        if avro != _branches(row["fields"][index]["type"])[2]:
            return None
        keys.append(KEY.pack(kept[index], null, value))
    return Program(b"".join(out), b"".join(keys), strings.packed())


def _shaped_column(meta: ColumnMeta, field: dict[str, Any] | None, flags: int, strings: Strings) -> bytes | None:
    """A column the rule drops (`field` None), masks or hashes (`field` its string field): read by
    its op, written as `flags` (COLUMN_FLAGS, with their string) say."""
    op = column_op(meta, strings)
    if op is None or (flags & _HASH and op[0] in NO_TEXT_OPS):  # the text a digest is of: Python's
        return None
    null = value = -1
    if field is not None:
        null, value, avro = _branches(field["type"])
        if avro != "string":
            return None
    return packed_column(op, strings, null, value, flags)


_DROP, _MASK, _HASH = COLUMN_FLAGS["COL_DROP"], COLUMN_FLAGS["COL_MASK"], COLUMN_FLAGS["COL_HASH"]


def _column(meta: ColumnMeta, col: Column, field: dict[str, Any], strings: Strings) -> bytes | None:
    """One column of a program; None where the compiled code does not write it as Python does."""
    null, value, avro = _branches(field["type"])
    op = column_op(meta, strings)
    if op is None or not _writes(op, meta, col, avro) or (op[0] in _ZERO_NULL and null < 0):
        return None
    return packed_column(op, strings, null, value)


def uncovered(numbers: tuple[ColumnMeta, ...], columns: tuple[Column, ...], row: dict[str, Any]) -> str:
    """Why `program` gives no program for these columns, in a few words."""
    if transcoder is None:
        return "the compiled module is not built"
    if len(numbers) != len(columns) or len(row["fields"]) != len(columns):
        return "the binlog's columns are not the tracked table's"
    for meta, col, field in zip(numbers, columns, row["fields"]):
        if _column(meta, col, field, Strings()) is None:
            return f"column `{col.name}` ({col.data_type}) is not compiled"
    return "its key's Avro types are not its row's"


def shaped_uncovered(numbers: tuple[ColumnMeta, ...], columns: tuple[Column, ...], treatment: tuple[int, ...]) -> str:
    """Why `shaped_program` gives no program for a rule's table, in a few words."""
    if transcoder is None:
        return "the compiled module is not built"
    if not len(numbers) == len(columns) == len(treatment):
        return "the binlog's columns are not the tracked table's"
    flags = {DROP: _DROP, MASK: _MASK, HASH: _HASH}
    for meta, col, treat in zip(numbers, columns, treatment):
        if column_op(meta, Strings()) is None:
            return f"column `{col.name}` ({col.data_type}) is not compiled"
        if treat in flags and _shaped_column(meta, None, flags[treat], Strings()) is None:
            return f"column `{col.name}` ({col.data_type}) is hashed, and the text its digest is of is not compiled"
    return "a kept column's or its key's Avro type is not the one the compiled code writes"


def _branches(kind: Any) -> tuple[int, int, Any]:
    """(null branch, value branch, the non-null type) of a field type; -1: not a union."""
    if isinstance(kind, list) and len(kind) == 2 and "null" in kind:
        null = kind.index("null")
        return null, 1 - null, kind[1 - null]
    return -1, -1, kind


# The ops that write a value as stored, by the column types and the Avro type they write it for:
# JSON's text, GEOMETRY's bytes (SRID and WKB), VECTOR's floats.
_STORED_AVRO: dict[int, tuple[frozenset[str], Any]] = {
    OP_JSON: (frozenset({"json"}), "string"),
    OP_GEOMETRY: (GEOMETRY_TYPES, "bytes"),
    OP_VECTOR: (frozenset({"vector"}), {"type": "array", "items": "float"}),
}


def _writes(op: Op, meta: ColumnMeta, col: Column, avro: Any) -> bool:
    """The operation writes what the Python path writes for this tracked column and Avro type."""
    code, kind = op[0], col.data_type
    entry = fixed(meta)
    if entry is not None and kind != entry.sql:  # a fixed-width type is tracked as its own word
        return False
    if code in (OP_INT, OP_UINT):
        return col.unsigned == meta.unsigned and avro in ("int", "long")
    if code == OP_UINT64:  # BIGINT UNSIGNED: an Avro decimal(20, 0)
        return col.unsigned and _is_decimal(avro, 0)
    if code == OP_YEAR:
        return bool(avro == "int")
    if code in (OP_FLOAT, OP_DOUBLE):
        return bool(avro == kind)
    if code == OP_DECIMAL:
        return _is_decimal(avro, op[3])
    if code in _TEMPORAL_AVRO:
        base, logical = _TEMPORAL_AVRO[code]
        return isinstance(avro, dict) and (avro.get("type"), avro.get("logicalType")) == (base, logical)
    if code in (OP_BIT, OP_BIT64):  # BIT(64): a decimal(20, 0) (avro/values.converter); the others a long
        if (bit_width(col) == 64) != (code == OP_BIT64):
            return False
        return _is_decimal(avro, 0) if code == OP_BIT64 else avro == "long"
    if code in (OP_ENUM, OP_SET):
        return bool(avro == "string")
    if code == OP_BYTES:  # MariaDB's UUID, INET4 and INET6 too: their stored bytes (a BINARY(n) in the binlog)
        return (kind in BINARY_TYPES or kind in STORED_BINARY_TYPES) and avro == "bytes"
    if code in _STORED_AVRO:
        kinds, wanted = _STORED_AVRO[code]
        return kind in kinds and avro == wanted
    return code in (OP_UTF8, OP_TEXT8, OP_TEXTMB, OP_WIDE) and kind in _TEXT_TYPES and avro == "string"


def _is_decimal(avro: Any, scale: int) -> bool:
    return (
        isinstance(avro, dict) and avro.get("type") == "bytes" and avro.get("logicalType") == "decimal"
        and avro.get("scale", 0) == scale
    )  # fmt: skip
