"""On-demand snapshots (`sluice snapshot --tables ...`): requests a running connector picks up.

A request is a row in `snapshot_requests` of the checkpoint database. The connector
polls for requests newer than the last one its saved state has queued, so a request is
taken exactly once even across crashes (the state is saved with the checkpoint).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Protocol

import pymysql

from connector.errors import SluiceError, SnapshotReadError
from connector.snapshot.state import TableName

_TABLE = """
CREATE TABLE IF NOT EXISTS snapshot_requests (
  id BIGINT AUTO_INCREMENT PRIMARY KEY,
  connector VARCHAR(128) NOT NULL,
  tables MEDIUMTEXT NOT NULL,
  requested_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY (connector, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""


class SnapshotRequests(Protocol):
    def add(self, tables: list[TableName]) -> int:
        """Queue a snapshot of `tables`; the request's number."""

    def after(self, request: int) -> list[tuple[int, list[TableName]]]:
        """Requests newer than `request`, oldest first."""


class DatabaseSnapshotRequests:
    def __init__(
        self, connect: Callable[[], pymysql.connections.Connection], connector: str, create: bool = True
    ) -> None:
        """`create`: make the table; read-only callers (`sluice status`) see no request without it."""
        self._connect = connect
        self.connector = connector
        self.exists = create
        if create:
            with self._connect() as conn, conn.cursor() as cur:
                cur.execute(_TABLE)

    def add(self, tables: list[TableName]) -> int:
        with self._connect() as conn, conn.cursor() as cur:
            cur.execute(
                "INSERT INTO snapshot_requests (connector, tables) VALUES (%s, %s)",
                (self.connector, json.dumps([list(t) for t in tables])),
            )
            return int(cur.lastrowid)

    def after(self, request: int) -> list[tuple[int, list[TableName]]]:
        try:
            with self._connect() as conn, conn.cursor() as cur:
                if not self.exists:
                    cur.execute("SHOW TABLES LIKE 'snapshot\\_requests'")
                    if cur.fetchone() is None:
                        return []
                cur.execute(
                    "SELECT id, tables FROM snapshot_requests WHERE connector = %s AND id > %s ORDER BY id",
                    (self.connector, request),
                )
                rows = cur.fetchall()
        except (pymysql.err.MySQLError, SluiceError) as exc:
            raise SnapshotReadError(f"snapshot requests of {self.connector}: {exc}") from exc
        return [(int(i), [(str(d), str(t)) for d, t in json.loads(text)]) for i, text in rows]
