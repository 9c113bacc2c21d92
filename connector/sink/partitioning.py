"""Topic names and partitions, agreeing with Kafka's Java clients.

Keys are hashed with Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`,
seed 0x9747b28c), made positive, modulo the partition count: the partition a Java
producer's default partitioner picks for the same key bytes. Rows of a table without a
primary key have no key; they all go to the partition its name hashes to, so their order holds.

`route` decides every message's partition before it reaches the producer (all of them explicit,
none left to librdkafka's partitioner) and marks the last message of each partition in a
batch: with the idempotent, gapless producer its acknowledgement covers the ones before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from connector.native import transcoder
from connector.native_spec import NUMBERS

_M = NUMBERS["MURMUR2_M"]  # the compiled router's too (connector/csrc/spec.h)
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2, as a signed 32-bit int like Java's."""
    length = len(data)
    h = (NUMBERS["MURMUR2_SEED"] ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


Plain = tuple[bytes | None, bytes | None, int]  # (value, key, partition); a value None is a tombstone
Tail = tuple[bytes | None, bytes | None, int, int]  # (value, key, partition, messages of the batch it closes)


def route_python(
    messages: list[tuple[bytes | None, bytes]], partitions: int, fixed: int, skip: int = 0
) -> tuple[list[Plain], list[Tail]]:
    """(plain, tails) of (key, value) messages: the reference of the compiled `route`.

    Each message goes to `fixed`, or (-1) to its key's partition, hashed from its `skip`th byte
    on (the key's framing left out). tails: the last message of each partition, with how many
    of the batch went there; plain: the others, in order."""
    if partitions < 1 or not -1 <= fixed < partitions or skip < 0:
        raise ValueError(f"partition {fixed} of {partitions} partitions, skip {skip}")
    parts = [fixed if fixed >= 0 else _key_partition(i, key, partitions, skip) for i, (key, _) in enumerate(messages)]
    last = {p: i for i, p in enumerate(parts)}
    counts = {p: parts.count(p) for p in last}
    plain: list[Plain] = []
    tails: list[Tail] = []
    for i, (key, value) in enumerate(messages):
        p = parts[i]
        if last[p] == i:
            tails.append((value, key, p, counts[p]))
        else:
            plain.append((value, key, p))
    return plain, tails


def _key_partition(index: int, key: bytes | None, partitions: int, skip: int) -> int:
    if key is None:
        raise ValueError(f"message {index} has no key and no partition")
    return partition_for(key[skip:], partitions)


route = transcoder.route if transcoder is not None else route_python


@lru_cache(maxsize=65536)
def table_partition(database: str, table: str, partitions: int) -> int:
    """The one partition of a table without a primary key (hashed once per table, not per row)."""
    return partition_for(f"{database}.{table}".encode(), partitions)


@dataclass(frozen=True)
class Route:
    pattern: re.Pattern[str]
    topic: str


class TopicRouter:
    """`{prefix}.{database}.{table}` unless a route (regex on `database.table`) names the topic."""

    def __init__(self, prefix: str, routes: list[tuple[str, str]]) -> None:
        self.prefix = prefix
        self.routes = [Route(re.compile(p), t) for p, t in routes]

    @lru_cache(maxsize=65536)  # noqa: B019  (one router per connector, for its lifetime)
    def topic(self, database: str, table: str) -> str:
        name = f"{database}.{table}"
        for route in self.routes:
            if route.pattern.fullmatch(name):
                return route.topic
        return f"{self.prefix}.{_legal(database)}.{_legal(table)}"

    def ddl_topic(self, database: str) -> str:
        return f"{self.prefix}.{_legal(database)}._ddl"


def _legal(name: str) -> str:
    """Kafka topic names allow [a-zA-Z0-9._-]; anything else becomes `_`."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name) or "_"
