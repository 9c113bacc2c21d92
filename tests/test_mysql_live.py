"""MySQL-only features, streamed by the replica client and checked against the server's own output.

The server runs production's defaults: GTIDs on, binlog_row_image=FULL and binlog_row_metadata=MINIMAL,
so the binlog names no column and carries no ENUM/SET label: both come from Sluice's schema history.
The connector streams as `sluice` (REPLICATION SLAVE, REPLICATION CLIENT, SELECT; caching_sha2_password);
the tests write as root. Every value a message carries is compared with what MySQL itself shows
(SELECT, CAST(j AS CHAR), information_schema, performance_schema, SHOW BINLOG EVENTS), never with
another reading by Sluice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pymysql
import pytest

from connector.config import Config
from connector.position import Position
from connector.replica.client import open_connection
from connector.replica.server import master_position
from connector.schema.history import MemoryHistoryStore
from connector.startup import Prepared, prepare
from connector.stream import ChangeStream
from tests.support.live import RUN, connect, fresh_database, last_gtid, live_config, row_metadata
from tests.support.streams import FAST, Consumer, collect, run_to

pytestmark = [pytest.mark.live, pytest.mark.servers("mysql")]

Message = dict[str, Any]
Row = dict[str, str | None]
Cursor = pymysql.cursors.Cursor
Items = tuple[tuple[str, str | None], ...]

# Both kinds of TABLE_MAP: production's MINIMAL (names and labels from the history) and FULL.
METADATA = pytest.mark.parametrize("metadata", ["MINIMAL", "FULL"])


# -- streaming -------------------------------------------------------------------------------


def started(db: str, server_id: int, **source: Any) -> tuple[Config, Prepared]:
    """A connector capturing `db` on its first start: schema read from the server, position now."""
    config = live_config([rf"{db}\..*"], server_id=server_id, **source)
    return config, prepare(config, MemoryHistoryStore())


def streamed(config: Config, prepared: Prepared, end: Position) -> list[Message]:
    """The row messages from the prepared start through the transaction that reaches `end`."""
    source = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(), FAST)
    return [m for m in collect(source, prepared.start, end) if not m["isDdl"]]


def binlog_events(start: Position, end: Position) -> list[tuple[str, int]]:
    """(Event_type, size) of each event SHOW BINLOG EVENTS lists from `start` up to `end`."""
    events: list[tuple[str, int]] = []
    with connect().cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [str(r[0]) for r in cur.fetchall() if start.file <= str(r[0]) <= end.file]
        for file in files:
            cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(start.pos) if file == start.file else 4}", (file,))
            rows = cur.fetchall()  # Log_name, Pos, Event_type, Server_id, End_log_pos, Info
            events += [(str(r[2]), int(r[4]) - int(r[1])) for r in rows if file < end.file or int(r[1]) < end.pos]
    return events


# -- the server's view -----------------------------------------------------------------------

# The server's text for each type, the way the README says Sluice renders it: JSON as MySQL prints
# it, GEOMETRY as the hex of its stored bytes (SRID first), VECTOR as VECTOR_TO_STRING writes it.
_GEOMETRIES = ("geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
               "geomcollection")  # fmt: skip
_SHOWN_AS = {"vector": "VECTOR_TO_STRING({})", **dict.fromkeys(_GEOMETRIES, "LOWER(HEX({}))")}


def column_types(cur: Cursor, db: str, table: str) -> list[tuple[str, str]]:
    """(name, DATA_TYPE) of every column information_schema lists, invisible ones too, in order."""
    cur.execute(
        "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
        " ORDER BY ORDINAL_POSITION",
        (db, table),
    )
    return [(str(name), str(kind)) for name, kind in cur.fetchall()]


def server_rows(cur: Cursor, db: str, table: str, key: str) -> dict[int, Row]:
    """The table as the server shows it now, by the integer column `key`."""
    columns = column_types(cur, db, table)
    shown = ", ".join(_SHOWN_AS.get(kind, "CAST({} AS CHAR)").format(f"`{name}`") for name, kind in columns)
    cur.execute(f"SELECT {shown} FROM `{db}`.`{table}`")
    names = [name for name, _ in columns]
    rows = [dict(zip(names, (None if v is None else str(v) for v in values))) for values in cur.fetchall()]
    return {int(str(row[key])): row for row in rows}


@dataclass(frozen=True, slots=True)
class Change:
    """A row change as its message must carry it: the row with names in column order, and for an
    UPDATE the old values of the columns that changed."""

    type: str
    data: Items
    old: Items | None = None


def change_of(message: Message) -> Change:
    old = tuple(message["old"][0].items()) if message["old"] else None
    return Change(message["type"], tuple(message["data"][0].items()), old)


def row_changes(before: dict[int, Row], after: dict[int, Row]) -> list[Change]:
    """What one statement changed, in key order: the order InnoDB logs rows inserted in key order
    and rows updated or deleted by a scan of the primary key."""
    changes = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old is None and new is not None:
            changes.append(Change("INSERT", tuple(new.items())))
        elif new is None and old is not None:
            changes.append(Change("DELETE", tuple(old.items())))
        elif old is not None and new is not None and old != new:
            changed = tuple((name, old[name]) for name, value in new.items() if old.get(name) != value)
            changes.append(Change("UPDATE", tuple(new.items()), changed))
    return changes


class Recorder:
    """A writing session that reads the table before and after each statement and keeps the
    row changes the binlog must carry, as the server showed them at that moment."""

    def __init__(self, db: str, table: str, key: str = "id", session: Sequence[str] = ()) -> None:
        self.db, self.table, self.key = db, table, key
        self.conn = connect(db)
        self.cur = self.conn.cursor()
        self.expected: list[Change] = []
        for statement in session:
            self.cur.execute(statement)

    def rows(self) -> dict[int, Row]:
        return server_rows(self.cur, self.db, self.table, self.key)

    def run(self, statement: str, args: object = None) -> None:
        before = self.rows()
        self.cur.execute(statement, args)
        self.expected += row_changes(before, self.rows())

    def plain(self, statement: str) -> None:
        """A statement that changes no row of the table (DDL, BEGIN, COMMIT)."""
        self.cur.execute(statement)

    def end(self) -> Position:
        return master_position(self.conn)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:120] + f"... ({len(text)} chars)"


def _difference(got: Change, want: Change) -> str:
    if got.type != want.type or [n for n, _ in got.data] != [n for n, _ in want.data]:
        return f"{got.type} {[n for n, _ in got.data]}; the server: {want.type} {[n for n, _ in want.data]}"
    wrong = [f"{n}={_short(g)}, the server {_short(w)}" for (n, g), (_, w) in zip(got.data, want.data) if g != w]
    if got.old != want.old:
        wrong.append(f"old={_short(got.old)}, the server {_short(want.old)}")
    return f"{got.type} {got.data[0]}: " + "; ".join(wrong)


def assert_changes(messages: list[Message], expected: list[Change]) -> None:
    """The messages are the server's row changes, one for one, names and values."""
    got = [change_of(m) for m in messages]
    problems = [f"message {i + 1}: {_difference(g, w)}" for i, (g, w) in enumerate(zip(got, expected)) if g != w]
    if len(got) != len(expected):
        problems.append(f"{len(got)} messages for {len(expected)} row changes")
    assert not problems, "\n".join(problems[:25])


