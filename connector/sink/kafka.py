"""Where messages go: Apache Kafka (its in-memory twin for fast tests is tests/support/twins.py).

Both implement `Sink`: `produce_many` hands messages on with a callback that runs, from
`poll`/`flush`, once the broker acknowledged them (or gave up), with how many it covers.

Every message's partition is decided here (`partitioning.route`: murmur2 of the key, as Java
clients pick it, or the partition asked for), and only the last message of each partition in
a batch carries a delivery callback. That is sound because of how the producer is set up:
idempotent with `acks=all` (retries neither reorder nor duplicate within a partition), the
gapless guarantee on (a message that fails for good is a fatal error that fails every
message after it, never a hole in the series), and no message timeout (librdkafka's own
docs: timed-out messages are the one gap the guarantee allows). So a partition's last
message acknowledged means every message before it in that partition was written. Kafka
down for good is the pipeline's to notice (`Pipeline(delivery_timeout_s=...)`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar, cast

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewTopic

from connector.clock import SYSTEM_CLOCK, Clock
from connector.errors import FencedError, SinkError, StoppedWaitingError, TransactionAbortedError
from connector.logs import LIBRDKAFKA
from connector.sink.partitioning import Plain, Tail, route

log = logging.getLogger("sluice.kafka")


class Delivered(Protocol):
    def __call__(self, error: str | None, count: int = 1, /) -> None:
        """`count` messages settled: acknowledged (error None), or at least one of them failed."""


class Sink(Protocol):
    def produce_many(
        self, topic: str, messages: Sequence[tuple[bytes | None, bytes | None]], partition: int | None,
        done: Delivered, headers: Headers | None = None,
    ) -> None:
        """(key, value) pairs in order; `done`'s counts add up to len(messages) once all are settled.

        partition None: each key's murmur2 partition (a message without a key needs one).
        headers: Kafka headers for every message of the call."""

    def produce_routed(self, topic: str, plain: list[Plain], tails: list[Tail], done: Delivered) -> None:
        """Messages whose partitions are chosen already, as partitioning.route gives them (the kernel
        routes its own: connector/lane.py): `plain` in order, then `tails`, the last message of each
        partition, whose acknowledgement answers for `count` messages."""

    def produce_tombstones(self, topic: str, keys: list[bytes], done: Delivered) -> None:
        """A null value under each key, on the key's partition, in order (log compaction drops the key)."""

    @property
    def key_framing_bytes(self) -> int:
        """Bytes of a key's framing, which its partition's hash leaves out (partitioning.route's skip)."""

    def poll(self, timeout: float) -> int: ...

    def flush(self, timeout: float) -> int: ...

    def partitions(self, topic: str) -> int: ...

    def check(self) -> None:
        """Kafka answers (waited for like any outage): a connector that cannot reach it says so at
        start, not at its first change."""

    def prefetch(self, topics: Collection[str]) -> None:
        """Ahead of their first messages, off the decoding path: the partitions and size limits of
        those of `topics` that exist, one request each for them all (connector/routes.py then asks
        Kafka nothing for them); one not there yet is made at its table's first rows."""

    def ensure_topic(self, topic: str, single: bool = False, compacted: bool = False) -> None:
        """Create the topic if it does not exist: a row topic with the configured partitions and
        topic properties; `single`: one partition and Kafka's defaults (statements, heartbeats,
        transactions: one partition keeps their order); `compacted`: cleanup.policy=compact."""

    @property
    def transactional(self) -> bool:
        """Messages are produced in Kafka transactions ([kafka] exactly_once)."""

    def init_transactions(self) -> None:
        """Transactional: fence any earlier producer of the id, and begin the first transaction."""

    def abort_transaction(self) -> None:
        """Transactional: abort what was produced since the last commit (read_committed readers never see it)."""

    def commit_transaction(self, topic: str, key: bytes, value: bytes) -> None:
        """Transactional: commit what was produced since the last commit, with (key, value) as the
        transaction's last record on `topic`'s one partition; then begin the next."""

    def limit(self, topic: str) -> int:
        """The largest message (key, value and Kafka's per-record framing) the topic takes."""

    def close(self) -> None:
        """Drop what is unsent and release the producer (its threads and connections): for a
        connector started again in the process, whose old sink is never used after."""


