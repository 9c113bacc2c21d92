"""Replaying DDL on a live server at binlog_row_metadata=MINIMAL and checking Sluice against it.

For each file of statements (tests/support/ddlcorpus.py; the grammar file tests/ddl_grammar.sql):
a fresh `test` database, each statement run in one session; after each statement the
server accepted, what it reports (information_schema: names, order, types, ENUM/SET
labels, charsets, nullability, primary key) is kept, and a row is written into every table
the statement created or changed (and read back as the server has it). Then Sluice streams
that stretch of the binlog through the production path (ChangeStream, SchemaTracker) and:

- after each statement, the tracked definition of every table must equal the server's;
- each written row must arrive with the server's column names and values;
- a statement the server accepted that Sluice could not read is listed (the connector would
  stop at the table's next row): it is resolved as an operator would (the server's
  definition at that moment) so the rest of the file is still checked;
- a TABLE_MAP the tracked table disagrees with stops the stream (counted, resolved the same
  way, the stream resumed from its last transaction);
- a partitioned table's SHOW CREATE TABLE (what a snapshot reads) must read to the server's table.

The servers are shared: only the databases the replay makes (`test`, and those its statements
create) are compared, captured and dropped; a statement dropping or creating any other
database is not run (counted as refused).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pymysql

from connector.errors import SchemaMismatchError, SluiceError
from connector.filters import TableFilter
from connector.items import Changes, Commit
from connector.position import Position
from connector.replica.server import master_position
from connector.schema.capture import server_session
from connector.schema.ddl import apply_ddl
from connector.schema.history import MemoryHistoryStore
from connector.schema.model import Column, Database, Schema, Table
from connector.schema.sqltokens import Cursor, DdlSyntaxError, Session, quote_identifier
from connector.schema.tracker import SchemaTracker
from connector.stream import Backoff, ChangeStream
from tests.support import live
from tests.support.ddlcorpus import Statement

Key = tuple[str, str]
SYSTEM = {"mysql", "information_schema", "performance_schema", "sys"}
_SESSION = re.compile(r"^\s*(SET|USE)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ServerColumn:
    name: str
    data_type: str
    column_type: str
    charset: str | None
    nullable: bool
    extra: str


@dataclass(frozen=True, slots=True)
class ServerTable:
    columns: tuple[ServerColumn, ...]
    primary_key: tuple[str, ...]
    hidden: tuple[str, ...] = ()  # MariaDB's implicit row_start/row_end: logged, never in information_schema


@dataclass(slots=True)
class RowCheck:
    table: Key
    names: list[str]  # what the message must name, in order
    values: dict[str, Any]  # the server's values (SELECT) by column
    types: dict[str, str]  # DATA_TYPE by column
    start: Position = field(default_factory=lambda: Position("", 0))  # the INSERT's events lie between these
    end: Position = field(default_factory=lambda: Position("", 0))
    seen: bool = False
    as_statement: bool = False  # the server logged the INSERT as a statement, not as rows


@dataclass(slots=True)
class Step:
    statement: Statement
    end: Position
    tables: dict[Key, ServerTable]
    created: dict[Key, str]  # SHOW CREATE TABLE of the tables the statement changed
    rows: list[RowCheck] = field(default_factory=list)
    checked: bool = False


@dataclass(slots=True)
class Report:
    """The figures of one replay (one server, any number of files)."""

    server: str
    replayed: int = 0  # statements the server accepted
    rejected: int = 0  # statements the server refused (so never logged)
    unreadable: list[str] = field(default_factory=list)  # accepted, not read by Sluice: "source: sql (reason)"
    differences: list[str] = field(default_factory=list)  # "source: db.t: what differs" after a statement
    # Tables whose history, rebuilt as a restart right after a statement would, differs from the tracker's
    history: list[str] = field(default_factory=list)
    stops: list[str] = field(default_factory=list)  # stream stops (TABLE_MAP disagreements, blocked tables)
    silent: list[str] = field(default_factory=list)  # rows published with other names or values, no error
    rows_checked: int = 0
    rows_unwritten: int = 0
    rows_missing: list[str] = field(default_factory=list)
    # INSERTs the server logged as statements even at binlog_format=ROW (MariaDB does for
    # tables versioned by transaction id): no row to publish, for any replica.
    rows_as_statements: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def merge(self, other: Report) -> None:
        for name in ("replayed", "rejected", "rows_checked", "rows_unwritten", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("unreadable", "differences", "history", "stops", "silent", "rows_missing", "rows_as_statements"):
            getattr(self, name).extend(getattr(other, name))

    def summary(self) -> str:
        return (
            f"{self.server}: {self.replayed} statements replayed ({self.rejected} refused by the server), "
            f"{len(self.unreadable)} unreadable, {len(self.differences)} table definitions differing, "
            f"{len(self.history)} differing from the history a restart rebuilds, "
            f"{len(self.stops)} stream stops, {len(self.silent)} silent mismatches, {self.rows_checked} rows checked "
            f"({self.rows_unwritten} not writable, {len(self.rows_missing)} missing, {len(self.rows_as_statements)} "
            f"logged as statements by the server), {self.seconds:.0f} s"
        )


class Replay:
    """Replays files of statements on the active live server (tests/support/live.py)."""

    def __init__(self) -> None:
        self.server = live.server()
        self.admin = live.connect()
        with self.admin.cursor() as cur:
            cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
            self.baseline = {str(r[0]) for r in cur.fetchall()} - {"test"}
        # The databases the replay made: only these are compared, captured and dropped (others,
        # made meanwhile by whoever else uses the server, are not the replay's to touch).
        self.created = {"test"}
        self._present: list[str] | None = None  # corpus_databases(), until a statement names a database
        self.session = server_session(self.admin)
        server = live.server()
        self.raw = pymysql.connect(host=live.HOST, port=server.port, user="root", password="", autocommit=True,
                                   use_unicode=False, ssl_disabled=True)  # fmt: skip

    def run(self, files: Iterable[tuple[str, list[Statement]]]) -> Report:
        report = Report(self.server.name)
        for _, statements in files:
            report.merge(self.run_file(statements))
        self._drop_corpus_databases()
        return report

    # -- on the server -------------------------------------------------------------------

    def run_file(self, statements: list[Statement]) -> Report:
        started = time.monotonic()
        report = Report(self.server.name)
        self._drop_corpus_databases()
        with self.admin.cursor() as cur:
            cur.execute("CREATE DATABASE test")
            # The stretch in a binlog file of its own: a start position is given its GTID state by
            # reading its file from the top (stream.gtid_state_at; MariaDB's BINLOG_GTID_POS does
            # the same on the server), a quarter of a MySQL replay's time in a file the suite had
            # filled before.
            cur.execute("FLUSH BINARY LOGS")
        self._present = None
        session = live.connect("test")
        start = master_position(self.admin)
        steps: list[Step] = []
        tables = self._server_tables()
        for statement in statements:
            named = _database_named(statement.sql, self.session)
            if named in self.baseline or not self._execute(session, statement.sql):
                report.rejected += 1  # a database the replay did not make is not dropped: counted as refused
                continue
            if named is not None:
                self.created.add(named)
                self._present = None
            if _SESSION.match(statement.sql):
                continue
            report.replayed += 1
            step = Step(statement, master_position(self.admin), self._server_tables(), {})
            changed = [k for k, t in step.tables.items() if tables.get(k) != t]
            tables = step.tables
            step.created = {k: self._show_create(k) for k in changed}
            step.rows = [r for r in (self._write_row(k, step, report) for k in changed) if r is not None]
            steps.append(step)
        session.close()
        end = master_position(self.admin)
        _Checker(self, steps, report).run(start, end)
        report.seconds = time.monotonic() - started
        return report

    def _execute(self, session: pymysql.connections.Connection, sql: str) -> bool:
        try:
            with session.cursor() as cur:
                cur.execute(sql)
                while cur.nextset():
                    pass
        except pymysql.err.MySQLError:
            return False
        except (UnicodeError, ValueError):  # a statement pymysql cannot send as text
            return False
        return True

    def corpus_databases(self) -> list[str]:
        """The replay's databases on the server now; asked of the server again only after a
        statement that creates or drops one (a tenth of the replay's time was this query)."""
        if self._present is None:
            with self.admin.cursor() as cur:
                cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
                self._present = sorted(str(r[0]) for r in cur.fetchall() if str(r[0]) in self.created - self.baseline)
        return self._present

    def _drop_corpus_databases(self) -> None:
        self._present = None  # (made by whatever ran before)
        with self.admin.cursor() as cur:
            cur.execute("SET SESSION foreign_key_checks = 0")
            for name in self.corpus_databases():
                cur.execute(f"DROP DATABASE `{name}`")
            cur.execute("SET SESSION foreign_key_checks = 1")
        self._present = None

    def _server_tables(self) -> dict[Key, ServerTable]:
        for _ in range(3):  # MariaDB's information_schema works in temporary files, which can fail once
            try:
                return self._read_server_tables()
            except pymysql.err.InternalError:
                time.sleep(0.5)
        return self._read_server_tables()

    def _read_server_tables(self) -> dict[Key, ServerTable]:
        databases = self.corpus_databases()
        if not databases:
            return {}
        marks = ", ".join(["%s"] * len(databases))
        with self.admin.cursor() as cur:
            # TABLES, COLUMNS and STATISTICS each alone, joined here: on MariaDB a join of two of
            # them was 80% of the replay's time (py-spy), and the long UNIQUE keys' join of
            # STATISTICS and TABLES alone cost 21 ms a statement, against 4 ms for these four reads.
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE, ENGINE FROM information_schema.TABLES"
                f" WHERE TABLE_SCHEMA IN ({marks}) AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED', 'SEQUENCE')",
                databases,
            )
            found = cur.fetchall()
            types = {(str(db), str(t)): str(kind) for db, t, kind, _ in found}
            engines = {(str(db), str(t)): engine for db, t, _, engine in found}
            versioned = {key for key, kind in types.items() if kind == "SYSTEM VERSIONED"}
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME,"
                f" IS_NULLABLE, EXTRA FROM information_schema.COLUMNS WHERE TABLE_SCHEMA IN ({marks})"
                " ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
                databases,
            )
            rows = [r for r in cur.fetchall() if (str(r[0]), str(r[1])) in types]
            # Primary keys by their index name: MariaDB answers that from the table's definition
            # even where the table cannot be opened (an Aria table after some partition ALTERs),
            # and leaves such a table out of an unfiltered read of STATISTICS.
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.STATISTICS"
                f" WHERE TABLE_SCHEMA IN ({marks}) AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
                databases,
            )
            keys: dict[Key, list[str]] = {}
            for db, table, column in cur.fetchall():
                keys.setdefault((str(db), str(table)), []).append(str(column))
            hashes: dict[Key, int] = {}
            if self.server.mariadb:  # long UNIQUE keys: a hidden DB_ROW_HASH_n each, not in a MEMORY table
                cur.execute(
                    "SELECT TABLE_SCHEMA, TABLE_NAME, COUNT(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS"
                    f" WHERE TABLE_SCHEMA IN ({marks}) AND INDEX_TYPE = 'HASH' AND NON_UNIQUE = 0"
                    " GROUP BY TABLE_SCHEMA, TABLE_NAME",
                    databases,
                )
                for db, table, n in cur.fetchall():
                    key = (str(db), str(table))
                    if engines.get(key) not in (None, "MEMORY"):  # (the join this replaced: ENGINE NOT IN)
                        hashes[key] = int(n)
        columns: dict[Key, list[ServerColumn]] = {}
        for db, table, name, data_type, column_type, charset, nullable, extra in rows:
            columns.setdefault((str(db), str(table)), []).append(ServerColumn(
                str(name), str(data_type).lower(), str(column_type), None if charset is None else str(charset),
                nullable == "YES", str(extra or ""),
            ))  # fmt: skip
        return {
            key: ServerTable(tuple(cols), tuple(keys.get(key, ())), self._hidden(key, versioned, hashes.get(key, 0)))
            for key, cols in columns.items()
        }

    def _hidden(self, key: Key, versioned: set[Key], hashes: int) -> tuple[str, ...]:
        """MariaDB's hidden columns: row_start/row_end of a versioned table none of whose columns
        is ROW START, then a DB_ROW_HASH_n per long UNIQUE key."""
        period: tuple[str, ...] = ()
        if key in versioned and "AS ROW START" not in self._show_create(key).upper():
            period = ("row_start", "row_end")
        return period + tuple(f"DB_ROW_HASH_{n}" for n in range(1, hashes + 1))

    def _show_create(self, key: Key) -> str:
        try:
            with self.raw.cursor() as cur:
                cur.execute(f"SHOW CREATE TABLE `{key[0]}`.`{key[1]}`")
                row = cur.fetchone()
        except pymysql.err.MySQLError:
            return ""
        return bytes(row[1]).decode("utf-8", "replace") if row else ""  # binary ENUM labels are no UTF-8

    def _write_row(self, key: Key, step: Step, report: Report) -> RowCheck | None:
        table = step.tables.get(key)
        if table is None:
            return None
        writable = [c for c in table.columns if not _generated(c)]
        values = [_value(c, i) for i, c in enumerate(writable)]
        try:
            return self._insert(key, table, writable, values)
        except (pymysql.err.MySQLError, UnicodeError):  # refused, or a value pymysql cannot read as text
            report.rows_unwritten += 1
            self.admin.close()
            self.admin = live.connect()
        return None

    def _insert(
        self, key: Key, table: ServerTable, writable: list[ServerColumn], values: list[str | None]
    ) -> RowCheck | None:
        table_name = f"`{key[0]}`.`{key[1]}`"
        with self.admin.cursor() as cur:
            try:
                cur.execute("SET SESSION sql_mode = '', foreign_key_checks = 0")
                cur.execute(f"USE {quote_identifier(key[0])}")  # an INSERT logged as a statement is of it
                cur.execute(f"DELETE FROM {table_name}")
                start = master_position(self.admin)
                names = ", ".join(f"`{c.name}`" for c, v in zip(writable, values) if v is not None)
                marks = ", ".join(v for v in values if v is not None)
                cur.execute(f"INSERT INTO {table_name} ({names}) VALUES ({marks})")
                selected = ", ".join(f"`{c.name}`" for c in table.columns)
                cur.execute(f"SELECT {selected} FROM {table_name}")
                read = cur.fetchall()
            finally:
                cur.execute("SET SESSION sql_mode = DEFAULT, foreign_key_checks = 1")
        if len(read) != 1:
            raise pymysql.err.DataError(f"{len(read)} rows read back")
        column_names = [c.name for c in table.columns]
        check = RowCheck(key, column_names + list(table.hidden), dict(zip(column_names, read[0])),
                         {c.name: c.data_type for c in table.columns})  # fmt: skip
        check.start, check.end = start, master_position(self.admin)
        return check


