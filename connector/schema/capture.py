"""Reading table definitions from the live server: the first snapshot, and refreshes.

Definitions are read with SHOW CREATE TABLE and parsed by the same DDL parser that
follows the binlog, so a captured table and a replayed one are built the same way.
"""

from __future__ import annotations

import logging
import re

import pymysql

from connector.filters import SYSTEM_DATABASES, TableFilter
from connector.position import Position
from connector.replica.server import is_mariadb, server_version
from connector.schema.ddl import apply_ddl
from connector.schema.labels import InexactLabels, read_exact
from connector.schema.model import Database, Schema, Table
from connector.schema.sqltokens import Session, quote_identifier

log = logging.getLogger("sluice.schema")


def show_hidden_keys(conn: pymysql.connections.Connection) -> None:
    """MySQL 8.0.30+ may hide a generated invisible primary key (`my_row_id`, made when
    sql_generate_invisible_primary_key is on) from SHOW CREATE TABLE, while the binlog carries
    it: ask this session to show it (any user may)."""
    session = server_session(conn)
    if not session.mariadb and session.version >= 80030:
        with conn.cursor() as cur:
            cur.execute("SET SESSION show_gipk_in_create_table_and_information_schema = ON")


def read_table(conn: pymysql.connections.Connection, database: str, table: str, schema: Schema) -> Table | None:
    """The table as the server defines it now, parsed into `schema`; None when it does not exist."""
    show_hidden_keys(conn)
    with conn.cursor() as cur:
        # TIMESTAMP DEFAULTs print in the session's zone; the history keeps them in UTC (schema/zones.py).
        cur.execute("SET SESSION time_zone = '+00:00'")
        try:
            cur.execute(f"SHOW CREATE TABLE {quote_identifier(database)}.{quote_identifier(table)}")
        except pymysql.err.ProgrammingError as exc:
            if exc.args and exc.args[0] in (1146, 1049):  # no such table / database
                return None
            raise
        row = cur.fetchone()
    assert row is not None
    if len(row) > 2:  # a view: SHOW CREATE TABLE answers with View, Create View, ...
        return None
    schema.drop(database, table)
    apply_ddl(schema, str(row[1]), database, server_session(conn))
    read = schema.get(database, table)
    exact = None if read is None else read_exact(conn, read)
    if isinstance(exact, InexactLabels):
        log.warning(exact.warning(_full_row_metadata(conn)))
    elif exact is not None:
        schema.put(exact)
    return schema.get(database, table)


def _full_row_metadata(conn: pymysql.connections.Connection) -> bool:
    """Does the server log ENUM/SET labels in its TABLE_MAPs (binlog_row_metadata=FULL)?"""
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES LIKE 'binlog_row_metadata'")
        row = cur.fetchone()
    return row is not None and str(row[1]).upper() == "FULL"


def server_session(conn: pymysql.connections.Connection) -> Session:
    """How the server's own SHOW CREATE TABLE reads: its flavour and version decide its
    executable comments (MariaDB's `/*M!100301 COMPRESSED*/`) and what JSON is."""
    # MariaDB before 11 says "5.5.5-10.11.19-MariaDB..." in its handshake, for clients of old.
    release = server_version(conn).removeprefix("5.5.5-").split("-")[0]
    numbers = [int(n) for n in re.findall(r"\d+", release)[:3]]
    version = numbers[0] * 10000 + numbers[1] * 100 + numbers[2] if len(numbers) == 3 else 0
    return Session(is_mariadb(conn), version)


def capture(conn: pymysql.connections.Connection, included: TableFilter) -> Schema:
    """Every base table of the databases with a captured one (SchemaTracker.tracks: the filter
    decides what is published, not what is tracked) and every user database's defaults, as the
    server has them now."""
    show_hidden_keys(conn)
    schema = Schema()
    with conn.cursor() as cur:
        cur.execute(
            "SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA"
        )
        for name, charset, collation in cur.fetchall():
            if name not in SYSTEM_DATABASES:
                schema.databases[name] = Database(name, str(charset).lower(), str(collation).lower())
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES"
            " WHERE TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED') ORDER BY TABLE_SCHEMA, TABLE_NAME"
        )
        every = [(str(db), str(t)) for db, t in cur.fetchall()]
    tracked = {db for db, t in every if included(db, t)} | {db for db in schema.databases if included.database(db)}
    for database, table in [(db, t) for db, t in every if db in tracked]:
        read_table(conn, database, table, schema)
    return schema


def ddl_between(conn: pymysql.connections.Connection, start: Position, end: Position) -> list[str]:
    """Statements other than transaction control logged between two positions of one file."""
    if start.file != end.file:
        return ["<binlog rotated>"]
    found = []
    with conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(start.pos)}", (start.file,))
        for _, pos, event_type, _, _, info in cur.fetchall():
            if int(pos) >= end.pos:
                break
            text = str(info).strip()
            if event_type == "Query" and text.upper() not in ("BEGIN", "COMMIT") and not text.startswith("XA "):
                found.append(text)
    return found
