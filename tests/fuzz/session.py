"""Whole dump sessions on `sluice run`'s reading path, with the compiled kernel and without.

An input names a corpus case (tests/fuzz/rig.py: a TABLE_MAP and rows event of a real binlog,
with the schema tracker's state at the end of its file) and carries a TABLE_MAP body and two
rows event bodies. The session is the case's FORMAT_DESCRIPTION, then two transactions (a GTID,
BEGIN on MySQL, the TABLE_MAP, a rows event, an XID; on MySQL, when the input says so, all but
the GTID in a zstd TRANSACTION_PAYLOAD, as binlog_transaction_compression writes them) in the
dump's packets, as a server sends them, handed out by a socket twin in chunks of the sizes the
input picks (so packets arrive cut anywhere). With transaction records on (BEGIN and END on
cdc._transaction), MySQL's second GTID is anonymous, as gtid_mode OFF writes it: its record's
id is its first change's position. It is read by connector/stream.session_items
twice, each time into its own pipeline and MemorySink: with the kernel's lane (which stops at
the first BEGIN and TABLE_MAP, untaught, has the Python path decode and teach them, and goes
on), and on the Python path alone. The two must end alike: the same messages on every
partition, in order, the same saved position, the same error (type and words) or none.
The same twice more with canal-json's encoder (`check_canal`). tests/test_lane.py runs the
unmutated cases; tests/fuzz/native_fuzz.py --target=session mutates them under the sanitizers.

Input layout: case (1 byte: bits 0-6 the case, modulo the cases; bit 7 transaction records on),
flags (1: bits 0-2 the chunk pattern, bit 3 the TABLE_MAP older than the tracker's seed, bits
4-6 the rows event type, modulo rig.ROWS_TYPES, bit 7 the transactions compressed), the
TABLE_MAP body's length (2 bytes, little endian), the body, the first rows body's length (2),
the body, then the second rows body. Bodies exclude the 19-byte header and the CRC.
"""

from __future__ import annotations

import re
import socket
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

import zstandard

from connector.assembler import TransactionAssembler
from connector.binlog import constants as c
from connector.binlog.constants import EventType as E
from connector.binlog.parser import BinlogParser, parse_header
from connector.canal import CanalJsonEncoder
from connector.checkpoint import Checkpointer
from connector.columns import ColumnRules
from connector.config import ColumnRule
from connector.errors import SourceError
from connector.extras import TransactionTopic
from connector.lane import Lane
from connector.pipeline import NO_OPTIONS, Options, Pipeline
from connector.position import Position
from connector.querytext import NO_QUERIES
from connector.replica.client import DumpStream
from connector.replica.packets import frame
from connector.schema.model import Table
from connector.sink.partitioning import TopicRouter
from connector.steps import Encoder
from connector.stream import session_items
from tests.fuzz import rig
from tests.support.twins import MemoryCheckpointStore, MemorySink

# How the socket twin cuts the stream: sizes of successive reads, in turn.
CHUNKS: tuple[tuple[int, ...], ...] = (
    (1 << 20,), (7,), (64, 3, 1000), (19, 5), (4096,), (1, 2, 3, 5, 8, 13), (200,), (65536, 11),
)  # fmt: skip
SID = bytes.fromhex("3f15a78ce9ea11f199ad02fc00000001")  # a server UUID
WALL = 1_700_000_000.25  # the messages' `ts`, the same in both reads
RECORDS = "cdc._transaction"  # the transaction records' topic, when the input has them on


class Chunks:
    """A socket twin: `recv_into` hands `data` out in reads of the sizes given, in turn."""

    def __init__(self, data: bytes, sizes: Sequence[int]) -> None:
        self.data, self.sizes, self.at, self.reads = data, sizes, 0, 0

    def recv_into(self, view: memoryview, nbytes: int = 0) -> int:
        size = min(len(view), self.sizes[self.reads % len(self.sizes)], len(self.data) - self.at)
        view[:size] = self.data[self.at : self.at + size]
        self.at += size
        self.reads += 1
        return size


@dataclass(frozen=True)
class Input:
    case: rig.Case
    table_map: bytes
    rows_type: int
    rows: tuple[bytes, bytes]
    chunks: tuple[int, ...]
    before_seed: bool
    compressed: bool = False  # MySQL cases: each transaction after its GTID in a TRANSACTION_PAYLOAD
    records: bool = False  # transaction records (BEGIN and END on cdc._transaction)
    buffer: int = 1 << 20  # the dump's read buffer's usual size (it grows for a longer packet)


