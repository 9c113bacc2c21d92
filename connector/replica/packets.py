"""Replication commands and the framing of the binlog stream (pure: bytes in, bytes out).

Layouts follow the MySQL client/server protocol documentation and sql/rpl_*.cc:
COM_REGISTER_SLAVE, COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID, and the stream of packets a
dump sends back, each `00` + one event, `FF` + an error, or `FE` for the end.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from connector.errors import ProtocolError, SequenceRestartError

COM_REGISTER_SLAVE = 0x15
COM_BINLOG_DUMP = 0x12
COM_BINLOG_DUMP_GTID = 0x1E

BINLOG_DUMP_NON_BLOCK = 0x01
BINLOG_SEND_ANNOTATE_ROWS_EVENT = 0x02  # MariaDB: send ANNOTATE_ROWS events
BINLOG_THROUGH_GTID = 0x04

MAX_PACKET = 0xFFFFFF  # a payload this long continues in the next packet


@dataclass(frozen=True, slots=True)
class ServerError:
    code: int
    state: str
    message: str

    def __str__(self) -> str:
        return f"server error {self.code} ({self.state}): {self.message}"


def register_slave(server_id: int, host: str, user: str = "", password: str = "", port: int = 0) -> bytes:
    def short(text: str, what: str) -> bytes:
        raw = text.encode("utf-8")
        if len(raw) > 255:
            raise ProtocolError(f"COM_REGISTER_SLAVE {what} is longer than 255 bytes")
        return bytes([len(raw)]) + raw

    return (
        bytes([COM_REGISTER_SLAVE]) + struct.pack("<I", server_id) + short(host, "host")
        + short(user, "user") + short(password, "password") + struct.pack("<HII", port, 0, 0)
    )  # fmt: skip


def binlog_dump(server_id: int, file: str, pos: int, flags: int = 0) -> bytes:
    if not 4 <= pos <= 0xFFFFFFFF:
        raise ProtocolError(f"COM_BINLOG_DUMP position {pos} is outside 4..2^32-1")
    return bytes([COM_BINLOG_DUMP]) + struct.pack("<IHI", pos, flags, server_id) + file.encode("utf-8")


def binlog_dump_gtid(server_id: int, gtid_set: bytes, file: str = "", pos: int = 4, flags: int = 0) -> bytes:
    name = file.encode("utf-8")
    return (
        bytes([COM_BINLOG_DUMP_GTID]) + struct.pack("<HII", flags | BINLOG_THROUGH_GTID, server_id, len(name))
        + name + struct.pack("<QI", pos, len(gtid_set)) + gtid_set
    )  # fmt: skip


def parse_error(payload: bytes) -> ServerError:
    """An ERR packet: FF, code, `#` and a 5-character SQL state, then the message."""
    if len(payload) < 3 or payload[0] != 0xFF:
        raise ProtocolError(f"not an error packet: {payload[:16].hex()}")
    code = struct.unpack_from("<H", payload, 1)[0]
    rest = payload[3:]
    state = ""
    if rest[:1] == b"#":
        state, rest = rest[1:6].decode("ascii", "replace"), rest[6:]
    return ServerError(code, state, rest.decode("utf-8", "replace"))


def is_eof(payload: bytes) -> bool:
    return payload[:1] == b"\xfe" and len(payload) < 9


class PacketReader:
    """Reads whole payloads from a byte source, joining payloads split at 16 MiB.

    `read(n)` must return exactly n bytes or raise. Sequence numbers must increase by
    one (mod 256) within a command's response; a gap means bytes were lost.
    """

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read = read
        self.sequence = -1

    def reset(self, last_sent: int = 0) -> None:
        self.sequence = last_sent

    def read_payload(self) -> bytes:
        status, rest = self.read_status_and_rest()
        return rest if status < 0 else bytes((status,)) + rest

    def read_status_and_rest(self) -> tuple[int, bytes]:
        """A payload's first byte (-1 for an empty payload) apart from the rest, which is read as
        its own bytes object: a binlog event after the dump's OK byte is never sliced out of a
        copy (a 64 MiB row would be held twice)."""
        length = self._header()
        if length == 0:
            return -1, b""
        status = self._read(1)[0]
        parts = [self._read(length - 1)]
        while length == MAX_PACKET:
            length = self._header()
            parts.append(self._read(length) if length else b"")
        return status, parts[0] if len(parts) == 1 else b"".join(parts)

    def _header(self) -> int:
        header = self._read(4)
        seq = header[3]
        if self.sequence >= 0 and seq != (self.sequence + 1) & 0xFF:
            error = SequenceRestartError if seq == 0 else ProtocolError
            raise error(f"packet sequence {seq} after {self.sequence}: the stream lost bytes")
        self.sequence = seq
        return header[0] | header[1] << 8 | header[2] << 16


def frame(payload: bytes, first_sequence: int = 0) -> bytes:
    """A payload as one or more packets (a payload of exactly k*16 MiB ends with an empty one)."""
    out, seq, offset = [], first_sequence, 0
    while True:
        chunk = payload[offset : offset + MAX_PACKET]
        out.append(struct.pack("<I", len(chunk))[:3] + bytes([seq & 0xFF]) + chunk)
        offset += len(chunk)
        seq += 1
        if len(chunk) < MAX_PACKET:
            return b"".join(out)
