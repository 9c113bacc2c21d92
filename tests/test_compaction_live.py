"""Log compaction with `tombstones = true` and `topic_config = {cleanup.policy = "compact", ...}`: once
the broker has compacted the topic, its values are exactly the live rows, one message per key,
each the row as SELECT shows it; a deleted key has no value left (at most its tombstone, which
Kafka keeps for one more cleaning)."""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._resource import ResourceType

from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.config import AvroSection
from connector.runner import Connector
from tests.support.live import KAFKA, connect, fresh_database, live_config, wait_until
from tests.support.replay import read_to_end

pytestmark = pytest.mark.live

# Segments roll every 100 ms and any dirty share is worth cleaning; tombstones are kept 0 ms.
COMPACT = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
           "delete.retention.ms": "0", "min.compaction.lag.ms": "0"}  # fmt: skip


def _topic(topic: str) -> list[tuple[bytes | None, bytes | None]]:
    admin = AdminClient({"bootstrap.servers": KAFKA})
    partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions
    return [(m.key(), m.value()) for m in read_to_end({}, [TopicPartition(topic, p, 0) for p in partitions])]


def test_compacted_topic_holds_exactly_the_live_rows(tmp_path: Path) -> None:
    name, db = f"cmp{uuid.uuid4().hex[:6]}", "compaction"
    fresh_database(db, "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20))")
    base = live_config([rf"{db}\..*"], name=name, server_id=7000 + random.randrange(1000))
    config = replace(base, kafka=replace(base.kafka, topic_prefix=name, tombstones=True, topic_config=COMPACT,
                                             partitions=1),
                     avro=AvroSection(schemas_dir=str(tmp_path / "schemas")))  # fmt: skip
    Connector(config).run(blocking=False)
    with connect(db).cursor() as cur:
        cur.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, 'v{i}')" for i in range(1, 41)))
        for i in range(1, 41, 3):
            cur.execute("UPDATE t SET v = CONCAT(v, '+') WHERE id = %s", (i,))
        cur.execute("DELETE FROM t WHERE id % 4 = 0")
        cur.execute("UPDATE t SET id = id + 100 WHERE id = 5")  # a key change: DELETE (and tombstone) + INSERT
    Connector(config).run(blocking=False)
    topic = f"{name}.{db}.t"
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": KAFKA})
    described = admin.describe_configs([resource])[resource].result(30)
    assert described["cleanup.policy"].value == "compact"
    before = _topic(topic)
    assert sum(1 for _, v in before if v is None) == 11  # 10 DELETEs and the key change's old key
    time.sleep(0.5)  # past segment.ms: the next message rolls a new segment, and the old ones can be cleaned
    with connect(db).cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1000, 'last')")
    Connector(config).run(blocking=False)

    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    with connect(db).cursor() as cur:
        cur.execute("SELECT id, v FROM t")
        live = {int(i): str(v) for i, v in cur.fetchall()}

    def compacted() -> bool:
        # Values: one per live key. Tombstones of deleted keys may stay until delete.retention.ms has
        # passed at a later cleaning (Kafka keeps them one round, for consumers that lag).
        messages = _topic(topic)
        keys = [reader.read(k)[1]["id"] for k, v in messages if k is not None and v is not None]
        dead = {reader.read(k)[1]["id"] for k, v in messages if k is not None and v is None}
        return len(keys) == len(set(keys)) and set(keys) == set(live) and not dead & set(live)

    wait_until(compacted, 120, "the broker to compact the topic down to the live rows", every_s=2)
    rows = {}
    for _, value in _topic(topic):
        if value is None:
            continue
        data = reader.read(value)[1]["data"][0]
        rows[data["id"]] = data["v"]
    assert rows == live
