"""The live stream: `ChangeStream` runs the assembler (connector/assembler.py) over a binlog dump
and, when the connection drops, reconnects at the last `Commit` it yielded, skipping the rows
events of the open transaction it already handed on: no transaction is missed and no change is
handed on twice. The compiled kernel's bursts are interleaved here too (connector/lane.py).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace

from connector.assembler import TransactionAssembler
from connector.binlog import constants as c
from connector.binlog.charsets import charset_of
from connector.binlog.events import Event, GtidEvent, PreviousGtidsEvent
from connector.binlog.parser import BinlogParser, parse_header
from connector.binlog.rows import RowsDecoderCache, RowsEvent
from connector.clock import SYSTEM_CLOCK, Clock
from connector.errors import Disposition, SluiceError, SourceUnavailableError, classify
from connector.filters import TableFilter
from connector.flat import Definitions
from connector.items import StreamItem
from connector.lane import Dump, Lane, Lanes
from connector.offset import Offset
from connector.position import Cursor, MysqlGtidSet, Position
from connector.querytext import NO_QUERIES, QueryText
from connector.replica.client import BinlogDump, ServerInfo, SourceSettings, check_server, open_connection
from connector.schema.tracker import SchemaTracker

log = logging.getLogger("sluice.stream")

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


Observer = Callable[[Event, int, str], None]  # every event the Python path reads, its size, the file: metrics


def _nothing(*_: object) -> None:
    return None


@dataclass(frozen=True)
class StreamOptions:
    """What a stream reads beyond its rows and tables, and whom it tells as it reads."""

    typed_rows: bool = False  # rows events carry typed images too (RowsEvent.typed), for the Avro path
    query: QueryText = NO_QUERIES  # what row messages' `sql` carries of their statement
    # `sluice tail`: row messages' mysqlType and sqlType from the schema history (FlatMessageBuilder.definitions)
    definitions: Definitions | None = None
    # The connector's stop: a wait to reconnect ends there (items end, as at a clean stop).
    stop: threading.Event | None = None
    observer: Observer | None = None  # every event the Python path reads: metrics
    on_source: Callable[[bool], None] = _nothing  # reachable or not: /ready
    # Rows of a captured table that the server logged as a statement: not in the binlog as rows,
    # so not published. Each table is warned of once; this hears of every one (database, table).
    on_statement_rows: Callable[[str, str], None] = _nothing
    # Text values not exact in their column's charset, published with the replacement: each column
    # warned of once; this hears of every value (database, table, column, count).
    on_text_replaced: Callable[[str, str, str, int], None] = _nothing


class ChangeStream:
    """Live stream items from the server, from `start`, across reconnects."""

    def __init__(
        self,
        settings: SourceSettings,
        tracker: SchemaTracker,
        included: TableFilter,
        backoff: Backoff = Backoff(),
        clock: Clock = SYSTEM_CLOCK,
        lanes: Lanes | None = None,
        wall: Callable[[], float] = time.time,
        options: StreamOptions = StreamOptions(),
    ) -> None:
        """`lanes`: where the compiled kernel's bursts go, and its plans come from (the Pipeline);
        None: every event takes the Python path. `clock`: the waits' (connector/clock.py); `wall`:
        wall time, the messages' `ts`."""
        self.settings = settings
        self.lanes = lanes
        self.clock = clock
        self.wall = wall
        self.tracker = tracker
        self.included = included
        self.backoff = backoff
        self.rows_cache = RowsDecoderCache()
        self.info: ServerInfo | None = None
        self.reconnects = 0
        self.options = options
        self._warned: set[tuple[str, str]] = set()  # tables whose statement-logged rows were warned of
        self._warned_columns: set[tuple[str, str, str]] = set()  # columns whose replaced text was

    def items(self, start: Position, blocking: bool = True) -> Generator[StreamItem, None, None]:
        offset = Offset(start)  # what each session starts from, across reconnects
        delays = self.backoff.delays()
        while True:
            try:
                progress = False
                for item in self._session(offset, blocking):
                    offset.handing(item)
                    if not progress:  # the session's first item: the next failure starts a fresh backoff
                        progress = True
                        delays = self.backoff.delays()
                        self.options.on_source(True)
                    yield item
                return
            except SluiceError as exc:
                if classify(exc) is not Disposition.RETRY:
                    raise
                delay = next(delays, None)
                if delay is None:
                    raise
                self.reconnects += 1
                self.options.on_source(False)
                log.warning("source lost at %s (%s); reconnecting in %.1f s", offset.committed, exc, delay)
                if self._stopping(delay):
                    return

    def _warn_statement_rows(self, database: str, table: str) -> None:
        if (database, table) not in self._warned:
            self._warned.add((database, table))
            log.warning(
                "%s.%s: the server logged a row change as its statement (binlog_format STATEMENT or MIXED in the "
                "writing session): its rows are not in the binlog and are not published; set binlog_format = ROW "
                "for every session (SET GLOBAL, and no session override), then re-snapshot the table "
                "(sluice snapshot); counted in sluice_statement_logged_changes_total",
                database, table or "(a table the statement hides)",
            )  # fmt: skip
        self.options.on_statement_rows(database, table)

    def _warn_replaced(self, rows: RowsEvent, file: str, pos: int) -> None:
        table = rows.table
        assert table is not None
        for index, count in sorted(collections.Counter(rows.replaced).items()):
            column = (table.schema, table.table, table.column_names[index])
            if column not in self._warned_columns:
                self._warned_columns.add(column)
                log.warning(
                    "%s.%s.%s: %d text value(s) at %s:%d not exact in the column's charset (%s): published with "
                    "U+FFFD for each byte no character starts at, and for each character with no UTF-8 form; "
                    "later ones of this column are counted in sluice_text_replaced_total",
                    *column, count, file, pos, _charset_name(table.columns[index].collation),
                )  # fmt: skip
            self.options.on_text_replaced(*column, count)

    def _stopping(self, delay: float) -> bool:
        """Wait `delay` before reconnecting; True when the connector stops meanwhile."""
        if self.options.stop is None:
            self.clock.sleep(delay)
            return False
        return self.options.stop.wait(delay)

    def _session(self, offset: Offset, blocking: bool) -> Iterator[StreamItem]:
        start = offset.committed
        xa_from = start.xa_start() if offset.prepared_then is None else None
        if xa_from is not None:
            # Re-read the undecided XA transactions from where the oldest begins, with the schema
            # of that position, handing nothing on before `start` (it was handed on already).
            log.info("re-reading prepared XA transactions from %s up to %s", xa_from, start)
            self.tracker.restore(xa_from)
        if not start.gtid_set and start.file:
            start = offset.committed = replace(start, gtid_set=gtid_state_at(self.settings, self._server(), start))
        dump_at = replace(xa_from, gtid_set="") if xa_from is not None else start  # a GTID set would skip it
        dump = BinlogDump(self.settings, dump_at, blocking, asked=start, clock=self.clock)
        info = self.info = dump.open()
        self.tracker.server = (info.mariadb, info.release)  # how its DDL reads (connector/schema/sqltokens.py)
        try:
            offset.session(replace(start, file=dump_at.file), info.mariadb, start if xa_from is not None else None)
            assembler = TransactionAssembler(
                offset, self.tracker, self.included, info.mariadb, query=self.options.query,
                on_statement_rows=self._warn_statement_rows, clock=self.wall, on_replaced=self._warn_replaced,
            )  # fmt: skip
            assembler.builder.definitions = self.options.definitions
            parser = self._parser(offset.cursor, info)
            lane = self._lane(parser, offset)
            yield from session_items(dump.stream, parser, assembler, lane, self.options.observer)
            if blocking:  # a blocking dump has no end: the server is going away (shutdown)
                raise SourceUnavailableError(f"{start.file}: the server ended the binlog dump")
        finally:
            dump.close()

    def _server(self) -> ServerInfo:
        """The server's flavour and settings: from the last session, or asked once."""
        if self.info is None:
            with open_connection(self.settings) as conn:
                self.info = check_server(conn, self.settings)
        return self.info

    def _lane(self, parser: BinlogParser, offset: Offset) -> Lane | None:
        if self.lanes is None or not self.options.typed_rows:
            return None
        return Lane.of(self.lanes, self.tracker, parser, offset, self.options.query, self.wall)

    def _parser(self, cursor: Cursor, info: ServerInfo) -> BinlogParser:
        parser = BinlogParser(cursor, checksum=info.checksum)
        parser.rows_cache = self.rows_cache
        parser.typed_rows = self.options.typed_rows
        parser.table_hook = self.tracker.table_hook
        parser.table_filter = self.included
        return parser