@contextlib.contextmanager
def global_variable(name: str, value: str) -> Iterator[None]:
    with connect().cursor() as cur:
        cur.execute(f"SELECT @@global.{name}")
        row = cur.fetchone()
        assert row is not None
        cur.execute(f"SET GLOBAL {name} = %s", (value,))
    try:
        yield
    finally:
        with connect().cursor() as cur:
            cur.execute(f"SET GLOBAL {name} = %s", (row[0],))


# -- binary JSON -----------------------------------------------------------------------------

JSON_TABLE = "CREATE TABLE {db}.t (id INT PRIMARY KEY, j JSON)"

# One document per node type of sql-common/json_binary.cc and per edge of its widths: literals;
# int16/int32/int64 and uint16/uint32/uint64 at their bounds, alone and inside containers (a small
# container inlines only 16-bit values); doubles in each notation my_gcvt picks, -0.0 included;
# strings with every escape MySQL writes, characters it leaves alone (DEL, U+2028) and non-BMP ones;
# object keys, which binary JSON sorts by length, then bytes; empty and 100-deep containers.
JSON_NODES = [
    "JSON_OBJECT('a', 1, 'b', JSON_ARRAY(1, 2), 'c', JSON_OBJECT())",
    "JSON_ARRAY(1, 'x', NULL, TRUE, FALSE, JSON_ARRAY(), 1.5)",
    "CAST('true' AS JSON)", "CAST('false' AS JSON)", "CAST('null' AS JSON)",
    "CAST('-32768' AS JSON)", "CAST('32767' AS JSON)", "CAST('-32769' AS JSON)", "CAST('32768' AS JSON)",
    "CAST('-2147483648' AS JSON)", "CAST('2147483647' AS JSON)", "CAST('-2147483649' AS JSON)",
    "CAST('2147483648' AS JSON)", "CAST('-9223372036854775808' AS JSON)", "CAST('9223372036854775807' AS JSON)",
    "CAST('9223372036854775808' AS JSON)", "CAST('18446744073709551615' AS JSON)",
    "CAST(CAST(65535 AS UNSIGNED) AS JSON)", "CAST(CAST(65536 AS UNSIGNED) AS JSON)",
    "CAST(CAST(4294967295 AS UNSIGNED) AS JSON)", "CAST(CAST(4294967296 AS UNSIGNED) AS JSON)",
    "JSON_ARRAY(-32768, 32767, -32769, 2147483647, -2147483649, CAST(65535 AS UNSIGNED),"
    " CAST(4294967295 AS UNSIGNED), 9223372036854775807, 18446744073709551615, -9223372036854775808)",
    "JSON_OBJECT('i16', -32768, 'u16', CAST(65535 AS UNSIGNED), 'i32', 2147483647, 'u32',"
    " CAST(4294967295 AS UNSIGNED), 'i64', -9223372036854775808, 'u64', 18446744073709551615, 't', TRUE,"
    " 'f', FALSE, 'n', NULL)",
    "CAST('1e-5' AS JSON)", "CAST('2.5e15' AS JSON)", "CAST('-0.0' AS JSON)", "CAST('0.1' AS JSON)",
    "CAST('1.0' AS JSON)", "CAST('1e15' AS JSON)", "CAST('1e16' AS JSON)", "CAST('1e-15' AS JSON)",
    "CAST('1e-16' AS JSON)", "CAST('1234567890123456.8' AS JSON)", "CAST('1.7976931348623157e308' AS JSON)",
    "CAST('5e-324' AS JSON)", "CAST('-1.5e-300' AS JSON)", "CAST('99999999999999999999' AS JSON)",
    "JSON_ARRAY(-0.0e0, 1e-5, 2.5e15, PI(), -1e100)",
    r"""CAST('"q\\" b\\\\ n\\n t\\t r\\r b\\b f\\f u\\u0001 \\u001f / \\u007f \\u2028 é ☃ 😀 𝄞"' AS JSON)""",
    "JSON_QUOTE('')", "JSON_QUOTE(REPEAT('x', 200))",
    "JSON_OBJECT('😀', 'x', 'é', 'y', 'a\"b', 'z', '', 'empty key', 'ab', 1, 'b', 2, 'aa', 3)",
    "JSON_OBJECT()", "JSON_ARRAY()", """CAST('[{}, [], {"a": []}, [[]]]' AS JSON)""",
    "CAST('" + "[" * 100 + "]" * 100 + "' AS JSON)",
    "CAST('" + '{"a": ' * 98 + '{"deep": [1, "x"]}' + "}" * 98 + "' AS JSON)",
    "NULL",
]  # fmt: skip


