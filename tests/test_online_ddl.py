"""Online schema changes as the tools make them (shadow tables, table swaps) and multi-table
renames: the schema history holds, after any statement, exactly what the tracker holds in
memory, so a restart right after a cut-over reads the table as it is. The live side, with
gh-ost and pt-online-schema-change themselves, is tests/test_online_ddl_live.py."""

from __future__ import annotations

import pytest

from connector.assembler import cut_over_messages
from connector.filters import TableFilter
from connector.flat import FlatMessage
from connector.position import Position
from connector.schema.ddl import read_ddl
from connector.schema.history import MemoryHistoryStore
from connector.schema.model import Schema, Table
from connector.schema.onlineddl import CutOver, Helper, helper_of, is_rename
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


@pytest.mark.parametrize(
    ("name", "tool", "role", "table"),
    [
        ("_orders_gho", "gh-ost", "shadow", "orders"),
        ("_orders_ghc", "gh-ost", "changelog", "orders"),
        ("_orders_del", "gh-ost", "old", "orders"),
        ("_orders_ghk", "gh-ost", "checkpoint", "orders"),
        ("_orders_20261128045914_del", "gh-ost", "old", "orders"),
        ("_orders_rev_del", "gh-ost", "old", "orders"),
        ("___orders_new", "pt-online-schema-change", "shadow", "orders"),
        ("_orders_new", "pt-online-schema-change", "shadow", "orders"),
        ("__orders_new", "pt-online-schema-change", "shadow", "orders"),
        ("_orders_old", "pt-online-schema-change", "old", "orders"),
        ("__osc_new_orders", "OnlineSchemaChange", "shadow", "orders"),
        ("lhmn_orders", "LHM", "shadow", "orders"),
        ("lhma_2024_01_02_03_04_05_678_orders", "LHM", "old", "orders"),
        ("lhma_20240102030405_orders", "LHM", "old", "orders"),
    ],
)
def test_helper_tables_are_known_by_their_names(name: str, tool: str, role: str, table: str) -> None:
    assert helper_of(name) == Helper(tool, role, table)


@pytest.mark.parametrize("name", ["orders", "new_orders", "_orders", "orders_new", "ghost_table", "lhm_orders"])
def test_other_tables_are_no_helpers(name: str) -> None:
    assert helper_of(name) is None


def test_a_cut_over_is_one_change_of_the_tables_definition_and_its_helpers_are_not_published() -> None:
    """include names the database: the shadow table is tracked, never captured (skip_helpers); the
    cut-over is a change of orders' definition, its rows kept (not read again)."""
    tracker = SchemaTracker(MemoryHistoryStore(), TableFilter.of([r"shop\..*"], None, skip_helpers=True),
                            source="bin.000001")  # fmt: skip
    tracker.seed(Schema(), START)
    for i, sql in enumerate(("CREATE DATABASE shop", "CREATE TABLE orders (id INT PRIMARY KEY, a INT, b INT)")):
        tracker.on_statement(sql, "shop", Position("bin.000001", 10 + i))
    assert tracker.on_statement("CREATE TABLE _orders_gho LIKE orders", "shop", Position("bin.000001", 20)) == []
    changes = tracker.on_statement("ALTER TABLE _orders_gho DROP COLUMN b, ADD COLUMN c VARCHAR(3) AFTER id",
                                   "shop", Position("bin.000001", 30))  # fmt: skip
    assert changes == [] and tracker.schema.get("shop", "_orders_gho") is not None
    changes = tracker.on_statement("RENAME TABLE orders TO _orders_del, _orders_gho TO orders", "shop",
                                   Position("bin.000001", 40))  # fmt: skip
    assert [(c.table, c.definition is not None) for c in changes] == [("orders", True)]
    [cut] = tracker.cut_overs
    assert (cut.tool, cut.table, cut.summary()) == ("gh-ost", "orders", "DROP b, ADD c varchar(3)")
    assert not cut.values_changed() and tracker.renamed_onto == [] and tracker.rereads == []
    assert cut.statement("RENAME ...").startswith("/* sluice: gh-ost cut-over of `shop`.`orders`: DROP b")


def test_a_cut_over_that_changed_a_type_and_a_rename_onto_a_captured_name_read_the_table_again() -> None:
    tracker = SchemaTracker(MemoryHistoryStore(), TableFilter.of([r"shop\.(orders|items)"], None, skip_helpers=True),
                            source="bin.000001")  # fmt: skip
    tracker.seed(Schema(), START)
    for i, sql in enumerate((
        "CREATE DATABASE shop", "CREATE TABLE orders (id INT PRIMARY KEY, a INT)",
        "CREATE TABLE _orders_new (id INT PRIMARY KEY, a BIGINT)", "CREATE TABLE staged (id INT PRIMARY KEY)",
        "RENAME TABLE orders TO _orders_old, _orders_new TO orders",  # pt-osc's MODIFY a BIGINT
        "RENAME TABLE staged TO items",  # an uncaptured table takes a captured name
    )):  # fmt: skip
        tracker.on_statement(sql, "shop", Position("bin.000001", 10 + i))
        if sql.startswith("RENAME TABLE orders"):
            [cut] = tracker.cut_overs
            assert cut.values_changed() and cut.summary() == "MODIFY a bigint (was int)"
            assert tracker.renamed_onto == [("shop", "orders")]
    assert tracker.renamed_onto == [("shop", "items")]
    assert tracker.rereads == [("shop", "orders"), ("shop", "items")]


