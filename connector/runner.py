"""Wiring: a configuration becomes a running connector (the only place that builds the parts)."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from http.server import ThreadingHTTPServer

import pymysql
import redis

from connector.avro.encoding import MessageEncoder
from connector.avro.framing import ConfluentFraming, Framing, SingleObjectFraming
from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.canal import CanalJsonEncoder, CanalJsonReader
from connector.checkpoint import (
    BlockingNotes,
    Checkpointer,
    Stores,
    checkpoint_stores,
    presence_key,
    redis_client,
)
from connector.checkpointdb import checkpoint_connector
from connector.clock import SYSTEM_CLOCK, Clock
from connector.columns import ColumnRules
from connector.config import Config
from connector.errors import (
    CheckpointUnavailableError,
    Disposition,
    FencedError,
    OversizedMessageError,
    SluiceError,
    SourceError,
    StoppedWaitingError,
    classify,
)
from connector.exactly import ExactlyOnce, PositionTopic, read_position, transactional_id
from connector.extras import HeartbeatTopic, TransactionTopic
from connector.lease import Lease, keep_renewing
from connector.metrics import Metrics, Progress, serve
from connector.native import NOT_BUILT, transcoder
from connector.oversize import OversizePolicy
from connector.pipeline import Options, Pipeline
from connector.position import Position
from connector.replica.client import SourceSettings, open_connection
from connector.replica.server import master_position
from connector.sink.kafka import KafkaSettings, KafkaSink, Sink
from connector.sink.partitioning import TopicRouter
from connector.snapshot.coordinator import Snapshotter, first_snapshot
from connector.snapshot.reader import ServerChunks
from connector.snapshot.requests import DatabaseSnapshotRequests
from connector.snapshot.state import SnapshotState
from connector.startup import Prepared, prepare
from connector.steps import Encoder
from connector.stream import ChangeStream, StreamOptions

log = logging.getLogger("sluice")


PRESENCE_TTL_S = 20  # the sampler announces at least every 5 s
# A failure classified RESTART (a Kafka transaction the broker aborted, with exactly_once)
# starts the connector again in the process, from the last committed position; more than this
# many in RESTARTS_WINDOW_S is not a passing fault but one every start would meet: a stop.
RESTARTS = 3
RESTARTS_WINDOW_S = 600.0


class Restarts:
    """Whether a failure starts the connector again: classified RESTART, and at most RESTARTS
    of them in the window."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self.times: list[float] = []

    def allow(self, exc: SluiceError) -> bool:
        if classify(exc) is not Disposition.RESTART:
            return False
        now = self.clock.now()
        self.times = [t for t in self.times if now - t < RESTARTS_WINDOW_S] + [now]
        if len(self.times) > RESTARTS:
            return False
        log.warning("%s; starting again from the last committed position (%d of %d restarts in %.0f s)",
                    exc, len(self.times), RESTARTS, RESTARTS_WINDOW_S)  # fmt: skip
        return True


def run_restarting(
    make: Callable[[Metrics | None], Connector], stop: threading.Event, blocking: bool = True
) -> None:
    """`sluice run` without [ha]: a connector, and a new one (same metrics, served throughout)
    after each failure `Restarts` allows."""
    restarts, metrics = Restarts(), None
    while True:
        connector = make(metrics)
        metrics = connector.metrics
        try:
            connector.run(blocking)
            return
        except SluiceError as exc:
            if stop.is_set() or not restarts.allow(exc):
                raise
            connector.sink.close()  # its transaction aborted, the producer is fenced by the next one's


class Presence:
    """A streaming connector says so in Redis (`sluice:{name}:running`, expiring by itself), for
    `sluice status`; without Redis nothing says it."""

    def __init__(self, config: Config) -> None:
        url = config.checkpoint.redis_url
        self.client = redis_client(url, config.checkpoint.redis_ssl_ca) if url else None
        self.key = presence_key(config.name)
        self.value = json.dumps({"instance": f"{socket.gethostname()}-{os.getpid()}", "since": int(time.time())})

    def announce(self) -> None:
        if self.client is None:
            return
        try:
            self.client.set(self.key, self.value, ex=PRESENCE_TTL_S)
        except redis.RedisError as exc:
            log.debug("presence not announced: %s", exc)

    def withdraw(self) -> None:
        if self.client is None:
            return
        with contextlib.suppress(redis.RedisError):
            self.client.delete(self.key)


