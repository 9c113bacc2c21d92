"""Applying DDL statements from QUERY events to the tracked schema.

`read_ddl(schema, sql, default_db, session)` changes `schema` as the statement changed the
server's tables and returns what changed, or an `Unreadable` (the reason and the tables the
statement names) and leaves `schema` as it was. It never raises: a statement it cannot
read is a value the caller decides about (connector/schema/tracker.py). It reads
CREATE [OR REPLACE] / ALTER / DROP / RENAME / TRUNCATE TABLE, CREATE TABLE ... LIKE,
CREATE/ALTER/DROP DATABASE, CREATE/DROP SEQUENCE (MariaDB's sequences are tables),
DROP INDEX `PRIMARY`; ALTER TABLE as connector/schema/alter.py describes; the column
definitions and types of connector/schema/coldef.py and types.py; MariaDB's system
versioning; partitioning and the partition commands as connector/schema/partitions.py
describes (MariaDB's CONVERT PARTITION ... TO TABLE makes a table, CONVERT TABLE ... TO
PARTITION ends one). Parts that change no column (indexes, engines, partitions, table
options) are read and skipped; statements about other objects (views, routines, users)
change nothing.

A table an unreadable statement touched is `blocked` (model.Blocked): DROP, CREATE (not IF
NOT EXISTS) and a definition given by the operator clear it; RENAME moves it; CREATE ...
LIKE it and CONVERT PARTITION ... TO TABLE of it are blocked too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from connector.errors import SluiceError
from connector.schema.alter import (
    AlterReader,
    apply_plan,
    hidden_period_columns,
    is_element,
    key_columns,
    table_option,
    versioned_key,
)
from connector.schema.coldef import PendingColumn, read_column
from connector.schema.keys import (
    index_options,
    index_type,
    key_parts,
    named,
    read_index,
    rebuilt,
    with_hash_columns,
)
from connector.schema.model import Blocked, Column, Database, Index, Schema, Table, without_aliases
from connector.schema.partitions import PartitionCommand, read_command, read_partitioning
from connector.schema.sqltokens import Cursor, DdlSyntaxError, Session
from connector.schema.types import charset_of_collation, normal_charset

Key = tuple[str, str]


class UntrackedTableError(SluiceError):
    """The statement changes a table the tracked schema does not hold. `targets`: the tables it
    makes out of it (RENAME's, CREATE ... LIKE's), whose definitions are then unknown too."""

    def __init__(self, database: str, table: str, targets: tuple[Key, ...] = ()) -> None:
        super().__init__(f"table `{database}`.`{table}` is not in the tracked schema")
        self.database = database
        self.table = table
        self.targets = targets


@dataclass(frozen=True, slots=True)
class DdlChange:
    """One table or database a statement created, changed or removed."""

    database: str
    table: str  # "" for a database-level change
    definition: Table | None  # None: removed (or blocked)
    blocked: Blocked | None = None  # the table is blocked from here on (see the module's docstring)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A statement the parser could not apply: why, and every table it names."""

    reason: str
    tables: tuple[Key, ...]
    untracked: UntrackedTableError | None = None  # it names a table the schema does not hold


def read_ddl(schema: Schema, sql: str, default_db: str, session: Session | None = None) -> list[DdlChange] | Unreadable:
    """Apply one statement to `schema`, or leave it untouched and say why it could not."""
    work = schema.copy()
    statement = _Statement(work, default_db, session or Session())
    try:
        changes = statement.run(sql)
    except UntrackedTableError as exc:
        return Unreadable(str(exc), tuple(statement.touched), exc)
    except DdlSyntaxError as exc:
        return Unreadable(str(exc), tuple(statement.touched) or mentioned_tables(sql, default_db))
    schema.tables, schema.databases, schema.blocked = work.tables, work.databases, work.blocked
    return changes


