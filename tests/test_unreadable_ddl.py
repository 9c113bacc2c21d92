"""A statement Sluice cannot read: only the tables it names stop, and only until an operator
says what they are (`sluice schema set`); with the opt-in, they are re-read from the server."""

from __future__ import annotations

import io
import logging

import pytest

from connector.binlog.reader import Reader
from connector.binlog.tablemap import TableMapEvent, decode_table_map
from connector.config import Config
from connector.errors import ConfigError
from connector.filters import TableFilter
from connector.position import Position
from connector.schema.commands import schema_set, schema_show
from connector.schema.ddl import read_ddl
from connector.schema.history import MemoryHistoryStore
from connector.schema.model import Schema, Table
from connector.schema.tracker import SchemaTracker, UnreadableDdlError

ORACLE_ALTER = "ALTER TABLE t ADD q VARCHAR2(10)"  # MariaDB's sql_mode=ORACLE type: not read here


def at(pos: int) -> Position:
    return Position("bin.000001", pos, "", 1, 1700000000)


def table_map(table: str, types: bytes, meta: bytes, db: str = "d") -> TableMapEvent:
    head = (1).to_bytes(6, "little") + b"\x01\x00" + bytes([len(db)]) + db.encode() + b"\x00"
    head += bytes([len(table)]) + table.encode() + b"\x00"
    body = head + bytes([len(types)]) + types + bytes([len(meta)]) + meta + b"\x00" * ((len(types) + 7) // 8)
    return decode_table_map(Reader(body), 8)


T_AFTER = table_map("t", bytes([3, 15]), (40).to_bytes(2, "little"))  # (id INT, q VARCHAR(10)), MINIMAL
U_MAP = table_map("u", bytes([3]), b"")


def seeded(store: MemoryHistoryStore, include: list[str] | None = None) -> SchemaTracker:
    schema = Schema()
    for sql in ("CREATE DATABASE d CHARACTER SET utf8mb4", "CREATE TABLE t (id INT PRIMARY KEY)",
                "CREATE TABLE u (id INT PRIMARY KEY)", "CREATE TABLE x (id INT)"):  # fmt: skip
        read_ddl(schema, sql, "d")
    tracker = SchemaTracker(store, TableFilter.of(include, None))
    tracker.seed(schema, at(100))
    tracker.cursor.file = "bin.000001"
    return tracker


def test_only_the_tables_it_names_stop_and_the_error_says_how_to_go_on(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryHistoryStore()
    tracker = seeded(store)
    with caplog.at_level(logging.WARNING):
        changes = tracker.on_statement(ORACLE_ALTER, "d", at(200))
    assert [(c.table, c.definition, c.blocked is not None) for c in changes] == [("t", None, True)]
    assert [(r.kind, r.table) for r in store.records if r.position == at(200)] == [("unreadable", "t")]
    assert "sluice schema set" in caplog.text and "bin.000001:200" in caplog.text

    assert tracker.table_hook(U_MAP, 300) is not None  # other tables go on
    with pytest.raises(UnreadableDdlError) as info:
        tracker.table_hook(T_AFTER, 400)
    message = str(info.value)
    assert "\n" not in message and message.startswith("bin.000001@400 TABLE_MAP_EVENT: rows of `d`.`t`")
    for part in ("bin.000001:200", "unknown data type 'VARCHAR2'", ORACLE_ALTER, "sluice schema set d.t --from-server",
                 "--ddl 'CREATE TABLE ...'"):  # fmt: skip
        assert part in message


def test_schema_set_gives_the_definition_at_the_statement_and_a_replay_uses_it() -> None:
    store = MemoryHistoryStore()
    tracker = seeded(store)
    tracker.on_statement(ORACLE_ALTER, "d", at(200))
    lines: list[str] = []
    schema_set(Config(), "d.t", False, "CREATE TABLE whatever (id INT PRIMARY KEY, q VARCHAR(10))", None,
               store=store, out=lines.append)  # fmt: skip
    assert lines == ["d.t (id, q) as of bin.000001:200; start the connector again to use it"]

    resumed = SchemaTracker(store, TableFilter.of(None, None), source="bin.000001")
    resumed.restore(at(300))  # a restart past the statement
    named = resumed.table_hook(T_AFTER, 400)
    assert named is not None and named.column_names == ("id", "q") and named.pk_names == ("id",)

    replay = SchemaTracker(store, TableFilter.of(None, None), source="bin.000001")
    replay.restore(at(150))  # a restart before it: the statement is read (and refused) again, then the operator's
    replay.on_statement(ORACLE_ALTER, "d", at(200))
    table = replay.schema.get("d", "t")
    assert table is not None and table.column_names() == ("id", "q") and not replay.schema.blocked
    assert [r.kind for r in store.records if r.table == "t"] == ["snapshot", "unreadable", "override"]


def test_schema_set_refuses_what_it_cannot_place() -> None:
    store = MemoryHistoryStore()
    seeded(store)
    with pytest.raises(ConfigError, match="is not blocked"):
        schema_set(Config(), "d.u", False, "CREATE TABLE u (id INT)", None, store=store)
    with pytest.raises(ConfigError, match="exactly one of"):
        schema_set(Config(), "d.u", True, "CREATE TABLE u (id INT)", "bin.000001:5", store=store)
    with pytest.raises(ConfigError, match="one CREATE TABLE"):
        schema_set(Config(), "d.u", False, "DROP TABLE u", "bin.000001:5", store=store)
    schema_set(Config(), "d.u", False, "CREATE TABLE u (id BIGINT)", "bin.000001:5", store=store, out=lambda _: None)
    assert store.records[-1].kind == "override" and store.records[-1].position.pos == 5


def test_blocks_follow_renames_and_drops_and_show_lists_them() -> None:
    store = MemoryHistoryStore()
    tracker = seeded(store)
    tracker.on_statement(ORACLE_ALTER, "d", at(200))
    tracker.on_statement("RENAME TABLE t TO t2", "d", at(300))
    assert set(tracker.schema.blocked) == {("d", "t2")}
    out = io.StringIO()
    schema_show(Config(), [], out, store=store)
    shown = out.getvalue().splitlines()
    assert any('"table": "d.t2", "blocked"' in line and "bin.000001:200" in line for line in shown)
    tracker.on_statement("DROP TABLE t2", "d", at(400))
    assert not tracker.schema.blocked
    resumed = SchemaTracker(store, TableFilter.of(None, None))
    resumed.restore(at(350))
    assert set(resumed.schema.blocked) == {("d", "t2")}


def test_statements_about_tables_not_captured_stop_nothing() -> None:
    """d.t is not captured but is tracked (it shares d with the captured d.u): a statement about
    it that Sluice cannot read publishes nothing and its rows stop nothing, and the history knows
    its definition is unknown, so a RENAME of it onto a captured name makes that one unknown too."""
    store = MemoryHistoryStore()
    tracker = seeded(store, include=[r"d\.u"])
    assert tracker.on_statement(ORACLE_ALTER, "d", at(200)) == []
    assert set(tracker.schema.blocked) == {("d", "t")}
    assert tracker.table_hook(T_AFTER, 210) is None  # rows of d.t: not decoded, nothing stops
    tracker.on_statement("RENAME TABLE u TO u_old, t TO u", "d", at(220))
    assert set(tracker.schema.blocked) == {("d", "u")}
    with pytest.raises(UnreadableDdlError):
        tracker.table_hook(table_map("u", bytes([3, 15]), (40).to_bytes(2, "little")), 230)
    tracker = seeded(MemoryHistoryStore(), include=[r"d\.u"])
    # a table the history lacks (a gap) is unknown from here on, and so is a captured name made from it
    tracker.on_statement("ALTER TABLE u ADD z INT, RENAME TO u", "d", at(250))
    tracker.schema.drop("d", "u")
    tracker.on_statement("ALTER TABLE u ADD y INT", "d", at(300))
    assert set(tracker.schema.blocked) == {("d", "u")}


def test_the_opt_in_reads_the_tables_again_from_the_server() -> None:
    store = MemoryHistoryStore()
    asked: list[tuple[str, str]] = []

    def refresh(database: str, table: str, schema: Schema) -> Table | None:
        asked.append((database, table))
        read_ddl(schema, "CREATE TABLE t (id INT PRIMARY KEY, q VARCHAR(10))", database)
        return schema.get(database, table)

    tracker = seeded(store)
    tracker.refresh = refresh
    tracker.on_statement(ORACLE_ALTER, "d", at(200))
    assert asked == [("d", "t")] and not tracker.schema.blocked
    assert [r.kind for r in store.records if r.table == "t"] == ["snapshot", "refresh"]
    named = tracker.table_hook(T_AFTER, 300)
    assert named is not None and named.column_names == ("id", "q")
