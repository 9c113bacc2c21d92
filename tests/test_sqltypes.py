"""canal's sqlType and mysqlType (connector/sqltypes.py): the rule for every column type, the type
texts as each server prints them, and the one map canal-json, `sluice decode` and `tail` share.

The codes are canal 1.1.8's (RowsLogBuffer, then LogEventConvert.parseOneRow); the live test
(tests/test_canal_json_live.py) checks them against canal's own classes on both servers.
"""

from __future__ import annotations

from typing import Any

import pytest

from connector.binlog.coltypes import mysql_type
from connector.binlog.constants import ColumnType as T
from connector.binlog.tablemap import ColumnMeta, TableMapEvent
from connector.canal import CanalJsonEncoder
from connector.flat import sql_type, table_shape
from connector.schema.ddl import apply_ddl
from connector.schema.model import Column, Schema, Table
from connector.schema.sqltokens import Session
from connector.sqltypes import canal_type, mysql_type_of

BIG = "18446744073709551615"

# (mysqlType, a value's text or None for NULL, canal's sqlType): every type, each server's spelling.
CASES = [
    ("tinyint(4)", "-1", -6), ("tinyint", None, -6), ("tinyint(3) unsigned", "127", -6),
    ("tinyint(3) unsigned", "128", 5), ("tinyint unsigned", None, -6), ("tinyint(1)", "1", -6),
    ("smallint(6)", "-5", 5), ("smallint unsigned", "32768", 4), ("smallint(5) unsigned", "32767", 5),
    ("mediumint(9)", "1", 4), ("mediumint unsigned", "16777215", 4), ("mediumint(8) unsigned", None, 4),
    ("int(11)", "-2147483648", 4), ("int unsigned", "2147483648", -5), ("int(10) unsigned zerofill", "7", 4),
    ("bigint(20)", "1", -5), ("bigint unsigned", BIG, 3), ("bigint(20) unsigned", "9223372036854775807", -5),
    ("bigint unsigned", None, -5),
    ("decimal(10,2)", "1.50", 3), ("decimal(10,2) unsigned zerofill", None, 3), ("float", "1.5", 7),
    ("float unsigned zerofill", None, 7), ("double", "2.5", 8), ("bit(1)", "1", -7), ("bit(64)", None, -7),
    ("date", "2024-01-02", 91), ("time(3)", "-838:59:59.000", 92), ("datetime(6)", None, 93),
    ("timestamp", "2024-01-02 03:04:05", 93), ("year(4)", "2024", 12), ("year", None, 12),
    ("char(10)", "a", 1), ("char(1)", None, 1), ("varchar(255)", "a", 12), ("varchar(10)", None, 12),
    ("binary(16)", "\x00", 2004), ("binary(1)", None, 2004), ("varbinary(10)", "a", 2004),
    ("varbinary(10)", None, 2004),
    ("tinytext", "a", 2005), ("text", None, 2005), ("mediumtext", "a", 2005), ("longtext", None, 2005),
    ("tinyblob", "a", 2004), ("blob", None, 2004), ("mediumblob", "a", 2004), ("longblob", None, 2004),
    ("enum('a','b')", "2", 4), ("enum('a','b')", None, 4), ("enum('binary','unsigned')", "1", 4),
    ("set('a','b')", "3", -7), ("set('a','b')", None, 2004),
    ("json", '{"a":1}', 12), ("json", None, 1111),
    ("geometry", "\x00", 2004), ("point", None, 2004), ("linestring", "\x00", 2004), ("polygon", None, 2004),
    ("multipoint", "\x00", 2004), ("multilinestring", None, 2004), ("multipolygon", "\x00", 2004),
    ("geometrycollection", None, 2004), ("geomcollection", "\x00", 2004),
    ("vector(4)", "\x00", 1111), ("vector(4)", None, 1111),
    ("uuid", "a", 1), ("inet4", None, 1), ("inet6", "a", 1),
]  # fmt: skip


