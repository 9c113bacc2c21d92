"""`sluice run`'s path from a rows event's bytes to Kafka, on the in-memory twins, for the fuzzer.

What connector/runner.py wires for a run, with the server and Kafka replaced by their twins:
a BinlogParser with typed rows on and the schema tracker's TABLE_MAP hook (ChangeStream._parser),
the TransactionAssembler, and the Pipeline with the Avro MessageEncoder and a MemorySink. So the
compiled module is reached where production reaches it: `count_rows` when the parser walks a
rows event's images (connector/binlog/rows._deferred), `transcode` when the encoder writes them
(connector/avro/encoding._transcode), `route` when the sink places the messages; and `canal_json`
where canal-json's encoder writes the same images (connector/canal.py), held to its per-message path.

The cases are real TABLE_MAP + rows event pairs from ../shared/binlog-corpus and from the
project's own servers' files of text in every compiled charset (tests/fuzz/binlogs/, made by
tests/fuzz/charset_binlogs.py), one per column layout and event type of a file; most of them
written by the compiled transcoder as they are,
each with the parser's and the schema tracker's state at the end of its file. A fuzz input
names a case and carries both events' bodies (the fuzzer mutates them); the harness frames
them as events again (length and CRC32 as a server would send them).

Input layout: case (1 byte, modulo the cases), flags (1 byte: bit 0 reads the TABLE_MAP as older
than the tracker's seed, where a TABLE_MAP with column names is taken as the table's truth; bits
1-7 pick the rows event type, modulo ROWS_TYPES), the TABLE_MAP body's length (2 bytes, little
endian), the TABLE_MAP body, then the rows event body. Bodies exclude the 19-byte header and the CRC.
"""

from __future__ import annotations

import itertools
import json
import shutil
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from connector.assembler import TransactionAssembler
from connector.avro.encoding import MessageEncoder
from connector.avro.framing import SingleObjectFraming
from connector.avro.registry import SchemaDirectory, SchemaVersion
from connector.avro.schemas import nullable
from connector.binlog.constants import BINLOG_CHECKSUM_ALG_CRC32
from connector.binlog.constants import EventType as E
from connector.binlog.events import Event, EventHeader
from connector.binlog.file import iter_file_events
from connector.binlog.parser import BinlogParser, parse_header
from connector.binlog.rows import ROWS_EVENT_TYPES, RowsEvent
from connector.binlog.tablemap import TableMapEvent
from connector.canal import CanalJsonEncoder
from connector.checkpoint import Checkpointer
from connector.errors import AvroWriteError, BinlogDecodeError, EncodingError
from connector.filters import TableFilter
from connector.items import Changes, StreamItem
from connector.pipeline import Pipeline
from connector.position import Position
from connector.schema.history import MemoryHistoryStore
from connector.schema.model import Table
from connector.schema.tracker import SchemaTracker
from connector.sink.partitioning import TopicRouter
from tests.support.corpus import CORPUS
from tests.support.twins import MemoryCheckpointStore, MemorySink

# Corpus files whose rows events the compiled transcoder writes, of many column types between them.
FILES = [
    "mysql-binlog-connector-java/mysql-bin.sakila.gz",
    "mysql-cdc-rs/8.0_folder_binlog.000693",
    "mysql-cdc-rs/8.0_31_update_rows_v2_binlog.000001",
    "mysql-cdc-rs/8.0_32_delete_rows_v2_binlog.000001",
    "mysql-cdc-rs/5.7_30_write_rows_v2_log.bin",
    "maxwell/binlog.000004",
    "canal/parse-tsdb-mysql-bin.000002",
    "mariadb-server/mysql-test/std_data/rpl/master-bin-seq_10.3.36.000001",
    "mariadb-server/mysql-test/std_data/mdev6020-mysql-bin.000001",  # MariaDB 10.0, no checksums
    "mysql-server/mysql-test/std_data/rpl_binlog_with_gipk_info_full_metadata.000001",
    "mysql-server/mysql-test/std_data-zip-members/instant_ddl__crashed_datadir__data__binlog.000001",
    "mysql-server/mysql-test/std_data-zip-members/datadir_tablespace_linux__db1__binlog.000001",
    "mysql-server/mysql-test/suite/binlog/std_data/bug32407.001",
    "rust-mysql-binlog/bin-log.000001",
    # text in gbk, big5, sjis, euckr, ujis, eucjpms, gb18030 (MySQL's), utf16, utf16le, utf32,
    # ucs2, latin1 and cp1251: absolute, so CORPUS / it is itself
    str(Path(__file__).parent / "binlogs" / "charsets-mariadb.bin"),
    str(Path(__file__).parent / "binlogs" / "charsets-mysql.bin"),
]
FINDINGS = Path(__file__).parent / "findings"  # each named for what it found
PER_FILE = 16  # cases kept of a file, each of its own column layout or rows event type
MAX_BODY = 6000  # larger events are left out of the seeds: mutating them is slow and adds no path

