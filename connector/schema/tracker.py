"""The schema at the stream's position: DDL applied as it passes, TABLE_MAPs checked against it.

Names and keys of every captured table come from here, not from the live server, so
replaying events from before an ALTER gives the names those rows had. When a statement
cannot be parsed, the stream does not stop: the statement is logged with its position,
and the tables it names that Sluice captures are re-read from the server and recorded.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import replace

from connector.binlog.tablemap import TableMapEvent
from connector.errors import SchemaMismatchError
from connector.filters import TableFilter
from connector.flat import mysql_type
from connector.position import Position
from connector.schema.binlogmatch import disagreements, named
from connector.schema.ddl import DdlChange, UntrackedTableError, apply_ddl
from connector.schema.history import HistoryRecord, HistoryStore, rebuild
from connector.schema.model import Schema, Table
from connector.schema.sqltokens import DdlSyntaxError

log = logging.getLogger("sluice.schema")

# Reads one table from the server into the given schema (None: it does not exist).
Refresher = Callable[[str, str, Schema], Table | None]

# Names after TABLE/TABLES/INTO/LIKE/TO/ON: a rough net for statements the parser could not read.
_NAMES = re.compile(r"(?:`((?:[^`]|``)+)`|(\w+))(?:\s*\.\s*(?:`((?:[^`]|``)+)`|(\w+)))?")


class SchemaTracker:
    def __init__(
        self, store: HistoryStore, included: TableFilter, refresh: Refresher | None = None, source: str = ""
    ) -> None:
        self.store = store
        self.included = included
        self.refresh = refresh
        self.schema = Schema()
        self.seeded_at: Position | None = None
        self.source = source  # the current binlog file, for error messages
        self._named: dict[bytes, tuple[Table, TableMapEvent]] = {}
        # (position, database, table) of every record in the store: a replay after a restart
        # passes the same DDL again and must not record it twice.
        self._recorded: set[tuple[tuple[str, int, int], str, str]] = set()
        self._from_binlog: dict[bytes, Table] = {}
        # definition()'s answers by TABLE_MAP object, while the tracked table is the same object
        # (a DDL makes a new one): every rows event asks, so no column-name tuples per event.
        self._defined: dict[int, tuple[TableMapEvent, Table | None, Table]] = {}
        # [[source.key_columns]]: the key of tables without a primary key, by (database, table).
        self.keys: dict[tuple[str, str], tuple[str, ...]] = {}
        self._keyed: dict[int, tuple[Table, Table]] = {}

    # -- start ---------------------------------------------------------------------------

    def restore(self, as_of: Position) -> bool:
        """Rebuild the schema at `as_of` from the history; False when there is none yet."""
        records = self.store.load()
        if not records:
            return False
        self.schema = rebuild(records, as_of if as_of.file else None)  # a GTID start: the latest
        self._recorded = {(r.position.sort_key(), r.database, r.table) for r in records}
        self.seeded_at = min((r.position for r in records if r.kind == "snapshot"), key=Position.sort_key, default=None)
        self._named.clear()
        return True

    def seed(self, schema: Schema, position: Position) -> None:
        """Record a snapshot captured from the server, valid from `position` on."""
        records = [
            HistoryRecord(position, "snapshot", db.name, "", {"name": db.name, "charset": db.charset,
                                                              "collation": db.collation})
            for db in schema.databases.values()
        ]  # fmt: skip
        records += [
            HistoryRecord(position, "snapshot", t.database, t.name, t.to_json()) for t in schema.tables.values()
        ]
        self.store.append(records)
        self.schema = schema
        self.seeded_at = position
        self._named.clear()

    # -- DDL -----------------------------------------------------------------------------

    def on_statement(self, sql: str, default_db: str, end: Position) -> list[DdlChange]:
        """Apply a statement that ended at `end`; records and returns what it changed."""
        if self.seeded_at is not None and end.sort_key() <= self.seeded_at.sort_key():
            return []  # the snapshot already holds its effect
        before = self.schema.copy()
        try:
            changes = apply_ddl(self.schema, sql, default_db)
        except (DdlSyntaxError, UntrackedTableError) as exc:
            self.schema = before
            return self._unreadable(sql, default_db, end, exc)
        changes = [c for c in changes if self._captured(c)]
        self._forget_excluded()
        self._record(changes, end, "ddl", sql)
        return changes

    def _captured(self, change: DdlChange) -> bool:
        return (
            self.included.database(change.database)
            if not change.table
            else self.included(change.database, change.table)
        )

    def _forget_excluded(self) -> None:
        for key in [k for k in self.schema.tables if not self.included(*k)]:
            del self.schema.tables[key]

    def _record(self, changes: list[DdlChange], end: Position, kind: str, sql: str) -> None:
        records = []
        for change in changes:
            if change.table:
                definition = None if change.definition is None else change.definition.to_json()
            else:
                db = self.schema.databases.get(change.database)
                definition = None if db is None else {"name": db.name, "charset": db.charset, "collation": db.collation}
            key = (end.sort_key(), change.database, change.table)
            if key not in self._recorded:
                self._recorded.add(key)
                records.append(HistoryRecord(end, kind, change.database, change.table, definition, sql))
        self.store.append(records)
        if changes:
            self._named.clear()

    def _unreadable(self, sql: str, default_db: str, end: Position, exc: Exception) -> list[DdlChange]:
        targets = [t for t in _mentioned_tables(sql, default_db) if self.included(*t)]
        if isinstance(exc, UntrackedTableError) and not self.included(exc.database, exc.table):
            return []  # a table Sluice does not capture: nothing to follow
        log.warning("DDL at %s not understood (%s); re-reading %s from the server: %s", end, exc,
                    targets or "no captured table", sql[:500])  # fmt: skip
        changes = []
        for database, table in targets:
            definition = self.refresh(database, table, self.schema) if self.refresh else None
            if definition is None:
                self.schema.drop(database, table)
            changes.append(DdlChange(database, table, definition))
        self._record(changes, end, "refresh", sql)
        return changes

    # -- TABLE_MAP -------------------------------------------------------------------------

    def table_hook(self, table_map: TableMapEvent, pos: int) -> TableMapEvent | None:
        """The parser's TABLE_MAP hook: None for tables not captured, else the named table."""
        if not self.included(table_map.schema, table_map.table):
            return None
        tracked = self.schema.get(table_map.schema, table_map.table)
        hit = self._named.get(table_map.raw)
        if hit is not None and hit[0] is tracked:
            return hit[1]
        problems = ["the table is not in the schema history"] if tracked is None else disagreements(tracked, table_map)
        if problems and self.before_seed(pos) and all(c.name is not None for c in table_map.columns):
            # Older than the snapshot the history starts with: the server's own column
            # names in the TABLE_MAP (binlog_row_metadata=FULL) are the truth for it.
            return table_map
        if problems:
            raise self._mismatch(table_map, pos, problems)
        assert tracked is not None
        result = named(table_map, self.keyed(tracked))
        self._named[table_map.raw] = (tracked, result)
        return result

    def definition(self, table_map: TableMapEvent) -> Table:
        """The definition rows of this (already checked) TABLE_MAP were written with.

        The tracked table, except for events older than the snapshot that were named from
        the TABLE_MAP itself: then a definition is read off the TABLE_MAP.
        """
        tracked = self.schema.get(table_map.schema, table_map.table)
        known = self._defined.get(id(table_map))
        if known is not None and known[0] is table_map and known[1] is tracked:
            return known[2]
        if tracked is not None and tracked.column_names() == table_map.column_names:
            result = self.keyed(tracked)
        else:
            found = self._from_binlog.get(table_map.raw)
            if found is None:
                found = self._from_binlog[table_map.raw] = table_from_table_map(table_map)
            result = found
        if len(self._defined) >= 4096:
            self._defined.clear()
        self._defined[id(table_map)] = (table_map, tracked, result)
        return result

    def keyed(self, table: Table) -> Table:
        """`table` keyed by its configured key columns when it has no primary key of its own.

        The history keeps the table as the server defines it; the key is laid over it where
        rows are named, encoded and snapshotted. A configured column the table no longer has
        leaves it keyless (said once per definition)."""
        columns = self.keys.get(table.key) if self.keys and not table.primary_key else None
        if columns is None:
            return table
        hit = self._keyed.get(id(table))
        if hit is not None and hit[0] is table:
            return hit[1]
        indexes = [table.index_of(c) for c in columns]
        if min(indexes) < 0:
            log.warning("`%s`.`%s` has no column %s of its key_columns: its rows go without a key", *table.key,
                        ", ".join(c for c, i in zip(columns, indexes) if i < 0))  # fmt: skip
            result = table
        else:
            result = replace(table, primary_key=tuple(table.columns[i].name for i in indexes))
        if len(self._keyed) >= 4096:
            self._keyed.clear()
        self._keyed[id(table)] = (table, result)
        return result

    def before_seed(self, pos: int) -> bool:
        return self.seeded_at is not None and Position(self.source, pos).sort_key() < self.seeded_at.sort_key()

    def _mismatch(self, table_map: TableMapEvent, pos: int, problems: list[str]) -> SchemaMismatchError:
        return SchemaMismatchError(
            f"TABLE_MAP of `{table_map.schema}`.`{table_map.table}` disagrees with the tracked schema: "
            + "; ".join(problems),
            file=self.source, pos=pos, event_type="TABLE_MAP_EVENT",
        )  # fmt: skip


