"""Starting a connector: where to begin, and the schema that is valid there.

The first start captures the captured tables' definitions together with a binlog
position they are valid at (no DDL may run between the two reads of the position, else
it tries again), and records them as the first entries of the schema history. Later
starts rebuild the schema from the history as of their resume position.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

import pymysql
import pymysql.cursors

from connector.checkpointdb import checkpoint_connector
from connector.config import Config
from connector.errors import ConfigError, ServerConfigError, SourceError, SourceUnavailableError
from connector.filters import TableFilter
from connector.position import MariadbGtidState, Position, position_of_text
from connector.replica.client import SourceSettings, check_server, open_connection
from connector.replica.server import is_mariadb, master_position
from connector.schema.capture import capture, ddl_between, read_table
from connector.schema.history import HistoryStore, MariadbHistoryStore
from connector.schema.model import Schema, Table
from connector.schema.tracker import Resolver, SchemaTracker
from connector.schema.zones import ZoneConverter
from connector.stream import gtid_state_at

log = logging.getLogger("sluice.startup")

CAPTURE_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class Prepared:
    tracker: SchemaTracker
    start: Position
    captured: bool = False  # no history yet: the schema was read from the server (a first start)
    # Tables the filter captures since this start (an include widened): read by the snapshot as new.
    added: tuple[tuple[str, str], ...] = ()


def prepare(config: Config, store: HistoryStore | None = None, resume: Position | None = None) -> Prepared:
    """The schema tracker and the start position for a connector, from the history or a capture."""
    settings = config.source.settings()
    included = config.table_filter()
    store = store or MariadbHistoryStore(checkpoint_connector(config), config.name)
    refresh = refresher(settings) if config.source.unreadable_ddl == "refresh" else None
    tracker = SchemaTracker(store, included, refresh)
    tracker.keys = config.source.keys()
    tracker.zones = zone_converter(settings)
    tracker.resolve = resolver(settings)
    with open_connection(settings) as conn:
        info = check_server(conn, settings)
        for (database, table), columns in tracker.keys.items():
            check_key_columns(conn, database, table, columns)
        start = resume or configured_start(conn, config.source.start)
        captured = not tracker.restore(start)
        added: list[tuple[str, str]] = []
        if captured:
            schema, valid_at = consistent_capture(conn, included)
            tracker.seed(schema, valid_at)
            log.info("schema captured at %s: %d tables", valid_at, len(schema.tables))
            if config.source.start == "current" and resume is None:
                start = valid_at
        else:
            added = tracker.newly_captured() + _follow_new_databases(conn, tracker)
        tracker.record_filter(start)
    if added:
        log.info("captured since the last start, read as new tables while the others stream: %s",
                 ", ".join(f"{d}.{t}" for d, t in added))  # fmt: skip
    if start.file and not start.gtid_set:  # the first checkpoint and the snapshot's first chunk need it
        start = replace(start, gtid_set=gtid_state_at(settings, info, start))
    tracker.cursor.file = start.file
    return Prepared(tracker, start, captured, tuple(dict.fromkeys(added)))


def _follow_new_databases(conn: pymysql.connections.Connection, tracker: SchemaTracker) -> list[tuple[str, str]]:
    """Databases with a table the filter captures that the history does not follow (an include
    widened to them): their tables read from the server now, known to the stream from here."""
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES"
                    " WHERE TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED')")  # fmt: skip
        tables = [(str(db), str(t)) for db, t in cur.fetchall()]
    databases = tracker.unfollowed(tables)
    if not databases:
        return []
    schema, valid_at = consistent_capture(conn, TableFilter.of([rf"{re.escape(db)}\..*" for db in databases], None))
    return tracker.add_later(schema, valid_at)


def check_key_columns(
    conn: pymysql.connections.Connection, database: str, table: str, columns: tuple[str, ...]
) -> None:
    """[[source.key_columns]] must identify one row: a UNIQUE index over NOT NULL columns among
    them (its snapshot is read in chunks after the last key, which skips rows of a key that is
    not unique). A table that has a primary key keeps it; one that does not exist yet is checked
    by nothing until it does."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME, NULLABLE FROM information_schema.STATISTICS"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (database, table),
        )  # fmt: skip
        rows = cur.fetchall()
    name = f"`{database}`.`{table}`"
    if not rows:
        log.info("key_columns of %s: no index there (yet); the table is checked when it exists", name)
        return
    indexes: dict[str, list[tuple[int, str, str]]] = {}
    for index, non_unique, column, nullable in rows:
        indexes.setdefault(str(index), []).append((int(non_unique), str(column).lower(), str(nullable)))
    if "PRIMARY" in indexes:
        log.warning("%s has a primary key: its key_columns are not used", name)
        return
    wanted = {c.lower() for c in columns}
    for parts in indexes.values():
        if all(u == 0 and c in wanted and n != "YES" for u, c, n in parts):
            return
    raise ConfigError(
        f"source.key_columns: {name} ({', '.join(columns)}) may not identify one row: no UNIQUE index over NOT NULL "
        f"columns among them; add one (ALTER TABLE {name} ADD UNIQUE KEY (...)) or name the columns it covers"
    )