def test_a_column_reorder_is_said_and_keeps_the_rows() -> None:
    schema = Schema()
    read_ddl(schema, "CREATE TABLE t (id INT PRIMARY KEY, a INT, b TEXT)", "d")
    read_ddl(schema, "CREATE TABLE _t_new (id INT PRIMARY KEY, b TEXT, a INT)", "d")
    cut = CutOver("pt-online-schema-change", "d", "t", schema.tables[("d", "t")], schema.tables[("d", "_t_new")])
    assert cut.summary() == "ORDER id, b, a" and not cut.values_changed()


def test_the_cut_over_reaches_readers_as_an_alter_of_the_table() -> None:
    schema = Schema()
    read_ddl(schema, "CREATE TABLE t (id INT PRIMARY KEY, a INT)", "d")
    read_ddl(schema, "CREATE TABLE _t_gho (id INT PRIMARY KEY, a INT, b INT)", "d")
    cut = CutOver("gh-ost", "d", "t", schema.tables[("d", "t")], schema.tables[("d", "_t_gho")])
    sql = "RENAME TABLE `d`.`t` TO `d`.`_t_del`, `d`.`_t_gho` TO `d`.`t`"
    written: FlatMessage = {"type": "RENAME", "database": "d", "table": "_t_del", "isDdl": True, "sql": sql, "es": 1}
    [told] = cut_over_messages((written,), [cut], renamed_onto=[])
    assert told == {**written, "type": "ALTER", "table": "t",
                    "sql": f"/* sluice: gh-ost cut-over of `d`.`t`: ADD b int */ {sql}"}  # fmt: skip
    # The copy changed values, or another table took a captured name: the RENAME goes out too,
    # named by that table (it is read again), not by a tool's helper
    again = cut_over_messages((written,), [cut], renamed_onto=[("d", "t")])
    assert [(m["type"], m["table"]) for m in again] == [("ALTER", "t"), ("RENAME", "t")]


@pytest.mark.parametrize("known", [True, False])
def test_a_table_moved_in_from_an_untracked_database_is_read_where_it_can_be_known(known: bool) -> None:
    """RENAME TABLE staging.t TO shop.orders: staging is not followed. The table is read from the
    server when no statement since names it; else orders is blocked, as before, until told."""
    asked: list[tuple[str, str, Position]] = []

    def resolve(database: str, table: str, at: Position, schema: Schema) -> Table | None:
        asked.append((database, table, at))
        if not known:
            return None
        read_ddl(schema, f"CREATE TABLE `{database}`.`{table}` (id INT PRIMARY KEY, x INT)", database)
        return schema.get(database, table)

    tracker = _tracker(MemoryHistoryStore(), "CREATE DATABASE shop", "CREATE TABLE orders (id INT PRIMARY KEY)",
                       include=[r"shop\.orders"])  # fmt: skip
    tracker.resolve = resolve
    end = Position("bin.000001", 500)
    changes = tracker.on_statement("RENAME TABLE shop.orders TO shop.gone, staging.t TO shop.orders", "shop", end)
    assert asked == [("shop", "orders", end)]
    if known:
        assert [(c.table, c.definition is not None) for c in changes] == [("orders", True)]
        assert [c.name for c in tracker.schema.tables[("shop", "orders")].columns] == ["id", "x"]
        assert tracker.rereads == [("shop", "orders")]  # its rows were never published: read them
    else:
        assert set(tracker.schema.blocked) == {("shop", "orders")}


@pytest.mark.parametrize(
    ("sql", "renames"),
    [
        ("RENAME TABLE a TO b", True),
        ("rename /* gh-ost */ table `d`.`t` to `d`.`_t_del`, `d`.`_t_gho` to `d`.`t`", True),
        ("/* pt-osc */ RENAME TABLES a TO b", True),
        ("ALTER TABLE a ADD c INT, RENAME TO b", True),
        ("ALTER TABLE a RENAME COLUMN x TO y", False),
        ("ALTER TABLE a RENAME INDEX i TO j", False),
        ("ALTER TABLE a ADD c INT COMMENT 'x' /* RENAME */", False),
        ("CREATE TABLE rename_me (id INT)", False),
    ],
)
def test_which_statements_give_a_table_a_name(sql: str, renames: bool) -> None:
    assert is_rename(sql) == renames