def _forward(outer: threading.Event, inner: threading.Event) -> None:
    """Set `inner` when `outer` is set (a shutdown reaches the running connector)."""
    while not inner.wait(0.5):
        if outer.is_set():
            inner.set()


def run_with_lease(config: Config, stop: threading.Event, on_connector: Callable[[Connector], None] = print) -> None:
    """Standby until this instance holds the connector's lease, then stream; again after losing it."""
    client = redis_client(config.checkpoint.redis_url, config.checkpoint.redis_ssl_ca)
    lease = Lease(client, config.name, config.ha.lease_s)
    every_s = config.ha.lease_s / 3
    metrics = Metrics()  # /health answers on standbys too; /ready only while leading
    http = None
    if config.metrics.port:
        http = serve(metrics, config.metrics.port, max(30.0, 3 * config.source.heartbeat_s), config.metrics.host)
    log.info("instance %s waiting for the lease of %s", lease.instance, config.name)
    try:
        _lead_when_possible(config, stop, lease, every_s, metrics, on_connector)
    finally:
        if http is not None:
            http.shutdown()
            http.server_close()


def _lead_when_possible(
    config: Config, stop: threading.Event, lease: Lease, every_s: float, metrics: Metrics,
    on_connector: Callable[[Connector], None],
) -> None:  # fmt: skip
    restarts = Restarts()
    while not stop.is_set():
        metrics.tick()
        if not lease.try_acquire():
            stop.wait(every_s)
            continue
        stores = checkpoint_stores(config, lease.token)
        connector = Connector(config, stores=stores, takeover=True, metrics=metrics)
        on_connector(connector)
        lost = threading.Event()
        renewing = keep_renewing(lease, every_s, _set_all(lost, connector.stop))
        threading.Thread(target=_forward, args=(stop, connector.stop), daemon=True).start()
        try:
            connector.run()
        except FencedError as exc:
            log.error("fenced: %s", exc)
        except SluiceError as exc:
            if restarts.allow(exc):
                connector.sink.close()
                continue  # the lease released (finally): whoever takes it resumes from Kafka's position
            if not lost.is_set():
                raise
            # A leader paused past its lease wakes to a server that already streams to the new one
            # (same server_id: error 4052) or to stores that refuse it: expected, back to standby.
            log.warning("after losing the lease: %s", exc)
        finally:
            renewing.set()
            lease.release()


def _set_all(*events: threading.Event) -> Callable[[], None]:
    def set_all() -> None:
        for event in events:
            event.set()

    return set_all


