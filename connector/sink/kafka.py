"""Where messages go: Apache Kafka, or its in-memory twin for fast tests.

Both implement `Sink`: `produce` hands a message on with a callback that runs, from
`poll`/`flush`, once the broker acknowledged it (or gave up). The Kafka producer is
idempotent with `acks=all`, so retries neither reorder nor duplicate within a partition;
keys are partitioned with murmur2 like Java clients.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from connector.errors import SluiceError
from connector.sink.partitioning import partition_for

log = logging.getLogger("sluice.kafka")

Delivered = Callable[[str | None], None]  # None: acknowledged; else the error


class SinkError(SluiceError):
    """Kafka refused a request that retrying will not fix (a topic that cannot be created)."""


class Sink(Protocol):
    def produce(self, topic: str, key: bytes | None, value: bytes, partition: int | None, done: Delivered) -> None: ...

    def produce_many(
        self, topic: str, messages: list[tuple[bytes | None, bytes]], partition: int | None, done: Delivered
    ) -> None:
        """(key, value) pairs in order; `done` is called once for each."""

    def poll(self, timeout: float) -> int: ...

    def flush(self, timeout: float) -> int: ...

    def partitions(self, topic: str) -> int: ...

    def ensure_topic(self, topic: str) -> None: ...


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    bootstrap_servers: str
    partitions: int = 3
    replication_factor: int = 1
    linger_ms: int = 20
    compression: str = "lz4"
    delivery_timeout_s: float = 300.0
    extra: dict[str, Any] = field(default_factory=dict)


class KafkaSink:
    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.producer = Producer(
            {
                "bootstrap.servers": settings.bootstrap_servers,
                "enable.idempotence": True,  # with acks=all: no reordering or duplicates on retry
                "acks": "all",
                "partitioner": "murmur2_random",  # the partition a Java client picks for the key
                "linger.ms": settings.linger_ms,
                "compression.type": settings.compression,
                "message.timeout.ms": int(settings.delivery_timeout_s * 1000),
                "queue.buffering.max.messages": 1_000_000,
                "queue.buffering.max.kbytes": 1_048_576,
                **settings.extra,
            }
        )
        self.admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
        self._topics: dict[str, int] = {}

    def produce(self, topic: str, key: bytes | None, value: bytes, partition: int | None, done: Delivered) -> None:
        self.produce_many(topic, [(key, value)], partition, done)

    def produce_many(
        self, topic: str, messages: list[tuple[bytes | None, bytes]], partition: int | None, done: Delivered
    ) -> None:
        def delivered(err: KafkaError | None, msg: Message) -> None:
            done(None if err is None else f"{topic}: {err.str()}")

        # One delivery callback for the lot: a closure per message costs as much as the produce.
        # Partition -1: the partitioner picks (murmur2 of the key).
        produce, partition_ = self.producer.produce, -1 if partition is None else partition
        for key, value in messages:
            while True:
                try:
                    produce(topic, value, key, partition_, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: serve callbacks until there is room
                    self.producer.poll(0.1)

    def poll(self, timeout: float) -> int:
        served: int = self.producer.poll(timeout)
        return served

    def flush(self, timeout: float) -> int:
        remaining: int = self.producer.flush(timeout)
        return remaining

    def partitions(self, topic: str) -> int:
        count = self._topics.get(topic)
        if count is None:
            self.ensure_topic(topic)
            count = self._topics[topic]
        return count

    def ensure_topic(self, topic: str) -> None:
        if topic in self._topics:
            return
        deadline = time.monotonic() + 60
        while True:
            existing = self._existing_partitions(topic)
            if existing:
                self._topics[topic] = existing
                return
            self._create(topic)
            if time.monotonic() > deadline:
                raise SinkError(f"topic {topic} does not appear in the metadata after creating it")
            time.sleep(0.1)

    def _existing_partitions(self, topic: str) -> int:
        metadata = self.producer.list_topics(topic, timeout=30)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            return 0
        return len(info.partitions)

    def _create(self, topic: str) -> None:
        new = NewTopic(topic, num_partitions=self.settings.partitions,
                       replication_factor=self.settings.replication_factor)  # fmt: skip
        future = self.admin.create_topics([new], operation_timeout=30)[topic]
        try:
            future.result(60)
            log.info("created topic %s (%d partitions)", topic, self.settings.partitions)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise SinkError(f"cannot create topic {topic}: {error.str()}") from exc


@dataclass(slots=True)
class StoredMessage:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


class MemorySink:
    """The in-memory twin: partitions are lists; acknowledgements come on poll, in order.

    `fail_next(n, error)` makes the next n produced messages fail, as a broker that gave up would.
    """

    def __init__(self, partitions: int = 3) -> None:
        self.default_partitions = partitions
        self.topics: dict[str, list[list[StoredMessage]]] = {}
        self._pending: list[tuple[StoredMessage, Delivered, str | None]] = []
        self._failures: list[str] = []

    def fail_next(self, count: int, error: str = "broker unavailable") -> None:
        self._failures += [error] * count

    def produce(self, topic: str, key: bytes | None, value: bytes, partition: int | None, done: Delivered) -> None:
        partitions = self.topics.setdefault(topic, [[] for _ in range(self.default_partitions)])
        if partition is None:
            partition = partition_for(key, len(partitions)) if key is not None else 0
        error = self._failures.pop(0) if self._failures else None
        message = StoredMessage(topic, partition, -1, key, value)
        self._pending.append((message, done, error))

    def produce_many(
        self, topic: str, messages: list[tuple[bytes | None, bytes]], partition: int | None, done: Delivered
    ) -> None:
        for key, value in messages:
            self.produce(topic, key, value, partition, done)

    def poll(self, timeout: float) -> int:
        served, self._pending = self._pending, []
        for message, done, error in served:
            if error is None:
                log_ = self.topics[message.topic][message.partition]
                message.offset = len(log_)
                log_.append(message)
            done(error)
        return len(served)

    def flush(self, timeout: float) -> int:
        self.poll(0)
        return 0

    def partitions(self, topic: str) -> int:
        self.ensure_topic(topic)
        return len(self.topics[topic])

    def ensure_topic(self, topic: str) -> None:
        self.topics.setdefault(topic, [[] for _ in range(self.default_partitions)])

    def messages(self, topic: str) -> list[StoredMessage]:
        return [m for part in self.topics.get(topic, []) for m in part]
