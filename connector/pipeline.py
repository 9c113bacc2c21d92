"""The connector's main loop: stream items -> Avro -> Kafka, with checkpoints behind Kafka's acknowledgements.

Rows go to `{prefix}.{database}.{table}` (or a route's topic), keyed by their primary key;
rows of tables without one have no key and go to the partition the table's name hashes
to. DDL goes to `{prefix}.{database}._ddl`. Each transaction's end is closed in the
in-flight FIFO; the newest fully acknowledged position is committed after every item.

A statement's rows events are handed to Kafka together, once it ends (STMT_END_F) or
`group_limit` messages gathered, whichever comes first: one partition lookup and one
acknowledgement per partition for the lot, not per 8 KiB event. Anything else that
produces, and every transaction end, hands the gathered rows on first, so order holds.

Back-pressure: with `max_in_flight` messages unacknowledged (Kafka slow or down) the
reader stops pulling events until acknowledgements make room; memory stays bounded by
that number. Kafka acknowledging nothing for `delivery_timeout_s` while messages wait:
`DeliveryError`, the checkpoint before them (the producer itself never times a message
out: see connector/sink/kafka.py). Checkpoint stores both down: the reader waits,
retrying the commit.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from operator import itemgetter

from connector.avro.encoding import Encoded, MessageEncoder
from connector.avro.reader import MessageReader
from connector.binlog.constants import STMT_END_F
from connector.checkpoint import Checkpointer, InFlight
from connector.columns import ColumnRules
from connector.errors import DeliveryError, Disposition, SluiceError, StoppedWaitingError, classify
from connector.extras import HeartbeatTopic, TransactionTopic
from connector.flat import FlatMessage
from connector.metrics import Metrics
from connector.oversize import Oversized, OversizePolicy
from connector.position import Position
from connector.schema.model import Table
from connector.sink.kafka import RECORD_OVERHEAD, Sink
from connector.sink.partitioning import TopicRouter, table_partition
from connector.snapshot.coordinator import Snapshotter
from connector.stream import Changes, Commit, StreamItem

log = logging.getLogger("sluice.pipeline")


@dataclass
class Counters:
    rows: int = 0
    statements: int = 0
    transactions: int = 0
    commits: int = 0  # positions written to the checkpoint stores
    pauses: int = 0  # times the reader waited for Kafka or the checkpoint stores
    paused_s: float = 0.0


@dataclass
class _Group:
    topic: str
    database: str
    table: str
    kind: str
    encoded: list[Encoded]  # never empty: a group starts with a rows event's changes


_VALUE = itemgetter(1)
# Kafka's delivery reports are served (producer.poll) at most every so many items or seconds,
# whichever comes first: a poll per item was a fifth of a single-row transaction's cost.
_POLL_EVERY_ITEMS = 16
_POLL_EVERY_S = 0.005
_KEY_MARGIN = 4096  # keys are measured one by one only when a value comes this close to the limit


def _changes_key(message: FlatMessage, table: Table) -> bool:
    old = message["old"][0] if message["old"] else {}
    return any(k in old for k in table.primary_key)


class Pipeline:
    def __init__(
        self,
        encoder: MessageEncoder,
        sink: Sink,
        router: TopicRouter,
        checkpointer: Checkpointer,
        max_in_flight: int = 100_000,
        stop: threading.Event | None = None,
        sleep: Callable[[float], None] = time.sleep,
        delivery_timeout_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        group_limit: int = 4096,
        oversize: OversizePolicy | None = None,
    ) -> None:
        self.encoder = encoder
        self.oversize = oversize or OversizePolicy("fail", MessageReader(encoder.directory, encoder.registry()),
                                                   router.prefix)  # fmt: skip
        self.sink = sink
        self.router = router
        self.checkpointer = checkpointer
        self.max_in_flight = max_in_flight
        self.delivery_timeout_s = delivery_timeout_s
        self.inflight = InFlight(clock)
        self.clock = clock
        self._unpolled = 0  # items since Kafka was last polled
        self._polled_at = clock()
        self.stop = stop or threading.Event()
        self.sleep = sleep
        self.counters = Counters()
        self.last_committed: Position | None = None
        self.metrics: Metrics | None = None
        self.snapshot: Snapshotter | None = None
        self.group_limit = group_limit
        self._group: _Group | None = None  # the open statement's rows, not yet handed to Kafka
        # Options (connector/runner.py sets them from [kafka]):
        self.tombstones = False  # a null value under each DELETE's key, after it
        self.columns = ColumnRules([])  # tables whose columns are filtered or masked
        self.transactions: TransactionTopic | None = None
        self.heartbeats: HeartbeatTopic | None = None

    def run(self, items: Iterable[StreamItem], start: Position | None = None) -> None:
        """Until the items end or `stop` is set; then flushes Kafka and commits what it acknowledged.

        `start`: where the items begin, so a snapshot can hand over before the first of them."""
        try:
            if start is not None and self.snapshot is not None:
                self.snapshot.turn(start, self, self.stop.is_set)
            for item in items:
                self.take(item)
                if self.stop.is_set():
                    break
        except StoppedWaitingError as exc:
            log.info("%s", exc)  # a stop: what Kafka confirmed is committed below
        finally:
            if self.snapshot is not None:
                self.snapshot.close()
            self.drain()
        self._check_errors()  # a failure Kafka reported after the last poll stops it as one before would

    def take(self, item: StreamItem) -> None:
        if self.metrics is not None:
            self.metrics.tick()
        if isinstance(item, Changes):
            if self.snapshot is not None:
                self.snapshot.saw(item)
                if self.snapshot.holds(item):
                    return  # a keyless table waiting for its READ, which carries this change
            if self.transactions is not None and item.table is not None:
                self._transaction_change(item)
            if not self._send_rows(item):
                for message in item.messages:
                    self._send(message, item.table)
            if self._group is None:  # a statement still gathering breathes when it is handed on
                self.breathe()
            return
        self._hand_on()
        position = item.position
        if self.snapshot is not None and position.snapshot != self.snapshot.state_text:
            position = replace(position, snapshot=self.snapshot.state_text)  # saved with every position
        self._side_records(item, position)
        self.inflight.close(position)
        if isinstance(item, Commit):
            self.counters.transactions += 1
        self.breathe()
        if self.snapshot is not None:
            self.snapshot.turn(position, self, self.stop.is_set)

    # -- what the snapshot uses (connector/snapshot/coordinator.Emitter) ----------------------

    def publish(self, message: FlatMessage, table: Table) -> None:
        if message["type"] == "TRUNCATE" and not self.encoder.truncate_markers:
            return
        self._send(message, table)

    def close_position(self, position: Position) -> None:
        self._hand_on()
        self.inflight.close(position)

    def _side_records(self, item: StreamItem, position: Position) -> None:
        """The transaction's END and a heartbeat, when configured, before the position closes."""
        if isinstance(item, Commit) and self.transactions is not None:
            self._side(self.transactions.topic, self.transactions.end())
        if self.heartbeats is not None:
            self._side(self.heartbeats.topic, self.heartbeats.due(str(position)))

    def _transaction_change(self, item: Changes) -> None:
        assert self.transactions is not None and item.table is not None
        if not item.messages:
            return
        first = item.messages[0]
        self._side(self.transactions.topic, self.transactions.begin(first["gtid"], item.file, item.pos))
        self.transactions.count(first["database"], first["table"], len(item.messages))

    def _side(self, topic: str, record: tuple[bytes, bytes] | None) -> None:
        """A heartbeat or transaction record on its one-partition topic, tracked like any message."""
        if record is None:
            return
        self._hand_on()
        self.sink.ensure_topic(topic, single=True)
        self.sink.produce_many(topic, [record], 0, self.inflight.track(1))

    def breathe(self) -> None:
        self._unpolled += 1
        now = self.clock()
        if self._unpolled >= _POLL_EVERY_ITEMS or now - self._polled_at >= _POLL_EVERY_S:
            self.sink.poll(0)
            self._unpolled, self._polled_at = 0, now
        self._check_errors()
        self._commit()
        self._backpressure()

    def _send(self, message: FlatMessage, table: Table | None) -> None:
        self._hand_on()
        database, name = message["database"], message["table"]
        if message["isDdl"]:
            # One partition (0 also on a topic made before with more): statements stay in order.
            topic = self.router.ddl_topic(database)
            self.sink.ensure_topic(topic, single=True)
            self._produce(topic, database, name, [self.encoder.ddl(message, topic)], 0)
            self.counters.statements += 1
            return
        if table is None:
            return  # a statement that is not DDL (GRANT, ...): nothing to publish
        shaped = self.columns.table(table)
        if shaped is not None:  # [[kafka.columns]]: the message as its rule shapes it
            message, table = self.columns.message(message, table), shaped
        self._send_row(message, table)

    def _send_row(self, message: FlatMessage, table: Table) -> None:
        database, name = message["database"], message["table"]
        if message["type"] == "UPDATE" and _changes_key(message, table):
            # The old key's messages live on its own partition: a DELETE there, an INSERT under
            # the new key, so every key's history stays in one partition, in order.
            before = {**message["data"][0], **message["old"][0]}
            self._send_row({**message, "type": "DELETE", "data": [before], "old": None}, table)
            self._send_row({**message, "type": "INSERT", "old": None}, table)
            return
        topic = self._row_topic(database, name)
        self._produce_rows(topic, database, name, message["type"], [self.encoder.row(message, table, topic)])

    def _send_rows(self, item: Changes) -> bool:
        """A rows event's changes from their decoded images, gathered with the rest of its statement;
        False where the encoder wants them one by one."""
        batch, table = item.batch, item.table
        if batch is None or table is None or self.columns.table(table) is not None:
            return False
        database, name = batch.head["database"], batch.head["table"]
        topic = self._row_topic(database, name)
        encoded = self.encoder.rows(batch, table, topic)
        if encoded is None:
            self._hand_on()
            return False
        group, kind = self._group, batch.head["type"]
        keyless = encoded[0][0] is None
        if group is None or group.topic != topic or group.kind != kind or (group.encoded[0][0] is None) != keyless:
            self._hand_on()
            group = self._group = _Group(topic, database, name, kind, encoded)  # the encoder's own list
        else:
            group.encoded += encoded
        if batch.rows.flags & STMT_END_F or len(group.encoded) >= self.group_limit:
            self._hand_on()
        return True

    def _hand_on(self) -> None:
        """The gathered rows of the open statement to Kafka."""
        group, self._group = self._group, None
        if group is not None:
            self._produce_rows(group.topic, group.database, group.table, group.kind, group.encoded)

    def _row_topic(self, database: str, name: str) -> str:
        topic = self.router.topic(database, name)
        self.sink.ensure_topic(topic)
        return topic

    def _produce_rows(
        self, topic: str, database: str, name: str, kind: str, encoded: list[tuple[bytes | None, bytes]]
    ) -> None:
        """Row changes of one table and operation, in order, tracked with the open transaction."""
        partition = None
        if encoded[0][0] is None:  # no primary key: one partition per table keeps its order
            partition = table_partition(database, name, self.sink.partitions(topic))
        self._produce(topic, database, name, encoded, partition)
        if self.tombstones and kind == "DELETE" and partition is None:
            # Log compaction then drops the key: a tombstone after each DELETE, on its key's partition.
            keys = [key for key, _ in encoded if key is not None]
            self.sink.produce_tombstones(topic, keys, self.inflight.track(len(keys)))
        self.counters.rows += len(encoded)
        if self.metrics is not None:
            self.metrics.row(database, name, kind, len(encoded))

    def _produce(
        self, topic: str, database: str, name: str, encoded: list[tuple[bytes | None, bytes]], partition: int | None
    ) -> None:
        """Messages to Kafka in order, each measured against its topic's limit first."""
        limit = self.sink.limit(topic)
        # One C-speed pass over the values; keys are small (an index key is at most 3072 bytes).
        if max(map(len, map(_VALUE, encoded))) + RECORD_OVERHEAD + _KEY_MARGIN <= limit:
            self.sink.produce_many(topic, encoded, partition, self.inflight.track(len(encoded)))
            return
        run: list[tuple[bytes | None, bytes]] = []
        for key, value in encoded:
            if len(key or b"") + len(value) + RECORD_OVERHEAD <= limit:
                run.append((key, value))
                continue
            if run:
                self.sink.produce_many(topic, run, partition, self.inflight.track(len(run)))
                run = []
            self._replace(Oversized(topic, database, name, key, value, limit, RECORD_OVERHEAD), partition)
        if run:
            self.sink.produce_many(topic, run, partition, self.inflight.track(len(run)))

    def _replace(self, message: Oversized, partition: int | None) -> None:
        """An oversized message: what the policy puts in its place (or it stops the connector)."""
        replacement = self.oversize.decide(message)
        if self.metrics is not None:
            self.metrics.oversized.labels(message.database, message.table, self.oversize.policy).inc()
        if replacement.topic != message.topic:  # the dead-letter topic: one partition per key, 0 without
            self.sink.ensure_topic(replacement.topic)
            partition = None if replacement.key is not None else 0
        self.sink.produce_many(replacement.topic, [(replacement.key, replacement.value)], partition,
                               self.inflight.track(1), replacement.headers)  # fmt: skip

    def _check_errors(self) -> None:
        if self.inflight.errors:
            if self.metrics is not None:
                self.metrics.delivery_errors.inc(len(self.inflight.errors))
            raise DeliveryError(
                f"Kafka gave up on message(s): {self.inflight.errors[0]}; the checkpoint stays at {self.last_committed}"
            )
        if self.inflight.silent_s() > self.delivery_timeout_s:
            raise DeliveryError(
                f"Kafka acknowledged nothing for {self.delivery_timeout_s:g} s with {self.inflight.outstanding} "
                f"message(s) waiting; the checkpoint stays at {self.last_committed}"
            )

    def _commit(self) -> None:
        position = self.inflight.committable()
        if position is not None:
            self.last_committed = position
            self.counters.commits += 1
            try:
                self.checkpointer.submit(position)  # the writer thread's, or written here when it is not running
                if self.checkpointer.failing is None:
                    return
            except SluiceError as exc:
                if classify(exc) is not Disposition.PAUSE:
                    raise
        elif self.checkpointer.failing is None:
            return
        self._save_when_possible()

    def _save_when_possible(self) -> None:
        """Both stores refused the newest position: hold it and stop reading until one takes it."""
        delay = 0.1
        while True:
            try:
                self.checkpointer.save_unsaved()
                break
            except SluiceError as exc:
                if classify(exc) is not Disposition.PAUSE:
                    raise
                self._paused("checkpoint stores", True)
                log.warning("cannot save position %s (%s); pausing %.1f s", self.last_committed, exc, delay)
                self.sleep(delay)
                self.counters.pauses += 1
                self.counters.paused_s += delay
                delay = min(delay * 2, 5.0)
                if self.stop.is_set():
                    raise
        self._paused("checkpoint stores", False)

    def _backpressure(self) -> None:
        if self.inflight.outstanding < self.max_in_flight:
            return
        started = time.monotonic()
        self._paused("kafka", True)
        self.counters.pauses += 1
        log.info("%d messages unacknowledged: pausing the reader", self.inflight.outstanding)
        while self.inflight.outstanding >= self.max_in_flight * 0.8 and not self.stop.is_set():
            self.sink.poll(0.1)
            self._check_errors()
            self._commit()
        self._paused("kafka", False)
        self.counters.paused_s += time.monotonic() - started

    def _paused(self, reason: str, paused: bool) -> None:
        if self.metrics is not None:
            if paused:
                self.metrics.paused_for.add(reason)
            else:
                self.metrics.paused_for.discard(reason)

    def drain(self, timeout_s: float = 30.0) -> None:
        """Wait for Kafka to acknowledge what is in flight, then commit what it did."""
        with contextlib.suppress(StoppedWaitingError):  # a statement stopped mid-way: its
            self._hand_on()  # transaction stays open, the checkpoint before it
        deadline = time.monotonic() + timeout_s
        while self.inflight.outstanding and time.monotonic() < deadline:
            self.sink.poll(0.1)
        self.sink.flush(max(0.0, deadline - time.monotonic()))
        if not self.inflight.errors:
            self._commit()
            self.checkpointer.settle(max(0.0, deadline - time.monotonic()))
            if self.checkpointer.failing is not None:
                self._save_when_possible()
