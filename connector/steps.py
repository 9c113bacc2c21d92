"""The pipeline's steps: encode a change, gather a statement, produce to Kafka, commit positions.

Each step is one duty and holds the next: Encode -> GatherStatement -> Produce, wired once in
the Pipeline's constructor. They share one protocol: `submit` hands a step an item (Encode a
stream's `Changes`; GatherStatement and Produce an `Outgoing`: rows, other messages, side
records, a kernel burst, or a position that closes), `poll` does what is due now, `join`
finishes what the step holds. GatherStatement is the one door to Produce: whatever passes it
hands the gathered statement on first, so order holds by construction. Produce tracks every
message in the in-flight FIFO (connector/inflight.py) and closes positions in it (or in the
open Kafka transaction); its `poll` says whether there is room for more, a value the caller
acts on (connector/pipeline.py waits; nothing here blocks for room). CommitPositions reads the
FIFO and hands the newest fully acknowledged position to the checkpoint policy
(connector/checkpoint.Checkpointer).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Protocol

from connector.avro.encoding import Encoded
from connector.avro.registry import SchemaDirectory
from connector.binlog.constants import STMT_END_F
from connector.binlog.tablemap import TableMapEvent
from connector.checkpoint import Checkpointer
from connector.clock import Clock
from connector.columns import ColumnRules, Shaping
from connector.errors import DeliveryError, Disposition, SluiceError, classify
from connector.exactly import KafkaTransactions
from connector.flat import FlatMessage, RowBatch, key_changed
from connector.inflight import InFlight
from connector.items import Burst, Changes
from connector.lane import KernelPlan
from connector.metrics import Metrics
from connector.native import KernelRows
from connector.oversize import Oversized, OversizePolicy
from connector.position import Position
from connector.routes import Routes, TableRoute
from connector.schema.model import Table
from connector.sink.kafka import RECORD_OVERHEAD, Sink

log = logging.getLogger("sluice.pipeline")

_VALUE = itemgetter(1)
# Kafka's delivery reports are served (producer.poll) at most every so many items or seconds,
# whichever comes first: a poll per item was a fifth of a single-row transaction's cost.
_POLL_EVERY_ITEMS = 16
_POLL_EVERY_S = 0.005
_KEY_MARGIN = 4096  # keys are measured one by one only when a value comes this close to the limit


@dataclass
class Counters:
    rows: int = 0
    kernel_rows: int = 0  # of them, the compiled kernel's (connector/lane.py)
    statements: int = 0
    transactions: int = 0
    kernel_transactions: int = 0  # of them, committed by the compiled kernel
    commits: int = 0  # positions written to the checkpoint stores
    pauses: int = 0  # times the reader waited for Kafka or the checkpoint stores
    paused_s: float = 0.0


@dataclass(slots=True)
class Rows:
    """Row changes of one table and kind (INSERT, UPDATE, DELETE, READ), in order; `ends`: their
    statement ends with them (a change encoded on its own always does)."""

    route: TableRoute
    kind: str
    encoded: list[Encoded]  # never empty; the encoder's own list, which a gathered statement grows
    ends: bool = True

    def goes_on_with(self, other: Rows) -> bool:
        """Whether `other` can join these in one hand-off: the same route and kind, keyed alike."""
        keyless = self.encoded[0][0] is None
        return other.route is self.route and other.kind == self.kind and (other.encoded[0][0] is None) == keyless


@dataclass(frozen=True, slots=True)
class Messages:
    """Messages other than rows (a DDL statement's) to one topic and partition, under its size limit."""

    topic: str
    database: str
    table: str
    encoded: list[Encoded]
    partition: int | None
    limit: int


@dataclass(frozen=True, slots=True)
class Side:
    """Heartbeat or transaction records to their one-partition topic."""

    topic: str
    records: list[tuple[bytes, bytes]]


# What GatherStatement and Produce are handed, in order: a Position is a transaction's (or a
# heartbeat's) end closing behind what came before it.
Outgoing = Rows | Messages | Side | Burst | Position


def paused(metrics: Metrics | None, reason: str, on: bool) -> None:
    """What the reader waits for, as the metrics show it (/ready)."""
    if metrics is not None:
        if on:
            metrics.paused_for.add(reason)
        else:
            metrics.paused_for.discard(reason)


def waited(counters: Counters, metrics: Metrics | None, reason: str, seconds: float) -> None:
    """A pause of the reader, counted: the stop line's and sluice_paused_seconds_total's."""
    counters.pauses += 1
    counters.paused_s += seconds
    if metrics is not None:
        metrics.paused_seconds.labels(reason).inc(seconds)


class Encoder(Protocol):
    """What Encode writes a value format through: Avro's MessageEncoder (connector/avro/encoding.py)
    or canal-json's CanalJsonEncoder (connector/canal.py)."""

    directory: SchemaDirectory  # the schema history's folder (Avro's schemas; claimed by a connector)
    truncate_markers: bool  # a keyless table's snapshot begins with a TRUNCATE message

    def rows(
        self, batch: RowBatch, table: Table, topic: str, shaping: Shaping | None = None
    ) -> list[Encoded] | None:
        """A rows event's changes from their decoded images; None: one by one through `row`."""

    def row(self, message: FlatMessage, table: Table, topic: str) -> Encoded: ...

    def ddl(self, message: FlatMessage, topic: str) -> tuple[bytes, bytes]: ...

    def kernel_rows(
        self, table_map: TableMapEvent, table: Table, topic: str, shaping: Shaping | None = None
    ) -> KernelRows | str:
        """What the compiled kernel writes this table's rows with; else why they take the Python path."""

    def check(self) -> None:
        """What the format depends on answers (a schema registry), said at start."""

    def registry(self) -> Any:
        """The schema registry client readers need; None without one."""


class Encode:
    """Encode: a change to its topic's Avro key and value.

    A rows event's changes are encoded from their decoded images in one pass and gathered with
    the rest of their statement (a [[kafka.columns]] rule's table too, by the compiled transcoder:
    connector/columns.Shaping); what that path does not take (an UPDATE that moves a key, images
    that leave columns out) goes one message at a time. An UPDATE that moves a key becomes a
    DELETE under the old key and an INSERT under the new, so each key's history stays in its one
    partition. DDL goes to the database's `_ddl` topic, on one partition."""

    def __init__(
        self, encoder: Encoder, routes: Routes, gather: GatherStatement, counters: Counters, columns: ColumnRules
    ) -> None:
        self.encoder = encoder
        self.routes = routes
        self.router = routes.router
        self.sink = routes.sink
        self.gather = gather  # the next step
        self.counters = counters
        self.columns = columns  # tables whose columns are filtered or masked ([[kafka.columns]])
        self._told: set[tuple[str, str]] = set()  # tables said to take the Python path

    def submit(self, item: Changes) -> None:
        if not self._rows(item):
            for message in item.messages:
                self.message(message, item.table)

    def message(self, message: FlatMessage, table: Table | None) -> None:
        """One change or statement, after what is gathered."""
        database, name = message["database"], message["table"]
        if message["isDdl"]:
            # One partition (0 also on a topic made before with more): statements stay in order.
            topic = self.router.ddl_topic(database)
            self.sink.ensure_topic(topic, single=True)
            encoded: list[Encoded] = [self.encoder.ddl(message, topic)]
            self.gather.submit(Messages(topic, database, name, encoded, 0, self.sink.limit(topic)))
            self.counters.statements += 1
            return
        if table is None:
            return  # a statement that is not DDL (GRANT, ...): nothing to publish
        shaped = self.columns.table(table)
        if shaped is not None:  # [[kafka.columns]]: the message as its rule shapes it
            message, table = self.columns.message(message, table), shaped
        self._row(message, table)

    def _row(self, message: FlatMessage, table: Table) -> None:
        database, name = message["database"], message["table"]
        if message["type"] == "UPDATE" and key_changed(message, table):
            # The old key's messages live on its own partition: a DELETE there, an INSERT under
            # the new key, so every key's history stays in one partition, in order.
            before = {**message["data"][0], **message["old"][0]}
            self._row({**message, "type": "DELETE", "data": [before], "old": None}, table)
            self._row({**message, "type": "INSERT", "old": None}, table)
            return
        route = self.routes.of(database, name)
        self.gather.submit(Rows(route, message["type"], [self.encoder.row(message, table, route.topic)]))

    def _rows(self, item: Changes) -> bool:
        """A rows event's changes from their decoded images, gathered with the rest of its statement;
        False where the encoder wants them one by one."""
        batch, table = item.batch, item.table
        if batch is None or table is None:
            return False
        shaping = self.columns.shaping(table)  # [[kafka.columns]]: a rule's table is the transcoder's alone
        route = self.routes.of(batch.head["database"], batch.head["table"])
        encoded = self.encoder.rows(batch, table, route.topic, shaping)
        if encoded is None:
            return False
        self.gather.submit(Rows(route, batch.head["type"], encoded, bool(batch.rows.flags & STMT_END_F)))
        return True

    def plan(self, table_map: TableMapEvent, table: Table) -> KernelPlan | None:
        """How the compiled kernel writes this table's rows (connector/lane.py): the bytes, topic and
        partitions `_rows`, GatherStatement and Produce would give them. None where they are not
        written that way: a column the transcoder does not cover (or, under a [[kafka.columns]]
        rule, does not shape)."""
        database, name = table_map.schema, table_map.table
        shaping = self.columns.shaping(table)
        route = self.routes.of(database, name)
        rows = self.encoder.kernel_rows(table_map, table, route.topic, shaping)
        if isinstance(rows, str):
            rule = "a [[kafka.columns]] rule shapes its messages: " if shaping is not None else ""
            self._python_path(database, name, rule + rows)
            return None
        keyed = bool(rows.keys)
        fixed = route.partition(keyed)
        return KernelPlan.of(
            rows, topic=route.topic, database=database, table=name, partitions=route.partitions,
            fixed=-1 if fixed is None else fixed, key_skip=route.key_skip, kinds=route.kernel_kinds(keyed),
            limit=route.room,
        )  # fmt: skip

    def _python_path(self, database: str, name: str, reason: str) -> None:
        """Once a table: its rows take the Python path, and why (sluice_path_rows counts them)."""
        if (database, name) not in self._told:
            self._told.add((database, name))
            log.info("rows of `%s`.`%s` take the Python path, slower than the compiled kernel: %s",
                     database, name, reason)  # fmt: skip


class GatherStatement:
    """Gather: a statement's rows events, handed to Produce together once the statement ends
    (STMT_END_F) or `limit` messages are gathered, whichever comes first: one partition lookup
    and one acknowledgement per partition for the lot, not per 8 KiB event. It is the one way to
    Produce: whatever else is handed on (other messages, side records, a kernel burst, a position
    that closes) hands the gathered rows on first, so order holds."""

    def __init__(self, produce: Produce, limit: int) -> None:
        self.produce = produce  # the next step
        self.limit = limit
        self._open: Rows | None = None  # the statement gathering: the first Rows, grown

    @property
    def open(self) -> bool:
        return self._open is not None

    def submit(self, item: Outgoing) -> None:
        """Rows that continue the open statement (the same route, kind, and key or none) join it;
        anything else hands it on first."""
        if type(item) is not Rows:
            self.join()
            self.produce.submit(item)
            return
        run = self._open
        if run is None or not run.goes_on_with(item):
            self.join()
            run = self._open = item
        else:
            run.encoded += item.encoded
        if item.ends or len(run.encoded) >= self.limit:
            self.join()

    def join(self) -> None:
        """The gathered rows of the open statement to Produce."""
        run, self._open = self._open, None
        if run is not None:
            self.produce.submit(run)


class Produce:
    """Produce: encoded messages to Kafka in order, each tracked in the in-flight FIFO.

    Each message is measured against its topic's limit first; one over it is replaced as the
    oversize policy says. Rows go where their table's route says (connector/routes.py): one
    partition for a table without a key, a tombstone after each DELETE when tombstones are on.
    `poll` serves Kafka's delivery reports every few items or milliseconds and raises what Kafka
    gave up on; `join` waits until what is in flight is acknowledged."""

    def __init__(
        self, sink: Sink, inflight: InFlight, oversize: OversizePolicy, counters: Counters,
        committed: Callable[[], Position | None], clock: Clock, delivery_timeout_s: float,
        metrics: Metrics | None, exactly: KafkaTransactions | None, max_in_flight: int,
    ) -> None:  # fmt: skip
        self.sink = sink
        self.max_in_flight = max_in_flight  # `poll` says there is no room from this many unacknowledged
        self.inflight = inflight
        self.exactly = exactly  # exactly once: positions close in the open Kafka transaction
        self.oversize = oversize
        self.counters = counters
        self.committed = committed  # where the checkpoint stays, for the errors' words
        self.clock = clock
        self.delivery_timeout_s = delivery_timeout_s
        self.metrics = metrics
        self._unpolled = 0  # items since Kafka was last polled
        self._polled_at = clock.now()

    def submit(self, item: Outgoing) -> None:
        match item:
            case Rows():
                self._rows(item)
            case Burst():
                self._burst(item)
            case Position():
                self._close(item)
            case Messages():
                self._messages(item.topic, item.database, item.table, item.encoded, item.partition, item.limit)
            case Side():
                self.sink.ensure_topic(item.topic, single=True)
                self.sink.produce_many(item.topic, item.records, 0, self.inflight.track(len(item.records)))

    def _rows(self, rows: Rows) -> None:
        route, kind, encoded = rows.route, rows.kind, rows.encoded
        keyed = encoded[0][0] is not None  # no primary key: one partition per table keeps its order
        self._messages(route.topic, route.database, route.table, encoded, route.partition(keyed), route.limit)
        if route.follows_with_tombstones(kind, keyed):
            # Log compaction then drops the key: a tombstone after each DELETE, on its key's partition.
            keys = [key for key, _ in encoded if key is not None]
            self.sink.produce_tombstones(route.topic, keys, self.inflight.track(len(keys)))
        self.counters.rows += len(encoded)
        if self.metrics is not None:
            self.metrics.row(route.database, route.table, kind, len(encoded),
                             "snapshot" if kind == "READ" else "python")  # fmt: skip

    def _burst(self, burst: Burst) -> None:
        """A kernel run's messages, routed and measured already (connector/lane.py)."""
        for topic, plain, tails, count in burst.topics:
            self.sink.produce_routed(topic, plain, tails, self.inflight.track(count))
        for database, name, kind, count in burst.rows:
            self.counters.rows += count
            self.counters.kernel_rows += count
            if self.metrics is not None:
                self.metrics.row(database, name, kind, count, "kernel")

    def _close(self, position: Position) -> None:
        """A position closes: in the in-flight FIFO, or (exactly once) in the open Kafka transaction,
        which reaches the FIFO when it commits."""
        if self.exactly is None:
            self.inflight.close(position)
        else:
            self.exactly.close(position)

    def _messages(
        self, topic: str, database: str, name: str, encoded: list[Encoded], partition: int | None, limit: int
    ) -> None:
        """Messages to Kafka in order, each measured against its topic's limit first (max.message.bytes)."""
        # One C-speed pass over the values; keys are small (an index key is at most 3072 bytes).
        if max(map(len, map(_VALUE, encoded))) + RECORD_OVERHEAD + _KEY_MARGIN <= limit:
            self.sink.produce_many(topic, encoded, partition, self.inflight.track(len(encoded)))
            return
        run: list[Encoded] = []
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

    def poll(self) -> bool:
        """Kafka's delivery reports, when enough items or time have passed; then what it reported
        (DeliveryError). True while there is room for more: fewer than `max_in_flight`
        unacknowledged; the caller stops handing items on until there is (Pipeline.wait_for_room)."""
        self._unpolled += 1
        now = self.clock.now()
        if self._unpolled >= _POLL_EVERY_ITEMS or now - self._polled_at >= _POLL_EVERY_S:
            self.sink.poll(0)
            self._unpolled, self._polled_at = 0, now
        self.check()
        return self.inflight.outstanding < self.max_in_flight

    def check(self) -> None:
        """Raise DeliveryError when Kafka gave up on a message, or acknowledged nothing for too long."""
        if self.inflight.errors:
            if self.metrics is not None:
                self.metrics.delivery_errors.inc(len(self.inflight.errors))
            raise DeliveryError(
                f"Kafka gave up on message(s): {self.inflight.errors[0]}; the checkpoint stays at {self.committed()}"
            )
        if self.inflight.silent_s() > self.delivery_timeout_s:
            raise DeliveryError(
                f"Kafka acknowledged nothing for {self.delivery_timeout_s:g} s with {self.inflight.outstanding} "
                f"message(s) waiting; the checkpoint stays at {self.committed()}"
            )

    def join(self, deadline: float) -> None:
        """Wait (until `deadline`, the clock's) for Kafka to acknowledge what is in flight."""
        while self.inflight.outstanding and self.clock.now() < deadline:
            self.sink.poll(0.1)
        self.sink.flush(max(0.0, deadline - self.clock.now()))


class CommitPositions:
    """Commit: the newest position up to which Kafka acknowledged every message, to the checkpoint
    policy. When both checkpoint stores refuse it, `poll` holds the reader and retries with a
    growing pause until one takes it: nothing read after it is lost, nothing is skipped."""

    def __init__(
        self, inflight: InFlight, checkpointer: Checkpointer, counters: Counters, clock: Clock,
        stop: threading.Event, metrics: Metrics | None,
    ) -> None:  # fmt: skip
        self.inflight = inflight
        self.checkpointer = checkpointer
        self.counters = counters
        self.clock = clock
        self.stop = stop
        self.metrics = metrics
        self.last: Position | None = None  # the newest position handed to the checkpointer

    def poll(self) -> None:
        position = self.inflight.committable()
        if position is not None:
            self.last = position
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

    def join(self, timeout_s: float) -> None:
        """Commit what Kafka acknowledged, and wait until the checkpointer has written it."""
        self.poll()
        self.checkpointer.settle(timeout_s)
        if self.checkpointer.failing is not None:
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
                paused(self.metrics, "checkpoint stores", True)
                log.warning("cannot save position %s (%s); pausing %.1f s", self.last, exc, delay)
                self.clock.sleep(delay)
                waited(self.counters, self.metrics, "checkpoint stores", delay)
                delay = min(delay * 2, 5.0)
                if self.stop.is_set():
                    raise
        paused(self.metrics, "checkpoint stores", False)