def json_rows(exprs: Sequence[str]) -> str:
    return ", ".join(f"({i}, {expr})" for i, expr in enumerate(exprs, 1))


def json_round_trip(rec: Recorder) -> None:
    """Each document as a before image and an after image too: wrapped in an array (values that
    were alone are now inside a container), then deleted."""
    rec.run("UPDATE t SET j = JSON_ARRAY(j, 7) WHERE JSON_DEPTH(j) < 100")  # 100 is MySQL's deepest
    rec.run("DELETE FROM t")


def test_json_of_every_node_type_streams_as_mysql_prints_it() -> None:
    fresh_database("jnodes", JSON_TABLE)
    config, prepared = started("jnodes", 8101)
    rec = Recorder("jnodes", "t")
    rec.run("INSERT INTO t VALUES " + json_rows(JSON_NODES))
    json_round_trip(rec)
    assert_changes(streamed(config, prepared, rec.end()), rec.expected)


def large_documents() -> list[str]:
    """Documents over 64 KiB, which MySQL stores in the large object/array format (32-bit offsets,
    32-bit values inlined), with small containers inside them."""
    mixed = {f"k{i:05d}": [i * 100000, "s" * (i % 7), {"n": i, "t": True}, None, 1.5] for i in range(2000)}
    numbers = list(range(-20000 * 70001, 20000 * 70001, 70001))
    long_string = {"s": "é😀\n" * 20000, "n": 1}  # a string whose length takes 3 bytes
    nested = [{"big": list(range(12000)), "small": {"a": [1, 2]}}, "x" * 70000]
    return [json.dumps(doc, ensure_ascii=False) for doc in (mixed, numbers, long_string, nested)]


def test_json_documents_over_64_kib_stream_as_mysql_prints_them() -> None:
    fresh_database("jlarge", JSON_TABLE)
    config, prepared = started("jlarge", 8102)
    rec = Recorder("jlarge", "t")
    for i, doc in enumerate(large_documents(), 1):
        rec.run("INSERT INTO t VALUES (%s, CAST(%s AS JSON))", (i, doc))
    rec.cur.execute("SELECT MIN(JSON_STORAGE_SIZE(j)) FROM t")
    size = rec.cur.fetchone()
    assert size is not None and int(size[0]) > 0xFFFF, "a document fits the small format"
    json_round_trip(rec)
    assert_changes(streamed(config, prepared, rec.end()), rec.expected)


# Opaque values (JSONB_OPAQUE): a field type byte and the field's binary form, which MySQL prints as
# a string: temporal types as text (always 6 fractional digits for TIME and DATETIME), DECIMAL as
# a number with its scale, anything else as "base64:type<field type>:...".
JSON_OPAQUES = [
    "JSON_OBJECT('d', CAST('2024-02-29' AS DATE))", "CAST(CAST('2024-02-29' AS DATE) AS JSON)",
    "CAST(CAST('-838:59:59' AS TIME) AS JSON)", "CAST(CAST('12:34:56.789' AS TIME(3)) AS JSON)",
    "CAST(CAST('00:00:00' AS TIME) AS JSON)", "CAST(CAST('-00:00:01.5' AS TIME(1)) AS JSON)",
    "CAST(CAST('2024-02-29 23:59:59.123456' AS DATETIME(6)) AS JSON)",
    "CAST(CAST('1000-01-01 00:00:00' AS DATETIME) AS JSON)", "CAST(TIMESTAMP'2024-02-29 01:02:03' AS JSON)",
    "CAST(CAST('123.4500' AS DECIMAL(10,4)) AS JSON)", "CAST(CAST('-0.01' AS DECIMAL(5,2)) AS JSON)",
    "CAST(CAST(1 AS DECIMAL(10,2)) AS JSON)", "CAST(CAST('-99999999.999999999' AS DECIMAL(17,9)) AS JSON)",
    "CAST(CAST(x'00ff' AS BINARY) AS JSON)", "CAST(CAST(x'' AS BINARY) AS JSON)", "CAST(x'0102' AS JSON)",
    "CAST(b'101' AS JSON)", "JSON_OBJECT('bytes', CAST(REPEAT(x'ab', 300) AS BINARY))",
    # mysys base64_encode breaks its lines after 76 characters (57 bytes): 57 bytes fill one line.
    "CAST(CAST(REPEAT(x'cd', 57) AS BINARY) AS JSON)", "CAST(CAST(REPEAT(x'cd', 58) AS BINARY) AS JSON)",
    "JSON_ARRAY(CAST('2024-02-29' AS DATE), CAST(1.5 AS DECIMAL(3,1)), CAST(x'ab' AS BINARY),"
    " CAST('10:00' AS TIME))",
]  # fmt: skip

# Columns whose values JSON_ARRAY turns into opaque values of their own field types (BIT, BLOB,
# VARBINARY, TIMESTAMP) or into other nodes (YEAR, ENUM, SET, FLOAT, GEOMETRY).
OPAQUE_SOURCE = (
    "CREATE TABLE {db}.src (b BIT(10), bl BLOB, vb VARBINARY(8), y YEAR, e ENUM('x', 'y'), s SET('p', 'q'),"
    " f FLOAT, tx TEXT, dt DATETIME(3), ts TIMESTAMP(2), g GEOMETRY)"
)
OPAQUE_SOURCE_ROW = (
    "INSERT INTO {db}.src VALUES (b'1011', x'00ff10', x'0a0b', 2024, 'y', 'p,q', 1.25, 'txt',"
    " '2024-02-29 10:11:12.345', '2024-02-29 10:11:12.34', ST_GeomFromText('LINESTRING(0 0, 1 2)'))"
)


