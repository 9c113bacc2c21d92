"""Checkpoints: where a committable position is kept (connector/inflight.py decides which one is).

`Checkpointer` writes each committed position to Redis at once and copies it from Redis
to the checkpoint database every `flush_interval_s` and at shutdown. Redis down: the
position goes to the database directly (with a warning). Both down: `commit` raises and
the pipeline pauses until one of them takes the position again; none is dropped.

Once started, `submit` hands positions to a writer thread instead of waiting for Redis's
reply: the main loop no longer pays a round trip per transaction (at 1 ms of network that
alone capped a connector at 1,000 transactions a second). The writer always writes the
newest position handed to it, so positions arriving while it writes are folded into one.
When both stores refuse, it stops and sets `failing`; the pipeline then writes
synchronously, pausing as it did before, until one store takes the position.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Protocol, runtime_checkable

import pymysql
import pymysql.cursors
import redis

from connector.checkpointdb import checkpoint_connector
from connector.clock import SYSTEM_CLOCK, Clock
from connector.config import Config
from connector.errors import CheckpointUnavailableError, FencedError, ServerConfigError, SourceError
from connector.position import Position, newer
from connector.secrets import shown_url

log = logging.getLogger("sluice.checkpoint")


# -- stores -----------------------------------------------------------------------------


_POSITION_FIELDS = sorted(f.name for f in fields(Position))


def position_json(position: Position) -> str:
    # Not asdict(): it deep-copies every field, a third of a commit's time; these are str and int.
    return json.dumps({name: getattr(position, name) for name in _POSITION_FIELDS})


def position_of_json(text: str | bytes) -> Position:
    return Position(**json.loads(text))


class CheckpointStore(Protocol):
    name: str

    def get(self) -> Position | None: ...

    def put(self, position: Position) -> None: ...

    def delete(self) -> None: ...


@runtime_checkable
class BlockingNotes(Protocol):
    """Where a connector that stopped on a message it may not pass says why (`sluice status`);
    the next saved position clears it."""

    def note_blocked(self, reason: str) -> None: ...

    def blocked(self) -> str | None: ...


_FENCED_SET = (
    "if tonumber(redis.call('GET', KEYS[2]) or '0') > tonumber(ARGV[2]) then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[1]) return 1"
)


def redis_client(url: str, ssl_ca: str = "") -> redis.Redis:
    """A client for `url` (rediss://: TLS, verified against `ssl_ca` or the system's CAs)."""
    tls = {"ssl_ca_certs": ssl_ca} if ssl_ca and url.startswith("rediss:") else {}
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5, **tls)


class RedisCheckpointStore:
    def __init__(self, url: str, connector: str, fence: int | None = None, ssl_ca: str = "") -> None:
        self.name = f"redis {shown_url(url)}"
        self.key = f"sluice:{connector}:position"
        self.fence_key = f"sluice:{connector}:fence"
        self.fence = fence  # with HA: this leader's token; writes of an older token are refused
        self.client = redis_client(url, ssl_ca)

    def get(self) -> Position | None:
        try:
            raw = self.client.get(self.key)
        except redis.RedisError as exc:
            raise CheckpointUnavailableError(f"{self.name}: {exc}") from exc
        return None if raw is None else position_of_json(raw)

    def put(self, position: Position) -> None:
        try:
            if self.fence is None:
                self.client.set(self.key, position_json(position))
                return
            done = self.client.eval(_FENCED_SET, 2, self.key, self.fence_key, position_json(position), self.fence)
        except redis.RedisError as exc:
            raise CheckpointUnavailableError(f"{self.name}: {exc}") from exc
        if not done:
            raise FencedError(f"{self.name}: a newer leader holds the connector (this token: {self.fence})")

    def delete(self) -> None:
        try:
            self.client.delete(self.key)
        except redis.RedisError as exc:
            raise CheckpointUnavailableError(f"{self.name}: {exc}") from exc


