"""One test class per outside system, run against the in-memory twin and the real service."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from connector.checkpoint import (
    CheckpointStore,
    DatabaseCheckpointStore,
    MemoryCheckpointStore,
    RedisCheckpointStore,
)
from connector.position import Position
from connector.sink.kafka import KafkaSettings, KafkaSink, MemorySink, Sink
from connector.sink.partitioning import partition_for
from connector.startup import checkpoint_connector
from tests.live import live_config

KAFKA = "127.0.0.1:9092"
REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture(params=["memory", pytest.param("kafka", marks=pytest.mark.live)])
def sink(request: pytest.FixtureRequest) -> Iterator[Sink]:
    if request.param == "memory":
        yield MemorySink(partitions=3)
    else:
        yield KafkaSink(KafkaSettings(KAFKA, partitions=3, linger_ms=5))


def read_back(sink: Sink, topic: str) -> list[tuple[int, int, bytes | None, bytes]]:
    """(partition, offset, key, value) of everything in the topic."""
    if isinstance(sink, MemorySink):
        return [(m.partition, m.offset, m.key, m.value) for m in sink.messages(topic)]
    consumer = Consumer({"bootstrap.servers": KAFKA, "group.id": f"t-{uuid.uuid4()}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(sink.partitions(topic))])
    out = []
    idle = 0
    while idle < 3:
        batch = consumer.consume(500, 1.0)
        idle = idle + 1 if not batch else 0
        out += [(m.partition(), m.offset(), m.key(), m.value()) for m in batch if m.error() is None]
    consumer.close()
    return sorted(out, key=lambda r: (r[0], r[1]))  # type: ignore[arg-type]


class TestSink:
    def test_keyed_messages_land_on_their_murmur2_partition_in_order(self, sink: Sink) -> None:
        topic = f"sinktest.{uuid.uuid4().hex[:8]}"
        sink.ensure_topic(topic)
        acks: list[str | None] = []
        sent: list[tuple[bytes | None, bytes]] = [(f"key-{i % 7}".encode(), f"value-{i}".encode()) for i in range(60)]
        for key, value in sent[:30]:
            sink.produce(topic, key, value, None, acks.append)
        sink.produce_many(topic, sent[30:], None, acks.append)
        sink.produce(topic, None, b"no-key", 2, acks.append)
        assert sink.flush(30) == 0
        assert acks == [None] * 61
        stored = read_back(sink, topic)
        assert len(stored) == 61
        for partition, _, key, _ in stored:
            assert partition == (partition_for(key, 3) if key is not None else 2)
        for k in range(7):  # each key's values in the order they were produced
            key = f"key-{k}".encode()
            assert [v for _, _, kk, v in stored if kk == key] == [v for kk, v in sent if kk == key]

    def test_a_batch_for_one_partition_keeps_its_order(self, sink: Sink) -> None:
        topic = f"sinktest.{uuid.uuid4().hex[:8]}"
        sink.ensure_topic(topic)
        acks: list[str | None] = []
        sent: list[tuple[bytes | None, bytes]] = [(None, f"v{i}".encode()) for i in range(40)]
        sink.produce_many(topic, sent, 1, acks.append)
        assert sink.flush(30) == 0
        assert acks == [None] * 40
        assert [(p, v) for p, _, _, v in read_back(sink, topic)] == [(1, v) for _, v in sent]

    def test_partition_count_of_created_topics(self, sink: Sink) -> None:
        topic = f"sinktest.{uuid.uuid4().hex[:8]}"
        assert sink.partitions(topic) == 3


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.live),
                        pytest.param("database", marks=pytest.mark.live)])  # fmt: skip
def store(request: pytest.FixtureRequest) -> Iterator[CheckpointStore]:
    name = f"store-test-{uuid.uuid4().hex[:8]}"
    if request.param == "memory":
        yield MemoryCheckpointStore()
    elif request.param == "redis":
        yield RedisCheckpointStore(REDIS, name)
    else:
        yield DatabaseCheckpointStore(checkpoint_connector(live_config([], name=name)), name)


class TestCheckpointStore:
    def test_put_get_delete(self, store: CheckpointStore) -> None:
        assert store.get() is None
        first = Position("mariadb-bin.000007", 1234, "0-1-99,1-2-3", 1, 1700000000)
        store.put(first)
        assert store.get() == first
        second = Position("mariadb-bin.000008", 4, "0-1-100,1-2-3", 1, 1700000001)
        store.put(second)
        assert store.get() == second
        store.delete()
        assert store.get() is None


@pytest.mark.live
def test_librdkafka_and_our_murmur2_agree() -> None:
    """The partition librdkafka's murmur2_random picks for a key equals partition_for (Java's)."""
    sink = KafkaSink(KafkaSettings(KAFKA, partitions=7))
    topic = f"murmur.{uuid.uuid4().hex[:8]}"
    sink.ensure_topic(topic)
    landed: dict[bytes, int] = {}

    def landed_on(key: bytes) -> Callable[[Any, Any], None]:
        return lambda err, msg: landed.__setitem__(key, msg.partition())

    for i in range(200):
        key = uuid.uuid4().bytes + bytes([i])
        sink.producer.produce(topic, key=key, value=b"x", on_delivery=landed_on(key))
    sink.flush(30)
    assert len(landed) == 200
    assert all(partition == partition_for(key, 7) for key, partition in landed.items())
