"""ALTER TABLE: every specification of one statement, applied as the server applies them.

The servers do not apply an ALTER's specifications one after another. They read them all,
then build the new column list in one pass over the old columns (mysql_prepare_alter_table
in sql/sql_table.cc, MySQL and MariaDB alike):

1. each old column, in order: dropped if a DROP COLUMN names it; replaced in place by the
   first CHANGE/MODIFY whose old name it has; else kept, under the name a RENAME COLUMN
   gives it and with the default an ALTER COLUMN sets. Names are the old table's, so
   `CHANGE a b ..., CHANGE b a ...` swaps two columns and ALTER COLUMN never sees a column
   another specification changed (the servers refuse that statement);
2. then each ADD (appended) and each CHANGE/MODIFY with FIRST/AFTER (moved), in the
   statement's order; AFTER names a column of the list built so far, under its new name.

MariaDB drops IF [NOT] EXISTS specifications that do not apply before that (judged on the
old table: handle_if_exists_options), and keeps the hidden row_start/row_end of a
system-versioned table last. The primary key follows renames, loses dropped columns, and
its columns are NOT NULL. A column defined without a charset takes the table's default as
the statement leaves it; CONVERT TO CHARACTER SET converts every character column and
grows TEXT types to hold as many characters in the new charset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from connector.schema.coldef import PendingColumn, read_column, read_default
from connector.schema.keys import follow_columns, key_parts, named, read_index, with_hash_columns
from connector.schema.model import CHARACTER_TYPES, Column, Index, Table
from connector.schema.partitions import PartitionCommand, clause_start, read_clause, read_command
from connector.schema.sqltokens import Cursor, DdlSyntaxError, Session
from connector.schema.types import BINARY_OF, MBMAXLEN, TEXT_TYPES, blob_type, charset_of_collation, normal_charset

FIRST = ""  # `after` of a FIRST placement
_TEXT_BYTES = {"tinytext": 255, "text": 65535, "mediumtext": (1 << 24) - 1, "longtext": (1 << 32) - 1}


@dataclass(slots=True)
class _Definition:
    """An ADD, CHANGE or MODIFY: the new definition, the old column it changes, where it goes."""

    pending: PendingColumn
    change: str | None  # the old column's name (CHANGE, MODIFY); None for ADD
    after: str | None  # None: no FIRST/AFTER; FIRST; or a column name
    old: Column | None = None
    column: Column | None = None


@dataclass(slots=True)
class _ColumnEdit:
    """ALTER COLUMN and RENAME COLUMN of a column no other specification changes."""

    new_name: str | None = None
    default: tuple[str | None] | None = None  # (value,): SET DEFAULT / DROP DEFAULT
    invisible: bool | None = None


@dataclass(slots=True)
class AlterPlan:
    """What one ALTER TABLE statement asks for, read in full before anything is applied."""

    definitions: list[_Definition] = field(default_factory=list)
    drops: set[str] = field(default_factory=set)  # lowered column names
    edits: dict[str, _ColumnEdit] = field(default_factory=dict)  # by lowered old name
    drop_primary: bool = False
    add_primary: tuple[str, ...] | None = None
    charset: str | None = None
    collation: str | None = None
    convert: tuple[str, str | None] | None = None  # CONVERT TO CHARACTER SET cs [COLLATE c]
    new_name: tuple[str, str] | None = None
    versioning: str | None = None  # "add" / "drop" SYSTEM VERSIONING
    engine: str | None = None
    row_format: str | None = None
    add_indexes: list[Index] = field(default_factory=list)
    drop_indexes: set[str] = field(default_factory=set)  # lowered names
    rename_indexes: dict[str, str] = field(default_factory=dict)  # lowered old name -> new
    used_edits: set[str] = field(default_factory=set)  # the edits a column took, as applied
    partition: PartitionCommand | None = None  # a partition command (connector/schema/partitions.py)


class AlterReader:
    """Reads the specifications of `ALTER TABLE name ...` after the name."""

    def __init__(self, cur: Cursor, table: Table, session: Session, default_db: str) -> None:
        self.cur = cur
        self.table = table
        self.session = session
        self.default_db = default_db
        self.plan = AlterPlan()
        self._names = {c.name.lower() for c in table.columns if not c.hidden}

    def read(self) -> AlterPlan:
        """The specifications, then the partitioning clause that may end them (PARTITION BY,
        REMOVE PARTITIONING: read apart, so no specification reads into it)."""
        cur = self.cur
        if cur.accept("WAIT"):
            cur.next("a timeout")
        cur.accept("NOWAIT")
        with cur.bounded(clause_start(cur)):
            self._specifications()
        if not cur.at_end():
            read_clause(cur)
        if not cur.at_end():
            raise DdlSyntaxError("the statement goes on after its partitioning", cur.offset())
        return self.plan

    def _specifications(self) -> None:
        cur = self.cur
        while not cur.at_end():
            self.plan.partition = read_command(cur, self.default_db)
            if self.plan.partition is not None:
                # A partition command stands alone (MySQL: after ALGORITHM, LOCK, VALIDATION);
                # the same after it are refused by both servers, but read all the same.
                while cur.accept(",") and any(cur.is_at(word) for word in _MODIFIERS):
                    self.specification()
                if not cur.at_end():
                    verb = self.plan.partition.verb
                    raise DdlSyntaxError(f"the statement goes on after its partition command ({verb})", cur.offset())
                return
            self.specification()
            cur.accept(",")

    def specification(self) -> None:
        cur = self.cur
        token = cur.peek()
        assert token is not None
        action = _SPECIFICATIONS.get(token.text.upper()) if token.kind == "word" else None
        if action is not None:
            cur.i += 1
            action(self)
        else:
            self._table_option()

    # -- ADD ---------------------------------------------------------------------------

    def add(self) -> None:
        cur = self.cur
        if cur.is_at("PRIMARY") or (cur.is_at("CONSTRAINT") and self._constraint_is_primary()):
            self.plan.add_primary = self._primary_key()
        elif is_element(cur):
            self._index()
        elif cur.accept("SYSTEM", "VERSIONING"):
            self.plan.versioning = "add"
        else:  # PERIOD FOR is an element (is_element), read and skipped by _index
            self._add_columns()

    def _add_columns(self) -> None:
        cur = self.cur
        cur.accept("COLUMN")
        if_not_exists = cur.accept("IF", "NOT", "EXISTS")
        if not cur.accept("("):
            self._add_one(if_not_exists, placed=True)
            return
        for _ in cur.items():  # ADD [COLUMN] (definitions, and indexes: MySQL's grammar allows both)
            if cur.is_at("PRIMARY") or (cur.is_at("CONSTRAINT") and self._constraint_is_primary()):
                self.plan.add_primary = self._primary_key()
            elif is_element(cur):
                self._index()
            else:
                self._add_one(if_not_exists, placed=False)

    def _add_one(self, if_not_exists: bool, placed: bool) -> None:
        pending = read_column(self.cur, self.session)
        after = self._place() if placed else None
        lowered = pending.name.lower()
        if if_not_exists and (lowered in self._names or any(d.pending.name.lower() == lowered
                                                            for d in self.plan.definitions)):
            return  # MariaDB: the column exists (or an earlier specification adds it): dropped with a note
        self.plan.definitions.append(_Definition(pending, None, after))

    def _place(self) -> str | None:
        cur = self.cur
        if cur.accept("FIRST"):
            return FIRST
        if cur.accept("AFTER"):
            return cur.name("a column name")
        return None

    def _constraint_is_primary(self) -> bool:
        """CONSTRAINT [IF NOT EXISTS] [name] PRIMARY KEY ...?"""
        cur = self.cur
        ahead = 4 if cur.is_at("IF", 1) else 1
        if not any(cur.is_at(word, ahead) for word in ("PRIMARY", "UNIQUE", "FOREIGN", "CHECK")):
            ahead += 1  # the constraint's name
        return cur.is_at("PRIMARY", ahead)

    def _primary_key(self) -> tuple[str, ...] | None:
        cur = self.cur
        if cur.accept("CONSTRAINT") and not cur.is_at("PRIMARY"):
            cur.accept("IF", "NOT", "EXISTS") or cur.name("a constraint name")
        cur.expect("PRIMARY", "KEY")
        if cur.accept("IF", "NOT", "EXISTS") and self.table.primary_key:
            cur.skip_to_separator()
            return self.plan.add_primary
        return key_columns(cur)

    def _index(self) -> None:
        index = read_index(self.cur)
        if index is not None:
            self.plan.add_indexes.append(index)

    # -- DROP --------------------------------------------------------------------------

    def drop(self) -> None:
        cur = self.cur
        if cur.accept("PRIMARY", "KEY"):
            self.plan.drop_primary = True
        elif cur.accept("SYSTEM", "VERSIONING"):
            self.plan.versioning = "drop"
        elif cur.is_at("INDEX") or cur.is_at("KEY") or cur.is_at("CONSTRAINT"):
            cur.i += 1
            if_exists = cur.accept("IF", "EXISTS")
            name = cur.name("an index name")
            cur.accept("KEY")  # MariaDB reads DROP CONSTRAINT PRIMARY KEY too
            if name.upper() == "PRIMARY" and (self.table.primary_key or not if_exists):
                self.plan.drop_primary = True
            self.plan.drop_indexes.add(name.lower())
        elif _drops_other(cur):
            cur.skip_to_separator()
        else:
            cur.accept("COLUMN")
            if_exists = cur.accept("IF", "EXISTS")
            name = cur.name("a column name")
            cur.accept("RESTRICT") or cur.accept("CASCADE")
            if not if_exists or name.lower() in self._names:
                self.plan.drops.add(name.lower())

    # -- CHANGE / MODIFY / RENAME / ALTER -------------------------------------------------

    def change(self, renames: bool = True) -> None:
        """CHANGE [COLUMN] [IF EXISTS] old definition; MODIFY (renames=False): the same without `old`."""
        cur = self.cur
        cur.accept("COLUMN")
        if_exists = cur.accept("IF", "EXISTS")
        old = cur.name("a column name") if renames else None
        pending = read_column(cur, self.session)
        old = pending.name if old is None else old
        after = self._place()
        if if_exists and old.lower() not in self._names:
            return
        self.plan.definitions.append(_Definition(pending, old, after))

    def modify(self) -> None:
        self.change(renames=False)

    def rename(self) -> None:
        cur = self.cur
        if cur.accept("COLUMN"):
            if_exists = cur.accept("IF", "EXISTS")
            old = cur.name("a column name")
            cur.expect("TO")
            new = cur.name("a column name")
            if not if_exists or old.lower() in self._names:
                self._edit(old).new_name = new
        elif cur.accept("INDEX") or cur.accept("KEY"):
            cur.accept("IF", "EXISTS")
            old = cur.name("an index name")
            cur.expect("TO")
            self.plan.rename_indexes[old.lower()] = cur.name("an index name")
        else:
            cur.accept("TO") or cur.accept("AS")
            self.plan.new_name = cur.qualified(self.default_db)

    def alter(self) -> None:
        cur = self.cur
        if cur.is_at("INDEX") or cur.is_at("KEY") or cur.is_at("CHECK") or cur.is_at("CONSTRAINT"):
            cur.skip_to_separator()
            return
        cur.accept("COLUMN")
        if_exists = cur.accept("IF", "EXISTS")
        name = cur.name("a column name")
        # IF EXISTS of a column the table does not have: read, not applied
        edit = self._edit(name) if not if_exists or name.lower() in self._names else _ColumnEdit()
        if cur.accept("SET", "DEFAULT"):
            edit.default = (read_default(cur),)
            if self._type_of(name) == "timestamp":  # read in the session's zone: kept in UTC (schema/zones.py)
                edit.default = (self.session.timestamp_in_utc(edit.default[0]),)
        elif cur.accept("DROP", "DEFAULT"):
            edit.default = (None,)
        elif cur.accept("SET", "VISIBLE"):
            edit.invisible = False
        elif cur.accept("SET", "INVISIBLE"):
            edit.invisible = True
        else:
            raise DdlSyntaxError(f"ALTER COLUMN `{name}`: unknown change", cur.offset())

    def _type_of(self, name: str) -> str | None:
        index = self.table.index_of(name)
        return self.table.columns[index].data_type if index >= 0 else None

    def _edit(self, name: str) -> _ColumnEdit:
        return self.plan.edits.setdefault(name.lower(), _ColumnEdit())

    # -- charsets and other table options -------------------------------------------------

    def convert(self) -> None:
        cur = self.cur
        cur.expect("TO")
        if not (cur.accept("CHARACTER", "SET") or cur.accept("CHARSET") or cur.accept("CHAR", "SET")):
            raise DdlSyntaxError("CONVERT TO without CHARACTER SET", cur.offset())
        cur.accept("=")
        charset = normal_charset(cur.name("a charset"))
        collation = None
        if cur.accept("COLLATE"):
            cur.accept("=")
            collation = cur.name("a collation").lower()
        self.plan.convert = (charset, collation)

    def _table_option(self) -> None:
        option = table_option(self.cur)
        if option is not None:
            setattr(self.plan, option[0], option[1])


def is_element(cur: Cursor) -> bool:
    """An index, key, constraint or period that is not the primary key, in ALTER TABLE ... ADD
    and CREATE TABLE alike (a column may be named `vector`, `period` or `system`: only these
    words followed by what an element has count)."""
    token = cur.peek()
    if token is not None and token.is_word("INDEX", "KEY", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK",
                                           "CONSTRAINT"):  # fmt: skip
        return True
    if cur.is_at("VECTOR"):
        return cur.is_at("INDEX", 1) or cur.is_at("KEY", 1)
    return _is_period(cur)


def _is_period(cur: Cursor) -> bool:
    """PERIOD FOR ... / PERIOD IF [NOT] EXISTS FOR ... (MariaDB), not a column named `period`."""
    return cur.is_at("PERIOD") and (cur.is_at("FOR", 1) or cur.is_at("IF", 1))


def _drops_other(cur: Cursor) -> bool:
    """DROP of something that is no column: FOREIGN KEY, CHECK, PERIOD FOR."""
    return cur.is_at("FOREIGN") or cur.is_at("CHECK") or _is_period(cur)


def key_columns(cur: Cursor) -> tuple[str, ...]:
    """[name] [USING x] (col [(len)] [ASC|DESC], ...) [options] of a key; the column names."""
    while not cur.is_punct("("):
        cur.next("a key column list")
    names = tuple(name for name, _ in key_parts(cur) if name)  # a functional key part has none
    cur.skip_to_separator()  # USING ..., COMMENT ..., KEY_BLOCK_SIZE ...
    return names


def table_option(cur: Cursor) -> tuple[str, str] | None:
    """One table option: ("charset" | "collation" | "engine" | "row_format", value); None for
    the others, which are skipped (COMMENT, AUTO_INCREMENT, ...)."""
    cur.accept("DEFAULT")
    if cur.accept("CHARACTER", "SET") or cur.accept("CHARSET") or cur.accept("CHAR", "SET"):
        cur.accept("=")
        return "charset", normal_charset(cur.name("a charset"))
    for word, kind in (("COLLATE", "collation"), ("ENGINE", "engine"), ("TYPE", "engine"),
                       ("ROW_FORMAT", "row_format")):  # fmt: skip
        if cur.accept(word):
            cur.accept("=")
            return kind, cur.name(f"a value of {word}").lower()
    _skip_option(cur)
    return None


def _skip_option(cur: Cursor) -> None:
    """A table option that changes no column: a word, an optional `=`, and its value."""
    token = cur.next("a table option")
    if token.kind == "punct" and token.text == "(":
        cur.i -= 1
        cur.skip_balanced()
        return
    if token.kind != "word":
        raise DdlSyntaxError(f"unexpected {token.text!r}", token.offset)
    upper = token.text.upper()
    if upper in _FLAG_OPTIONS or (upper == "START" and cur.accept("TRANSACTION")):
        return  # START TRANSACTION: MySQL's CREATE TABLE ... SELECT, logged atomically
    if upper in _TWO_WORD_OPTIONS:
        cur.next("a table option")
    cur.accept("=")
    if upper == "UNION" and cur.is_punct("("):
        cur.skip_balanced()
        return
    value = cur.next(f"a value of {token.text}")
    if value.kind == "punct" and value.text == "(":
        cur.i -= 1
        cur.skip_balanced()
    elif upper in ("TABLESPACE",) and cur.accept("STORAGE"):
        cur.next("a storage")


# Options without a value, and options whose name is two words.
_FLAG_OPTIONS = frozenset({"FORCE", "ENABLE", "DISABLE", "DISCARD", "IMPORT", "SECONDARY_LOAD", "SECONDARY_UNLOAD",
                           "KEYS", "TABLESPACE_PLACEHOLDER", "VALIDATION", "NOWAIT"})  # fmt: skip
_TWO_WORD_OPTIONS = frozenset({"DATA", "INDEX"})


def _order_by(reader: AlterReader) -> None:
    reader.cur.expect("BY")
    while True:
        reader.cur.name("a column name")
        while reader.cur.accept("."):  # table.column, db.table.column
            reader.cur.name("a column name")
        reader.cur.accept("ASC") or reader.cur.accept("DESC")
        if not (reader.cur.is_punct(",") and not _spec_follows(reader.cur)):
            return
        reader.cur.i += 1


def _spec_follows(cur: Cursor) -> bool:
    token = cur.peek(1)
    return token is not None and token.kind == "word" and token.text.upper() in _SPECIFICATIONS


def _with(reader: AlterReader) -> None:  # WITH|WITHOUT VALIDATION, WITH|WITHOUT SYSTEM VERSIONING (a table option)
    cur = reader.cur
    adds = cur.tokens[cur.i - 1].is_word("WITH")
    if cur.accept("SYSTEM", "VERSIONING"):
        reader.plan.versioning = "add" if adds else "drop"
    else:
        cur.expect("VALIDATION")


def _one_value(reader: AlterReader) -> None:  # ALGORITHM [=] x, LOCK [=] x
    reader.cur.accept("=")
    reader.cur.next("a value")


# alter_commands_modifier (MySQL's sql/sql_yacc.yy): what may come with a partition command
_MODIFIERS = ("ALGORITHM", "LOCK", "WITH", "WITHOUT")


def _no_column(reader: AlterReader) -> None:
    """DISCARD/IMPORT TABLESPACE, ENABLE/DISABLE KEYS, FORCE, SECONDARY_LOAD/UNLOAD: no column
    changes (the partition commands are read apart: connector/schema/partitions.py)."""
    reader.cur.skip_to_separator()


_SPECIFICATIONS: dict[str, Callable[[AlterReader], None]] = {
    "ADD": AlterReader.add, "DROP": AlterReader.drop, "CHANGE": AlterReader.change, "MODIFY": AlterReader.modify,
    "RENAME": AlterReader.rename, "ALTER": AlterReader.alter, "CONVERT": AlterReader.convert,
    "ORDER": _order_by, "WITH": _with, "WITHOUT": _with,
    **dict.fromkeys(("ALGORITHM", "LOCK"), _one_value),
    **dict.fromkeys(("DISCARD", "IMPORT", "ENABLE", "DISABLE", "FORCE", "SECONDARY_LOAD", "SECONDARY_UNLOAD"),
                    _no_column),
}  # fmt: skip


# -- applying a plan ----------------------------------------------------------------------


def apply_plan(table: Table, plan: AlterPlan, session: Session) -> Table:
    """The table after the statement (see the module's docstring for the order)."""
    charset, collation = _table_charset(table, plan)
    for definition in plan.definitions:
        definition.column = definition.pending.column(charset, collation, session)
    placed = _second_pass(table, plan, _first_pass(table, plan))
    _check(table, plan, placed)
    if plan.convert is not None:
        for entry in placed:
            entry.column = _converted(entry.column, *plan.convert)
    key = _primary_key(table, plan, placed)
    names = {p.column.name.lower() for p in placed}
    columns = [_without_aliases(p.column, names) for p in placed]
    columns = [replace(c, nullable=False) if c.name in key else c for c in columns]
    versioned = plan.versioning == "add" or (plan.versioning is None and any(c.period for c in table.columns))
    if versioned and not any(c.period for c in columns):  # implicit row_start/row_end: kept, last
        columns += [c for c in table.columns if c.hidden and c.period] or hidden_period_columns()
    name = plan.new_name or (table.database, table.name)
    altered = replace(table, database=name[0], name=name[1], columns=tuple(columns),
                      primary_key=versioned_key(key, columns), charset=charset, collation=collation,
                      engine=plan.engine or table.engine, row_format=plan.row_format or table.row_format)  # fmt: skip
    altered = replace(altered, indexes=_indexes(table, plan, placed))
    return with_hash_columns(altered, session)


def _indexes(table: Table, plan: AlterPlan, placed: list[_Placed]) -> tuple[Index, ...]:
    """Indexes not dropped, renamed, their parts following their columns; then the added ones
    (named as the server names them), the columns' own UNIQUE ones among them. A kept key
    forgets USING HASH: MariaDB rebuilds it as a B-tree when one holds it (seen live)."""
    now: dict[str, str | None] = {c.name.lower(): None for c in table.columns}
    added = {p.column.name.lower(): p.column.name for p in placed if not p.old_name}
    now.update({k: added[k] for k in now if k in added})
    now.update({p.old_name: p.column.name for p in placed if p.old_name})
    kept = [replace(i, name=plan.rename_indexes.get(i.name.lower(), i.name), using_hash=False)
            for i in table.indexes if i.name.lower() not in plan.drop_indexes]  # fmt: skip
    indexes = list(follow_columns(tuple(kept), now))
    new = [Index("", ((d.pending.name, None),), unique=True) for d in plan.definitions if d.pending.unique]
    for index in [*plan.add_indexes, *new]:
        indexes.append(named(indexes, index))
    return tuple(indexes)


def versioned_key(key: tuple[str, ...], columns: list[Column]) -> tuple[str, ...]:
    """MariaDB adds a system-versioned table's ROW END column to its primary key (and drops it
    with the versioning): history rows share the key of the row they were. The implicit,
    hidden row_end is in it too, yet neither SHOW CREATE TABLE nor information_schema shows it:
    the tracked key leaves it out as they do."""
    ends = [c.name for c in columns if c.period == "end" and not c.hidden]
    key = tuple(k for k in key if any(c.name == k and not c.hidden for c in columns))
    return (*key, ends[0]) if key and ends and ends[0] not in key else key


def _check(table: Table, plan: AlterPlan, placed: list[_Placed]) -> None:
    """What the servers refuse (and so never log): a DROP of no column, two columns of one
    name. Seeing it means the tracked table is not the server's: unreadable, not a guess."""
    names = {c.name.lower() for c in table.columns if not c.hidden}
    unknown = sorted(plan.drops - names)
    if unknown:
        raise DdlSyntaxError(f"DROP COLUMN `{unknown[0]}`: no such column in `{table.name}`")
    stray = sorted(set(plan.edits) - plan.used_edits)
    if stray:  # ALTER / RENAME COLUMN of a column another specification drops or changes
        raise DdlSyntaxError(f"ALTER COLUMN `{stray[0]}`: no such unchanged column in `{table.name}`")
    seen: set[str] = set()
    for entry in placed:
        lowered = entry.column.name.lower()
        if lowered in seen:
            raise DdlSyntaxError(f"column `{entry.column.name}` twice in `{table.name}`")
        seen.add(lowered)


def hidden_period_columns() -> list[Column]:
    """The row_start / row_end that MariaDB adds to a table WITH SYSTEM VERSIONING of its own."""
    return [
        Column(name, "timestamp", ("6",), nullable=False, invisible=True, period=end, hidden=True)
        for name, end in (("row_start", "start"), ("row_end", "end"))
    ]


def _table_charset(table: Table, plan: AlterPlan) -> tuple[str | None, str | None]:
    if plan.convert is not None:
        return plan.convert
    if plan.charset is not None:
        collation = plan.collation if plan.collation and charset_of_collation(plan.collation) == plan.charset else None
        return plan.charset, collation
    if plan.collation is not None:
        return charset_of_collation(plan.collation), plan.collation
    return table.charset, table.collation


@dataclass(slots=True)
class _Placed:
    """A column of the new list, and the definition it comes from (None: an old one kept)."""

    column: Column
    definition: _Definition | None = None
    old_name: str = ""  # lowered name before the statement, for the primary key


def _first_pass(table: Table, plan: AlterPlan) -> list[_Placed]:
    placed: list[_Placed] = []
    pending = list(plan.definitions)
    for old in table.columns:
        lowered = old.name.lower()
        if old.period and not old.hidden and lowered in plan.drops and plan.versioning != "drop":
            # MariaDB keeps the table versioned: its own row_start/row_end take the place of the
            # declared ROW START/END columns dropped (until a later ALTER moves them last)
            placed.append(_Placed(hidden_period_columns()[0 if old.period == "start" else 1]))
            continue
        if old.hidden or lowered in plan.drops:
            continue
        definition = next((d for d in pending if d.change is not None and d.change.lower() == lowered), None)
        if definition is None:
            placed.append(_Placed(_edited(old, plan, lowered), None, lowered))
            continue
        definition.old = old
        assert definition.column is not None
        definition.column = _renamed(old, definition.column)
        placed.append(_Placed(definition.column, definition, lowered))
        pending.remove(definition)
    return placed


def _second_pass(table: Table, plan: AlterPlan, placed: list[_Placed]) -> list[_Placed]:
    for definition in plan.definitions:
        assert definition.column is not None
        if definition.change is not None and definition.old is None:
            _modify_added(table, definition, placed)
        if definition.after is None:
            if definition.old is None:  # an ADD (or MariaDB's MODIFY of one): last
                placed.append(_Placed(_added(definition.column, plan), definition))
            continue
        entry = next((p for p in placed if p.definition is definition), None)
        if entry is not None:
            placed.remove(entry)
        else:
            entry = _Placed(_added(definition.column, plan), definition)
        placed.insert(_position(placed, definition.after, table), entry)
    return placed


def _modify_added(table: Table, definition: _Definition, placed: list[_Placed]) -> None:
    """MariaDB: a MODIFY (or CHANGE to the same name) of a column this statement adds replaces
    that column's definition; MySQL refuses it (and so never logs it)."""
    lowered = definition.pending.name.lower()
    entry = next((p for p in placed if not p.old_name and p.column.name.lower() == lowered), None)
    if entry is None:
        raise DdlSyntaxError(f"unknown column `{definition.change}` in `{table.name}`")
    placed.remove(entry)


def _added(column: Column, plan: AlterPlan) -> Column:
    """A column the statement adds: no earlier names; MariaDB applies an ALTER COLUMN of its name."""
    lowered = column.name.lower()
    column = replace(column, aliases=())
    return column if lowered in plan.used_edits else _edited(column, plan, lowered)


def _position(placed: list[_Placed], after: str, table: Table) -> int:
    if after == FIRST:
        return 0
    lowered = after.lower()
    for i, entry in enumerate(placed):
        if entry.column.name.lower() == lowered:
            return i + 1
    raise DdlSyntaxError(f"AFTER `{after}`: no such column in `{table.name}`")


def _edited(old: Column, plan: AlterPlan, lowered: str) -> Column:
    edit = plan.edits.get(lowered)
    if edit is None:
        return old
    plan.used_edits.add(lowered)
    return _apply_edit(old, edit)


def _apply_edit(old: Column, edit: _ColumnEdit) -> Column:
    column = old
    if edit.new_name is not None:
        column = column.renamed(edit.new_name)
    if edit.default is not None:
        column = replace(column, default=edit.default[0])
    if edit.invisible is not None:
        column = replace(column, invisible=edit.invisible)
    return column


def _renamed(old: Column, new: Column) -> Column:
    """A changed column keeps its earlier names (Avro aliases); a MODIFY keeps its name."""
    return replace(new, aliases=old.renamed(new.name).aliases)


def _without_aliases(column: Column, taken: set[str]) -> Column:
    """A column's earlier names that another column of the table now has (`taken`, lowered) are no
    longer its: an alias would send that column's old data to the wrong field."""
    kept = tuple(a for a in column.aliases if a.lower() not in taken or a.lower() == column.name.lower())
    kept = tuple(a for a in kept if a != column.name)
    return column if kept == column.aliases else replace(column, aliases=kept)


def _primary_key(table: Table, plan: AlterPlan, placed: list[_Placed]) -> tuple[str, ...]:
    by_lower = {p.column.name.lower(): p.column.name for p in placed}
    if plan.add_primary is not None:
        return tuple(by_lower.get(n.lower(), n) for n in plan.add_primary)
    inline = [p.column.name for p in placed if p.definition is not None and p.definition.pending.primary]
    if inline:
        return (inline[-1],)
    if plan.drop_primary:
        return ()
    # A key part follows its column by the old name; a column the statement adds under a
    # dropped key column's name takes its place (sql/sql_table.cc matches key parts to the
    # new list: changed columns by their old names, added ones by theirs).
    now = {p.old_name: p.column.name for p in placed if p.old_name}
    added = {p.column.name.lower(): p.column.name for p in placed if not p.old_name}
    return tuple(now.get(k.lower()) or added[k.lower()] for k in table.primary_key
                 if k.lower() in now or k.lower() in added)  # fmt: skip


def _converted(column: Column, charset: str, collation: str | None) -> Column:
    """CONVERT TO CHARACTER SET: character columns take the charset; a TEXT type grows to hold
    its characters in it (sql/sql_table.cc: the blob type of char_length * mbmaxlen)."""
    if column.data_type not in CHARACTER_TYPES or column.charset == "binary":
        return column
    name = column.data_type
    if name in TEXT_TYPES:
        chars = _TEXT_BYTES[name] // MBMAXLEN.get(column.charset or "", 1)
        name = blob_type(chars * MBMAXLEN.get(charset, 1), text=True)
    if charset == "binary":
        name = BINARY_OF.get(name, name)
        return replace(column, data_type=name, charset="binary", collation="binary")
    return replace(column, data_type=name, charset=charset, collation=collation)
