"""The real MariaDB started by `make services` (deploy/services.sh)."""

from __future__ import annotations

import os
from pathlib import Path

import pymysql

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
PORT = int(os.environ.get("SLUICE_MARIADB_PORT", "3306"))
BINLOG_DIR = Path(os.environ.get("SLUICE_RUN_DIR", ROOT / ".run")) / "mariadb" / "binlog"
SETTINGS = {"host": HOST, "port": PORT, "user": "root", "passwd": ""}


def connect(database: str | None = None) -> pymysql.connections.Connection:
    try:
        return pymysql.connect(
            host=HOST, port=PORT, user="root", password="", database=database, autocommit=True, charset="utf8mb4"
        )
    except pymysql.err.OperationalError as exc:  # a failure, not a skip: `make test` starts it
        raise AssertionError(f"MariaDB is not reachable on {HOST}:{PORT}; run `make services` ({exc})") from exc


def current_binlog(conn: pymysql.connections.Connection) -> tuple[str, int]:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    assert row is not None, "binary logging is off on the test MariaDB"
    return str(row[0]), int(row[1])