def apply_ddl(schema: Schema, sql: str, default_db: str, session: Session | None = None) -> list[DdlChange]:
    """`read_ddl` for definitions Sluice itself reads (SHOW CREATE TABLE): unreadable raises."""
    result = read_ddl(schema, sql, default_db, session)
    if isinstance(result, Unreadable):
        if result.untracked is not None:
            raise result.untracked
        raise DdlSyntaxError(result.reason, 0)
    return result


class _Statement:
    def __init__(self, schema: Schema, default_db: str, session: Session) -> None:
        self.schema = schema
        self.db = default_db
        self.session = session
        self.changes: list[DdlChange] = []
        self.touched: list[Key] = []
        self.cur = Cursor("")

    def run(self, sql: str) -> list[DdlChange]:
        self.cur = cur = Cursor(sql, self.session)
        if cur.at_end():
            return []
        verbs: dict[str, Callable[[], None]] = {
            "CREATE": self._create, "ALTER": self._alter, "DROP": self._drop,
            "RENAME": self._rename, "TRUNCATE": self._truncate,
        }  # fmt: skip
        first = cur.next("a statement")
        handler = verbs.get(first.text.upper()) if first.kind == "word" else None
        if handler is not None:
            handler()
        return self.changes

    # -- helpers -----------------------------------------------------------------------

    def _name(self) -> Key:
        key = self.cur.qualified(self.db)
        if key not in self.touched:
            self.touched.append(key)
        return key

    def _put(self, table: Table) -> None:
        self.schema.blocked.pop(table.key, None)
        self.schema.put(table)
        self.changes.append(DdlChange(table.database, table.name, table))

    def _block(self, key: Key, blocked: Blocked) -> None:
        self.schema.drop(*key)
        self.schema.blocked[key] = blocked
        self.changes.append(DdlChange(key[0], key[1], None, blocked))

    def _remove(self, key: Key) -> None:
        gone = self.schema.drop(*key) is not None
        if self.schema.blocked.pop(key, None) is not None or gone:
            self.changes.append(DdlChange(key[0], key[1], None))

    def _table(self, key: Key, targets: tuple[Key, ...] = ()) -> Table:
        table = self.schema.get(*key)
        if table is None:
            raise UntrackedTableError(*key, targets)
        return table

    def _database_charset(self, database: str) -> tuple[str | None, str | None]:
        db = self.schema.databases.get(database)
        if db is not None and db.charset is not None:
            return db.charset, db.collation
        return self.session.server_charset, None

    # -- CREATE --------------------------------------------------------------------------

    def _create(self) -> None:
        cur = self.cur
        replacing = cur.accept("OR", "REPLACE")
        if cur.accept("TEMPORARY"):
            return  # temporary tables are not logged in row format
        cur.accept("ONLINE") or cur.accept("OFFLINE")
        if any(cur.is_at(word) for word in ("UNIQUE", "FULLTEXT", "SPATIAL", "INDEX")):
            self._create_index()
        elif cur.accept("TABLE"):
            self._create_table(replacing)
        elif cur.accept("DATABASE") or cur.accept("SCHEMA"):
            self._create_database(replacing)
        elif cur.accept("SEQUENCE"):
            self._create_sequence(replacing)

    def _create_database(self, replacing: bool) -> None:
        cur = self.cur
        if_not_exists = cur.accept("IF", "NOT", "EXISTS")
        name = cur.name("a database name")
        if if_not_exists and name in self.schema.databases:
            return
        if replacing:
            self._drop_database_tables(name)
        charset, collation = self._charset_options()
        charset = self.session.server_charset if charset is None else charset
        self.schema.databases[name] = Database(name, charset, collation)
        self.changes.append(DdlChange(name, "", None))

    def _create_sequence(self, replacing: bool) -> None:
        """MariaDB's sequences are tables of one row (sql/sql_sequence.cc, sequence_structure)."""
        if_not_exists = self.cur.accept("IF", "NOT", "EXISTS")
        key = self._name()
        if if_not_exists and self._exists(key):
            return
        kind = self.cur.name("a type").lower() if self.cur.accept("AS") else "bigint"
        unsigned = self.cur.accept("UNSIGNED")
        columns = tuple(
            Column(name, data_type, (), is_unsigned, nullable=False)
            for name, data_type, is_unsigned in _sequence_columns(kind, unsigned)
        )
        self.cur.skip_to_end()
        self._put(Table(key[0], key[1], columns))

    def _create_index(self) -> None:
        """CREATE [UNIQUE|FULLTEXT|SPATIAL] INDEX name [USING t] ON table (parts) [options]."""
        cur = self.cur
        unique = cur.accept("UNIQUE")
        cur.accept("FULLTEXT") or cur.accept("SPATIAL")
        cur.expect("INDEX")
        cur.accept("IF", "NOT", "EXISTS")
        name = cur.name("an index name")
        using_hash = index_type(cur) == "HASH"
        cur.expect("ON")
        key = self._name()
        index = Index(name, key_parts(cur), unique, index_options(cur) or using_hash)
        table = self._indexed(key)
        if table is not None:
            self._put(with_hash_columns(replace(table, indexes=(*rebuilt(table.indexes), index)), self.session))

    def _indexed(self, key: Key) -> Table | None:
        """The table an index statement changes: None when it is blocked (its columns unknown)."""
        return None if key in self.schema.blocked else self._table(key)

    def _exists(self, key: Key) -> bool:
        return self.schema.get(*key) is not None or key in self.schema.blocked

    def _create_table(self, replacing: bool) -> None:
        cur = self.cur
        if_not_exists = cur.accept("IF", "NOT", "EXISTS")
        key = self._name()
        if if_not_exists and self._exists(key):
            return  # the server left the table as it was
        if cur.accept("LIKE") or (cur.is_punct("(") and cur.is_at("LIKE", 1)):
            self._create_like(key)
            return
        _TableDefinition(self, key).read()

    def _create_like(self, key: Key) -> None:
        cur = self.cur
        wrapped = cur.accept("(")
        cur.accept("LIKE")
        source = self._name()
        if wrapped:
            cur.expect(")")
        blocked = self.schema.blocked.get(source)
        if blocked is not None:
            self._block(key, blocked)
            return
        table = self._table(source, (key,))
        # A new table: the source's earlier column names are not its history.
        self._put(replace(without_aliases(table), database=key[0], name=key[1]))

    def _charset_options(self) -> tuple[str | None, str | None]:
        """[DEFAULT] CHARACTER SET [=] x / COLLATE x (other database options skipped)."""
        cur = self.cur
        found: dict[str, str] = {}
        while not cur.at_end():
            cur.accept(",")
            option = table_option(cur)
            if option is not None:
                found[option[0]] = option[1]
        charset, collation = found.get("charset"), found.get("collation")
        if charset is None and collation is not None:
            charset = charset_of_collation(collation)
        return charset, collation

    # -- ALTER ---------------------------------------------------------------------------

    def _alter(self) -> None:
        cur = self.cur
        while cur.accept("ONLINE") or cur.accept("OFFLINE") or cur.accept("IGNORE"):
            pass
        if cur.accept("TABLE"):
            self._alter_table()
        elif cur.accept("DATABASE") or cur.accept("SCHEMA"):
            self._alter_database()

    def _alter_database(self) -> None:
        cur = self.cur
        token = cur.peek()
        words = ("DEFAULT", "CHARACTER", "CHARSET", "CHAR", "COLLATE", "ENCRYPTION", "READ", "COMMENT")
        name = self.db if token is None or token.is_word(*words) else cur.name("a database name")
        if cur.accept("UPGRADE"):
            return
        charset, collation = self._charset_options()
        if collation is not None and charset is not None and charset_of_collation(collation) != charset:
            collation = None
        old = self.schema.databases.get(name, Database(name))
        if charset is not None and collation is None and charset != old.charset:
            old = replace(old, collation=None)
        self.schema.databases[name] = Database(name, charset or old.charset, collation or old.collation)
        self.changes.append(DdlChange(name, "", None))

    def _alter_table(self) -> None:
        cur = self.cur
        if_exists = cur.accept("IF", "EXISTS")
        key = self._name()
        start = cur.i
        made = _made_by(cur, self.db)  # read ahead: an unreadable statement leaves them unknown too
        cur.i = start
        if made.partition is not None and made.partition.admin and made.whole:
            return  # ANALYZE/OPTIMIZE/REPAIR of partitions: no definition changes, none is needed
        self.touched += [k for k in made.tables() if k not in self.touched]
        blocked = self.schema.blocked.get(key)
        if blocked is not None:
            self._alter_blocked(key, blocked, made)
            return
        table = self.schema.get(*key)
        if table is None:
            if if_exists:
                return  # a captured table the schema does not hold does not exist
            raise UntrackedTableError(*key, made.tables())
        plan = AlterReader(cur, table, self.session, self.db).read()
        altered = apply_plan(table, plan, self.session)
        if altered.key != key:
            self._remove(key)
        self._put(altered)
        if plan.partition is not None:
            self._moved_rows(plan.partition, altered)

    def _moved_rows(self, command: PartitionCommand, table: Table) -> None:
        """MariaDB's CONVERT PARTITION ... TO TABLE t makes t of the table's definition (a new
        table: no earlier column names); CONVERT TABLE t TO PARTITION ends t. EXCHANGE changes
        no definition (connector/schema/partitions.py)."""
        if command.made is not None:
            self._put(replace(without_aliases(table), database=command.made[0], name=command.made[1]))
        if command.gone is not None:
            self._remove(command.gone)

    def _alter_blocked(self, key: Key, blocked: Blocked, made: _Made) -> None:
        """ALTER of a table whose definition is unknown: it stays unknown, under its new name;
        a table made of it (CONVERT PARTITION ... TO TABLE) is unknown too."""
        if made.renamed is not None and made.renamed != key:
            self._remove(key)
            self._block(made.renamed, blocked)
        command = made.partition
        if command is not None and command.made is not None:
            self._block(command.made, blocked)
        if command is not None and command.gone is not None:
            self._remove(command.gone)

    # -- DROP / RENAME / TRUNCATE ----------------------------------------------------------

    def _drop(self) -> None:
        cur = self.cur
        if cur.accept("TEMPORARY"):
            return
        if cur.accept("TABLE") or cur.accept("TABLES") or cur.accept("SEQUENCE"):
            cur.accept("IF", "EXISTS")
            while True:
                self._remove(self._name())
                if not cur.accept(","):
                    break
        elif cur.accept("DATABASE") or cur.accept("SCHEMA"):
            cur.accept("IF", "EXISTS")
            name = cur.name("a database name")
            self._drop_database_tables(name)
            self.schema.databases.pop(name, None)
            self.changes.append(DdlChange(name, "", None))
        elif cur.accept("INDEX") or cur.accept("ONLINE", "INDEX") or cur.accept("OFFLINE", "INDEX"):
            self._drop_index()

    def _drop_database_tables(self, name: str) -> None:
        for table in self.schema.tables_of(name):
            self._remove(table.key)
        for key in [k for k in self.schema.blocked if k[0] == name]:
            self._remove(key)

    def _drop_index(self) -> None:
        """DROP INDEX name ON t: `PRIMARY` is the primary key; a long UNIQUE key takes its
        hidden column with it (MariaDB)."""
        cur = self.cur
        cur.accept("IF", "EXISTS")
        name = cur.name("an index name")
        cur.expect("ON")
        key = self._name()
        table = self._indexed(key)
        if table is None:
            return
        kept = rebuilt(i for i in table.indexes if i.name.lower() != name.lower())
        key_columns = () if name.upper() == "PRIMARY" else table.primary_key
        self._put(with_hash_columns(replace(table, indexes=kept, primary_key=key_columns), self.session))

    def _rename(self) -> None:
        cur = self.cur
        if not (cur.accept("TABLE") or cur.accept("TABLES")):
            return  # RENAME USER
        if_exists = cur.accept("IF", "EXISTS")
        while True:
            old = self._name()
            if cur.accept("WAIT"):
                cur.next("a timeout")
            cur.accept("NOWAIT")
            cur.expect("TO")
            new = self._name()
            self._rename_one(old, new, if_exists)
            if not cur.accept(","):
                break

    def _rename_one(self, old: Key, new: Key, if_exists: bool) -> None:
        blocked = self.schema.blocked.get(old)
        if blocked is not None:
            self._remove(old)
            self._block(new, blocked)
            return
        if if_exists and self.schema.get(*old) is None:
            return
        table = self._table(old, (new,))
        self._remove(old)
        self._put(replace(table, database=new[0], name=new[1]))

    def _truncate(self) -> None:
        self.cur.accept("TABLE")
        key = self._name()
        table = self.schema.get(*key)
        if table is not None:  # same definition; recorded so the statement is in the history
            self.changes.append(DdlChange(key[0], key[1], table))