def _generated(column: ServerColumn) -> bool:
    """A generated column (no value can be written): not DEFAULT_GENERATED, MySQL's expression defaults."""
    extra = column.extra.upper()
    return "VIRTUAL GENERATED" in extra or "STORED GENERATED" in extra


_WKT = {
    "point": "POINT(1 2)", "linestring": "LINESTRING(0 0,1 1)", "polygon": "POLYGON((0 0,1 0,1 1,0 0))",
    "multipoint": "MULTIPOINT(0 0,1 1)", "multilinestring": "MULTILINESTRING((0 0,1 1))",
    "multipolygon": "MULTIPOLYGON(((0 0,1 0,1 1,0 0)))", "geometrycollection": "GEOMETRYCOLLECTION(POINT(1 1))",
    "geomcollection": "GEOMETRYCOLLECTION(POINT(1 1))", "geometry": "POINT(3 4)",
}  # fmt: skip


def _value(column: ServerColumn, i: int) -> str | None:
    """A SQL literal for column `i` (distinct per column, so a swap shows), None: left to its default."""
    kind = column.data_type
    if "auto_increment" in column.extra.lower():
        return None
    literal = _LITERALS.get(kind)
    if literal is not None:
        return literal(column, i)
    if kind in _WKT:
        return f"ST_GeomFromText('{_WKT[kind]}')"
    return None


