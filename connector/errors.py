"""Typed errors. Every error says where (file, position, event type) and what."""

from __future__ import annotations

import enum


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
        where = f"{file or '<stream>'}@{pos}" if pos >= 0 else file
        what = f" {event_type}" if event_type else ""
        super().__init__(f"{where}{what}: {reason}")


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


# -- the replication protocol, positions -----------------------------------------------


class ProtocolError(SluiceError):
    """The server sent something the replication protocol does not allow here."""


class SequenceRestartError(ProtocolError):
    """A packet numbered 0 mid-response: MariaDB's error packet as it shuts down."""


class PositionError(SluiceError):
    """A position or GTID set that cannot be read."""


# -- Kafka, Avro and the checkpoint stores ---------------------------------------------


class SinkError(SluiceError):
    """Kafka refused a request that retrying will not fix (a topic that cannot be created, a
    message the broker will not take)."""


class StoppedWaitingError(SinkError):
    """The connector was told to stop while it waited for an unreachable Kafka: a stop, not a
    failure (what Kafka confirmed is committed; the rest is sent again by the next start)."""


class TransactionAbortedError(SinkError):
    """Kafka aborted a transaction ([kafka] exactly_once): nothing of it is visible to
    read_committed readers, and the connector starts again from the last committed position."""


class DeliveryError(SluiceError):
    """Kafka gave up on a message: the connector stops, its checkpoint before that transaction."""


class OversizedMessageError(SluiceError):
    """A message over its topic's limit with [kafka] oversized = "fail": the connector stops before it."""


class CheckpointUnavailableError(SluiceError):
    """Neither Redis nor the checkpoint database would take the position."""


class FencedError(SluiceError):
    """A newer leader holds the connector: this instance's writes are refused and it stops."""


class AvroWriteError(SluiceError):
    """A value that its schema does not admit."""


class EncodingError(SluiceError):
    """A value that does not fit its column's Avro type (names the table, column and value)."""


class RegistryError(SluiceError):
    """The schema registry refused a schema (401, 409 incompatible, ...) or could not be reached."""


class UnreadableMessageError(SluiceError):
    """Bytes that are neither single-object encoded nor Confluent framed, or of an unknown schema."""


# -- the snapshot ----------------------------------------------------------------------


class SnapshotReadError(SluiceError):
    """A chunk could not be read (the source went away, the table changed): read it again later."""


class SnapshotStateError(SluiceError):
    """A saved snapshot state that cannot be read."""


class PermissionRefusedError(ServerConfigError):
    """The server refused a statement or a login to the user Sluice runs as: the same on every
    attempt, so fatal, with the GRANT (or the password) that fixes it."""


# -- what a failure means -------------------------------------------------------------


class Disposition(enum.Enum):
    RETRY = "retry"  # the same again after a backoff: a lost connection, a chunk to read later
    PAUSE = "pause"  # hold what was done, stop reading, try again: the checkpoint stores are down
    RESTART = "restart"  # start the connector again, in the process, from its last committed position
    FATAL = "fatal"  # stop with the error's one line: it would fail the same way again


_DISPOSITIONS: tuple[tuple[type[BaseException], Disposition], ...] = (
    (PermissionRefusedError, Disposition.FATAL),
    (SourceUnavailableError, Disposition.RETRY),
    (SnapshotReadError, Disposition.RETRY),
    (CheckpointUnavailableError, Disposition.PAUSE),
    (TransactionAbortedError, Disposition.RESTART),
)


def classify(exc: BaseException) -> Disposition:
    """The one place that decides what a failure means (the stream, the pipeline, the snapshot
    and the runner ask it). Only a lost connection, a snapshot chunk and the checkpoint stores
    are waited out: a purged binlog, a refused privilege, a misconfigured server, a server_id
    conflict, undecodable bytes, a schema mismatch or a message Kafka refused for good would
    fail the same way again, so they stop the connector with their message. Kafka's own
    outages are waited out inside the sink (connector/sink/kafka.py), up to delivery_timeout_s.
    A Kafka transaction aborted by the broker (exactly_once) restarts the connector from Kafka's
    committed position, a few times (connector/runner.py, `Restarts`)."""
    for kind, disposition in _DISPOSITIONS:
        if isinstance(exc, kind):
            return disposition
    return Disposition.FATAL


# MySQL and MariaDB error codes: a refused privilege or login (the user's to fix), and a
# connection that went away (the network's or the server's, waited out).
ACCESS_DENIED = frozenset({1044, 1045, 1142, 1143, 1227, 1370, 1698, 3118})
CONNECTION_LOST = frozenset({1040, 1053, 1152, 1158, 1159, 1160, 1161, 1317, 1927, 2002, 2003, 2006, 2013, 2055})


def server_error(exc: BaseException, where: str, what: str) -> SluiceError:
    """A driver error (pymysql's) as Sluice's: refused privileges are fatal and name the fix,
    a lost connection is retried, anything else is the server's setup."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    message = exc.args[1] if len(exc.args) > 1 else str(exc)
    if code in ACCESS_DENIED:
        fix = "check the user and its password" if code in (1045, 1698) else "GRANT it to the user Sluice runs as"
        return PermissionRefusedError(f"{where}: {what}: {message} (error {code}); {fix}")
    if code in CONNECTION_LOST or not code:
        return SourceUnavailableError(f"{where}: {what}: {message}")
    return ServerConfigError(f"{where}: {what}: {message} (error {code})")
