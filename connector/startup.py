"""Starting a connector: where to begin, and the schema that is valid there.

The first start captures the captured tables' definitions together with a binlog
position they are valid at (no DDL may run between the two reads of the position, else
it tries again), and records them as the first entries of the schema history. Later
starts rebuild the schema from the history as of their resume position.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

import pymysql
import pymysql.cursors

from connector.config import Config
from connector.errors import ServerConfigError, SourceError
from connector.filters import TableFilter
from connector.position import Position, position_of_text
from connector.replica.client import SourceSettings, check_server, open_connection
from connector.schema.capture import capture, ddl_between, master_position, read_table
from connector.schema.history import HistoryStore, MariadbHistoryStore
from connector.schema.model import Schema, Table
from connector.schema.tracker import SchemaTracker
from connector.stream import gtid_state_at

log = logging.getLogger("sluice.startup")

CAPTURE_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class Prepared:
    tracker: SchemaTracker
    start: Position
    captured: bool = False  # no history yet: the schema was read from the server (a first start)


# What the checkpoint database's user needs on it: its three tables (checkpoints, schema
# history, snapshot requests) are created at the first start and gain columns in later versions.
CHECKPOINT_GRANTS = "SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER"
_ACCESS_DENIED = frozenset({1044, 1142, 1143, 1227})  # database, table, column, privilege refused


def checkpoint_connector(config: Config) -> Callable[[], pymysql.connections.Connection]:
    """Connections to the checkpoint database, which is created when missing."""
    settings = config.checkpoint_settings()
    database = config.meta_database()
    with open_connection(settings) as conn, conn.cursor() as cur:
        try:
            cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (database,))
            row = cur.fetchone()
            if not row or not row[0]:
                cur.execute(f"CREATE DATABASE `{database}`")
        except pymysql.err.MySQLError as exc:
            if not exc.args or exc.args[0] not in _ACCESS_DENIED:
                raise
            raise ServerConfigError(
                f"checkpoint database {settings.host}:{settings.port}/{database}: {exc.args[1]}; create the "
                f"database, or GRANT {CHECKPOINT_GRANTS} ON `{database}`.* TO the checkpoint user"
            ) from exc
    same_server = (settings.host, settings.port) == (config.source.host, config.source.port)

    def connect() -> pymysql.connections.Connection:
        conn = open_connection(settings, database)
        if same_server:
            _unlogged(conn)
        return conn

    return _refusals_named(connect, f"{settings.host}:{settings.port}/{database}")


def _refusals_named(
    connect: Callable[[], pymysql.connections.Connection], where: str
) -> Callable[[], pymysql.connections.Connection]:
    """Connections whose refused statements (a missing CREATE or ALTER on the checkpoint
    database) say what to GRANT, instead of a driver error deep in a store."""

    class Named(pymysql.cursors.Cursor):
        def execute(self, query: str, args: object = None) -> int:
            try:
                return super().execute(query, args)
            except pymysql.err.MySQLError as exc:
                if exc.args and exc.args[0] in _ACCESS_DENIED:
                    raise ServerConfigError(
                        f"checkpoint database {where}: {exc.args[1]}; GRANT {CHECKPOINT_GRANTS} ON the database "
                        "TO the checkpoint user"
                    ) from exc
                raise

    def named() -> pymysql.connections.Connection:
        conn = connect()
        conn.cursorclass = Named
        return conn

    return named


def _unlogged(conn: pymysql.connections.Connection) -> None:
    """On the source server, keep checkpoint writes out of the binlog: each flush would
    otherwise log a transaction, whose position would be flushed again, forever."""
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
    except pymysql.err.MySQLError as exc:  # lacks the privilege: the loop is slow (one write per flush)
        log.debug("checkpoint writes stay in the binlog: %s", exc)


def prepare(config: Config, store: HistoryStore | None = None, resume: Position | None = None) -> Prepared:
    """The schema tracker and the start position for a connector, from the history or a capture."""
    settings = config.source.settings()
    included = config.table_filter()
    store = store or MariadbHistoryStore(checkpoint_connector(config), config.name)
    refresh = refresher(settings) if config.source.unreadable_ddl == "refresh" else None
    tracker = SchemaTracker(store, included, refresh)
    with open_connection(settings) as conn:
        info = check_server(conn, settings)
        start = resume or configured_start(conn, config.source.start)
        captured = not tracker.restore(start)
        if captured:
            schema, valid_at = consistent_capture(conn, included)
            tracker.seed(schema, valid_at)
            log.info("schema captured at %s: %d tables", valid_at, len(schema.tables))
            if config.source.start == "current" and resume is None:
                start = valid_at
    if start.file and not start.gtid_set:  # the first checkpoint and the snapshot's first chunk need it
        start = replace(start, gtid_set=gtid_state_at(settings, info, start))
    tracker.source = start.file
    return Prepared(tracker, start, captured)


def configured_start(conn: pymysql.connections.Connection, start: str) -> Position:
    if start == "current":
        return master_position(conn)
    if start == "earliest":
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            first = cur.fetchone()
        if first is None:
            raise ServerConfigError("SHOW BINARY LOGS lists no binlog file")
        return Position(str(first[0]), 4)
    return position_of_text(start)


def consistent_capture(conn: pymysql.connections.Connection, included: TableFilter) -> tuple[Schema, Position]:
    """Table definitions and a position they are valid at, without locking tables.

    Read the position, the definitions, the position again; when only row changes were
    logged between the two, the definitions hold at the first position.
    """
    for _ in range(CAPTURE_ATTEMPTS):
        before = master_position(conn)
        schema = capture(conn, included)
        after = master_position(conn)
        statements = ddl_between(conn, before, after) if after != before else []
        if not statements:
            return schema, before
        log.info("DDL ran during the schema capture (%s); capturing again", statements[0][:200])
    raise SourceError(f"DDL kept running during {CAPTURE_ATTEMPTS} schema captures; start again when it settles")


def refresher(settings: SourceSettings) -> Callable[[str, str, Schema], Table | None]:
    def refresh(database: str, table: str, schema: Schema) -> Table | None:
        with open_connection(settings) as conn:
            return read_table(conn, database, table, schema)

    return refresh
