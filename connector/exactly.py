"""Exactly once (`[kafka] exactly_once`): binlog transactions grouped into Kafka transactions, each
committed together with the position it leads to, so that a read_committed reader sees every
change once through crashes, restarts and a second instance.

The position of record is Kafka's: the last committed record under the connector's name on
`{prefix}._positions` (one partition, compacted). Redis and the checkpoint database take each
committed position after the commit, as mirrors for `sluice status` and tooling; at start Kafka's
wins over theirs. A Kafka transaction only ever ends where a position closes (a binlog
transaction's end, a heartbeat between transactions), never inside a binlog transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from connector.checkpoint import position_json, position_of_json
from connector.clock import SYSTEM_CLOCK, Clock
from connector.errors import SinkError, TransactionAbortedError
from connector.inflight import InFlight
from connector.logs import LIBRDKAFKA
from connector.metrics import Metrics
from connector.position import Position
from connector.sink.kafka import Sink

# A quiet stream whose position moves (heartbeats, other tables' events) commits it this often at
# most: a commit of no messages costs Kafka two records, and resuming a little earlier costs a
# few filtered events.
IDLE_COMMIT_S = 5.0
# How long reading the position of record may take (the broker waited for like any request).
READ_S = 60.0


def transactional_id(name: str) -> str:
    """The producer's transactional.id: the connector's name, so a second instance fences the first."""
    return f"sluice-{name}"


@dataclass(frozen=True, slots=True)
class PositionTopic:
    topic: str  # {prefix}._positions
    name: str  # the connector's: the record's key

    @classmethod
    def of(cls, prefix: str, name: str) -> PositionTopic:
        return cls(f"{prefix}._positions", name)

    def record(self, position: Position) -> tuple[bytes, bytes]:
        return self.name.encode(), position_json(position).encode()


@dataclass(frozen=True, slots=True)
class ExactlyOnce:
    """[kafka] exactly_once's settings, as the pipeline takes them."""

    topic: PositionTopic
    every_s: float = 0.25  # [kafka] transaction_ms
    max_messages: int = 50_000  # [kafka] transaction_max_messages


class KafkaTransactions:
    """Where positions close: each joins the open Kafka transaction, which commits (with the
    position as its last record) once it is `every_s` old or holds `max_messages` messages.
    Only a committed position reaches the in-flight FIFO, and from it the checkpoint mirrors."""

    def __init__(
        self, sink: Sink, once: ExactlyOnce, inflight: InFlight, clock: Clock = SYSTEM_CLOCK,
        metrics: Metrics | None = None,
    ) -> None:  # fmt: skip
        self.sink, self.inflight, self.clock, self.metrics = sink, inflight, clock, metrics
        self.topic, self.every_s, self.max_messages = once.topic, once.every_s, once.max_messages
        self.began = clock.now()  # when the open Kafka transaction began
        self.committed_at = self.began
        self.pending: Position | None = None  # the newest position closed and not committed yet
        self.closed_at = 0  # how many messages the open transaction held when `pending` closed
        self.failed = False  # a commit raised (aborted, fenced, stopped waiting): no transaction is ours

    def start(self) -> None:
        self.sink.ensure_topic(self.topic.topic, single=True, compacted=True)

    def close(self, position: Position) -> None:
        """A position closes: committed with its transaction when the transaction is due."""
        self.pending = position
        messages = self.closed_at = self.inflight.open_messages
        now = self.clock.now()
        if messages >= self.max_messages or (
            now - self.began >= self.every_s and (messages or now - self.committed_at >= IDLE_COMMIT_S)
        ):
            self.commit()

    def commit(self) -> None:
        """Commit the open transaction with the newest closed position (nothing to do without one)."""
        position = self.pending
        if position is None:
            return
        self.failed = True  # until Kafka answers: a commit that raised leaves finish() nothing to end
        try:
            self.sink.commit_transaction(self.topic.topic, *self.topic.record(position))
        except TransactionAbortedError:
            if self.metrics is not None:
                self.metrics.kafka_transactions.labels("aborted_by_kafka").inc()
            raise
        self.failed = False
        self.pending = None
        self.inflight.close(position)  # every message before it is acknowledged: committable at once
        self.began = self.committed_at = self.clock.now()
        if self.metrics is not None:
            self.metrics.kafka_transactions.labels("committed").inc()

    def finish(self) -> None:
        """At a stop: commit what closed, unless messages of a binlog transaction still open
        were produced after it (Kafka commits a transaction whole): then abort, and the next
        start redoes what closed since the last commit. Aborted, the transaction does not hold
        read_committed readers back until its timeout."""
        if self.failed:
            return
        if self.inflight.open_messages == self.closed_at:
            self.commit()
        else:
            self.sink.abort_transaction()
            if self.metrics is not None:
                self.metrics.kafka_transactions.labels("aborted").inc()

    def initial(self, position: Position) -> None:
        """The first start: the position it begins at is committed before anything else."""
        self.pending = position
        self.commit()


def write_position(client: dict[str, Any], name: str, topic: PositionTopic, position: Position | None) -> None:
    """`sluice position set|reset` in this mode: `position` committed as the position of record
    (None: a tombstone, so the next start takes [source] start). It takes the transactional id
    over, so a connector still running is fenced and stops."""
    producer = Producer({**client, "transactional.id": transactional_id(name), "logger": LIBRDKAFKA})
    try:
        producer.init_transactions(READ_S)
        producer.begin_transaction()
        key, value = topic.record(position) if position is not None else (topic.name.encode(), None)
        producer.produce(topic.topic, value, key, 0)
        producer.commit_transaction(READ_S)
    except KafkaException as exc:
        raise SinkError(f"cannot write the position of record on {topic.topic}: {exc}") from exc


def read_position(client: dict[str, Any], topic: PositionTopic, clock: Clock = SYSTEM_CLOCK) -> Position | None:
    """The position of record: the last committed record under the connector's name (None: none
    yet, or a tombstone). Read after `init_transactions`, so no earlier instance can still commit."""
    consumer = Consumer({
        **client, "group.id": f"sluice-{topic.name}-positions", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True, "logger": LIBRDKAFKA,
    })  # fmt: skip
    try:
        metadata = consumer.list_topics(topic.topic, timeout=READ_S)
        info = metadata.topics.get(topic.topic)
        if info is None or info.error is not None or not info.partitions:
            return None
        consumer.assign([TopicPartition(topic.topic, 0, -2)])  # OFFSET_BEGINNING: compaction keeps it short
        found: bytes | None = None
        deadline = clock.now() + READ_S
        while clock.now() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return position_of_json(found) if found is not None else None
                raise SinkError(f"cannot read the position of record on {topic.topic}: {error.str()}")
            if message.key() == topic.name.encode():
                found = message.value()
        raise SinkError(f"cannot read the position of record on {topic.topic}: no end in {READ_S:.0f} s")
    except KafkaException as exc:
        raise SinkError(f"cannot read the position of record on {topic.topic}: {exc}") from exc
    finally:
        consumer.close()
