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
from dataclasses import replace

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
from connector.control import Txn, control
from connector.filters import TableFilter
from connector.flat import FlatMessage, FlatMessageBuilder, RowBatch
from connector.items import Changes, Commit, Heartbeat, StreamItem
from connector.lazy import Lazy
from connector.offset import GtidState, Offset, PreparedXa, Xid
from connector.position import MysqlGtidSet, Position, binlog_sort_key
from connector.querytext import NO_QUERIES, QueryText
from connector.schema.onlineddl import CutOver
from connector.schema.tracker import SchemaTracker

log = logging.getLogger("sluice.stream")  # one logger name for the stream and its assembler


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
        start: Position | Offset,
        tracker: SchemaTracker,
        included: TableFilter,
        mariadb: bool,
        query: QueryText = NO_QUERIES,
        on_statement_rows: Callable[[str, str], None] = lambda database, table: None,
        clock: Callable[[], float] = time.time,
        on_replaced: Callable[[RowsEvent, str, int], None] = lambda rows, file, pos: None,
    ) -> None:
        """`start`: where it reads from, or the offset context of a stream whose session it is
        (connector/offset.py, which holds its state). `clock`: wall time, the messages' `ts` (the
        kernel's too: connector/lane.py)."""
        self.offset = start if isinstance(start, Offset) else Offset(start, mariadb)
        self.cursor = self.offset.cursor  # the one owner of the file, read by the builder and the tracker
        self.clock = clock
        self.on_statement_rows = on_statement_rows  # a captured table's rows logged as a statement
        self.on_replaced = on_replaced  # a rows event with text not exact in its charset (RowsEvent.replaced)
        self.tracker = tracker
        tracker.cursor = self.cursor
        self.included = included
        self.builder = FlatMessageBuilder(self.offset, clock, query)

    @property
    def file(self) -> str:
        return self.cursor.file

    def feed(self, event: Event) -> Iterator[StreamItem]:
        if self.offset.quiet_until is not None:
            return self._quiet_feed(event)
        return self._feed(event)  # not a generator itself: one frame less per event

    def _quiet_feed(self, event: Event) -> Iterator[StreamItem]:
        assert self.offset.quiet_until is not None
        if binlog_sort_key(self.cursor.file, event.pos) < self.offset.quiet_until:
            _drain(self._feed(event))  # re-read for the prepared XA transactions it holds
            return
        self.offset.quiet_until = None
        yield from self._feed(event)

    def _feed(self, event: Event) -> Iterator[StreamItem]:
        handler = _HANDLERS.get(type(event.body))
        if handler is None:  # ROWS_QUERY / ANNOTATE_ROWS and the like: remembered, no output
            _drain(self.builder.feed(event))
            return iter(())
        return handler(self, event)

    def _gtid(self, event: Event) -> Iterator[StreamItem]:
        body = event.body
        assert isinstance(body, (GtidEvent, MariadbGtidEvent))
        # MariaDB's GTID event stands for BEGIN unless the transaction is one statement.
        mariadb = isinstance(body, MariadbGtidEvent)
        self.offset.begin(event.pos, body.gtid, mariadb and not body.flags & c.FL_STANDALONE,
                          mariadb and bool(body.flags & c.FL_PREPARED_XA))  # fmt: skip
        _drain(self.builder.feed(event))  # the builder notes the GTID for its messages
        return iter(())

    def _xid(self, event: Event) -> Iterator[StreamItem]:
        return iter((self._commit(event),))

    def _heartbeat(self, event: Event) -> Iterator[StreamItem]:
        body = event.body
        assert isinstance(body, HeartbeatEvent)
        # A heartbeat names the file its position is in. MariaDB sends one naming the file a
        # ROTATE just closed, with that file's end, while it opens the next: read as a position
        # in the file being read, it was a position past that file's end, which every restart
        # from it met as "impossible position".
        if not self.offset.in_txn and (not body.log_file or body.log_file == self.cursor.file):
            yield Heartbeat(self._position(event.header.log_pos, event))

    def _payload(self, event: Event) -> Iterator[StreamItem]:
        assert isinstance(event.body, TransactionPayloadEvent)
        for inner in event.body.events:  # a compressed transaction: its events, one by one
            yield from self._feed(inner._replace(header=inner.header._replace(log_pos=event.header.log_pos)))

    def _previous_gtids(self, event: Event) -> Iterator[StreamItem]:
        assert isinstance(event.body, PreviousGtidsEvent)
        gtids = self.offset.gtids
        if isinstance(gtids, MysqlGtidSet):  # everything the server executed before this file
            self.offset.gtids = gtids.union(MysqlGtidSet.parse(event.body.gtid_set))
        return iter(())

    def _rows(self, event: Event) -> Iterator[StreamItem]:
        offset = self.offset
        offset.in_txn = True
        body = event.body
        assert isinstance(body, RowsEvent)
        batch = self.builder.batch(event, body)
        if body.replaced:
            self.on_replaced(body, self.cursor.file, event.pos)
        if batch is not None:
            assert body.table is not None
            offset.rows += len(body.rows)
            definition = self.tracker.definition(body.table)
            # Rendered only if someone reads them: the Avro path encodes the batch's images.
            messages = Lazy(lambda: tuple(batch.messages()), len(body.rows))
            changes = Changes(messages, self.cursor.file, event.pos, definition, batch)
            if offset.xa_open:
                offset.held.append(changes)
            else:
                yield changes

    def _query(self, event: Event) -> Iterator[StreamItem]:
        body = event.body
        assert isinstance(body, QueryEvent)
        meaning = control(body.query)
        if meaning is not None:
            if meaning.txn is Txn.BEGIN:
                self.offset.began_explicitly(event.pos, meaning.xa)
                return
            if meaning.txn is Txn.DECIDED:
                yield from self._xa_decided(event, meaning.commit, meaning.xid)
                return
            if meaning.txn is Txn.END:
                yield self._commit(event)
                return
            if self.offset.began:
                return  # SAVEPOINT, XA END and the like
        sql = body.query.strip()
        # Inside a transaction a statement is part of it: CREATE TABLE ... SELECT logs
        # its CREATE between the GTID and the rows. Outside one, DDL commits on its own.
        end = self._position(event.header.log_pos, event, self.offset.gtid_after())
        changes = self.tracker.on_statement(body.query, body.schema, end, body.status)
        if not changes and self.offset.quiet_until is None:
            self._statement_rows(sql, body.schema)
        messages = tuple(m for m in self.builder.feed(event) if self._ddl_captured(m, bool(changes)))
        if self.tracker.cut_overs:
            messages = cut_over_messages(messages, self.tracker.cut_overs, self.tracker.renamed_onto)
        if messages:
            yield Changes(messages, self.cursor.file, event.pos)
        if not self.offset.began:
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
        offset = self.offset
        held, offset.held = offset.held, []
        if body.one_phase or not offset.xa_open:  # XA COMMIT ... ONE PHASE: decided on the spot
            yield from held
        else:
            xid = Xid(body.format_id, body.gtrid, body.bqual)
            if held:
                start = offset.txn_start or Position(self.cursor.file, event.pos)
                offset.prepared[xid] = PreparedXa(start, tuple(held))
            else:  # of tables not captured: nothing to hold, but its decision is no surprise
                offset.uncaptured.add(xid)
        yield self._commit(event)

    def _xa_decided(self, event: Event, commit: bool, xid_text: str) -> Iterator[StreamItem]:
        offset = self.offset
        xid = parse_xid(xid_text)
        prepared = offset.prepared.pop(xid, None) if xid is not None else None
        if prepared is None and xid not in offset.uncaptured and offset.quiet_until is None and commit:
            log.warning(
                "XA COMMIT %s at %s:%d: its XA PREPARE was not read by this connector (it precedes the position the "
                "connector first started from); rows it changed in captured tables, if any, are not published: "
                "re-snapshot those tables (`sluice snapshot`)", xid_text, self.cursor.file, event.pos,
            )  # fmt: skip
        offset.uncaptured.discard(xid)
        if prepared is not None and commit:
            offset.rows = sum(len(c.batch.rows.rows) for c in prepared.changes if c.batch is not None)
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
        if real and not self.offset.in_txn:
            yield Heartbeat(self._position(body.position, event))

    def _commit(self, event: Event, feed_builder: bool = True) -> Commit:
        offset = self.offset
        offset.gtids = offset.gtid_after()
        commit = Commit(self._position(event.header.log_pos, event), offset.gtid, offset.rows)
        offset.end()
        if feed_builder:
            self.builder.end_transaction()  # the builder forgets the transaction's GTID and SQL
        return commit

    def _position(self, pos: int, event: Event, gtids: GtidState | None = None) -> Position:
        return self.offset.position(pos, event.header.timestamp, event.header.server_id, gtids)


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
