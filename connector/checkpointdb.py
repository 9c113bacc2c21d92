"""Connections to the checkpoint database: made when missing, kept out of the source's binlog when
it lives on the source server, refusals named with the GRANT that mends them. The schema
history, the checkpoint store and the snapshot requests all connect through it."""

from __future__ import annotations

from collections.abc import Callable

import pymysql
import pymysql.cursors

from connector.config import Config
from connector.errors import ServerConfigError, SourceError
from connector.replica.client import open_connection

# What the checkpoint database's user needs on it: its three tables (checkpoints, schema
# history, snapshot requests) are created at the first start and gain columns in later versions.
CHECKPOINT_GRANTS = "SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER"
_ACCESS_DENIED = frozenset({1044, 1142, 1143, 1227})  # database, table, column, privilege refused


def checkpoint_connector(config: Config, create: bool = True) -> Callable[[], pymysql.connections.Connection]:
    """Connections to the checkpoint database, which is created when missing (`create`: not for
    read-only commands such as `sluice status`).

    When it lives on the source server, its writes are kept out of the binlog the connector
    reads (`SET sql_log_bin = 0`): each one would otherwise be a transaction whose position is
    saved again, for ever (about 200 a second with Redis down). A checkpoint user that may not
    do that on the source server stops the start, naming the GRANT."""
    settings = config.checkpoint_settings()
    database = config.meta_database()
    where = f"checkpoint database {settings.host}:{settings.port}/{database}"
    with open_connection(settings) as conn, conn.cursor() as cur:
        if create:
            _create_database(cur, database, where)
        same_server = _same_server(cur, config)
        if same_server:
            _unlogged(conn, where)
    named = _refusals_named(f"{settings.host}:{settings.port}/{database}")

    def connect() -> pymysql.connections.Connection:
        conn = open_connection(settings, database)
        if same_server:
            _unlogged(conn, where)
        conn.cursorclass = named  # after _unlogged, which names its own GRANT
        return conn

    return connect


def _create_database(cur: pymysql.cursors.Cursor, database: str, where: str) -> None:
    try:
        cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (database,))
        row = cur.fetchone()
        if not row or not row[0]:
            cur.execute(f"CREATE DATABASE `{database}`")
    except pymysql.err.MySQLError as exc:
        if not exc.args or exc.args[0] not in _ACCESS_DENIED:
            raise
        raise ServerConfigError(
            f"{where}: {exc.args[1]}; create the database, or GRANT {CHECKPOINT_GRANTS} ON `{database}`.* TO the "
            "checkpoint user"
        ) from exc


_IDENTITY = "SELECT @@hostname, @@port, @@server_id"


def _same_server(cur: pymysql.cursors.Cursor, config: Config) -> bool:
    """Whether the checkpoint database is the source server itself: the same address in the
    configuration, or the same host name, port and server_id as the source reports."""
    source = config.source
    checkpoint = config.checkpoint_settings()
    if (checkpoint.host, checkpoint.port) == (source.host, source.port):
        return True
    cur.execute(_IDENTITY)
    mine = cur.fetchone()
    try:
        with open_connection(config.source.settings()) as conn, conn.cursor() as src:
            src.execute(_IDENTITY)
            theirs = src.fetchone()
    except SourceError:
        return False  # the source is not reachable now: the stream will say so
    return mine == theirs


def _refusals_named(where: str) -> type[pymysql.cursors.Cursor]:
    """A cursor whose refused statements (a missing CREATE or ALTER on the checkpoint
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

    return Named


# What lets a session keep its writes out of the binlog.
SQL_LOG_BIN_GRANTS = "SESSION_VARIABLES_ADMIN on MySQL 8.0.14+ (SUPER before), BINLOG ADMIN on MariaDB 10.5.2+"


def _unlogged(conn: pymysql.connections.Connection, where: str) -> None:
    """On the source server, keep checkpoint writes out of the binlog it reads."""
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
    except pymysql.err.MySQLError as exc:
        raise ServerConfigError(
            f"{where} is on the source server and its user may not keep checkpoint writes out of the binlog "
            f"(SET sql_log_bin = 0: {exc.args[-1]}); each write would be read and saved again: GRANT "
            f"{SQL_LOG_BIN_GRANTS} ON *.* TO the checkpoint user, or keep the checkpoint database on another server"
        ) from exc