def test_json_opaque_values_stream_as_mysql_prints_them() -> None:
    fresh_database("jopaque", JSON_TABLE, OPAQUE_SOURCE, OPAQUE_SOURCE_ROW)
    config, prepared = started("jopaque", 8103)
    rec = Recorder("jopaque", "t")
    rec.run("INSERT INTO t VALUES " + json_rows(JSON_OPAQUES))
    rec.run("INSERT INTO t SELECT 1000, JSON_ARRAY(b, bl, vb, y, e, s, f, tx, dt, ts, g) FROM src")
    json_round_trip(rec)
    assert_changes(streamed(config, prepared, rec.end()), rec.expected)


# A DECIMAL of an expression keeps a precision above the column limit of 65 in its opaque value:
# MySQL writes DECIMAL(66,30) and DECIMAL(72,0) headers for these (Json_decimal::get_binary) and
# reads them back.
JSON_WIDE_DECIMALS = [
    "CAST(CAST('12345678901234567890123456789012345.123456789012345678901234567890' AS DECIMAL(65,30)) AS JSON)",
    "CAST(CAST(REPEAT('9', 65) AS DECIMAL(65,0)) AS JSON)",
    "JSON_ARRAY(CAST(CONCAT('-', REPEAT('9', 35), '.', REPEAT('9', 30)) AS DECIMAL(65,30)))",
]


def test_json_opaque_decimals_of_65_digits_stream_as_mysql_prints_them() -> None:
    fresh_database("jwide", JSON_TABLE)
    config, prepared = started("jwide", 8104)
    rec = Recorder("jwide", "t")
    rec.run("INSERT INTO t VALUES " + json_rows(JSON_WIDE_DECIMALS))
    json_round_trip(rec)
    assert_changes(streamed(config, prepared, rec.end()), rec.expected)


# -- multi-valued indexes ----------------------------------------------------------------------

# One multi-valued index per type MySQL 9.7.4 can cast a JSON array to. It refuses DOUBLE, FLOAT,
# YEAR, JSON, BINARY/CHAR without a length and a CHARACTER SET ("This version of MySQL doesn't
# yet support 'CAST-ing data to array of DOUBLE'"). Each index adds a hidden virtual column
# that information_schema and the binlog leave out.
TYPED_ARRAYS = (
    "CREATE TABLE {db}.{table} (id INT PRIMARY KEY, j JSON, tag VARCHAR(20), n INT,"
    " INDEX u ((CAST(j->'$.u' AS UNSIGNED ARRAY))), INDEX s ((CAST(j->'$.s' AS SIGNED ARRAY))),"
    " INDEX c ((CAST(j->'$.c' AS CHAR(10) ARRAY))), INDEX d ((CAST(j->'$.d' AS DATE ARRAY))),"
    " INDEX dt ((CAST(j->'$.dt' AS DATETIME(6) ARRAY))), INDEX tm ((CAST(j->'$.t' AS TIME ARRAY))),"
    " INDEX de ((CAST(j->'$.dec' AS DECIMAL(10,2) ARRAY))), INDEX bi ((CAST(j->'$.bin' AS BINARY(8) ARRAY))),"
    " INDEX mixed (n, (CAST(j->'$.u' AS UNSIGNED ARRAY))), KEY (tag))"
)
TYPED_DOC = json.dumps({
    "u": [1, 18446744073709551615], "s": [-5, 7], "c": ["x", "yy"], "d": ["2024-02-29"],
    "dt": ["2024-02-29 01:02:03.456789"], "t": ["12:34:56"], "dec": [1.25, -3.5], "bin": ["ab"],
})  # fmt: skip


def typed_array_workload(rec: Recorder) -> None:
    rec.run(f"INSERT INTO {rec.table} VALUES (1, %s, 'one', 10), (2, %s, 'two', 20), (3, NULL, NULL, NULL)",
            (TYPED_DOC, '{"u": [3]}'))  # fmt: skip
    rec.run(f"UPDATE {rec.table} SET n = n + 1, j = JSON_SET(j, '$.u', JSON_ARRAY(9, 10)) WHERE id = 2")
    rec.run(f"UPDATE {rec.table} SET tag = 'uno' WHERE id = 1")
    # Another hidden column, then a visible one after it: neither may shift the columns.
    rec.plain(f"ALTER TABLE {rec.table} ADD INDEX late ((CAST(j->'$.late' AS UNSIGNED ARRAY))),"
              " ADD COLUMN after_index INT DEFAULT 5")  # fmt: skip
    rec.run(f"""INSERT INTO {rec.table} (id, j, tag, n) VALUES (4, '{{"late": [1, 2]}}', 'four', 40)""")
    rec.run(f"UPDATE {rec.table} SET j = JSON_ARRAY_APPEND(j, '$.u', 11), after_index = id WHERE id IN (1, 2)")
    rec.run(f"DELETE FROM {rec.table} WHERE id IN (1, 3)")


@METADATA
def test_tables_with_multi_valued_indexes_stream_only_their_columns(metadata: str) -> None:
    fresh_database("typed", TYPED_ARRAYS.format(db="typed", table="captured"))
    config, prepared = started("typed", 8105)
    with row_metadata(metadata):
        captured = Recorder("typed", "captured")
        typed_array_workload(captured)
        replayed = Recorder("typed", "replayed")  # created after the start: known from its CREATE alone
        replayed.plain(TYPED_ARRAYS.format(db="typed", table="replayed"))
        typed_array_workload(replayed)
        end = replayed.end()
    messages = streamed(config, prepared, end)
    assert_changes([m for m in messages if m["table"] == "captured"], captured.expected)
    assert_changes([m for m in messages if m["table"] == "replayed"], replayed.expected)


# -- partial JSON updates ----------------------------------------------------------------------

