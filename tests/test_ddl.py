"""The DDL parser: statements applied to a schema, checked column by column, and against the live server."""

from __future__ import annotations

import pytest

from connector.filters import TableFilter
from connector.schema.capture import capture
from connector.schema.ddl import UntrackedTableError, apply_ddl
from connector.schema.model import Column, Schema, Table
from connector.schema.sqltokens import DdlSyntaxError
from tests.support.live import connect, server


def run(*statements: str, db: str = "d") -> Schema:
    schema = Schema()
    for sql in statements:
        apply_ddl(schema, sql, db)
    return schema


def columns(schema: Schema, name: str, db: str = "d") -> list[str]:
    table = schema.get(db, name)
    assert table is not None, f"{db}.{name} is not tracked"
    return [c.name for c in table.columns]


def test_create_table_reads_types_attributes_and_key() -> None:
    schema = run(
        "CREATE DATABASE d DEFAULT CHARACTER SET latin1",
        """CREATE TABLE IF NOT EXISTS `d`.`t` (
          id BIGINT(20) UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'the id, (really)',
          name varchar(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT 'a,b' NOT NULL,
          price DEC(10, 2) DEFAULT -1.5, flag BOOLEAN, e ENUM('x','y''s','z') NOT NULL DEFAULT 'x',
          v INT GENERATED ALWAYS AS ((id + 1)) VIRTUAL, s INT AS (id * 2) PERSISTENT, h INT INVISIBLE,
          ts TIMESTAMP(6) NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
          b BLOB, n NATIONAL VARCHAR(5), dp DOUBLE PRECISION, f FLOAT(30), txt LONG VARCHAR,
          PRIMARY KEY (`id`), UNIQUE KEY uk (name(4)), KEY k2 (price) USING BTREE,
          CONSTRAINT fk FOREIGN KEY (flag) REFERENCES other (id) ON DELETE CASCADE, CHECK (price > 0)
        ) ENGINE=InnoDB /*!50100 PARTITION BY HASH (id) PARTITIONS 4 */""",
    )
    table = schema.get("d", "t")
    assert table is not None
    assert table.primary_key == ("id",)
    assert table.charset == "latin1"  # the database default
    by_name = {c.name: c for c in table.columns}
    assert by_name["id"] == Column("id", "bigint", (), True, nullable=False)
    assert by_name["name"].charset == "utf8mb4" and by_name["name"].collation == "utf8mb4_bin"
    assert by_name["name"].nullable is False
    assert by_name["price"].params == ("10", "2")
    assert by_name["flag"].data_type == "tinyint"
    assert by_name["e"].params == ("x", "y's", "z") and by_name["e"].charset == "latin1"
    assert by_name["v"].generated == "virtual" and by_name["s"].generated == "stored"
    assert by_name["h"].invisible
    assert by_name["ts"].params == ("6",)
    assert by_name["b"].charset == "binary"
    assert (by_name["dp"].data_type, by_name["f"].data_type, by_name["txt"].data_type) == (
        "double",
        "double",
        "mediumtext",
    )
    assert list(by_name) == ["id", "name", "price", "flag", "e", "v", "s", "h", "ts", "b", "n", "dp", "f", "txt"]


def test_alter_table_column_changes_in_order() -> None:
    schema = run(
        "CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(3), c INT) DEFAULT CHARSET=utf8mb4",
        "ALTER TABLE t ADD COLUMN z INT FIRST, ADD y INT AFTER a, DROP COLUMN c, ALGORITHM=INPLACE, LOCK=NONE",
        "ALTER TABLE t CHANGE b bee VARCHAR(9) NOT NULL AFTER z, MODIFY a BIGINT UNSIGNED FIRST",
        "ALTER TABLE t RENAME COLUMN y TO why, ADD (p INT, q INT), ADD INDEX (why), ADD COLUMN IF NOT EXISTS p INT",
        "ALTER TABLE t DROP COLUMN IF EXISTS nope, ALTER COLUMN q SET INVISIBLE, ALTER COLUMN p SET DEFAULT 3",
    )
    table = schema.get("d", "t")
    assert table is not None
    assert [c.name for c in table.columns] == ["a", "z", "bee", "id", "why", "p", "q"]
    assert table.columns[0].data_type == "bigint" and table.columns[0].unsigned
    assert table.columns[2].params == ("9",) and table.columns[2].charset == "utf8mb4"
    assert table.columns[6].invisible


