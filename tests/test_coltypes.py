"""The column-type registry (connector/binlog/coltypes.py) against what the servers document: the
storage each fixed-width type takes (the MySQL manual's "Data Type Storage Requirements",
my_time.h's fraction bytes, decimal.h's dig2bytes), the type each declared type is logged as."""

from __future__ import annotations

import itertools

import pytest

from connector.binlog.coltypes import TYPES, mysql_type
from connector.binlog.constants import TYPED_ARRAY_CODES, RowsKind
from connector.binlog.constants import ColumnType as T
from connector.binlog.rowcodec import build_rows_decoder
from connector.binlog.rowplan import Strings, column_op, walk_layout
from connector.binlog.tablemap import COMPRESSED_TYPES, ColumnMeta, TableMapEvent
from connector.native import transcoder
from connector.schema.binlogmatch import BINLOG_TYPES
from connector.schema.model import GEOMETRY_TYPES

FRACTION = [0, 1, 1, 2, 2, 3, 3]  # bytes of a fraction of 0 to 6 digits
DIGITS = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]  # bytes of a leftover group of 0 to 9 decimal digits


def _decimal(precision: int, scale: int) -> int:
    whole = precision - scale
    return whole // 9 * 4 + DIGITS[whole % 9] + scale // 9 * 4 + DIGITS[scale % 9]


