"""The compiled kernel's side of a streaming session: most events never become Python objects.

A binlog is mostly transactions of a few known shapes: a GTID (and BEGIN), a TABLE_MAP, rows
events, an XID. The kernel (connector/csrc/kernel.c) walks the dump's packets where they lie in
the read buffer and turns such transactions straight into Kafka-ready messages, partitioned, with
the positions and GTIDs they commit: a `Burst`, which the pipeline produces and closes like any
transaction end (connector/pipeline.py). A compressed transaction (MySQL's TRANSACTION_PAYLOAD) is
inflated by the parser's own decompressor and its events read the same way, the payload taken
whole or not at all. The kernel stops at the first packet it does not handle exactly as the
Python path would, and the Python path (parser, schema tracker, assembler) reads that one; an
open transaction is handed over first (`release`), and goes on in Python to its end.

The kernel is taught only from what the Python path decoded, inside payloads too: each TABLE_MAP
it parses, with the plan the pipeline's Encode step makes for its rows (`Planner`) or that its
table is not captured; each BEGIN's exact shape. A DDL statement, a new FORMAT_DESCRIPTION or a
change of schema forgets the tables again. So an event the kernel takes is one whose bytes equal
what Python decoded before, and its messages are the bytes Python's encoder would write
(tests/test_lane.py holds the two paths to the same messages and positions on corpus binlogs and
live servers; the fuzzer, tests/fuzz/, to the same on mutated bytes).

Whether a session uses the kernel is decided once, when it starts (`Lane.of`): not without the
compiled module; a snapshot in progress pauses it (`Lane.ready`). With transaction records on, the
kernel also says each transaction's part of a burst (`Burst.parts`: its GTID, its first change, its
messages by table, whether it committed), from which the pipeline writes BEGIN and END. Rows
that carry their statement's text are the kernel's too: it cuts the text as
connector/querytext.py does and hands a waiting one over with its transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

from connector.avro.binary import varint
from connector.binlog import constants as c
from connector.binlog.constants import EventType as E
from connector.binlog.events import Event, FormatDescriptionEvent, QueryEvent, TransactionPayloadEvent
from connector.binlog.parser import BinlogParser, inflater, parse_header, status_spans
from connector.binlog.rowplan import KIND_TYPES
from connector.binlog.tablemap import TableMapEvent
from connector.control import BEGIN, control
from connector.errors import BinlogDecodeError
from connector.items import Burst
from connector.native import EventKernel, KernelRows, KernelRun, transcoder
from connector.native_spec import NUMBERS, REASONS
from connector.position import binlog_sort_key
from connector.querytext import NO_QUERIES, QueryText
from connector.schema.model import Table
from connector.schema.tracker import SchemaTracker

if TYPE_CHECKING:
    from connector.offset import Offset

_CONTROL, _FULL, _UNTAUGHT = REASONS["STOP_CONTROL"], REASONS["STOP_FULL"], REASONS["STOP_UNTAUGHT"]
_HEADER = NUMBERS["LOG_EVENT_HEADER_LEN"]
_CRC = NUMBERS["BINLOG_CHECKSUM_LEN"]
MAX_MESSAGES = 4096  # messages in one burst: one hand-off to Kafka, as a statement's gathered rows
# A compressed transaction inflated by the system's libzstd from C, where there is one (a call into
# the parser's decompressor costs a single-row transaction about 1 us); the tests turn it off.
NATIVE_INFLATE = True


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelPlan(KernelRows):
    """How the kernel writes one table's rows (connector/steps.Encode.plan makes it): the encoder's
    bytes (KernelRows), and where and how far its route lets them go."""

    topic: str
    database: str
    table: str
    partitions: int
    fixed: int  # a keyless table's one partition; -1: each key's murmur2
    key_skip: int  # the key's framing, which the hash leaves out
    kinds: int  # the operations it may write (1 << KIND_*): DELETEs are Python's when tombstones follow them
    limit: int  # the most key + value bytes a message may have (else the oversize policy decides)

    @classmethod
    def of(cls, rows: KernelRows, **route: Any) -> KernelPlan:
        return cls(**{f.name: getattr(rows, f.name) for f in fields(KernelRows)}, **route)


Planner = Callable[[TableMapEvent, Table], "KernelPlan | None"]


class Lanes(Protocol):
    """Where a lane's bursts go and its plans come from (connector/pipeline.Pipeline)."""

    def planner(self) -> Planner:
        """How tables' rows are planned."""

    def takes_bursts(self) -> bool:
        """Whether bursts may come now (not while a snapshot reads tables)."""

    def records_transactions(self) -> bool:
        """Whether bursts must say each transaction's part (`Burst.parts`) for its BEGIN and END."""