Headers = list[tuple[str, str | bytes | None]]  # Kafka record headers, as confluent-kafka takes them
Batch = list[tuple[bytes | None, bytes]]  # what `route` takes (a tombstone's value None passes through it)

# Kafka's framing around one record's key and value, generously: a record batch's header
# (61 bytes) and the record's own varints and attributes, with no headers of ours.
RECORD_OVERHEAD = 256
DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024

# What an admin or metadata request meets while the broker is away (a restart, the network):
# retried with backoff; any other refusal is final.
_TRANSIENT = frozenset({
    KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
    KafkaError._WAIT_COORD, KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_CONTROLLER,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.BROKER_NOT_AVAILABLE, KafkaError.NETWORK_EXCEPTION,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
})  # fmt: skip
# Refusals that also mean a state the cluster is still settling into, waited out briefly since
# they are final otherwise:
# - a broker that just restarted is fenced until it registers with the controller (KRaft), and
#   topic creation then says the replication factor cannot be met (as a factor above the broker
#   count says for good);
# - a topic just created is in the metadata before every broker has it, and DescribeConfigs sent
#   to one that has not says the topic is unknown (seen once in CI, right after the creation).
_SETTLING = frozenset({KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.UNKNOWN_TOPIC_OR_PART})
_SETTLING_S = 30.0
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    bootstrap_servers: str
    partitions: int = 3
    replication_factor: int = 1
    linger_ms: int = 20
    compression: str = "lz4"
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # topics Sluice creates, and the producer's ceiling
    # A key's framing (single-object header, registry id): left out of its partition's hash, so a
    # key keeps its partition when its key schema changes (a renamed key column).
    key_framing_bytes: int = 0
    # How long admin and metadata requests (topic creation, limits) wait out an unreachable
    # broker before the connector stops: the pipeline's delivery_timeout_s.
    outage_s: float = 300.0
    extra: dict[str, Any] = field(default_factory=dict)  # the producer's further properties (security, tuning)
    admin: dict[str, Any] = field(default_factory=dict)  # the admin client's
    topic_config: dict[str, str] = field(default_factory=dict)  # row topics Sluice creates (cleanup.policy, ...)
    # Set: a transactional producer ([kafka] exactly_once), whose messages are visible to
    # read_committed readers only once `commit_transaction` commits them.
    transactional_id: str = ""


# librdkafka's lines through Sluice's logging (format, redaction, no floods), not its own stderr.
_LOGGED: dict[str, Any] = {"logger": LIBRDKAFKA}
# Each admin request's own time limit: short, so a stop is never kept waiting by one (requests
# are retried while the broker is away: `_waiting_out_outages`).
_REQUEST_S = 5
# An admin client refused this long is replaced by a new one: after a broker restart (in CI) one
# answered no metadata request for five minutes, logging nothing, while new clients were answered.
_RENEW_ADMIN_S = 30.0
# While the broker stays away, a line this often says the wait goes on (and how long it may last).
_STILL_WAITING_S = 60.0
# A Kafka transaction's longest life: the broker's default transaction.max.timeout.ms, which a
# transaction must be allowed that holds a binlog transaction of a million rows (it commits only
# at that transaction's end); a broker set lower refuses init_transactions, which says so.
TRANSACTION_TIMEOUT_MS = 900_000
# Errors by which the broker says another producer took this transactional.id over.
_FENCING = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