_TABLE = """
CREATE TABLE IF NOT EXISTS checkpoints (
  connector VARCHAR(128) PRIMARY KEY,
  binlog_file VARCHAR(255) NOT NULL,
  binlog_pos BIGINT NOT NULL,
  gtid_set TEXT NOT NULL,
  server_id BIGINT NOT NULL,
  event_time BIGINT NOT NULL,
  fence BIGINT NOT NULL DEFAULT 0,
  snapshot MEDIUMTEXT NULL,
  xa VARCHAR(300) NULL,
  blocked TEXT NULL,
  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""


_NO_SUCH_TABLE = 1146


class DatabaseCheckpointStore:
    """`checkpoints` in the checkpoint database, one row per connector."""

    def __init__(
        self, connect: Callable[[], pymysql.connections.Connection], connector: str, fence: int | None = None,
        create: bool = True,
    ) -> None:  # fmt: skip
        """`create`: make (or update) the table; not for read-only commands (`sluice status`),
        which then read no position while there is no table."""
        self.name = "checkpoint database"
        self._connect = connect
        self.connector = connector
        self.fence = fence
        if create:
            self._run(lambda cur: cur.execute(_TABLE))
            self._run(_add_missing_columns)

    def _run(self, action: Callable[[pymysql.cursors.Cursor], object]) -> object:
        try:
            with self._connect() as conn, conn.cursor() as cur:
                return action(cur)
        except ServerConfigError:
            raise  # a refused privilege: the same on every attempt
        except pymysql.err.ProgrammingError as exc:
            if exc.args and exc.args[0] == _NO_SUCH_TABLE:
                return None  # read-only, before the first start made it
            raise
        except (pymysql.err.OperationalError, SourceError) as exc:
            raise CheckpointUnavailableError(f"{self.name}: {exc}") from exc

    def _row(self, select: str) -> object:
        """This connector's row of `select` (None: none, or no table yet)."""
        def read(cur: pymysql.cursors.Cursor) -> object:
            cur.execute(select, (self.connector,))
            return cur.fetchone()

        return self._run(read)

    def get(self) -> Position | None:
        row = self._row(
            "SELECT binlog_file, binlog_pos, gtid_set, server_id, event_time, snapshot, xa FROM checkpoints"
            " WHERE connector = %s"
        )
        if row is None:
            return None
        assert isinstance(row, tuple)
        return Position(
            str(row[0]), int(row[1]), str(row[2]), int(row[3]), int(row[4]), str(row[5] or ""), str(row[6] or "")
        )

    def put(self, position: Position) -> None:
        """Upsert the position; with a fence, in a transaction that refuses an older token."""
        fence = self.fence or 0

        def write(cur: pymysql.cursors.Cursor) -> object:
            cur.execute("BEGIN")
            cur.execute("SELECT fence FROM checkpoints WHERE connector = %s FOR UPDATE", (self.connector,))
            row = cur.fetchone()
            if self.fence is not None and row is not None and int(row[0]) > fence:
                cur.execute("ROLLBACK")
                return False
            cur.execute(
                "INSERT INTO checkpoints (connector, binlog_file, binlog_pos, gtid_set, server_id, event_time, fence,"
                " snapshot, xa) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE"
                " binlog_file = VALUES(binlog_file), binlog_pos = VALUES(binlog_pos), gtid_set = VALUES(gtid_set),"
                " server_id = VALUES(server_id), event_time = VALUES(event_time),"
                " fence = GREATEST(fence, VALUES(fence)), snapshot = VALUES(snapshot), xa = VALUES(xa), blocked = NULL",
                (self.connector, position.file, position.pos, position.gtid_set, position.server_id,
                 position.timestamp, fence, position.snapshot, position.xa or None),
            )  # fmt: skip
            cur.execute("COMMIT")
            return True

        if not self._run(write):
            raise FencedError(f"{self.name}: a newer leader holds the connector (this token: {fence})")

    def delete(self) -> None:
        self._run(lambda cur: cur.execute("DELETE FROM checkpoints WHERE connector = %s", (self.connector,)))

    def note_blocked(self, reason: str) -> None:
        self._run(lambda cur: cur.execute("UPDATE checkpoints SET blocked = %s WHERE connector = %s",
                                          (reason, self.connector)))  # fmt: skip

    def blocked(self) -> str | None:
        row = self._row("SELECT blocked FROM checkpoints WHERE connector = %s")
        return str(row[0]) if isinstance(row, tuple) and row[0] is not None else None


_ADDED_COLUMNS = {  # columns later versions added, for tables an older Sluice created
    "fence": "BIGINT NOT NULL DEFAULT 0",  # high availability
    "snapshot": "MEDIUMTEXT NULL",  # initial snapshots (MySQL allows no literal TEXT default)
    "xa": "VARCHAR(300) NULL",  # prepared, undecided XA transactions
    "blocked": "TEXT NULL",  # why a stopped connector could not go on (an oversized message)
}


def _add_missing_columns(cur: pymysql.cursors.Cursor) -> object:
    cur.execute(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
        " AND TABLE_NAME = 'checkpoints'"
    )
    present = {str(row[0]).lower() for row in cur.fetchall()}
    for name, definition in _ADDED_COLUMNS.items():
        if name not in present:
            cur.execute(f"ALTER TABLE checkpoints ADD COLUMN {name} {definition}")
    return None


