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
    packed_column,
)
from connector.binlog.tablemap import ColumnMeta
from connector.columns import DROP, HASH, KEEP, MASK, compiled_op, rule_flags
from connector.native import transcoder
from connector.native_spec import record
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
) -> Program | str:  # fmt: skip
    """The program for rows of `numbers` (the binlog's columns) written as `row` (the Avro
    record of one row) and `key` (of the `key_columns`); else why there is none, in a few words
    (a column not covered, or the compiled module not built)."""
    return shaped_program(numbers, columns, (KEEP,) * len(columns), "", "", row, key, key_columns)


def shaped_program(
    numbers: tuple[ColumnMeta, ...], columns: tuple[Column, ...], treatment: tuple[int, ...], mask: str,
    salt: str, row: dict[str, Any], key: dict[str, Any] | None, key_columns: list[int],
) -> Program | str:  # fmt: skip
    """`program` for a table a [[kafka.columns]] rule shapes: `numbers` and `columns` the binlog's
    and the table's, `treatment` what the rule does to each (KEEP, DROP, MASK or HASH), `mask` a
    masked value's text, `salt` what a hashed value's text follows into SHA-256; `row` the shaped
    table's Avro record (the kept, masked and hashed columns, in order, a masked or hashed one a
    string) and `key_columns` its key's fields among them (a masked or hashed one keyed by its mask
    or digest, as the Python path keys it). Else why there is none."""
    kept = [i for i, treat in enumerate(treatment) if treat != DROP]
    if transcoder is None:
        return "the compiled module is not built"
    if not len(numbers) == len(columns) == len(treatment) or len(row["fields"]) != len(kept):
        return "the binlog's columns are not the tracked table's"
    out, strings, masked = [], Strings(), mask.encode()
    written = rule_flags(treatment, strings, varint(len(masked)) + masked, salt)  # a mask: an Avro string
    fields = iter(row["fields"])
    for meta, col, treat in zip(numbers, columns, treatment):
        op = compiled_op(meta, col, treat, strings)
        if isinstance(op, str):
            return op
        null, value, avro = _branches(next(fields)["type"]) if treat != DROP else (-1, -1, None)
        if treat == KEEP and (not _writes(op, meta, col, avro) or (op[0] in _ZERO_NULL and null < 0)):
            return f"column `{col.name}` ({col.data_type}) is not compiled"
        if treat in (MASK, HASH) and avro != "string":
            return f"column `{col.name}` ({col.data_type}) is not a string in its Avro record"
        out.append(packed_column(op, strings, null, value, written[treat]))
    keys = []
    for field, index in zip(key["fields"] if key else (), key_columns):
        null, value, avro = _branches(field["type"])
        if avro != _branches(row["fields"][index]["type"])[2]:
            return "its key's Avro types are not its row's"
        keys.append(KEY.pack(kept[index], null, value))
    return Program(b"".join(out), b"".join(keys), strings.packed())


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