def test_primary_key_changes_follow_renames_and_drops() -> None:
    schema = run("CREATE TABLE t (a INT, b INT, c INT, PRIMARY KEY (a, b))")
    keys = []
    for sql in ("ALTER TABLE t CHANGE a aa INT", "ALTER TABLE t DROP COLUMN b",
                "ALTER TABLE t DROP PRIMARY KEY, ADD CONSTRAINT pk PRIMARY KEY (c)"):  # fmt: skip
        apply_ddl(schema, sql, "d")
        keys.append(schema.tables[("d", "t")].primary_key)
    assert keys == [("aa", "b"), ("aa",), ("c",)]


def test_rename_drop_truncate_like_and_databases() -> None:
    schema = run(
        "CREATE DATABASE IF NOT EXISTS d", "CREATE DATABASE e CHARACTER SET utf8mb4",
        "CREATE TABLE t (id INT)", "CREATE TABLE u (id INT)",
        "RENAME TABLE t TO e.t1, u TO u2", "CREATE TABLE e.t2 LIKE e.t1", "CREATE TABLE e.t3 (LIKE d.u2)",
        "ALTER TABLE e.t1 RENAME TO e.t9",
    )  # fmt: skip
    assert sorted(schema.tables) == [("d", "u2"), ("e", "t2"), ("e", "t3"), ("e", "t9")]
    changes = apply_ddl(schema, "TRUNCATE TABLE e.t2", "d")
    assert [(c.database, c.table) for c in changes] == [("e", "t2")]
    apply_ddl(schema, "DROP TABLE IF EXISTS e.t2, d.nothing /* generated by server */", "d")
    assert ("e", "t2") not in schema.tables
    apply_ddl(schema, "DROP DATABASE e", "d")
    assert sorted(schema.tables) == [("d", "u2")]
    assert "e" not in schema.databases


def test_convert_charset_changes_character_columns_only() -> None:
    schema = run("CREATE TABLE t (a CHAR(3), b INT, c TEXT, d BLOB) CHARSET latin1",
                 "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")  # fmt: skip
    cols = schema.tables[("d", "t")].columns
    assert [c.charset for c in cols] == ["utf8mb4", None, "utf8mb4", "binary"]


@pytest.mark.parametrize(
    "sql",
    ["CREATE VIEW v AS SELECT 1", "GRANT SELECT ON *.* TO x", "CREATE USER u",
     "CREATE TEMPORARY TABLE tmp (a INT)", "DROP TEMPORARY TABLE tmp",
     "RENAME USER a TO b", "ALTER USER u IDENTIFIED BY 'x'", "/* only a comment */"],
)  # fmt: skip
def test_statements_about_no_table_change_nothing(sql: str) -> None:
    schema = run("CREATE TABLE t (a INT)")
    before = dict(schema.tables)
    assert apply_ddl(schema, sql, "d") == []
    assert schema.tables == before


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("CREATE TABLE x (a NOSUCHTYPE)", DdlSyntaxError),
        ("CREATE TABLE x (a INT", DdlSyntaxError),
        ("ALTER TABLE t DROP COLUMN nope", DdlSyntaxError),
        ("ALTER TABLE t ADD COLUMN a INT", DdlSyntaxError),
        ("ALTER TABLE t ADD COLUMN q INT AFTER nope", DdlSyntaxError),
        ("ALTER TABLE missing ADD COLUMN q INT", UntrackedTableError),
        ("CREATE TABLE c2 AS SELECT * FROM t", DdlSyntaxError),
        ("CREATE TABLE x (a INT) 'stray", DdlSyntaxError),
    ],
)
def test_unreadable_statements_raise_typed_errors(sql: str, error: type[Exception]) -> None:
    schema = run("CREATE TABLE t (a INT)")
    with pytest.raises(error):
        apply_ddl(schema, sql, "d")


