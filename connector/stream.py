"""From decoded events to transactions: changes as they come, and a resumable position at each end.

`TransactionAssembler` follows one ordered event stream and yields:
  - `Changes`: the flat messages of one rows event (or one DDL statement), in order;
  - `Commit`: the end of a transaction, with the position to resume from after it;
  - `Heartbeat`: a position between transactions (server heartbeats, binlog rotation).
A transaction runs from its GTID (or BEGIN) to its XID or COMMIT; ROWS_QUERY and
ANNOTATE_ROWS only attach their SQL to the rows after them. A transaction whose tables
are all filtered out still yields its `Commit`, so the position keeps moving.

Consumers treat changes as durable only once their `Commit` arrives. `ChangeStream`
runs the assembler over a live dump and, when the connection drops, reconnects at the
last `Commit` it yielded, skipping the rows events of the open transaction it already
handed on: no transaction is missed and no change is handed on twice.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace

from connector.binlog import constants as c
from connector.binlog.events import (
    Event,
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    TransactionPayloadEvent,
    XaPrepareEvent,
    XidEvent,
)
from connector.binlog.parser import BinlogParser, parse_header
from connector.binlog.rows import RowsDecoderCache, RowsEvent
from connector.errors import SluiceError, SourceUnavailableError, is_retriable
from connector.filters import TableFilter
from connector.flat import FlatMessage, FlatMessageBuilder, RowBatch
from connector.lazy import Lazy
from connector.position import MariadbGtidState, MysqlGtidSet, Position, binlog_sort_key
from connector.replica.client import BinlogDump, ServerInfo, SourceSettings, open_connection
from connector.schema.model import Table
from connector.schema.tracker import SchemaTracker

log = logging.getLogger("sluice.stream")

_MARIADB_FL_STANDALONE = 0x01  # a GTID event whose transaction is one statement, no BEGIN/COMMIT


@dataclass(frozen=True, slots=True)
class Changes:
    messages: Sequence[FlatMessage]
    file: str
    pos: int  # the position of the event the messages come from
    table: Table | None = None  # the rows' table definition at this position; None for statements
    batch: RowBatch | None = None  # a rows event's decoded rows, which `messages` renders


@dataclass(frozen=True, slots=True)
class Commit:
    position: Position  # resume here: the event after this transaction
    gtid: str | None
    rows: int  # row changes handed on in this transaction (filtered tables not counted)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    position: Position


StreamItem = Changes | Commit | Heartbeat

_TXN_END = ("COMMIT", "ROLLBACK")
_IN_TXN_CONTROL = re.compile(r"^(SAVEPOINT|RELEASE\s+SAVEPOINT|ROLLBACK\s+TO|XA\s+END)\b", re.IGNORECASE)


class TransactionAssembler:
    def __init__(self, start: Position, tracker: SchemaTracker, included: TableFilter, mariadb: bool) -> None:
        self.file = start.file
        self.tracker = tracker
        self.included = included
        self.builder = FlatMessageBuilder(start.file)
        self.gtids: MariadbGtidState | MysqlGtidSet | None = _gtid_state(start.gtid_set, mariadb)
        self.mariadb = mariadb
        self.in_txn = False  # between a GTID or BEGIN and the transaction's end
        self.began = False  # inside an explicit BEGIN (or a MariaDB GTID that stands for one)
        self.gtid: str | None = None
        self.rows = 0
        self.timestamp = start.timestamp

    def feed(self, event: Event) -> Iterator[StreamItem]:
        body = event.body
        if isinstance(body, RowsEvent):
            yield from self._rows(event)
        elif isinstance(body, (GtidEvent, MariadbGtidEvent)):
            self._begin(body)
            _drain(self.builder.feed(event))  # the builder notes the GTID for its messages
        elif isinstance(body, QueryEvent):
            yield from self._query(event, body)
        elif isinstance(body, (XidEvent, XaPrepareEvent)):
            yield self._commit(event)
        elif isinstance(body, RotateEvent):
            yield from self._rotate(event, body)
        elif isinstance(body, HeartbeatEvent):
            if not self.in_txn:
                yield Heartbeat(self._position(event.header.log_pos, event))
        elif isinstance(body, TransactionPayloadEvent):
            for inner in body.events:  # a compressed transaction: its events, one by one
                yield from self.feed(replace(inner, header=replace(inner.header, log_pos=event.header.log_pos)))
        elif not isinstance(body, FormatDescriptionEvent):
            _drain(self.builder.feed(event))  # ROWS_QUERY / ANNOTATE_ROWS: remembered, no output

    def _begin(self, body: GtidEvent | MariadbGtidEvent) -> None:
        self.in_txn, self.rows = True, 0
        self.gtid = body.gtid
        # MariaDB's GTID event stands for BEGIN unless the transaction is one statement.
        self.began = isinstance(body, MariadbGtidEvent) and not body.flags & _MARIADB_FL_STANDALONE

    def _rows(self, event: Event) -> Iterator[StreamItem]:
        self.in_txn = True
        body = event.body
        assert isinstance(body, RowsEvent)
        batch = self.builder.batch(event, body)
        if batch is not None:
            assert body.table is not None
            self.rows += len(body.rows)
            definition = self.tracker.definition(body.table)
            # Rendered only if someone reads them: the Avro path encodes the batch's images.
            messages = Lazy(lambda: tuple(batch.messages()), len(body.rows))
            yield Changes(messages, self.file, event.pos, definition, batch)

    def _query(self, event: Event, body: QueryEvent) -> Iterator[StreamItem]:
        sql = body.query.strip()
        upper = sql[:16].upper()
        if upper == "BEGIN" or upper.startswith("XA START"):
            self.in_txn = self.began = True
            return
        if upper in _TXN_END or upper.startswith("XA COMMIT") or upper.startswith("XA ROLLBACK"):
            yield self._commit(event)
            return
        if self.began and _IN_TXN_CONTROL.match(sql):
            return  # SAVEPOINT, XA END and the like
        # Inside a transaction a statement is part of it: CREATE TABLE ... SELECT logs
        # its CREATE between the GTID and the rows. Outside one, DDL commits on its own.
        end = self._position(event.header.log_pos, event, self._gtid_after())
        changes = self.tracker.on_statement(body.query, body.schema, end)
        messages = tuple(m for m in self.builder.feed(event) if self._ddl_captured(m, bool(changes)))
        if messages:
            yield Changes(messages, self.file, event.pos)
        if not self.began:
            yield self._commit(event, feed_builder=False)

    def _ddl_captured(self, message: FlatMessage, changed_captured: bool) -> bool:
        if changed_captured:
            return True
        table = message.get("table") or ""
        return self.included(message["database"], table) if table else self.included.database(message["database"])

    def _rotate(self, event: Event, body: RotateEvent) -> Iterator[StreamItem]:
        self.file = self.tracker.source = self.builder.file = body.next_file
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
        if feed_builder:
            _drain(self.builder.feed(event))  # the builder forgets the transaction's GTID and SQL
        return commit

    def _position(self, pos: int, event: Event, gtids: MariadbGtidState | MysqlGtidSet | None = None) -> Position:
        state = gtids if gtids is not None else self.gtids
        # Heartbeats and fake rotates carry no time: keep the last event's.
        self.timestamp = event.header.timestamp or self.timestamp
        return Position(self.file, pos, str(state) if state is not None else "", event.header.server_id, self.timestamp)


def _drain(messages: Iterator[FlatMessage]) -> None:
    for _ in messages:
        pass


def _gtid_state(text: str, mariadb: bool) -> MariadbGtidState | MysqlGtidSet:
    return MariadbGtidState.parse(text) if mariadb else MysqlGtidSet.parse(text)


# -- the live stream ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Backoff:
    first_s: float = 0.5
    max_s: float = 30.0
    attempts: int = 0  # 0: retry forever

    def delays(self) -> Iterator[float]:
        delay, n = self.first_s, 0
        while not self.attempts or n < self.attempts:
            yield delay
            delay, n = min(delay * 2, self.max_s), n + 1


class ChangeStream:
    """Live stream items from the server, from `start`, across reconnects."""

    def __init__(
        self,
        settings: SourceSettings,
        tracker: SchemaTracker,
        included: TableFilter,
        backoff: Backoff = Backoff(),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.tracker = tracker
        self.included = included
        self.backoff = backoff
        self.sleep = sleep
        self.rows_cache = RowsDecoderCache()
        self.info: ServerInfo | None = None
        self.reconnects = 0
        self.observer: Callable[[Event, int, str], None] | None = None  # every event: metrics
        self.typed_rows = False  # rows events carry typed images too (RowsEvent.typed), for the Avro path

    def items(self, start: Position, blocking: bool = True) -> Generator[StreamItem, None, None]:
        position = start
        handed: tuple[str, int] | None = None  # last rows event handed on in the open transaction
        delays = self.backoff.delays()
        while True:
            try:
                for item in self._session(position, blocking, handed):
                    if isinstance(item, Changes):
                        handed = (item.file, item.pos)
                    else:
                        position, handed = item.position, None
                    delays = self.backoff.delays()  # progress: the next failure starts a fresh backoff
                    yield item
                return
            except SluiceError as exc:
                if not is_retriable(exc):
                    raise
                delay = next(delays, None)
                if delay is None:
                    raise
                self.reconnects += 1
                log.warning("source lost at %s (%s); reconnecting in %.1f s", position, exc, delay)
                self.sleep(delay)

    def _session(self, start: Position, blocking: bool, handed: tuple[str, int] | None) -> Iterator[StreamItem]:
        dump = BinlogDump(self.settings, start, blocking)
        info = self.info = dump.open()
        try:
            if info.mariadb and not start.gtid_set:
                start = replace(start, gtid_set=_binlog_gtid_pos(dump, start))
            parser = self._parser(start.file, info)
            assembler = TransactionAssembler(start, self.tracker, self.included, info.mariadb)
            self.tracker.source = start.file
            skipping = handed is not None
            for raw in dump.events():
                header = parse_header(raw)
                pos = header.log_pos - header.event_length if header.log_pos else 0
                event = parser.decode(raw, pos, header)
                if self.observer is not None:
                    self.observer(event, len(raw), assembler.file)
                for item in assembler.feed(event):
                    if skipping and _handed_before(item, handed):
                        continue  # handed on before the connection dropped
                    if not isinstance(item, Changes):
                        skipping = False
                    yield item
                parser.source = assembler.file
            if blocking:  # a blocking dump has no end: the server is going away (shutdown)
                raise SourceUnavailableError(f"{start.file}: the server ended the binlog dump")
        finally:
            dump.close()

    def _parser(self, file: str, info: ServerInfo) -> BinlogParser:
        parser = BinlogParser(file, checksum=info.checksum)
        parser.rows_cache = self.rows_cache
        parser.typed_rows = self.typed_rows
        parser.table_hook = self.tracker.table_hook
        return parser


def _handed_before(item: StreamItem, handed: tuple[str, int] | None) -> bool:
    if not isinstance(item, Changes) or handed is None:
        return False
    return binlog_sort_key(item.file, item.pos) <= binlog_sort_key(*handed)


def _binlog_gtid_pos(dump: BinlogDump, start: Position) -> str:
    """MariaDB's GTID state at a file position, so positions handed on carry GTIDs too."""
    conn = open_connection(dump.settings)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (start.file, start.pos))
            row = cur.fetchone()
    finally:
        conn.close()
    return str(row[0]) if row and row[0] is not None else ""
