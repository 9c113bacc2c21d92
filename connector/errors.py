"""Typed errors. Every error says where (file, position, event type) and what."""

from __future__ import annotations


class SluiceError(Exception):
    """Base of every error Sluice raises on purpose."""


class FormatError(SluiceError):
    """Bytes that do not follow the binlog format, found by a pure decoder.

    Decoders raise this without context; the parser that called them knows the file,
    position and event type and re-raises as a `BinlogDecodeError`.
    """


class BinlogDecodeError(SluiceError):
    """An event that cannot be decoded, with where it sits and its raw bytes."""

    def __init__(
        self,
        reason: str,
        *,
        file: str = "",
        pos: int = -1,
        event_type: str = "",
        raw: bytes = b"",
    ) -> None:
        self.reason = reason
        self.file = file
        self.pos = pos
        self.event_type = event_type
        self.raw = raw
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"{self.file or '<stream>'}@{self.pos}" if self.pos >= 0 else self.file
        what = f" {self.event_type}" if self.event_type else ""
        return f"{where}{what}: {self.reason}"


class ChecksumMismatchError(BinlogDecodeError):
    """An event whose CRC32 does not match its bytes."""


class TruncatedBinlogError(BinlogDecodeError):
    """The bytes end inside an event."""


class UnknownEventTypeError(BinlogDecodeError):
    """An event type this decoder does not know and the server did not mark ignorable."""


class UnsupportedBinlogError(BinlogDecodeError):
    """A binlog this decoder will not read: an old format version, or encryption."""


class ConfigError(SluiceError):
    """A configuration value that is missing, unknown or out of range; names the key."""


class SourceError(SluiceError):
    """Trouble with the MySQL/MariaDB server Sluice replicates from."""


class SourceUnavailableError(SourceError):
    """The server cannot be reached or the connection dropped: retried with backoff."""


class ServerConfigError(SourceError):
    """The server is not set up for row-based CDC; the message says what to change."""


class BinlogPositionLostError(SourceError):
    """Error 1236: the requested binlog or position is gone from the server (purged)."""


class ServerIdConflictError(SourceError):
    """Another replica is registered with this server_id."""


class SchemaMismatchError(BinlogDecodeError):
    """A TABLE_MAP disagrees with the tracked schema at that position."""


def is_retriable(exc: BaseException) -> bool:
    """The one place that decides: retry (reconnect, back off) or stop.

    Only a lost or refused connection is retried. A purged binlog, a misconfigured
    server, a server-id conflict, undecodable bytes or a schema mismatch would fail the
    same way again, so they stop the connector with their message.
    """
    return isinstance(exc, SourceUnavailableError)
