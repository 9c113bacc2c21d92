"""The replica connection: checks the server, registers, and streams raw binlog events.

Authentication (mysql_native_password, caching_sha2_password, TLS) is pymysql's. After
the handshake the connection is used at the packet level: this module sends the
replication commands and reads the dump stream with `PacketReader`, so framing, the
16 MiB continuation and sequence numbers are checked here, not assumed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pymysql

from connector.clock import SYSTEM_CLOCK, Clock
from connector.errors import (
    BinlogPositionLostError,
    ProtocolError,
    SequenceRestartError,
    ServerConfigError,
    ServerIdConflictError,
    SourceError,
    SourceUnavailableError,
    server_error,
)
from connector.position import MysqlGtidSet, Position
from connector.replica import packets
from connector.replica.packets import PacketReader
from connector.replica.server import master_position

log = logging.getLogger("sluice.replica")

ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
ER_SPECIFIC_ACCESS_DENIED = 1227
ZOMBIE_GRACE_HEARTBEATS = 3
_unlisted_warned: list[bool] = []  # the replica list was refused once already (said once per process)
# MariaDB's capability level that makes it send GTID and ANNOTATE_ROWS events as they are.
MARIA_SLAVE_CAPABILITY_MINE = 4
# The dump's read buffer (DumpBuffer): the compiled kernel handles the packets inside it in place.
# It grows for one longer packet (a compressed transaction's TRANSACTION_PAYLOAD holds the whole
# transaction: a 20,000-row UPDATE is 2 MiB of it) and shrinks back once that packet is read.
_STREAM_BUFFER = 1 << 20
# How this process registers (SHOW SLAVE HOSTS shows it): one name per process, so a
# reconnect recognises its own earlier registration and any other holder is a conflict.
REPORT_HOST = f"sluice-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"[:60]


@dataclass(frozen=True, slots=True)
class SourceSettings:
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    server_id: int = 54321
    ssl_ca: str | None = None
    ssl_cert: str | None = None
    ssl_key: str | None = None
    heartbeat_s: float = 5.0
    connect_timeout_s: float = 10.0
    use_gtid: bool = False  # resume by GTID instead of file and position
    # An HA leader (it holds the lease) takes over the server_id from an older Sluice
    # instance of the same connector (the server drops the older dump); foreign replicas still conflict.
    takeover: bool = False


@dataclass(frozen=True, slots=True)
class ServerInfo:
    version: str
    mariadb: bool
    server_id: int
    checksum: bool  # events carry a CRC32
    row_metadata: str  # FULL / MINIMAL / "" when the server has no such setting
    gtid_mode: bool

    @property
    def release(self) -> tuple[int, ...]:
        """The version's numbers: (9, 7, 4) for "9.7.4-2", (10, 11, 6) for "10.11.6-MariaDB"."""
        return tuple(int(n) for n in re.findall(r"\d+", self.version.split("-")[0])[:3])


def open_connection(
    settings: SourceSettings, database: str | None = None, conv: dict[Any, Any] | None = None
) -> pymysql.connections.Connection:
    """An authenticated connection, or SourceUnavailableError saying where it failed.

    `conv` replaces pymysql's value converters (the snapshot reads values as the server's text)."""
    ssl: dict[str, Any] | None = None
    if settings.ssl_ca or settings.ssl_cert:
        ssl = {k: v for k, v in (("ca", settings.ssl_ca), ("cert", settings.ssl_cert), ("key", settings.ssl_key)) if v}
    try:
        return pymysql.connect(
            host=settings.host, port=settings.port, user=settings.user, password=settings.password,
            database=database, ssl=ssl, connect_timeout=settings.connect_timeout_s, autocommit=True,
            charset="utf8mb4", conv=conv,
            # No CA or certificate configured: plain TCP, as documented. PyMySQL 1.2 would
            # otherwise negotiate unverified TLS on its own: no protection against an impostor,
            # ~70 ms per connection and a decryption of the whole binlog stream.
            ssl_disabled=ssl is None,
        )  # fmt: skip
    except pymysql.err.MySQLError as exc:  # a refused login is fatal, naming it; a lost server is retried
        raise server_error(exc, f"cannot connect to {settings.host}:{settings.port}", "login") from exc


