"""Snapshot chunks from the source: one consistent read each, values rendered as the binlog renders them.

A chunk is read inside `START TRANSACTION WITH CONSISTENT SNAPSHOT`. MariaDB reports the
binlog position of that read view exactly (`Binlog_snapshot_file/position`, see
sql/log.cc), so its window is one point; MySQL has no such status, so the window runs from
the stream's position (everything up to it is committed in the engine before the view
opens) to the binlog position read just after the view opens.

Values come back as the server's text protocol gives them (no pymysql conversion) and are
rendered like `connector/flat.py` renders the same column from a rows event, so a READ
message and an INSERT of the same row carry the same strings (tests/test_snapshot_live.py
checks every column type). The few types whose text differs are selected in their stored
form: MariaDB UUID/INET4/INET6 as their bytes, FLOAT at full precision.
"""

from __future__ import annotations

import contextlib
import logging
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Protocol

import pymysql
import pymysql.converters
import pymysql.cursors

from connector.binlog.charmaps.decoding import REPLACE
from connector.binlog.charsets import UNKNOWN, collation_id_of_charset, text_codec
from connector.binlog.coltypes import float32_text
from connector.errors import SluiceError, SnapshotReadError
from connector.position import Position
from connector.replica.client import SourceSettings, open_connection
from connector.replica.server import is_mariadb, master_position
from connector.schema.model import BINARY_TYPES, GEOMETRY_TYPES, STORED_BINARY_TYPES, Column, Table
from connector.schema.sqltokens import quote_identifier
from connector.snapshot.state import Key, KeyValue

log = logging.getLogger("sluice.snapshot")

Rendered = dict[str, str | None]
Chunk = Iterator[tuple[Rendered, Key]]

# pymysql's encoders for query parameters, without its decoders for result values.
_TEXT_RESULTS = {k: v for k, v in pymysql.converters.conversions.items() if not isinstance(k, int)}
_BOUND: dict[str, Callable[[str | int], object]] = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "bigint", "year", "bit"), int),
    "decimal": lambda v: Decimal(str(v)), "float": float, "double": float,
}


SETTLE_TIMEOUT_S = 10  # how long a chunk waits for the stream's transactions to commit (MySQL)
_ungated_warned: list[bool] = []  # MySQL without GTIDs was reported once (said once per process)


@dataclass(frozen=True, slots=True)
class Window:
    """The binlog positions a read view lies between (one point on MariaDB)."""

    low: Position
    high: Position
    # MySQL: gtid_executed read just before the view opened. Every transaction in it was
    # committed in the engine, so is in the view: when it holds every transaction up to `high`
    # (which the stream tells once it gets there), the view is exactly the binlog up to `high`.
    committed: str = ""

    @property
    def exact(self) -> bool:
        return self.low.sort_key() == self.high.sort_key()


class ChunkSource(Protocol):
    def open(self, after: Position) -> Window:
        """Begin a consistent read that holds every change up to `after` (where the stream is)."""

    def rows(self, table: Table, after: Key | None, limit: int | None) -> Chunk:
        """Inside the open read: rows after the key `after` in key order (every row without a key)."""

    def close(self) -> None:
        """End the read (a no-op when none is open)."""


# -- rendering ----------------------------------------------------------------------------


def _latin1(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def _vector(value: Any) -> str:
    raw = value if isinstance(value, bytes) else str(value).encode("latin-1")
    floats = struct.unpack(f"<{len(raw) // 4}f", raw)
    return "[" + ",".join("%.5e" % x for x in floats) + "]"


_RENDER: dict[str, Callable[[Any], str]] = {
    "float": lambda v: float32_text(float(v)),
    "double": lambda v: repr(float(v)),
    "bit": lambda v: str(int.from_bytes(v, "big")),
    "vector": _vector,
    **dict.fromkeys(BINARY_TYPES | set(STORED_BINARY_TYPES), _latin1),
    **dict.fromkeys(GEOMETRY_TYPES, lambda v: bytes(v).hex()),
}


# Text read as its stored bytes and decoded here as the stream decodes it (the server's own
# table, connector/binlog/charsets.py): the same text for a row read and streamed, and a value
# with no UTF-8 form (a surrogate MariaDB stores in utf8mb4) replaced, not a read that raises
# (pymysql decodes a text result strictly, and the chunk failed at every restart).
_TEXT_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})


def _read_as_bytes(col: Column) -> bool:
    return col.data_type in _TEXT_TYPES and col.charset not in (None, "binary")


def select_expression(col: Column) -> str:
    name = quote_identifier(col.name)
    # MySQL sends VECTOR's float bytes labelled with a text charset (pymysql would decode them
    # as ASCII): its stored bytes, as the binlog carries them.
    if _read_as_bytes(col) or col.data_type == "vector":
        return f"CAST({name} AS BINARY)"
    if col.data_type in STORED_BINARY_TYPES:
        return f"CAST({name} AS BINARY({STORED_BINARY_TYPES[col.data_type]}))"
    if col.data_type == "float":
        return f"CAST({name} AS DOUBLE)"  # the text protocol rounds FLOAT to 6 digits
    return name