def test_table_json_round_trip() -> None:
    schema = run("CREATE TABLE t (id INT UNSIGNED PRIMARY KEY, e SET('a','b') CHARACTER SET latin1, g INT AS (1))")
    table = schema.tables[("d", "t")]
    assert Table.from_json(table.to_json()) == table
    assert all("aliases" not in c for c in table.to_json()["columns"])  # as histories before renames were followed
    apply_ddl(schema, "ALTER TABLE t RENAME COLUMN e TO f, CHANGE g h INT AS (1)", "d")
    renamed = schema.tables[("d", "t")]
    assert [c.get("aliases") for c in renamed.to_json()["columns"]] == [None, ["e"], ["g"]]
    assert Table.from_json(renamed.to_json()) == renamed


SWAPS = "CREATE TABLE {t} (a INT NOT NULL, b VARCHAR(3), c INT NOT NULL, PRIMARY KEY (a, c))"
SWAPPED = [
    ("ALTER TABLE {t} RENAME COLUMN a TO b, RENAME COLUMN b TO a", ["b int", "a varchar(3)", "c int"], ("b", "c")),
    ("ALTER TABLE {t} CHANGE a b BIGINT NOT NULL, CHANGE b a VARCHAR(9)", ["b bigint", "a varchar(9)", "c int"],
     ("b", "c")),
    ("ALTER TABLE {t} RENAME COLUMN a TO b, RENAME COLUMN b TO c, RENAME COLUMN c TO a",
     ["b int", "c varchar(3)", "a int"], ("b", "a")),
    ("ALTER TABLE {t} RENAME COLUMN a TO b, DROP COLUMN b", ["b int", "c int"], ("b", "c")),
    ("ALTER TABLE {t} DROP COLUMN b, RENAME COLUMN a TO b", ["b int", "c int"], ("b", "c")),
    ("ALTER TABLE {t} RENAME COLUMN a TO x, ADD COLUMN y INT AFTER x", ["x int", "y int", "b varchar(3)", "c int"],
     ("x", "c")),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "after", "key"), SWAPPED)
def test_one_statements_renames_name_the_columns_before_it(sql: str, after: list[str], key: tuple[str, ...]) -> None:
    """A specification's column is the table's before the statement (a swap swaps); AFTER
    names one of the new table. As the servers do: see the live test below."""
    table = run(SWAPS.format(t="t"), sql.format(t="t")).tables[("d", "t")]
    assert [f"{c.name} {c.sql_type()}" for c in table.columns] == after
    assert table.primary_key == key


@pytest.mark.live
def test_one_statements_renames_as_the_server_does_them() -> None:
    conn = connect()
    for sql, after, key in SWAPPED:
        with conn.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS ddl_swaps")
            cur.execute("CREATE DATABASE ddl_swaps")
            cur.execute(SWAPS.format(t="ddl_swaps.t"))
            cur.execute(sql.format(t="ddl_swaps.t"))
        table = capture(conn, TableFilter.of([r"ddl_swaps\..*"], None)).get("ddl_swaps", "t")
        assert table is not None
        assert ([f"{c.name} {c.sql_type()}" for c in table.columns], table.primary_key) == (after, key), sql


def aliases(schema: Schema, name: str = "t") -> dict[str, tuple[str, ...]]:
    table = schema.get("d", name)
    assert table is not None
    return {c.name: c.aliases for c in table.columns}


def test_renamed_columns_keep_their_earlier_names_newest_first() -> None:
    schema = run("CREATE TABLE t (id INT PRIMARY KEY, a INT, x INT)", "ALTER TABLE t RENAME COLUMN a TO b")
    assert aliases(schema) == {"id": (), "b": ("a",), "x": ()}
    apply_ddl(schema, "ALTER TABLE t CHANGE COLUMN b c BIGINT NOT NULL FIRST", "d")
    assert aliases(schema) == {"c": ("b", "a"), "id": (), "x": ()}
    apply_ddl(schema, "ALTER TABLE t MODIFY c INT, ALTER COLUMN x SET DEFAULT 3", "d")  # MODIFY keeps the name
    assert aliases(schema) == {"c": ("b", "a"), "id": (), "x": ()}
    apply_ddl(schema, "ALTER TABLE t MODIFY C INT", "d")  # as written: both servers rename c to C
    assert aliases(schema) == {"C": ("c", "b", "a"), "id": (), "x": ()}
    apply_ddl(schema, "ALTER TABLE t RENAME COLUMN C TO c", "d")
    apply_ddl(schema, "ALTER TABLE t RENAME COLUMN c TO a", "d")  # back: never an alias of itself
    assert aliases(schema) == {"a": ("c", "C", "b"), "id": (), "x": ()}
    apply_ddl(schema, "ALTER TABLE t RENAME COLUMN a TO A", "d")  # Avro names are case-sensitive
    assert aliases(schema)["A"] == ("a", "c", "C", "b")


