"""canal's event type, database and table of a DDL statement, from its text.

canal (LogEventConvert.parseQueryEvent with DruidDdlParser, 1.1.x) labels a statement by its
FIRST parsed result: CREATE TABLE -> CREATE, DROP TABLE -> ERASE, CREATE INDEX and an ALTER
TABLE whose first item adds an index, key or unique/primary constraint -> CINDEX, DROP INDEX
and an ALTER TABLE whose first item drops an index, key or constraint -> DINDEX, RENAME TABLE
and ALTER TABLE ... RENAME TO -> RENAME (named by the NEW table), TRUNCATE -> TRUNCATE, any
other ALTER TABLE -> ALTER; every other schema statement (databases, views, routines) is
QUERY. A name without a database takes the statement's default database. Statements of
several tables (DROP TABLE a, b; RENAME TABLE a TO b, c TO d) are named by the first.

Where canal leaves the database empty (CREATE/ALTER/DROP DATABASE, views) Sluice names the
database the statement is about, so the statement reaches that database's `_ddl` topic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# An unquoted name's characters: ASCII letters, digits, _ and $, and every non-ASCII character
# (the servers allow U+0080..U+FFFF). Written as what it is not: a class of 65,000 characters costs
# milliseconds to compile at every start, this one nothing.
_IDENT = r"(?:`(?:[^`]|``)+`|[^\x00-\x23\x25-\x2f\x3a-\x40\x5b-\x5e\x60\x7b-\x7f]+)"
_NAME = rf"({_IDENT}(?:\s*\.\s*{_IDENT})?)"
_COMMENTS = re.compile(r"/\*(?!!).*?\*/|/\*!\d*|\*/|--[ \t][^\n]*|#[^\n]*", re.DOTALL)
_IF = r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"

_CREATE_TABLE = re.compile(rf"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+{_IF}{_NAME}", re.I)
_CREATE_INDEX = re.compile(
    rf"CREATE\s+(?:OR\s+REPLACE\s+)?(?:ONLINE\s+|OFFLINE\s+)?(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX\s+{_IF}"
    rf"{_IDENT}\s+(?:USING\s+\w+\s+)?ON\s+{_NAME}",
    re.I,
)
_DROP_INDEX = re.compile(rf"DROP\s+(?:ONLINE\s+|OFFLINE\s+)?INDEX\s+{_IF}{_IDENT}\s+ON\s+{_NAME}", re.I)
_DROP_TABLE = re.compile(rf"DROP\s+(?:TEMPORARY\s+)?TABLES?\s+{_IF}{_NAME}", re.I)
_TRUNCATE = re.compile(rf"TRUNCATE\s+(?:TABLE\s+)?{_NAME}", re.I)
_RENAME = re.compile(rf"RENAME\s+TABLES?\s+{_NAME}\s+TO\s+{_NAME}", re.I)
_ALTER = re.compile(rf"ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+{_IF}{_NAME}\s*(.*)", re.I | re.DOTALL)
_DATABASE = re.compile(rf"(?:CREATE|ALTER|DROP)\s+(?:DATABASE|SCHEMA)\s+{_IF}({_IDENT})", re.I)
_VIEW = re.compile(rf"\bVIEW\s+{_IF}{_NAME}", re.I)

# The first item of an ALTER TABLE, as Druid types it (SQLAlterTableAddIndex, ...DropIndex,
# ...DropKey, ...AddConstraint with a unique/primary key, ...DropConstraint, ...Rename).
_ADD_INDEX = re.compile(
    rf"ADD\s+(?:(?:CONSTRAINT\s+(?:{_IDENT}\s+)?)?(?:UNIQUE|PRIMARY\s+KEY)|(?:FULLTEXT|SPATIAL)\b|INDEX\b|KEY\b)", re.I
)
_DROP_INDEX_ITEM = re.compile(r"DROP\s+(?:INDEX|KEY|CONSTRAINT|CHECK)\b", re.I)
_RENAME_ITEM = re.compile(rf"RENAME\s+(?:TO\s+|AS\s+)?(?!COLUMN\b|INDEX\b|KEY\b){_NAME}", re.I)


@dataclass(frozen=True, slots=True)
class DdlKind:
    type: str  # canal's EventType name: CREATE, ALTER, ERASE, RENAME, TRUNCATE, CINDEX, DINDEX, QUERY
    database: str
    table: str


def _unquote(part: str) -> str:
    part = part.strip()
    return part[1:-1].replace("``", "`") if part.startswith("`") else part


def _split(name: str, default: str) -> tuple[str, str]:
    parts = [_unquote(p) for p in re.findall(_IDENT, name)]
    return (parts[0], parts[1]) if len(parts) == 2 else (default, parts[0])


def _plain(sql: str) -> str:
    """The statement without comments (a versioned comment's body stays: the server runs it)."""
    return _COMMENTS.sub(" ", sql).strip()


def _alter(match: re.Match[str], default: str) -> DdlKind:
    database, table = _split(match[1], default)
    item = match[2].lstrip()
    if _ADD_INDEX.match(item):
        return DdlKind("CINDEX", database, table)
    if _DROP_INDEX_ITEM.match(item):
        return DdlKind("DINDEX", database, table)
    if renamed := _RENAME_ITEM.match(item):
        return DdlKind("RENAME", *_split(renamed[1], database))
    return DdlKind("ALTER", database, table)


_SIMPLE: tuple[tuple[re.Pattern[str], str, int], ...] = (
    (_CREATE_INDEX, "CINDEX", 1),
    (_CREATE_TABLE, "CREATE", 1),
    (_DROP_INDEX, "DINDEX", 1),
    (_DROP_TABLE, "ERASE", 1),
    (_TRUNCATE, "TRUNCATE", 1),
    (_RENAME, "RENAME", 2),  # named by the new table, as canal does
)


def ddl_kind(sql: str, default_database: str) -> DdlKind:
    """canal's type, database and table of a schema statement (see the module's docstring)."""
    text = _plain(sql)
    for pattern, kind, group in _SIMPLE:
        if m := pattern.match(text):
            return DdlKind(kind, *_split(m[group], default_database))
    if m := _ALTER.match(text):
        return _alter(m, default_database)
    if m := _DATABASE.match(text):
        return DdlKind("QUERY", _unquote(m[1]), "")
    if m := _VIEW.search(text):
        return DdlKind("QUERY", _split(m[1], default_database)[0], "")
    return DdlKind("QUERY", default_database, "")