def encode(
    index: int, table_map: bytes, rows_type: int, rows: tuple[bytes, bytes], chunks: int, seed: bool,
    compressed: bool = False, records: bool = False,
) -> bytes:  # fmt: skip
    flags = chunks | seed << 3 | rig.ROWS_TYPES.index(rows_type) << 4 | compressed << 7
    head = bytes([index | records << 7, flags]) + struct.pack("<H", len(table_map)) + table_map
    return head + struct.pack("<H", len(rows[0])) + rows[0] + rows[1]


def decode(cases: list[rig.Case], data: bytes) -> Input | None:
    """The input's parts; None if it is too short to name them."""
    if len(data) < 6:
        return None
    size = struct.unpack_from("<H", data, 2)[0]
    table_map, rest = data[4 : 4 + size], data[4 + size :]
    if len(rest) < 2:
        return None
    first = struct.unpack_from("<H", rest)[0]
    rows = (rest[2 : 2 + first], rest[2 + first :])
    flags = data[1]
    rows_type = rig.ROWS_TYPES[(flags >> 4 & 7) % len(rig.ROWS_TYPES)]
    case = cases[(data[0] & 0x7F) % len(cases)]
    compressed = bool(flags & 0x80) and not case.mariadb
    return Input(case, table_map, rows_type, rows, CHUNKS[flags & 7], bool(flags & 8), compressed, data[0] >= 0x80)


FINDINGS = Path(__file__).parent / "session-findings"  # each named for what it found


def seeds(cases: list[rig.Case]) -> Iterator[bytes]:
    """Every case as it is in its file, both rows events the same, read in two cuts of the stream
    (the second with transaction records; a MySQL case's also compressed); then the inputs of the
    findings so far, so that every run tries them again."""
    for index, case in enumerate(cases):
        table_map, rows_type, rows, _ = rig.pieces(case)
        yield encode(index, table_map, rows_type, (rows, rows), 0, False)
        yield encode(index, table_map, rows_type, (rows, rows), 5, True, records=True)
        if not case.mariadb:
            yield encode(index, table_map, rows_type, (rows, rows), 2, False, compressed=True)
    for found in sorted(FINDINGS.iterdir()):
        yield found.read_bytes()


# -- the stream -------------------------------------------------------------------------------


def _event(case: rig.Case, type_code: int, body: bytes, pos: int) -> bytes:
    """An event at `pos` as the case's server writes it: its header, and a CRC-32 that matches."""
    head = parse_header(case.rows[1])
    length = 19 + len(body) + (4 if case.crc else 0)
    raw = rig.HEADER.pack(head.timestamp, type_code, head.server_id, length, pos + length, 0) + body
    return raw + struct.pack("<I", zlib.crc32(raw)) if case.crc else raw


def _packed(value: int) -> bytes:
    """A length-encoded integer."""
    if value < 251:
        return bytes([value])
    return b"\xfc" + struct.pack("<H", value) if value < 1 << 16 else b"\xfe" + struct.pack("<Q", value)


def payload(case: rig.Case, events: Sequence[tuple[int, bytes]]) -> bytes:
    """A TRANSACTION_PAYLOAD's body as MySQL 9.7 writes it: its header fields (compression type,
    uncompressed size, size; each value length-prefixed), the end mark, then the zstd frame of the
    events, whose headers have no next position and which have no CRC-32."""
    head = parse_header(case.rows[1])
    inner = b"".join(rig.HEADER.pack(head.timestamp, t, head.server_id, 19 + len(b), 0, 0) + b for t, b in events)
    data = zstandard.ZstdCompressor().compress(inner)
    return payload_header(c.PAYLOAD_COMPRESSION_ZSTD, len(inner), len(data)) + data


def payload_header(compression: int, uncompressed: int, size: int) -> bytes:
    fields = (
        (c.OTW_PAYLOAD_COMPRESSION_TYPE_FIELD, compression),
        (c.OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD, uncompressed),
        (c.OTW_PAYLOAD_SIZE_FIELD, size),
    )
    header = b"".join(_packed(field) + _packed(len(_packed(value))) + _packed(value) for field, value in fields)
    return header + _packed(c.OTW_PAYLOAD_HEADER_END_MARK)