def check_client_properties(props: dict[str, str], producer: bool) -> str | None:
    """librdkafka's own verdict on client properties: None, or its message (an unknown name,
    a value it refuses). A client is made with them and no broker to reach, then dropped."""
    conf: dict[str, Any] = {**props, "bootstrap.servers": "", "log_level": 0}
    try:
        (Producer if producer else AdminClient)(conf)
    except KafkaException as exc:
        error = _kafka_error(exc)
        return error.str() if error is not None else str(exc)
    return None


class KafkaSink:
    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        # A refusal no wait will cure, reported by the clients' error callbacks: a login Kafka
        # refused (at any time), a TLS handshake that failed before Kafka ever answered.
        self.refused: str | None = None
        self.answered = False
        self.producer = Producer(
            {
                "bootstrap.servers": settings.bootstrap_servers,
                "enable.idempotence": True,  # with acks=all: no reordering or duplicates on retry
                "acks": "all",
                "partitioner": "murmur2_random",  # as Java clients; Sluice itself names every partition (route)
                "linger.ms": settings.linger_ms,
                "compression.type": settings.compression,
                "enable.gapless.guarantee": True,  # a lost message fails all after it: see the module's docstring
                "message.timeout.ms": 0,  # never: a timed-out message is a gap the guarantee allows
                "queue.buffering.max.messages": 1_000_000,
                "queue.buffering.max.kbytes": 1_048_576,
                # librdkafka refuses any message above this itself (default 1,000,000).
                "message.max.bytes": settings.max_message_bytes + RECORD_OVERHEAD,
                **settings.extra,
                **_LOGGED,
                "error_cb": self._client_error,
                **self._transactional(settings),
            }
        )
        self._admin_config: Any = {"bootstrap.servers": settings.bootstrap_servers, **settings.admin, **_LOGGED}
        self._admin_config["error_cb"] = self._client_error  # (the stubs type no callbacks)
        self.admin = AdminClient(self._admin_config)
        self._topics: dict[str, int] = {}
        self._limits: dict[str, int] = {}
        self.stopping: Callable[[], bool] = lambda: False  # the connector's stop: ends a wait for the broker
        self.clock: Clock = SYSTEM_CLOCK  # the waits' (connector/clock.py; tests move it)

    @staticmethod
    def _transactional(settings: KafkaSettings) -> dict[str, Any]:
        if not settings.transactional_id:
            return {}
        return {"transactional.id": settings.transactional_id, "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS}

    @property
    def transactional(self) -> bool:
        return bool(self.settings.transactional_id)

    def init_transactions(self) -> None:
        """Take the transactional id over: a producer that held it before is fenced, and the
        transaction it left open is aborted, before this one reads the position of record.
        Waited for like any request while the broker is away."""
        self._waiting_out_outages(f"cannot take transactional.id {self.settings.transactional_id} over",
                                  lambda: self.producer.init_transactions(2 * _REQUEST_S))  # fmt: skip
        self.producer.begin_transaction()

    def commit_transaction(self, topic: str, key: bytes, value: bytes) -> None:
        """Commit the open transaction with `value` (a position) as its last record on `topic`'s
        one partition, and begin the next. Every message produced since the last commit is
        flushed first; none of it is visible to read_committed readers before this returns.
        An unreachable broker is waited for as any request is (up to `outage_s`, or the stop:
        then the transaction stays open, and the next start aborts it)."""
        try:
            self._produce_when_room(topic, value, key, 0, None)
            started, noted = self.clock.now(), None
            while True:
                try:
                    self.producer.commit_transaction(_REQUEST_S)
                    break
                except KafkaException as exc:
                    error = _kafka_error(exc)
                    if error is None or not error.retriable():
                        raise
                    now = self.clock.now()
                    if self.stopping():
                        raise StoppedWaitingError(f"stopped while Kafka did not commit the transaction "
                                                  f"({error.str()}); the next start aborts it") from exc  # fmt: skip
                    if now - started > self.settings.outage_s:
                        raise SinkError(f"Kafka did not commit the transaction in {self.settings.outage_s:.0f} s "
                                        f"({error.str()}); gave up waiting") from exc  # fmt: skip
                    if noted is None or now - noted >= _STILL_WAITING_S:  # a line now and then, not per try
                        log.warning("Kafka has not committed the transaction yet (%s); waiting", error.str())
                        noted = now
            self.producer.begin_transaction()
        except KafkaException as exc:
            raise self._transaction_failed(exc) from exc

    def abort_transaction(self) -> None:
        try:
            self.producer.abort_transaction(TRANSACTION_TIMEOUT_MS / 1000)
        except KafkaException as exc:  # at a stop: the next start's init_transactions aborts it
            log.warning("could not abort the open Kafka transaction (%s); the next start aborts it", exc)

    def _transaction_failed(self, exc: KafkaException) -> Exception:
        """Why a transaction did not commit, as the stop it causes: another instance took the
        id over (fenced), or Kafka aborted it (then aborted here too: nothing of it is visible)."""
        error = _kafka_error(exc)
        if error is not None and error.code() in _FENCING:
            return FencedError(f"another instance took transactional.id {self.settings.transactional_id} "
                               f"over ({error.str()}); this one stops")  # fmt: skip
        if error is not None and error.txn_requires_abort():
            with contextlib.suppress(KafkaException):
                self.producer.abort_transaction(TRANSACTION_TIMEOUT_MS / 1000)
            return TransactionAbortedError(f"Kafka aborted the transaction ({error.str()}); read_committed "
                                           "readers see nothing of it")  # fmt: skip
        return _stopped(exc)

    def produce_many(
        self, topic: str, messages: Sequence[tuple[bytes | None, bytes | None]], partition: int | None,
        done: Delivered, headers: Headers | None = None,
    ) -> None:
        fixed = -1 if partition is None else partition
        batch = cast(Batch, messages if isinstance(messages, list) else list(messages))  # values None: tombstones
        plain, tails = route(batch, self.partitions(topic), fixed, self.settings.key_framing_bytes)
        self.produce_routed(topic, plain, tails, done, headers)

    def produce_routed(
        self, topic: str, plain: list[Plain], tails: list[Tail], done: Delivered, headers: Headers | None = None
    ) -> None:
        produce = self.producer.produce
        try:
            for value, key, p in plain:  # no callback: the tail of their partition answers for them
                try:
                    if headers is None:
                        produce(topic, value, key, p)
                    else:
                        produce(topic, value, key, p, headers=headers)
                except BufferError:
                    self._produce_when_room(topic, value, key, p, None, headers)
            for value, key, p, count in tails:  # after the others: each partition keeps its order
                self._produce_when_room(topic, value, key, p, partial(_delivered, topic, done, count), headers)
        except KafkaException as exc:
            raise _stopped(exc) from exc

    @property
    def key_framing_bytes(self) -> int:
        return self.settings.key_framing_bytes

    def produce_tombstones(self, topic: str, keys: list[bytes], done: Delivered) -> None:
        plain, tails = route([(key, b"") for key in keys], self.partitions(topic), -1, self.settings.key_framing_bytes)
        try:
            for _, key, p in plain:
                self._produce_when_room(topic, None, key, p, None)
            for _, key, p, count in tails:
                self._produce_when_room(topic, None, key, p, partial(_delivered, topic, done, count))
        except KafkaException as exc:
            raise _stopped(exc) from exc

    def _produce_when_room(
        self, topic: str, value: bytes | None, key: bytes | None, partition: int, callback: Callable[..., None] | None,
        headers: Headers | None = None,
    ) -> None:
        while True:
            try:  # on_delivery None: no callback
                self.producer.produce(topic, value, key, partition, on_delivery=callback, headers=headers)
                return
            except BufferError:  # the local queue is full: serve callbacks until there is room
                self.producer.poll(0.1)

    def poll(self, timeout: float) -> int:
        try:
            return self.producer.poll(timeout)
        except (KafkaException, SystemError) as exc:
            raise _stopped(exc) from exc

    def flush(self, timeout: float) -> int:
        try:
            return self.producer.flush(timeout)
        except (KafkaException, SystemError) as exc:
            raise _stopped(exc) from exc

    def check(self) -> None:
        self._waiting_out_outages("cannot reach Kafka", lambda: self.admin.list_topics(timeout=_REQUEST_S))

    def partitions(self, topic: str) -> int:
        count = self._topics.get(topic)
        if count is None:
            self.ensure_topic(topic)
            count = self._topics[topic]
        return count

    def ensure_topic(self, topic: str, single: bool = False, compacted: bool = False) -> None:
        if topic in self._topics:
            return
        deadline = self.clock.now() + 60
        while True:
            existing = self._existing_partitions(topic)
            if existing:
                self._topics[topic] = existing
                return
            self._create(topic, single, compacted)
            if self.clock.now() > deadline:
                raise SinkError(f"topic {topic} does not appear in the metadata after creating it")
            self.clock.sleep(0.1)

    def close(self) -> None:
        self.producer.purge()
        self.producer.close()

    def limit(self, topic: str) -> int:
        """The topic's max.message.bytes (a topic Sluice made has the setting; one that existed
        keeps its own, read with DescribeConfigs once), never above the producer's ceiling."""
        limit = self._limits.get(topic)
        if limit is None:
            limit = self._read_limits([topic], f"cannot read the configuration of topic {topic}")[topic]
        return limit

    def _read_limits(self, topics: list[str], what: str) -> dict[str, int]:
        """`limit` of each of `topics`, read in one DescribeConfigs request and kept."""
        resources = [ConfigResource(ResourceType.TOPIC, topic) for topic in topics]

        def describe() -> dict[str, Any]:
            asked = self.admin.describe_configs(resources, request_timeout=_REQUEST_S)
            return {r.name: asked[r].result(2 * _REQUEST_S) for r in resources}

        described = self._waiting_out_outages(what, describe)
        ceiling = self.settings.max_message_bytes
        limits = {topic: min(int(configs["max.message.bytes"].value), ceiling) for topic, configs in described.items()}
        self._limits.update(limits)
        return limits

    def prefetch(self, topics: Collection[str]) -> None:
        unknown = set(topics) - self._topics.keys()
        if not unknown:
            return
        metadata = self._waiting_out_outages("cannot read the topics' metadata",
                                             lambda: self.admin.list_topics(timeout=_REQUEST_S))  # fmt: skip
        for topic in unknown:
            info = metadata.topics.get(topic)
            if info is not None and info.error is None and info.partitions:
                self._topics[topic] = len(info.partitions)
        described = [topic for topic in unknown if topic in self._topics and topic not in self._limits]
        if described:
            self._read_limits(described, f"cannot read the configuration of {len(described)} topic(s)")

    def _existing_partitions(self, topic: str) -> int:
        metadata = self._waiting_out_outages(
            # The admin client's: an idempotent producer that met a broker restart while it started was
            # seen answering no metadata request for minutes (the admin client answered at once).
            f"cannot read the metadata of topic {topic}", lambda: self.admin.list_topics(topic, timeout=_REQUEST_S)
        )
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            return 0
        return len(info.partitions)

    def _create(self, topic: str, single: bool = False, compacted: bool = False) -> None:
        config = {} if single else dict(self.settings.topic_config)
        if compacted:
            config["cleanup.policy"] = "compact"
        config["max.message.bytes"] = str(self.settings.max_message_bytes)
        partitions = 1 if single else self.settings.partitions
        new = NewTopic(topic, num_partitions=partitions, replication_factor=self.settings.replication_factor,
                       config=config)  # fmt: skip

        def create() -> bool:
            try:
                self.admin.create_topics([new], operation_timeout=2 * _REQUEST_S)[topic].result(3 * _REQUEST_S)
                return True
            except KafkaException as exc:
                error = _kafka_error(exc)
                if error is not None and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    return False
                raise

        if self._waiting_out_outages(f"cannot create topic {topic}", create):
            log.info("created topic %s (%d partition%s)", topic, partitions, "" if partitions == 1 else "s")

    def _client_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._AUTHENTICATION:
            self.refused = f"Kafka refused the login ({error.str()}); check [kafka.security]'s user and password"
        elif error.code() == KafkaError._SSL and not self.answered:
            self.refused = f"no TLS connection to Kafka ({error.str()}); check [kafka.security]'s CA and certificate"

    def _waiting_out_outages(self, what: str, request: Callable[[], T]) -> T:
        """`request`, retried with backoff while the broker is unreachable (up to `outage_s`, or
        until the connector stops); a refusal that retrying will not fix is a SinkError at once."""
        started = renewed = noted = self.clock.now()
        delay, waited = 0.25, False
        while True:
            try:
                result = request()
            except (KafkaException, TimeoutError) as exc:
                self.admin.poll(0)  # the clients' error callbacks: a refused login says so here
                if self.refused is not None:
                    raise SinkError(f"{what}: {self.refused}") from exc
                if isinstance(exc, KafkaException):
                    error = _kafka_error(exc)
                    reason = error.str() if error is not None else str(exc)
                    patience = _patience(error, self.settings.outage_s)
                else:  # a request's future not done in its time: a broker shutting down, say
                    reason, patience = "no answer in time", self.settings.outage_s
                if patience is None:
                    raise SinkError(f"{what}: {reason}") from exc
                if self.stopping():
                    raise StoppedWaitingError(f"{what}: stopped while Kafka was unreachable ({reason})") from exc
                now = self.clock.now()
                if now + delay > started + patience:
                    raise SinkError(f"{what}: Kafka unreachable ({reason}); gave up waiting") from exc
                if not waited:  # one line per outage, not per attempt, and a reminder now and then
                    log.warning("%s: %s; waiting for Kafka", what, reason)
                elif now - noted >= _STILL_WAITING_S:
                    log.warning("%s: still waiting for Kafka (%d s of %d s; %s)", what, now - started, patience, reason)
                    noted = now
                if now - renewed >= _RENEW_ADMIN_S:
                    self.admin = AdminClient(self._admin_config)
                    renewed = now
                waited = True
                self.clock.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            if waited:
                log.info("Kafka answers again")
            self.answered = True
            return result


def _patience(error: KafkaError | None, outage_s: float) -> float | None:
    """How long a request refused with `error` is retried; None: not at all."""
    if error is None:
        return None
    if error.code() in _TRANSIENT or error.retriable():
        return outage_s
    return min(_SETTLING_S, outage_s) if error.code() in _SETTLING else None


def _kafka_error(exc: KafkaException) -> KafkaError | None:
    first = exc.args[0] if exc.args else None
    return first if isinstance(first, KafkaError) else None


def _stopped(exc: KafkaException | SystemError) -> Exception:
    """The producer's fatal error (a message failed for good, and the gapless guarantee stopped it).

    confluent-kafka raises it from inside poll(); delivery callbacks it serves after that in the
    same call fail with a SystemError whose cause is the fatal error. Anything else: as it was."""
    for cause in (exc, exc.__cause__, exc.__context__):
        if isinstance(cause, KafkaException) and cause.args and isinstance(cause.args[0], KafkaError):
            if cause.args[0].code() in _FENCING:
                return FencedError(f"another instance took this connector's transactional.id over "
                                   f"({cause.args[0].str()}); this one stops")  # fmt: skip
            return SinkError(f"the Kafka producer stopped: {cause.args[0].str()}; nothing after it was acknowledged")
    return exc


def _delivered(topic: str, done: Delivered, count: int, err: KafkaError | None, msg: Message) -> None:
    done(None if err is None else f"{topic}: {err.str()}", count)
