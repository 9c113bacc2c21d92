"""Online schema changes as the tools make them (shadow tables, table swaps) and multi-table
renames: the schema history holds, after any statement, exactly what the tracker holds in
memory, so a restart right after a cut-over reads the table as it is. The live side, with
gh-ost and pt-online-schema-change themselves, is tests/test_online_ddl_live.py."""

from __future__ import annotations

import pytest

from connector.filters import TableFilter
from connector.position import Position
from connector.schema.history import MemoryHistoryStore
from connector.schema.model import Schema
from connector.schema.tracker import SchemaTracker

START = Position("bin.000001", 4)


def _tracker(store: MemoryHistoryStore, *ddl: str, include: list[str] | None = None) -> SchemaTracker:
    tracker = SchemaTracker(store, TableFilter.of(include, None), source="bin.000001")
    schema = Schema()
    tracker.seed(schema, START)
    for i, sql in enumerate(ddl):
        tracker.on_statement(sql, "shop", Position("bin.000001", 100 + i))
    return tracker


def _restored(store: MemoryHistoryStore, at: Position) -> Schema:
    again = SchemaTracker(store, TableFilter.of(None, None), source="bin.000001")
    assert again.restore(at)
    return again.schema


@pytest.mark.parametrize(
    ("shadow", "statement"),
    [
        ("_orders_new", "RENAME TABLE orders TO _orders_old, _orders_new TO orders"),  # pt-online-schema-change
        ("_orders_gho", "RENAME TABLE orders TO _orders_del, _orders_gho TO orders"),  # gh-ost
        ("_orders_new", "RENAME TABLE orders TO tmp, _orders_new TO orders, tmp TO _orders_new"),  # through a third
        ("_orders_new", "RENAME TABLE orders TO shop2.orders, _orders_new TO orders"),  # across databases
        ("_orders_new", "ALTER TABLE orders RENAME TO x; RENAME TABLE _orders_new TO orders"),
    ],
)
def test_the_history_after_a_swap_is_what_the_tracker_holds(shadow: str, statement: str) -> None:
    store = MemoryHistoryStore()
    tracker = _tracker(
        store, "CREATE DATABASE shop2", "CREATE TABLE orders (id INT PRIMARY KEY, a INT)",
        f"CREATE TABLE {shadow} (id INT PRIMARY KEY, a INT, b VARCHAR(5))",
    )  # fmt: skip
    for i, sql in enumerate(statement.split("; ")):
        tracker.on_statement(sql, "shop", Position("bin.000001", 200 + i))
    after = _restored(store, Position("bin.000001", 300))
    assert after.tables == tracker.schema.tables
    orders = after.tables[("shop", "orders")]
    assert [c.name for c in orders.columns] == ["id", "a", "b"]