ROWS_TYPES = sorted(ROWS_EVENT_TYPES)
HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server id, event length, next position, flags
INCLUDED = TableFilter.of(None, None)
# What an input may end in: the parser's error naming the event (SchemaMismatchError and the
# schema tracker's errors are among them), or a value the table's Avro type refuses.
EXPECTED = (BinlogDecodeError, EncodingError, AvroWriteError)


@dataclass
class Case:
    """One TABLE_MAP + rows event of a corpus file, and what is needed to feed them again."""

    file: str
    parser: BinlogParser
    tracker: SchemaTracker
    work: Path  # where the encoder keeps its schema directory
    tables: dict[int, TableMapEvent]  # the parser's table maps at the end of the file
    undecoded: frozenset[int]  # and the table ids it leaves undecoded
    table_map: tuple[int, bytes]  # position, raw event
    rows: tuple[int, bytes]
    crc: bool  # the file's events end with a CRC32
    mariadb: bool
    fde: bytes = b""  # the file's FORMAT_DESCRIPTION event
    original: Table | None = None  # the definition its rows are written with, once one was
    encoder: MessageEncoder | None = None
    directory: _Directory | None = None


class _Directory(SchemaDirectory):
    """The production schema directory, noting the definitions it was asked for."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.tables: dict[str, Table] = {}

    def version_of(self, table: Table) -> SchemaVersion:
        self.tables.setdefault(json.dumps(table.to_json(), sort_keys=True), table)
        return super().version_of(table)


@dataclass
class Outcome:
    compiled: int = 0  # rows the compiled transcoder wrote
    messages: int = 0  # messages the sink took
    error: BaseException | None = None  # an EXPECTED error the input ended in


class _Recording(BinlogParser):
    """The production parser, remembering the raw bytes of the last event it decoded."""

    last: bytes = b""

    def decode(self, data: bytes, pos: int, header: EventHeader | None = None) -> Event:
        self.last = data
        return super().decode(data, pos, header)


def load_cases(work: Path, files: list[str] = FILES) -> list[Case]:
    """The cases of `files`, each with its own work folder under `work`. None is run here: the
    harness runs the unmutated ones first, as its seeds, so that a bug they meet is reported
    with its input (tests/test_native_fuzz.py checks that they reach the compiled transcoder)."""
    return [case for name in files for case in _file_cases(name, work / name.replace("/", "_"))]


def _file_cases(name: str, directory: Path) -> Iterator[Case]:
    path = CORPUS / name
    tracker = SchemaTracker(MemoryHistoryStore(), INCLUDED)
    parser = _Recording(path.name)
    parser.typed_rows = False  # for now: replaying the file must not call the compiled module (see below)
    parser.table_hook = tracker.table_hook
    parser.table_filter = INCLUDED
    events = iter_file_events(str(path), parser=parser)
    first = next(events)  # the FORMAT_DESCRIPTION: which server wrote the file
    fde = parser.last
    mariadb = parser.fde is not None and "mariadb" in parser.fde.server_version.lower()
    assembler = TransactionAssembler(Position(path.name, 4), tracker, INCLUDED, mariadb)
    # a case per column layout and rows event type (a file's tables often share one)
    pairs: dict[tuple[object, ...], tuple[tuple[int, bytes], tuple[int, bytes]]] = {}
    last_map: tuple[int, bytes] | None = None
    for event in itertools.chain([first], events):
        for _ in assembler.feed(event):
            pass  # the assembler applies the file's DDL to the tracker
        body = event.body
        if isinstance(body, TableMapEvent):
            last_map = (event.pos, parser.last)
        elif isinstance(body, RowsEvent) and last_map is not None and body.table is not None:
            shape = (body.type_code, tuple((c.real_type, c.meta, c.unsigned, c.collation) for c in body.table.columns))
            if len(parser.last) <= MAX_BODY and len(pairs) < PER_FILE:
                pairs.setdefault(shape, (last_map, (event.pos, parser.last)))
    # Typed rows on, as `sluice run` has them, from the first input on: a bug in the compiled
    # module is met by an input the fuzzer runs, and reported with it, not while loading.
    parser.typed_rows = True
    fde_crc = parser.fde is not None and parser.fde.checksum_alg == BINLOG_CHECKSUM_ALG_CRC32
    crc = parser.checksum if parser.checksum is not None else fde_crc
    tables, undecoded = dict(parser.tables), frozenset(parser.undecoded_tables)
    for n, (table_map, rows) in enumerate(pairs.values()):
        yield Case(name, parser, tracker, directory / str(n), tables, undecoded, table_map, rows, crc, mariadb, fde)


def pieces(case: Case) -> tuple[bytes, int, bytes, bool]:
    """The case's events as an input carries them: TABLE_MAP body, rows type, rows body, before seed."""
    tail = 4 if case.crc else 0
    table_map, rows = case.table_map[1], case.rows[1]
    return table_map[19 : len(table_map) - tail], rows[4], rows[19 : len(rows) - tail], False


