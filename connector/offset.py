"""The offset context: where the stream is, and all it must know to go on from there after a
reconnect, or after the compiled kernel hands a transaction over, in one place.

Three spans of state, each with its one owner here:
  - across a stream's sessions: the last transaction end handed on (a reconnect starts there),
    the last rows event of the open transaction handed on (the new session does not hand its
    changes on again), and the prepared XA transactions as of that end;
  - the session's: the file (`cursor`), the GTID state, the last event's time, the prepared XA
    transactions not yet decided, and how far a restart re-reads them quietly;
  - the open transaction's: its GTID, whether it began with BEGIN, its rows, where it began,
    whether it is an XA transaction's first half (and its held changes), the statement text its
    next rows event carries and how its rows are numbered; or that the kernel holds it, until it
    hands it over with those.
The assembler (connector/assembler.py), the message builder (connector/flat.py) and the kernel's
lane (connector/lane.py) report into it and read it; nothing else keeps a copy.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from connector.items import Burst, Changes, StreamItem
from connector.position import Cursor, MariadbGtidState, MysqlGtidSet, Position, binlog_sort_key

GtidState = MariadbGtidState | MysqlGtidSet


@dataclass(frozen=True, slots=True)
class Xid:
    format_id: int
    gtrid: bytes
    bqual: bytes


@dataclass(frozen=True, slots=True)
class PreparedXa:
    start: Position  # where the XA transaction's first event is: a restart reads it again from there
    changes: tuple[Changes, ...]


class Offset:
    """The offset context of one stream (see the module's docstring)."""

    def __init__(self, start: Position, mariadb: bool | None = None, cursor: Cursor | None = None) -> None:
        """`mariadb`: the server's flavour, which says how its GTIDs read; None: not known yet (a
        stream's, whose sessions say)."""
        self.committed = start  # the last transaction end handed on: where a new session starts
        self.handed: tuple[str, int] | None = None  # the last rows event handed on of the open transaction
        # The prepared XA transactions as of `committed`; None when they must be read again from the
        # binlog (a start whose position says some are pending).
        self.prepared_then: dict[Xid, PreparedXa] | None = None if start.xa else {}
        self.cursor = cursor if cursor is not None else Cursor(start.file)
        self.session(start, mariadb)

    @staticmethod
    def of(file: str | Cursor) -> Offset:
        """An offset context of its own at the start of the file named (a message builder's alone)."""
        cursor = Cursor.of(file)
        return Offset(Position(cursor.file, 4), cursor=cursor)

    @property
    def file(self) -> str:
        return self.cursor.file

    # -- a session -----------------------------------------------------------------------------

    def session(self, start: Position, mariadb: bool | None, quiet_until: Position | None = None) -> None:
        """A session reads from `start` (its GTID set the state before it): the transaction state
        starts empty, the prepared XA transactions are those as of the last end handed on, and
        changes up to the last rows event handed on are not handed on again. `quiet_until`: the
        position before which events are read for the prepared XA transactions they hold only."""
        self.cursor.file = start.file
        self.gtids: GtidState | None = None
        if mariadb is not None:
            self.gtids = MariadbGtidState.parse(start.gtid_set) if mariadb else MysqlGtidSet.parse(start.gtid_set)
        self.timestamp = start.timestamp
        self.prepared: dict[Xid, PreparedXa] = dict(self.prepared_then or {})  # prepared, not yet decided
        self.uncaptured: set[Xid] = set()  # prepared, not decided, changing no captured table
        self.quiet_until = quiet_until.sort_key() if quiet_until is not None else None
        self.skip_to = self.handed  # the session's changes up to here were handed on before
        self.last_rows_pos, self.row_base = -1, 0  # rows inside one payload share its position: numbered across
        self.rows_gtid: str | None = None  # the GTID row messages carry (the builder's rule, connector/flat.py)
        self.sql = ""  # a statement's text (ROWS_QUERY, ANNOTATE_ROWS) its next rows event carries
        # The compiled kernel holds the open transaction: its state is the kernel's until the lane
        # hands it over (`take_over`), and none of the fields above is about it.
        self.kernel_holds = False
        self.end()

    def end(self) -> None:
        """The open transaction ended (or none is open)."""
        self.in_txn = False  # between a GTID or BEGIN and the transaction's end
        self.began = False  # inside an explicit BEGIN (or a MariaDB GTID that stands for one)
        self.gtid: str | None = None  # the open transaction's, which its end adds to `gtids`
        self.rows = 0  # its row changes handed on
        self.txn_start: Position | None = None  # its first event
        self.xa_open = False  # it is an XA transaction's first half
        self.held: list[Changes] = []  # its changes, held until it is decided

    def handing(self, item: StreamItem) -> None:
        """`item` is handed on: a rows event's changes, or a transaction's end (a burst's, too)."""
        if isinstance(item, Changes):
            self.handed = (item.file, item.pos)
        elif item.position is not None:  # a burst's is None when it committed nothing
            self.committed, self.handed = item.position, None
            self.prepared_then = dict(self.prepared)
        if isinstance(item, Burst) and item.handed is not None:  # a transaction it left open
            self.handed = (item.file, item.handed)

    def handed_before(self, item: StreamItem) -> bool:
        """Whether the session's `item` is a change a session before it handed on (up to the last
        one handed on). The session's first item that is no change ends the skipping."""
        if self.skip_to is None:
            return False
        if not isinstance(item, Changes):
            self.skip_to = None
            return False
        return binlog_sort_key(item.file, item.pos) <= binlog_sort_key(*self.skip_to)

    # -- the open transaction ------------------------------------------------------------------

    def gtid_after(self) -> GtidState | None:
        """The GTID state once the open transaction ends."""
        if self.gtids is None or self.gtid is None:
            return self.gtids
        return self.gtids.with_gtid(self.gtid)

    def position(self, pos: int, timestamp: int, server_id: int, gtids: GtidState | None = None) -> Position:
        """A position in the file being read, with the GTID state (`gtids`, else the current one)."""
        self.timestamp = timestamp or self.timestamp  # heartbeats and fake rotates carry no time: the last event's
        return self._at(pos, server_id, gtids if gtids is not None else self.gtids)

    def begin(self, pos: int, gtid: str | None, began: bool, xa: bool) -> None:
        """A transaction's GTID event: it opens (`began`: the event stands for BEGIN, as MariaDB's
        does unless the transaction is one statement; `xa`: it is an XA transaction's first half)."""
        self.in_txn, self.rows, self.gtid = True, 0, gtid
        self.txn_start = Position(self.cursor.file, pos)
        self.began, self.xa_open = began, xa

    def began_explicitly(self, pos: int, xa: bool) -> None:
        """BEGIN or XA START, after the transaction's GTID event if it had one."""
        self.in_txn = self.began = True
        self.xa_open = xa
        if self.txn_start is None:
            self.txn_start = Position(self.cursor.file, pos)

    def take_over(self, began: bool, gtid: str | None, rows: int, start: int, sql: str) -> None:
        """A transaction the kernel began goes on in Python: the events it read of it are handed on,
        its next rows event carries `sql`. `start`: its first event's position (-1: unknown)."""
        self.end()
        self.in_txn, self.began, self.gtid, self.rows = True, began, gtid, rows
        self.txn_start = Position(self.cursor.file, start) if start >= 0 else None
        self.rows_gtid, self.sql, self.last_rows_pos = gtid, sql, -1

    def kernel_commit(self, gtids: list[tuple[Any, ...]], log_pos: int, timestamp: int, server_id: int) -> Position:
        """Transactions the kernel committed: the GTIDs they add (MySQL: (server UUID bytes, first,
        last) runs; MariaDB: (domain, server, sequence), the last of each domain), and where the last
        one ends."""
        state = self.gtids
        for gtid in gtids:
            if isinstance(state, MysqlGtidSet):
                state = state.with_interval(sid_text(gtid[0]), gtid[1], gtid[2])
            elif isinstance(state, MariadbGtidState):
                state = state.with_gtid(f"{gtid[0]}-{gtid[1]}-{gtid[2]}")
        self.gtids, self.timestamp = state, timestamp
        return self._at(log_pos, server_id, state)

    def _at(self, pos: int, server_id: int, gtids: GtidState | None) -> Position:
        xa = ""  # where the oldest prepared XA transaction not yet decided begins
        if self.prepared:
            oldest = min((p.start for p in self.prepared.values()), key=Position.sort_key)
            xa = f"{oldest.file}:{oldest.pos}"
        gtid_set = str(gtids) if gtids is not None else ""
        return Position(self.cursor.file, pos, gtid_set, server_id, self.timestamp, xa=xa)


@lru_cache(maxsize=256)
def sid_text(sid: bytes) -> str:
    """A server UUID's 16 bytes as MySQL prints it."""
    return str(uuid.UUID(bytes=sid))