def _variables(conn: pymysql.connections.Connection, names: list[str]) -> dict[str, str]:
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN (" + ",".join(["%s"] * len(names)) + ")", names)
        return {str(k).lower(): str(v) for k, v in cur.fetchall()}


def check_server(conn: pymysql.connections.Connection, settings: SourceSettings) -> ServerInfo:
    """Fail early, naming the setting to change, when the server cannot feed row-based CDC."""
    v = _variables(
        conn,
        ["version", "log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata", "server_id",
         "binlog_checksum", "gtid_mode", "gtid_strict_mode"],
    )  # fmt: skip
    problems = []
    if v.get("log_bin", "OFF").upper() != "ON":
        problems.append("binary logging is off: start the server with --log-bin")
    if v.get("binlog_format", "").upper() != "ROW":
        problems.append(f"binlog_format is {v.get('binlog_format')}: SET GLOBAL binlog_format = 'ROW'")
    if v.get("binlog_row_image", "").upper() != "FULL":
        problems.append(
            f"binlog_row_image is {v.get('binlog_row_image')}: SET GLOBAL binlog_row_image = 'FULL' "
            "(updates would lack unchanged columns)"
        )
    if int(v.get("server_id", "0")) == settings.server_id:
        problems.append(f"server_id {settings.server_id} is the source's own: configure another [source] server_id")
    problems += _privilege_problems(conn)
    if problems:
        raise ServerConfigError(f"{settings.host}:{settings.port} is not ready for CDC: " + "; ".join(problems))
    version = v.get("version", "")
    return ServerInfo(
        version=version,
        mariadb="mariadb" in version.lower(),
        server_id=int(v.get("server_id", "0")),
        checksum=v.get("binlog_checksum", "NONE").upper() == "CRC32",
        row_metadata=v.get("binlog_row_metadata", "").upper(),
        gtid_mode=v.get("gtid_mode", "").upper() == "ON" or "mariadb" in version.lower(),
    )


_NEEDED = {
    "REPLICATION SLAVE": ("REPLICATION SLAVE", "REPLICATION REPLICA"),
    "REPLICATION CLIENT": ("REPLICATION CLIENT", "BINLOG MONITOR"),  # MariaDB 10.5 renamed it
    "SELECT": ("SELECT",),
}


def _privilege_problems(conn: pymysql.connections.Connection) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW GRANTS FOR CURRENT_USER()")
        grants = [str(row[0]).upper() for row in cur.fetchall()]
    global_privs = " ".join(
        m[1] for g in grants if (m := re.match(r"GRANT (.*?) ON \*\.\* TO", g)) is not None
    )  # fmt: skip
    if "ALL PRIVILEGES" in global_privs:
        return []
    missing = [name for name, aliases in _NEEDED.items() if not any(a in global_privs for a in aliases)]
    if "SELECT" in missing and any(re.match(r"GRANT .*\bSELECT\b.* ON `", g) for g in grants):
        missing.remove("SELECT")  # SELECT on the captured databases is enough
    if not missing:
        return []
    return [f"the user lacks {', '.join(missing)}: GRANT {', '.join(missing)} ON *.* TO the connector's user"]