@pytest.mark.parametrize(("mysql_type", "text", "code"), CASES)
def test_canals_sql_type_of_each_value(mysql_type: str, text: str | None, code: int) -> None:
    assert canal_type(mysql_type).of(text) == code


def _columns(ddl: str, mariadb: bool) -> tuple[Column, ...]:
    schema = Schema()
    apply_ddl(schema, ddl, "db", Session(mariadb=mariadb))
    return schema.tables[("db", "t")].columns


# Declared types, and what SHOW CREATE TABLE printed for them on MariaDB 10.11.19 and MySQL 9.7.4.
WIDTHS = [
    ("tinyint", "tinyint(4)", "tinyint"), ("tinyint unsigned", "tinyint(3) unsigned", "tinyint unsigned"),
    ("tinyint(1)", "tinyint(1)", "tinyint(1)"), ("tinyint(1) unsigned", "tinyint(1) unsigned", "tinyint unsigned"),
    ("bool", "tinyint(1)", "tinyint(1)"), ("smallint", "smallint(6)", "smallint"),
    ("smallint unsigned", "smallint(5) unsigned", "smallint unsigned"), ("mediumint", "mediumint(9)", "mediumint"),
    ("mediumint unsigned", "mediumint(8) unsigned", "mediumint unsigned"), ("int", "int(11)", "int"),
    ("int unsigned", "int(10) unsigned", "int unsigned"), ("bigint", "bigint(20)", "bigint"),
    ("bigint unsigned", "bigint(20) unsigned", "bigint unsigned"), ("int(5)", "int(5)", "int"),
    ("int zerofill", "int(10) unsigned zerofill", "int(10) unsigned zerofill"),
    ("int(5) zerofill", "int(5) unsigned zerofill", "int(5) unsigned zerofill"), ("year", "year(4)", "year"),
    ("year(4)", "year(4)", "year"), ("serial", "bigint(20) unsigned", "bigint unsigned"),
    ("decimal(10,2) zerofill", "decimal(10,2) unsigned zerofill", "decimal(10,2) unsigned zerofill"),
    ("float zerofill", "float unsigned zerofill", "float unsigned zerofill"),
    ("double unsigned", "double unsigned", "double unsigned"), ("tinyint(2)", "tinyint(2)", "tinyint"),
    ("bigint(3) unsigned zerofill", "bigint(3) unsigned zerofill", "bigint(3) unsigned zerofill"),
    ("tinyint zerofill", "tinyint(3) unsigned zerofill", "tinyint(3) unsigned zerofill"),
    ("int not null zerofill", "int(10) unsigned zerofill", "int(10) unsigned zerofill"),
]  # fmt: skip


@pytest.mark.parametrize(("declared", "mariadb", "mysql"), WIDTHS)
def test_mysql_type_is_the_type_as_each_server_prints_it(declared: str, mariadb: str, mysql: str) -> None:
    ddl = f"CREATE TABLE t (c {declared})"
    assert [mysql_type_of(c) for c in _columns(ddl, mariadb=True)] == [mariadb]
    if "not null zerofill" not in declared:  # MySQL reads no signedness after other attributes
        assert [mysql_type_of(c) for c in _columns(ddl, mariadb=False)] == [mysql]


