"""The schema at the stream's position: DDL applied as it passes, TABLE_MAPs checked against it.

Names and keys of every captured table come from here, not from the live server, so
replaying events from before an ALTER gives the names those rows had. A statement the
parser cannot read never stops the stream for other tables. The captured tables it names
are `blocked` (recorded in the history with the statement and its position, one warning
logged): the first row of one of them stops the connector with one line saying how to go
on (`sluice schema set`), instead of a guess. The server's definition *now* is no answer
while the stream is behind: the table may have been altered or dropped since. With
`[source] unreadable_ddl = "refresh"` (opt-in) those tables are re-read from the server
at once instead, as Sluice did before.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from connector.binlog.charsets import charset_of
from connector.binlog.coltypes import mysql_type
from connector.binlog.events import QueryStatus
from connector.binlog.tablemap import TableMapEvent
from connector.errors import SchemaMismatchError
from connector.filters import TableFilter
from connector.identity import ByIdentity
from connector.position import Cursor, Position
from connector.schema.binlogmatch import disagreements, named
from connector.schema.ddl import DdlChange, Unreadable, apply_ddl, read_ddl
from connector.schema.history import HistoryRecord, HistoryStore, rebuild
from connector.schema.labels import repaired
from connector.schema.model import Blocked, Schema, Table
from connector.schema.onlineddl import CutOver, cut_over, is_rename
from connector.schema.sqltokens import Session
from connector.schema.zones import ZoneConverter

log = logging.getLogger("sluice.schema")

# Reads one table from the server into the given schema (None: it does not exist).
Refresher = Callable[[str, str, Schema], Table | None]
# Reads one table from the server into the given schema if its definition now is the one it had
# at the position (no statement since names it); None otherwise.
Resolver = Callable[[str, str, Position, Schema], Table | None]


class UnreadableDdlError(SchemaMismatchError):
    """Rows of a table whose definition an unreadable statement left unknown."""


def session_of(
    status: QueryStatus | None, mariadb: bool, release: tuple[int, ...], zones: ZoneConverter | None = None
) -> Session:
    """What the server knew when it ran a statement, from the QUERY event's status variables."""
    version = release[0] * 10000 + release[1] * 100 + release[2] if len(release) >= 3 else 0
    if status is None:
        return Session(mariadb, version, zones=zones)
    server_charset = charset_of(status.collation_server) if status.collation_server is not None else None
    explicit = status.explicit_defaults_for_timestamp
    return Session(mariadb, version, status.sql_mode or 0, server_charset, explicit is None or bool(explicit),
                   status.time_zone, zones)  # fmt: skip