def _length(column: ServerColumn) -> int:
    m = re.search(r"\((\d+)", column.column_type)
    return int(m[1]) if m else 255


def _labels(column: ServerColumn) -> list[str]:
    body = column.column_type[column.column_type.index("(") + 1 : column.column_type.rindex(")")]
    return [m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", body)]


def _text(column: ServerColumn, i: int) -> str:
    width = _length(column) if column.data_type in ("char", "varchar", "binary", "varbinary") else 20
    return "'" + str(10 + i)[: max(width, 0)] + "'"  # a number: valid JSON too (MariaDB's JSON is LONGTEXT)


def _decimal(column: ServerColumn, i: int) -> str:
    m = re.search(r"\((\d+),(\d+)\)", column.column_type)
    precision, scale = (int(m[1]), int(m[2])) if m else (10, 0)
    whole = min(i + 1, 10 ** (precision - scale) - 1) if precision > scale else 0
    return f"{whole}.{'5' * min(scale, 1)}" if scale else str(whole)


def _integer(column: ServerColumn, i: int) -> str:
    return str(1 + i % 100)


_LITERALS: dict[str, Callable[[ServerColumn, int], str | None]] = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "bigint"), _integer),
    "decimal": _decimal, "float": lambda c, i: f"{i}.5", "double": lambda c, i: f"{i}.25",
    "bit": lambda c, i: "1", "year": lambda c, i: "2001", "date": lambda c, i: "'2001-02-03'",
    "datetime": lambda c, i: "'2001-02-03 04:05:06'", "timestamp": lambda c, i: "'2001-02-03 04:05:06'",
    "time": lambda c, i: "'04:05:06'",
    **dict.fromkeys(("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "binary", "varbinary",
                     "tinyblob", "blob", "mediumblob", "longblob"), _text),
    "enum": lambda c, i: "'" + _labels(c)[-1].replace("'", "''") + "'" if _labels(c) else None,
    "set": lambda c, i: "'" + _labels(c)[-1].replace("'", "''") + "'" if _labels(c) else None,
    "json": lambda c, i: f"'[{i}]'", "inet4": lambda c, i: "'1.2.3.4'", "inet6": lambda c, i: "'::1'",
    "uuid": lambda c, i: "'00000000-0000-0000-0000-000000000001'",
    "vector": lambda c, i: "TO_VECTOR('[" + ",".join(["1"] * _length(c)) + "]')",
}  # fmt: skip


