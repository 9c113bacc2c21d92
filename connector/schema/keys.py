"""Secondary indexes, as far as they change what the binlog logs: MariaDB's long UNIQUE keys.

MariaDB (10.4+) keeps a UNIQUE key that a B-tree cannot hold as a hash of its values in a
hidden BIGINT column, DB_ROW_HASH_1, _2, ... after every other column (sql/sql_table.cc,
the long unique of MDEV-371): a UNIQUE key over a BLOB/TEXT without a prefix, one longer than
the engine's key limit, or one declared USING HASH (not in MEMORY, whose hash index is real).
Those columns are in every TABLE_MAP, so the tracked table has them too. Which keys exist
(names, parts) is followed here through CREATE and ALTER; MySQL has no such columns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from connector.schema.model import CHARACTER_TYPES, Column, Index, Table
from connector.schema.sqltokens import Cursor, Session
from connector.schema.types import BLOB_TYPES, MBMAXLEN, TEXT_TYPES, number

HASH_PREFIX = "DB_ROW_HASH_"
_UNBOUNDED = frozenset({*TEXT_TYPES, *BLOB_TYPES, "json"})  # geometry keys are B-trees of a fixed part
_FIXED = frozenset({"char", "varchar", "binary", "varbinary"})
# (longest key part, longest key) in bytes, as the servers refuse or hash beyond them:
# InnoDB's 3072 (767 for COMPACT/REDUNDANT rows), MyISAM's 1000, Aria's 2300.
_LIMITS = {"innodb": (3072, 3072), "myisam": (1000, 1000), "aria": (2300, 2300)}
_SMALL_ROWS = ("compact", "redundant")
_NATIVE_HASH = ("memory", "heap")


def read_index(cur: Cursor) -> Index | None:
    """An index element: KEY/INDEX, UNIQUE [KEY|INDEX], FULLTEXT, SPATIAL, [CONSTRAINT name]
    UNIQUE; None (skipped) for what is no index of ours: FOREIGN KEY, CHECK, PERIOD FOR."""
    name = _constraint_name(cur)
    unique = cur.accept("UNIQUE")
    other = not unique and (cur.accept("FULLTEXT") or cur.accept("SPATIAL") or cur.accept("VECTOR"))
    if not (unique or other or cur.is_at("INDEX") or cur.is_at("KEY")):
        cur.skip_to_separator()
        return None
    cur.accept("INDEX") or cur.accept("KEY")
    cur.accept("IF", "NOT", "EXISTS")
    using_hash = False
    while not cur.is_punct("("):
        kind = index_type(cur)
        if kind is None:
            name = cur.name("an index name")
        using_hash = using_hash or kind == "HASH"
    parts = key_parts(cur)
    return Index(name, parts, unique, index_options(cur) or using_hash)


def index_options(cur: Cursor) -> bool:
    """An index's options up to the next `,` or `)`; whether one says USING HASH."""
    using_hash = False
    while not cur.at_end() and not cur.is_punct(",") and not cur.is_punct(")"):
        kind = index_type(cur)
        if kind is None:
            cur.skip_one()  # KEY_BLOCK_SIZE, COMMENT, VISIBLE, WITH PARSER, ALGORITHM, LOCK, ...
        using_hash = using_hash or kind == "HASH"
    return using_hash


def _constraint_name(cur: Cursor) -> str:
    """[CONSTRAINT [IF NOT EXISTS] [name]]: the name ("" when none)."""
    if not cur.accept("CONSTRAINT"):
        return ""
    cur.accept("IF", "NOT", "EXISTS")
    if any(cur.is_at(w) for w in ("UNIQUE", "FOREIGN", "CHECK", "PRIMARY")):
        return ""
    return cur.name("a constraint name")


def index_type(cur: Cursor) -> str | None:
    """USING x / TYPE x: x, upper case; None (nothing read) when it is not that."""
    if cur.accept("USING") or cur.accept("TYPE"):
        return cur.next("an index type").text.upper()
    return None