def tune_gc() -> None:
    """The cyclic collector, set for a process that streams: what start-up built (schemas, codecs,
    modules) is frozen out of every collection, and a collection waits for 50,000 new objects
    rather than 700. The hot path makes many short-lived objects and few cycles; the defaults
    collected 800 times in a 240,000-row run and cost 10-25% of its rows/s (bench/pipeline.py,
    alternating runs). Process-wide, so only `sluice run` (and the bench measuring it) asks."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def kafka_sink(config: Config) -> KafkaSink:
    k = config.kafka
    txn_id = transactional_id(config.name) if k.exactly_once else ""
    framing_type = ConfluentFraming if config.avro.schema_registry_url else SingleObjectFraming
    key_bytes = 0 if k.value_format == "canal-json" else framing_type.key_bytes
    return KafkaSink(KafkaSettings(k.bootstrap_servers, k.partitions, k.replication_factor, k.linger_ms, k.compression,
                                   k.max_message_bytes, key_bytes, outage_s=k.delivery_timeout_s,
                                   topic_config=dict(k.topic_config),
                                   extra={**k.security.librdkafka(), **k.producer},
                                   admin={**k.security.librdkafka(), **k.admin},
                                   transactional_id=txn_id))  # fmt: skip


def exactly_once(config: Config) -> ExactlyOnce | None:
    k = config.kafka
    if not k.exactly_once:
        return None
    return ExactlyOnce(PositionTopic.of(k.topic_prefix, config.name), k.transaction_ms / 1000,
                       k.transaction_max_messages)  # fmt: skip


def _say_slow_path(config: Config) -> None:
    """At start: a stream that runs without the compiled kernel says so."""
    if transcoder is None:
        log.warning(NOT_BUILT)
    elif not config.source.compiled_kernel:
        log.info("[source] compiled_kernel = false: every table's rows take the Python path")


def message_encoder(config: Config) -> Encoder:
    """The value format's encoder: Avro (schemas in `[avro] schemas_dir`) or canal's FlatMessage JSON."""
    directory = SchemaDirectory(config.avro.schemas_dir)
    k = config.kafka
    if k.value_format == "canal-json":
        return CanalJsonEncoder(directory, k.message_rows, k.old or "changed")
    return MessageEncoder(directory, framing(config))


def pipeline_options(config: Config) -> Options:
    """The [kafka] options that add messages: tombstones, column rules, transaction and heartbeat topics."""
    k = config.kafka
    return Options(
        k.tombstones, ColumnRules(k.columns),
        TransactionTopic(f"{k.topic_prefix}._transaction") if k.transaction_topic else None,
        HeartbeatTopic(f"{k.topic_prefix}._heartbeat", k.topic_prefix, k.heartbeat_interval_s)
        if k.heartbeat_interval_s > 0 else None,
        exactly_once(config),
    )  # fmt: skip


def message_reader(config: Config, encoder: Encoder) -> MessageReader:
    if config.kafka.value_format == "canal-json":
        return CanalJsonReader(encoder.directory)
    return MessageReader(encoder.directory, encoder.registry())


def _server_position(config: Config) -> Position | None:
    """The source's current binlog position, or None when it cannot be asked right now."""
    try:
        with open_connection(config.source.settings()) as conn:
            return master_position(conn)
    except (SourceError, pymysql.err.MySQLError) as exc:
        log.debug("lag sample skipped: %s", exc)
        return None


def framing(config: Config) -> Framing:
    avro = config.avro
    if not avro.schema_registry_url:
        return SingleObjectFraming()
    return ConfluentFraming(avro.schema_registry_url, avro.subject_name_strategy, avro.registry_config())