def _gtid(case: rig.Case, n: int, anonymous: bool = False) -> tuple[int, bytes]:
    """The transaction's GTID event; `anonymous`: MySQL's with gtid_mode OFF (no server UUID, number 0)."""
    if case.mariadb:  # sequence, domain, flags (transactional, parallel), as MariaDB 10.11 writes them
        return E.GTID_EVENT, struct.pack("<QIB", n, 0, 0x0C) + bytes(6)
    timestamps = (1_700_000_000_000_000).to_bytes(7, "little")  # immediate commit time, no original
    length_and_version = b"\xfc\xff\x01" + struct.pack("<I", 90704)  # transaction length, server version
    kind, sid, number = (E.ANONYMOUS_GTID_LOG_EVENT, bytes(16), 0) if anonymous else (E.GTID_LOG_EVENT, SID, n)
    return kind, b"\x00" + sid + struct.pack("<QBQQ", number, 2, n - 1, n) + timestamps + length_and_version


def _begin(n: int) -> bytes:
    """A BEGIN as MySQL 9.7 logs it: thread id, time, no schema, no error, status variables (flags2,
    sql_mode, catalog, charsets, time zone, the start time's microseconds: each BEGIN its own), the
    schema's NUL, the text."""
    status = b"\x00" + bytes(4) + b"\x01" + bytes(8) + b"\x06\x03std" + b"\x04" + struct.pack("<HHH", 255, 255, 255)
    status += b"\x05\x06SYSTEM" + b"\x0d" + (n * 40503).to_bytes(3, "little")
    return struct.pack("<IIBHH", 7, 0, 0, 0, len(status)) + status + b"\x00BEGIN"


def stream(inp: Input, mangle: Callable[[bytes], bytes] | None = None) -> bytes:
    """The session's packets: the FORMAT_DESCRIPTION, the two transactions, the dump's end.
    `mangle`: what becomes of the second transaction's TRANSACTION_PAYLOAD body (its CRC-32 is
    made after it)."""
    case = inp.case
    events = [case.fde]
    pos = 4 + len(case.fde)
    for n, rows in enumerate(inp.rows, start=7):
        transaction = [_gtid(case, n, anonymous=inp.records and n == 8)]
        inner: list[tuple[int, bytes]] = [] if case.mariadb else [(E.QUERY_EVENT, _begin(n))]
        inner += [(E.TABLE_MAP_EVENT, inp.table_map), (inp.rows_type, rows), (E.XID_EVENT, struct.pack("<Q", n))]
        if inp.compressed:
            body = payload(case, inner)
            transaction.append((E.TRANSACTION_PAYLOAD_EVENT, mangle(body) if mangle and n == 8 else body))
        else:
            transaction += inner
        for type_code, body in transaction:
            events.append(_event(case, type_code, body, pos))
            pos += len(events[-1])
    packets, sequence = [], 1
    for raw in events:
        packets.append(frame(b"\x00" + raw, sequence))
        sequence += 1 + len(raw) // 0xFFFFFF
    return b"".join(packets) + frame(b"\xfe\x00\x00\x02\x00", sequence)


# -- reading it ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    messages: dict[tuple[str, int], list[tuple[bytes | None, bytes | None]]]
    committed: Position | None
    rows: int
    error: tuple[str, str] | None  # an EXPECTED error's type and words
    kernel_rows: int  # not compared: how many of the rows the kernel wrote

    def same(self, other: Outcome) -> bool:
        return (self.messages, self.committed, self.rows, self.error) == (
            other.messages, other.committed, other.rows, other.error
        )  # fmt: skip