# -- Sluice's side ------------------------------------------------------------------------------


class _CorpusTracker(SchemaTracker):
    """The production tracker, with an operator who answers each unreadable statement at once
    (the server's definition at that moment), so the rest of the file is still checked."""

    def __init__(self, checker: _Checker, included: TableFilter) -> None:
        self.history = MemoryHistoryStore()
        super().__init__(self.history, included)
        self.checker = checker
        # The schema a restart right after the last statement would rebuild from the history:
        # its records applied as they are written (in position order, as rebuild applies them).
        self.restarted = Schema()
        self.applied = 0

    def on_statement(self, sql: str, default_db: str, end: Position, status: Any = None) -> list[Any]:
        changes = super().on_statement(sql, default_db, end, status)
        self._check_history(sql)
        for key, blocked in list(self.schema.blocked.items()):
            self.checker.unreadable(key, blocked.reason, sql, end)
        return changes

    def _check_history(self, sql: str) -> None:
        """A restart after this statement rebuilds what the tracker holds, for every table."""
        for record in self.history.records[self.applied :]:
            record.apply(self.restarted)
        self.applied = len(self.history.records)
        for key in sorted(set(self.schema.tables) | set(self.restarted.tables)):
            if key in self.checker.resolved:
                continue  # the replay's operator answered for it in memory only
            if self.schema.tables.get(key) != self.restarted.tables.get(key):
                self.checker.report.history.append(f"{_short(sql)}: {key[0]}.{key[1]}: the history rebuilds "
                                                   f"{self.restarted.tables.get(key)}, the tracker holds "
                                                   f"{self.schema.tables.get(key)}")  # fmt: skip
                self.restarted.tables.pop(key, None)
                if key in self.schema.tables:
                    self.restarted.put(self.schema.tables[key])