class Connector:
    def __init__(
        self,
        config: Config,
        sink: Sink | None = None,
        stores: Stores | None = None,
        takeover: bool = False,
        metrics: Metrics | None = None,
        stop: threading.Event | None = None,
        serves_metrics: bool = False,
    ) -> None:
        self.config = config
        self.takeover = takeover
        self.stop = stop or threading.Event()  # `sluice run`'s, set by its signal handlers
        self.stores = stores or checkpoint_stores(config)
        self.clock = SYSTEM_CLOCK  # the one every part times and waits on (connector/clock.py)
        self.checkpointer = Checkpointer(self.stores.fast, self.stores.durable, config.checkpoint.flush_interval_s,
                                         self.clock)  # fmt: skip
        self.sink = sink or kafka_sink(config)
        if isinstance(self.sink, KafkaSink):
            self.sink.stopping = self.stop.is_set  # a wait for an unreachable broker ends at a stop
            self.sink.clock = self.clock
        self.encoder = message_encoder(config)
        self.router = TopicRouter(config.kafka.topic_prefix, [(r.pattern, r.topic) for r in config.kafka.routes])
        self.pipeline: Pipeline | None = None
        self.stream: ChangeStream | None = None
        # An HA instance passes its own metrics, served for its whole life (standby included); a
        # connector started again after an aborted transaction takes its predecessor's and serves them.
        self.serves_metrics = metrics is None or serves_metrics
        self.metrics = metrics or Metrics()
        self.http: ThreadingHTTPServer | None = None
        self.presence: Presence | None = None
        self.checkpointer.on_saved = self.metrics.saved
        self.sole_job = False  # `sluice run`: the process is this connector's; tune_gc() after start-up

    def resume_position(self) -> Position | None:
        position, where = self.checkpointer.load()
        once = exactly_once(self.config)
        if once is not None:
            position, where = self._position_of_record(once.topic, position, where)
        if position is not None:
            log.info("resuming at %s (from the %s)", position, where)
        return position

    def _position_of_record(
        self, topic: PositionTopic, saved: Position | None, where: str
    ) -> tuple[Position | None, str]:
        """Exactly once: Kafka's committed position, read once this instance holds the
        transactional id (an earlier instance fenced, its open transaction aborted). The
        checkpoint stores only mirror it; Kafka wins where they differ. None there (the mode
        just turned on): the stores' position."""
        self.sink.init_transactions()
        position = read_position(self.config.kafka.client_config(), topic, self.clock)
        if position is None:
            if saved is not None:
                log.info("no position on %s yet; the %s's is the start", topic.topic, where)
            return saved, where
        if saved is not None and saved != position:
            log.info("the %s holds %s; %s's committed position wins", where, saved, topic.topic)
        return position, topic.topic

    def _snapshotter(self, prepared: Prepared, resume: Position | None) -> Snapshotter:
        if resume is not None:
            state = SnapshotState.of_text(resume.snapshot)
        elif prepared.captured and self.config.snapshot.mode == "initial":
            state = first_snapshot(prepared.tracker)
        else:
            state = SnapshotState()
        if prepared.added:  # captured since the last start: read as new tables
            state = state.queued(list(prepared.added), state.request)
        if state.tables:
            log.info("snapshot of %d table(s) to read, from %s.%s", len(state.tables), *state.tables[0])
        requests = DatabaseSnapshotRequests(checkpoint_connector(self.config), self.config.name)
        chunks = ServerChunks(self.config.source.settings())
        chunks.on_text_replaced = self._text_replaced
        return Snapshotter(chunks, prepared.tracker, state, self.config.snapshot.chunk_size, requests, self.clock)

    def _follow_versions(self, prepared: Prepared) -> None:
        """The schema directory's current version of each table (SchemaDirectory.set_current): of
        the tables it has versions of as of the start, and of each table a statement defines."""
        if self.config.kafka.value_format != "avro":
            return
        directory, tracker = self.encoder.directory, prepared.tracker
        tracker.on_defined = directory.set_current
        known = set(directory.table_names())
        tables = [tracker.keyed(t) for key, t in tracker.schema.tables.items() if key in known]
        directory.set_current(tables, prepared.start)

    def _text_replaced(self, database: str, table: str, column: str, count: int) -> None:
        self.metrics.text_replaced.labels(database, table, column).inc(count)

    def _source_up(self, up: bool) -> None:
        self.metrics.source_up = up

    def _note_blocked(self, reason: str) -> None:
        """Why the connector stops, kept with its position for `sluice status` (best effort: the
        stop itself says it too)."""
        durable = self.stores.durable
        if isinstance(durable, BlockingNotes):
            try:
                durable.note_blocked(reason)
            except (CheckpointUnavailableError, SourceError) as exc:
                log.warning("could not record why the connector stops: %s", exc)

    def _observe(self) -> threading.Event:
        """The metrics endpoint (when configured) and a sampler of lag and progress."""
        settings = self.config.metrics
        stall_s = max(30.0, 3 * self.config.source.heartbeat_s)
        if settings.port and self.serves_metrics:
            self.http = serve(self.metrics, settings.port, stall_s, settings.host)
        done = threading.Event()
        progress = Progress(self.metrics, settings.progress_s)

        presence = self.presence = Presence(self.config)

        def sample() -> None:
            presence.announce()
            while not done.wait(min(settings.progress_s, 5.0)):
                server = _server_position(self.config)
                inflight = self.pipeline.inflight.outstanding if self.pipeline else 0
                self.metrics.refresh(inflight, server)
                progress.maybe_log(self.pipeline.counters.rows if self.pipeline else 0)
                presence.announce()

        threading.Thread(target=sample, name="metrics-sampler", daemon=True).start()
        return done

    def _kafka_answers(self, request: Callable[[], None] | None = None) -> bool:
        """Kafka answers (waited for while unreachable), or `request` of it; False: stopped while waiting."""
        try:
            (request or self.sink.check)()
        except StoppedWaitingError as exc:
            log.info("stopped before streaming: %s", exc)
            return False
        return True

    def _source_settings(self) -> SourceSettings:
        settings = replace(self.config.source.settings(), takeover=self.takeover)
        if self.config.kafka.exactly_once:
            # A quiet server's heartbeat is what commits the last transaction within transaction_ms.
            every_s = self.config.kafka.transaction_ms / 1000
            settings = replace(settings, heartbeat_s=min(settings.heartbeat_s or every_s, every_s))
        return settings

    def _begin(self, start: Position, first: bool) -> None:
        """The positions' side, before the first item: the first start saves where it begins (and
        the snapshot it owes), or a restart before the first commit would begin at the
        then-current position and skip what happened in between."""
        assert self.pipeline is not None
        exactly = self.pipeline.exactly
        if exactly is not None:
            exactly.start()
        if first:
            if exactly is not None:
                exactly.initial(start)
            self.checkpointer.commit(start)
        self.checkpointer.start()

    def run(self, blocking: bool = True) -> None:
        if self.config.kafka.exactly_once and not self._kafka_answers():
            return  # (its position is Kafka's: asked before anything else)
        resume = self.resume_position()
        prepared = prepare(self.config, resume=resume)
        self.encoder.directory.claim(self.config.name)
        self._follow_versions(prepared)
        if not self._kafka_answers():
            return
        self.encoder.check()
        if self.sole_job:
            tune_gc()
        settings = self._source_settings()
        oversize = OversizePolicy(self.config.kafka.oversized, message_reader(self.config, self.encoder),
                                  self.config.kafka.topic_prefix)  # fmt: skip
        self.pipeline = Pipeline(
            self.encoder, self.sink, self.router, self.checkpointer, self.config.kafka.max_in_flight_messages,
            self.stop, delivery_timeout_s=self.config.kafka.delivery_timeout_s, clock=self.clock, oversize=oversize,
            metrics=self.metrics, options=pipeline_options(self.config),
        )  # fmt: skip
        # The compiled kernel's bursts go to the pipeline, which plans its tables (connector/lane.py).
        lanes = self.pipeline if self.config.source.compiled_kernel else None
        options = StreamOptions(
            typed_rows=True,  # numbers for the Avro rows path (RowsEvent.typed)
            query=self.config.source.query_text(),
            stop=self.stop,  # a SIGTERM during a wait to reconnect ends it at once
            observer=self.metrics.event,
            on_source=self._source_up,
            on_statement_rows=lambda database, table: self.metrics.statement_logged.labels(database, table).inc(),
            on_text_replaced=self._text_replaced,
        )
        included, routes = self.config.table_filter(), self.pipeline.routes
        self.stream = ChangeStream(settings, prepared.tracker, included, clock=self.clock, lanes=lanes, options=options)
        if not self._kafka_answers(lambda: routes.prefetch(t for t in prepared.tracker.schema.tables if included(*t))):
            return
        self.pipeline.snapshot = self._snapshotter(prepared, resume)
        start = replace(prepared.start, snapshot=self.pipeline.snapshot.state_text)
        _say_slow_path(self.config)
        log.info("streaming from %s", start)
        self._begin(start, first=resume is None)
        observing = self._observe()
        self.metrics.streaming = True
        blocked: str | None = None
        items = self.stream.items(start, blocking)
        try:
            self.pipeline.run(items, start)
        except OversizedMessageError as exc:
            blocked = str(exc)
            raise
        finally:
            items.close()  # the dump connection ends now, not whenever the collector finds it
            self.metrics.streaming = False
            observing.set()
            if self.presence is not None:
                self.presence.withdraw()
            self.checkpointer.stop()
            if blocked is not None:  # after the last save, which clears it
                self._note_blocked(blocked)
            if self.http is not None:
                self.http.shutdown()
                self.http.server_close()
            counters = self.pipeline.counters
            log.info("stopped: %d rows (%d by the compiled kernel), %d statements, %d transactions; "
                     "paused %d times for %.1f s (Kafka or the checkpoint stores behind); position %s",
                     counters.rows, counters.kernel_rows, counters.statements, counters.transactions,
                     counters.pauses, counters.paused_s, self.checkpointer.committed)  # fmt: skip