# -- the checkpointer ---------------------------------------------------------------------


class Checkpointer:
    """The commit-positions step: one policy, run by one writer thread.

    The policy: the newest submitted position goes to Redis (`fast`) as soon as the writer gets
    to it; the database (`durable`) takes a copy when `flush_interval_s` has passed since its
    last write, and at `stop`. With Redis down, positions go to the database directly, still at
    most once per interval (the newest waits for the next). Both down: the writer sets
    `failing`, and the caller saves itself (`save_unsaved`), pausing until a store takes it.

    `submit` only hands the writer the newest position, so a round trip never holds up the
    stream. Without `start` (tests, one-shot tools) the caller's `submit` writes at once. The
    clock is injected: the flush interval is measured on it, by the writer as by a caller."""

    def __init__(
        self, fast: CheckpointStore | None, durable: CheckpointStore, flush_interval_s: float = 3.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:  # fmt: skip
        self.fast = fast
        self.durable = durable
        self.flush_interval_s = flush_interval_s
        self.clock = clock
        self.committed: Position | None = None  # the newest position a store holds (or the flush owes)
        self.flushed: Position | None = None  # the newest the database holds
        self.flushed_at = -flush_interval_s  # when the database last took a position (the clock's)
        self.fast_down = False
        self.on_saved: Callable[[str], None] = lambda store: None  # metrics: "redis" or "database"
        # Set under _wake: what the writer owes, and why it stopped owing it.
        self._unsaved: Position | None = None  # the newest position submitted and not yet written
        self.failing: CheckpointUnavailableError | None = None  # the writer's last save failed
        self.fenced: FencedError | None = None  # another instance owns the checkpoint now
        self._stopping = False
        self._wake = threading.Condition()
        self._io = threading.RLock()  # one write at a time, whoever writes (commit inside save_unsaved)
        self._writer: threading.Thread | None = None

    def load(self) -> tuple[Position | None, str]:
        """The resume position and where it came from: the newer of Redis's and the database's.

        Each can be ahead of the other: Redis after a crash between flushes, the database after a
        spell with Redis down (positions then went to the database alone). Resuming from the older
        would send everything between them again. Newer by their GTID states where both carry one
        (position.newer), by binlog file and offset where they cannot say."""
        fast = None
        if self.fast is not None:
            try:
                fast = self.fast.get()
            except CheckpointUnavailableError as exc:
                log.warning("%s; reading the position from the %s", exc, self.durable.name)
        durable = self.durable.get()
        if fast is None or durable is None:
            found = fast or durable
            return found, (self.fast.name if fast is not None and self.fast is not None else self.durable.name)
        assert self.fast is not None
        chosen, by = newer(fast, durable)
        name = self.fast.name if chosen is fast else self.durable.name
        if fast != durable:
            log.info("saved positions: %s %s, %s %s; resuming from the newer by %s (%s)", self.fast.name, fast,
                     self.durable.name, durable, by, name)  # fmt: skip
        return chosen, name

    def commit(self, position: Position) -> None:
        """Write a committable position now: Redis, or the database when Redis is down (raises
        CheckpointUnavailableError when that is down too, FencedError when fenced)."""
        if self.fenced is not None:
            raise self.fenced
        with self._io:
            if self.fast is not None:
                try:
                    self.fast.put(position)
                    self.on_saved("redis")
                    if self.fast_down:
                        log.warning("%s is back; positions go there again", self.fast.name)
                    self.fast_down = False
                    self.committed = position
                    return
                except CheckpointUnavailableError as exc:
                    if not self.fast_down:
                        log.warning("%s; writing positions to the %s directly, at most every %g s", exc,
                                    self.durable.name, self.flush_interval_s)  # fmt: skip
                    self.fast_down = True
                if self.flushed is not None and not self._flush_due():
                    self.committed = position  # the database takes it when the interval is up
                    return
            self.durable.put(position)  # raises CheckpointUnavailableError when it is down too
            self.on_saved("database")
            self.committed = self.flushed = position
            self.flushed_at = self.clock.now()

    def submit(self, position: Position) -> None:
        """Hand on a committable position: to the writer once started, else written at once.

        Raises what `commit` raises when it writes here (and FencedError, whenever it is known)."""
        if self.fenced is not None:
            raise self.fenced
        with self._wake:
            self._unsaved = position
            if self._writing() and self.failing is None:
                self._wake.notify()
                return
        self.save_unsaved()

    def save_unsaved(self) -> None:
        """Write the newest submitted position now (the writer's work, or the caller's while it fails)."""
        with self._io:
            position = self._unsaved
            if position is None:
                return
            self.commit(position)
            with self._wake:
                if self._unsaved is position:
                    self._unsaved = None
                self.failing = None
                self._wake.notify_all()

    def settle(self, timeout_s: float = 30.0) -> None:
        """Wait until the writer has written what was submitted, or failed."""
        with self._wake:
            self._wake.wait_for(
                lambda: self._unsaved is None or self.failing is not None or not self._writing(), timeout_s
            )

    def flush(self) -> None:
        """Copy the newest committed position to the database (from Redis when it is up)."""
        with self._io:
            position = self.committed
            if self.fast is not None and not self.fast_down:
                # Redis gone since the last commit: the position in memory is the same one.
                with contextlib.suppress(CheckpointUnavailableError):
                    position = self.fast.get() or position
            if position is None or position == self.flushed:
                return
            try:
                self.durable.put(position)
                self.on_saved("database")
                self.flushed, self.flushed_at = position, self.clock.now()
            except FencedError as exc:
                self._fence(exc)
            except CheckpointUnavailableError as exc:
                log.warning("flush to the %s failed (%s); retrying in %.1f s", self.durable.name, exc,
                            self.flush_interval_s)  # fmt: skip

    def _fence(self, exc: FencedError) -> None:
        """Another instance owns the checkpoint: the caller raises it at its next submit, and a
        `settle` waiting now ends (it waited out its whole timeout, 30 s at a stop, when a flush
        was the write that met the fence)."""
        with self._wake:
            self.fenced = exc
            self._wake.notify_all()

    # -- the writer ----------------------------------------------------------------------------

    def start(self) -> None:
        self._writer = threading.Thread(target=self._write_loop, name="checkpoint-writer", daemon=True)
        self._writer.start()

    def stop(self) -> None:
        """Stop the writer, then save what it had not reached and flush it to the database."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        with contextlib.suppress(CheckpointUnavailableError, FencedError):
            self.save_unsaved()  # both stores down: the last saved stays
        self.flush()

    def _writing(self) -> bool:
        return self._writer is not None and self._writer.is_alive() and self.fenced is None

    def _flush_due(self) -> bool:
        return self.clock.now() - self.flushed_at >= self.flush_interval_s

    def _flush_in(self, tried: float) -> float | None:
        """Seconds until the database is owed a copy (0 or less: now), counted from its last write
        or the writer's last try; None while it holds the newest position."""
        if self.committed == self.flushed:
            return None
        return self.flush_interval_s - (self.clock.now() - max(self.flushed_at, tried))

    def _owed(self) -> bool:  # under _wake
        return self._unsaved is not None and self.failing is None

    def _write_loop(self) -> None:
        """Save the newest submitted position as it comes; flush when the interval is up."""
        tried = -self.flush_interval_s  # the last flush: once per interval, whatever it found to do
        while True:
            with self._wake:
                while not (self._stopping or self._owed()):
                    left = self._flush_in(tried)
                    if left is not None and left <= 0:
                        break
                    self._wake.wait(left)  # None: nothing to flush, until a position comes or the stop
                if self._stopping:
                    return
                save = self._owed()
            try:
                if save:
                    self.save_unsaved()
                left = self._flush_in(tried)
                if left is not None and left <= 0:
                    tried = self.clock.now()
                    self.flush()
            except FencedError as exc:
                self._fence(exc)
                return
            except CheckpointUnavailableError as exc:
                with self._wake:
                    self.failing = exc  # the caller takes over, pausing until a store is back
                    self._wake.notify_all()
            if self.fenced is not None:
                return


# -- the stores of a connector ------------------------------------------------------------


@dataclass
class Stores:
    fast: CheckpointStore | None
    durable: CheckpointStore


def checkpoint_stores(config: Config, fence: int | None = None, readonly: bool = False) -> Stores:
    """The stores; with `fence` (an HA leader's token) their writes refuse older tokens.
    `readonly`: nothing is created on the checkpoint database (`sluice status`)."""
    connect = checkpoint_connector(config, create=not readonly)
    durable = DatabaseCheckpointStore(connect, config.name, fence, create=not readonly)
    url = config.checkpoint.redis_url
    fast = RedisCheckpointStore(url, config.name, fence, config.checkpoint.redis_ssl_ca) if url else None
    return Stores(fast, durable)


def presence_key(name: str) -> str:
    return f"sluice:{name}:running"
