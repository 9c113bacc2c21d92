"""Handing snapshot chunks over to the binlog stream without a gap or a stale row.

The pipeline calls `turn(at)` between transactions, `at` being the binlog position the
stream has handed on. A chunk's read view opens first (at window `[low, high]`); its rows
are selected and published only once the stream has reached `high`, so:

- every change the read view contains was already published by the stream, and the READ
  messages (newer) come after it;
- every change after `high` comes after the READ messages, as in the source.

On MariaDB the window is one point and that is the whole argument (the DBLog watermark
idea with the server's own snapshot position as both watermarks). On MySQL the read view
lies somewhere inside the window: it opens only once everything up to `at` is committed in
the engine (ServerChunks waits for `at`'s GTID set), keys the stream changed between `at`
and `high` are left out of the chunk (their newest state was published by the stream), and
nothing logged after `high` is in it; a table without a key is read only when the stream
changed none of its rows in the window.


A read view opened when the stream is behind (catching up) waits at most `MAX_OPEN_S`;
then it is dropped and the next opens only when the stream reaches where this one was,
so no read view stays open through a long catch-up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from connector.clock import SYSTEM_CLOCK, Clock
from connector.errors import Disposition, PositionError, SluiceError, classify
from connector.flat import FlatMessage
from connector.items import Changes
from connector.position import MysqlGtidSet, Position
from connector.schema.model import Table
from connector.schema.tracker import SchemaTracker
from connector.snapshot.reader import ChunkSource, Rendered, Window, image_key
from connector.snapshot.requests import SnapshotRequests
from connector.snapshot.state import Key, SnapshotState, TableName

log = logging.getLogger("sluice.snapshot")

MAX_OPEN_S = 30.0
REQUEST_POLL_S = 5.0


class Emitter(Protocol):
    """The pipeline, as the snapshot sees it."""

    def publish(self, message: FlatMessage, table: Table) -> None: ...

    def close_position(self, position: Position) -> None: ...

    def breathe(self) -> bool:
        """Serve Kafka's callbacks and commit; False while too much is unacknowledged."""

    def wait_for_room(self) -> None:
        """Until Kafka has acknowledged enough of what is in flight."""


@dataclass
class _Open:
    window: Window
    opened: float
    touched: set[Key]
    touched_any: bool = False


def _behind(a: Position, b: Position) -> bool:
    return a.sort_key() < b.sort_key()


def _whole(at: Position, window: Window) -> bool:
    """MySQL: the read view holds every transaction up to `at` (the stream at or past `high`):
    all of them were committed before it opened (see Window.committed)."""
    if not window.committed or not at.gtid_set:
        return False
    try:
        return MysqlGtidSet.parse(at.gtid_set).issubset(MysqlGtidSet.parse(window.committed))
    except PositionError:
        return False