class _Checker:
    def __init__(self, replay: Replay, steps: list[Step], report: Report) -> None:
        self.replay = replay
        self.steps = steps
        self.report = report
        self.rows = [row for step in steps for row in step.rows]
        self.unchecked = 0  # steps before it are checked (they end in binlog order)
        self.resolved: set[Key] = set()  # tables the replay answered for (the server's definition), in memory
        excluded = [rf"{re.escape(db)}\..*" for db in replay.baseline | SYSTEM]
        self.included = TableFilter.of([rf"{re.escape(db)}\..*" for db in replay.created], excluded)
        self.tracker = _CorpusTracker(self, self.included)

    def run(self, start: Position, end: Position) -> None:
        schema = Schema(databases={db: Database(db, *self._charset(db)) for db in self.replay.corpus_databases()
                                   if db == "test"})  # fmt: skip
        self.tracker.seed(schema, start)
        position = start
        settings = live.admin_settings(server_id=6401)
        stopped_at = -1
        while True:  # each pass ends at the binlog's end or at one stop
            stream = ChangeStream(settings, self.tracker, self.included, Backoff(0.05, 1.0, 50))
            try:
                position = self._consume(stream.items(position, blocking=False), position)
                break
            except SchemaMismatchError as exc:
                self._stopped(exc)
                if exc.pos == stopped_at:
                    break  # the server's definition did not answer it: the rest of the file goes unchecked
                stopped_at = exc.pos
            except SluiceError as exc:  # no way past this event: the rest of the file goes unchecked
                self.report.stops.append(f"{exc}")
                break
        for step in self.steps:
            if not step.checked:
                self._compare(step)
            self._shown_partitioned(step)
        for row in self.rows:
            where = f"{self._step_of_row(row)}: {row.table[0]}.{row.table[1]}"
            if row.as_statement:
                self.report.rows_as_statements.append(where)
            elif not row.seen:
                self.report.rows_missing.append(where)
        self.report.rows_checked += sum(1 for r in self.rows if r.seen)

    def _charset(self, db: str) -> tuple[str | None, str | None]:
        with self.replay.admin.cursor() as cur:
            cur.execute("SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA"
                        " WHERE SCHEMA_NAME = %s", (db,))  # fmt: skip
            row = cur.fetchone()
        return (str(row[0]), str(row[1])) if row else (None, None)

    def _consume(self, items: Iterator[Any], position: Position) -> Position:
        for item in items:
            if isinstance(item, Changes):
                self._rows(item)
            elif isinstance(item, Commit):
                position = item.position
                self._commit(position)
        return position

    def _commit(self, position: Position) -> None:
        at, end = self.unchecked, position.sort_key()
        while at < len(self.steps) and self.steps[at].end.sort_key() <= end:
            at += 1
        due = [s for s in self.steps[self.unchecked : at] if not s.checked]
        self.unchecked = at
        for step in due[:-1]:
            step.checked = True  # superseded before Sluice could be asked (one transaction held both)
        if due:
            self._compare(due[-1])

    def _compare(self, step: Step) -> None:
        step.checked = True
        tracked = {k: t for k, t in self.tracker.schema.tables.items() if self.included(*k)}
        for key in sorted(set(tracked) | set(step.tables)):
            problem = _difference(tracked.get(key), step.tables.get(key), self.replay.server.mariadb)
            if problem:
                self.report.differences.append(f"{step.statement.source}: {key[0]}.{key[1]}: {problem}")
                self._resolve(key, step)

    def _shown_partitioned(self, step: Step) -> None:
        """A partitioned table's SHOW CREATE TABLE (what a snapshot reads) must read to what
        the server has: its partitioning is read to the end, not skipped."""
        for key, create in step.created.items():
            if "PARTITION BY" not in create.upper():
                continue
            schema = Schema(databases=dict(self.tracker.schema.databases))
            try:
                apply_ddl(schema, create, key[0], self.replay.session)
                problem = _difference(schema.get(*key), step.tables.get(key), self.replay.server.mariadb)
            except SluiceError as exc:
                problem = str(exc)
            if problem:
                where = f"{step.statement.source}: {key[0]}.{key[1]}"
                self.report.differences.append(f"{where}: SHOW CREATE TABLE read otherwise: {problem}")

    def _resolve(self, key: Key, step: Step) -> None:
        """The operator's answer: the server's definition as of this step."""
        self.resolved.add(key)
        self.tracker.schema.blocked.pop(key, None)
        create = step.created.get(key) or self.replay._show_create(key)
        if not create or key not in step.tables:
            self.tracker.schema.drop(*key)
            return
        schema = Schema(databases=dict(self.tracker.schema.databases))
        try:
            apply_ddl(schema, create, key[0], self.replay.session)
        except DdlSyntaxError:
            self.report.differences.append(f"{step.statement.source}: {key[0]}.{key[1]}: SHOW CREATE TABLE unread")
        table = schema.get(*key)
        if table is not None:
            self.tracker.schema.put(table)
        self.tracker._named.clear()

    def unreadable(self, key: Key, reason: str, sql: str, end: Position) -> None:
        step = next((s for s in self.steps if s.end.sort_key() >= end.sort_key()), None)
        source = step.statement.source if step is not None else "?"
        self.report.unreadable.append(f"{source}: {_short(sql)} ({reason})")
        if step is not None:
            self._resolve(key, step)
        else:
            self.tracker.schema.blocked.pop(key, None)

    def _stopped(self, exc: SchemaMismatchError) -> None:
        step = self._step_at(exc.pos)
        self.report.stops.append(f"{step.statement.source if step else '?'}: {exc}")
        table = re.search(r"`((?:[^`]|``)*)`\.`((?:[^`]|``)*)`", str(exc))
        if table is not None and step is not None:
            self._resolve((table[1], table[2]), step)

    def _step_at(self, pos: int) -> Step | None:
        before = [s for s in self.steps if s.end.pos <= pos]
        return before[-1] if before else None

    def _step_of_row(self, row: RowCheck) -> str:
        step = next((s for s in self.steps if row in s.rows), None)
        return step.statement.source if step is not None else "?"

    def _rows(self, item: Changes) -> None:
        at = Position(item.file, item.pos).sort_key()
        for message in item.messages:
            if message.get("type") == "QUERY":
                for check in self.rows:
                    check.as_statement = check.as_statement or check.start.sort_key() <= at < check.end.sort_key()
            if message.get("type") != "INSERT":
                continue
            key = (str(message["database"]), str(message["table"]))
            row = next((r for r in self.rows if r.table == key and r.start.sort_key() <= at < r.end.sort_key()), None)
            if row is None:
                continue
            row.seen = True
            problem = _row_difference(row, message["data"][0])
            if problem:
                self.report.silent.append(f"{self._step_of_row(row)}: {key[0]}.{key[1]}: {problem}")


