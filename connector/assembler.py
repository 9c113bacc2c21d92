"""From decoded events to transactions: `TransactionAssembler` follows one ordered event stream
and yields its items (connector/items.py). A transaction runs from its GTID (or BEGIN) to its XID
or COMMIT; ROWS_QUERY and ANNOTATE_ROWS only attach their SQL to the rows after them. A
transaction whose tables are all filtered out still yields its `Commit`, so the position keeps
moving. XA transactions are held from XA PREPARE to their decision (the class's docstring)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from connector.binlog import constants as c
from connector.binlog.events import (
    Event,
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatEvent,
    MariadbGtidEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RotateEvent,
    TransactionPayloadEvent,
    XaPrepareEvent,
    XidEvent,
)
from connector.binlog.rows import RowsEvent
from connector.filters import TableFilter
from connector.flat import FlatMessage, FlatMessageBuilder, RowBatch
from connector.items import Changes, Commit, Heartbeat, StreamItem
from connector.lane import sid_text
from connector.lazy import Lazy
from connector.position import Cursor, MariadbGtidState, MysqlGtidSet, Position, binlog_sort_key
from connector.querytext import NO_QUERIES, QueryText
from connector.schema.onlineddl import CutOver
from connector.schema.tracker import SchemaTracker

log = logging.getLogger("sluice.stream")  # one logger name for the stream and its assembler



_TXN_END = ("COMMIT", "ROLLBACK")
_IN_TXN_CONTROL = re.compile(r"^(SAVEPOINT|RELEASE\s+SAVEPOINT|ROLLBACK\s+TO|XA\s+END)\b", re.IGNORECASE)
_XA_DECISION = re.compile(r"^XA\s+(COMMIT|ROLLBACK)\s+(.*?)\s*;?\s*$", re.IGNORECASE | re.DOTALL)
# A row change the server logged as its statement (binlog_format STATEMENT or MIXED in the
# writing session; MariaDB's emptying of a MEMORY table at a restart): no rows event follows.
_NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_DML = re.compile(
    r"(?:/\*.*?\*/\s*)*(?:"
    r"(?:INSERT|REPLACE)(?:\s+(?:LOW_PRIORITY|DELAYED|HIGH_PRIORITY|IGNORE))*(?:\s+INTO)?"
    r"|UPDATE(?:\s+(?:LOW_PRIORITY|IGNORE))*"
    r"|DELETE(?:\s+(?:LOW_PRIORITY|QUICK|IGNORE))*\s+FROM"
    r"|LOAD\s+DATA\b.*?\bINTO\s+TABLE"
    rf")\s+({_NAME})(?:\s*\.\s*({_NAME}))?",
    re.IGNORECASE | re.DOTALL,
)


def statement_logged_change(sql: str, database: str) -> tuple[str, str] | None:
    """The table a row-changing statement logged as text names first ((database, table); the
    table "" when the statement's shape hides it), or None for any other statement."""
    match = _DML.match(sql)
    if match is None:
        head = sql.lstrip()[:8].upper()
        return (database, "") if head.startswith(("INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD")) else None
    first, second = (_unquoted(n) if n else None for n in match.groups())
    return (first or database, second) if second is not None else (database, first or "")


def _unquoted(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


# An xid as the servers log it: X'gtrid',X'bqual',formatID (or quoted strings, as typed).
_XID_PART = r"\s*(?:X'([0-9a-fA-F]*)'|'((?:[^'\\]|\\.|'')*)')\s*"
_XID = re.compile(rf"^{_XID_PART}(?:,{_XID_PART}(?:,\s*(\d+)\s*)?)?$")


@dataclass(frozen=True, slots=True)
class Xid:
    format_id: int
    gtrid: bytes
    bqual: bytes


def parse_xid(text: str) -> Xid | None:
    """The xid of `XA COMMIT|ROLLBACK <xid>`'s argument; None when it is not one."""
    m = _XID.match(text.replace(" ONE PHASE", "").replace(" one phase", ""))
    if m is None:
        return None

    def part(hex_text: str | None, quoted: str | None) -> bytes:
        if hex_text is not None:
            return bytes.fromhex(hex_text)
        return (quoted or "").replace("''", "'").encode()

    return Xid(int(m[5] or 1), part(m[1], m[2]), part(m[3], m[4]))


@dataclass(frozen=True, slots=True)
class PreparedXa:
    start: Position  # where the XA transaction's first event is: a restart reads it again from there
    changes: tuple[Changes, ...]


def restamped(changes: Sequence[Changes], file: str, pos: int, server_id: int) -> Iterator[Changes]:
    """A prepared XA transaction's changes as its XA COMMIT publishes them: at the commit's position
    (row numbers running across its rows events), so ordering by `source` follows the publication."""
    base = 0
    for change in changes:
        batch = change.batch
        if batch is None:
            yield change
            continue
        moved = replace(batch, source={"file": file, "pos": pos, "server_id": server_id}, base=base)
        base += len(batch.rows.rows)
        yield Changes(Lazy(_renderer(moved), len(batch.rows.rows)), change.file, change.pos, change.table, moved)


def _renderer(batch: RowBatch) -> Callable[[], tuple[FlatMessage, ...]]:
    return lambda: tuple(batch.messages())


class TransactionAssembler:
    """Transactions out of one ordered event stream (see the module's docstring).

    XA: MySQL logs an XA transaction's rows at XA PREPARE (XA START .. XA_PREPARE_LOG_EVENT;
    MariaDB: a GTID flagged PREPARED_XA .. XA_PREPARE_LOG_EVENT) and decides it later, in a
    transaction of its own (XA COMMIT / XA ROLLBACK). Its changes are held until then: handed
    on at the commit (re-stamped with its position), dropped at the rollback. Positions handed
    on meanwhile carry where the oldest undecided one begins (`Position.xa`), so a restart
    reads it again from there, quietly, up to where it resumes (`quiet_until`)."""

    def __init__(
        self,
        start: Position,
        tracker: SchemaTracker,
        included: TableFilter,
        mariadb: bool,
        prepared: dict[Xid, PreparedXa] | None = None,
        quiet_until: Position | None = None,
        query: QueryText = NO_QUERIES,
        on_statement_rows: Callable[[str, str], None] = lambda database, table: None,
        clock: Callable[[], float] = time.time,
        on_replaced: Callable[[RowsEvent, str, int], None] = lambda rows, file, pos: None,
    ) -> None:
        """`clock`: wall time, the messages' `ts` (the kernel's too: connector/lane.py)."""
        self.cursor = Cursor(start.file)
        self.clock = clock  # the one owner of the file, read by the builder and the tracker
        self.on_statement_rows = on_statement_rows  # a captured table's rows logged as a statement
        self.on_replaced = on_replaced  # a rows event with text not exact in its charset (RowsEvent.replaced)
        self.tracker = tracker
        tracker.cursor = self.cursor
        self.included = included
        self.builder = FlatMessageBuilder(self.cursor, clock, query)
        self.gtids: MariadbGtidState | MysqlGtidSet | None = _gtid_state(start.gtid_set, mariadb)
        self.mariadb = mariadb
        self.in_txn = False  # between a GTID or BEGIN and the transaction's end
        self.began = False  # inside an explicit BEGIN (or a MariaDB GTID that stands for one)
        self.gtid: str | None = None
        self.rows = 0
        self.timestamp = start.timestamp
        self.txn_start: Position | None = None  # the open transaction's first event
        self.xa_open = False  # the open transaction is an XA transaction's first half
        self.held: list[Changes] = []  # its changes, held until it is decided
        self.prepared: dict[Xid, PreparedXa] = dict(prepared or {})  # prepared, not yet decided
        self.uncaptured: set[Xid] = set()  # prepared, not decided, changing no captured table

        self.quiet_until = quiet_until.sort_key() if quiet_until is not None else None

    @property
    def file(self) -> str:
        return self.cursor.file

    @property
    def statement_waiting(self) -> bool:
        """A statement's text read, its rows event not yet (FlatMessageBuilder.statement_waiting)."""
        return self.builder.statement_waiting

    def feed(self, event: Event) -> Iterator[StreamItem]:
        if self.quiet_until is not None:
            return self._quiet_feed(event)
        return self._feed(event)  # not a generator itself: one frame less per event

    def _quiet_feed(self, event: Event) -> Iterator[StreamItem]:
        assert self.quiet_until is not None
        if binlog_sort_key(self.cursor.file, event.pos) < self.quiet_until:
            _drain(self._feed(event))  # re-read for the prepared XA transactions it holds
            return
        self.quiet_until = None
        yield from self._feed(event)

    def _feed(self, event: Event) -> Iterator[StreamItem]:
        handler = _HANDLERS.get(type(event.body))
        if handler is None:  # ROWS_QUERY / ANNOTATE_ROWS and the like: remembered, no output
            _drain(self.builder.feed(event))
            return iter(())
        return handler(self, event)

    def _gtid(self, event: Event) -> Iterator[StreamItem]:
        assert isinstance(event.body, (GtidEvent, MariadbGtidEvent))
        self._begin(event, event.body)
        _drain(self.builder.feed(event))  # the builder notes the GTID for its messages
        return iter(())

    def _xid(self, event: Event) -> Iterator[StreamItem]:
        return iter((self._commit(event),))

    def _heartbeat(self, event: Event) -> Iterator[StreamItem]:
        if not self.in_txn:
            yield Heartbeat(self._position(event.header.log_pos, event))

    def _payload(self, event: Event) -> Iterator[StreamItem]:
        assert isinstance(event.body, TransactionPayloadEvent)
        for inner in event.body.events:  # a compressed transaction: its events, one by one
            yield from self._feed(inner._replace(header=inner.header._replace(log_pos=event.header.log_pos)))

    def _previous_gtids(self, event: Event) -> Iterator[StreamItem]:
        assert isinstance(event.body, PreviousGtidsEvent)
        if isinstance(self.gtids, MysqlGtidSet):  # everything the server executed before this file
            self.gtids = self.gtids.union(MysqlGtidSet.parse(event.body.gtid_set))
        return iter(())

    def _begin(self, event: Event, body: GtidEvent | MariadbGtidEvent) -> None:
        self.in_txn, self.rows = True, 0
        self.gtid = body.gtid
        self.txn_start = Position(self.cursor.file, event.pos)
        # MariaDB's GTID event stands for BEGIN unless the transaction is one statement.
        self.began = isinstance(body, MariadbGtidEvent) and not body.flags & c.FL_STANDALONE
        self.xa_open = isinstance(body, MariadbGtidEvent) and bool(body.flags & c.FL_PREPARED_XA)

    def _rows(self, event: Event) -> Iterator[StreamItem]:
        self.in_txn = True
        body = event.body
        assert isinstance(body, RowsEvent)
        batch = self.builder.batch(event, body)
        if body.replaced:
            self.on_replaced(body, self.cursor.file, event.pos)
        if batch is not None:
            assert body.table is not None
            self.rows += len(body.rows)
            definition = self.tracker.definition(body.table)
            # Rendered only if someone reads them: the Avro path encodes the batch's images.
            messages = Lazy(lambda: tuple(batch.messages()), len(body.rows))
            changes = Changes(messages, self.cursor.file, event.pos, definition, batch)
            if self.xa_open:
                self.held.append(changes)
            else:
                yield changes

    def _query(self, event: Event) -> Iterator[StreamItem]:
        body = event.body
        assert isinstance(body, QueryEvent)
        sql = body.query.strip()
        upper = sql[:16].upper()
        if upper == "BEGIN" or upper.startswith("XA START"):
            self.in_txn = self.began = True
            self.xa_open = upper.startswith("XA START")
            if self.txn_start is None:
                self.txn_start = Position(self.cursor.file, event.pos)
            return
        decision = _XA_DECISION.match(sql) if upper.startswith("XA ") else None
        if decision is not None:
            yield from self._xa_decided(event, decision[1].upper() == "COMMIT", decision[2])
            return
        if upper in _TXN_END:
            yield self._commit(event)
            return
        if self.began and _IN_TXN_CONTROL.match(sql):
            return  # SAVEPOINT, XA END and the like
        # Inside a transaction a statement is part of it: CREATE TABLE ... SELECT logs
        # its CREATE between the GTID and the rows. Outside one, DDL commits on its own.
        end = self._position(event.header.log_pos, event, self._gtid_after())
        changes = self.tracker.on_statement(body.query, body.schema, end, body.status)
        if not changes and self.quiet_until is None:
            self._statement_rows(sql, body.schema)
        messages = tuple(m for m in self.builder.feed(event) if self._ddl_captured(m, bool(changes)))
        if self.tracker.cut_overs:
            messages = cut_over_messages(messages, self.tracker.cut_overs, self.tracker.renamed_onto)
        if messages:
            yield Changes(messages, self.cursor.file, event.pos)
        if not self.began:
            yield self._commit(event, feed_builder=False)

    def _statement_rows(self, sql: str, database: str) -> None:
        target = statement_logged_change(sql, database)
        if target is None:
            return
        db, table = target
        if self.included(db, table) if table else self.included.database(db):
            self.on_statement_rows(db, table)

    def _xa_prepare(self, event: Event) -> Iterator[StreamItem]:
        body = event.body
        assert isinstance(body, XaPrepareEvent)
        held, self.held = self.held, []
        if body.one_phase or not self.xa_open:  # XA COMMIT ... ONE PHASE: decided on the spot
            yield from held
        else:
            xid = Xid(body.format_id, body.gtrid, body.bqual)
            if held:
                self.prepared[xid] = PreparedXa(self.txn_start or Position(self.cursor.file, event.pos), tuple(held))
            else:  # of tables not captured: nothing to hold, but its decision is no surprise
                self.uncaptured.add(xid)
        yield self._commit(event)

    def _xa_decided(self, event: Event, commit: bool, xid_text: str) -> Iterator[StreamItem]:
        xid = parse_xid(xid_text)
        prepared = self.prepared.pop(xid, None) if xid is not None else None
        if prepared is None and xid not in self.uncaptured and self.quiet_until is None and commit:
            log.warning(
                "XA COMMIT %s at %s:%d: its XA PREPARE was not read by this connector (it precedes the position the "
                "connector first started from); rows it changed in captured tables, if any, are not published: "
                "re-snapshot those tables (`sluice snapshot`)", xid_text, self.cursor.file, event.pos,
            )  # fmt: skip
        self.uncaptured.discard(xid)
        if prepared is not None and commit:
            self.rows = sum(len(c.batch.rows.rows) for c in prepared.changes if c.batch is not None)
            yield from restamped(prepared.changes, self.cursor.file, event.pos, event.header.server_id)
        yield self._commit(event)

    def _ddl_captured(self, message: FlatMessage, changed_captured: bool) -> bool:
        if changed_captured:
            return True
        table = message.get("table") or ""
        return self.included(message["database"], table) if table else self.included.database(message["database"])

    def _rotate(self, event: Event) -> Iterator[StreamItem]:
        body = event.body
        assert isinstance(body, RotateEvent)
        self.cursor.file = body.next_file
        real = event.header.log_pos != 0 and not event.header.flags & c.LOG_EVENT_ARTIFICIAL_F
        if real and not self.in_txn:
            yield Heartbeat(self._position(body.position, event))

    def _gtid_after(self) -> MariadbGtidState | MysqlGtidSet | None:
        if self.gtids is None or self.gtid is None:
            return self.gtids
        return self.gtids.with_gtid(self.gtid)

    def _commit(self, event: Event, feed_builder: bool = True) -> Commit:
        self.gtids = self._gtid_after()
        commit = Commit(self._position(event.header.log_pos, event), self.gtid, self.rows)
        self.in_txn, self.began, self.gtid, self.rows = False, False, None, 0
        self.txn_start, self.xa_open, self.held = None, False, []
        if feed_builder:
            _drain(self.builder.feed(event))  # the builder forgets the transaction's GTID and SQL
        return commit

    # -- the compiled kernel's transactions (connector/lane.py) --------------------------------

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
        self.gtids = state
        self.timestamp = timestamp
        return Position(self.cursor.file, log_pos, str(state) if state is not None else "", server_id, timestamp,
                        xa=self._oldest_prepared())  # fmt: skip

    def take_over(self, began: bool, gtid: str | None, rows: int, start: Position | None, sql: str = "") -> None:
        """A transaction the kernel began goes on here: the events it read of it are handed on (and
        the statement text its next rows event carries)."""
        self.in_txn, self.began, self.gtid, self.rows, self.txn_start = True, began, gtid, rows, start
        self.xa_open, self.held = False, []
        self.builder.take_over(gtid, sql)

    def _position(self, pos: int, event: Event, gtids: MariadbGtidState | MysqlGtidSet | None = None) -> Position:
        state = gtids if gtids is not None else self.gtids
        # Heartbeats and fake rotates carry no time: keep the last event's.
        self.timestamp = event.header.timestamp or self.timestamp
        return Position(self.cursor.file, pos, str(state) if state is not None else "", event.header.server_id,
                        self.timestamp, xa=self._oldest_prepared())  # fmt: skip

    def _oldest_prepared(self) -> str:
        if not self.prepared:
            return ""
        oldest = min((p.start for p in self.prepared.values()), key=Position.sort_key)
        return f"{oldest.file}:{oldest.pos}"


_HANDLERS: dict[type, Callable[[TransactionAssembler, Event], Iterator[StreamItem]]] = {
    RowsEvent: TransactionAssembler._rows,
    GtidEvent: TransactionAssembler._gtid,
    MariadbGtidEvent: TransactionAssembler._gtid,
    QueryEvent: TransactionAssembler._query,
    XidEvent: TransactionAssembler._xid,
    XaPrepareEvent: TransactionAssembler._xa_prepare,
    RotateEvent: TransactionAssembler._rotate,
    HeartbeatEvent: TransactionAssembler._heartbeat,
    TransactionPayloadEvent: TransactionAssembler._payload,
    PreviousGtidsEvent: TransactionAssembler._previous_gtids,
    FormatDescriptionEvent: lambda assembler, event: iter(()),
}


def _drain(messages: Iterator[object]) -> None:
    for _ in messages:
        pass


def _gtid_state(text: str, mariadb: bool) -> MariadbGtidState | MysqlGtidSet:
    return MariadbGtidState.parse(text) if mariadb else MysqlGtidSet.parse(text)


def cut_over_messages(
    messages: tuple[FlatMessage, ...], cuts: list[CutOver], renamed_onto: list[tuple[str, str]]
) -> tuple[FlatMessage, ...]:
    """An online schema change's cut-over, told to each table's readers as the change of its
    definition it is (type ALTER, the table named, what changed and which tool in `sql`), not as
    the RENAME it is written as, which readers take for rows going away (connector/schema/onlineddl.py).
    The RENAME itself still goes out where the statement also gave a captured name to another
    table (or the copy may have changed values), named by that table, not by a tool's helper
    (canal names a RENAME by its first new name): that table is read again, after it."""
    if not messages:
        return messages
    statement = messages[0]
    told = tuple({**statement, "type": "ALTER", "database": c.database, "table": c.table,
                  "sql": c.statement(statement["sql"])} for c in cuts)  # fmt: skip
    if not renamed_onto:
        return told + messages[1:]
    database, table = renamed_onto[0]
    return (*told, {**statement, "database": database, "table": table}, *messages[1:])