def table_from_table_map(table_map: TableMapEvent) -> Table:
    """A definition from what the binlog logged: names, SQL types, nullability, key."""
    columns = ", ".join(
        f"`{name.replace('`', '``')}` {mysql_type(col)} {'NULL' if col.nullable else 'NOT NULL'}"
        for name, col in zip(table_map.column_names, table_map.columns)
    )
    keys = ", ".join(f"`{n.replace('`', '``')}`" for n in table_map.pk_names)
    schema = Schema()
    apply_ddl(schema, f"CREATE TABLE t ({columns}{', PRIMARY KEY (' + keys + ')' if keys else ''})", "d")
    table = schema.tables[("d", "t")]
    return replace(table, database=table_map.schema, name=table_map.table)


def _mentioned_tables(sql: str, default_db: str) -> list[tuple[str, str]]:
    """Tables a statement names after TABLE, TO, LIKE or ON (for statements the parser refused)."""
    found = []
    for m in re.finditer(r"\b(?:TABLE|TABLES|TO|LIKE|ON)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?", sql, re.IGNORECASE):
        name = _NAMES.match(sql, m.end())
        if name is None:
            continue
        first = (name[1] or name[2] or "").replace("``", "`")
        second = (name[3] or name[4] or "").replace("``", "`")
        key = (first, second) if second else (default_db, first)
        if key not in found:
            found.append(key)
    return found
