"""Observability: Prometheus metrics, /health and /ready, and a progress line while catching up.

`Metrics` is fed by the stream (every event), the pipeline (every row, commit and pause)
and a sampler thread (the server's binlog position, every `sample_s`). `serve()` answers:
  /metrics  Prometheus text format
  /health   200 while the main loop has moved within `stall_s` (it wakes on every heartbeat)
  /ready    200 while streaming (the source reachable) and not paused for Kafka or the checkpoint
            stores, else 503
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from connector.binlog.constants import event_type_name
from connector.binlog.events import Event
from connector.errors import ConfigError
from connector.position import Position

if TYPE_CHECKING:
    from connector.items import Burst

log = logging.getLogger("sluice.progress")


class Metrics:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        r = self.registry = CollectorRegistry()
        self.rows = Counter("sluice_rows", "Row changes handed to Kafka", ["database", "table", "type"], registry=r)
        self.path_rows = Counter(
            "sluice_path_rows", "Row changes handed to Kafka by the path that encoded them: kernel (compiled), "
            "python (README.md: what takes the Python path) or snapshot", ["database", "table", "path"], registry=r,
        )  # fmt: skip
        self.events = Counter("sluice_events", "Binlog events read", ["type"], registry=r)
        self.bytes_read = Counter("sluice_bytes_read", "Binlog bytes read", registry=r)
        self.lag_seconds = Gauge("sluice_binlog_lag_seconds", "Now minus the last event's time", registry=r)
        self.lag_bytes = Gauge("sluice_binlog_lag_bytes", "Server binlog bytes not yet read", registry=r)
        self.inflight = Gauge("sluice_inflight_messages", "Messages not yet acknowledged by Kafka", registry=r)
        self.delivery_errors = Counter("sluice_delivery_errors", "Messages Kafka gave up on", registry=r)
        self.oversized = Counter("sluice_oversized", "Messages over their topic's limit, by what became of them",
                                 ["database", "table", "policy"], registry=r)  # fmt: skip
        self.statement_logged = Counter(
            "sluice_statement_logged_changes", "Row-changing statements of captured tables the server logged as "
            "statements, not rows (not published)", ["database", "table"], registry=r,
        )  # fmt: skip
        self.text_replaced = Counter(
            "sluice_text_replaced", "Text values not exact in their column's charset, published with U+FFFD "
            "(README.md: text values)", ["database", "table", "column"], registry=r,
        )  # fmt: skip
        self.kafka_transactions = Counter(
            "sluice_kafka_transactions", "Kafka transactions ([kafka] exactly_once), by how they ended",
            ["outcome"], registry=r,
        )  # fmt: skip
        self.paused_seconds = Counter(
            "sluice_paused_seconds", "Seconds the reader waited, by what for: kafka (max_in_flight messages "
            "unacknowledged) or checkpoint stores (both refused the position)", ["reason"], registry=r,
        )  # fmt: skip
        for reason in ("kafka", "checkpoint stores"):  # shown from the start, at 0
            self.paused_seconds.labels(reason)
        self.checkpoint_age = Gauge("sluice_checkpoint_age_seconds", "Seconds since the position was saved",
                                    ["store"], registry=r)  # fmt: skip
        self.bytes_total = 0.0
        self.lag_s = 0.0
        self.lag_b = 0.0
        self.last_event_time = 0.0
        self.last_loop = clock()
        self.streaming = False
        self.source_up = True  # False while the stream waits to reconnect to the source
        self.paused_for: set[str] = set()  # "kafka", "checkpoint stores"
        self._file, self._pos = "", 0  # see `position`
        self.saved_at: dict[str, float] = {}
        # Rows and events are counted in plain dicts on the hot path and added to the
        # Prometheus counters when sampled or scraped: labels().inc() cost ~8 us a call.
        self._row_counts: dict[tuple[str, str, str], int] = {}
        self._row_published: dict[tuple[str, str, str], int] = {}
        self._path_counts: dict[tuple[str, str, str], int] = {}
        self._path_published: dict[tuple[str, str, str], int] = {}
        self._event_counts: dict[int, int] = {}
        self._event_published: dict[int, int] = {}
        self._bytes_published = 0.0
        self._publishing = threading.Lock()

    # -- fed by the stream and the pipeline ----------------------------------------------------

    def event(self, event: Event, size: int, file: str) -> None:
        header = event.header
        counts = self._event_counts
        counts[header.type_code] = counts.get(header.type_code, 0) + 1
        self.bytes_total += size
        if header.timestamp:
            self.last_event_time = float(header.timestamp)
        if header.log_pos:
            self._file, self._pos = file, header.log_pos
        self.last_loop = self.clock()

    def burst(self, burst: Burst) -> None:
        """The events a kernel run read (connector/lane.py): `event` for each, at once."""
        counts = self._event_counts
        for code, count in burst.events:
            counts[code] = counts.get(code, 0) + count
        self.bytes_total += burst.bytes
        if burst.last_event is not None:
            timestamp, log_pos = burst.last_event
            if timestamp > 0:
                self.last_event_time = float(timestamp)
            self._file, self._pos = burst.file, log_pos
        self.last_loop = self.clock()

    @property
    def position(self) -> Position | None:
        """Where the stream has read to (the end of the last event with a position)."""
        return Position(self._file, self._pos) if self._file else None

    def row(self, database: str, table: str, kind: str, count: int = 1, path: str = "python") -> None:
        """Rows of a table and operation, encoded by `path` (kernel, python, snapshot)."""
        key = (database, table, kind)
        counts = self._row_counts
        counts[key] = counts.get(key, 0) + count
        key = (database, table, path)
        counts = self._path_counts
        counts[key] = counts.get(key, 0) + count

    def _publish_counts(self) -> None:
        with self._publishing:  # the sampler and a scrape may both publish
            for counter, counts, published in ((self.rows, self._row_counts, self._row_published),
                                               (self.path_rows, self._path_counts, self._path_published)):  # fmt: skip
                for key, count in dict(counts).items():  # a copy: the main loop keeps counting
                    done = published.get(key, 0)
                    if count > done:
                        counter.labels(*key).inc(count - done)
                        published[key] = count
            for code, count in dict(self._event_counts).items():
                done = self._event_published.get(code, 0)
                if count > done:
                    self.events.labels(event_type_name(code)).inc(count - done)
                    self._event_published[code] = count
            total = self.bytes_total
            if total > self._bytes_published:
                self.bytes_read.inc(total - self._bytes_published)
                self._bytes_published = total

    def saved(self, store: str) -> None:
        self.saved_at[store] = self.clock()

    def tick(self) -> None:
        """The main loop is alive (called on every item, heartbeats included)."""
        self.last_loop = self.clock()

    def refresh(self, inflight: int, server: Position | None) -> None:
        self._publish_counts()
        now = self.clock()
        self.inflight.set(inflight)
        if server is not None and self.position is not None:
            self.lag_b = _bytes_behind(self.position, server)
            self.lag_bytes.set(self.lag_b)
        if self.last_event_time:
            # Read up to the server's end (heartbeats carry it on a quiet server): not behind at
            # all, however old the last event is. Before, an idle connector's lag kept rising.
            caught_up = server is not None and self.position is not None and self.lag_b == 0
            self.lag_s = 0.0 if caught_up else max(0.0, now - self.last_event_time)
            self.lag_seconds.set(self.lag_s)
        for store, at in self.saved_at.items():
            self.checkpoint_age.labels(store).set(now - at)

    def healthy(self, stall_s: float) -> bool:
        return self.clock() - self.last_loop < stall_s

    def ready(self) -> bool:
        return self.streaming and self.source_up and not self.paused_for

    def exposition(self) -> bytes:
        self._publish_counts()
        return generate_latest(self.registry)


def _bytes_behind(ours: Position, server: Position) -> float:
    """Bytes to the server's position; across files, counted from the start of the server's file."""
    if ours.file == server.file:
        return float(max(0, server.pos - ours.pos))
    return float(server.pos)  # at least this much; the files between are not sized here


class Progress:
    """A log line every `every_s` while behind: rows/s, lag and the estimated time to catch up."""

    def __init__(self, metrics: Metrics, every_s: float = 5.0) -> None:
        self.metrics = metrics
        self.every_s = every_s
        self._last = (metrics.clock(), 0.0, 0.0)

    def maybe_log(self, rows_total: float) -> None:
        now = self.metrics.clock()
        then, rows_then, bytes_then = self._last
        if now - then < self.every_s:
            return
        bytes_now, lag_s, lag_bytes = self.metrics.bytes_total, self.metrics.lag_s, self.metrics.lag_b
        rate = (rows_total - rows_then) / (now - then)
        byte_rate = (bytes_now - bytes_then) / (now - then)
        self._last = (now, rows_total, bytes_now)
        if lag_s < 2 * self.every_s and lag_bytes == 0:
            return  # caught up: no progress line
        eta = f"{lag_bytes / byte_rate:.0f} s" if byte_rate > 0 and lag_bytes else "unknown"
        log.info("catching up: %.0f rows/s, lag %.0f s / %.0f bytes, caught up in ~%s", rate, lag_s, lag_bytes, eta)


class Observed(Protocol):
    """What `serve` answers from: the connector's `Metrics`, a Spark job's tally."""

    def exposition(self) -> bytes: ...

    def healthy(self, stall_s: float) -> bool: ...

    def ready(self) -> bool: ...


def serve(metrics: Observed, port: int, stall_s: float, host: str = "0.0.0.0") -> ThreadingHTTPServer:  # noqa: S104
    """The metrics, health and readiness endpoints, in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._reply(200, metrics.exposition(), CONTENT_TYPE_LATEST)
            elif self.path == "/health":
                ok = metrics.healthy(stall_s)
                self._reply(200 if ok else 503, b"ok\n" if ok else b"stalled\n")
            elif self.path == "/ready":
                ok = metrics.ready()
                self._reply(200 if ok else 503, b"ready\n" if ok else b"not ready\n")
            else:
                self._reply(404, b"not found\n")

        def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # scrapes every few seconds would flood the log

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:  # a port in use, an address not on this host
        raise ConfigError(f"[metrics] port {port} on {host}: {exc.strerror or exc}") from exc
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
