"""The schema history: every table definition change with the binlog position it took effect.

Records are appended as DDL is seen and never rewritten, so the schema at any position
can be rebuilt: apply, in order, every record at or before it. A record holds the whole
resulting definition (not only the statement), so rebuilding does not depend on the DDL
parser of the version that rebuilds. `MemoryHistoryStore` is the in-memory twin of
`MariadbHistoryStore`, which keeps the history in the checkpoint database.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pymysql

from connector.position import Position
from connector.schema.model import Blocked, Database, Schema, Table


@dataclass(frozen=True, slots=True)
class HistoryRecord:
    position: Position  # where the change takes effect (the end of its event)
    # "snapshot" (captured from the server at the first start), "ddl" (a statement applied),
    # "unreadable" (a statement Sluice could not read: the table is blocked, `definition` holds
    # {"blocked": ...}), "refresh" (re-read from the server after one, [source] unreadable_ddl =
    # "refresh"), "override" (a definition an operator gave: `sluice schema set`), "labels" (ENUM/SET
    # labels a TABLE_MAP gave exactly where SHOW CREATE TABLE printed '?': connector/schema/labels.py),
    # "added" (a database the filter came to capture, read from the server at a start: its tables
    # are read from this position on), "filter" (the table filter a start ran with; `definition`
    # holds it, no table)
    kind: str
    database: str
    table: str  # "" for a database record
    definition: dict[str, Any] | None  # Table/Database as JSON; None: removed
    statement: str = ""

    def apply(self, schema: Schema) -> None:
        if self.kind == "filter":
            return  # the table filter a start ran with (SchemaTracker.record_filter): no definition
        if not self.table:
            if self.definition is None:
                schema.databases.pop(self.database, None)
            else:
                schema.databases[self.database] = Database(**self.definition)
            return
        key = (self.database, self.table)
        schema.blocked.pop(key, None)
        if self.definition is None:
            schema.drop(*key)
        elif self.kind == "unreadable":
            schema.drop(*key)
            schema.blocked[key] = Blocked(**self.definition["blocked"])
        else:
            schema.put(Table.from_json(self.definition))


class HistoryStore(Protocol):
    def append(self, records: Sequence[HistoryRecord]) -> None: ...

    def load(self) -> list[HistoryRecord]: ...


def rebuild(records: Sequence[HistoryRecord], as_of: Position | None) -> Schema:
    """The schema at `as_of` (a transaction end): every record at or before it, in position
    order (records of one position in the order they were written: an operator's definition
    for a blocked table comes after the block, and before any later statement's record)."""
    schema = Schema()
    limit = as_of.sort_key() if as_of is not None else None
    for record in sorted(records, key=lambda r: r.position.sort_key()):
        if limit is None or record.position.sort_key() <= limit:
            record.apply(schema)
    return schema


class MemoryHistoryStore:
    def __init__(self) -> None:
        self.records: list[HistoryRecord] = []

    def append(self, records: Sequence[HistoryRecord]) -> None:
        self.records.extend(records)

    def load(self) -> list[HistoryRecord]:
        return list(self.records)


_DDL = """
CREATE TABLE IF NOT EXISTS schema_history (
  id BIGINT AUTO_INCREMENT PRIMARY KEY,
  connector VARCHAR(128) NOT NULL,
  binlog_file VARCHAR(255) NOT NULL,
  binlog_pos BIGINT NOT NULL,
  gtid_set TEXT NOT NULL,
  server_id BIGINT NOT NULL,
  event_time BIGINT NOT NULL,
  kind VARCHAR(16) NOT NULL,
  db VARCHAR(64) NOT NULL,
  tbl VARCHAR(64) NOT NULL,
  definition LONGTEXT NULL,
  statement LONGTEXT NOT NULL,
  recorded_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY by_connector (connector, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""


class MariadbHistoryStore:
    """The history in a table of the checkpoint database, one row per record."""

    def __init__(self, connect: Callable[[], pymysql.connections.Connection], connector: str) -> None:
        self._connect = connect
        self.connector = connector
        with self._connect() as conn, conn.cursor() as cur:
            cur.execute(_DDL)

    def append(self, records: Sequence[HistoryRecord]) -> None:
        rows = [
            (
                self.connector, r.position.file, r.position.pos, r.position.gtid_set, r.position.server_id,
                r.position.timestamp, r.kind, r.database, r.table,
                None if r.definition is None else json.dumps(r.definition), r.statement,
            )
            for r in records
        ]  # fmt: skip
        if not rows:
            return
        with self._connect() as conn, conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO schema_history (connector, binlog_file, binlog_pos, gtid_set, server_id, event_time,"
                " kind, db, tbl, definition, statement) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                rows,
            )

    def load(self) -> list[HistoryRecord]:
        with self._connect() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT binlog_file, binlog_pos, gtid_set, server_id, event_time, kind, db, tbl, definition, statement"
                " FROM schema_history WHERE connector = %s ORDER BY id",
                (self.connector,),
            )
            rows = cur.fetchall()
        return [
            HistoryRecord(
                Position(str(f), int(p), str(g), int(s), int(t)), str(kind), str(db), str(tbl),
                None if definition is None else json.loads(definition), str(statement),
            )
            for f, p, g, s, t, kind, db, tbl, definition, statement in rows
        ]  # fmt: skip
