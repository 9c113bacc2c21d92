"""Frozen event values and the pure decoders of the events that need no table context.

Each decoder takes the event body (the bytes after the common header, checksum removed)
as a `Reader` plus explicit context, and returns a frozen value or raises `FormatError`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Union

from connector.binlog import constants as c
from connector.binlog.reader import Reader
from connector.errors import FormatError


class EventHeader(NamedTuple):
    """A named tuple, as `Event`, not a frozen dataclass: one of each is made per event, and a
    tuple is built in a third of the time."""

    timestamp: int
    type_code: int
    server_id: int
    event_length: int
    log_pos: int  # position of the next event (end of this one) in the source file
    flags: int


@dataclass(frozen=True, slots=True)
class FormatDescriptionEvent:
    binlog_version: int
    server_version: str
    create_timestamp: int
    header_length: int
    post_header_lengths: bytes
    checksum_alg: int  # BINLOG_CHECKSUM_ALG_*; UNDEF for servers that predate checksums

    def post_header_len(self, type_code: int) -> int:
        if 1 <= type_code <= len(self.post_header_lengths):
            return self.post_header_lengths[type_code - 1]
        return 0


@dataclass(frozen=True, slots=True)
class RotateEvent:
    position: int
    next_file: str


class QueryStatus(NamedTuple):  # a tuple, as Event: 22 fields per QUERY event cost 3x as a frozen dataclass
    flags2: int | None = None
    sql_mode: int | None = None
    catalog: str | None = None
    auto_increment: tuple[int, int] | None = None
    charset_client: int | None = None
    collation_connection: int | None = None
    collation_server: int | None = None
    time_zone: str | None = None
    lc_time_names: int | None = None
    collation_database: int | None = None
    table_map_for_update: int | None = None
    invoker: tuple[str, str] | None = None
    updated_db_names: tuple[str, ...] | None = None
    microseconds: int | None = None
    explicit_defaults_for_timestamp: int | None = None
    ddl_xid: int | None = None
    default_collation_for_utf8mb4: int | None = None
    sql_require_primary_key: int | None = None
    default_table_encryption: int | None = None
    mariadb_xid: int | None = None
    gtid_flags3: int | None = None
    unparsed: bytes = b""  # from the first status code this decoder does not know


@dataclass(frozen=True, slots=True)
class QueryEvent:
    thread_id: int
    exec_time: int
    error_code: int
    schema: str
    query: str
    status: QueryStatus


class XidEvent(NamedTuple):  # a tuple, as Event: one per transaction
    xid: int


@dataclass(frozen=True, slots=True)
class StopEvent:
    pass


@dataclass(frozen=True, slots=True)
class IntvarEvent:
    kind: int  # 1 LAST_INSERT_ID, 2 INSERT_ID
    value: int


@dataclass(frozen=True, slots=True)
class RandEvent:
    seed1: int
    seed2: int


@dataclass(frozen=True, slots=True)
class UserVarEvent:
    name: str
    is_null: bool
    value_type: int = 0
    charset: int = 0
    value: bytes = b""
    flags: int = 0


@dataclass(frozen=True, slots=True)
class IncidentEvent:
    incident: int
    message: str


@dataclass(frozen=True, slots=True)
class HeartbeatEvent:
    log_file: str
    log_pos: int | None  # v2 carries the position; v1 only the file


@dataclass(frozen=True, slots=True)
class RowsQueryEvent:
    query: str


@dataclass(frozen=True, slots=True)
class XaPrepareEvent:
    one_phase: bool
    format_id: int
    gtrid: bytes
    bqual: bytes


class GtidEvent(NamedTuple):  # a tuple, as Event: one per transaction
    """MySQL GTID_LOG_EVENT, ANONYMOUS_GTID_LOG_EVENT and GTID_TAGGED_LOG_EVENT."""

    anonymous: bool
    flags: int
    sid: str
    gno: int
    tag: str = ""
    last_committed: int = 0
    sequence_number: int = 0
    immediate_commit_timestamp: int = 0  # microseconds since the epoch; 0 when absent
    original_commit_timestamp: int = 0
    transaction_length: int = 0
    immediate_server_version: int = 0
    original_server_version: int = 0

    @property
    def gtid(self) -> str | None:
        if self.anonymous:
            return None
        return f"{self.sid}:{self.tag}:{self.gno}" if self.tag else f"{self.sid}:{self.gno}"


@dataclass(frozen=True, slots=True)
class GtidInterval:
    sid: str
    tag: str
    intervals: tuple[tuple[int, int], ...]  # [start, end) as stored


@dataclass(frozen=True, slots=True)
class PreviousGtidsEvent:
    sids: tuple[GtidInterval, ...]

    @property
    def gtid_set(self) -> str:
        return ",".join(_format_sid_intervals(s) for s in self.sids)


def _format_sid_intervals(entry: GtidInterval) -> str:
    parts = [f"{a}" if b - a == 1 else f"{a}-{b - 1}" for a, b in entry.intervals]
    head = f"{entry.sid}:{entry.tag}" if entry.tag else entry.sid
    return ":".join([head, *parts])


class MariadbGtidEvent(NamedTuple):  # a tuple, as Event: one per transaction
    seq_no: int
    domain_id: int
    server_id: int
    flags: int
    commit_id: int | None = None
    xa_format_id: int | None = None
    xid: bytes = b""

    @property
    def gtid(self) -> str:
        return f"{self.domain_id}-{self.server_id}-{self.seq_no}"


@dataclass(frozen=True, slots=True)
class MariadbGtidListEvent:
    flags: int
    gtids: tuple[tuple[int, int, int], ...]  # (domain, server, seq_no)

    @property
    def gtid_set(self) -> str:
        return ",".join(f"{d}-{s}-{n}" for d, s, n in self.gtids)


@dataclass(frozen=True, slots=True)
class BinlogCheckpointEvent:
    file: str


@dataclass(frozen=True, slots=True)
class AnnotateRowsEvent:
    query: str


@dataclass(frozen=True, slots=True)
class OpaqueEvent:
    """An event kept as bytes: known but carrying nothing CDC needs, or ignorable."""

    type_code: int
    body: bytes


@dataclass(frozen=True, slots=True)
class TransactionPayloadEvent:
    compression: int
    payload_size: int
    uncompressed_size: int
    events: tuple[Event, ...] = field(default=())
    inner: bytes = field(default=b"", repr=False, compare=False)  # the events' bytes, inflated (lane.Lane.learn)


# Forward-declared union of every body type; rows and table maps live in their modules.
EventBody = Union[
    FormatDescriptionEvent,
    RotateEvent,
    QueryEvent,
    XidEvent,
    StopEvent,
    IntvarEvent,
    RandEvent,
    UserVarEvent,
    IncidentEvent,
    HeartbeatEvent,
    RowsQueryEvent,
    XaPrepareEvent,
    GtidEvent,
    PreviousGtidsEvent,
    MariadbGtidEvent,
    MariadbGtidListEvent,
    BinlogCheckpointEvent,
    AnnotateRowsEvent,
    OpaqueEvent,
    TransactionPayloadEvent,
    "TableMapEvent",
    "RowsEvent",
]


class Event(NamedTuple):
    """One decoded event: where it starts, its header, and its decoded body."""

    pos: int
    header: EventHeader
    body: EventBody


# ---------------------------------------------------------------------------------------
# Decoders of context-free events. Signature: (reader, header) -> body.
# ---------------------------------------------------------------------------------------


def text(raw: bytes) -> str:
    """Server-written identifiers and SQL: UTF-8, with undecodable bytes kept visible."""
    return raw.decode("utf-8", "backslashreplace")


def decode_rotate(r: Reader, header: EventHeader, post_header_len: int) -> RotateEvent:
    position = r.u64("rotate position") if post_header_len >= 8 else 4
    r.take(max(0, post_header_len - 8), "rotate post-header")
    return RotateEvent(position, text(r.rest()))


def decode_xid(r: Reader, header: EventHeader) -> XidEvent:
    return XidEvent(r.u64("xid"))


def decode_stop(r: Reader, header: EventHeader) -> StopEvent:
    return StopEvent()


def decode_intvar(r: Reader, header: EventHeader) -> IntvarEvent:
    return IntvarEvent(r.u8("intvar type"), r.u64("intvar value"))


def decode_rand(r: Reader, header: EventHeader) -> RandEvent:
    return RandEvent(r.u64("rand seed1"), r.u64("rand seed2"))


def decode_user_var(r: Reader, header: EventHeader) -> UserVarEvent:
    name = text(r.take(r.u32("user var name length"), "user var name"))
    if r.u8("user var is_null"):
        return UserVarEvent(name, True)
    value_type = r.u8("user var type")
    charset = r.u32("user var charset")
    value = r.take(r.u32("user var value length"), "user var value")
    flags = r.u8("user var flags") if r.remaining() else 0
    return UserVarEvent(name, False, value_type, charset, value, flags)


def decode_incident(r: Reader, header: EventHeader) -> IncidentEvent:
    incident = r.u16("incident type")
    message = text(r.take(r.u8("incident message length"), "incident message"))
    return IncidentEvent(incident, message)


def decode_heartbeat(r: Reader, header: EventHeader) -> HeartbeatEvent:
    return HeartbeatEvent(text(r.rest()), None)


def decode_heartbeat_v2(r: Reader, header: EventHeader) -> HeartbeatEvent:
    log_file, log_pos = "", None
    while r.remaining():
        kind = r.packed("heartbeat field type")
        if kind == c.OTW_HB_HEADER_END_MARK:
            break
        value = Reader(r.packed_bytes("heartbeat field"))
        if kind == c.OTW_HB_LOG_FILENAME_FIELD:
            log_file = text(value.rest())
        elif kind == c.OTW_HB_LOG_POSITION_FIELD:
            log_pos = value.packed("heartbeat log position")
    return HeartbeatEvent(log_file, log_pos)


def decode_rows_query(r: Reader, header: EventHeader) -> RowsQueryEvent:
    # The first byte is a length that overflows past 255; the text runs to the end.
    r.u8("rows query length")
    return RowsQueryEvent(text(r.rest()))


def decode_xa_prepare(r: Reader, header: EventHeader) -> XaPrepareEvent:
    one_phase = bool(r.u8("xa one_phase"))
    format_id = r.u32("xa format id")
    gtrid_len = r.u32("xa gtrid length")
    bqual_len = r.u32("xa bqual length")
    if gtrid_len > 64 or bqual_len > 64:
        raise FormatError(f"xa ids too long: gtrid {gtrid_len}, bqual {bqual_len} (max 64)")
    return XaPrepareEvent(one_phase, format_id, r.take(gtrid_len, "xa gtrid"), r.take(bqual_len, "xa bqual"))


@functools.lru_cache(maxsize=1024)
def _uuid(raw: bytes) -> str:
    """A server UUID's text: every transaction's GTID names one of a few."""
    return str(uuid.UUID(bytes=raw))


def decode_gtid(r: Reader, header: EventHeader) -> GtidEvent:
    anonymous = header.type_code == c.EventType.ANONYMOUS_GTID_LOG_EVENT
    flags = r.u8("gtid flags")
    sid = _uuid(r.take(16, "gtid sid"))
    gno = r.u64("gtid gno")
    if not r.remaining() or r.data[r.pos] != 2:  # 5.6 and 5.7.4-: no logical clock
        r.rest()
        return GtidEvent(anonymous, flags, sid, gno)
    r.u8("gtid logical timestamp typecode")
    last_committed, sequence_number = r.u64("last_committed"), r.u64("sequence_number")
    immediate = original = 0
    if r.remaining() >= 7:
        immediate = original = r.uint(7, "immediate_commit_timestamp")
        if immediate & (1 << 55):  # high bit: an original timestamp follows
            immediate &= ~(1 << 55)
            original = r.uint(7, "original_commit_timestamp")
    length = r.packed("transaction_length") if r.remaining() else 0
    imm_ver = orig_ver = 0
    if r.remaining() >= 4:
        imm_ver = orig_ver = r.u32("immediate_server_version")
        if imm_ver & (1 << 31):
            imm_ver &= ~(1 << 31)
            orig_ver = r.u32("original_server_version")
    if r.remaining() >= 8:
        r.u64("commit_group_ticket")
    return GtidEvent(
        anonymous, flags, sid, gno, "", last_committed, sequence_number,
        immediate, original, length, imm_ver, orig_ver,
    )  # fmt: skip


# GTID_TAGGED_LOG_EVENT field ids (Gtid_event::Field_ids in control_events.h).
_TAGGED_FIELDS: dict[int, str] = {
    0: "flags", 1: "sid", 2: "gno", 3: "tag", 4: "last_committed", 5: "sequence_number",
    6: "immediate_commit_timestamp", 7: "original_commit_timestamp", 8: "transaction_length",
    9: "immediate_server_version", 10: "original_server_version", 11: "commit_group_ticket",
}  # fmt: skip
_TAGGED_SIGNED = frozenset({"gno", "last_committed", "sequence_number"})


def decode_gtid_tagged(r: Reader, header: EventHeader) -> GtidEvent:
    start = r.pos
    version = r.u8("serialization version")
    if version != 2:
        raise FormatError(f"tagged GTID serialization version {version}; only 2 is known")
    size = r.varlen("payload size")
    last_non_ignorable = r.varlen("last non-ignorable field id")
    end = start + size
    if size < r.pos - start or end > r.end:
        raise FormatError(f"tagged GTID payload size {size} does not fit the event")
    values: dict[str, object] = {}
    while r.pos < end:
        field_id = r.varlen("field id")
        name = _TAGGED_FIELDS.get(field_id)
        if name is None:
            if field_id <= last_non_ignorable:
                raise FormatError(f"tagged GTID: unknown non-ignorable field {field_id}")
            break  # an ignorable field from a newer server; its length is not self-described
        values[name] = _tagged_value(r, name)
    r.pos = end
    return _tagged_gtid(values)


def _tagged_value(r: Reader, name: str) -> object:
    if name == "sid":
        return bytes(r.varlen("sid byte") & 0xFF for _ in range(16))
    if name == "tag":
        return text(r.take(r.varlen("tag length"), "tag"))
    if name in _TAGGED_SIGNED:
        return r.varlen_signed(name)
    return r.varlen(name)


def _tagged_gtid(v: dict[str, object]) -> GtidEvent:
    def num(key: str, default: int = 0) -> int:
        value = v.get(key, default)
        return value if isinstance(value, int) else default

    sid = v.get("sid", bytes(16))
    tag = v.get("tag", "")
    immediate = num("immediate_commit_timestamp")
    imm_ver = num("immediate_server_version")
    return GtidEvent(
        anonymous=False,
        flags=num("flags"),
        sid=_uuid(sid if isinstance(sid, bytes) else bytes(16)),
        gno=num("gno"),
        tag=tag if isinstance(tag, str) else "",
        last_committed=num("last_committed"),
        sequence_number=num("sequence_number"),
        immediate_commit_timestamp=immediate,
        original_commit_timestamp=num("original_commit_timestamp", immediate),
        transaction_length=num("transaction_length"),
        immediate_server_version=imm_ver,
        original_server_version=num("original_server_version", imm_ver),
    )


def decode_previous_gtids(r: Reader, header: EventHeader) -> PreviousGtidsEvent:
    head = r.u64("previous gtids header")
    tagged = head >> 56 != 0
    n_sids = (head >> 8) & ((1 << 48) - 1) if tagged else head & ((1 << 56) - 1)
    if n_sids * 24 > r.remaining():
        raise FormatError(f"previous gtids: {n_sids} sids cannot fit in {r.remaining()} bytes")
    return PreviousGtidsEvent(tuple(_gtid_sid(r, tagged) for _ in range(n_sids)))


def _gtid_sid(r: Reader, tagged: bool) -> GtidInterval:
    sid = _uuid(r.take(16, "gtid set sid"))
    tag = text(r.take(r.varlen("gtid set tag length"), "gtid set tag")) if tagged else ""
    n = r.u64("gtid set interval count")
    if n * 16 > r.remaining():
        raise FormatError(f"previous gtids: {n} intervals cannot fit in {r.remaining()} bytes")
    intervals = tuple((r.u64("interval start"), r.u64("interval end")) for _ in range(n))
    return GtidInterval(sid, tag, intervals)


def decode_mariadb_gtid(r: Reader, header: EventHeader) -> MariadbGtidEvent:
    seq_no = r.u64("gtid seq_no")
    domain_id = r.u32("gtid domain_id")
    flags = r.u8("gtid flags2")
    commit_id = None
    xa_format, xid = None, b""
    if flags & c.FL_GROUP_COMMIT_ID:
        commit_id = r.u64("gtid commit_id")
    elif flags & (c.FL_PREPARED_XA | c.FL_COMPLETED_XA):
        xa_format = r.u32("xa format id")
        gtrid_len, bqual_len = r.u8("xa gtrid length"), r.u8("xa bqual length")
        xid = r.take(gtrid_len + bqual_len, "xa xid")
    r.rest()  # flags_extra and later additions of newer servers, bounded by the event
    return MariadbGtidEvent(seq_no, domain_id, header.server_id, flags, commit_id, xa_format, xid)


def decode_mariadb_gtid_list(r: Reader, header: EventHeader) -> MariadbGtidListEvent:
    word = r.u32("gtid list count")
    count, flags = word & 0x0FFFFFFF, word >> 28
    if count * 16 > r.remaining():
        raise FormatError(f"gtid list: {count} entries cannot fit in {r.remaining()} bytes")
    gtids = tuple((r.u32("domain"), r.u32("server"), r.u64("seq_no")) for _ in range(count))
    return MariadbGtidListEvent(flags, gtids)


def decode_binlog_checkpoint(r: Reader, header: EventHeader) -> BinlogCheckpointEvent:
    return BinlogCheckpointEvent(text(r.take(r.u32("checkpoint name length"), "checkpoint name")))


def decode_annotate_rows(r: Reader, header: EventHeader) -> AnnotateRowsEvent:
    return AnnotateRowsEvent(text(r.rest()))


def decode_opaque(r: Reader, header: EventHeader) -> OpaqueEvent:
    return OpaqueEvent(header.type_code, r.rest())


SimpleDecoder = Callable[[Reader, EventHeader], EventBody]

# Event types that carry nothing CDC uses and are kept as bytes, by type.
OPAQUE_TYPES = frozenset(
    {
        c.EventType.LOAD_EVENT,
        c.EventType.SLAVE_EVENT,
        c.EventType.CREATE_FILE_EVENT,
        c.EventType.APPEND_BLOCK_EVENT,
        c.EventType.EXEC_LOAD_EVENT,
        c.EventType.DELETE_FILE_EVENT,
        c.EventType.NEW_LOAD_EVENT,
        c.EventType.BEGIN_LOAD_QUERY_EVENT,
        c.EventType.EXECUTE_LOAD_QUERY_EVENT,
        c.EventType.IGNORABLE_LOG_EVENT,
        c.EventType.TRANSACTION_CONTEXT_EVENT,
        c.EventType.VIEW_CHANGE_EVENT,
    }
)

SIMPLE_DECODERS: dict[int, SimpleDecoder] = {
    c.EventType.XID_EVENT: decode_xid,
    c.EventType.STOP_EVENT: decode_stop,
    c.EventType.INTVAR_EVENT: decode_intvar,
    c.EventType.RAND_EVENT: decode_rand,
    c.EventType.USER_VAR_EVENT: decode_user_var,
    c.EventType.INCIDENT_EVENT: decode_incident,
    c.EventType.HEARTBEAT_LOG_EVENT: decode_heartbeat,
    c.EventType.HEARTBEAT_LOG_EVENT_V2: decode_heartbeat_v2,
    c.EventType.ROWS_QUERY_LOG_EVENT: decode_rows_query,
    c.EventType.XA_PREPARE_LOG_EVENT: decode_xa_prepare,
    c.EventType.GTID_LOG_EVENT: decode_gtid,
    c.EventType.ANONYMOUS_GTID_LOG_EVENT: decode_gtid,
    c.EventType.GTID_TAGGED_LOG_EVENT: decode_gtid_tagged,
    c.EventType.PREVIOUS_GTIDS_LOG_EVENT: decode_previous_gtids,
    c.EventType.GTID_EVENT: decode_mariadb_gtid,
    c.EventType.GTID_LIST_EVENT: decode_mariadb_gtid_list,
    c.EventType.BINLOG_CHECKPOINT_EVENT: decode_binlog_checkpoint,
    c.EventType.ANNOTATE_ROWS_EVENT: decode_annotate_rows,
    **{t: decode_opaque for t in OPAQUE_TYPES},
}

if TYPE_CHECKING:  # names for the forward references above
    from connector.binlog.rows import RowsEvent
    from connector.binlog.tablemap import TableMapEvent
