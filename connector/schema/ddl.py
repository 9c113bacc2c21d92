"""Applying DDL statements from QUERY events to the tracked schema.

`apply_ddl(schema, sql, default_db)` changes `schema` as the statement changed the
server's tables and returns what changed. It understands CREATE/ALTER/DROP/RENAME/
TRUNCATE TABLE, CREATE TABLE ... LIKE, CREATE/ALTER/DROP DATABASE; within ALTER TABLE
the column changes (ADD/DROP/MODIFY/CHANGE/RENAME COLUMN, FIRST/AFTER), the primary key,
charsets, ENUM/SET labels, generated and invisible columns. A column RENAME COLUMN or
CHANGE COLUMN renames keeps its earlier names (`Column.aliases`, for the Avro schemas'
field aliases) until another column takes one of them. Parts that cannot change a
column (indexes, engines, partitions, algorithm hints) are skipped. Statements that are
not about tables (views, routines, users, grants) change nothing. A statement it cannot
read raises `DdlSyntaxError`; the caller decides what to do (see connector/schema/tracker.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from connector.errors import SluiceError
from connector.schema.model import BINARY_TYPES, CHARACTER_TYPES, Column, Database, Schema, Table, without_aliases
from connector.schema.sqltokens import Cursor, DdlSyntaxError


class UntrackedTableError(SluiceError):
    """The statement changes a table the tracked schema does not hold."""

    def __init__(self, database: str, table: str) -> None:
        super().__init__(f"table `{database}`.`{table}` is not in the tracked schema")
        self.database = database
        self.table = table


@dataclass(frozen=True, slots=True)
class DdlChange:
    """One table or database a statement created, changed or removed."""

    database: str
    table: str  # "" for a database-level change
    definition: Table | None  # None: removed


# Synonyms -> (canonical type, implied params, implied unsigned)
_TYPE_ALIASES: dict[str, tuple[str, tuple[str, ...] | None, bool]] = {
    "integer": ("int", None, False), "int4": ("int", None, False), "int1": ("tinyint", None, False),
    "int2": ("smallint", None, False), "int3": ("mediumint", None, False), "int8": ("bigint", None, False),
    "middleint": ("mediumint", None, False), "bool": ("tinyint", ("1",), False),
    "boolean": ("tinyint", ("1",), False), "dec": ("decimal", None, False), "numeric": ("decimal", None, False),
    "fixed": ("decimal", None, False), "real": ("double", None, False), "float8": ("double", None, False),
    "float4": ("float", None, False), "nchar": ("char", None, False), "nvarchar": ("varchar", None, False),
    "serial": ("bigint", None, True), "character": ("char", None, False),
}  # fmt: skip
_KNOWN_TYPES = frozenset(
    {
        "bit", "tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "decimal",
        "date", "time", "datetime", "timestamp", "year", "char", "varchar", "binary", "varbinary",
        "tinyblob", "blob", "mediumblob", "longblob", "tinytext", "text", "mediumtext", "longtext",
        "enum", "set", "json", "geometry", "point", "linestring", "polygon", "multipoint",
        "multilinestring", "multipolygon", "geometrycollection", "geomcollection", "vector",
        "inet4", "inet6", "uuid", "long", "xmltype",
    }
)  # fmt: skip


def apply_ddl(schema: Schema, sql: str, default_db: str) -> list[DdlChange]:
    """Apply one statement to `schema`; returns the changes (empty for non-table statements)."""
    cur = Cursor(sql)
    if cur.at_end():
        return []
    return _Statement(schema, cur, default_db).run()


def charset_of_collation(collation: str) -> str:
    return collation.split("_", 1)[0].lower()


class _Statement:
    def __init__(self, schema: Schema, cur: Cursor, default_db: str) -> None:
        self.schema = schema
        self.cur = cur
        self.db = default_db
        self.changes: list[DdlChange] = []

    def run(self) -> list[DdlChange]:
        cur = self.cur
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

    def _put(self, table: Table) -> None:
        self.schema.put(table)
        self.changes.append(DdlChange(table.database, table.name, table))

    def _remove(self, database: str, name: str) -> None:
        if self.schema.drop(database, name) is not None:
            self.changes.append(DdlChange(database, name, None))

    def _table(self, key: tuple[str, str]) -> Table:
        table = self.schema.get(*key)
        if table is None:
            raise UntrackedTableError(*key)
        return table

    def _if_exists(self) -> bool:
        return self.cur.accept("IF", "EXISTS")

    def _if_not_exists(self) -> bool:
        return self.cur.accept("IF", "NOT", "EXISTS")

    # -- CREATE ----------------------------------------------------------------------

    def _create(self) -> None:
        cur = self.cur
        cur.accept("OR", "REPLACE")
        if cur.accept("TEMPORARY"):
            return  # temporary tables are not replicated in row format
        if cur.accept("TABLE"):
            self._create_table()
        elif cur.accept("DATABASE") or cur.accept("SCHEMA"):
            self._create_database()

    def _create_database(self) -> None:
        self._if_not_exists()
        name = self.cur.name("a database name")
        charset, collation = self._charset_options()
        self.schema.databases[name] = Database(name, charset, collation)
        self.changes.append(DdlChange(name, "", None))

    def _create_table(self) -> None:
        cur = self.cur
        if_not_exists = self._if_not_exists()
        key = cur.qualified(self.db)
        if if_not_exists and self.schema.get(*key) is not None:
            return
        if cur.accept("LIKE") or (cur.is_punct("(") and (t := cur.peek(1)) is not None and t.is_word("LIKE")):
            self._create_like(key)
            return
        columns: list[Column] = []
        pk: tuple[str, ...] = ()
        if cur.accept("("):
            pk = self._table_elements(columns)
        charset, collation = self._table_options()
        if not cur.at_end() and (cur.accept("AS") or ((t := cur.peek()) is not None and t.is_word("SELECT"))):
            raise DdlSyntaxError("CREATE TABLE ... SELECT: the columns come from a query", 0)
        charset, collation = self._inherit(key[0], charset, collation)
        columns = [self._with_charset(c, charset, collation) for c in columns]
        self._put(Table(key[0], key[1], tuple(columns), pk, charset, collation))

    def _create_like(self, key: tuple[str, str]) -> None:
        cur = self.cur
        wrapped = cur.accept("(")
        cur.accept("LIKE")
        source = self._table(cur.qualified(self.db))
        if wrapped:
            cur.expect(")")
        # A new table: the source's earlier column names are not its history.
        self._put(replace(without_aliases(source), database=key[0], name=key[1]))

    def _inherit(self, database: str, charset: str | None, collation: str | None) -> tuple[str | None, str | None]:
        if charset is None and collation is not None:
            charset = charset_of_collation(collation)
        if charset is None:
            db = self.schema.databases.get(database)
            if db is not None:
                return db.charset, db.collation
        return charset, collation

    @staticmethod
    def _with_charset(col: Column, charset: str | None, collation: str | None) -> Column:
        if col.data_type in BINARY_TYPES:
            return replace(col, charset="binary", collation="binary")
        if col.data_type not in CHARACTER_TYPES or col.charset is not None:
            return col
        if col.collation is not None:
            return replace(col, charset=charset_of_collation(col.collation))
        return replace(col, charset=charset, collation=collation)

    def _table_elements(self, columns: list[Column]) -> tuple[str, ...]:
        """Column and index definitions up to the closing `)`; returns the primary key."""
        cur = self.cur
        pk: tuple[str, ...] = ()
        while True:
            token = cur.peek()
            if token is None:
                raise DdlSyntaxError("table definition is not closed", cur.length)
            if token.kind == "word" and _is_constraint_word(token.text):
                found = self._constraint()
                pk = found or pk
            else:
                col, inline_pk = self._column_definition()
                columns.append(col)
                if inline_pk:
                    pk = (col.name,)
            if cur.accept(")"):
                return pk
            cur.expect(",")

    def _constraint(self) -> tuple[str, ...]:
        """An index or constraint element; returns the key columns when it is the primary key."""
        cur = self.cur
        if cur.accept("CONSTRAINT"):
            token = cur.peek()
            if token is not None and not token.is_word("PRIMARY", "UNIQUE", "FOREIGN", "CHECK"):
                cur.name("a constraint name")
        if cur.accept("PRIMARY", "KEY"):
            return self._key_columns()
        cur.skip_to_separator()
        return ()

    def _key_columns(self) -> tuple[str, ...]:
        cur = self.cur
        while not cur.is_punct("("):  # index name or USING BTREE before the column list
            cur.next("a key column list")
        cur.expect("(")
        names = []
        while True:
            names.append(cur.name("a key column"))
            if cur.is_punct("("):  # prefix length: PRIMARY KEY (name(10))
                cur.skip_balanced()
            cur.accept("ASC") or cur.accept("DESC")
            if cur.accept(")"):
                break
            cur.expect(",")
        cur.skip_to_separator()  # USING ..., COMMENT ...
        return tuple(names)

    # -- column definitions ------------------------------------------------------------

    def _column_definition(self) -> tuple[Column, bool]:
        name = self.cur.name("a column name")
        return self._column_rest(name)

    def _column_rest(self, name: str) -> tuple[Column, bool]:
        serial = (t := self.cur.peek()) is not None and t.is_word("SERIAL")
        data_type, params, unsigned = self._data_type()
        col = Column(name, data_type, params, unsigned, nullable=not serial)
        attrs = _ColumnAttributes(self.cur)
        attrs.read()
        col = replace(
            col, charset=attrs.charset, collation=attrs.collation, nullable=attrs.nullable and col.nullable,
            generated=attrs.generated, invisible=attrs.invisible, default=attrs.default,
        )  # fmt: skip
        if attrs.primary:
            col = replace(col, nullable=False)
        return col, attrs.primary

    def _data_type(self) -> tuple[str, tuple[str, ...], bool]:
        cur = self.cur
        token = cur.next("a data type")
        word = token.text.lower()
        if word == "national":
            word = cur.next("a data type").text.lower()
        if word in ("char", "character") and cur.accept("VARYING"):
            word = "varchar"
        elif word == "double":
            cur.accept("PRECISION")
        elif word == "long":
            word = _long_type(cur)
        unsigned = False
        params: tuple[str, ...] | None = None
        if word in _TYPE_ALIASES:
            word, params, unsigned = _TYPE_ALIASES[word]
        if word not in _KNOWN_TYPES:
            raise DdlSyntaxError(f"unknown data type {token.text!r}", token.offset)
        if cur.is_punct("("):
            params = self._type_params()
        params = _normalise_params(word, params or ())
        if word == "float" and len(params) == 1 and int(params[0]) > 24:
            word, params = "double", ()
        while (t := cur.peek()) is not None and t.is_word("UNSIGNED", "SIGNED", "ZEROFILL"):
            unsigned = unsigned or t.text.upper() in ("UNSIGNED", "ZEROFILL")
            cur.i += 1
        return word, params, unsigned

    def _type_params(self) -> tuple[str, ...]:
        cur = self.cur
        cur.expect("(")
        out = []
        while not cur.accept(")"):
            token = cur.next("a type parameter")
            if token.kind == "punct" and token.text == ",":
                continue
            out.append(token.text)
        return tuple(out)

    # -- ALTER ---------------------------------------------------------------------------

    def _alter(self) -> None:
        cur = self.cur
        cur.accept("ONLINE")
        cur.accept("IGNORE")
        if cur.accept("TABLE"):
            self._alter_table()
        elif cur.accept("DATABASE") or cur.accept("SCHEMA"):
            token = cur.peek()
            name = self.db if token is None or _is_charset_word(token.text) else cur.name("a database name")
            charset, collation = self._charset_options()
            old = self.schema.databases.get(name, Database(name))
            self.schema.databases[name] = Database(name, charset or old.charset, collation or old.collation)
            self.changes.append(DdlChange(name, "", None))

    def _alter_table(self) -> None:
        cur = self.cur
        self._if_exists()
        key = cur.qualified(self.db)
        editor = _TableEditor(self._table(key), self)
        while not cur.at_end():
            editor.specification()
            if not cur.accept(","):
                if not cur.at_end() and (t := cur.peek()) is not None and t.is_word("PARTITION"):
                    break  # a partition clause ends the list and changes no column
                if not cur.at_end():
                    raise DdlSyntaxError(f"unexpected {cur.peek()!r} in ALTER TABLE", cur._offset())
        table = editor.result()
        if table.key != key:
            self._remove(*key)
        self._put(table)

    def _charset_options(self) -> tuple[str | None, str | None]:
        """[DEFAULT] CHARACTER SET [=] x / CHARSET x / COLLATE x, and other options skipped."""
        cur = self.cur
        found: dict[str, str] = {}
        while not cur.at_end():
            cur.accept("DEFAULT")
            option = _charset_option(cur)
            if option is None:
                cur.next("an option")
            else:
                found[option[0]] = option[1]
        charset, collation = found.get("charset"), found.get("collation")
        if charset is None and collation is not None:
            charset = charset_of_collation(collation)
        return charset, collation

    def _table_options(self) -> tuple[str | None, str | None]:
        cur = self.cur
        found: dict[str, str] = {}
        while not cur.at_end():
            token = cur.peek()
            assert token is not None
            if token.is_word("AS", "SELECT", "PARTITION"):
                if token.is_word("PARTITION"):
                    cur.i = len(cur.tokens)
                break
            cur.accept("DEFAULT")
            option = _charset_option(cur)
            if option is not None:
                found[option[0]] = option[1]
            elif cur.is_punct("("):
                cur.skip_balanced()
            else:
                cur.i += 1
        return found.get("charset"), found.get("collation")

    # -- DROP / RENAME / TRUNCATE ----------------------------------------------------------

    def _drop(self) -> None:
        cur = self.cur
        if cur.accept("TEMPORARY"):
            return
        if cur.accept("TABLE") or cur.accept("TABLES"):
            self._if_exists()
            while True:
                self._remove(*cur.qualified(self.db))
                if not cur.accept(","):
                    break
        elif cur.accept("DATABASE") or cur.accept("SCHEMA"):
            self._if_exists()
            name = cur.name("a database name")
            for table in self.schema.tables_of(name):
                self._remove(table.database, table.name)
            self.schema.databases.pop(name, None)
            self.changes.append(DdlChange(name, "", None))

    def _rename(self) -> None:
        cur = self.cur
        if not (cur.accept("TABLE") or cur.accept("TABLES")):
            return  # RENAME USER
        while True:
            old = cur.qualified(self.db)
            cur.expect("TO")
            new = cur.qualified(self.db)
            table = self._table(old)
            self._remove(*old)
            self._put(replace(table, database=new[0], name=new[1]))
            if not cur.accept(","):
                break

    def _truncate(self) -> None:
        self.cur.accept("TABLE")
        key = self.cur.qualified(self.db)
        table = self.schema.get(*key)
        if table is not None:  # same definition; recorded so the statement is in the history
            self.changes.append(DdlChange(key[0], key[1], table))


class _TableEditor:
    """One ALTER TABLE's specifications applied in order to a table value.

    The servers resolve a specification's column (RENAME COLUMN, CHANGE, MODIFY, DROP, ALTER
    COLUMN) against the table as it was before the statement, so `RENAME COLUMN a TO b,
    RENAME COLUMN b TO a` swaps the two; AFTER names a column of the new table. Each column
    the statement keeps is followed to its name before it (`_before`) for that.
    """

    def __init__(self, table: Table, statement: _Statement) -> None:
        self.table = table
        self.st = statement
        self.cur = statement.cur
        # id(column value) -> (the value, its lowered name before the statement)
        self._before: dict[int, tuple[Column, str]] = {id(c): (c, c.name.lower()) for c in table.columns}
        self._key_before = table.primary_key
        self._key_set = False  # the statement sets the primary key itself (ADD/DROP PRIMARY KEY, ... PRIMARY KEY)

    def result(self) -> Table:
        """The table after the statement. Unless the statement set the primary key, the key is
        the columns it was, under their new names (while a statement swaps names, a name may
        be two columns')."""
        if self._key_set:
            return self.table
        now = {}
        for col in self.table.columns:
            known = self._before.get(id(col))
            if known is not None and known[0] is col:
                now[known[1]] = col.name
        key = tuple(now[k.lower()] for k in self._key_before if k.lower() in now)
        return replace(self.table, primary_key=key)

    def _find(self, columns: list[Column], name: str) -> int:
        """The index of the column a specification names (see the class), -1 if none."""
        lowered = name.lower()
        for i, col in enumerate(columns):
            known = self._before.get(id(col))
            if known is not None and known[0] is col and known[1] == lowered:
                return i
        return _index(columns, name)  # a column the statement added (the servers refuse it; be lenient)

    def _follow(self, old: list[Column], new: list[Column]) -> list[Column]:
        """`new`, each an edited `old` (same order), known by the names of `old`'s before the statement."""
        for was, now in zip(old, new):
            known = self._before.get(id(was))
            if now is not was and known is not None and known[0] is was:
                self._before[id(now)] = (now, known[1])
        return new

    def specification(self) -> None:
        cur = self.cur
        actions: list[tuple[tuple[str, ...], Callable[[], None]]] = [
            (("ADD",), self._add), (("DROP",), self._drop), (("MODIFY",), self._modify),
            (("CHANGE",), self._change), (("RENAME",), self._rename), (("ALTER",), self._alter_column),
            (("CONVERT", "TO"), self._convert),
        ]  # fmt: skip
        for words, action in actions:
            if cur.accept(*words):
                action()
                return
        self._table_option()

    def _table_option(self) -> None:
        cur = self.cur
        cur.accept("DEFAULT")
        option = _charset_option(cur)
        if option is not None and option[0] == "charset":
            self.table = replace(self.table, charset=option[1], collation=None)
        elif option is not None:
            self.table = replace(self.table, charset=charset_of_collation(option[1]), collation=option[1])
        cur.skip_to_separator()

    # columns -------------------------------------------------------------------------

    def _columns(self) -> list[Column]:
        return list(self.table.columns)

    def _place(self, columns: list[Column], col: Column, default_index: int) -> None:
        cur = self.cur
        if cur.accept("FIRST"):
            columns.insert(0, col)
        elif cur.accept("AFTER"):
            anchor = cur.name("a column name")
            index = _index(columns, anchor)
            if index < 0:
                raise DdlSyntaxError(f"AFTER `{anchor}`: no such column in `{self.table.name}`", cur._offset())
            columns.insert(index + 1, col)
        else:
            columns.insert(default_index, col)

    def _define(self, name: str) -> tuple[Column, bool]:
        col, primary = self.st._column_rest(name)
        col = self.st._with_charset(col, self.table.charset, self.table.collation)
        return col, primary

    def _add(self) -> None:
        cur = self.cur
        token = cur.peek()
        if token is not None and token.is_word("PARTITION"):
            cur.skip_to_separator()
            return
        if token is not None and token.kind == "word" and _is_constraint_word(token.text):
            pk = self.st._constraint()
            if pk:
                self.table = replace(self.table, primary_key=pk)
                self._key_set = True
            return
        cur.accept("COLUMN")
        if_not_exists = self.st._if_not_exists()
        if cur.accept("("):
            while True:
                self._add_one(if_not_exists, allow_position=False)
                if cur.accept(")"):
                    return
                cur.expect(",")
        self._add_one(if_not_exists, allow_position=True)

    def _add_one(self, if_not_exists: bool, allow_position: bool) -> None:
        name = self.cur.name("a column name")
        col, primary = self._define(name)
        columns = self._columns()
        if _index(columns, name) >= 0:
            if if_not_exists:
                self.cur.accept("FIRST") or (self.cur.accept("AFTER") and self.cur.name("a column"))
                return
            raise DdlSyntaxError(f"ADD COLUMN `{name}`: the column already exists", self.cur._offset())
        columns = _released(columns, name)
        if allow_position:
            self._place(columns, col, len(columns))
        else:
            columns.append(col)
        pk = (col.name,) if primary else self.table.primary_key
        self._key_set = self._key_set or primary
        self.table = replace(self.table, columns=tuple(columns), primary_key=pk)

    def _drop(self) -> None:
        cur = self.cur
        if cur.accept("PRIMARY", "KEY"):
            self.table = replace(self.table, primary_key=())
            self._key_set = True
            return
        token = cur.peek()
        if token is not None and token.is_word(
            "INDEX", "KEY", "FOREIGN", "CHECK", "CONSTRAINT", "PARTITION", "SYSTEM", "PERIOD", "UNIQUE"
        ):
            cur.skip_to_separator()
            return
        cur.accept("COLUMN")
        if_exists = self.st._if_exists()
        name = cur.name("a column name")
        columns = self._columns()
        index = self._find(columns, name)
        if index < 0:
            if if_exists:
                return
            raise DdlSyntaxError(f"DROP COLUMN `{name}`: no such column", cur._offset())
        dropped = columns.pop(index).name.lower()
        pk = tuple(k for k in self.table.primary_key if k.lower() != dropped)
        self.table = replace(self.table, columns=tuple(columns), primary_key=pk)
        cur.accept("RESTRICT") or cur.accept("CASCADE")

    def _modify(self) -> None:
        self.cur.accept("COLUMN")
        if_exists = self.st._if_exists()
        name = self.cur.name("a column name")
        self._replace(name, None, if_exists)

    def _change(self) -> None:
        self.cur.accept("COLUMN")
        if_exists = self.st._if_exists()
        old = self.cur.name("a column name")
        new = self.cur.name("a column name")
        self._replace(old, new, if_exists)

    def _replace(self, old: str, new: str | None, if_exists: bool) -> None:
        """CHANGE `old` to `new`, or MODIFY `old` (`new` None: MODIFY cannot rename)."""
        columns = self._columns()
        index = self._find(columns, old)
        if new is None:
            new = columns[index].name if index >= 0 else old
        col, primary = self._define(new)
        if index < 0:
            if if_exists:
                return
            raise DdlSyntaxError(f"column `{old}` does not exist in `{self.table.name}`", self.cur._offset())
        was = columns.pop(index)
        col = self._follow([was], [replace(col, aliases=was.renamed(new).aliases)])[0]
        columns = self._follow(columns, _released(columns, new))
        self._place(columns, col, index)
        pk = (new,) if primary else _renamed_key(self.table.primary_key, was.name, new)
        self._key_set = self._key_set or primary
        self.table = replace(self.table, columns=tuple(columns), primary_key=pk)

    def _rename(self) -> None:
        cur = self.cur
        if cur.accept("COLUMN"):
            old = cur.name("a column name")
            cur.expect("TO")
            new = cur.name("a column name")
            columns = self._columns()
            index = self._find(columns, old)
            if index < 0:
                raise DdlSyntaxError(f"RENAME COLUMN `{old}`: no such column", cur._offset())
            was = columns.pop(index)
            col = self._follow([was], [was.renamed(new)])[0]
            columns = self._follow(columns, _released(columns, new))
            columns.insert(index, col)
            pk = _renamed_key(self.table.primary_key, was.name, new)
            self.table = replace(self.table, columns=tuple(columns), primary_key=pk)
        elif cur.accept("INDEX") or cur.accept("KEY"):
            cur.skip_to_separator()
        else:
            cur.accept("TO") or cur.accept("AS")
            database, name = cur.qualified(self.table.database)
            self.table = replace(self.table, database=database, name=name)

    def _alter_column(self) -> None:
        cur = self.cur
        if (t := cur.peek()) is not None and t.is_word("INDEX", "KEY", "CHECK", "CONSTRAINT"):
            cur.skip_to_separator()
            return
        cur.accept("COLUMN")
        name = cur.name("a column name")
        columns = self._columns()
        index = self._find(columns, name)
        if index < 0:
            raise DdlSyntaxError(f"ALTER COLUMN `{name}`: no such column", cur._offset())
        was = columns[index]
        if cur.accept("SET", "INVISIBLE"):
            columns[index] = replace(columns[index], invisible=True)
        elif cur.accept("SET", "VISIBLE"):
            columns[index] = replace(columns[index], invisible=False)
        elif cur.accept("SET", "DEFAULT"):
            columns[index] = replace(columns[index], default=_ColumnAttributes(cur)._value())
        elif cur.accept("DROP", "DEFAULT"):
            columns[index] = replace(columns[index], default=None)
        cur.skip_to_separator()  # SET DEFAULT ..., DROP DEFAULT
        self._follow([was], [columns[index]])
        self.table = replace(self.table, columns=tuple(columns))

    def _convert(self) -> None:
        cur = self.cur
        if not (cur.accept("CHARACTER", "SET") or cur.accept("CHARSET")):
            raise DdlSyntaxError("CONVERT TO without CHARACTER SET", cur._offset())
        charset = cur.name("a charset").lower()
        collation = cur.name("a collation").lower() if cur.accept("COLLATE") else None
        cur.skip_to_separator()
        columns = self._follow(list(self.table.columns), [
            replace(c, charset=charset, collation=collation) if c.data_type in CHARACTER_TYPES else c
            for c in self.table.columns
        ])  # fmt: skip
        self.table = replace(self.table, columns=tuple(columns), charset=charset, collation=collation)


class _ColumnAttributes:
    """Reads a column's attributes after its type, up to the next `,` or `)`."""

    def __init__(self, cur: Cursor) -> None:
        self.cur = cur
        self.charset: str | None = None
        self.collation: str | None = None
        self.nullable = True
        self.primary = False
        self.generated: str | None = None
        self.invisible = False
        self.default: str | None = None

    def read(self) -> None:
        cur = self.cur
        while not cur.at_end() and not cur.is_punct(",") and not cur.is_punct(")"):
            if (t := cur.peek()) is not None and t.is_word("FIRST", "AFTER"):
                return  # the column's position in ALTER TABLE, read by the caller
            if not self._one():
                token = cur.next("a column attribute")
                if token.kind == "punct" and token.text == "(":
                    cur.i -= 1
                    cur.skip_balanced()

    def _one(self) -> bool:
        cur = self.cur
        if cur.accept("NOT", "NULL"):
            self.nullable = False
        elif cur.accept("NULL"):
            self.nullable = True
        elif (option := _charset_option(cur)) is not None:
            setattr(self, option[0], option[1])  # "charset" or "collation"
        elif cur.accept("DEFAULT"):
            self.default = self._value()
        elif cur.accept("ON", "UPDATE"):
            self._value()
        elif cur.accept("UNIQUE"):
            cur.accept("KEY")
        elif cur.accept("PRIMARY", "KEY") or cur.accept("KEY"):
            self.primary = True
        elif cur.accept("GENERATED", "ALWAYS") or (cur.is_punct("(", 1) and cur.accept("AS")):
            self._generated()
        elif cur.accept("INVISIBLE"):
            self.invisible = True
        elif cur.accept("COMMENT"):
            cur.next("a comment")
        else:
            return False
        return True

    def _generated(self) -> None:
        cur = self.cur
        cur.accept("AS")
        if cur.is_punct("("):
            cur.skip_balanced()
        self.generated = "virtual"
        token = cur.peek()
        if token is not None and token.is_word("STORED", "PERSISTENT"):
            self.generated = "stored"
            cur.i += 1
        elif token is not None and token.is_word("VIRTUAL"):
            cur.i += 1

    def _value(self) -> str | None:
        """A DEFAULT value: the literal's text, or None for NULL and for expressions."""
        cur = self.cur
        if cur.is_punct("("):
            cur.skip_balanced()
            return None
        token = cur.next("a value")
        sign = ""
        if token.kind == "punct" and token.text in "+-":
            sign = "-" if token.text == "-" else ""
            token = cur.next("a value")
        if token.kind == "word" and token.text.startswith("_") and (t := cur.peek()) and t.kind == "string":
            token = cur.next("a string")  # charset introducer: _utf8mb4'text'
        if cur.is_punct("("):
            cur.skip_balanced()  # CURRENT_TIMESTAMP(6), uuid()
            return None
        if token.kind in {"string", "number"}:
            return sign + token.text
        return None  # NULL, CURRENT_TIMESTAMP, TRUE and other words


def _charset_option(cur: Cursor) -> tuple[str, str] | None:
    """One `CHARACTER SET [=] x`, `CHARSET x` or `COLLATE [=] x`: ("charset" or "collation", x)."""
    if cur.accept("CHARACTER", "SET") or cur.accept("CHARSET"):
        cur.accept("=")
        return "charset", cur.name("a charset").lower()
    if cur.accept("COLLATE"):
        cur.accept("=")
        return "collation", cur.name("a collation").lower()
    return None


def _renamed_key(key: tuple[str, ...], old: str, new: str) -> tuple[str, ...]:
    """The primary key after column `old` became `new` (names compare case-insensitively)."""
    return tuple(new if k.lower() == old.lower() else k for k in key)


def _released(columns: list[Column], name: str) -> list[Column]:
    """`columns` with `name` taken out of their earlier names: another column has it now, and
    an alias would send that column's old data to the wrong field."""
    lowered = name.lower()
    return [
        replace(c, aliases=tuple(a for a in c.aliases if a.lower() != lowered))
        if any(a.lower() == lowered for a in c.aliases) else c
        for c in columns
    ]  # fmt: skip


def _index(columns: list[Column], name: str) -> int:
    lowered = name.lower()
    for i, col in enumerate(columns):
        if col.name.lower() == lowered:
            return i
    return -1


def _is_constraint_word(word: str) -> bool:
    return word.upper() in (
        "PRIMARY", "KEY", "INDEX", "UNIQUE", "CONSTRAINT", "FOREIGN", "FULLTEXT", "SPATIAL", "CHECK", "PERIOD",
        "VECTOR", "SYSTEM",
    )  # fmt: skip


def _is_charset_word(word: str) -> bool:
    return word.upper() in ("DEFAULT", "CHARACTER", "CHARSET", "COLLATE")


def _long_type(cur: Cursor) -> str:
    """MySQL's LONG, LONG VARCHAR and LONG VARBINARY are MEDIUMTEXT / MEDIUMBLOB."""
    if cur.accept("VARBINARY"):
        return "mediumblob"
    cur.accept("VARCHAR") or cur.accept("CHAR", "VARYING")
    return "mediumtext"


def _normalise_params(data_type: str, params: tuple[str, ...]) -> tuple[str, ...]:
    if data_type == "decimal":
        precision = params[0] if params else "10"
        return (precision, params[1] if len(params) > 1 else "0")
    if data_type in ("char", "binary") and not params:
        return ("1",)
    if data_type in ("enum", "set"):
        return params
    if data_type in ("tinyint", "smallint", "mediumint", "int", "bigint"):
        return ()  # display widths change nothing and 8.0 no longer shows them
    return params
