"""The binlog event parser: owns the format-description state, checksums and table maps.

`BinlogParser.decode(data, pos)` takes exactly one event's bytes. It verifies the CRC32,
dispatches on the type byte, and turns any decoding fault into a `BinlogDecodeError`
that names the file, the event's position and type, and carries the raw bytes.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import ClassVar, TypeVar

import zstandard

from connector.binlog import constants as c
from connector.binlog.charsets import text_codec
from connector.binlog.events import (
    SIMPLE_DECODERS,
    Event,
    EventBody,
    EventHeader,
    FormatDescriptionEvent,
    OpaqueEvent,
    QueryEvent,
    QueryStatus,
    TransactionPayloadEvent,
    decode_rotate,
    text,
)
from connector.binlog.reader import Reader
from connector.binlog.rows import (
    ROWS_EVENT_TYPES,
    RowsDecoderCache,
    decode_rows,
    decode_rows_header,
    uncompress_mariadb,
)
from connector.binlog.tablemap import TableMapEvent, decode_table_map, table_map_names, year_is_signed
from connector.errors import (
    BinlogDecodeError,
    ChecksumMismatchError,
    FormatError,
    UnknownEventTypeError,
    UnsupportedBinlogError,
)
from connector.position import Cursor

_HEADER = struct.Struct("<IBIIIH")
_Fault = TypeVar("_Fault", bound=BinlogDecodeError)

# Post-header lengths of a MySQL 8.4 FORMAT_DESCRIPTION, used for events that arrive
# before any FDE (the fake ROTATE a dump starts with).
_DEFAULT_POST_HEADERS = bytes(
    [0, 13, 0, 8, 0, 0, 0, 0, 4, 0, 4, 0, 0, 0, 99, 0, 4, 26, 8, 0, 0, 0, 0, 0, 0,
     2, 0, 0, 0, 10, 10, 10, 42, 42, 0, 18, 52, 0, 10, 40, 0, 0]
)  # fmt: skip
DEFAULT_FDE = FormatDescriptionEvent(
    4, "", 0, c.LOG_EVENT_HEADER_LEN, _DEFAULT_POST_HEADERS, c.BINLOG_CHECKSUM_ALG_UNDEF
)

# What a decoder raises on bytes it cannot read; the parser turns each into a BinlogDecodeError.
DECODE_FAULTS = (
    FormatError,
    struct.error,
    IndexError,
    ValueError,
    OverflowError,
    zlib.error,
    zstandard.ZstdError,
    RecursionError,
)


def parse_header(data: bytes, pos: int = 0) -> EventHeader:
    return EventHeader._make(_HEADER.unpack_from(data, pos))


def _version_tuple(version: str) -> tuple[int, int, int]:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return (int(m[1]), int(m[2]), int(m[3])) if m else (0, 0, 0)


def _checksum_aware(version: str) -> bool:
    """Servers from MySQL 5.6.1 and MariaDB 5.3 end the FDE with a checksum byte."""
    threshold = (5, 3, 0) if "mariadb" in version.lower() else (5, 6, 1)
    return _version_tuple(version) >= threshold


def decode_format_description(data: bytes) -> FormatDescriptionEvent:
    """Decode an FDE from its whole event bytes. Its own header is always 19 bytes."""
    r = Reader(data, c.LOG_EVENT_HEADER_LEN)
    binlog_version = r.u16("binlog version")
    server_version = r.take(50, "server version").split(b"\0", 1)[0].decode("ascii", "replace")
    create_timestamp = r.u32("create timestamp")
    header_length = r.u8("common header length")
    if header_length < c.LOG_EVENT_HEADER_LEN:
        raise FormatError(f"common header length {header_length} is below 19")
    tail = 5 if _checksum_aware(server_version) else 0
    if r.remaining() < tail:
        raise FormatError("FORMAT_DESCRIPTION ends before its checksum algorithm byte")
    post_headers = r.take(r.remaining() - tail, "post-header lengths")
    alg = r.u8("checksum algorithm") if tail else c.BINLOG_CHECKSUM_ALG_UNDEF
    return FormatDescriptionEvent(binlog_version, server_version, create_timestamp, header_length, post_headers, alg)


def verify_crc(data: bytes, is_fde: bool) -> bool:
    """CRC32 of the event without its last 4 bytes, against those bytes.

    An FDE is checksummed before the server sets LOG_EVENT_BINLOG_IN_USE_F, so that bit
    is cleared before computing (binlog-corpus article-hexdumps/EXPECTED.md).
    """
    if is_fde and data[17] & c.LOG_EVENT_BINLOG_IN_USE_F:
        body = data[:17] + bytes([data[17] & ~c.LOG_EVENT_BINLOG_IN_USE_F]) + data[18:-4]
        return zlib.crc32(body) == int.from_bytes(data[-4:], "little")
    # A CRC-32 over bytes followed by their own CRC (little-endian) always yields this residue:
    # one call over the whole event, no slice or view of it.
    return len(data) >= 4 and zlib.crc32(data) == _CRC32_RESIDUE


_CRC32_RESIDUE = 0x2144DF1C


# Given each TABLE_MAP and its position: the table to decode rows with (the same, or one
# with names from a schema history), or None to leave that table's rows undecoded.
TableHook = Callable[[TableMapEvent, int], TableMapEvent | None]


class BinlogParser:
    """Decodes a sequence of events from one source (a file or a dump stream)."""

    def __init__(
        self, source: str | Cursor = "", *, checksum: bool | None = None, verify_checksum: bool = True
    ) -> None:
        self.cursor = Cursor.of(source)
        self.fde: FormatDescriptionEvent | None = None
        self.checksum = checksum  # do events end with a CRC32? None: as the FDE says
        self.verify_checksum = verify_checksum
        self.tables: dict[int, TableMapEvent] = {}
        self._table_maps: dict[tuple[bytes, int, bool], TableMapEvent] = {}  # decoded, by body
        self.rows_cache = RowsDecoderCache()
        self.table_hook: TableHook | None = None
        # Tables whose TABLE_MAPs are read only up to their names (a stream's filters exclude
        # them): their columns and metadata are never decoded, so a table the connector does not
        # capture cannot stop it, whatever its metadata holds.
        self.table_filter: Callable[[str, str], bool] | None = None
        self.undecoded_tables: set[int] = set()
        self.typed_rows = False  # rows events also decoded with numbers for the Avro path (RowsEvent.typed)
        self.raw_rows = False  # rows events' images kept as bytes where they walk, decoded when asked (JSON lines)
        self.inflate = inflater()  # a TRANSACTION_PAYLOAD's zstd body -> its events' bytes

    # -- entry point ---------------------------------------------------------------

    def decode(self, data: bytes, pos: int, header: EventHeader | None = None) -> Event:
        """`header`: `parse_header(data)` when the caller has read it already."""
        if len(data) < c.LOG_EVENT_HEADER_LEN:
            raise self._fault(BinlogDecodeError, f"event of {len(data)} bytes is shorter than a header", pos, -1, data)
        if header is None:
            header = parse_header(data)
        try:
            body = self._decode_checked(header, data, pos)
        except BinlogDecodeError:
            raise
        except DECODE_FAULTS as exc:
            raise self._fault(BinlogDecodeError, str(exc) or type(exc).__name__, pos, header.type_code, data) from exc
        return Event(pos, header, body)

    def _fault(self, kind: type[_Fault], reason: str, pos: int, type_code: int, data: bytes) -> _Fault:
        """An error of `kind` naming this source, the event's position and type (none: -1), with its bytes."""
        name = c.event_type_name(type_code) if type_code >= 0 else ""
        return kind(reason, file=self.cursor.file, pos=pos, event_type=name, raw=bytes(data))

    def _decode_checked(self, header: EventHeader, data: bytes, pos: int) -> EventBody:
        if header.event_length != len(data):
            raise FormatError(f"header says {header.event_length} bytes, event has {len(data)}")
        if header.type_code == c.EventType.FORMAT_DESCRIPTION_EVENT:
            return self._format_description(header, data, pos)
        if header.type_code == c.EventType.START_EVENT_V3:
            reason = "binlog version 1 or 3 (MySQL before 5.0) is not supported; v4 is"
            raise self._fault(UnsupportedBinlogError, reason, pos, header.type_code, data)
        end = len(data)
        if self.has_checksum():
            end -= c.BINLOG_CHECKSUM_LEN
            if self.verify_checksum and not verify_crc(data, False):
                reason = (
                    f"CRC32 mismatch: stored 0x{int.from_bytes(data[-4:], 'little'):08x}, "
                    f"computed 0x{zlib.crc32(data[:-4]):08x}"
                )
                raise self._fault(ChecksumMismatchError, reason, pos, header.type_code, data)
        fde = self.fde or DEFAULT_FDE
        if end < fde.header_length:
            raise FormatError(f"event of {end} bytes is shorter than the {fde.header_length}-byte header")
        return self._dispatch(header, Reader(data, fde.header_length, end), pos, data)

    def has_checksum(self) -> bool:
        """Do events end with a CRC-32 (as the source said, or its FORMAT_DESCRIPTION)?"""
        if self.checksum is not None:
            return self.checksum
        return self.fde is not None and self.fde.checksum_alg == c.BINLOG_CHECKSUM_ALG_CRC32

    # -- FORMAT_DESCRIPTION ------------------------------------------------------------

    def _format_description(self, header: EventHeader, data: bytes, pos: int) -> FormatDescriptionEvent:
        fde = decode_format_description(data)
        if fde.binlog_version != 4:
            reason = f"binlog version {fde.binlog_version} is not supported; v4 is"
            raise self._fault(UnsupportedBinlogError, reason, pos, header.type_code, data)
        if fde.checksum_alg == c.BINLOG_CHECKSUM_ALG_CRC32 and self.verify_checksum and not verify_crc(data, True):
            reason = "CRC32 mismatch on FORMAT_DESCRIPTION"
            raise self._fault(ChecksumMismatchError, reason, pos, header.type_code, data)
        if fde.checksum_alg not in (
            c.BINLOG_CHECKSUM_ALG_OFF,
            c.BINLOG_CHECKSUM_ALG_CRC32,
            c.BINLOG_CHECKSUM_ALG_UNDEF,
        ):
            raise FormatError(f"checksum algorithm {fde.checksum_alg} is unknown")
        self.fde = fde
        if self.checksum is None or header.log_pos != 0:
            # A real FDE (not the artificial one a dump sends) settles the question.
            self.checksum = fde.checksum_alg == c.BINLOG_CHECKSUM_ALG_CRC32
        return fde

    # -- dispatch --------------------------------------------------------------------

    def _dispatch(self, header: EventHeader, r: Reader, pos: int, data: bytes) -> EventBody:
        code = header.type_code
        simple = SIMPLE_DECODERS.get(code)
        if simple is not None:
            return simple(r, header)
        handler = self._HANDLERS.get(code)
        if handler is not None:
            return handler(self, header, r, pos, data)
        if code in ROWS_EVENT_TYPES:
            return self._rows(header, r)
        if header.flags & c.LOG_EVENT_IGNORABLE_F:
            return OpaqueEvent(code, r.rest())
        reason = f"event type {code} is unknown and not flagged LOG_EVENT_IGNORABLE_F"
        raise self._fault(UnknownEventTypeError, reason, pos, code, data)

    def _post_header_len(self, code: int) -> int:
        return (self.fde or DEFAULT_FDE).post_header_len(code)

    def _rotate(self, header: EventHeader, r: Reader, pos: int, data: bytes) -> EventBody:
        return decode_rotate(r, header, self._post_header_len(c.EventType.ROTATE_EVENT))

    def _mariadb(self) -> bool:
        """Was the binlog written by MariaDB (its FORMAT_DESCRIPTION's server version says)?"""
        return self.fde is not None and "mariadb" in self.fde.server_version.lower()

    def _table_map(self, header: EventHeader, r: Reader, pos: int, data: bytes) -> EventBody:
        mariadb = self._mariadb()
        post_header_len = self._post_header_len(c.EventType.TABLE_MAP_EVENT)
        # Every transaction maps its tables again with the same bytes: decode each once.
        key = (r.data[r.pos : r.end], post_header_len, mariadb)
        table = self._table_maps.get(key)
        if table is None:
            table = self._decode_table_map(r, post_header_len, mariadb)
            if len(self._table_maps) >= 4096:
                self._table_maps.clear()
            self._table_maps[key] = table
        else:
            r.pos = r.end
        self.undecoded_tables.discard(table.table_id)
        if self.table_filter is not None and not self.table_filter(table.schema, table.table):
            self.undecoded_tables.add(table.table_id)
        elif self.table_hook is not None:
            resolved = self.table_hook(table, pos)
            if resolved is None:
                self.undecoded_tables.add(table.table_id)
            else:
                table = resolved
        self.tables[table.table_id] = table
        return table

    def _decode_table_map(self, r: Reader, post_header_len: int, mariadb: bool) -> TableMapEvent:
        if self.table_filter is not None:
            names = table_map_names(Reader(r.data, r.pos, r.end), post_header_len, mariadb)
            if not self.table_filter(names.schema, names.table):
                r.pos = r.end
                return names
        version = self.fde.server_version if self.fde is not None else ""
        return decode_table_map(r, post_header_len, mariadb, year_is_signed(version, mariadb))

    def _rows(self, header: EventHeader, r: Reader) -> EventBody:
        rows_header = decode_rows_header(r, header.type_code, self._post_header_len(header.type_code))
        table = self.tables.get(rows_header.table_id)
        skip = rows_header.table_id in self.undecoded_tables
        return decode_rows(r, header.type_code, rows_header, table, self.rows_cache, skip, self.typed_rows,
                           self.raw_rows)  # fmt: skip

    def _query(self, header: EventHeader, r: Reader, pos: int, data: bytes) -> EventBody:
        return decode_query(r, header, self._post_header_len(c.EventType.QUERY_EVENT), self._mariadb())

    def _encrypted(self, header: EventHeader, r: Reader, pos: int, data: bytes) -> EventBody:
        reason = (
            "encrypted binlogs are not supported (START_ENCRYPTION_EVENT); "
            "stream from a server that decrypts, or turn encrypt_binlog off"
        )
        raise self._fault(UnsupportedBinlogError, reason, pos, header.type_code, data)

    def _pre_ga_rows(self, header: EventHeader, r: Reader, pos: int, data: bytes) -> EventBody:
        reason = "pre-GA MySQL 5.1 row events (types 20-22) are not supported"
        raise self._fault(UnsupportedBinlogError, reason, pos, header.type_code, data)

    # -- TRANSACTION_PAYLOAD (binlog_transaction_compression) --------------------------

    def _payload(self, header: EventHeader, r: Reader, pos: int, data: bytes) -> TransactionPayloadEvent:
        size = compression = uncompressed = None
        while True:
            field = r.packed("payload header field")
            if field == c.OTW_PAYLOAD_HEADER_END_MARK:
                break
            value = Reader(r.packed_bytes("payload header value")).packed("payload header value")
            if field == c.OTW_PAYLOAD_SIZE_FIELD:
                size = value
            elif field == c.OTW_PAYLOAD_COMPRESSION_TYPE_FIELD:
                compression = value
            elif field == c.OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD:
                uncompressed = value
        payload = r.rest()
        if size is None or compression is None or size != len(payload):
            raise FormatError(f"payload header size {size} / compression {compression}; {len(payload)} payload bytes")
        inner = self._inflate(payload, compression, uncompressed)
        events = tuple(self._inner_events(inner, pos))
        return TransactionPayloadEvent(compression, size, len(inner), events, inner)

    def _inflate(self, payload: bytes, compression: int, uncompressed: int | None) -> bytes:
        if compression == c.PAYLOAD_COMPRESSION_NONE:
            return payload
        if compression != c.PAYLOAD_COMPRESSION_ZSTD:
            raise FormatError(f"payload compression type {compression} is unknown (0 zstd, 255 none)")
        if uncompressed is None or uncompressed > c.MAX_PAYLOAD_UNCOMPRESSED:
            raise FormatError(f"payload uncompressed size {uncompressed} is missing or above 1 GiB")
        inner = self.inflate(payload, uncompressed)
        if len(inner) != uncompressed:
            raise FormatError(f"payload inflates to {len(inner)} bytes, header says {uncompressed}")
        return inner

    def _inner_events(self, inner: bytes, pos: int) -> list[Event]:
        """Events inside a payload carry no checksum of their own."""
        events, offset = [], 0
        saved, self.checksum = self.checksum, False
        try:
            while offset < len(inner):
                if offset + c.LOG_EVENT_HEADER_LEN > len(inner):
                    raise FormatError(f"payload ends inside an event header at inner offset {offset}")
                length = parse_header(inner, offset).event_length
                if length < c.LOG_EVENT_HEADER_LEN or offset + length > len(inner):
                    raise FormatError(f"inner event at offset {offset} claims {length} bytes")
                events.append(self.decode(inner[offset : offset + length], pos))
                offset += length
        finally:
            self.checksum = saved
        return events

    _HANDLERS: ClassVar[dict[int, Callable[[BinlogParser, EventHeader, Reader, int, bytes], EventBody]]] = {
        c.EventType.ROTATE_EVENT: _rotate,
        c.EventType.TABLE_MAP_EVENT: _table_map,
        c.EventType.QUERY_EVENT: _query,
        c.EventType.QUERY_COMPRESSED_EVENT: _query,
        c.EventType.TRANSACTION_PAYLOAD_EVENT: _payload,
        c.EventType.START_ENCRYPTION_EVENT: _encrypted,
        c.EventType.PRE_GA_WRITE_ROWS_EVENT: _pre_ga_rows,
        c.EventType.PRE_GA_UPDATE_ROWS_EVENT: _pre_ga_rows,
        c.EventType.PRE_GA_DELETE_ROWS_EVENT: _pre_ga_rows,
    }


