"""The connector's main loop: stream items -> Avro -> Kafka, with checkpoints behind Kafka's acknowledgements.

Rows go to `{prefix}.{database}.{table}` (or a route's topic), keyed by their primary key;
rows of tables without one have no key and go to the partition the table's name hashes
to. DDL goes to `{prefix}.{database}._ddl`. Each transaction's end is closed in the
in-flight FIFO; the newest fully acknowledged position is committed after every item.

A statement's rows events are handed to Kafka together, once it ends (STMT_END_F) or
`group_limit` messages gathered, whichever comes first: one partition lookup and one
acknowledgement per partition for the lot, not per 8 KiB event. Anything else that
produces, and every transaction end, hands the gathered rows on first, so order holds.

Back-pressure: with `max_in_flight` messages unacknowledged (Kafka slow or down) `take`
says there is no room, and `run` pulls no further item until acknowledgements make some
(`wait_for_room`; a snapshot reading a table does the same): memory stays bounded by that
number. Kafka acknowledging nothing for `delivery_timeout_s` while messages wait:
`DeliveryError`, the checkpoint before them (the producer itself never times a message
out: see connector/sink/kafka.py). Checkpoint stores both down: the reader waits,
retrying the commit.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from connector.avro.reader import MessageReader
from connector.checkpoint import Checkpointer
from connector.clock import SYSTEM_CLOCK, Clock
from connector.columns import ColumnRules
from connector.errors import StoppedWaitingError
from connector.exactly import ExactlyOnce, KafkaTransactions
from connector.extras import HeartbeatTopic, TransactionTopic
from connector.flat import FlatMessage
from connector.inflight import InFlight
from connector.items import Burst, Changes, Commit, StreamItem
from connector.lane import Planner
from connector.metrics import Metrics
from connector.oversize import OversizePolicy
from connector.position import Position
from connector.routes import Routes
from connector.schema.model import Table
from connector.sink.kafka import Sink
from connector.sink.partitioning import TopicRouter
from connector.snapshot.coordinator import Snapshotter
from connector.steps import CommitPositions, Counters, Encode, Encoder, GatherStatement, Produce, Side, paused, waited

log = logging.getLogger("sluice.pipeline")


@dataclass(frozen=True, slots=True)
class Options:
    """The [kafka] options that add or shape messages (connector/runner.pipeline_options makes them)."""

    tombstones: bool = False  # a null value under each DELETE's key
    columns: ColumnRules = field(default_factory=lambda: ColumnRules([]))  # [[kafka.columns]]
    transactions: TransactionTopic | None = None  # a BEGIN and END record per transaction
    heartbeats: HeartbeatTopic | None = None
    exactly_once: ExactlyOnce | None = None  # Kafka transactions, each with its position (connector/exactly.py)


NO_OPTIONS = Options()  # none of them: the messages rows and statements make, as they are


class Pipeline:
    """Stream items in, through the steps (connector/steps.py): Encode -> GatherStatement ->
    Produce -> (Kafka's acknowledgements) -> CommitPositions. What is here is the order of work:
    a snapshot's hand-over, the transaction and heartbeat records, where positions close."""

    def __init__(
        self,
        encoder: Encoder,
        sink: Sink,
        router: TopicRouter,
        checkpointer: Checkpointer,
        max_in_flight: int = 100_000,
        stop: threading.Event | None = None,
        delivery_timeout_s: float = 300.0,
        clock: Clock = SYSTEM_CLOCK,
        group_limit: int = 4096,
        oversize: OversizePolicy | None = None,
        metrics: Metrics | None = None,
        options: Options = NO_OPTIONS,
    ) -> None:
        self.encoder = encoder
        self.sink = sink
        self.clock = clock
        self.inflight = InFlight(clock)
        self.stop = stop or threading.Event()
        self.counters = Counters()
        self.metrics = metrics
        self.snapshot: Snapshotter | None = None
        self.commit = CommitPositions(self.inflight, checkpointer, self.counters, clock, self.stop, metrics)
        self.exactly: KafkaTransactions | None = None
        if options.exactly_once is not None:
            self.exactly = KafkaTransactions(sink, options.exactly_once, self.inflight, clock, metrics)
        self.produce = Produce(
            sink, self.inflight,
            oversize or OversizePolicy("fail", MessageReader(encoder.directory, encoder.registry()), router.prefix),
            self.counters, lambda: self.commit.last, clock, delivery_timeout_s, metrics, self.exactly, max_in_flight,
        )  # fmt: skip
        self.gather = GatherStatement(self.produce, group_limit)
        self.routes = Routes(router, sink, options.tombstones)
        self.encode = Encode(encoder, self.routes, self.gather, self.counters, options.columns)
        self.transactions = options.transactions
        self.heartbeats = options.heartbeats

    def run(self, items: Iterable[StreamItem], start: Position | None = None) -> None:
        """Until the items end or `stop` is set; then flushes Kafka and commits what it acknowledged.

        `start`: where the items begin, so a snapshot can hand over before the first of them."""
        try:
            if start is not None and self.snapshot is not None:
                self.snapshot.turn(start, self, self.stop.is_set)
            for item in items:
                if not self.take(item):
                    self.wait_for_room()
                if self.stop.is_set():
                    break
        except StoppedWaitingError as exc:
            log.info("%s", exc)  # a stop: what Kafka confirmed is committed below
        finally:
            if self.snapshot is not None:
                self.snapshot.close()
            self.drain()
        self.produce.check()  # a failure Kafka reported after the last poll stops it as one before would

    def take(self, item: StreamItem) -> bool:
        """One item through the steps. False: Kafka is behind (`max_in_flight` unacknowledged), and
        the caller hands on nothing more until `wait_for_room` returns."""
        if self.metrics is not None:
            self.metrics.tick()
        if isinstance(item, Burst):
            return self._burst(item)
        if isinstance(item, Changes):
            if self.snapshot is not None:
                self.snapshot.saw(item)
                if self.snapshot.holds(item):
                    return True  # a keyless table waiting for its READ, which carries this change
            if self.transactions is not None and item.table is not None:
                self._transaction_change(item)
            self.encode.submit(item)
            # a statement still gathering breathes when it is handed on
            return self.gather.open or self.breathe()
        return self._close(item, item.position, 1 if isinstance(item, Commit) else 0)

    def _burst(self, burst: Burst) -> bool:
        """The compiled kernel's messages, then the position of the last transaction it committed.
        With transaction records, each transaction's BEGIN and END go first (`_burst_records`)."""
        if self.transactions is not None:
            self._burst_records(burst)
        self.gather.submit(burst)
        if self.metrics is not None:
            self.metrics.burst(burst)
        if burst.position is None:
            return self.breathe()  # a transaction still open: its end comes in a later item
        self.counters.kernel_transactions += burst.transactions
        return self._close(burst, burst.position, burst.transactions)

    def _close(self, item: StreamItem, position: Position, transactions: int) -> bool:
        """A position closes, after side records; a snapshot's turn."""
        if self.snapshot is not None and position.snapshot != self.snapshot.state_text:
            position = replace(position, snapshot=self.snapshot.state_text)  # saved with every position
        self._side_records(item, position)
        self.gather.submit(position)
        self.counters.transactions += transactions
        room = self.breathe()
        if self.snapshot is None:
            return room
        if not room:
            self.wait_for_room()  # before the snapshot reads a chunk (it waits between its rows too)
        self.snapshot.turn(position, self, self.stop.is_set)
        return True

    # -- what the stream's lane uses (connector/lane.Lanes) ------------------------------------

    def planner(self) -> Planner:
        """How the kernel's tables are planned. Heartbeats come as positions close, a burst's too
        (`_close`); transaction records from what the burst says of its transactions."""
        return self.encode.plan

    def records_transactions(self) -> bool:
        return self.transactions is not None

    def takes_bursts(self) -> bool:
        """Not while a snapshot has tables to read: it sees every change (Snapshotter.saw, holds)."""
        return self.snapshot is None or not self.snapshot.state.tables

    # -- what the snapshot uses (connector/snapshot/coordinator.Emitter) ----------------------

    def publish(self, message: FlatMessage, table: Table) -> None:
        if message["type"] == "TRUNCATE" and not self.encoder.truncate_markers:
            return
        self.encode.message(message, table)

    def close_position(self, position: Position) -> None:
        self.gather.submit(position)

    def breathe(self) -> bool:
        """Serve Kafka's callbacks and commit; False while too much is unacknowledged."""
        room = self.produce.poll()
        self.commit.poll()
        return room

    # -- side records ----------------------------------------------------------------------

    def _side_records(self, item: StreamItem, position: Position) -> None:
        """The transaction's END and a heartbeat, when configured, before the position closes."""
        if isinstance(item, Commit) and self.transactions is not None:
            self._side(self.transactions.topic, self.transactions.end())
        if self.heartbeats is not None:
            self._side(self.heartbeats.topic, self.heartbeats.due(str(position)))

    def _burst_records(self, burst: Burst) -> None:
        """The BEGIN and END records of the transactions whose messages the burst carries, all before
        them (BEGIN before a transaction's first change, as on the Python path; on its one-partition
        topic, each END after its BEGIN; the position closes after both). A transaction the burst
        leaves open keeps the topic's `current`: its next part (a later burst's, or the Python path's
        changes when the kernel hands it over) counts on, and its END comes with its commit."""
        topic = self.transactions
        assert topic is not None
        records = []
        for gtid, first, committed, counts in burst.parts:
            if counts and (begin := topic.begin(gtid, burst.file, first)) is not None:
                records.append(begin)
            for database, table, n in counts:
                topic.count(database, table, n)
            if committed and (end := topic.end()) is not None:
                records.append(end)
        if records:  # one hand-off, one acknowledgement for them all
            self.gather.submit(Side(topic.topic, records))

    def _transaction_change(self, item: Changes) -> None:
        assert self.transactions is not None and item.table is not None
        if not item.messages:
            return
        # a rows event's shared fields, without rendering its messages (the Avro path never does)
        first = item.batch.head if item.batch is not None else item.messages[0]
        self._side(self.transactions.topic, self.transactions.begin(first["gtid"], item.file, item.pos))
        self.transactions.count(first["database"], first["table"], len(item.messages))

    def _side(self, topic: str, record: tuple[bytes, bytes] | None) -> None:
        """A heartbeat or transaction record on its one-partition topic, tracked like any message."""
        if record is not None:
            self.gather.submit(Side(topic, [record]))

    # -- waiting ---------------------------------------------------------------------------

    def wait_for_room(self) -> None:
        """Kafka is behind: serve its acknowledgements and commit until what is unacknowledged is
        down to 80% of `max_in_flight` (or a stop), counted as a pause."""
        started = self.clock.now()
        paused(self.metrics, "kafka", True)
        log.info("%d messages unacknowledged: pausing the reader", self.inflight.outstanding)
        while self.inflight.outstanding >= self.produce.max_in_flight * 0.8 and not self.stop.is_set():
            self.sink.poll(0.1)
            self.produce.check()
            self.commit.poll()
        paused(self.metrics, "kafka", False)
        waited(self.counters, self.metrics, "kafka", self.clock.now() - started)

    def drain(self, timeout_s: float = 30.0) -> None:
        """Wait for Kafka to acknowledge what is in flight, then commit what it did."""
        with contextlib.suppress(StoppedWaitingError):  # a statement stopped mid-way: its
            self.gather.join()  # transaction stays open, the checkpoint before it
        deadline = self.clock.now() + timeout_s
        self.produce.join(deadline)
        if self.inflight.errors:
            return
        if self.exactly is not None and not self.inflight.outstanding:
            with contextlib.suppress(StoppedWaitingError):  # stopped waiting for Kafka: left open
                self.exactly.finish()  # what is closed and not committed yet
        self.commit.join(max(0.0, deadline - self.clock.now()))