# type -> (the metadata a server logs for it, the bytes a value of that metadata takes)
STORAGE: dict[int, list[tuple[int, int]]] = {
    T.MYSQL_TYPE_TINY: [(0, 1)], T.MYSQL_TYPE_SHORT: [(0, 2)], T.MYSQL_TYPE_INT24: [(0, 3)],
    T.MYSQL_TYPE_LONG: [(0, 4)], T.MYSQL_TYPE_LONGLONG: [(0, 8)], T.MYSQL_TYPE_FLOAT: [(4, 4)],
    T.MYSQL_TYPE_DOUBLE: [(8, 8)], T.MYSQL_TYPE_YEAR: [(0, 1)], T.MYSQL_TYPE_DATE: [(0, 3)],
    T.MYSQL_TYPE_NEWDATE: [(0, 3)], T.MYSQL_TYPE_TIME: [(0, 3)], T.MYSQL_TYPE_DATETIME: [(0, 8)],
    T.MYSQL_TYPE_TIMESTAMP: [(0, 4)], T.MYSQL_TYPE_NULL: [(0, 0)],
    T.MYSQL_TYPE_TIME2: [(fsp, 3 + FRACTION[fsp]) for fsp in range(7)],
    T.MYSQL_TYPE_DATETIME2: [(fsp, 5 + FRACTION[fsp]) for fsp in range(7)],
    T.MYSQL_TYPE_TIMESTAMP2: [(fsp, 4 + FRACTION[fsp]) for fsp in range(7)],
    T.MYSQL_TYPE_NEWDECIMAL: [(p << 8 | s, _decimal(p, s)) for p, s in itertools.product((1, 9, 10, 18, 19, 38, 65),
                                                                                          (0, 1, 9, 10, 30)) if s <= p],
    T.MYSQL_TYPE_BIT: [(bits % 8 << 8 | bits // 8, (bits + 7) // 8) for bits in range(1, 65)],  # BIT(M)
    T.MYSQL_TYPE_ENUM: [(n, n) for n in (1, 2)],
    T.MYSQL_TYPE_SET: [(n, n) for n in (1, 2, 3, 4, 8)],
}  # fmt: skip
# Codes that are never a column's real type: read as another type (MariaDB's COMPRESSED, typed
# arrays' element), or no server logs them.
NOT_REAL = {*COMPRESSED_TYPES, *TYPED_ARRAY_CODES, T.MYSQL_TYPE_INVALID}


def test_every_type_a_table_map_may_log_has_an_entry_and_the_fixed_widths_are_the_documented() -> None:
    assert set(TYPES) == set(T) - NOT_REAL
    fixed = {code for code, kind in TYPES.items() if kind.width is not None}
    assert fixed == set(STORAGE)
    for code, cases in STORAGE.items():
        width = TYPES[code].width
        assert width is not None and [width(meta) for meta, _ in cases] == [n for _, n in cases], T(code).name


def _column(code: int, meta: int, unsigned: bool) -> ColumnMeta:
    labels = tuple(f"l{i}" for i in range(8 * (meta & 0xFF) if code == T.MYSQL_TYPE_SET else 3))
    return ColumnMeta(0, code, code, meta, True, unsigned=unsigned, enum_values=labels, set_values=labels)


@pytest.mark.parametrize("code", sorted(STORAGE))
def test_the_compiled_op_and_the_python_decoder_step_over_the_documented_width(code: int) -> None:
    """Two values back to back decode as two rows; the compiled op, where there is one, is as wide,
    and so is the walk that defers their decoding (none for ENUM: its index is checked at once)."""
    for (meta, width), unsigned in itertools.product(STORAGE[code], (False, True)):
        col = _column(code, meta, unsigned)
        op = column_op(col, Strings())
        assert op is None or op[1] == width, (T(code).name, meta, op)
        value = (b"\x80" if code == T.MYSQL_TYPE_NEWDECIMAL else b"\x00").ljust(width, b"\x00")[:width]  # a zero
        decode = build_rows_decoder(TableMapEvent(1, 0, "d", "t", (col,)), RowsKind.WRITE, (0,), ())
        body = (b"\x00" + value) * 2  # no NULLs, then the value; twice
        rows = decode(body, 0, len(body))
        assert [len(after or ()) for _, after in rows] == [1, 1], (T(code).name, meta)
        layout = walk_layout((col,))
        assert (layout is not None) == (op is not None and code != T.MYSQL_TYPE_ENUM), (T(code).name, meta)
        if layout is not None and transcoder is not None:
            assert transcoder.count_rows(body, layout, 1) == 2, (T(code).name, meta)


# Declared type -> what a server logs a column of it as (MariaDB's JSON is a LONGTEXT, its VECTOR
# a VARBINARY; MySQL writes every BLOB as MYSQL_TYPE_BLOB, older servers the sized codes).
_BLOBS = {T.MYSQL_TYPE_BLOB, T.MYSQL_TYPE_TINY_BLOB, T.MYSQL_TYPE_MEDIUM_BLOB, T.MYSQL_TYPE_LONG_BLOB}
LOGGED_AS = {
    "tinyint": {T.MYSQL_TYPE_TINY}, "smallint": {T.MYSQL_TYPE_SHORT}, "mediumint": {T.MYSQL_TYPE_INT24},
    "int": {T.MYSQL_TYPE_LONG}, "bigint": {T.MYSQL_TYPE_LONGLONG}, "float": {T.MYSQL_TYPE_FLOAT},
    "double": {T.MYSQL_TYPE_DOUBLE}, "decimal": {T.MYSQL_TYPE_NEWDECIMAL, T.MYSQL_TYPE_DECIMAL},
    "date": {T.MYSQL_TYPE_DATE, T.MYSQL_TYPE_NEWDATE}, "time": {T.MYSQL_TYPE_TIME, T.MYSQL_TYPE_TIME2},
    "datetime": {T.MYSQL_TYPE_DATETIME, T.MYSQL_TYPE_DATETIME2},
    "timestamp": {T.MYSQL_TYPE_TIMESTAMP, T.MYSQL_TYPE_TIMESTAMP2}, "year": {T.MYSQL_TYPE_YEAR},
    "bit": {T.MYSQL_TYPE_BIT}, "char": {T.MYSQL_TYPE_STRING}, "binary": {T.MYSQL_TYPE_STRING},
    "varchar": {T.MYSQL_TYPE_VARCHAR, T.MYSQL_TYPE_VAR_STRING},
    "varbinary": {T.MYSQL_TYPE_VARCHAR, T.MYSQL_TYPE_VAR_STRING}, "enum": {T.MYSQL_TYPE_ENUM},
    "set": {T.MYSQL_TYPE_SET}, "json": {T.MYSQL_TYPE_JSON, *_BLOBS},
    "vector": {T.MYSQL_TYPE_VECTOR, T.MYSQL_TYPE_VARCHAR},
    **dict.fromkeys(("tinyblob", "blob", "mediumblob", "longblob", "tinytext", "text", "mediumtext", "longtext"),
                    _BLOBS),
    **{word: {T.MYSQL_TYPE_GEOMETRY} for word in GEOMETRY_TYPES},
}  # fmt: skip


def test_each_declared_type_matches_the_types_a_server_logs_it_as() -> None:
    assert {word: set(codes) for word, codes in BINLOG_TYPES.items() if word != "null"} == LOGGED_AS


@pytest.mark.parametrize(
    ("code", "meta", "unsigned", "text"),
    [
        (T.MYSQL_TYPE_TIME2, 3, False, "time(3)"), (T.MYSQL_TYPE_DATETIME2, 0, False, "datetime"),
        (T.MYSQL_TYPE_NEWDECIMAL, 10 << 8 | 2, True, "decimal(10,2) unsigned"),
        (T.MYSQL_TYPE_BIT, 1 << 8 | 1, False, "bit(9)"),
        (T.MYSQL_TYPE_INT24, 0, True, "mediumint unsigned"), (T.MYSQL_TYPE_YEAR, 0, True, "year"),
        (T.MYSQL_TYPE_BLOB, 3, False, "mediumblob"), (T.MYSQL_TYPE_ENUM, 1, False, "enum('l0','l1','l2')"),
    ],
)  # fmt: skip
def test_the_sql_type_text_of_a_column_as_the_binlog_tells_it(code: int, meta: int, unsigned: bool, text: str) -> None:
    assert mysql_type(_column(code, meta, unsigned)) == text