def inflater() -> Callable[[bytes, int], bytes]:
    """How a TRANSACTION_PAYLOAD's zstd body is inflated, given its uncompressed size: the parser's
    way and the compiled kernel's (lane.Lane.of), so both read the same bytes and refuse the same.
    One decompressor each, reused: making one costs more than inflating a small transaction."""
    return zstandard.ZstdDecompressor().decompress


# -- QUERY_EVENT ------------------------------------------------------------------------


def decode_query(r: Reader, header: EventHeader, post_header_len: int, mariadb: bool = False) -> QueryEvent:
    """`mariadb`: written by MariaDB, whose charsets the statement's text decodes by."""
    thread_id = r.u32("thread id")
    exec_time = r.u32("exec time")
    schema_len = r.u8("schema length")
    error_code = r.u16("error code")
    status_len = r.u16("status vars length") if post_header_len >= 13 else 0
    r.take(max(0, post_header_len - 13), "query post-header")
    status = decode_status_vars(r.take(status_len, "status vars"))
    schema = text(r.cstring(schema_len, "schema"))
    raw = r.rest()
    if header.type_code == c.EventType.QUERY_COMPRESSED_EVENT:
        raw = uncompress_mariadb(raw)
    # The text is in the client's charset, as the server has it; bytes that are not exact in it
    # (a binary literal's, say) are shown as \xNN escapes.
    codec = text_codec(status.charset_client, mariadb) if status.charset_client is not None else None
    query = raw.decode(codec or "utf-8", "backslashreplace")
    return QueryEvent(thread_id, exec_time, error_code, schema, query, status)