def missing_on_server(conn: pymysql.connections.Connection, position: Position) -> str | None:
    """Why the server could not stream from `position` (None: it can): a binlog file it no
    longer (or never) had, an offset past its end, a GTID set it has not executed or whose
    successors it purged. `sluice position set` asks before it saves anything."""
    with conn.cursor() as cur:
        if position.gtid_set and not position.file:
            return _gtids_missing(cur, position.gtid_set, is_mariadb(conn))
        cur.execute("SHOW BINARY LOGS")
        sizes = {str(row[0]): int(row[1]) for row in cur.fetchall()}
    if position.file not in sizes:
        have = f"{min(sizes)} .. {max(sizes)}" if sizes else "none"
        return f"the server has no binlog {position.file} (it has {have})"
    if position.pos > sizes[position.file]:
        return f"{position.file} is {sizes[position.file]} bytes long; {position.pos} is past its end"
    return None


def _gtids_missing(cur: pymysql.cursors.Cursor, gtids: str, mariadb: bool) -> str | None:
    if mariadb:
        cur.execute("SELECT @@global.gtid_binlog_pos")
        row = cur.fetchone()
        executed = MariadbGtidState.parse(str(row[0] if row else ""))
        ahead = [str(g) for g in gtids.split(",") if g.strip() and not executed.contains(g.strip())]
        return f"the server's binlog has not reached {', '.join(ahead)} (it is at {executed})" if ahead else None
    cur.execute("SELECT GTID_SUBSET(%s, @@global.gtid_executed), GTID_SUBSET(@@global.gtid_purged, %s)",
                (gtids, gtids))  # fmt: skip
    row = cur.fetchone()
    if row is None or not int(row[0]):
        return f"the server has not executed all of {gtids}"
    if not int(row[1]):
        return f"the server purged binlogs of transactions after {gtids} (gtid_purged is not within it)"
    return None


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


def zone_converter(settings: SourceSettings) -> ZoneConverter:
    """A TIMESTAMP literal in a named or SYSTEM time zone as the server converts it to UTC
    (connector/schema/zones.py); None, and a warning, when the server cannot be asked."""

    @functools.lru_cache(maxsize=256)
    def convert(literal: str, zone: str) -> str | None:
        try:
            with open_connection(settings) as conn, conn.cursor() as cur:
                cur.execute("SELECT CAST(CONVERT_TZ(%s, %s, '+00:00') AS CHAR)", (literal, zone))
                row = cur.fetchone()
        except (SourceUnavailableError, pymysql.err.MySQLError) as exc:
            log.warning("could not ask the server for %r in time zone %r (%s): read without it", literal, zone, exc)
            return None
        return None if row is None or row[0] is None else str(row[0])

    return convert


def resolver(settings: SourceSettings) -> Resolver:
    """SchemaTracker.resolve: a table read from the server when no statement logged since `at`
    names it (its definition now is the one it had there); None when one might have changed it."""

    def resolve(database: str, table: str, at: Position, schema: Schema) -> Table | None:
        with open_connection(settings) as conn:
            later = ddl_between(conn, at, master_position(conn))
            if any(_names(statement, table) for statement in later):
                return None
            return read_table(conn, database, table, schema)

    return resolve


def _names(statement: str, table: str) -> bool:
    """Might the statement be about a table of that name? (ddl_between's "<binlog rotated>": yes)"""
    found = re.search(rf"(?<![\w$]){re.escape(table)}(?![\w$])", statement, re.IGNORECASE)
    return found is not None or statement == "<binlog rotated>"


def refresher(settings: SourceSettings) -> Callable[[str, str, Schema], Table | None]:
    def refresh(database: str, table: str, schema: Schema) -> Table | None:
        with open_connection(settings) as conn:
            return read_table(conn, database, table, schema)

    return refresh