class _TableDefinition:
    """CREATE TABLE name (elements) options [partitions]: the columns, the key, the charset."""

    def __init__(self, statement: _Statement, key: Key) -> None:
        self.st = statement
        self.cur = statement.cur
        self.key = key
        self.pending: list[PendingColumn] = []
        self.primary: tuple[str, ...] = ()
        self.charset: str | None = None
        self.collation: str | None = None
        self.engine = ""
        self.row_format = ""
        self.versioned = False
        self.indexes: list[Index] = []

    def read(self) -> None:
        cur = self.cur
        if cur.accept("("):
            self._elements()
        self._options()
        if not cur.at_end():
            raise DdlSyntaxError("CREATE TABLE ... SELECT: the columns come from a query", cur.offset())
        charset, collation = self._charset()
        session = self.st.session
        columns = [p.column(charset, collation, session) for p in self.pending]
        key = self.primary or tuple(p.name for p in self.pending if p.primary)
        names = {c.name.lower(): c.name for c in columns}
        key = tuple(names.get(k.lower(), k) for k in key)
        columns = [replace(c, nullable=False) if c.name in key else c for c in columns]
        versioned = self.versioned or any("versioned" in p.flags for p in self.pending)
        if versioned and not any(c.period for c in columns):
            columns += hidden_period_columns()
        key = versioned_key(key, columns) if versioned else key
        indexes: list[Index] = []
        for index in self.indexes:
            indexes.append(named(indexes, index))
        table = Table(self.key[0], self.key[1], tuple(columns), key, charset, collation, tuple(indexes),
                      self.engine, self.row_format)  # fmt: skip
        self.st._put(with_hash_columns(table, session))

    def _elements(self) -> None:
        cur = self.cur
        for _ in cur.items():
            if cur.is_at("PRIMARY") or (cur.is_at("CONSTRAINT") and _constraint_is_primary(cur)):
                if cur.accept("CONSTRAINT") and not cur.is_at("PRIMARY"):
                    cur.name("a constraint name")
                cur.expect("PRIMARY", "KEY")
                self.primary = key_columns(cur)
            elif is_element(cur):
                index = read_index(cur)
                if index is not None:
                    self.indexes.append(index)
            else:
                column = read_column(cur, self.st.session)
                self.pending.append(column)
                if column.unique:
                    self.indexes.append(Index("", ((column.name, None),), unique=True))

    def _options(self) -> None:
        cur = self.cur
        while not cur.at_end():
            if cur.accept(","):
                continue
            if cur.is_at("PARTITION"):
                read_partitioning(cur)  # changes no column; only a CREATE ... SELECT's query follows
                return
            if cur.is_at("AS") or cur.is_at("SELECT") or cur.is_at("IGNORE") or cur.is_at("REPLACE"):
                return
            if cur.is_at("WITH") and cur.is_at("SYSTEM", 1):
                cur.i += 3
                self.versioned = True
                continue
            option = table_option(cur)
            if option is not None:
                setattr(self, option[0], option[1])

    def _charset(self) -> tuple[str | None, str | None]:
        charset, collation = self.charset, self.collation
        if charset is None and collation is not None:
            charset = charset_of_collation(collation)
        if collation is not None and charset is not None and charset_of_collation(collation) != charset:
            collation = None
        if charset is None:
            return self.st._database_charset(self.key[0])
        return normal_charset(charset), collation