PARTIAL_TABLE = "CREATE TABLE {db}.t (id INT PRIMARY KEY, j JSON, k JSON, n INT)"
PARTIAL_ROWS = (
    """INSERT INTO {db}.t VALUES (1, '{{"a": 1, "b": [1, 2, 3], "c": {{"d": "x"}}}}', '[1]', 1),"""
    """ (2, '{{"a": "long string here", "b": []}}', NULL, 2)"""
)
PARTIAL_SESSION = "SET SESSION binlog_row_value_options = 'PARTIAL_JSON'"


def partial_update_types(start: Position, end: Position) -> list[str]:
    return [kind for kind, _ in binlog_events(start, end) if kind.startswith("Update_rows")]


def test_partial_json_updates_with_a_full_image_stream_the_whole_new_document() -> None:
    fresh_database("pfull", PARTIAL_TABLE, PARTIAL_ROWS)
    config, prepared = started("pfull", 8106)
    rec = Recorder("pfull", "t", session=[PARTIAL_SESSION])
    for statement in (
        "UPDATE t SET j = JSON_SET(j, '$.a', 2) WHERE id = 1",
        "UPDATE t SET j = JSON_SET(j, '$.new', 'v', '$.b[1]', 20) WHERE id = 1",
        "UPDATE t SET j = JSON_REPLACE(j, '$.c.d', REPEAT('y', 40)), n = n + 1 WHERE id = 1",
        "UPDATE t SET j = JSON_REMOVE(j, '$.b[0]', '$.c') WHERE id = 1",
        "UPDATE t SET j = JSON_SET(JSON_REMOVE(j, '$.a'), '$.b[5]', TRUE), k = JSON_SET(k, '$[0]', 'k')",
        "UPDATE t SET j = JSON_SET(j, '$.b', JSON_ARRAY(1, 2)), k = JSON_ARRAY(9) WHERE id = 1",
        "UPDATE t SET k = JSON_REPLACE(k, '$[0]', 'é😀') WHERE id = 1",
    ):
        rec.run(statement)
    end = rec.end()
    # The server logged them as PARTIAL_UPDATE_ROWS_EVENTs: diffs on the before image.
    assert set(partial_update_types(prepared.start, end)) == {"Update_rows_partial"}
    assert_changes(streamed(config, prepared, end), rec.expected)


# Without the before image (binlog_row_image=MINIMAL) the new document cannot be rebuilt: the
# README says the diffs are kept as JSON_REPLACE(...) text (jsonb.JsonPartial: nested
# JSON_REPLACE / JSON_INSERT / JSON_REMOVE calls on the column, each value as CAST(... AS JSON)).
# Each statement, and the exact `j` text that must stream for it.
MINIMAL_PARTIALS = [
    ("UPDATE t SET j = JSON_SET(j, '$.a', 2) WHERE id = 1",
     "JSON_REPLACE(`j`, '$.a', CAST('2' AS JSON))"),
    ("UPDATE t SET j = JSON_SET(j, '$.new', 'v', '$.b[1]', 20) WHERE id = 1",
     """JSON_REPLACE(JSON_INSERT(`j`, '$.new', CAST('"v"' AS JSON)), '$.b[1]', CAST('20' AS JSON))"""),
    ("UPDATE t SET j = JSON_REPLACE(j, '$.c.d', 'y'), n = n + 1 WHERE id = 1",
     """JSON_REPLACE(`j`, '$.c.d', CAST('"y"' AS JSON))"""),
    ("UPDATE t SET j = JSON_REMOVE(j, '$.b[0]', '$.c') WHERE id = 1",
     "JSON_REMOVE(JSON_REMOVE(`j`, '$.b[0]'), '$.c')"),
    ("""UPDATE t SET j = JSON_SET(j, '$."it''s k"', 'a"b\\\\c', '$.e', 'é😀') WHERE id = 1""",
     """JSON_INSERT(JSON_INSERT(`j`, '$."it\\'s k"', CAST('"a\\\\"b\\\\\\\\c"' AS JSON)), '$.e',"""
     """ CAST('"é😀"' AS JSON))"""),
    ("UPDATE t SET j = JSON_ARRAY(1, 2) WHERE id = 1", "[1, 2]"),  # not a partial update: the whole value
]  # fmt: skip


def evaluated(cur: Cursor, expression: str, before: str) -> str:
    """The server's text of a streamed JSON expression over the column's value before the update."""
    cur.execute("SET @before = %s", (before,))
    cur.execute(f"SELECT CAST({expression} AS CHAR) FROM (SELECT CAST(@before AS JSON) AS j) AS row_before")
    row = cur.fetchone()
    assert row is not None
    return str(row[0])


def test_partial_json_updates_with_a_minimal_image_stream_diff_expressions() -> None:
    fresh_database("pmin", PARTIAL_TABLE, PARTIAL_ROWS)
    config, prepared = started("pmin", 8107)
    rec = Recorder("pmin", "t", session=[PARTIAL_SESSION, "SET SESSION binlog_row_image = 'MINIMAL'"])
    documents = [str(rec.rows()[1]["j"])]
    changed: list[Row] = []
    for statement, _ in MINIMAL_PARTIALS:
        before = rec.rows()[1]
        rec.cur.execute(statement)
        after = rec.rows()[1]
        documents.append(str(after["j"]))
        # A MINIMAL image: the primary key before, the changed columns after.
        changed.append({"id": "1", **{name: value for name, value in after.items() if before[name] != value}})
    end = rec.end()
    assert partial_update_types(prepared.start, end) == ["Update_rows_partial"] * len(MINIMAL_PARTIALS)
    messages = streamed(config, prepared, end)
    expected = [{**row, "j": text} for row, (_, text) in zip(changed, MINIMAL_PARTIALS)]
    assert [(m["type"], m["data"], m["old"]) for m in messages] == [("UPDATE", [row], [{}]) for row in expected]
    # Each expression, applied to the document before it, gives what the server shows after it.
    for message, old_doc, new_doc in zip(messages, documents, documents[1:]):
        text = message["data"][0]["j"]
        assert (evaluated(rec.cur, text, old_doc) if text.startswith("JSON_") else text) == new_doc