def _charset_name(collation: int | None) -> str:
    charset = charset_of(collation) if collation is not None else None
    return charset or f"collation {collation}, which Sluice has no table for"


def session_items(
    dump: Dump, parser: BinlogParser, assembler: TransactionAssembler, lane: Lane | None,
    observer: Observer | None = None,
) -> Iterator[StreamItem]:  # fmt: skip
    """One dump session's items: the kernel's bursts where it takes the packets, the Python path's
    items (parser, assembler) everywhere else. Changes a session before it handed on are not
    handed on again (the assembler's offset context knows which)."""
    offset = assembler.offset
    events = dump.events()
    while True:
        if lane is not None and lane.ready():
            burst, pythons = lane.step(dump)
            if burst is not None:
                yield burst
            if not pythons:
                continue
            lane.release()  # the next packet is the Python path's, and an open transaction with it
        box = [next(events, None)]
        if box[0] is None:
            return
        for item in assembler.feed(_decoded(box, parser, assembler, lane, observer)):
            if not offset.handed_before(item):  # else handed on before the connection dropped
                yield item


def _decoded(
    box: list[bytes | None], parser: BinlogParser, assembler: TransactionAssembler, lane: Lane | None,
    observer: Observer | None,
) -> Event:  # fmt: skip
    """The Python path's event of the raw bytes in `box`, which it takes out: a rows event's images
    live on in its body, and a 64 MiB row is not held twice."""
    raw = box.pop()
    assert raw is not None
    header = parse_header(raw)
    pos = header.log_pos - header.event_length if header.log_pos else 0
    event = parser.decode(raw, pos, header)
    size = len(raw)
    if lane is not None and header.type_code in _TAUGHT:
        lane.learn(event, raw)
    del raw
    if observer is not None:
        observer(event, size, assembler.file)
    return event


