"""Tables a connector comes to capture between two starts (an include widened): read by the
snapshot as new ones while the others stream. The history records the filter each start ran
with; a database it did not follow is read from the server at the start, ahead of the stream,
and known to the stream from that position on. The live side: tests/test_online_ddl_live.py."""

from __future__ import annotations

from connector.binlog.reader import Reader
from connector.binlog.tablemap import TableMapEvent, decode_table_map
from connector.filters import TableFilter
from connector.position import Position
from connector.schema.ddl import read_ddl
from connector.schema.history import MemoryHistoryStore
from connector.schema.model import Schema
from connector.schema.tracker import SchemaTracker


def at(pos: int, file: str = "bin.000001") -> Position:
    return Position(file, pos)


def table_map(db: str, table: str) -> TableMapEvent:
    """A MINIMAL TABLE_MAP of (id INT)."""
    head = (1).to_bytes(6, "little") + b"\x01\x00" + bytes([len(db)]) + db.encode() + b"\x00"
    head += bytes([len(table)]) + table.encode() + b"\x00"
    return decode_table_map(Reader(head + b"\x01\x03\x00\x00"), 8)


def started(store: MemoryHistoryStore, include: list[str], resume: Position) -> tuple[SchemaTracker, list[object]]:
    """A start as startup.prepare makes it: the history restored (or seeded), what the filter
    newly captures, the filter recorded."""
    tracker = SchemaTracker(store, TableFilter.of(include, None), source=resume.file)
    newly: list[object] = []
    if tracker.restore(resume):
        newly = list(tracker.newly_captured())
    else:
        schema = Schema()
        for sql in ("CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT)", "CREATE TABLE shop.items (id INT)"):
            read_ddl(schema, sql, "shop")
        tracker.seed(schema, resume)
    tracker.record_filter(resume)
    return tracker, newly


def test_a_widened_include_names_the_tables_it_adds_once() -> None:
    store = MemoryHistoryStore()
    first, newly = started(store, [r"shop\.orders"], at(4))
    assert newly == [] and sorted(first.schema.tables) == [("shop", "items"), ("shop", "orders")]
    assert started(store, [r"shop\.(orders|items)"], at(100))[1] == [("shop", "items")]
    assert started(store, [r"shop\.(orders|items)"], at(200))[1] == []  # the same filter again: nothing new
    assert [r.kind for r in store.records].count("filter") == 2


def test_a_history_without_a_recorded_filter_names_nothing() -> None:
    store = MemoryHistoryStore()
    tracker = SchemaTracker(store, TableFilter.of([r"shop\..*"], None), source="bin.000001")
    schema = Schema()
    read_ddl(schema, "CREATE TABLE shop.orders (id INT)", "shop")
    tracker.seed(schema, at(4))
    again = SchemaTracker(store, TableFilter.of([r".*\..*"], None), source="bin.000001")
    assert again.restore(at(50)) and again.newly_captured() == []


def test_a_database_read_ahead_of_the_stream_is_known_from_its_position_on() -> None:
    store = MemoryHistoryStore()
    tracker = started(store, [r"shop\..*", r"billing\.invoices"], at(100))[0]
    server = Schema()
    for sql in ("CREATE DATABASE billing", "CREATE TABLE billing.invoices (id INT)", "CREATE TABLE billing.x (id INT)"):
        read_ddl(server, sql, "billing")
    assert tracker.unfollowed([("billing", "invoices"), ("billing", "x"), ("shop", "orders")]) == {"billing"}
    assert tracker.add_later(server, at(500)) == [("billing", "invoices")]
    assert tracker.tracks("billing", "x")  # the database is followed now, every table of it
    # Before 500: its statements and rows are the read's (not applied, nothing stops) ...
    assert tracker.on_statement("ALTER TABLE billing.invoices ADD y INT", "billing", at(300)) == []
    assert tracker.table_hook(table_map("billing", "invoices"), 400) is None
    assert not tracker.schema.blocked
    # ... from 500 on, the definition read there
    named = tracker.table_hook(table_map("billing", "invoices"), 600)
    assert named is not None and named.column_names == ("id",)
    # A restart from before 500 knows the same; one from after it has the table in its schema
    before = SchemaTracker(store, TableFilter.of([r"shop\..*", r"billing\.invoices"], None), source="bin.000001")
    assert before.restore(at(200)) and ("billing", "invoices") not in before.schema.tables
    assert before.table_hook(table_map("billing", "invoices"), 300) is None
    after = SchemaTracker(store, TableFilter.of([r"shop\..*", r"billing\.invoices"], None), source="bin.000001")
    assert after.restore(at(700)) and ("billing", "invoices") in after.schema.tables