# -- compressed transactions -------------------------------------------------------------------

COMPRESSION_SESSION = "SET SESSION binlog_transaction_compression = ON"


def test_many_small_compressed_transactions_each_arrive_once_with_their_gtid() -> None:
    fresh_database("zsmall", "CREATE TABLE {db}.t (id INT PRIMARY KEY, s VARCHAR(50), n BIGINT)")
    config, prepared = started("zsmall", 8108)
    rec = Recorder("zsmall", "t", session=[COMPRESSION_SESSION])
    rng = random.Random(41)
    gtids: list[str] = []
    next_id = 1
    for _ in range(150):
        rec.plain("BEGIN")
        first = len(rec.expected)
        for _ in range(rng.randint(1, 3)):
            n = rng.randrange(-(2**63), 2**63)  # all of BIGINT
            rec.run("INSERT INTO t VALUES (%s, %s, %s)", (next_id, f"row {next_id} é😀", n))
            next_id += 1
        if rng.random() < 0.3:
            rec.run("UPDATE t SET n = n DIV 2, s = CONCAT(s, '!') WHERE id = %s", (rng.randrange(1, next_id),))
        rec.plain("COMMIT")
        gtids += [last_gtid(rec.conn)] * (len(rec.expected) - first)
    end = rec.end()
    kinds = [kind for kind, _ in binlog_events(prepared.start, end)]
    assert kinds.count("Transaction_payload") == 150, "the server did not compress every transaction"
    messages = streamed(config, prepared, end)
    assert_changes(messages, rec.expected)
    assert [m["gtid"] for m in messages] == gtids


def test_a_compressed_transaction_over_16_mib_arrives_whole() -> None:
    fresh_database("zbig", "CREATE TABLE {db}.t (id INT PRIMARY KEY, b LONGBLOB)")
    config, prepared = started("zbig", 8109)
    rng = random.Random(43)
    blobs = [rng.randbytes(5 * 1024 * 1024 + i) for i in range(4)]  # random: zstd cannot shrink them
    conn = connect("zbig")
    with conn.cursor() as cur:
        cur.execute(COMPRESSION_SESSION)
        cur.execute("BEGIN")
        for i, blob in enumerate(blobs):
            cur.execute("INSERT INTO t VALUES (%s, %s)", (i, blob))
        cur.execute("COMMIT")
        cur.execute("SELECT id, LENGTH(b), SHA2(b, 256) FROM t ORDER BY id")
        server = [(str(i), int(length), str(digest)) for i, length, digest in cur.fetchall()]
    end = master_position(conn)
    payloads = [size for kind, size in binlog_events(prepared.start, end) if kind == "Transaction_payload"]
    assert len(payloads) == 1 and payloads[0] > 16 * 1024 * 1024, f"payload sizes {payloads}"
    messages = streamed(config, prepared, end)
    assert [m["type"] for m in messages] == ["INSERT"] * 4
    got = [(m["data"][0]["id"], len(m["data"][0]["b"]), m["data"][0]["b"].encode("latin-1")) for m in messages]
    assert [(i, n, hashlib.sha256(b).hexdigest()) for i, n, b in got] == server


# -- instant ADD/DROP COLUMN -------------------------------------------------------------------


def test_rows_of_every_row_version_stream_with_the_columns_of_their_moment() -> None:
    fresh_database(
        "instant", "CREATE TABLE {db}.t (id INT PRIMARY KEY, a VARCHAR(10), b INT, c DATETIME(3))",
        "INSERT INTO {db}.t VALUES (1, 'one', 10, '2024-01-01 00:00:00.5')",
    )  # fmt: skip
    config, prepared = started("instant", 8110)
    rec = Recorder("instant", "t")
    rec.run("INSERT INTO t VALUES (2, 'two', 20, NULL)")
    rec.plain("ALTER TABLE t ADD COLUMN d VARCHAR(10) NOT NULL DEFAULT 'dflt', ALGORITHM=INSTANT")
    rec.run("INSERT INTO t VALUES (3, 'three', 30, NULL, 'given')")
    rec.plain("ALTER TABLE t ADD COLUMN e INT DEFAULT 7 AFTER id, ALGORITHM=INSTANT")
    rec.run("INSERT INTO t (id, a) VALUES (4, 'four')")
    rec.plain("ALTER TABLE t DROP COLUMN b, ALGORITHM=INSTANT")
    rec.run("UPDATE t SET a = CONCAT(a, '!')")  # rows of each of the three versions before
    rec.plain("ALTER TABLE t DROP COLUMN a, ADD COLUMN f ENUM('x', 'y') DEFAULT 'y' FIRST, ALGORITHM=INSTANT")
    rec.run("UPDATE t SET e = e + id")
    rec.run("DELETE FROM t WHERE id IN (1, 3)")
    end = rec.end()
    rec.cur.execute("SELECT TOTAL_ROW_VERSIONS FROM information_schema.INNODB_TABLES WHERE NAME = 'instant/t'")
    assert rec.cur.fetchall() == ((4,),), "every ALTER was instant and made a row version"
    assert_changes(streamed(config, prepared, end), rec.expected)


# -- invisible columns and generated invisible primary keys ------------------------------------

GIPK_SESSION = "SET SESSION sql_generate_invisible_primary_key = ON"
GIPK_TABLE = "CREATE TABLE {table} (a VARCHAR(10), b INT INVISIBLE, c INT)"