def test_a_name_another_column_takes_is_no_longer_an_earlier_name() -> None:
    schema = run(
        "CREATE TABLE t (id INT PRIMARY KEY, a INT, x INT)", "ALTER TABLE t RENAME COLUMN a TO b, CHANGE id k INT"
    )
    assert aliases(schema) == {"k": ("id",), "b": ("a",), "x": ()}
    assert schema.tables[("d", "t")].primary_key == ("k",)
    apply_ddl(schema, "ALTER TABLE t ADD COLUMN A INT", "d")  # a new column, not the old `a`
    assert aliases(schema) == {"k": ("id",), "b": (), "x": (), "A": ()}
    apply_ddl(schema, "ALTER TABLE t DROP COLUMN x, ADD COLUMN x INT, CHANGE A id INT", "d")
    assert aliases(schema) == {"k": (), "b": (), "id": ("A",), "x": ()}
    apply_ddl(schema, "CREATE TABLE u LIKE t", "d")  # a new table: not the source's history
    assert aliases(schema, "u") == {"k": (), "b": (), "id": (), "x": ()}


@pytest.mark.live
def test_parser_reads_the_servers_own_show_create_table() -> None:
    """Every table of the spec database, parsed from SHOW CREATE TABLE, against information_schema."""
    conn = connect()
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS ddl_live")
        cur.execute("CREATE DATABASE ddl_live CHARACTER SET latin1")
        own = "u UUID, i6 INET6, pt POINT" if server().mariadb else "v VECTOR(3), pt POINT SRID 4326, ls LINESTRING"
        cur.execute(
            "CREATE TABLE ddl_live.t (id INT UNSIGNED, a VARCHAR(10) CHARACTER SET utf8mb4 NOT NULL,"
            " e ENUM('p','q') DEFAULT 'q', d DECIMAL(9,3), dt DATETIME(4) DEFAULT CURRENT_TIMESTAMP(4), j JSON,"
            f" g INT AS (id + 1) VIRTUAL, s INT AS (id + 2) STORED, h INT INVISIBLE, {own},"
            " b BIT(3), y YEAR, t TIME(2), PRIMARY KEY (id, a), KEY (d))"
        )

        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, IS_NULLABLE, EXTRA, COLUMN_KEY"
            " FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'ddl_live' ORDER BY ORDINAL_POSITION"
        )
        reported = cur.fetchall()
    schema = capture(conn, TableFilter.of([r"ddl_live\..*"], None))
    table = schema.get("ddl_live", "t")
    assert table is not None
    assert [c.name for c in table.columns] == [row[0] for row in reported]
    for col, (name, data_type, column_type, charset, nullable, extra, key) in zip(table.columns, reported):
        assert col.data_type == data_type, name  # MariaDB's JSON is LONGTEXT on both sides
        assert col.unsigned == ("unsigned" in column_type), name
        assert col.charset == (charset or ("binary" if col.data_type in ("blob", "varbinary") else None)), name
        assert col.nullable == (nullable == "YES"), name
        # (MySQL says DEFAULT_GENERATED of a CURRENT_TIMESTAMP default: not a generated column)
        assert (col.generated is not None) == any(k in extra.upper() for k in ("VIRTUAL GEN", "STORED GEN")), name

        assert col.invisible == ("INVISIBLE" in extra.upper()), name
        assert (name in table.primary_key) == (key == "PRI"), name
