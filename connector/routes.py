"""One route per table: where its row messages go and what Kafka takes of them, decided once.

A `TableRoute` is made the first time a table shows itself (its TABLE_MAP planned for the
compiled kernel, or its first change on the Python path), before any of its rows is produced.
What Kafka says of the captured tables' topics is asked before the stream starts (`prefetch`:
one metadata and one configuration request for them all), so making a route asks Kafka nothing
on the decoding path but for a topic that does not exist yet, which is created then. Both paths
execute the same value: the Python path's steps (connector/steps.py, Produce.rows) read it, and
the kernel gets it as data in its plan (Encode.plan -> connector/lane.KernelPlan)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from connector.native_spec import KINDS
from connector.sink.kafka import RECORD_OVERHEAD, Sink
from connector.sink.partitioning import TopicRouter, table_partition

_ALL_KINDS = sum(1 << kind for kind in KINDS.values())
_KIND_DELETE = KINDS["KIND_DELETE"]


@dataclass(frozen=True, slots=True)
class TableRoute:
    topic: str
    database: str
    table: str
    partitions: int
    keyless_partition: int  # the one partition of the table's rows when it has no primary key
    limit: int  # the topic's max.message.bytes: key, value and Kafka's framing (RECORD_OVERHEAD) together
    key_skip: int  # the key's framing bytes, which its partition's hash leaves out
    tombstones: bool  # a DELETE is followed by a null value under its key (log compaction)

    def partition(self, keyed: bool) -> int | None:
        """Where a message goes: None, its key's hash; else the table's one partition."""
        return None if keyed else self.keyless_partition

    def follows_with_tombstones(self, kind: str, keyed: bool) -> bool:
        return self.tombstones and keyed and kind == "DELETE"

    @property
    def room(self) -> int:
        """The most key and value bytes one message may have; over it, the oversize policy decides."""
        return self.limit - RECORD_OVERHEAD

    def kernel_kinds(self, keyed: bool) -> int:
        """The operations the kernel writes (1 << KIND_*): a DELETE that tombstones follow is the
        Python path's, which writes both."""
        if self.follows_with_tombstones("DELETE", keyed):
            return _ALL_KINDS & ~(1 << _KIND_DELETE)
        return _ALL_KINDS


class Routes:
    """Each table's route, made at its first use and kept (a topic's partitions and limit do not
    change under a running connector: the sink reads each once)."""

    def __init__(self, router: TopicRouter, sink: Sink, tombstones: bool) -> None:
        self.router = router
        self.sink = sink
        self.tombstones = tombstones
        self._routes: dict[tuple[str, str], TableRoute] = {}

    def prefetch(self, tables: Iterable[tuple[str, str]]) -> None:
        """The partitions and size limits of these tables' topics, asked ahead (Sink.prefetch)."""
        self.sink.prefetch({self.router.topic(database, table) for database, table in tables})

    def of(self, database: str, table: str) -> TableRoute:
        route = self._routes.get((database, table))
        if route is None:
            topic = self.router.topic(database, table)
            self.sink.ensure_topic(topic)
            partitions = self.sink.partitions(topic)
            route = self._routes[(database, table)] = TableRoute(
                topic, database, table, partitions, table_partition(database, table, partitions),
                self.sink.limit(topic), self.sink.key_framing_bytes, self.tombstones,
            )  # fmt: skip
        return route
