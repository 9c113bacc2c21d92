"""DDL as the servers apply it: the statements issue 16 found misread, each with what MySQL 9.7
and MariaDB 10.11 made of it (checked live by tests/test_ddl_corpus_live.py's grammar file)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.schema.ddl import Unreadable, read_ddl
from connector.schema.model import Blocked, Column, Schema
from connector.schema.sqltokens import Session, tokenize

MYSQL = Session(False, 90704, server_charset="utf8mb4")
MARIADB = Session(True, 101119, server_charset="utf8mb4")


def run(*statements: str, session: Session = MYSQL, db: str = "d") -> Schema:
    schema = Schema()
    for sql in statements:
        result = read_ddl(schema, sql, db, session)
        assert not isinstance(result, Unreadable), f"{sql}: {result.reason}"
    return schema


def shape(schema: Schema, name: str, db: str = "d") -> list[str]:
    table = schema.get(db, name)
    assert table is not None, f"{db}.{name} is not tracked"
    return [f"{c.name} {c.sql_type()}{' ' + c.charset if c.charset else ''}{'' if c.nullable else ' NOT NULL'}"
            for c in table.columns]  # fmt: skip


def test_change_column_swaps_follow_the_old_names() -> None:
    schema = run("CREATE TABLE t1 (a INT, b VARCHAR(3), c INT)",
                 "ALTER TABLE t1 CHANGE COLUMN a b INT, CHANGE COLUMN b a INT")  # fmt: skip
    assert shape(schema, "t1") == ["b int", "a int", "c int"]


@pytest.mark.parametrize(
    ("sql", "after"),
    [
        ("ALTER TABLE t CHANGE a x INT AFTER c, ADD y INT AFTER x, MODIFY b INT FIRST", ["b", "c", "x", "y"]),
        # AFTER names the new list as built so far: the changed column is still in its old place
        ("ALTER TABLE t ADD y INT AFTER x, CHANGE a x INT AFTER c", ["y", "b", "c", "x"]),
        ("ALTER TABLE t ADD c2 INT AFTER a, ADD d INT AFTER c2", ["a", "c2", "d", "b", "c"]),
        ("ALTER TABLE t ADD COLUMN i INT, DROP COLUMN c", ["a", "b", "i"]),
        ("ALTER TABLE t ADD COLUMN c BIGINT, DROP COLUMN c", ["a", "b", "c"]),  # dropped, then added last
        ("ALTER TABLE t MODIFY A BIGINT, CHANGE b B INT", ["A", "B", "c"]),  # the name as written
        ("ALTER TABLE t RENAME COLUMN a TO b, RENAME COLUMN b TO a", ["b", "a", "c"]),
    ],
)  # fmt: skip
def test_specifications_apply_in_the_servers_order(sql: str, after: list[str]) -> None:
    table = run("CREATE TABLE t (a INT, b INT, c INT)", sql).tables[("d", "t")]
    assert [c.name for c in table.columns] == after


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("ALTER TABLE t ADD COLUMN i INT, DROP COLUMN i", "DROP COLUMN `i`"),  # the servers refuse it
        ("ALTER TABLE t ADD COLUMN a INT", "column `a` twice"),
        ("ALTER TABLE t ALTER COLUMN a SET DEFAULT 5, CHANGE a z INT", "ALTER COLUMN"),
        ("ALTER TABLE t ADD q INT AFTER nope", "AFTER `nope`"),
        # a partition command stands alone, a partitioning ends the statement (both servers refuse these)
        ("ALTER TABLE t ANALYZE PARTITION p0, ADD g INT", "goes on after its partition command (ANALYZE)"),
        ("ALTER TABLE t PARTITION BY HASH (a) PARTITIONS 2, ADD f INT", "goes on after its partitioning"),
        ("ALTER TABLE t REMOVE PARTITIONING, ADD d INT", "goes on after its partitioning"),
        ("ALTER TABLE t PARTITION BY RANGE (a) (PARTITION p0 VALUES LESS THAN (1) junk)", "partition option 'junk'"),
        ("ALTER TABLE t PARTITION BY SOMETHING (a)", "unknown partitioning type 'SOMETHING'"),
    ],
)
def test_what_the_servers_refuse_is_unreadable_not_guessed(sql: str, error: str) -> None:
    schema = run("CREATE TABLE t (a INT, b INT, c INT)")
    before = schema.copy()
    result = read_ddl(schema, sql, "d", MYSQL)
    assert isinstance(result, Unreadable) and error in result.reason
    assert result.tables == (("d", "t"),)
    assert schema == before


def test_if_exists_and_if_not_exists_judge_the_table_before_the_statement() -> None:
    schema = run(
        "CREATE TABLE t (id INT PRIMARY KEY, a INT)",
        "ALTER TABLE t ADD (p INT, q INT), ADD COLUMN IF NOT EXISTS p BIGINT, ADD COLUMN IF NOT EXISTS a TEXT",
        "ALTER TABLE t ALTER COLUMN IF EXISTS p SET DEFAULT 3, ALTER COLUMN IF EXISTS nope DROP DEFAULT",
        "ALTER TABLE t DROP COLUMN IF EXISTS nope, CHANGE COLUMN IF EXISTS gone x INT, MODIFY IF EXISTS none INT",
        "ALTER TABLE t CHANGE COLUMN IF EXISTS a b INT, CHANGE COLUMN IF EXISTS b c INT",
        "ALTER TABLE IF EXISTS missing ADD COLUMN z INT",
        session=MARIADB,
    )  # fmt: skip
    assert shape(schema, "t") == ["id int NOT NULL", "b int", "p int", "q int"]
    assert schema.tables[("d", "t")].columns[2].default == "3"


@pytest.mark.parametrize(
    ("spelling", "shown"),
    [
        ("CHAR VARYING(10)", "varchar(10) utf8mb4"), ("CHARACTER VARYING(10)", "varchar(10) utf8mb4"),
        ("NCHAR VARYING(10)", "varchar(10) utf8mb3"), ("NCHAR VARCHAR(255)", "varchar(255) utf8mb3"),
        ("NATIONAL CHARACTER VARYING(3)", "varchar(3) utf8mb3"), ("NATIONAL CHAR(2)", "char(2) utf8mb3"),
        ("NVARCHAR(4)", "varchar(4) utf8mb3"), ("NCHAR", "char(1) utf8mb3"), ("VARCHARACTER(5)", "varchar(5) utf8mb4"),
        ("FLOAT(7.4)", "float"), ("FLOAT(25)", "double"), ("FLOAT(7,4)", "float(7,4)"), ("FLOAT4", "float"),
        ("FLOAT8", "double"), ("DOUBLE PRECISION(8,3)", "double(8,3)"), ("REAL", "double"),
        ("DEC(5)", "decimal(5,0)"), ("NUMERIC", "decimal(10,0)"), ("FIXED(4,1)", "decimal(4,1)"),
        ("SERIAL", "bigint unsigned NOT NULL"), ("BOOL", "tinyint"), ("BOOLEAN", "tinyint"), ("INT1", "tinyint"),
        ("MIDDLEINT UNSIGNED", "mediumint unsigned"), ("INT8 ZEROFILL", "bigint unsigned"), ("BIT", "bit(1)"),
        ("LONG", "mediumtext utf8mb4"), ("LONG VARCHAR", "mediumtext utf8mb4"),
        ("LONG CHAR VARYING", "mediumtext utf8mb4"), ("LONG VARBINARY", "mediumblob binary"),
        ("TEXT(300) CHARSET latin1", "text latin1"), ("TEXT(100)", "text utf8mb4"), ("TEXT(60)", "tinytext utf8mb4"),
        ("BLOB(70000)", "mediumblob binary"), ("VARCHAR(3) CHARACTER SET binary", "varbinary(3) binary"),
        ("TINYTEXT CHARSET binary", "tinyblob binary"), ("CHAR(2) BYTE", "binary(2) binary"),
        ("CHAR(2) ASCII", "char(2) latin1"), ("CHAR(2) UNICODE", "char(2) ucs2"), ("CHAR(3) BINARY", "char(3) utf8mb4"),
        ("VARCHAR(3) COLLATE latin1_bin", "varchar(3) latin1"), ("VARCHAR(3) CHARSET utf8", "varchar(3) utf8mb3"),
        ("ENUM('a ', X'62', _latin1'c' 'd')", "enum('a','b','cd') utf8mb4"),
        ("SET('x') CHARSET latin1", "set('x') latin1"),
        ("TIMESTAMP(0)", "timestamp"), ("DATETIME(6)", "datetime(6)"), ("YEAR(4)", "year"), ("TIME(3)", "time(3)"),
        ("JSON", "json"), ("GEOMETRYCOLLECTION", "geomcollection"), ("POINT SRID 4326", "point"),
        ("VECTOR(3)", "vector(3)"), ("INT(11) UNSIGNED NOT NULL AUTO_INCREMENT UNIQUE", "int unsigned NOT NULL"),
    ],
)  # fmt: skip
def test_every_type_spelling(spelling: str, shown: str) -> None:
    schema = run("CREATE DATABASE d", f"CREATE TABLE t (c {spelling})")
    assert shape(schema, "t") == [f"c {shown}"]


def test_mariadb_types_json_and_compressed_columns() -> None:
    schema = run(
        "CREATE TABLE t (j JSON, u UUID, i INET6, v VARCHAR(100) COMPRESSED, b BLOB COMPRESSED=zlib,"
        " g GEOMETRYCOLLECTION) CHARSET latin1",
        session=MARIADB,
    )
    table = schema.tables[("d", "t")]
    assert shape(schema, "t") == ["j longtext utf8mb4", "u uuid", "i inet6", "v varchar(100) latin1",
                                  "b blob binary", "g geometrycollection"]  # fmt: skip
    assert [c.compressed for c in table.columns] == [False, False, False, True, True, False]


def test_keyword_identifiers_are_names() -> None:
    schema = run(
        "CREATE TABLE vector (vector INT, period INT, system INT, `key` INT, first INT, status TEXT,"
        " VECTOR INDEX (v2))",
        "ALTER TABLE vector ADD period2 INT AFTER period, ADD vector2 INT FIRST, DROP system, DROP COLUMN first",
    )  # fmt: skip
    assert [c.name for c in schema.tables[("d", "vector")].columns] == [
        "vector2", "vector", "period", "period2", "key", "status"
    ]  # fmt: skip


def test_rename_moves_a_table_into_the_session_database() -> None:
    schema = run("CREATE TABLE d2.t1 (x INT)", "ALTER TABLE d2.t1 RENAME t1", "CREATE TABLE d2.t2 (y INT)",
                 "ALTER TABLE d2.t2 RENAME TO d3.t9, ADD COLUMN z INT", "RENAME TABLE d3.t9 TO t3",
                 db="d")  # fmt: skip
    assert sorted(schema.tables) == [("d", "t1"), ("d", "t3")]
    assert shape(schema, "t3") == ["y int", "z int"]


def test_parenthesised_add_lists_and_keys() -> None:
    schema = run(
        "CREATE TABLE t (id INT, u INT, v INT)",
        "ALTER TABLE t ADD (PRIMARY KEY (id), UNIQUE KEY uk (u))",
        "ALTER TABLE t ADD COLUMN (w INT NOT NULL, x TEXT), ADD CONSTRAINT c CHECK (w > 0)",
    )
    table = schema.tables[("d", "t")]
    assert table.primary_key == ("id",)
    assert shape(schema, "t") == ["id int NOT NULL", "u int", "v int", "w int NOT NULL", "x text utf8mb4"]


def test_primary_key_columns_are_not_null_and_follow_renames() -> None:
    schema = run("CREATE TABLE t (a INT, b INT, PRIMARY KEY (A, b))", "ALTER TABLE t CHANGE a aa BIGINT",
                 "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (b)", "DROP INDEX `PRIMARY` ON t")  # fmt: skip
    table = schema.tables[("d", "t")]
    assert table.primary_key == ()
    assert shape(schema, "t") == ["aa bigint NOT NULL", "b int NOT NULL"]


def test_mariadb_system_versioning_keeps_its_hidden_columns_last() -> None:
    schema = run(
        "CREATE TABLE sv (x INT, y VARCHAR(3)) WITH SYSTEM VERSIONING",
        "ALTER TABLE sv ADD COLUMN w INT FIRST, ADD COLUMN v INT AFTER y",
        "CREATE TABLE p (x INT)", "ALTER TABLE p ADD COLUMN q INT, ADD SYSTEM VERSIONING",
        "CREATE TABLE e (x INT, s TIMESTAMP(6) AS ROW START, e TIMESTAMP(6) AS ROW END,"
        " PERIOD FOR SYSTEM_TIME(s, e)) WITH SYSTEM VERSIONING",
        "CREATE TABLE c (x INT WITH SYSTEM VERSIONING, y INT)",
        session=MARIADB,
    )  # fmt: skip
    hidden = ["row_start timestamp(6) NOT NULL", "row_end timestamp(6) NOT NULL"]
    assert shape(schema, "sv") == ["w int", "x int", "y varchar(3) utf8mb4", "v int", *hidden]
    assert shape(schema, "p") == ["x int", "q int", *hidden]
    assert shape(schema, "e") == ["x int", "s timestamp(6) NOT NULL", "e timestamp(6) NOT NULL"]
    assert shape(schema, "c") == ["x int", "y int", *hidden]
    apply = run("CREATE TABLE p (x INT) WITH SYSTEM VERSIONING", "ALTER TABLE p DROP SYSTEM VERSIONING, ADD r INT",
                session=MARIADB)  # fmt: skip
    assert shape(apply, "p") == ["x int", "r int"]


def test_convert_to_grows_text_types_to_keep_their_characters() -> None:
    schema = run("CREATE TABLE t (a TEXT, b TINYTEXT, c VARCHAR(5), d BLOB, e ENUM('x')) CHARSET latin1",
                 "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4")  # fmt: skip
    assert shape(schema, "t") == ["a mediumtext utf8mb4", "b text utf8mb4", "c varchar(5) utf8mb4", "d blob binary",
                                  "e enum('x') utf8mb4"]  # fmt: skip


def test_executable_comments_run_where_the_server_ran_them() -> None:
    sql = ("CREATE TABLE t (a INT /*!80023 INVISIBLE */, b INT /*M!100301 COMPRESSED */,"
           " c VARCHAR(3) /*!99999 BINARY */)")
    mysql = run(sql).tables[("d", "t")]
    mariadb = run(sql.replace("b INT", "b TEXT"), session=MARIADB).tables[("d", "t")]
    assert (mysql.columns[0].invisible, mysql.columns[1].compressed) == (True, False)
    assert (mariadb.columns[0].invisible, mariadb.columns[1].compressed) == (True, True)


def test_sql_mode_changes_how_the_text_reads() -> None:
    ansi = Session(False, 80400, sql_mode=4 | 1, server_charset="utf8mb4")  # ANSI_QUOTES, REAL_AS_FLOAT
    schema = run('CREATE TABLE "q t" ("a b" REAL, c INT)', session=ansi)
    assert shape(schema, "q t") == ["a b float", "c int"]


def test_partitions_and_table_options_are_skipped() -> None:
    schema = run(
        "CREATE TABLE t (id INT NOT NULL, d DATE) ENGINE=InnoDB ROW_FORMAT=DYNAMIC COMMENT='x' STATS_PERSISTENT=0"
        " AUTO_INCREMENT=5 KEY_BLOCK_SIZE=8 /*!50100 PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10),"
        " PARTITION p1 VALUES LESS THAN MAXVALUE) */",
        "ALTER TABLE t ADD PARTITION (PARTITION p2 VALUES LESS THAN (30)), ALGORITHM=INPLACE",
        "ALTER TABLE t ENGINE=InnoDB ROW_FORMAT=COMPACT, FORCE",
        "ALTER TABLE t TRUNCATE PARTITION p0",
        "ALTER TABLE t REMOVE PARTITIONING",
        "ALTER TABLE t ORDER BY id, d",
        "CREATE TABLE u (a INT) START TRANSACTION",
    )  # fmt: skip
    assert shape(schema, "t") == ["id int NOT NULL", "d date"]


PARTITIONED = ("CREATE TABLE t (id INT NOT NULL, d DATE, PRIMARY KEY (id)) PARTITION BY RANGE (id)"
               " (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20),"
               " PARTITION p2 VALUES LESS THAN MAXVALUE)")  # fmt: skip
SWAP = "CREATE TABLE x (id INT NOT NULL, d DATE, PRIMARY KEY (id))"
# Every partition clause and command of both grammars (sql/sql_yacc.yy: MySQL's partition_clause
# and standalone_alter_commands, MariaDB's partitioning and alter_commands), each taken by the
# server of its session (tests/ddl_grammar.sql replays them live).
PARTITION_STATEMENTS = [
    *((session, sql) for session in (MYSQL, MARIADB) for sql in (
        "ALTER TABLE t DROP PARTITION p0, p1",
        "ALTER TABLE t DROP PARTITION p0",
        "ALTER TABLE t ADD PARTITION (PARTITION p3 VALUES LESS THAN (40) COMMENT 'c' ENGINE = InnoDB MAX_ROWS 9)",
        "ALTER TABLE t ADD PARTITION NO_WRITE_TO_BINLOG PARTITIONS 2",
        "ALTER TABLE t TRUNCATE PARTITION p0, p1",
        "ALTER TABLE t TRUNCATE PARTITION ALL",
        "ALTER TABLE t COALESCE PARTITION LOCAL 2",
        "ALTER TABLE t REORGANIZE PARTITION",
        "ALTER TABLE t REORGANIZE PARTITION p0, p1 INTO (PARTITION p01 VALUES LESS THAN (20))",
        "ALTER TABLE t REORGANIZE PARTITION LOCAL p2 INTO (PARTITION p2a VALUES LESS THAN (25) (SUBPARTITION s0"
        " COMMENT = 'x', SUBPARTITION s1 STORAGE ENGINE InnoDB), PARTITION p2b VALUES LESS THAN MAXVALUE)",
        "ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE x",
        "ALTER TABLE t REBUILD PARTITION p0, p1",
        "ALTER TABLE t ANALYZE PARTITION LOCAL ALL",
        "ALTER TABLE t CHECK PARTITION p0, p1 FOR UPGRADE",
        "ALTER TABLE t OPTIMIZE PARTITION NO_WRITE_TO_BINLOG p0, p1",
        "ALTER TABLE t REPAIR PARTITION p0 QUICK EXTENDED USE_FRM",
        "ALTER TABLE t DISCARD PARTITION p0, p1 TABLESPACE",
        "ALTER TABLE t IMPORT PARTITION ALL TABLESPACE",
        "ALTER TABLE t REMOVE PARTITIONING",
        "ALTER TABLE t /*!50100 PARTITION BY HASH (id) PARTITIONS 3 */",
        "ALTER TABLE t PARTITION BY KEY () PARTITIONS 2",
        "ALTER TABLE t PARTITION BY LINEAR KEY ALGORITHM = 2 (id) PARTITIONS 4",
        "ALTER TABLE t PARTITION BY LIST COLUMNS (id, d) (PARTITION p0 VALUES IN ((1, '2001-01-01'), (2, NULL)))",
        "ALTER TABLE t PARTITION BY RANGE (TO_DAYS(d)) SUBPARTITION BY LINEAR HASH (id + 1) SUBPARTITIONS 2"
        " (PARTITION p0 VALUES LESS THAN (730000) DATA DIRECTORY = '/d' INDEX DIRECTORY '/i' NODEGROUP 0"
        " TABLESPACE = innodb_file_per_table, PARTITION p1 VALUES LESS THAN (MAXVALUE))",
    )),
    (MYSQL, "ALTER TABLE t ALGORITHM = INPLACE, LOCK = NONE, DROP PARTITION p0, p1"),
    (MYSQL, "ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE d.x WITHOUT VALIDATION"),
    (MYSQL, "ALTER TABLE t WITH VALIDATION, EXCHANGE PARTITION p0 WITH TABLE x"),
    (MARIADB, "ALTER TABLE t ADD PARTITION IF NOT EXISTS (p3 VALUES LESS THAN (40))"),
    (MARIADB, "ALTER TABLE t DROP PARTITION IF EXISTS p0, p9"),
    (MARIADB, "ALTER TABLE t PARTITION BY LIST (id) (p0 VALUES IN (1), PARTITION pd DEFAULT)"),
    (MARIADB, "ALTER TABLE t PARTITION BY SYSTEM_TIME"),
    (MARIADB, "ALTER TABLE t PARTITION BY SYSTEM_TIME INTERVAL (1 + 1) MONTH STARTS TIMESTAMP'2020-01-01 00:00:00'"
              " AUTO PARTITIONS 3"),
    (MARIADB, "ALTER TABLE t PARTITION BY SYSTEM_TIME LIMIT 1000 AUTO SUBPARTITION BY KEY (id) SUBPARTITIONS 2"
              " (PARTITION ph HISTORY, PARTITION pc CURRENT)"),
]  # fmt: skip


@pytest.mark.parametrize(("session", "sql"), PARTITION_STATEMENTS)
def test_partition_statements_are_read_and_change_no_column(session: Session, sql: str) -> None:
    before = run(PARTITIONED, SWAP, session=session)
    after = run(PARTITIONED, SWAP, sql, session=session)
    assert after.tables == before.tables and not after.blocked


def test_column_clauses_before_a_partitioning_are_applied() -> None:
    for session in (MYSQL, MARIADB):
        schema = run(
            PARTITIONED,
            "ALTER TABLE t ADD COLUMN c INT AFTER id, MODIFY d DATETIME NOT NULL PARTITION BY HASH (id) PARTITIONS 2",
            "ALTER TABLE t ADD e INT FIRST REMOVE PARTITIONING",
            "ALTER TABLE t CHANGE c cc BIGINT COMMENT 'PARTITION BY' PARTITION BY KEY (id) (PARTITION a, PARTITION b)",
            "ALTER TABLE t DROP COLUMN e, ENGINE = InnoDB PARTITION BY RANGE COLUMNS (id) (PARTITION p VALUES LESS"
            " THAN (MAXVALUE))",
            session=session,
        )  # fmt: skip
        assert shape(schema, "t") == ["id int NOT NULL", "cc bigint", "d datetime NOT NULL"]


def test_mariadb_convert_makes_a_table_of_a_partition_and_a_partition_of_a_table() -> None:
    schema = run(PARTITIONED, "ALTER TABLE t RENAME COLUMN d TO dd", "ALTER TABLE t CONVERT PARTITION p0 TO TABLE t0",
                 "ALTER TABLE t CONVERT PARTITION p1 TO TABLE e.t1", session=MARIADB)  # fmt: skip
    t, t0, t1 = schema.tables[("d", "t")], schema.tables[("d", "t0")], schema.tables[("e", "t1")]
    assert t0.columns == t1.columns == tuple(replace(c, aliases=()) for c in t.columns)  # new tables: no history
    assert t.columns[1].aliases == ("d",)
    assert (t0.primary_key, t0.indexes, t0.engine) == (t.primary_key, t.indexes, t.engine)
    result = read_ddl(schema, "ALTER TABLE t CONVERT TABLE e.t1 TO PARTITION p1 VALUES LESS THAN (20)", "d", MARIADB)
    assert not isinstance(result, Unreadable)
    assert [(c.database, c.table, c.definition) for c in result] == [("d", "t", t), ("e", "t1", None)]
    assert set(schema.tables) == {("d", "t"), ("d", "t0")}


def test_exchange_leaves_both_tables_as_they_were() -> None:
    schema = run(PARTITIONED, SWAP)
    result = read_ddl(schema, "ALTER TABLE t EXCHANGE PARTITION p1 WITH TABLE x WITH VALIDATION", "d", MYSQL)
    assert not isinstance(result, Unreadable)
    assert [(c.table, c.definition) for c in result] == [("t", schema.tables[("d", "t")])]  # x: rows, no definition


def test_admin_partition_commands_need_no_table() -> None:
    """ANALYZE/OPTIMIZE/REPAIR PARTITION of a table that does not exist: the servers log them
    (its error a row of their result), and they change no table, tracked or not."""
    schema = run("CREATE TABLE t (a INT)")
    for sql in ("ALTER TABLE gone OPTIMIZE PARTITION p0", "ALTER TABLE gone ANALYZE PARTITION p0, p1",
                "ALTER TABLE gone REPAIR PARTITION ALL QUICK", "ALTER TABLE t ANALYZE PARTITION p0"):  # fmt: skip
        assert read_ddl(schema, sql, "d", MYSQL) == [], sql
    rebuilt = read_ddl(schema, "ALTER TABLE gone REBUILD PARTITION p0", "d", MYSQL)
    assert isinstance(rebuilt, Unreadable) and rebuilt.untracked is not None  # logged only of a table that exists
    assert not schema.blocked


def test_tables_made_of_a_blocked_or_unreadable_table_are_unknown_too() -> None:
    schema = run(PARTITIONED, SWAP, session=MARIADB)
    unreadable = read_ddl(schema, "ALTER TABLE t CONVERT PARTITION p0 TO TABLE t0 junk", "d", MARIADB)
    assert isinstance(unreadable, Unreadable) and unreadable.tables == (("d", "t"), ("d", "t0"))
    schema.drop("d", "t")
    schema.blocked[("d", "t")] = Blocked("ALTER ...", "bin.000001:100", "why")
    for sql in ("ALTER TABLE t CONVERT PARTITION p0 TO TABLE t0", "ALTER TABLE t CONVERT TABLE x TO PARTITION p0"
                " VALUES LESS THAN (10)", "ALTER TABLE t DROP PARTITION p1, p2"):  # fmt: skip
        assert not isinstance(read_ddl(schema, sql, "d", MARIADB), Unreadable), sql
    assert set(schema.blocked) == {("d", "t"), ("d", "t0")} and set(schema.tables) == set()


def test_blocked_tables_move_with_renames_and_clear_on_drop_or_create() -> None:
    schema = run("CREATE TABLE t (a INT)")
    schema.drop("d", "t")
    schema.blocked[("d", "t")] = Blocked("ALTER ...", "bin.000001:100", "why")
    run_on = [("RENAME TABLE t TO u", {("d", "u")}), ("CREATE TABLE v LIKE u", {("d", "u"), ("d", "v")}),
              ("ALTER TABLE u ADD x INT, RENAME TO w", {("d", "w"), ("d", "v")}), ("DROP TABLE v", {("d", "w")}),
              ("CREATE TABLE w (b INT)", set())]  # fmt: skip
    for sql, blocked in run_on:
        assert not isinstance(read_ddl(schema, sql, "d", MYSQL), Unreadable)
        assert set(schema.blocked) == blocked, sql
    assert shape(schema, "w") == ["b int"]


def test_index_statements_change_indexes_and_mariadb_hidden_hash_columns() -> None:
    statements = ("CREATE TABLE t (a INT NOT NULL, b TEXT, c INT, PRIMARY KEY (a))", "CREATE INDEX ic ON t (c)",
                  "CREATE UNIQUE INDEX ub ON t (b)", "DROP INDEX ic ON t", "DROP INDEX `PRIMARY` ON t")  # fmt: skip
    mysql, mariadb = run(*statements[:2]), run(*statements, session=MARIADB)
    assert [i.name for i in mysql.tables[("d", "t")].indexes] == ["ic"]
    table = mariadb.tables[("d", "t")]
    assert [i.name for i in table.indexes] == ["ub"] and table.primary_key == ()
    assert shape(mariadb, "t") == ["a int NOT NULL", "b text utf8mb4", "c int", "DB_ROW_HASH_1 bigint"]


def test_mariadb_long_unique_keys_have_hidden_hash_columns() -> None:
    schema = run(
        "CREATE TABLE lu (a INT, b TEXT, c VARCHAR(3073) CHARACTER SET latin1, UNIQUE (b), UNIQUE KEY uc (c),"
        " d INT UNIQUE)",
        "ALTER TABLE lu ADD UNIQUE (a, d) USING HASH, ADD COLUMN e INT",
        session=MARIADB,
    )  # fmt: skip
    hashes = [c.name for c in schema.tables[("d", "lu")].columns if c.hidden]
    assert hashes == ["DB_ROW_HASH_1", "DB_ROW_HASH_2", "DB_ROW_HASH_3"]
    # a later ALTER rebuilds the keys: USING HASH of one a B-tree holds is forgotten (seen live)
    for sql, count in (("ALTER TABLE lu DROP INDEX b, MODIFY c VARCHAR(10)", 0), ("ALTER TABLE lu ENGINE=MEMORY", 0),
                       ("ALTER TABLE lu ENGINE=MyISAM, ADD f TEXT, ADD UNIQUE (f), DROP COLUMN a", 1)):  # fmt: skip
        assert not isinstance(read_ddl(schema, sql, "d", MARIADB), Unreadable)
        assert sum(c.hidden for c in schema.tables[("d", "lu")].columns) == count, sql
    assert [i.name for i in schema.tables[("d", "lu")].indexes] == ["uc", "d", "a", "f"]
    assert not any(c.hidden for c in run("CREATE TABLE m (b TEXT, UNIQUE (b(10)))").tables[("d", "m")].columns)


def test_database_defaults_come_from_the_server_when_unsaid() -> None:
    latin = Session(False, 80400, server_charset="latin1")
    schema = run("CREATE DATABASE e", "CREATE TABLE e.t (a CHAR(1))", "ALTER DATABASE e CHARACTER SET utf8mb4",
                 "CREATE TABLE e.u (a CHAR(1))", session=latin)  # fmt: skip
    assert (shape(schema, "t", "e"), shape(schema, "u", "e")) == (["a char(1) latin1"], ["a char(1) utf8mb4"])


WORDS = ["CREATE", "TABLE", "ALTER", "ADD", "DROP", "COLUMN", "(", ")", ",", "INT", "VARCHAR(3)", "t", "a", "b",
         "PRIMARY", "KEY", "FIRST", "AFTER", "CHANGE", "MODIFY", "RENAME", "TO", "IF", "EXISTS", "NOT", "'x", "`q",
         "/*!", "*/", "ENUM('a'", "DEFAULT", "SYSTEM", "VERSIONING", "WITH", "LIKE", "SELECT", "1.5e", "0x1",
         "\\", "PARTITION", "BY", "HASH", "(a)", "REMOVE", "PARTITIONING", "CONVERT", "EXCHANGE", "ALL", "INTO",
         "VALUES", "LESS", "THAN", "MAXVALUE", "SYSTEM_TIME", "INTERVAL"]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=14))
def test_no_statement_raises_anything_but_a_result(words: list[str]) -> None:
    schema = run("CREATE TABLE t (a INT, b INT)")
    result = read_ddl(schema, " ".join(words), "d", MYSQL)
    assert isinstance(result, (list, Unreadable))


def test_tokens_of_odd_literals() -> None:
    texts = [t.text for t in tokenize("x'4142' 0x43 b'1000001' 1e5 1c .5 7.4 'it''s' \"a\\\"b\"")]
    assert texts == ["AB", "C", "A", "1e5", "1c", ".5", "7.4", "it's", 'a"b']


def test_column_values_round_trip_through_json() -> None:
    from connector.schema.model import Table  # noqa: PLC0415

    table = run("CREATE TABLE t (a VARCHAR(3) COMPRESSED, b INT) WITH SYSTEM VERSIONING",
                session=MARIADB).tables[("d", "t")]  # fmt: skip
    assert Table.from_json(table.to_json()) == table
    assert "period" not in table.to_json()["columns"][0] and table.to_json()["columns"][0]["compressed"] is True
    assert Column("x", "int") == Table.from_json(run("CREATE TABLE x (x INT)").tables[("d", "x")].to_json()).columns[0]