def renderer(col: Column, mariadb: bool = False, replaced: Callable[[], None] = lambda: None) -> Renderer:
    """A column's value as the flat message carries it; text decoded by the server's table
    (`mariadb`: which server's), `replaced` called for each value that took U+FFFD."""
    if _read_as_bytes(col):
        return _text(text_codec(collation_id_of_charset(col.charset or "") or 0, mariadb) or UNKNOWN, replaced)
    render = _RENDER.get(col.data_type, _latin1)
    return lambda v: None if v is None else render(v)


Renderer = Callable[[Any], str | None]


def _text(codec: str, replaced: Callable[[], None]) -> Renderer:
    def render(value: Any) -> str | None:
        if value is None:
            return None
        raw = bytes(value)
        try:
            return raw.decode(codec)
        except UnicodeDecodeError:
            replaced()
            return raw.decode(codec, REPLACE)

    return render


# -- keys -------------------------------------------------------------------------------


def key_value(value: Any) -> KeyValue:
    """A primary-key part as the state saves it (JSON): text, or hex for bytes."""
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    return None if value is None else str(value)


def image_key(table: Table, image: dict[str, str | None]) -> Key:
    """The primary key of a rendered row image, as `rows` gives keys (binary parts as hex)."""
    out: list[KeyValue] = []
    for name in table.primary_key:
        value = image.get(name)
        binary = table.columns[table.index_of(name)].data_type in BINARY_TYPES
        out.append(key_value(value.encode("latin-1") if binary and value is not None else value))
    return tuple(out)


def bound(col: Column, value: KeyValue) -> object:
    """A saved key part as a query parameter of the column's own kind (no float comparisons)."""
    if isinstance(value, dict):
        return bytes.fromhex(value["hex"])
    if value is None:
        return None
    convert = _BOUND.get(col.data_type)
    return value if convert is None else convert(value)


def after_clause(keys: list[Column], after: Key) -> tuple[str, list[object]]:
    """`(a, b) > (x, y)` spelled out, which both servers turn into an index range."""
    ors, params = [], []
    for i, col in enumerate(keys):
        parts = [f"{quote_identifier(k.name)} = %s" for k in keys[:i]] + [f"{quote_identifier(col.name)} > %s"]
        ors.append("(" + " AND ".join(parts) + ")")
        params += [bound(k, after[j]) for j, k in enumerate(keys[: i + 1])]
    return " OR ".join(ors), params


def chunk_query(table: Table, after: Key | None, limit: int | None) -> tuple[str, list[object]]:
    keys = [table.columns[table.index_of(k)] for k in table.primary_key]
    columns = [select_expression(c) for c in table.columns] + [quote_identifier(k.name) for k in keys]
    # Identifiers are quoted by _ident; values go as parameters.
    sql = f"SELECT {', '.join(columns)} FROM {quote_identifier(table.database)}.{quote_identifier(table.name)}"  # noqa: S608
    params: list[object] = []
    if after is not None and keys:
        where, params = after_clause(keys, after)
        sql += f" WHERE {where}"
    if keys:
        sql += " ORDER BY " + ", ".join(quote_identifier(k.name) for k in keys)
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql, params


# -- the server ---------------------------------------------------------------------------