# What the kernel is taught from (Lane.learn): the tables, BEGIN's shape, the source's format.
_TAUGHT = frozenset({c.EventType.TABLE_MAP_EVENT, c.EventType.QUERY_EVENT, c.EventType.FORMAT_DESCRIPTION_EVENT,
                     c.EventType.TRANSACTION_PAYLOAD_EVENT})  # fmt: skip


def gtid_state_at(settings: SourceSettings, info: ServerInfo, position: Position) -> str:
    """The server's whole GTID state at a binlog position, so positions handed on carry it.

    MariaDB computes it itself (BINLOG_GTID_POS). MySQL: the file's PREVIOUS_GTIDS and every
    GTID logged before the position, read with a non-blocking, unregistered dump from the
    file's start (what BINLOG_GTID_POS does on MariaDB). Executed_Gtid_Set beside SHOW BINARY
    LOG STATUS will not do: it is read apart from the position and can miss transactions
    still committing, which a resume by GTID would then send again. "" without GTIDs."""
    if info.mariadb:
        with open_connection(settings) as conn, conn.cursor() as cur:
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.pos))
            row = cur.fetchone()
        return str(row[0]) if row and row[0] is not None else ""
    if not info.gtid_mode:
        return ""
    gtids = MysqlGtidSet()
    dump = BinlogDump(settings, Position(position.file, 4), blocking=False, asked=position)
    dump.open(register=False)
    try:
        parser = BinlogParser(position.file, checksum=info.checksum)
        for raw in dump.events():
            header = parse_header(raw)
            if not header.log_pos:
                continue  # the dump's artificial ROTATE: not in the file
            if header.log_pos > position.pos or header.type_code == c.EventType.ROTATE_EVENT:
                break  # past the position (the event ending at it is still before it), or the file's end
            if header.type_code in _GTID_STATE_EVENTS:
                body = parser.decode(raw, header.log_pos - header.event_length, header).body
                if isinstance(body, PreviousGtidsEvent):
                    gtids = gtids.union(MysqlGtidSet.parse(body.gtid_set))
                elif isinstance(body, GtidEvent) and body.gtid is not None:
                    gtids = gtids.with_gtid(body.gtid)
    finally:
        dump.close()
    return str(gtids)


# What gtid_state_at reads: the FORMAT_DESCRIPTION (the parser needs it), and the GTID events.
_GTID_STATE_EVENTS = frozenset({c.EventType.FORMAT_DESCRIPTION_EVENT, c.EventType.PREVIOUS_GTIDS_LOG_EVENT,
                                c.EventType.GTID_LOG_EVENT, c.EventType.GTID_TAGGED_LOG_EVENT})  # fmt: skip