def _database_named(sql: str, session: Session) -> str | None:
    """The database a CREATE or DROP DATABASE names; None for other statements."""
    try:
        cur = Cursor(sql, session)
    except DdlSyntaxError:
        return None
    if not (cur.accept("CREATE") or cur.accept("DROP")):
        return None
    cur.accept("OR", "REPLACE")
    if not (cur.accept("DATABASE") or cur.accept("SCHEMA")):
        return None
    cur.accept("IF", "NOT", "EXISTS") or cur.accept("IF", "EXISTS")
    token = cur.peek()
    return token.text if token is not None and token.kind in ("word", "quoted") else None


def _short(sql: str) -> str:
    flat = " ".join(sql.split())
    return flat if len(flat) <= 160 else flat[:157] + "..."


# -- comparisons ----------------------------------------------------------------------------------

_INTEGERS = {"tinyint", "smallint", "mediumint", "int", "bigint"}
_NO_PARAMS = {"tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob", "longblob",
              "json", "date"}  # fmt: skip


def server_shape(column: ServerColumn) -> tuple[Any, ...]:
    """(name, type, params, unsigned, charset, nullable, compressed) as information_schema says."""
    column_type = re.sub(r"/\*.*?\*/", "", column.column_type).strip().lower()
    unsigned = " unsigned" in column_type or " zerofill" in column_type
    params: tuple[str, ...] = ()
    if column.data_type in ("enum", "set"):
        params = tuple(_labels(column))
    elif "(" in column_type and column.data_type not in _INTEGERS | _NO_PARAMS:
        inner = column_type[column_type.index("(") + 1 : column_type.index(")")]
        params = tuple(p.strip() for p in inner.split(","))
    if column.data_type == "year" and params != ("2",):
        params = ()  # MariaDB shows year(4): what YEAR is
    charset = None if column.charset == "binary" else column.charset  # MariaDB names it, MySQL does not
    return (column.name, column.data_type, params, unsigned, charset, column.nullable,
            "compressed" in column.column_type.lower())  # fmt: skip