def encode(index: int, table_map: bytes, rows_type: int, rows: bytes, before_seed: bool) -> bytes:
    flags = ROWS_TYPES.index(rows_type) << 1 | before_seed
    return bytes([index, flags]) + struct.pack("<H", len(table_map)) + table_map + rows


def decode(cases: list[Case], data: bytes) -> tuple[Case, bytes, int, bytes, bool] | None:
    """The case and the pieces an input names; None if it is too short to name any."""
    if len(data) < 4:
        return None
    case = cases[data[0] % len(cases)]
    size = struct.unpack_from("<H", data, 2)[0]
    rows_type = ROWS_TYPES[(data[1] >> 1) % len(ROWS_TYPES)]
    return case, data[4 : 4 + size], rows_type, data[4 + size :], bool(data[1] & 1)


def seeds(cases: list[Case]) -> Iterator[bytes]:
    """Every case as it is in its file, and as older than the tracker's seed (libFuzzer keeps
    the second where it reaches more: where the TABLE_MAP logs its column names); then the
    inputs of the findings so far, so that every run tries them again."""
    for index, case in enumerate(cases):
        table_map, rows_type, rows, _ = pieces(case)
        yield encode(index, table_map, rows_type, rows, False)
        yield encode(index, table_map, rows_type, rows, True)
    yield zero_columns(cases)
    yield all_null_row(cases)
    for found in sorted(FINDINGS.iterdir()):  # inputs libFuzzer wrote for findings since mended
        yield found.read_bytes()


def zero_columns(cases: list[Case]) -> bytes:
    """Issue 17's hang: a rows event with bytes against a TABLE_MAP of no columns, older than the
    tracker's seed (so the TABLE_MAP is taken as the table's truth). Images of no columns take no
    bytes; count_rows walked them for ever, with the GIL held. Now: the parser's error."""
    index = next(i for i, c in enumerate(cases) if c.rows[1][4] == E.WRITE_ROWS_EVENT)
    table_map, _, _, _ = pieces(cases[index])
    names_end = 8 + 1 + table_map[8] + 1  # table id, flags, schema length, schema, NUL
    names_end += 1 + table_map[names_end] + 1  # table length, table, NUL
    no_columns = table_map[:names_end] + b"\x00\x00"  # no columns, no metadata, an empty null bitmap
    rows = table_map[:6] + b"\x01\x00" + b"\x02\x00" + b"\x00" + b"\x00\x01\x02"  # flags, no extra, 0 columns
    return encode(index, no_columns, E.WRITE_ROWS_EVENT, rows, True)


def all_null_row(cases: list[Case]) -> bytes:
    """A row whose every column is NULL, in front of a real event's rows, for a table with NOT
    NULL columns. The compiled transcoder declines it (the fields have no null); the Python
    rows path raised AttributeError from its generated encoder (None.encode), and the flat path
    after it too. Now: EncodingError, naming the column."""
    index, case, table = next(
        (i, c, t) for i, c in enumerate(cases) if c.rows[1][4] in (E.WRITE_ROWS_EVENT, E.UPDATE_ROWS_EVENT)
        for t in [definition(c)] if t is not None and any(not nullable(col) for col in t.columns)
    )  # fmt: skip
    table_map, rows_type, rows, _ = pieces(case)
    assert len(table.columns) < 251  # a one-byte column count
    at = 10 + struct.unpack_from("<H", rows, 8)[0] - 2  # table id, flags, extra data (v2)
    images = 2 if rows_type == E.UPDATE_ROWS_EVENT else 1
    width = (len(table.columns) + 7) // 8
    start = at + 1 + images * width  # the column count, the columns-present bitmaps
    nulls = b"\xff" * width * images
    return encode(index, table_map, rows_type, rows[:start] + nulls + rows[start:], False)


