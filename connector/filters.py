"""Which tables Sluice captures: include and exclude regular expressions on `database.table`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from connector.errors import ConfigError
from connector.schema.onlineddl import helper_of


def table_name(text: str, option: str = "") -> tuple[str, str]:
    """`database.table` as (database, table); `option`: the command-line option it was given in."""
    database, dot, table = text.strip().partition(".")
    if not dot or not database or not table:
        raise ConfigError(f"{option + ': ' if option else ''}{text!r} is not database.table")
    return database, table


# Databases no CDC user wants by default; the checkpoint database is among them, so
# Sluice's own writes never come back to it as changes.
SYSTEM_DATABASES = ("mysql", "information_schema", "performance_schema", "sys")


@dataclass(frozen=True)
class TableFilter:
    """A table is captured when some include pattern matches `db.table` in full and no exclude does."""

    include: tuple[str, ...] = (r".*\..*",)
    exclude: tuple[str, ...] = ()
    # Online schema change tools' helper tables (connector/schema/onlineddl.py) are not captured.
    skip_helpers: bool = False
    _inc: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _exc: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    # Answers by (database, table): asked per TABLE_MAP (a cache keyed by the filter would hash
    # its patterns on every call).
    _seen: dict[tuple[str, str], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_inc", tuple(_compile(p, "include") for p in self.include))
        object.__setattr__(self, "_exc", tuple(_compile(p, "exclude") for p in self.exclude))
        object.__setattr__(self, "_seen", {})

    @classmethod
    def of(
        cls, include: list[str] | None, exclude: list[str] | None, meta_database: str = "", skip_helpers: bool = False
    ) -> TableFilter:
        system = [rf"{re.escape(db)}\..*" for db in (*SYSTEM_DATABASES, meta_database) if db]
        return cls(tuple(include or [r".*\..*"]), tuple([*system, *(exclude or [])]), skip_helpers)

    def __call__(self, database: str, table: str) -> bool:
        seen = self._seen
        answer = seen.get((database, table))
        if answer is None:
            if len(seen) >= 65536:
                seen.clear()
            answer = seen[database, table] = _matches(self, database, table)
        return answer

    def database(self, database: str) -> bool:
        r"""Would a table of this database whose name matters not be captured? For statements
        about a database rather than a table (CREATE DATABASE, GRANT): `shop\..*` admits
        `shop`, `shop\.orders` does not, and a statement with no database needs a catch-all."""
        return self(database, _ANY_TABLE)


_ANY_TABLE = "\U0010fffe"  # a name no real table has: only patterns that take any name match it


def _matches(f: TableFilter, database: str, table: str) -> bool:
    name = f"{database}.{table}"
    if f.skip_helpers and helper_of(table) is not None:
        return False
    return any(p.fullmatch(name) for p in f._inc) and not any(p.fullmatch(name) for p in f._exc)


def _compile(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"[source] {what}: {pattern!r} is not a regular expression ({exc})") from exc