def key_parts(cur: Cursor) -> tuple[tuple[str, int | None], ...]:
    cur.expect("(")
    parts: list[tuple[str, int | None]] = []
    for _ in cur.items():
        if cur.is_punct("("):
            cur.skip_balanced()  # a functional key part: no column of its own here
            parts.append(("", None))
        else:
            name = cur.name("a key column")
            prefix = None
            if cur.accept("("):
                token = cur.next("a prefix length")
                prefix = number(token.text, token.offset)
                cur.expect(")")
            parts.append((name, prefix))
        cur.accept("ASC") or cur.accept("DESC")
    return tuple(parts)


def named(indexes: list[Index], index: Index, primary: bool = False) -> Index:
    """An unnamed key takes its first column's name, then _2, _3, ... (sql/sql_table.cc,
    make_unique_key_name); PRIMARY is taken."""
    if index.name:
        return index
    taken = {i.name.lower() for i in indexes} | {"primary"}
    base = next((c for c, _ in index.parts if c), "idx")
    name, n = base, 2
    while name.lower() in taken:
        name, n = f"{base}_{n}", n + 1
    return replace(index, name=name)


def rebuilt(indexes: Iterable[Index]) -> tuple[Index, ...]:
    """The indexes as an ALTER (CREATE/DROP INDEX included) leaves them: MariaDB re-creates every
    key, and one declared USING HASH that a B-tree holds becomes a B-tree (seen live)."""
    return tuple(replace(i, using_hash=False) for i in indexes)


def follow_columns(indexes: tuple[Index, ...], names: dict[str, str | None]) -> tuple[Index, ...]:
    """The indexes after columns were renamed (old lowered name -> new name) or dropped (None):
    a dropped column leaves its keys, and a key with no column left goes (sql/sql_table.cc)."""
    out = []
    for index in indexes:
        parts = tuple((names.get(c.lower(), c) or "", p) for c, p in index.parts if names.get(c.lower(), c))
        if parts:
            out.append(replace(index, parts=parts))
    return tuple(out)


def with_hash_columns(table: Table, session: Session) -> Table:
    """The table with MariaDB's DB_ROW_HASH_n columns as its long UNIQUE keys need them."""
    columns = [c for c in table.columns if not (c.hidden and c.name.startswith(HASH_PREFIX))]
    count = sum(1 for i in table.indexes if i.unique and _long(i, table)) if session.mariadb else 0
    columns += [Column(f"{HASH_PREFIX}{k}", "bigint", invisible=True, hidden=True) for k in range(1, count + 1)]
    return replace(table, columns=tuple(columns))


def _long(index: Index, table: Table) -> bool:
    engine = table.engine or "innodb"
    if engine in _NATIVE_HASH:
        return False
    if index.using_hash:
        return True
    part_limit, key_limit = _LIMITS.get(engine, _LIMITS["innodb"])
    if engine == "innodb" and table.row_format in _SMALL_ROWS:
        part_limit = 767
    total = 0
    for name, prefix in index.parts:
        size = _part_bytes(table, name, prefix)
        if size is None or size > part_limit:
            return True
        total += size
    return total > key_limit


def _part_bytes(table: Table, name: str, prefix: int | None) -> int | None:
    """A key part's length in bytes; None: a whole BLOB/TEXT (no B-tree holds it)."""
    index = table.index_of(name) if name else -1
    if index < 0:
        return 0
    column = table.columns[index]
    width = MBMAXLEN.get(column.charset or "", 1) if column.data_type in CHARACTER_TYPES else 1
    if column.data_type in _UNBOUNDED:
        return None if prefix is None else prefix * width
    if column.data_type in _FIXED and column.params:
        length = int(column.params[0])
        return (min(length, prefix) if prefix is not None else length) * width
    return 8
