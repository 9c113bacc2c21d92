"""A table's route: decided once, and the same value for the Python path and the kernel's plan."""

from __future__ import annotations

from connector.native_spec import KINDS
from connector.routes import Routes
from connector.sink.kafka import RECORD_OVERHEAD
from connector.sink.partitioning import TopicRouter, table_partition
from tests.support.twins import MemorySink

DELETE = 1 << KINDS["KIND_DELETE"]
EVERY = sum(1 << kind for kind in KINDS.values())


def test_a_table_s_route_is_made_once_with_its_topic_s_partitions_and_limit() -> None:
    sink = MemorySink(partitions=5, key_framing_bytes=10)
    sink.limits["p.shop.orders"] = 2_000
    routes = Routes(TopicRouter("p", [(r"shop\.order_.*", "p.lines")]), sink, tombstones=False)
    route = routes.of("shop", "orders")
    assert routes.of("shop", "orders") is route
    assert "p.shop.orders" in sink.topics  # created when the table first shows itself
    assert (route.topic, route.partitions, route.limit, route.room, route.key_skip) == (
        "p.shop.orders", 5, 2_000, 2_000 - RECORD_OVERHEAD, 10)
    assert route.partition(keyed=True) is None
    assert route.partition(keyed=False) == table_partition("shop", "orders", 5)
    lines = routes.of("shop", "order_lines")
    assert lines.topic == "p.lines" and lines.limit == sink.max_message_bytes
    assert lines.partition(keyed=False) == table_partition("shop", "order_lines", 5)  # by table, not by topic


def test_tombstones_follow_keyed_deletes_which_the_kernel_then_leaves_to_the_python_path() -> None:
    on = Routes(TopicRouter("p", []), MemorySink(), tombstones=True).of("shop", "orders")
    off = Routes(TopicRouter("p", []), MemorySink(), tombstones=False).of("shop", "orders")
    assert on.follows_with_tombstones("DELETE", keyed=True)
    assert not on.follows_with_tombstones("DELETE", keyed=False)  # a keyless row has no key to tombstone
    assert not on.follows_with_tombstones("UPDATE", keyed=True)
    assert not off.follows_with_tombstones("DELETE", keyed=True)
    assert on.kernel_kinds(keyed=True) == EVERY & ~DELETE
    assert on.kernel_kinds(keyed=False) == off.kernel_kinds(keyed=True) == EVERY