def _len_str(r: Reader, what: str) -> str:
    return text(r.take(r.u8(what), what))


def _db_names(r: Reader) -> tuple[str, ...]:
    count = r.u8("updated db count")
    if count == c.OVER_MAX_DBS_IN_EVENT_MTS:
        return ()
    names = []
    for _ in range(count):
        end = r.data.find(b"\0", r.pos, r.end)
        if end < 0:
            raise FormatError("updated db name without NUL terminator")
        names.append(text(r.take(end - r.pos, "updated db name")))
        r.u8("updated db name terminator")
    return tuple(names)


def _catalog(r: Reader) -> str:
    return text(r.cstring(r.u8("catalog length"), "catalog"))


# status code -> (field name, reader); MySQL's and MariaDB's codes that have a fixed layout.
_STATUS_READERS: dict[int, tuple[str, Callable[[Reader], object]]] = {
    c.Q_FLAGS2_CODE: ("flags2", lambda r: r.u32("flags2")),
    c.Q_SQL_MODE_CODE: ("sql_mode", lambda r: r.u64("sql_mode")),
    c.Q_CATALOG_CODE: ("catalog", _catalog),
    c.Q_AUTO_INCREMENT: (
        "auto_increment",
        lambda r: (r.u16("auto_increment_increment"), r.u16("auto_increment_offset")),
    ),
    c.Q_CHARSET_CODE: (
        "charset",
        lambda r: (r.u16("charset client"), r.u16("collation connection"), r.u16("collation server")),
    ),
    c.Q_TIME_ZONE_CODE: ("time_zone", lambda r: _len_str(r, "time zone")),
    c.Q_CATALOG_NZ_CODE: ("catalog", lambda r: _len_str(r, "catalog")),
    c.Q_LC_TIME_NAMES_CODE: ("lc_time_names", lambda r: r.u16("lc_time_names")),
    c.Q_CHARSET_DATABASE_CODE: ("collation_database", lambda r: r.u16("charset database")),
    c.Q_TABLE_MAP_FOR_UPDATE_CODE: ("table_map_for_update", lambda r: r.u64("table map for update")),
    c.Q_MASTER_DATA_WRITTEN_CODE: ("", lambda r: r.u32("master data written")),
    c.Q_INVOKER: ("invoker", lambda r: (_len_str(r, "invoker user"), _len_str(r, "invoker host"))),
    c.Q_UPDATED_DB_NAMES: ("updated_db_names", _db_names),
    c.Q_MICROSECONDS: ("microseconds", lambda r: r.uint(3, "microseconds")),
    c.Q_EXPLICIT_DEFAULTS_FOR_TIMESTAMP: ("explicit_defaults_for_timestamp", lambda r: r.u8("explicit defaults")),
    c.Q_DDL_LOGGED_WITH_XID: ("ddl_xid", lambda r: r.u64("ddl xid")),
    c.Q_DEFAULT_COLLATION_FOR_UTF8MB4: ("default_collation_for_utf8mb4", lambda r: r.u16("default utf8mb4 collation")),
    c.Q_SQL_REQUIRE_PRIMARY_KEY: ("sql_require_primary_key", lambda r: r.u8("sql_require_primary_key")),
    c.Q_DEFAULT_TABLE_ENCRYPTION: ("default_table_encryption", lambda r: r.u8("default_table_encryption")),
    c.Q_HRNOW: ("microseconds", lambda r: r.uint(3, "hrnow")),
    c.Q_XID: ("mariadb_xid", lambda r: r.u64("xid")),
    c.Q_GTID_FLAGS3: ("gtid_flags3", lambda r: r.u8("gtid flags3")),
}


