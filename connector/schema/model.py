"""The tracked schema: databases, tables and columns as DDL left them.

Values are frozen; a DDL produces new `Table` values. `Schema` is the mutable map of
them at one binlog position, changed only through `apply` (connector/schema/ddl.py
computes what to apply). Every value round-trips through JSON for the history store.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

# Declared type families (canonical names, as connector/schema/types.py normalises them).
CHARACTER_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"})
BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
# MariaDB's fixed-size binary types, logged as BINARY(n) and published as their stored bytes, by size.
STORED_BINARY_TYPES = {"uuid": 16, "inet6": 16, "inet4": 4}
GEOMETRY_TYPES = frozenset(
    {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
     "geometrycollection", "geomcollection"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    data_type: str  # canonical lowercase base type: "int", "varchar", "decimal", "enum", ...
    params: tuple[str, ...] = ()  # (length), (precision, scale), ENUM/SET labels
    unsigned: bool = False
    charset: str | None = None  # explicit, or inherited from the table when created
    collation: str | None = None
    nullable: bool = True
    generated: str | None = None  # "virtual" / "stored" for generated columns
    invisible: bool = False
    default: str | None = None  # a literal DEFAULT's value as text; None: NULL or an expression
    # Earlier names, newest first, from RENAME COLUMN / CHANGE COLUMN (connector/schema/ddl.py):
    # the Avro field carries them as `aliases`, so readers on a newer version find old data.
    aliases: tuple[str, ...] = ()
    compressed: bool = False  # MariaDB's COMPRESSED columns (logged as types 140/141)
    # MariaDB system versioning: "start" / "end" for the ROW START / ROW END columns, declared
    # or the row_start / row_end WITH SYSTEM VERSIONING adds by itself (those are hidden).
    period: str | None = None
    # MariaDB's hidden columns: the implicit row_start / row_end, and DB_ROW_HASH_n of long
    # UNIQUE keys (connector/schema/keys.py). In every TABLE_MAP, yet no statement names them.
    hidden: bool = False
    # The integer (and MariaDB YEAR) display width SHOW CREATE TABLE prints, and ZEROFILL: they
    # change no value, only the type's text canal-json's mysqlType carries (connector/sqltypes.py).
    display_width: int | None = None
    zerofill: bool = False

    def renamed(self, name: str) -> Column:
        """This column under `name`, its current name first among its earlier ones."""
        earlier = (self.name, *self.aliases) if name != self.name else self.aliases
        return replace(self, name=name, aliases=tuple(dict.fromkeys(a for a in earlier if a != name)))

    def sql_type(self) -> str:
        args = ",".join(_quote(p) if self.data_type in ("enum", "set") else p for p in self.params)
        text = f"{self.data_type}({args})" if self.params else self.data_type
        return text + (" unsigned" if self.unsigned else "")


def _quote(label: str) -> str:
    return "'" + label.replace("'", "''") + "'"


@dataclass(frozen=True, slots=True)
class Index:
    """A secondary index: its name, whether it is UNIQUE, its parts (column, prefix length),
    and USING HASH. MariaDB makes a hidden column of a UNIQUE one too long for a B-tree."""

    name: str
    parts: tuple[tuple[str, int | None], ...]
    unique: bool = False
    using_hash: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Index:
        parts = tuple((str(c), None if n is None else int(n)) for c, n in data["parts"])
        return cls(data["name"], parts, bool(data.get("unique")), bool(data.get("using_hash")))


@dataclass(frozen=True, slots=True)
class Table:
    database: str
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    charset: str | None = None
    collation: str | None = None
    indexes: tuple[Index, ...] = ()
    engine: str = ""  # lowercased ENGINE=, "" when unsaid (the server's default)
    row_format: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.database, self.name)

    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def index_of(self, name: str) -> int:
        lowered = name.lower()
        for i, col in enumerate(self.columns):
            if col.name.lower() == lowered:  # column names are case-insensitive in MySQL
                return i
        return -1

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values (lists, not tuples), as they read back from any store. A column
        without earlier names has no `aliases` key, as in histories written before renames
        were followed (which `from_json` reads)."""
        data: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        for column in data["columns"]:
            for key in _OPTIONAL_KEYS:
                if not column[key]:
                    del column[key]
        for key in ("indexes", "engine", "row_format"):
            if not data[key]:
                del data[key]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Table:
        columns = tuple(
            Column(**{**c, "params": tuple(c["params"]), "aliases": tuple(c.get("aliases", ()))})
            for c in data["columns"]
        )
        return cls(
            data["database"], data["name"], columns, tuple(data["primary_key"]), data.get("charset"),
            data.get("collation"), tuple(Index.from_json(i) for i in data.get("indexes", ())),
            data.get("engine", ""), data.get("row_format", ""),
        )  # fmt: skip


# Column keys a definition's JSON leaves out when they hold their default (histories written
# before they existed read back the same).
_OPTIONAL_KEYS = ("aliases", "compressed", "period", "hidden", "display_width", "zerofill")


@dataclass(frozen=True, slots=True)
class Blocked:
    """A table whose definition a statement changed in a way Sluice could not read: its rows
    stop the connector until an operator says what the table is (`sluice schema set`)."""

    statement: str
    position: str  # FILE:POS of the statement's end, where a definition given for it takes effect
    reason: str


@dataclass(frozen=True, slots=True)
class Database:
    name: str
    charset: str | None = None
    collation: str | None = None


@dataclass(slots=True)
class Schema:
    """Every tracked table and database at one position. Names compare case-sensitively,
    as on Linux servers (lower_case_table_names=0), which is what the binlog carries."""

    tables: dict[tuple[str, str], Table] = field(default_factory=dict)
    databases: dict[str, Database] = field(default_factory=dict)
    blocked: dict[tuple[str, str], Blocked] = field(default_factory=dict)

    def get(self, database: str, name: str) -> Table | None:
        return self.tables.get((database, name))

    def put(self, table: Table) -> None:
        self.tables[table.key] = table

    def drop(self, database: str, name: str) -> Table | None:
        return self.tables.pop((database, name), None)

    def tables_of(self, database: str) -> list[Table]:
        return [t for (db, _), t in self.tables.items() if db == database]

    def copy(self) -> Schema:
        return Schema(dict(self.tables), dict(self.databases), dict(self.blocked))


def without_aliases(table: Table) -> Table:
    """The table's layout alone: what the binlog's rows and the Avro bytes depend on."""
    if not any(c.aliases for c in table.columns):
        return table
    return replace(table, columns=tuple(replace(c, aliases=()) for c in table.columns))