def _constraint_is_primary(cur: Cursor) -> bool:
    ahead = 1 if cur.is_at("PRIMARY", 1) else 2
    return cur.is_at("PRIMARY", ahead)


@dataclass(frozen=True, slots=True)
class _Made:
    """What an ALTER TABLE makes of its table besides the table itself, read without the rest."""

    renamed: Key | None = None  # RENAME [TO|AS] name
    partition: PartitionCommand | None = None  # a partition command (they stand alone)
    whole: bool = False  # the partition command ends the statement

    def tables(self) -> tuple[Key, ...]:
        """The tables whose definitions come from the statement's table (unknown when it is)."""
        made = self.partition.made if self.partition is not None else None
        return tuple(k for k in (self.renamed, made) if k is not None)


def _made_by(cur: Cursor, default_db: str) -> _Made:
    """An ALTER TABLE's RENAME target or partition command, the cursor after the table's name."""
    depth = 0
    while not cur.at_end():
        command = read_command(cur, default_db) if depth == 0 else None
        if command is not None:
            return _Made(partition=command, whole=cur.at_end())
        token = cur.next("a specification")
        if token.kind == "punct" and token.text in "()":
            depth += 1 if token.text == "(" else -1
        elif depth == 0 and token.is_word("RENAME") and not (cur.is_at("COLUMN") or cur.is_at("INDEX") or
                                                                cur.is_at("KEY")):  # fmt: skip
            cur.accept("TO") or cur.accept("AS")
            return _Made(renamed=cur.qualified(default_db))
    return _Made()


