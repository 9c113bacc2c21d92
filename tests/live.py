"""The real MariaDB started by `make services` (deploy/services.sh)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pymysql

from connector.config import Config, parse_config
from connector.replica.client import SourceSettings

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


def source_settings(server_id: int = 6001, heartbeat_s: float = 1.0) -> SourceSettings:
    return SourceSettings(host=HOST, port=PORT, user="root", password="", server_id=server_id, heartbeat_s=heartbeat_s)


def live_config(include: list[str], name: str = "test", server_id: int = 6001, **source: object) -> Config:
    """A connector configuration for the test server, capturing the tables `include` matches."""
    return parse_config(
        {"name": name, "source": {"port": PORT, "server_id": server_id, "heartbeat_s": 1.0, "include": include,
                                  **source},
         "checkpoint": {"db_url": f"mysql://root@{HOST}:{PORT}/sluice_meta"}}
    )  # fmt: skip


def fresh_database(name: str, *tables: str) -> None:
    """Drop and create a database, then its tables (`{db}` in each statement is the name)."""
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name}")
        cur.execute(f"CREATE DATABASE {name}")
        for ddl in tables:
            cur.execute(ddl.format(db=name))
    conn.close()


def wait_until(check: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.5) -> None:
    """Poll `check` until it holds; an AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")