def _status_vars(r: Reader) -> Iterator[tuple[int, int, str, object]]:
    """(code, start of the value, field name, value) of each status variable, up to the first
    unknown code (where `r` is left). Status variables carry no length of their own, so an
    unknown code cannot be skipped."""
    while r.remaining():
        code = r.data[r.pos]
        entry = _STATUS_READERS.get(code)
        if entry is None:
            return
        r.u8("status code")
        start = r.pos
        yield code, start, entry[0], entry[1](r)


def status_spans(raw: bytes) -> list[tuple[int, int, int]]:
    """(code, start, end) of each status variable decode_status_vars reads in `raw` (its value's
    bytes), up to the first unknown code."""
    r = Reader(raw)
    return [(code, start, r.pos) for code, start, _, _ in _status_vars(r)]


def decode_status_vars(raw: bytes) -> QueryStatus:
    """Known status variables; the rest, from the first unknown code, is kept as bytes."""
    r = Reader(raw)
    fields: dict[str, object] = {}
    for _, _, name, value in _status_vars(r):
        if name == "charset":
            assert isinstance(value, tuple)
            fields["charset_client"], fields["collation_connection"], fields["collation_server"] = value
        elif name:
            fields[name] = value
    if r.remaining():
        fields["unparsed"] = r.rest()
    return QueryStatus(**fields)  # type: ignore[arg-type]