class DumpBuffer:
    """The dump's bytes, read from the socket in large chunks into one buffer, which the compiled
    kernel reads in place (`window`, `advance`, `fill`) and PacketReader reads from (`read`).

    The buffer grows to hold a whole packet of up to MAX_PACKET bytes when the kernel waits for
    one (`fill`); a payload longer than the buffer that PacketReader reads is read into bytes of
    its own, never through it."""

    def __init__(self, sock: socket.socket, where: Callable[[], str], size: int = _STREAM_BUFFER) -> None:
        self._sock = sock
        self._where = where
        self._size = size  # what the buffer shrinks back to
        self.data = bytearray(size)
        self._view = memoryview(self.data)
        self.start = self.end = 0  # the unread bytes: data[start:end]

    def advance(self, n: int) -> None:
        assert 0 <= n <= self.end - self.start
        self.start += n

    def fill(self) -> bool:
        """Read what the socket has (waiting for some); False when the packet at `start` is one that
        continues in the next (MAX_PACKET long), which the kernel never takes whole. The buffer grows
        to hold the packet at `start`, and shrinks back once what is unread fits the usual size."""
        unread, need = self.end - self.start, self._size
        if unread >= 4:
            length = int.from_bytes(self._view[self.start : self.start + 3], "little")
            if length == packets.MAX_PACKET:
                return False
            need = max(need, length + 4)
        if need > len(self.data) or (len(self.data) > need == self._size >= unread):
            self._resize(need)
        self._recv()
        return True

    def read(self, n: int) -> bytes:
        """Exactly n bytes (PacketReader's source)."""
        if n > len(self.data):
            return self._read_long(n)
        while self.end - self.start < n:
            self._recv()
        out = bytes(self._view[self.start : self.start + n])
        self.start += n
        return out

    def _recv(self) -> None:
        if self.start:  # what is unread moves to the front: the socket's bytes go after it
            unread = self.end - self.start
            self._view[:unread] = self._view[self.start : self.end]
            self.start, self.end = 0, unread
        got = self._sock.recv_into(self._view[self.end :])  # OSError (a timeout too) goes to the caller
        if not got:
            raise SourceUnavailableError(f"{self._where()}: the server closed the connection mid-packet")
        self.end += got

    def _resize(self, size: int) -> None:
        """A buffer of `size` bytes holding the unread ones at its front."""
        unread = self.end - self.start
        data = bytearray(size)
        data[:unread] = self._view[self.start : self.end]
        self._view.release()
        self.data, self._view = data, memoryview(data)
        self.start, self.end = 0, unread

    def _read_long(self, n: int) -> bytes:
        out = bytearray(n)
        have = self.end - self.start
        out[:have] = self._view[self.start : self.end]
        self.start = self.end = 0
        view = memoryview(out)
        while have < n:
            got = self._sock.recv_into(view[have:])
            if not got:
                raise SourceUnavailableError(f"{self._where()}: the server closed the connection mid-packet")
            have += got
        del view
        return bytes(out)


class DumpStream:
    """A dump's packets after the command that started it: each event's bytes for the Python path
    (`events`), and the buffer they are read through for the compiled kernel (connector/lane.py),
    which takes whole packets from it in place (`buffer`, `took`, `fill`)."""

    def __init__(
        self, sock: socket.socket, where: Callable[[], str], server_error: Callable[[packets.ServerError], Exception],
        buffer_size: int = _STREAM_BUFFER,
    ) -> None:  # fmt: skip
        self.buffer = DumpBuffer(sock, where, buffer_size)
        self.reader = PacketReader(self.buffer.read)
        self.reader.reset(0)
        self._where = where
        self._server_error = server_error

    @property
    def sequence(self) -> int:
        """The last packet's sequence number."""
        return self.reader.sequence

    def took(self, consumed: int, sequence: int) -> None:
        """The kernel handled `consumed` bytes of packets, the last numbered `sequence`."""
        self.buffer.advance(consumed)
        self.reader.sequence = sequence

    def fill(self) -> bool:
        """More of the dump in the buffer (waiting for it); False when the next packet is longer than
        the buffer could ever hold: the Python path reads it, into its own bytes."""
        try:
            return self.buffer.fill()
        except (TimeoutError, OSError) as exc:
            raise SourceUnavailableError(f"{self._where()}: no event or heartbeat in time ({exc})") from exc

    def events(self) -> Iterator[bytes]:
        """Raw event bytes until the server ends a non-blocking dump; errors are typed."""
        read = self.reader.read_status_and_rest
        while True:
            try:
                status, rest = read()
            except SequenceRestartError as exc:  # MariaDB's shutdown error arrives with sequence 0
                raise SourceUnavailableError(f"{self._where()}: the server closed the stream") from exc
            except (TimeoutError, OSError) as exc:
                raise SourceUnavailableError(f"{self._where()}: no event or heartbeat in time ({exc})") from exc
            if status == 0:
                # The event, read as its own bytes; this suspended frame keeps no reference to
                # it (a local would keep a 64 MiB row alive twice while the caller works on it).
                box = [rest]
                del rest
                yield box.pop()
                continue
            payload = rest if status < 0 else bytes((status,)) + rest
            if payload[:1] == b"\xff":
                raise self._server_error(packets.parse_error(payload))
            if packets.is_eof(payload):
                return
            raise ProtocolError(f"unexpected packet in the binlog stream: {payload[:16].hex()}")