def _sequence_columns(kind: str, unsigned: bool) -> list[tuple[str, str, bool]]:
    value = {"tinyint": "tinyint", "smallint": "smallint", "mediumint": "mediumint", "int": "int",
             "integer": "int"}.get(kind, "bigint")  # fmt: skip
    return [
        ("next_not_cached_value", value, unsigned), ("minimum_value", value, unsigned),
        ("maximum_value", value, unsigned), ("start_value", value, unsigned), ("increment", "bigint", False),
        ("cache_size", "bigint", True), ("cycle_option", "tinyint", True), ("cycle_count", "bigint", False),
    ]  # fmt: skip


# Names after TABLE/TABLES/INTO/LIKE/TO/ON: a rough net for statements the parser could not
# even tokenize (an unterminated string), so the tables they touch are still known.
_NAMES = re.compile(r"(?:`((?:[^`]|``)+)`|(\w+))(?:\s*\.\s*(?:`((?:[^`]|``)+)`|(\w+)))?")
_AFTER = re.compile(r"\b(?:TABLE|TABLES|TO|LIKE|ON)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?", re.IGNORECASE)


def mentioned_tables(sql: str, default_db: str) -> tuple[Key, ...]:
    found: list[Key] = []
    for m in _AFTER.finditer(sql):
        name = _NAMES.match(sql, m.end())
        if name is None:
            continue
        first = (name[1] or name[2] or "").replace("``", "`")
        second = (name[3] or name[4] or "").replace("``", "`")
        key = (first, second) if second else (default_db, first)
        if key not in found:
            found.append(key)
    return tuple(found)