def definition(case: Case) -> Table | None:
    """The tracked definition of the case's table, at the end of its file."""
    mapped = case.tables.get(int.from_bytes(case.table_map[1][19:25], "little"))
    return None if mapped is None else case.tracker.schema.get(mapped.schema, mapped.table)


def _event(template: bytes, type_code: int, body: bytes, crc: bool) -> bytes:
    """An event as a server would send these bytes: the template's header with this type and
    length, and a CRC32 that matches (the checksum is not what is under test)."""
    head = parse_header(template)
    length = 19 + len(body) + (4 if crc else 0)
    raw = HEADER.pack(head.timestamp, type_code, head.server_id, length, head.log_pos, head.flags) + body
    return raw + struct.pack("<I", zlib.crc32(raw)) if crc else raw


def run(case: Case, table_map: bytes, rows_type: int, rows: bytes, before_seed: bool) -> Outcome:
    """The two events through the parser, the assembler and the pipeline, as `sluice run` takes them."""
    parser, tracker = case.parser, case.tracker
    # the state every input starts from: one input's TABLE_MAP does not leak into the next
    parser.tables, parser.undecoded_tables = dict(case.tables), set(case.undecoded)
    tracker.seeded_at = Position(case.file, 1 << 40) if before_seed else None
    encoder = case_encoder(case)
    compiled = encoder.compiled_rows
    sink = MemorySink()
    pipeline = Pipeline(
        encoder, sink, TopicRouter("cdc", []),
        Checkpointer(MemoryCheckpointStore("redis"), MemoryCheckpointStore("database")),
    )  # fmt: skip
    assembler = TransactionAssembler(Position(case.file, 4), tracker, INCLUDED, case.mariadb)
    outcome = Outcome()
    events = (
        (case.table_map[0], _event(case.table_map[1], E.TABLE_MAP_EVENT, table_map, case.crc)),
        (case.rows[0], _event(case.rows[1], rows_type, rows, case.crc)),
    )
    try:
        for pos, raw in events:
            for item in assembler.feed(parser.decode(raw, pos)):
                _same_as_python(encoder, item)
                pipeline.take(item)
        pipeline.drain()
    except EXPECTED as exc:
        outcome.error = exc
    outcome.compiled = encoder.compiled_rows - compiled
    outcome.messages = sum(len(p) for parts in sink.topics.values() for p in parts)
    return outcome


def case_encoder(case: Case) -> MessageEncoder:
    """The case's encoder, whose schema directory holds the original definition's version alone:
    what one input registered (a mutated definition, its key) does not change how the next is
    written, so an input that fails, fails alone, as its own reproducer. (A fresh directory per
    input would be simpler, and ten times slower.)"""
    if case.encoder is not None and case.directory is not None and len(case.directory.tables) <= 1:
        if case.original is None and case.directory.tables:
            case.original = next(iter(case.directory.tables.values()))
        return case.encoder
    shutil.rmtree(case.work, ignore_errors=True)
    case.directory = _Directory(case.work)
    case.encoder = MessageEncoder(case.directory, SingleObjectFraming())
    if case.original is not None:
        case.directory.version_of(case.original)
    return case.encoder


def _same_as_python(encoder: MessageEncoder, item: StreamItem) -> None:
    """Where the compiled transcoder writes a rows event, the Python path writes the same bytes
    from the decoded images (connector/_transcode.c's promise: Python's bytes, or none)."""
    if not isinstance(item, Changes) or item.batch is None or item.table is None or not item.batch.rows.raw:
        return
    batch, table = item.batch, item.table
    topic = f"cdc.{batch.head['database']}.{batch.head['table']}"
    for canal in CANAL_ENCODERS:  # canal-json's compiled messages (connector/canal.py), both `old` modes
        written = canal.compiled(batch, table)
        if written is not None:
            python_json = [canal.row(m, table, topic) for m in batch.messages()]
            assert written == python_json, f"the compiled canal-json differs from Python's for {topic}"
    fast = encoder.compiled(batch, table, topic)
    if fast is None:
        return
    eager = batch.rows._replace(typed=batch.rows.typed_images(), deferred=None, raw=b"")
    python = encoder.rows(replace(batch, rows=eager), table, topic)
    assert python == fast, f"the compiled transcoder's bytes differ from Python's for {topic}"


CANAL_ENCODERS = (CanalJsonEncoder(None, "row", "changed"), CanalJsonEncoder(None, "row", "full"))  # type: ignore[arg-type]