class BinlogDump:
    """One dump session: registered, negotiated, and streaming event bytes from a start."""

    def __init__(
        self, settings: SourceSettings, start: Position, blocking: bool = True, asked: Position | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.clock = clock  # the wait for a dead process's registration to go
        self.start = start
        self.asked = asked or start  # the position the caller resumes from (messages name it)
        self.blocking = blocking
        self.report_host = REPORT_HOST
        self.conn: pymysql.connections.Connection | None = None
        self.info: ServerInfo | None = None
        self._reader: PacketReader | None = None
        self._stream: DumpStream | None = None  # the dump's packets, read in large chunks

    def open(self, register: bool = True) -> ServerInfo:
        """Check, negotiate, register and dump. `register=False`: a reader of a past stretch of
        the binlog, as mysqlbinlog reads it (server_id 0, not a replica, so no server_id can
        conflict or end the connector's own dump); only with a non-blocking dump."""
        assert register or not self.blocking
        conn = self.conn = open_connection(self.settings)
        try:
            info = self.info = check_server(conn, self.settings)
            if register:
                self._check_server_id(conn, info)
            self._negotiate(conn, info)
            if register:
                self._command(packets.register_slave(self.settings.server_id, self.report_host, port=0))
                self._expect_ok("COM_REGISTER_SLAVE")
            self._command(self._dump_command(info, self.settings.server_id if register else 0))
            self._stream_from_here()
        except pymysql.err.MySQLError as exc:  # e.g. a statement the user may not run: its GRANT, fatal
            self.close()
            raise server_error(exc, self._where(), "starting the binlog dump") from exc
        except BaseException:
            self.close()
            raise
        return info

    def _where(self) -> str:
        return f"{self.settings.host}:{self.settings.port}"

    def _check_server_id(self, conn: pymysql.connections.Connection, info: ServerInfo) -> None:
        """A second replica with our server_id would make the server drop one of us, over and over.

        A Sluice process that died a moment ago (SIGKILL, OOM) is still registered until the
        server's next write to its dump fails (a heartbeat at most later); a restart must not
        take that for a conflict, or it crash-loops: such a registration is given
        `ZOMBIE_GRACE_HEARTBEATS` heartbeats to go away (a new dump with the same server_id
        would end it anyway). Any other replica is a conflict at once."""
        deadline = self.clock.now() + ZOMBIE_GRACE_HEARTBEATS * max(self.settings.heartbeat_s, 1.0) + 2.0
        while True:
            conflicts = [(host, port) for server_id, host, port in self._replicas(conn, info)
                         if server_id == self.settings.server_id and host != self.report_host
                         and not (host.startswith("sluice-") and self.settings.takeover)]  # fmt: skip
            if not conflicts:
                return
            host, port = conflicts[0]
            if not all(h.startswith("sluice-") for h, _ in conflicts) or self.clock.now() > deadline:
                raise ServerIdConflictError(
                    f"{self._where()}: server_id {self.settings.server_id} is already used by the replica at "
                    f"{host}:{port}; give this connector a unique [source] server_id"
                )
            log.info("server_id %d is still registered by %s (an earlier Sluice process?); waiting for the "
                     "server to drop it", self.settings.server_id, host)  # fmt: skip
            self.clock.sleep(0.5)

    def _replicas(self, conn: pymysql.connections.Connection, info: ServerInfo) -> list[tuple[int, str, str]]:
        """(server_id, host, port) of the registered replicas; [] when the user may not list them.

        MySQL 8.4 removed SHOW SLAVE HOSTS (SHOW REPLICAS since 8.0.22, needing REPLICATION
        SLAVE); MariaDB asks REPLICATION MASTER ADMIN for either name, which the connector's
        documented grants do not include: then the check is skipped, once said."""
        statement = "SHOW SLAVE HOSTS" if info.mariadb or info.release < (8, 0, 22) else "SHOW REPLICAS"
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                return [(int(r[0]), str(r[1]), str(r[2])) for r in cur.fetchall()]
        except pymysql.err.OperationalError as exc:
            if not exc.args or exc.args[0] != ER_SPECIFIC_ACCESS_DENIED:
                raise
        if not _unlisted_warned:
            _unlisted_warned.append(True)
            log.warning(
                "%s: %s is refused to %s (%s), so a second replica with server_id %d cannot be detected before "
                "streaming; grant it to have it checked", self._where(), statement, self.settings.user,
                "REPLICATION MASTER ADMIN" if info.mariadb else "REPLICATION SLAVE", self.settings.server_id,
            )  # fmt: skip
        return []

    def _negotiate(self, conn: pymysql.connections.Connection, info: ServerInfo) -> None:
        statements = ["SET @master_binlog_checksum = @@global.binlog_checksum"]
        statements.append(f"SET @master_heartbeat_period = {int(self.settings.heartbeat_s * 1e9)}")
        if info.mariadb:
            statements.append(f"SET @mariadb_slave_capability = {MARIA_SLAVE_CAPABILITY_MINE}")
            if self._by_gtid():
                statements += [
                    "SET @slave_connect_state = %s",
                    "SET @slave_gtid_strict_mode = 1",
                    "SET @slave_gtid_ignore_duplicates = 0",
                ]
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement, (self.start.gtid_set,) if "%s" in statement else None)

    def _dump_command(self, info: ServerInfo, sid: int) -> bytes:
        flags = 0 if self.blocking else packets.BINLOG_DUMP_NON_BLOCK
        if info.mariadb:
            flags |= packets.BINLOG_SEND_ANNOTATE_ROWS_EVENT
            if self._by_gtid():
                return packets.binlog_dump(sid, "", 4, flags)  # the start is @slave_connect_state
        elif self._by_gtid():
            return packets.binlog_dump_gtid(sid, MysqlGtidSet.parse(self.start.gtid_set).encode(), flags=flags)
        return packets.binlog_dump(sid, self.start.file, self.start.pos, flags)

    # -- packets -----------------------------------------------------------------------

    def _command(self, payload: bytes) -> None:
        assert self.conn is not None
        self.conn._write_bytes(packets.frame(payload))  # type: ignore[attr-defined]  # no public raw write
        self._reader = PacketReader(self._read_bytes)
        self._reader.reset(0)

    def _read_bytes(self, n: int) -> bytes:
        assert self.conn is not None
        data: bytes = self.conn._read_bytes(n)  # type: ignore[attr-defined]
        return data

    def _stream_from_here(self) -> None:
        """Read the dump through a DumpStream, not pymysql's 8 KiB buffer: a recv per event (rows
        events are 8 KiB) cost more than decoding some of them. pymysql's buffer is empty here:
        the server sent nothing after the last reply it read."""
        assert self.conn is not None
        sock = self.conn._sock  # type: ignore[attr-defined]
        if self.settings.heartbeat_s > 0:  # a quiet server still sends a heartbeat every heartbeat_s
            sock.settimeout(max(2 * self.settings.heartbeat_s, 5))
        self._stream = DumpStream(sock, self._where, lambda error: self._server_error(error, "binlog dump"))
        self._reader = self._stream.reader

    @property
    def stream(self) -> DumpStream:
        """The dump's packets (after open)."""
        assert self._stream is not None
        return self._stream

    def _expect_ok(self, what: str) -> None:
        payload = self._payload()
        if payload[:1] == b"\xff":
            raise self._server_error(packets.parse_error(payload), what)
        if payload[:1] != b"\x00":
            raise ProtocolError(f"{what}: expected OK, got {payload[:16].hex()}")

    def _payload(self) -> bytes:
        assert self._reader is not None
        try:
            return self._reader.read_payload()
        except (pymysql.err.OperationalError, SequenceRestartError) as exc:
            raise self._lost(exc) from exc

    def _lost(self, exc: pymysql.err.OperationalError | SequenceRestartError) -> SourceUnavailableError:
        """What a failed packet read means for the stream."""
        if isinstance(exc, SequenceRestartError):  # MariaDB's shutdown error arrives with sequence 0
            return SourceUnavailableError(f"{self._where()}: the server closed the stream")
        return SourceUnavailableError(f"{self._where()}: connection lost while streaming: {exc}")

    def events(self) -> Iterator[bytes]:
        """Raw event bytes until the server ends a non-blocking dump; errors are typed."""
        return self.stream.events()

    def _server_error(self, error: packets.ServerError, what: str) -> SourceError:
        if error.code == ER_MASTER_FATAL_ERROR_READING_BINLOG:
            if "same server_uuid/server_id" in error.message or "same server_id" in error.message:
                return ServerIdConflictError(f"{self._where()}: {error.message}")
            return BinlogPositionLostError(self._lost_position_message(error))
        if error.code in (1927, 1053, 1317):  # connection killed, server shutdown, query interrupted
            return SourceUnavailableError(f"{self._where()}: {what}: {error}")
        return ServerConfigError(f"{self._where()}: {what}: {error}")

    def _lost_position_message(self, error: packets.ServerError) -> str:
        oldest = current = "unknown"
        try:
            conn = open_connection(self.settings)
            with conn.cursor() as cur:
                cur.execute("SHOW BINARY LOGS")
                logs = cur.fetchall()
            position = master_position(conn)
            conn.close()
            oldest = f"{logs[0][0]}:4" if logs else "none"
            current = f"{position.file}:{position.pos}"
        except (SourceError, pymysql.err.MySQLError):
            pass
        asked = (f"{self.asked.file}:{self.asked.pos}" if self.asked.file and not self._by_gtid()
                 else f"GTID set {self.asked.gtid_set}")  # fmt: skip
        return (
            f"{self._where()} cannot send binlog from {asked} (error 1236: {error.message}). "
            f"The server's oldest binlog is {oldest}, its current position {current}. Rows between are lost "
            "to the binlog. Choose: `sluice position reset`, then start from the earliest binlog "
            '([source] start = "earliest") or from the current position ([source] start = "current"), '
            "and re-snapshot the tables (`sluice snapshot`); Sluice never skips ahead on its own."
        )

    def _by_gtid(self) -> bool:
        return self.settings.use_gtid and bool(self.start.gtid_set)

    def close(self) -> None:
        self._stream = None
        if self.conn is not None:
            with contextlib.suppress(pymysql.err.Error, OSError):  # already gone: closing is best effort
                self.conn.close()
            self.conn = None