def gipk_workload(rec: Recorder) -> None:
    rec.run(f"INSERT INTO {rec.table} (a, b, c) VALUES ('y', 3, 4), ('z', 5, 6)")
    rec.run(f"UPDATE {rec.table} SET b = b + 1")
    rec.plain(f"ALTER TABLE {rec.table} ALTER COLUMN c SET INVISIBLE")
    rec.run(f"INSERT INTO {rec.table} (a, b, c) VALUES ('v', 9, 10)")
    rec.run(f"DELETE FROM {rec.table} WHERE a = 'z'")


def gipk_columns(db: str, table: str) -> list[tuple[str, str, str]]:
    with connect().cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_KEY, EXTRA FROM information_schema.COLUMNS"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        return [(str(n), str(k), str(e)) for n, k, e in cur.fetchall()]


def test_a_generated_invisible_primary_key_streams_as_the_key() -> None:
    fresh_database("gipk")
    with connect("gipk").cursor() as cur:
        cur.execute(GIPK_SESSION)
        cur.execute(GIPK_TABLE.format(table="captured"))
        cur.execute("INSERT INTO captured (a, b, c) VALUES ('x', 1, 2)")
    config, prepared = started("gipk", 8111)
    captured = Recorder("gipk", "captured", key="my_row_id", session=[GIPK_SESSION])
    gipk_workload(captured)
    replayed = Recorder("gipk", "replayed", key="my_row_id", session=[GIPK_SESSION])
    replayed.plain(GIPK_TABLE.format(table="replayed"))  # logged with the key MySQL added
    gipk_workload(replayed)
    end = replayed.end()
    for table in ("captured", "replayed"):
        assert gipk_columns("gipk", table) == [
            ("my_row_id", "PRI", "auto_increment INVISIBLE"), ("a", "", ""), ("b", "", "INVISIBLE"),
            ("c", "", "INVISIBLE"),
        ]  # fmt: skip
    messages = streamed(config, prepared, end)
    assert {tuple(m["pkNames"]) for m in messages} == {("my_row_id",)}
    assert_changes([m for m in messages if m["table"] == "captured"], captured.expected)
    assert_changes([m for m in messages if m["table"] == "replayed"], replayed.expected)


def test_a_generated_invisible_primary_key_is_captured_when_the_server_hides_it() -> None:
    # show_gipk_in_create_table_and_information_schema=OFF (a DBA's choice, global) hides my_row_id
    # from SHOW CREATE TABLE and information_schema; the binlog still carries it.
    fresh_database("gipkhidden")
    with connect("gipkhidden").cursor() as cur:
        cur.execute(GIPK_SESSION)
        cur.execute(GIPK_TABLE.format(table="t"))
    with global_variable("show_gipk_in_create_table_and_information_schema", "OFF"):
        config, prepared = started("gipkhidden", 8112)
        rec = Recorder("gipkhidden", "t", key="my_row_id", session=[
            GIPK_SESSION, "SET SESSION show_gipk_in_create_table_and_information_schema = ON",
        ])  # fmt: skip
        rec.run("INSERT INTO t (a, b, c) VALUES ('y', 3, 4)")
        rec.run("UPDATE t SET b = b + 1")
        messages = streamed(config, prepared, rec.end())
    assert [m["pkNames"] for m in messages] == [["my_row_id"]] * 2
    assert_changes(messages, rec.expected)


# -- GEOMETRY, VECTOR and character sets ------------------------------------------------------

# GEOMETRY and VECTOR columns between utf8mb4 and latin1 ones in a latin1 table: COLUMN_CHARSET
# lists a collation for VECTOR and none for GEOMETRY on MySQL (MariaDB the other way round); a
# miscount once decoded a utf8mb4 column as latin1. MySQL's latin1 is cp1252 ('€' is 0x80).
SPATIAL_TABLE = (
    "CREATE TABLE {db}.t (id INT PRIMARY KEY, g GEOMETRY NOT NULL SRID 4326, u VARCHAR(20) CHARACTER SET utf8mb4,"
    " v VECTOR(3), l VARCHAR(20) CHARACTER SET latin1, p POINT SRID 0, ut TEXT CHARACTER SET utf8mb4,"
    " lt TINYTEXT, lc CHAR(4), uc CHAR(4) CHARACTER SET utf8mb4, v2 VECTOR(2),"
    " um MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin) DEFAULT CHARSET=latin1"
)


@METADATA
def test_geometry_and_vector_beside_utf8mb4_and_latin1_text_stream_as_selected(metadata: str) -> None:
    fresh_database("geovec", SPATIAL_TABLE)
    config, prepared = started("geovec", 8113)
    with row_metadata(metadata):
        rec = Recorder("geovec", "t")
        rec.run(
            "INSERT INTO t VALUES (1, ST_GeomFromText('POINT(45 -120)', 4326), 'emoji 😀 é',"
            " STRING_TO_VECTOR('[1.5, -2, 3e-7]'), '€ café ÿ', ST_GeomFromText('POINT(1 2)'), '𝄞 ü', 'naïve Š',"
            " 'àé', '😀😀', STRING_TO_VECTOR('[0.1, 1e10]'), '中文 😀'),"
            " (2, ST_GeomFromText('POLYGON((0 0, 0 1, 1 1, 0 0))', 4326), NULL, NULL, CONVERT(x'81' USING latin1),"
            " NULL, '', '™', '', '', NULL, NULL)"
        )
        rec.run("UPDATE t SET u = 'ü😀', l = 'Ñ€', v = STRING_TO_VECTOR('[0, -0, 1]'), um = REPEAT('😀', 3)")
        rec.run("DELETE FROM t WHERE id = 2")
        end = rec.end()
    assert_changes(streamed(config, prepared, end), rec.expected)