class Snapshotter:
    def __init__(
        self,
        source: ChunkSource,
        tracker: SchemaTracker,
        state: SnapshotState,
        chunk_size: int,
        requests: SnapshotRequests | None = None,
        clock: Clock = SYSTEM_CLOCK,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.tracker = tracker
        self._set_state(state)
        self.chunk_size = chunk_size
        self.requests = requests
        self.clock = clock
        self.wall = wall
        self._open: _Open | None = None
        self._wait_for: Position | None = None  # after dropping a read view: where the stream must get first
        self._polled = -REQUEST_POLL_S
        self._table_rows, self._table_started = 0, clock.now()  # for the log line when a table is done

    # -- called by the pipeline ------------------------------------------------------------

    def saw(self, item: Changes) -> None:
        """A rows event the stream hands on: on MySQL, its keys leave the open chunk."""
        read = self._open
        if read is None or read.window.exact or not self.state.tables or item.table is None:
            return
        if (item.table.database, item.table.name) != self.state.tables[0]:
            return
        read.touched_any = True
        for message in item.messages:
            after = message["data"] or []
            for image in after:
                read.touched.add(image_key(item.table, image))
            # An UPDATE's `old` holds only the columns it changed: the row's old key is `old` laid
            # over the new image (a key (a, b) whose b alone changed has no `a` in `old`).
            for image, changed in zip(after, message["old"] or []):
                read.touched.add(image_key(item.table, {**image, **changed}))

    def holds(self, item: Changes) -> bool:
        """Whether the stream's changes of `item` wait for its table's READ instead of going on.

        A table without a key has no key for a READ to overwrite: a consumer counts rows. Its
        READ pass (which begins with a TRUNCATE marker) is read as of a position the stream has
        reached, so it holds every change before it; handed on as well, each would be there
        twice. So while such a table waits in the snapshot's queue, its changes are held back
        (dropped: the READs carry them), and from its READ on they flow."""
        table = item.table
        return table is not None and not table.primary_key and (table.database, table.name) in self._queued

    def turn(self, at: Position, out: Emitter, stopped: Callable[[], bool]) -> None:
        """Between transactions, the stream at `at`: hand over every chunk whose time has come."""
        self._take_rereads()
        self._take_requests()
        while self.state.tables and not stopped() and at.file:
            if self._open is None and not self._begin(at):
                return
            assert self._open is not None
            if _behind(at, self._open.window.high):
                self._maybe_drop(at)
                return
            try:
                self._hand_over(at, out)
            except SluiceError as exc:
                if classify(exc) is not Disposition.RETRY:
                    raise
                log.warning("%s; the chunk is read again later", exc)
                self.close()
                return
            if not out.breathe():
                out.wait_for_room()

    def close(self) -> None:
        self._open = None
        self.source.close()

    # -- steps ---------------------------------------------------------------------------

    def _begin(self, at: Position) -> bool:
        if self._wait_for is not None and _behind(at, self._wait_for):
            return False
        self._wait_for = None
        try:
            window = self.source.open(at)
        except SluiceError as exc:
            if classify(exc) is not Disposition.RETRY:
                raise
            log.warning("%s; trying again at the next transaction", exc)
            return False
        if _behind(window.low, at):
            # The stream already handed on changes this read view may not contain.
            self.source.close()
            return False
        self._open = _Open(window, self.clock.now(), set())
        return True

    def _maybe_drop(self, at: Position) -> None:
        read = self._open
        assert read is not None
        if self.clock.now() - read.opened > MAX_OPEN_S:
            log.info("stream at %s, snapshot read view at %s: closing it until the stream gets there", at,
                     read.window.high)  # fmt: skip
            self._wait_for = read.window.high
            self.close()

    def _hand_over(self, at: Position, out: Emitter) -> None:
        read = self._open
        assert read is not None
        name = self.state.tables[0]
        table = self.tracker.schema.get(*name)
        if table is None:  # dropped (or no longer captured) before its turn
            log.info("snapshot of `%s`.`%s` skipped: the table is gone", *name)
            self._finish(at, out, None, True, 0)
            return
        table = self.tracker.keyed(table)
        keyed = bool(table.primary_key)
        if not keyed and read.touched_any and not _whole(at, read.window):
            self.close()  # MySQL: rows of a keyless table changed inside the window; read again
            return
        limit = self.chunk_size if keyed else None
        if not keyed:  # the READ pass replaces the table: a consumer clears it first
            out.publish(self._message(table, None, read.window.high, 1, "TRUNCATE"), table)
        count, last = 0, None
        for data, key in self.source.rows(table, self.state.after, limit):
            count, last = count + 1, key
            if key not in read.touched or not keyed:
                out.publish(self._message(table, data, read.window.high, count), table)
            if count % 1000 == 0 and not out.breathe():
                out.wait_for_room()
        self._finish(at, out, last, not keyed or count < self.chunk_size, count)

    def _finish(self, at: Position, out: Emitter, last: Key | None, finished: bool, count: int) -> None:
        self.close()
        name = self.state.tables[0]
        self._set_state(self.state.advanced(last, finished, count))
        out.close_position(replace(at, snapshot=self.state_text))
        self._table_rows += count
        if finished:
            took = max(self.clock.now() - self._table_started, 1e-3)
            log.info("snapshot of `%s`.`%s` finished: %d rows in %.1f s (%.0f rows/s); %d table(s) to go", *name,
                     self._table_rows, took, self._table_rows / took, len(self.state.tables))  # fmt: skip
            self._table_rows, self._table_started = 0, self.clock.now()

    def _message(
        self, table: Table, data: Rendered | None, high: Position, count: int, kind: str = "READ"
    ) -> FlatMessage:
        now = int(self.wall() * 1000)
        return {
            "database": table.database, "table": table.name, "type": kind, "isDdl": False,
            "pkNames": list(table.primary_key) or None, "es": now, "ts": now, "sql": "", "gtid": None,
            "sqlType": None, "mysqlType": None, "data": None if data is None else [data], "old": None,
            "source": {"file": high.file, "pos": high.pos, "server_id": high.server_id,
                       "row": self.state.rows + count - 1},
        }  # fmt: skip

    def _set_state(self, state: SnapshotState) -> None:
        """The state, its saved form and the tables it holds back (`holds`), changed together."""
        self.state, self.state_text, self._queued = state, state.text(), set(state.tables)

    def _take_rereads(self) -> None:
        """Tables a RENAME gave a captured name to (SchemaTracker.rereads): read as new ones."""
        if not self.tracker.rereads:
            return
        wanted = [t for t in self.tracker.rereads if self.tracker.included(*t)]
        self.tracker.rereads.clear()
        if not wanted:
            return
        log.info("read again, renamed onto a captured name: %s", ", ".join(f"{d}.{t}" for d, t in wanted))
        self._set_state(self.state.queued(wanted, self.state.request))

    def _take_requests(self) -> None:
        if self.requests is None or self.clock.now() - self._polled < REQUEST_POLL_S:
            return
        self._polled = self.clock.now()
        try:
            pending = self.requests.after(self.state.request)
        except SluiceError as exc:
            if classify(exc) is not Disposition.RETRY:
                raise
            log.warning("%s; asking again in %.0f s", exc, REQUEST_POLL_S)
            return
        for request, tables in pending:
            wanted = [t for t in tables if self.tracker.included(*t)]
            log.info("snapshot request %d: %s", request, ", ".join(f"{d}.{t}" for d, t in wanted) or "nothing")
            self._set_state(self.state.queued(wanted, request))


def first_snapshot(tracker: SchemaTracker) -> SnapshotState:
    """Every captured table, in name order (the history also follows the other tables of their
    databases: not these)."""
    tables: list[TableName] = sorted(t for t in tracker.schema.tables if tracker.included(*t))
    return SnapshotState(tuple(tables))