def read(
    inp: Input, kernel: bool, mangle: Callable[[bytes], bytes] | None = None, options: Options = NO_OPTIONS,
    encoder: Encoder | None = None,
) -> Outcome:
    """The input's session as `sluice run` reads it: with the kernel's lane, or on the Python path
    (`options`: the pipeline's, [[kafka.columns]] rules say; `encoder`: the value format's, the
    case's Avro encoder if None)."""
    case = inp.case
    tracker = case.tracker
    tracker.seeded_at = Position(case.file, 1 << 40) if inp.before_seed else None
    assembler = TransactionAssembler(Position(case.file, 4), tracker, rig.INCLUDED, case.mariadb, clock=lambda: WALL)
    parser = BinlogParser(assembler.cursor, checksum=case.crc)
    parser.rows_cache = case.parser.rows_cache  # as a ChangeStream's sessions share one
    parser.typed_rows = True
    parser.table_hook = tracker.table_hook
    parser.table_filter = rig.INCLUDED
    sink = MemorySink()
    checkpointer = Checkpointer(MemoryCheckpointStore("redis"), MemoryCheckpointStore("database"))
    if inp.records:  # each read its own records' state
        options = replace(options, transactions=TransactionTopic(RECORDS, clock=lambda: WALL))
    pipeline = Pipeline(encoder or rig.case_encoder(case), sink, TopicRouter("cdc", []), checkpointer, options=options)
    lane = Lane.of(pipeline, tracker, parser, assembler.offset, NO_QUERIES, lambda: WALL) if kernel else None
    chunks = Chunks(stream(inp, mangle), inp.chunks)
    dump = DumpStream(cast(socket.socket, chunks), lambda: "fuzz", lambda error: SourceError(str(error)), inp.buffer)
    error = None
    try:
        pipeline.run(session_items(dump, parser, assembler, lane))
    except rig.EXPECTED as exc:
        error = (type(exc).__name__, str(exc))
    # Partitions that hold messages: the kernel's plan makes a table's topic at its TABLE_MAP,
    # the Python path at its first message (a rows event that fails leaves an empty topic or none).
    messages = {
        (topic, p): [(m.key, m.value) for m in partition]
        for topic, partitions in sink.topics.items() for p, partition in enumerate(partitions) if partition
    }  # fmt: skip
    counters = pipeline.counters
    return Outcome(messages, checkpointer.committed, counters.rows, error, counters.kernel_rows)


def check(inp: Input, mangle: Callable[[bytes], bytes] | None = None, options: Options = NO_OPTIONS) -> Outcome:
    """Both reads of the input; a finding (AssertionError) unless they end alike. The kernel's outcome."""
    rig.case_encoder(inp.case)  # the case's schema directory, the same for both reads
    with_kernel, python = read(inp, True, mangle, options), read(inp, False, mangle, options)
    assert python.kernel_rows == 0
    if not with_kernel.same(python):
        raise AssertionError(f"the kernel's session differs from the Python path's:\n{with_kernel}\n{python}")
    return with_kernel


def check_canal(
    inp: Input, old: str, mangle: Callable[[bytes], bytes] | None = None, options: Options = NO_OPTIONS,
    rows: str = "row",
) -> Outcome:  # fmt: skip
    """`check` with canal-json's encoder (`old`, `rows`: its [kafka] old and message_rows), a fresh one
    for each read."""
    readers = [CanalJsonEncoder(None, rows, old) for _ in range(2)]  # type: ignore[arg-type]
    with_kernel = read(inp, True, mangle, options, encoder=readers[0])
    python = read(inp, False, mangle, options, encoder=readers[1])
    assert python.kernel_rows == 0
    if not with_kernel.same(python):
        raise AssertionError(f"the kernel's canal-json session differs from Python's:\n{with_kernel}\n{python}")
    return with_kernel


def rules(case: rig.Case) -> ColumnRules | None:
    """A [[kafka.columns]] rule for the case's table: its last column not in the key left out, its
    first masked (3 characters), its second hashed (a salt with a character beyond ASCII); None for
    a table with no such columns."""
    table = case_table(case)
    keys = {k.lower() for k in table.primary_key}
    others = [col.name for col in table.columns if col.name.lower() not in keys]
    if not others:
        return None
    exclude = others[-1:] if len(others) > 1 else []
    hashed = others[1:2] if len(others) > 2 else []
    rule = ColumnRule(re.escape(f"{table.database}.{table.name}"), exclude=exclude, mask=others[:1], mask_chars=3,
                      hash=hashed, hash_salt="sälted")  # fmt: skip
    return ColumnRules([rule])


def key_rules(case: rig.Case) -> ColumnRules | None:
    """A rule that masks the table's first key column and hashes its second (or hashes its only one):
    its messages are keyed by the mask and digest, as the Python path keys them; None without a key."""
    table = case_table(case)
    keys = list(table.primary_key)
    if not keys:
        return None
    masked, hashed = (keys[:1], keys[1:2]) if len(keys) > 1 else ([], keys)
    rule = ColumnRule(re.escape(f"{table.database}.{table.name}"), mask=masked, mask_chars=2, hash=hashed,
                      hash_salt="k")  # fmt: skip
    return ColumnRules([rule])


def case_table(case: rig.Case) -> Table:
    body = case.table_map[1][19:]
    return case.tracker.definition(case.tables[int.from_bytes(body[:6], "little")])