class Dump(Protocol):
    """What a session reads the dump through (connector/replica/client.DumpStream)."""

    @property
    def buffer(self) -> Any: ...  # DumpBuffer: data, start, end
    @property
    def sequence(self) -> int: ...
    def took(self, consumed: int, sequence: int) -> None: ...
    def fill(self) -> bool: ...
    def events(self) -> Iterator[bytes]: ...


class Lane:
    def __init__(
        self, kernel: EventKernel, planner: Planner, allowed: Callable[[], bool], tracker: SchemaTracker,
        parser: BinlogParser, offset: Offset, clock: Callable[[], float] = time.time, query: QueryText = NO_QUERIES,
    ) -> None:  # fmt: skip
        """`offset`: the stream's offset context, which the kernel's transactions report into;
        `clock`: wall time, the messages' `ts`."""
        self.kernel = kernel
        self.query = query  # what `sql` carries of a statement's text, which the kernel cuts by its rule
        self.planner = planner
        self.allowed = allowed  # the pipeline takes bursts now (no snapshot in progress)
        self.tracker = tracker
        self.parser = parser
        self.offset = offset
        self.clock = clock
        self._file = ""
        self._topics: dict[str, int] = {}
        self._tables: dict[tuple[str, str], int] = {}
        self._taught: dict[int, bytes] = {}  # table id -> the TABLE_MAP body the kernel was taught
        self._schema: object = None  # the tracker's schema the taught tables were planned against
        self._query_post = 13  # the QUERY post-header's length (the FORMAT_DESCRIPTION's)
        self._read_ahead: tuple[str, int] | None = None  # the last event taught at a stop (file, log_pos)

    @staticmethod
    def of(
        lanes: Lanes, tracker: SchemaTracker, parser: BinlogParser, offset: Offset, query: QueryText,
        clock: Callable[[], float] = time.time,
    ) -> Lane | None:  # fmt: skip
        """The session's lane, or None without the compiled module. `query`: what row messages' `sql`
        carries of their statement's text, which the kernel cuts as it does; `clock`: wall time."""
        if transcoder is None:
            return None
        kernel = transcoder.Kernel()
        # compressed transactions: inflated as the parser inflates them (by libzstd from C where it can)
        kernel.inflater(inflater(), NATIVE_INFLATE)
        kernel.records(lanes.records_transactions())
        return Lane(kernel, lanes.planner(), lanes.takes_bursts, tracker, parser, offset, clock, query)

    # -- running -------------------------------------------------------------------------------

    def ready(self) -> bool:
        """Whether the next packets are the kernel's to try: at a transaction's end (or inside one the
        kernel holds), after a reconnect's skipped rows, with the pipeline taking bursts."""
        if self.offset.kernel_holds:
            return True
        offset = self.offset
        # Not while the Python path holds a transaction, nor while a statement's text it read waits
        # for its rows event (the kernel takes such text only inside a transaction it holds), nor
        # while a reconnect's session skips changes handed on before or re-reads XA quietly.
        held = offset.in_txn or offset.sql or offset.skip_to is not None or offset.quiet_until is not None
        return not held and self.allowed()

    def step(self, dump: Dump) -> tuple[Burst | None, bool]:
        """One kernel run over what the dump has buffered (reading more when it has none): the burst
        it made, if any, and whether the next packet is Python's."""
        self._sync()
        while True:
            buf = dump.buffer
            run = self.kernel.run(buf.data, buf.start, buf.end, dump.sequence, int(self.clock() * 1000),
                                  self.offset.timestamp, MAX_MESSAGES)  # fmt: skip
            dump.took(run.consumed, run.sequence)
            if run.consumed or run.reason in (_CONTROL, _UNTAUGHT):
                break
            if run.reason != _FULL and not dump.fill():
                return None, True  # a packet longer than the buffer: Python's reader takes it
        burst = self._burst(run) if run.consumed else None
        self.offset.kernel_holds = run.transaction.in_txn
        return burst, run.reason == _CONTROL or (run.reason == _UNTAUGHT and not self._read_next(dump))

    def _read_next(self, dump: Dump) -> bool:
        """The kernel stopped at a BEGIN or TABLE_MAP it was not taught (or a payload holding one):
        whether the Python path has now decoded it and taught the kernel, which goes on with the
        transaction instead of handing it over (the first of each BEGIN's shape, and each table's
        first after a start or a DDL statement, would otherwise be the Python path's to its end).
        Decoding is all the Python path does with a BEGIN or TABLE_MAP before its transaction's
        rows (the assembler keeps nothing of them), and the kernel counts the event when it takes
        it. Once an event: if the kernel stops there again (a payload whose rows are Python's),
        the Python path reads it."""
        buf = dump.buffer
        data, start, end = buf.data, buf.start, buf.end
        length = int.from_bytes(data[start : start + 3], "little") if end - start >= 4 else 0
        if length < 1 + _HEADER or end - start - 4 < length or data[start + 4] != 0:
            return False  # the kernel read it whole: not reached
        raw = bytes(data[start + 5 : start + 4 + length])
        header = parse_header(raw)
        if self._read_ahead == (self._file, header.log_pos):
            return False
        self._read_ahead = (self._file, header.log_pos)
        try:
            event = self.parser.decode(raw, header.log_pos - header.event_length, header)
        except BinlogDecodeError:
            return False  # the Python path reads it again, and says what is wrong with it
        if isinstance(event.body, QueryEvent) and control(event.body.query) is not BEGIN:
            return False
        self.learn(event, raw)
        return True

    def release(self) -> None:
        """Before the Python path reads a packet: an open transaction the kernel holds goes on there."""
        if not self.offset.kernel_holds:
            return
        txn = self.kernel.release()
        self.offset.kernel_holds = False
        if txn.in_txn:
            self.offset.take_over(txn.began, txn.gtid, txn.rows, txn.start, txn.sql)

    def _burst(self, run: KernelRun) -> Burst:
        rows, events = run.counts
        names = list(self._topics)
        tables = list(self._tables)
        position = None
        if run.commit is not None:
            log_pos, timestamp, server_id = run.commit
            position = self.offset.kernel_commit(run.gtids, log_pos, timestamp, server_id)
        txn = run.transaction
        return Burst(
            self._file,
            [(names[t], plain, tails, count) for t, (plain, tails, count) in run.topics],
            [(*tables[m], KIND_TYPES[kind], n) for m, kind, n in rows],
            events, run.bytes, run.last_event, position, run.commits,
            txn.handed if txn.in_txn and txn.handed >= 0 else None,
            [(gtid, first, done, [(*tables[m], n) for m, n in counts]) for gtid, first, done, counts in run.parts],
        )  # fmt: skip

    def _sync(self) -> None:
        """The file being read (a ROTATE the Python path read moved it), and the schema the tables
        were planned against (a statement that changed it, or a restore, forgets them)."""
        if self.offset.file != self._file:
            self._file = self.offset.file
            name = self._file.encode("utf-8")
            self.kernel.file(varint(len(name)) + name, max(binlog_sort_key(self._file, 0)[1], 0))
        if self.tracker.schema is not self._schema:
            self._schema = self.tracker.schema
            self._forget()

    def _forget(self) -> None:
        self.kernel.clear()
        self._taught.clear()

    # -- teaching ------------------------------------------------------------------------------

    def learn(self, event: Event, raw: bytes) -> None:
        """What the Python path just decoded, for the kernel to take when the same bytes come again."""
        body = event.body
        if isinstance(body, TransactionPayloadEvent):  # a compressed transaction: its events, which have no CRC
            offset = 0
            for inner in body.events:
                end = offset + inner.header.event_length
                self._learn(inner, body.inner[offset + _HEADER : end])
                offset = end
        else:
            self._learn(event, raw[_HEADER : len(raw) - (_CRC if self.parser.has_checksum() else 0)])

    def _learn(self, event: Event, body_bytes: bytes) -> None:
        body = event.body
        if isinstance(body, TableMapEvent):
            self._table(body.table_id, event.pos, body_bytes)
        elif isinstance(body, QueryEvent):
            self._query(body, body_bytes)
        elif isinstance(body, FormatDescriptionEvent):
            self._configure(body)

    def _table(self, table_id: int, pos: int, body: bytes) -> None:
        self._sync()
        if self._taught.get(table_id) == body:
            return  # taught already (the Python path reads the tables while the lane waits)
        self._taught[table_id] = body
        table = self.parser.tables.get(table_id)
        if table is None or table_id in self.parser.undecoded_tables:
            self.kernel.table(table_id, body, None)  # not captured: its rows are skipped
            return
        plan = self.planner(table, self.tracker.definition(table)) if self.tracker.settled(table, pos) else None
        if plan is None:
            self.kernel.table(table_id, body, False)
            return
        topic = self._topics.setdefault(plan.topic, len(self._topics))
        metric = self._tables.setdefault((plan.database, plan.table), len(self._tables))
        self.kernel.table(table_id, body, plan, topic, metric)

    def _query(self, query: QueryEvent, body: bytes) -> None:
        meaning = control(query.query)
        if meaning is BEGIN and len(body) > 11:
            shape, free = begin_shape(body, self._query_post)
            self.kernel.begin(shape, free)
        elif meaning is None:
            self._forget()  # a statement may change a table: its rows are planned again

    def _configure(self, fde: FormatDescriptionEvent) -> None:
        post = fde.post_header_len
        v1 = {post(E.WRITE_ROWS_EVENT_V1), post(E.UPDATE_ROWS_EVENT_V1), post(E.DELETE_ROWS_EVENT_V1)}
        v2 = {post(E.WRITE_ROWS_EVENT), post(E.UPDATE_ROWS_EVENT), post(E.DELETE_ROWS_EVENT)}
        self._taught.clear()  # configure() forgets the tables
        self._query_post = post(E.QUERY_EVENT)
        if fde.header_length != _HEADER or len(v1) != 1 or len(v2) != 1:
            self.kernel.configure(False, False, 0, 0, 0, 0, 0, b"", b"")  # a layout the kernel does not read
            return
        self.kernel.configure(
            self.parser.has_checksum(), "mariadb" in fde.server_version.lower(), post(E.TABLE_MAP_EVENT),
            v1.pop(), v2.pop(), post(E.QUERY_EVENT), *self._query_cut(),
        )  # fmt: skip

    def _query_cut(self) -> tuple[int, bytes, bytes]:
        """configure()'s statement text: the most bytes `sql` carries (0: none), and the parts of the
        mark a cut text ends in (QueryText's rule, which the kernel executes)."""
        if not self.query.include:
            return 0, b"", b""
        before, after = self.query.mark()
        return min(self.query.max_bytes, 2**31 - 1), before.encode(), after.encode()


# Status variables whose value is the statement's own (its start time's microseconds), which every
# BEGIN of a session has at the same place: the kernel takes any value there.
_PER_STATEMENT = frozenset({c.Q_MICROSECONDS, c.Q_HRNOW})


def begin_shape(body: bytes, post_header: int) -> tuple[bytes, bytes]:
    """What makes a QUERY event's body the BEGIN it was: its schema length, and everything after the
    error code (status variables, schema, text); the thread id, time and error code are not read.
    And which of those bytes may differ (0xFF: compared; 0: any): the per-statement values."""
    shape = body[8:9] + body[11:]
    keep = bytearray(b"\xff" * len(shape))
    status_len = int.from_bytes(body[11:13], "little")
    at = 1 + (post_header - 11)  # the status variables' first byte in the shape
    for code, start, end in status_spans(body[post_header : post_header + status_len]):
        if code in _PER_STATEMENT:
            keep[at + start : at + end] = bytes(end - start)
    return shape, bytes(keep)