# ENUM and SET labels in their columns' charsets: utf8mb4 and latin1 in a latin1 table. With
# MINIMAL metadata they come from the history; with FULL, from the TABLE_MAP, which writes each
# label in its column's charset.
LABELS_TABLE = (
    "CREATE TABLE {db}.t (id INT PRIMARY KEY, e1 ENUM('é', 'ü', 'plain') CHARACTER SET utf8mb4,"
    " e2 ENUM('€', 'à', 'b'), s1 SET('à', 'ß', 'c'), s2 SET('ü', 'x') CHARACTER SET utf8mb4) DEFAULT CHARSET=latin1"
)


@METADATA
def test_enum_and_set_labels_in_their_column_charsets_stream_as_selected(metadata: str) -> None:
    fresh_database("labels", LABELS_TABLE)
    config, prepared = started("labels", 8114)
    with row_metadata(metadata):
        rec = Recorder("labels", "t")
        rec.run("INSERT INTO t VALUES (1, 'ü', '€', 'à,ß', 'ü,x'), (2, 'plain', 'b', 'c', '')")
        rec.run("UPDATE t SET e1 = 'é', e2 = 'à', s1 = 'ß', s2 = 'ü'")
        end = rec.end()
        rec.cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS"
            " WHERE TABLE_SCHEMA = 'labels' AND TABLE_NAME = 't' AND DATA_TYPE IN ('enum', 'set')"
        )
        types = {str(name): str(kind) for name, kind in rec.cur.fetchall()}
    messages = streamed(config, prepared, end)
    assert_changes(messages, rec.expected)
    assert [{name: m["mysqlType"][name] for name in types} for m in messages] == [types] * len(messages)


# -- authentication --------------------------------------------------------------------------


def flush_privileges() -> None:
    """Empties caching_sha2_password's cache: the next login of a user is the full exchange
    (over plain TCP the password goes RSA-encrypted with the server's public key)."""
    with connect().cursor() as cur:
        cur.execute("FLUSH PRIVILEGES")


def dump_connection() -> tuple[str, str]:
    """CONNECTION_TYPE and Ssl_cipher of the connector user's binlog dump thread."""
    with connect().cursor() as cur:
        cur.execute(
            "SELECT t.CONNECTION_TYPE, s.VARIABLE_VALUE FROM performance_schema.threads t"
            " LEFT JOIN performance_schema.status_by_thread s ON s.THREAD_ID = t.THREAD_ID"
            " AND s.VARIABLE_NAME = 'Ssl_cipher'"
            " WHERE t.PROCESSLIST_USER = 'sluice' AND t.PROCESSLIST_COMMAND LIKE 'Binlog Dump%'"
            " ORDER BY t.THREAD_ID DESC LIMIT 1"  # the newest: an earlier test's may linger until its next write
        )
        row = cur.fetchone()
    assert row is not None, "sluice has no binlog dump thread"
    return str(row[0]), str(row[1] or "")


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_caching_sha2_password_full_authentication_then_streaming(tls: bool) -> None:
    db = f"auth{int(tls)}"
    fresh_database(db, "CREATE TABLE {db}.items (id INT PRIMARY KEY, n INT)")
    source = {"ssl_ca": str(RUN / "tls" / "ca.pem")} if tls else {}
    config = live_config([rf"{db}\..*"], server_id=8115 + int(tls), **source)
    flush_privileges()
    with open_connection(config.source.settings()) as conn, conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        assert cur.fetchone() == ("sluice@127.0.0.1",)
        # Over plain TCP the client had to ask for the RSA key: the full exchange, not the cache.
        assert (conn.server_public_key is None) == tls
    flush_privileges()
    prepared = prepare(config, MemoryHistoryStore())
    flush_privileges()
    writer = connect(db)
    with writer.cursor() as cur:
        cur.execute("INSERT INTO items VALUES (1, 10)")
    expected = {last_gtid(writer): [("INSERT", "1")]}
    consumer = Consumer()
    items = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(), FAST).items(prepared.start)
    try:
        run_to(items, consumer, master_position(writer))
        kind, cipher = dump_connection()  # the dump is still open: its thread shows how it connected
    finally:
        items.close()
    assert consumer.committed == expected
    assert (kind, bool(cipher)) == (("SSL/TLS", True) if tls else ("TCP/IP", False))


# -- what Sluice asks the server -------------------------------------------------------------


def test_statements_sent_to_mysql_succeed_under_their_current_names() -> None:
    fresh_database("names", "CREATE TABLE {db}.items (id INT PRIMARY KEY, n INT)")
    with connect().cursor() as cur:
        cur.execute("TRUNCATE performance_schema.events_statements_summary_by_user_by_event_name")
    config, prepared = started("names", 8117)
    writer = connect("names")
    with writer.cursor() as cur:
        cur.execute("INSERT INTO items VALUES (1, 10)")
    assert len(streamed(config, prepared, master_position(writer))) == 1
    with connect().cursor() as cur:
        cur.execute(
            "SELECT EVENT_NAME, COUNT_STAR, SUM_ERRORS, SUM_WARNINGS"
            " FROM performance_schema.events_statements_summary_by_user_by_event_name"
            " WHERE USER = 'sluice' AND COUNT_STAR > 0"
        )
        ran = {str(name): (int(count), int(errors), int(warnings)) for name, count, errors, warnings in cur.fetchall()}
    # SHOW REPLICAS (the server_id check) and SHOW BINARY LOG STATUS (positions), then the dump.
    for name in ("statement/sql/show_replicas", "statement/sql/show_binary_log_status",
                 "statement/com/Register Replica", "statement/com/Binlog Dump"):  # fmt: skip
        assert name in ran, f"{name} did not run: {sorted(ran)}"
    # A removed statement fails (an error); a deprecated name warns (ER_WARN_DEPRECATED_SYNTAX).
    assert {name: v for name, v in ran.items() if v[1] or v[2]} == {}
    old_names = ("show_slave_hosts", "show_master_status", "show_slave_status")
    assert not ran.keys() & {f"statement/sql/{name}" for name in old_names}
