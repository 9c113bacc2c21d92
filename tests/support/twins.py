"""The in-memory twins the unit tests run the pipeline against: a clock that moves only when told
to or when something waits on it, a Kafka of lists, a checkpoint store and a snapshot request queue
in memory. Each implements the protocol its real counterpart does (connector/clock.Clock,
connector/sink/kafka.Sink, connector/checkpoint.CheckpointStore, connector/snapshot/requests.
SnapshotRequests); tests/test_sinks.py holds the Kafka twin to the real sink's contract."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import cast

from connector.clock import Clock
from connector.errors import CheckpointUnavailableError
from connector.position import Position
from connector.sink.kafka import DEFAULT_MAX_MESSAGE_BYTES, Batch, Delivered, Headers
from connector.sink.partitioning import Plain, Tail, route
from connector.snapshot.state import TableName


class ManualClock:
    """A clock tests move: `at` is now; a sleep moves it on (and is noted in `slept`)."""

    def __init__(self, at: float = 0.0) -> None:
        self.at = at
        self.slept: list[float] = []

    def now(self) -> float:
        return self.at

    def sleep(self, seconds: float, /) -> None:
        self.slept.append(seconds)
        self.at += max(seconds, 0.0)


@dataclass(slots=True)
class StoredMessage:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None  # None: a tombstone
    headers: Headers | None = None
    committed: bool = True  # False: produced in a Kafka transaction not (yet) committed


class MemorySink:
    """The in-memory twin: partitions are lists; acknowledgements come on poll, one per partition
    of a batch, as from KafkaSink.

    `fail_next(n, error)` makes the next n produced messages fail, as a broker that gave up
    would: they are not stored, and their partition's acknowledgement carries the error.
    `transactional`: messages are stored uncommitted until `commit_transaction` (`messages`
    shows them all, as read_uncommitted; `committed` only the committed ones).
    """

    def __init__(
        self, partitions: int = 3, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, key_framing_bytes: int = 0,
        transactional: bool = False, clock: Clock | None = None,
    ) -> None:  # fmt: skip
        self.clock = clock or ManualClock()  # a poll with nothing to serve waits its timeout on it
        self._transactional = transactional
        self._uncommitted: list[StoredMessage] = []  # stored in the open transaction
        self.commits = self.aborts = 0
        self.closed = False  # close() was called
        self.default_partitions = partitions
        self._key_framing_bytes = key_framing_bytes
        self.limits: dict[str, int] = {}  # per topic, as a broker's max.message.bytes; else max_message_bytes
        self.max_message_bytes = max_message_bytes
        self.topics: dict[str, list[list[StoredMessage]]] = {}
        self.single: set[str] = set()  # topics made with one partition
        self._pending: list[tuple[StoredMessage, str | None]] = []
        self._acks: list[tuple[Delivered, int, str | None]] = []
        self._failures: list[str] = []

    def fail_next(self, count: int, error: str = "broker unavailable") -> None:
        self._failures += [error] * count

    def produce_many(
        self, topic: str, messages: Sequence[tuple[bytes | None, bytes | None]], partition: int | None,
        done: Delivered, headers: Headers | None = None,
    ) -> None:
        self.ensure_topic(topic)
        fixed = -1 if partition is None else partition
        batch = cast(Batch, messages if isinstance(messages, list) else list(messages))  # values None: tombstones
        plain, tails = route(batch, len(self.topics[topic]), fixed, self.key_framing_bytes)
        self._store(topic, plain, tails, done, headers)

    def produce_routed(self, topic: str, plain: list[Plain], tails: list[Tail], done: Delivered) -> None:
        self.ensure_topic(topic)
        self._store(topic, plain, tails, done, None)

    def _store(
        self, topic: str, plain: list[Plain], tails: list[Tail], done: Delivered, headers: Headers | None
    ) -> None:
        failed: dict[int, str] = {}
        for value, key, p in [*plain, *((v, k, q) for v, k, q, _ in tails)]:
            error = self._failures.pop(0) if self._failures else None
            if error is not None:
                failed.setdefault(p, error)
            self._pending.append((StoredMessage(topic, p, -1, key, value, headers), error))
        self._acks += [(done, count, failed.get(p)) for _, _, p, count in tails]

    def produce_tombstones(self, topic: str, keys: list[bytes], done: Delivered) -> None:
        self.ensure_topic(topic)
        plain, tails = route([(key, b"") for key in keys], len(self.topics[topic]), -1, self.key_framing_bytes)
        for _, key, p in [*plain, *((v, k, q) for v, k, q, _ in tails)]:
            self._pending.append((StoredMessage(topic, p, -1, key, None), None))
        self._acks += [(done, count, None) for _, _, _, count in tails]

    @property
    def key_framing_bytes(self) -> int:
        return self._key_framing_bytes

    @property
    def waiting(self) -> int:
        """Messages produced and not yet acknowledged."""
        return len(self._pending)

    def poll(self, timeout: float) -> int:
        served, self._pending = self._pending, []
        acks, self._acks = self._acks, []
        for message, error in served:
            if error is None:
                log_ = self.topics[message.topic][message.partition]
                message.offset = len(log_)
                log_.append(message)
                if self._transactional:
                    message.committed = False
                    self._uncommitted.append(message)
        for done, count, error in acks:
            done(error, count)
        if not acks and timeout > 0:
            self.clock.sleep(timeout)  # as a broker with nothing to say keeps a poll that long
        return len(acks)

    def flush(self, timeout: float) -> int:
        self.poll(0)
        return 0

    def partitions(self, topic: str) -> int:
        self.ensure_topic(topic)
        return len(self.topics[topic])

    def prefetch(self, topics: Collection[str]) -> None:
        pass  # what it knows of a topic is its list of partitions, there or made at the first use

    def check(self) -> None:
        pass

    @property
    def transactional(self) -> bool:
        return self._transactional

    def init_transactions(self) -> None:
        assert self._transactional, "init_transactions on a sink that is not transactional"

    def commit_transaction(self, topic: str, key: bytes, value: bytes) -> None:
        assert self._transactional, "commit_transaction on a sink that is not transactional"
        self.ensure_topic(topic, single=True)
        self._pending.append((StoredMessage(topic, 0, -1, key, value), None))
        self.poll(0)
        for message in self._uncommitted:
            message.committed = True
        self._uncommitted = []
        self.commits += 1

    def abort_transaction(self) -> None:
        assert self._transactional, "abort_transaction on a sink that is not transactional"
        self.poll(0)
        self._uncommitted = []  # stored, never committed: what read_uncommitted readers see of an abort
        self.aborts += 1

    def committed(self, topic: str) -> list[StoredMessage]:
        """What a read_committed reader sees of the topic."""
        return [m for m in self.messages(topic) if m.committed]

    def ensure_topic(self, topic: str, single: bool = False, compacted: bool = False) -> None:
        if topic not in self.topics:
            self.topics[topic] = [[] for _ in range(1 if single else self.default_partitions)]
            if single:
                self.single.add(topic)

    def limit(self, topic: str) -> int:
        return self.limits.get(topic, self.max_message_bytes)

    def close(self) -> None:
        self.closed = True

    def messages(self, topic: str) -> list[StoredMessage]:
        return [m for part in self.topics.get(topic, []) for m in part]


@dataclass
class MemoryCheckpointStore:
    name: str = "memory"
    value: Position | None = None
    down: bool = False
    writes: list[Position] = field(default_factory=list)
    blocked_by: str | None = None

    def note_blocked(self, reason: str) -> None:
        self.blocked_by = reason

    def blocked(self) -> str | None:
        return self.blocked_by

    def get(self) -> Position | None:
        self._check()
        return self.value

    def put(self, position: Position) -> None:
        self._check()
        self.value, self.blocked_by = position, None
        self.writes.append(position)

    def delete(self) -> None:
        self._check()
        self.value = None

    def _check(self) -> None:
        if self.down:
            raise CheckpointUnavailableError(f"{self.name} is down")


class MemorySnapshotRequests:
    def __init__(self) -> None:
        self.queue: list[tuple[int, list[TableName]]] = []

    def add(self, tables: list[TableName]) -> int:
        self.queue.append((len(self.queue) + 1, list(tables)))
        return len(self.queue)

    def after(self, request: int) -> list[tuple[int, list[TableName]]]:
        return [r for r in self.queue if r[0] > request]
