"""What a server says of itself: its flavour and version, and its binlog position now."""

from __future__ import annotations

import re

import pymysql

from connector.errors import SourceError
from connector.position import Position


def server_version(conn: pymysql.connections.Connection) -> str:
    return str(conn.get_server_info())  # type: ignore[no-untyped-call]  # untyped in types-PyMySQL


def is_mariadb(conn: pymysql.connections.Connection) -> bool:
    return "mariadb" in server_version(conn).lower()


def binlog_status_statement(conn: pymysql.connections.Connection) -> str:
    """MySQL 8.2 added SHOW BINARY LOG STATUS and 8.4 removed SHOW MASTER STATUS; MariaDB keeps the old name."""
    if is_mariadb(conn):
        return "SHOW MASTER STATUS"
    version = tuple(int(p) for p in re.findall(r"\d+", server_version(conn))[:2])
    return "SHOW BINARY LOG STATUS" if version >= (8, 2) else "SHOW MASTER STATUS"


def master_position(conn: pymysql.connections.Connection) -> Position:
    """The server's current binlog position. (Not MySQL's Executed_Gtid_Set beside it: that is read
    before the position, not with it, and can miss transactions still committing; the stream
    computes the GTID state of a position from the binlog itself.)"""
    statement = binlog_status_statement(conn)
    with conn.cursor() as cur:
        cur.execute(statement)
        row = cur.fetchone()
    if row is None:
        raise SourceError(f"{statement} returned nothing: binary logging is off")
    return Position(str(row[0]), int(row[1]))