class ServerChunks:
    """Chunks read from the source server over one connection of its own."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        self._conn: pymysql.connections.Connection | None = None
        self._open = False
        self._server_id = 0
        self._warned: set[tuple[str, str, str]] = set()
        # A value published with U+FFFD: database, table, column, count (the runner's metric).
        self.on_text_replaced: Callable[[str, str, str, int], None] = lambda database, table, column, count: None

    def _connection(self) -> pymysql.connections.Connection:
        if self._conn is None:
            conn = open_connection(self.settings, conv=_TEXT_RESULTS)
            with conn.cursor() as cur:
                # One read view for the transaction, and TIMESTAMP in UTC as the binlog decoder renders it.
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cur.execute("SET SESSION time_zone = '+00:00'")
                # The server's sql_mode is not the reader's: a key page compares with the key's
                # values as the server printed them, zero dates among them ('2024-00-15', which
                # MySQL's default NO_ZERO_IN_DATE refuses in a WHERE: the read stopped).
                cur.execute("SET SESSION sql_mode = ''")
                cur.execute("SELECT @@server_id")
                row = cur.fetchone()
            self._server_id = int(row[0]) if row else 0
            self._conn = conn
        return self._conn

    def open(self, after: Position) -> Window:
        try:
            conn = self._connection()
            # MariaDB reports the read view's exact position; MySQL needs the window around it.
            mysql = not is_mariadb(conn)
            if mysql:
                self._settle(conn, after)
            committed = ""
            with conn.cursor() as cur:
                if mysql and after.gtid_set:
                    cur.execute("SELECT @@GLOBAL.gtid_executed")
                    committed = str((cur.fetchone() or ("",))[0] or "")
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                self._open = True
                cur.execute("SHOW STATUS LIKE 'binlog\\_snapshot\\_%'")
                status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
            if "binlog_snapshot_file" in status:  # MariaDB, and Percona Server
                exact = self._at(Position(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])))
                return Window(exact, exact)
            if not mysql:
                raise SnapshotReadError(f"{self._where()}: the server reports no binlog_snapshot_file status")
            # The window starts where the stream is, not at the binlog position as the view opens:
            # a transaction logged after `after` may still be uncommitted in the engine when the
            # read view opens (binlog first, engine second), so it is not known to be in the view.
            # With that position as the low end, a window of one point passed for exact, no key the
            # stream changed after `after` was left out, and a READ older than such a change
            # overwrote it (and a keyless table lost it).
            return Window(self._at(after), self._at(master_position(conn)), committed)
        except (pymysql.err.MySQLError, SluiceError) as exc:
            self._lost(exc)
            raise SnapshotReadError(f"{self._where()}: cannot open a consistent read: {exc}") from exc

    def _at(self, position: Position) -> Position:
        """With the server's id, which READ messages carry in `source.server_id` as the binlog's do."""
        return replace(position, server_id=self._server_id)

    def _settle(self, conn: pymysql.connections.Connection, after: Position) -> None:
        """MySQL: wait until every transaction the stream handed on (up to `after`) is committed in
        the engine, so the read view sees them all.

        The binlog is written before the engine commits: a transaction the stream already handed
        on can still be invisible to a read view opened a moment later, and its key then read as
        it was before it (a READ overwriting a newer change). A GTID joins gtid_executed only after
        its engine commit, so waiting for `after`'s GTID set closes that gap. Keys the stream
        changes after `after` are left out of the chunk (coordinator.Snapshotter.saw), and
        transactions logged after the window's high end are not in the read view: exact."""
        if after.gtid_set:
            with conn.cursor() as cur:
                cur.execute("SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s)", (after.gtid_set, SETTLE_TIMEOUT_S))
                row = cur.fetchone()
            if row is None or int(row[0]) != 0:
                raise SnapshotReadError(
                    f"{self._where()}: transactions up to {after} not committed after {SETTLE_TIMEOUT_S} s"
                )
        elif not _ungated_warned:
            _ungated_warned.append(True)
            log.warning(
                "%s runs without GTIDs: the snapshot's read views cannot wait for the stream's last transaction "
                "to commit in the engine, so a row changed in the instant before a chunk is read can be read as it "
                "was before that change; set gtid_mode=ON (with enforce_gtid_consistency) to close it", self._where()
            )  # fmt: skip

    def rows(self, table: Table, after: Key | None, limit: int | None) -> Chunk:
        sql, params = chunk_query(table, after, limit)
        conn = self._connection()
        mariadb = is_mariadb(conn)
        renderers = [renderer(c, mariadb, self._counter(table, c.name)) for c in table.columns]
        names = [c.name for c in table.columns]
        width = len(names)
        try:
            # Unbuffered: a table without a key is one chunk, however large.
            with conn.cursor(pymysql.cursors.SSCursor) as cur:
                cur.execute(sql, params)
                for row in cur:
                    data = {n: r(v) for n, r, v in zip(names, renderers, row)}
                    yield data, tuple(key_value(v) for v in row[width:])
        except pymysql.err.MySQLError as exc:
            self._lost(exc)
            raise SnapshotReadError(f"{self._where()}: reading `{table.database}`.`{table.name}`: {exc}") from exc

    def _counter(self, table: Table, column: str) -> Callable[[], None]:
        """A replaced value of the column: said once (WARN) and counted (on_text_replaced)."""

        def replaced() -> None:
            key = (table.database, table.name, column)
            if key not in self._warned:
                self._warned.add(key)
                log.warning("%s.%s.%s: a text value the snapshot read is not exact in the column's charset: "
                            "published with U+FFFD for each byte no character starts at, and for each character "
                            "with no UTF-8 form; later ones of this column are counted in sluice_text_replaced_total",
                            *key)  # fmt: skip
            self.on_text_replaced(*key, 1)

        return replaced

    def close(self) -> None:
        if self._open and self._conn is not None:
            try:
                self._conn.rollback()
            except pymysql.err.MySQLError as exc:
                self._lost(exc)
        self._open = False

    def _lost(self, exc: Exception) -> None:
        """After an error the connection's state is unknown: start over on a new one."""
        if self._conn is not None:
            with contextlib.suppress(pymysql.err.Error):  # already closed by the failure
                self._conn.close()
        self._conn, self._open = None, False

    def _where(self) -> str:
        return f"snapshot read on {self.settings.host}:{self.settings.port}"