def statement_text(sql: str, limit: int = 300) -> str:
    """A statement on one line, cut to `limit` characters (error messages and logs)."""
    flat = re.sub(r"\s+", " ", sql).strip()
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class SchemaTracker:
    def __init__(
        self, store: HistoryStore, included: TableFilter, refresh: Refresher | None = None, source: str | Cursor = ""
    ) -> None:
        self.store = store
        self.included = included
        self.refresh = refresh
        self.resolve: Resolver | None = None  # a table moved in from an untracked database (_resolved)
        self.schema = Schema()
        self.seeded_at: Position | None = None
        self.cursor = Cursor.of(source)  # the file, for error messages
        # The server's flavour and version numbers (MariaDB?, (10, 11, 6)): how its DDL reads.
        self.server: tuple[bool, tuple[int, ...]] = (False, ())
        self.zones: ZoneConverter | None = None  # how the server reads a named or SYSTEM time zone
        self._named: dict[bytes, tuple[Table, TableMapEvent]] = {}
        # (position, database, table) of every record in the store: a replay after a restart
        # passes the same DDL again and must not record it twice.
        self._recorded: set[tuple[tuple[str, int, int], str, str]] = set()
        # Definitions operators gave (`sluice schema set`), by the position they take effect at: a
        # replay that passes the statement again applies them after it, as a restart past it does.
        self._overrides: dict[tuple[str, int, int], list[HistoryRecord]] = {}
        self._from_binlog: dict[bytes, Table] = {}
        # definition()'s answers by TABLE_MAP object, while the tracked table is the same object
        # (a DDL makes a new one): every rows event asks, so no column-name tuples per event.
        self._defined: dict[int, tuple[TableMapEvent, Table | None, Table]] = {}
        # [[source.key_columns]]: the key of tables without a primary key, by (database, table).
        self.keys: dict[tuple[str, str], tuple[str, ...]] = {}
        self._keyed = ByIdentity(self._with_key)
        # Databases whose every table the history follows (`tracks`), published or not.
        self._databases: set[str] = set()
        # What the last statement did to captured tables' rows (on_statement).
        self.cut_overs: list[CutOver] = []
        self.renamed_onto: list[tuple[str, str]] = []
        # Captured tables to read again (renamed_onto, as statements pass), for the snapshot to take.
        self.rereads: list[tuple[str, str]] = []
        # Captured tables a statement defined, and where: the schema directory's current versions.
        self.on_defined: Callable[[list[Table], Position], None] | None = None
        # Tables of databases first read at a start, ahead of the stream (add_later): from where on.
        self._later: dict[tuple[str, str], tuple[Position, Table]] = {}
        self._last_filter: dict[str, Any] | None = None  # the filter the history last recorded

    # -- start ---------------------------------------------------------------------------

    def restore(self, as_of: Position) -> bool:
        """Rebuild the schema at `as_of` from the history; False when there is none yet."""
        records = self.store.load()
        if not records:
            return False
        self.schema = rebuild(records, as_of if as_of.file else None)  # a GTID start: the latest
        self._recorded = {(r.position.sort_key(), r.database, r.table) for r in records}
        self._overrides = {}
        for record in records:
            if record.kind == "override":
                self._overrides.setdefault(record.position.sort_key(), []).append(record)
        self.seeded_at = min((r.position for r in records if r.kind == "snapshot"), key=Position.sort_key, default=None)
        self._named.clear()
        self._databases = set()
        self._note_databases()
        limit = as_of.sort_key() if as_of.file else None
        self._later = {
            (r.database, r.table): (r.position, Table.from_json(r.definition)) for r in records
            if r.kind == "added" and r.table and r.definition is not None and limit is not None
            and r.position.sort_key() > limit
        }  # fmt: skip
        self._last_filter = next((r.definition for r in reversed(records) if r.kind == "filter"), None)
        return True

    def seed(self, schema: Schema, position: Position) -> None:
        """Record a snapshot captured from the server, valid from `position` on."""
        records = [HistoryRecord(position, "snapshot", db.name, "", asdict(db)) for db in schema.databases.values()]
        records += [HistoryRecord(position, "snapshot", *t.key, t.to_json()) for t in schema.tables.values()]
        self.store.append(records)
        self.schema = schema
        self.seeded_at = position
        self._named.clear()
        self._note_databases()

    # -- the table filter across starts ---------------------------------------------------

    def filter_json(self) -> dict[str, Any]:
        f = self.included
        return {"include": list(f.include), "exclude": list(f.exclude), "skip_helpers": f.skip_helpers}

    def newly_captured(self) -> list[tuple[str, str]]:
        """Tables the history holds that the filter captures and the filter of the last start did
        not (an include widened): the snapshot reads them as new ones. A history whose start
        recorded no filter (kept by an older Sluice) names none."""
        last = self._last_filter
        if last is None:
            return []
        before = TableFilter(tuple(last["include"]), tuple(last["exclude"]), bool(last.get("skip_helpers")))
        return sorted(k for k in self.schema.tables if self.included(*k) and not before(*k))

    def unfollowed(self, tables: list[tuple[str, str]]) -> set[str]:
        """Of the server's tables, the databases holding a captured one the history does not follow."""
        return {db for db, table in tables if self.included(db, table) and db not in self._databases}

    def add_later(self, schema: Schema, at: Position) -> list[tuple[str, str]]:
        """Databases the filter came to capture, read from the server at `at` (ahead of the stream):
        recorded there, their tables known to the stream from there on (their rows and statements
        before it are not read: the snapshot reads those tables as of a position past it). The
        captured tables among them."""
        databases = [d for d in schema.databases.values() if any(db == d.name for db, _ in schema.tables)]
        records = [HistoryRecord(at, "added", d.name, "", asdict(d)) for d in databases]
        records += [HistoryRecord(at, "added", t.database, t.name, t.to_json()) for t in schema.tables.values()]
        self.store.append(records)
        self._recorded |= {(at.sort_key(), r.database, r.table) for r in records}
        for database in databases:
            self.schema.databases.setdefault(database.name, database)
        self._later.update({key: (at, table) for key, table in schema.tables.items()})
        self._databases |= {d.name for d in databases}
        return sorted(k for k in schema.tables if self.included(*k))

    def record_filter(self, at: Position) -> None:
        """The filter this start runs with, when it is not the one the history last recorded."""
        current = self.filter_json()
        if current != self._last_filter:
            self.store.append([HistoryRecord(at, "filter", "", "", current)])
            self._last_filter = current

    def _arrived(self, key: tuple[str, str], pos: int) -> bool:
        """A table read ahead of the stream (add_later): known from its position on."""
        at, table = self._later[key]
        if Position(self.cursor.file, pos).sort_key() < at.sort_key():
            return False
        del self._later[key]
        self.schema.put(table)
        self._named.clear()
        return True

    # -- DDL -----------------------------------------------------------------------------

    def on_statement(
        self, sql: str, default_db: str, end: Position, status: QueryStatus | None = None
    ) -> list[DdlChange]:
        """Apply a statement that ended at `end`; records and returns what it changed.

        Also says what the statement did to captured tables' rows: `cut_overs` (a tool's shadow
        table swapped in), `renamed_onto` (a captured name another table took by a RENAME: its
        rows were never published under that name, so it is read again)."""
        self.cut_overs, self.renamed_onto = [], []
        if self.seeded_at is not None and end.sort_key() <= self.seeded_at.sort_key():
            return []  # the snapshot already holds its effect
        before = dict(self.schema.tables)
        result = read_ddl(self.schema, sql, default_db, session_of(status, *self.server, self.zones))
        if isinstance(result, Unreadable) and self._ahead(result, end):
            return []  # about a table read from the server past here (add_later): that read holds it
        if isinstance(result, Unreadable):
            changes = self._unreadable(sql, end, result)
        else:
            changes = [c for c in result if self._tracked(c)]
            self._forget_untracked()
            self._record(changes, end, "ddl", sql)
            self._note_databases()
        # Each table once, as the statement left it (a swap drops a name and defines it again).
        final = {(c.database, c.table): c for c in self._overridden(end, changes)}
        captured = [c for c in final.values() if self._captured(c)]
        defined = [self.keyed(c.definition) for c in captured if c.table and c.definition is not None]
        if defined and self.on_defined is not None:
            self.on_defined(defined, end)
        if is_rename(sql):
            self._renames(before, captured)
        return captured

    def _ahead(self, result: Unreadable, end: Position) -> bool:
        untracked = result.untracked
        if untracked is None or not self._later:
            return False
        later = self._later.get((untracked.database, untracked.table))
        return later is not None and end.sort_key() < later[0].sort_key()

    def _renames(self, before: dict[tuple[str, str], Table], captured: list[DdlChange]) -> None:
        """Every captured table a RENAME defines took its name from another table."""
        targets = [(c.database, c.table) for c in captured if c.table and c.definition is not None]
        targets = [t for t in dict.fromkeys(targets) if self.schema.get(*t) is not None]
        self.cut_overs = cut_over(before, self.schema.tables, targets)
        swapped = {(c.database, c.table) for c in self.cut_overs if not c.values_changed()}
        self.renamed_onto = [t for t in targets if t not in swapped]
        self.rereads += self.renamed_onto
        for cut in self.cut_overs:
            log.info("%s cut-over of `%s`.`%s`: %s%s", cut.tool, cut.database, cut.table, cut.summary(),
                     "; its rows are read again (a column's type changed)" if cut.values_changed() else "")

    def _overridden(self, end: Position, changes: list[DdlChange]) -> list[DdlChange]:
        """Operators' definitions for this position, over what the statement left."""
        records = self._overrides.get(end.sort_key(), [])
        for record in records:
            record.apply(self.schema)
            definition = None if record.definition is None else Table.from_json(record.definition)
            changes = [c for c in changes if (c.database, c.table) != (record.database, record.table)]
            changes.append(DdlChange(record.database, record.table, definition))
        if records:
            self._named.clear()
        return changes

    def tracks(self, database: str, table: str) -> bool:
        """Does the history follow this table? Every table of a database that holds a captured one
        (or would capture any table): the filter decides what is published, not what is tracked,
        since a table not published today (a shadow table of an online schema change) becomes a
        captured one at a RENAME (Debezium's store.only.captured.tables.ddl=false, for this reason)."""
        return database in self._databases or self.included(database, table)

    def _note_databases(self) -> None:
        """The tracked databases, after a change of the schema: those with a captured table or
        admitting any table; a database dropped stops being one."""
        self._databases &= set(self.schema.databases) | {db for db, _ in self.schema.tables}
        self._databases |= {db for db, table in self.schema.tables if self.included(db, table)}
        self._databases |= {db for db in self.schema.databases if self.included.database(db)}

    def _captured(self, change: DdlChange) -> bool:
        """Is the change one of a published table (or database)?"""
        if not change.table:
            return self.included.database(change.database)
        return self.included(change.database, change.table)

    def _tracked(self, change: DdlChange) -> bool:
        if not change.table:
            return change.database in self._databases or self.included.database(change.database)
        return self.tracks(change.database, change.table)

    def _forget_untracked(self) -> None:
        for key in [k for k in self.schema.tables if not self.tracks(*k)]:
            del self.schema.tables[key]
        for key in [k for k in self.schema.blocked if not self.tracks(*k)]:
            del self.schema.blocked[key]

    def _record(self, changes: list[DdlChange], end: Position, kind: str, sql: str) -> None:
        """One record per table (or database) the statement touched, of what the statement left
        it: a swap (`RENAME TABLE t TO t_old, t_new TO t`) drops `t`, then defines it again, and
        the history must hold the last, as the tracker does (all records of a statement share its
        position; a restart rebuilds from them)."""
        final = {(c.database, c.table): c for c in changes}
        records = []
        for change in final.values():
            definition = self._definition_json(change)
            key = (end.sort_key(), change.database, change.table)
            if key not in self._recorded:
                self._recorded.add(key)
                blocked = change.blocked is not None
                records.append(HistoryRecord(end, "unreadable" if blocked else kind, change.database, change.table,
                                             definition, sql))  # fmt: skip
        self.store.append(records)
        if changes:
            self._named.clear()

    def _definition_json(self, change: DdlChange) -> dict[str, Any] | None:
        if change.blocked is not None:
            return {"blocked": asdict(change.blocked)}
        if change.table:
            return None if change.definition is None else change.definition.to_json()
        db = self.schema.databases.get(change.database)
        return None if db is None else asdict(db)

    def _unreadable(self, sql: str, end: Position, result: Unreadable) -> list[DdlChange]:
        targets = [t for t in result.tables if self.tracks(*t)]
        untracked = result.untracked
        if untracked is not None:
            # A table the history does not hold: tracked, its definition is unknown from here
            # on; not tracked, only what the statement makes of it (a RENAME into a captured name).
            known = (untracked.database, untracked.table)
            targets = [t for t in (known, *untracked.targets) if self.tracks(*t)]
        if not targets:
            log.warning("DDL at %s not understood (%s); it names no captured table: %s", end, result.reason,
                        statement_text(sql))  # fmt: skip
            return []
        if untracked is not None and self.resolve is not None:
            resolved = self._resolved(sql, end, targets)
            if resolved is not None:
                return resolved
        if self.refresh is not None:
            return self._refreshed(sql, end, result, targets)
        blocked = Blocked(statement_text(sql, 2000), f"{end.file}:{end.pos}", result.reason)
        changes = []
        for key in dict.fromkeys(targets):
            self.schema.drop(*key)
            self.schema.blocked[key] = blocked
            changes.append(DdlChange(key[0], key[1], None, blocked))
        log.warning(
            "DDL at %s:%d not understood (%s): %s; rows of %s stop the connector until their definition is given: "
            "sluice schema set DB.TABLE --from-server|--ddl SQL --config FILE", end.file, end.pos, result.reason,
            statement_text(sql), ", ".join(f"{d}.{t}" for d, t in dict.fromkeys(targets)),
        )  # fmt: skip
        self._record(changes, end, "unreadable", sql)
        return changes

    def _resolved(self, sql: str, end: Position, targets: list[tuple[str, str]]) -> list[DdlChange] | None:
        """A table of a database the history does not follow, moved onto tracked names (RENAME TABLE
        other.t TO shop.orders): each is read from the server where its definition now is the one
        the statement left (no later statement names it); None when one cannot be known so."""
        assert self.resolve is not None
        tables = {key: self.resolve(key[0], key[1], end, self.schema) for key in dict.fromkeys(targets)}
        if any(table is None for table in tables.values()):
            return None
        changes = [DdlChange(database, table, definition) for (database, table), definition in tables.items()]
        log.info("%s moved a table the history does not follow onto %s; read from the server (no statement since "
                 "names it)", statement_text(sql), ", ".join(f"{d}.{t}" for d, t in tables))  # fmt: skip
        self._record(changes, end, "refresh", sql)
        self._note_databases()
        return changes

    def _refreshed(
        self, sql: str, end: Position, result: Unreadable, targets: list[tuple[str, str]]
    ) -> list[DdlChange]:
        """[source] unreadable_ddl = "refresh": the tables as the server has them now."""
        assert self.refresh is not None
        log.warning("DDL at %s not understood (%s); re-reading %s from the server: %s", end, result.reason,
                    ", ".join(f"{d}.{t}" for d, t in targets), statement_text(sql))  # fmt: skip
        changes = []
        for database, table in dict.fromkeys(targets):
            self.schema.blocked.pop((database, table), None)
            definition = self.refresh(database, table, self.schema)
            if definition is None:
                self.schema.drop(database, table)
            changes.append(DdlChange(database, table, definition))
        self._record(changes, end, "refresh", sql)
        return changes

    def blocked(self, database: str, table: str) -> Blocked | None:
        return self.schema.blocked.get((database, table))

    # -- TABLE_MAP -------------------------------------------------------------------------

    def table_hook(self, table_map: TableMapEvent, pos: int) -> TableMapEvent | None:
        """The parser's TABLE_MAP hook: None for tables not captured, else the named table."""
        if not self.included(table_map.schema, table_map.table):
            return None
        key = (table_map.schema, table_map.table)
        if self._later and key in self._later and not self._arrived(key, pos):
            return None  # read from the server ahead of here: its snapshot holds these rows
        tracked = self.schema.get(table_map.schema, table_map.table)
        hit = self._named.get(table_map.raw)
        if hit is not None and hit[0] is tracked:
            return hit[1]
        blocked = self.schema.blocked.get((table_map.schema, table_map.table))
        if blocked is not None and not (self.before_seed(pos) and all(c.name is not None for c in table_map.columns)):
            raise self._blocked(table_map, pos, blocked)
        problems = ["the table is not in the schema history"] if tracked is None else disagreements(tracked, table_map)
        if problems and self.before_seed(pos) and all(c.name is not None for c in table_map.columns):
            # Older than the snapshot the history starts with: the server's own column
            # names in the TABLE_MAP (binlog_row_metadata=FULL) are the truth for it.
            return table_map
        if problems:
            raise self._mismatch(table_map, pos, problems)
        assert tracked is not None
        exact = repaired(tracked, table_map)
        if exact is not None:
            tracked = self._relabelled(exact, pos)
        result = named(table_map, self.keyed(tracked))
        self._named[table_map.raw] = (tracked, result)
        return result

    def _relabelled(self, table: Table, pos: int) -> Table:
        """A table whose ambiguous ENUM/SET labels the TABLE_MAP gave exactly, from here on."""
        at = Position(self.cursor.file, pos)
        self.schema.put(table)
        self._record([DdlChange(table.database, table.name, table)], at, "labels", "")
        log.info("ENUM/SET labels of `%s`.`%s` taken from its TABLE_MAP at %s (binlog_row_metadata=FULL): %s",
                 table.database, table.name, at, ", ".join(c.sql_type() for c in table.columns if c.params
                                                          and c.data_type in ("enum", "set")))  # fmt: skip
        return table

    def settled(self, table_map: TableMapEvent, pos: int) -> bool:
        """Whether a TABLE_MAP the hook resolved (to `table_map`) reads the same at any later position,
        so the compiled kernel may take it again by its bytes alone (connector/lane.py): after the
        seed; before it, where the schema history has the table and agrees with it (else the hook
        took the TABLE_MAP's own names, which after the seed would be a mismatch)."""
        if not self.before_seed(pos):
            return True
        name = (table_map.schema, table_map.table)
        tracked = self.schema.get(*name)
        return tracked is not None and name not in self.schema.blocked and not disagreements(tracked, table_map)

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
            if table_map.raw not in self._from_binlog:
                self._from_binlog[table_map.raw] = table_from_table_map(table_map)
            result = self._from_binlog[table_map.raw]
        if len(self._defined) >= 4096:
            self._defined.clear()
        self._defined[id(table_map)] = (table_map, tracked, result)
        return result

    def keyed(self, table: Table) -> Table:
        """`table` keyed by its configured key columns when it has no primary key of its own.

        The history keeps the table as the server defines it; the key is laid over it where
        rows are named, encoded and snapshotted. A configured column the table no longer has
        leaves it keyless (said once per definition)."""
        configured = self.keys and not table.primary_key and table.key in self.keys
        return self._keyed(table) if configured else table

    def _with_key(self, table: Table) -> Table:
        columns = self.keys[table.key]
        indexes = [table.index_of(c) for c in columns]
        if min(indexes) < 0:
            log.warning("`%s`.`%s` has no column %s of its key_columns: its rows go without a key", *table.key,
                        ", ".join(c for c, i in zip(columns, indexes) if i < 0))  # fmt: skip
            return table
        return replace(table, primary_key=tuple(table.columns[i].name for i in indexes))

    def before_seed(self, pos: int) -> bool:
        return self.seeded_at is not None and Position(self.cursor.file, pos).sort_key() < self.seeded_at.sort_key()

    def _blocked(self, table_map: TableMapEvent, pos: int, blocked: Blocked) -> UnreadableDdlError:
        name = f"{table_map.schema}.{table_map.table}"
        return UnreadableDdlError(
            f"rows of `{table_map.schema}`.`{table_map.table}`, whose definition is unknown since the statement at "
            f"{blocked.position} Sluice could not read ({blocked.reason}): {statement_text(blocked.statement, 200)}; "
            f"to go on, say what the table was after it: `sluice schema set {name} --from-server --config FILE` "
            f"(the server's definition now, right if the table has not changed since) or `sluice schema set {name} "
            "--ddl 'CREATE TABLE ...' --config FILE`, then start again",
            file=self.cursor.file, pos=pos, event_type="TABLE_MAP_EVENT",
        )  # fmt: skip

    def _mismatch(self, table_map: TableMapEvent, pos: int, problems: list[str]) -> SchemaMismatchError:
        return SchemaMismatchError(
            f"TABLE_MAP of `{table_map.schema}`.`{table_map.table}` disagrees with the tracked schema: "
            + "; ".join(problems),
            file=self.cursor.file, pos=pos, event_type="TABLE_MAP_EVENT",
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