def test_a_history_written_before_display_widths_reads_back() -> None:
    """A definition stored before display widths were kept (no `display_width` / `zerofill` keys)
    reads back, its types printed without widths; one stored now keeps them."""
    old: dict[str, Any] = {
           "database": "db", "name": "t", "primary_key": ["id"], "charset": "utf8mb4", "collation": None,
           "columns": [{"name": "id", "data_type": "int", "params": [], "unsigned": False, "charset": None,
                        "collation": None, "nullable": False, "generated": None, "invisible": False,
                        "default": None}]}  # fmt: skip
    (column,) = Table.from_json(old).columns
    assert (column.display_width, column.zerofill, mysql_type_of(column)) == (None, False, "int")
    schema = Schema()
    apply_ddl(schema, "CREATE TABLE t (id INT(5) ZEROFILL PRIMARY KEY, v INT)", "db", Session(mariadb=True))
    stored = schema.tables[("db", "t")].to_json()
    assert stored["columns"][0]["display_width"] == 5 and stored["columns"][0]["zerofill"] is True
    assert "zerofill" not in stored["columns"][1]  # defaults left out, as older histories have them
    again = Table.from_json(stored)
    assert again == schema.tables[("db", "t")]
    assert [mysql_type_of(c) for c in again.columns] == ["int(5) unsigned zerofill", "int(11)"]


def _meta(index: int, real_type: int, meta: int = 0, collation: int | None = None, unsigned: bool = False,
          name: str = "") -> ColumnMeta:
    return ColumnMeta(index, real_type, real_type, meta, True, name or f"c{index}", unsigned, collation)


def test_decode_tail_and_canal_json_give_a_column_the_same_types() -> None:
    """One map: a TABLE_MAP with the schema history's definition (`sluice decode --schema-from`, `tail`)
    has canal-json's mysqlType and, for a value, its sqlType."""
    schema = Schema()
    apply_ddl(schema, "CREATE TABLE t (id INT PRIMARY KEY, u BIGINT UNSIGNED, e ENUM('a','b'), s SET('x'), "
                      "tx TEXT, b VARBINARY(4))", "db", Session(mariadb=True))  # fmt: skip
    definition = schema.tables[("db", "t")]
    columns = (_meta(0, T.MYSQL_TYPE_LONG, name="id"), _meta(1, T.MYSQL_TYPE_LONGLONG, unsigned=True, name="u"),
               _meta(2, T.MYSQL_TYPE_ENUM, 1, name="e"), _meta(3, T.MYSQL_TYPE_SET, 1, name="s"),
               _meta(4, T.MYSQL_TYPE_BLOB, 2, 45, name="tx"),
               _meta(5, T.MYSQL_TYPE_VARCHAR, 4, 63, name="b"))  # fmt: skip
    table_map = TableMapEvent(1, 0, "db", "t", columns, (0,))
    shape = table_shape(table_map, definition)
    encoder = CanalJsonEncoder(None)  # type: ignore[arg-type]
    canal = encoder.shape(definition)
    assert shape.mysql_types == canal.mysql_type == {
        "id": "int(11)", "u": "bigint(20) unsigned", "e": "enum('a','b')", "s": "set('x')", "tx": "text",
        "b": "varbinary(4)"}  # fmt: skip
    values = {"id": "1", "u": "1", "e": "1", "s": "1", "tx": "a", "b": "a"}
    assert shape.sql_types == {name: kind.of(values[name]) for name, kind in canal.sql_types}
    assert shape.sql_types == {"id": 4, "u": -5, "e": 4, "s": -7, "tx": 2005, "b": 2004}


def test_decode_without_a_schema_types_columns_by_the_binlog_alone() -> None:
    """No schema: the TABLE_MAP's types, no display widths, a BLOB-family column without charset
    metadata a blob; the same rule gives the codes."""
    cols = [_meta(0, T.MYSQL_TYPE_LONG), _meta(1, T.MYSQL_TYPE_BLOB, 2), _meta(2, T.MYSQL_TYPE_BLOB, 2, 45),
            _meta(3, T.MYSQL_TYPE_JSON, 4), _meta(4, T.MYSQL_TYPE_TINY, unsigned=True), _meta(5, T.MYSQL_TYPE_SET, 1)]
    assert [mysql_type(c) for c in cols] == ["int", "blob", "text", "json", "tinyint unsigned", "set"]
    assert [sql_type(c) for c in cols] == [4, 2004, 2005, 12, -6, -7]