def tracked_shape(column: Column) -> tuple[Any, ...]:
    params = column.params
    if column.data_type in _INTEGERS | _NO_PARAMS:
        params = ()
    charset = None if column.charset == "binary" or column.data_type not in _CHARSETED else column.charset
    return (column.name, column.data_type, params, column.unsigned, charset, column.nullable, column.compressed)


_CHARSETED = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _as_shown(mine: tuple[Any, ...], theirs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Labels as information_schema shows them: in utf8mb3 (characters beyond it as '?'), and
    a binary label that is no UTF-8 in hex (MySQL)."""
    if mine[1] not in ("enum", "set") or len(mine[2]) != len(theirs[2]):
        return mine
    shown = []
    for label, seen in zip(mine[2], theirs[2]):
        data = label.encode("latin-1", "replace")
        forms = (_ASTRAL.sub("?", label).replace("\n", "\\n"), data.hex(),
                 data.decode("utf-8", "replace").replace("\ufffd", "?"))  # fmt: skip
        shown.append(seen if seen in forms else label)
    return (*mine[:2], tuple(shown), *mine[3:])


def _difference(tracked: Table | None, server: ServerTable | None, mariadb: bool) -> str:
    if tracked is None and server is None:
        return ""
    if tracked is None:
        return "the server has it, Sluice does not"
    if server is None:
        return "Sluice tracks it, the server has no such table"
    mine = [tracked_shape(c) for c in tracked.columns if not c.hidden]
    theirs = [server_shape(c) for c in server.columns]
    if len(mine) == len(theirs):
        mine = [_as_shown(m, t) for m, t in zip(mine, theirs)]
    if mine != theirs:
        diff = [f"{m} != {t}" for m, t in zip(mine, theirs) if m != t][:2]
        if len(mine) != len(theirs):
            diff.append(f"columns {[m[0] for m in mine]} != {[t[0] for t in theirs]}")
        return "; ".join(diff)
    if tuple(c.name for c in tracked.columns if c.hidden) != server.hidden:
        return f"hidden columns {[c.name for c in tracked.columns if c.hidden]} != {list(server.hidden)}"
    if tracked.primary_key != server.primary_key:
        return f"primary key {tracked.primary_key} != {server.primary_key}"
    return ""


def _row_difference(row: RowCheck, data: dict[str, Any]) -> str:
    """Names in order, values; MariaDB's hidden columns may sit anywhere (information_schema
    does not say where): present is all that is checked of them."""
    hidden = row.names[len(row.values):]
    visible = [n for n in data if n not in hidden]
    if visible != row.names[: len(row.values)] or not set(hidden) <= set(data):
        return f"columns {list(data)} != {row.names}"
    for name, expected in row.values.items():
        if not _same(data[name], expected, row.types[name]):
            return f"`{name}` {data[name]!r} != {expected!r}"
    return ""


def _same(published: Any, selected: Any, data_type: str) -> bool:
    if selected is None or published is None:
        return selected is None and published is None
    if data_type in _WKT or data_type in ("vector", "uuid", "inet4", "inet6"):
        return True  # published as bytes (hex for geometry): their layouts are the decoder's own tests' business
    if data_type in ("float", "double"):
        return math.isclose(float(published), float(selected), rel_tol=1e-6)
    if data_type == "bit":
        return int(published) == int.from_bytes(selected, "big")
    if data_type == "year" and isinstance(selected, int) and selected < 100:  # MariaDB's YEAR(2) shows 2 digits
        return int(published) % 100 == selected
    if data_type == "json":
        return bool(json.loads(published) == json.loads(selected))
    return _text_of(published) == _text_of(selected)


def _text_of(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, dt.datetime):
        text = value.strftime("%Y-%m-%d %H:%M:%S") + (f".{value.microsecond:06d}" if value.microsecond else "")
        return text.rstrip("0").rstrip(".") if "." in text else text
    if isinstance(value, dt.timedelta):
        micros = round(value.total_seconds() * 1_000_000)
        sign, micros = ("-" if micros < 0 else ""), abs(micros)
        seconds, fraction = divmod(micros, 1_000_000)
        text = f"{sign}{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}.{fraction:06d}"
        return text.rstrip("0").rstrip(".")
    if isinstance(value, (set, frozenset)):
        return ",".join(sorted(value))
    if isinstance(value, Decimal | int | dt.date):
        return str(value)
    text = str(value)
    if re.fullmatch(r"(\d{4}-\d\d-\d\d )?-?\d\d+:\d\d:\d\d\.\d+", text):
        return text.rstrip("0").rstrip(".")
    return text
