"""The tables online schema change tools make, and their cut-overs.

Large MySQL shops change a busy table with a tool instead of ALTER TABLE: it makes a shadow
table of the new definition, copies the rows into it while the table keeps changing (triggers,
or the binlog for gh-ost), and swaps it in with one atomic RENAME. The tools' helper tables are
known by their names:

| tool | shadow | others |
|---|---|---|
| gh-ost (go/base/context.go) | `_T_gho` | `_T_ghc` (changelog), `_T_ghk` (checkpoint), the old table |
| pt-online-schema-change (3.2.1) | `_T_new` (more leading `_` while taken) | `_T_old` (likewise) |
| Facebook's OnlineSchemaChange | `__osc_new_T` | `__osc_chg_T`, `__osc_old_T` |
| LHM (soundcloud, Shopify) | `lhmn_T` | `lhma_<timestamp>_T` |

gh-ost's old table is `_T_del` (first the cut-over's sentry), `_T_<14 digits>_del` or `_T_rev_del`.
A name past 64 characters is cut by the tools (pt-osc keeps its last 64, `_T_ne`): such a
helper is not recognised, and is published as any table unless excluded. Facebook's
OnlineSchemaChange runs with sql_log_bin=0: its DDL and swap never reach the binlog, so the
history cannot follow it (the table's next TABLE_MAP disagrees, and stops the stream).

They are tracked like any table (the cut-over makes the shadow the table) and, by default
(`[source] online_ddl_helpers = "skip"`), never published: their rows are copies of the
table's own. A cut-over (`RENAME TABLE T TO _T_old, _T_new TO T`) is published as what it is
to the table's readers: one change of the table's definition (`cut_over`), its rows keeping
their history, not a RENAME that took them away.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from connector.schema.model import Column, Table

# (tool, role, pattern of the table's name, group 1 being the table the helper serves)
_PATTERNS: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (tool, role, re.compile(pattern, re.DOTALL))
    for tool, role, pattern in (
        ("gh-ost", "shadow", r"_(.+)_gho"),
        ("gh-ost", "changelog", r"_(.+)_ghc"),
        ("gh-ost", "checkpoint", r"_(.+)_ghk"),
        ("gh-ost", "old", r"_(.+)_rev_del"),
        ("gh-ost", "old", r"_(.+?)_\d{14}_del"),  # --timestamp-old-table
        ("gh-ost", "old", r"_(.+)_del"),
        ("pt-online-schema-change", "shadow", r"_+(.+)_new"),
        ("pt-online-schema-change", "old", r"_+(.+)_old"),
        ("OnlineSchemaChange", "shadow", r"__osc_new_(.+)"),
        ("OnlineSchemaChange", "changelog", r"__osc_chg_(.+)"),
        ("OnlineSchemaChange", "old", r"__osc_old_(.+)"),
        ("LHM", "shadow", r"lhmn_(.+)"),
        ("LHM", "old", r"lhma_(?:\d{4}(?:_\d\d){5}_\d{3}|\d{14})_(.+)"),  # soundcloud's and Shopify's timestamps
    )
)


@dataclass(frozen=True, slots=True)
class Helper:
    tool: str
    role: str  # "shadow" (the table's next definition), "changelog", "old"
    table: str  # the name of the table it serves


def helper_of(name: str) -> Helper | None:
    """The tool table `name` is a helper of, by its name alone; None for any other table."""
    for tool, role, pattern in _PATTERNS:
        found = pattern.fullmatch(name)
        if found is not None:
            return Helper(tool, role, found[1])
    return None


# RENAME TABLE, and an ALTER TABLE with a RENAME [TO|AS] (not RENAME COLUMN/INDEX/KEY), once
# comments are out (gh-ost writes `rename /* gh-ost */ table ...`); executable ones stay open.
_COMMENTS = re.compile(r"/\*(?![!M]).*?\*/|/\*M?!\d*|\*/|--[ \t][^\n]*|#[^\n]*", re.DOTALL)
_RENAMES = re.compile(
    r"\s*(?:RENAME\s+TABLES?\b|ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\b.*\bRENAME\b(?!\s+(?:COLUMN|INDEX|KEY)\b))",
    re.IGNORECASE | re.DOTALL,
)


def is_rename(sql: str) -> bool:
    """Does the statement give a table a name (so every table it defines took another's)?"""
    return _RENAMES.match(_COMMENTS.sub(" ", sql)) is not None


@dataclass(frozen=True, slots=True)
class CutOver:
    """A tool's shadow table swapped in for a table: what its readers are told."""

    tool: str
    database: str
    table: str
    before: Table
    after: Table

    def summary(self) -> str:
        """What changed, in one line: the columns dropped, added and changed, and the order."""
        old = {c.name.lower(): c for c in self.before.columns}
        new = {c.name.lower(): c for c in self.after.columns}
        parts = [f"DROP {old[n].name}" for n in old if n not in new]
        parts += [f"ADD {_described(new[n])}" for n in new if n not in old]
        parts += [f"MODIFY {_described(new[n])} (was {old[n].sql_type()})" for n in new
                  if n in old and _type_of(new[n]) != _type_of(old[n])]  # fmt: skip
        common = [n for n in new if n in old]
        if [n for n in old if n in new] != common:
            parts.append("ORDER " + ", ".join(new[n].name for n in common))
        return ", ".join(parts) or "no column changed"

    def values_changed(self) -> bool:
        """Could the copy have changed a value of a column both definitions hold (a type or charset
        change, which the tool's INSERT ... SELECT converts)? Then the table is read again."""
        old = {c.name.lower(): c for c in self.before.columns}
        return any(n in old and _type_of(c) != _type_of(old[n]) for c in self.after.columns
                   if (n := c.name.lower()))  # fmt: skip

    def statement(self, sql: str) -> str:
        """The statement as the table's DDL message carries it: what it did, then its text."""
        return f"/* sluice: {self.tool} cut-over of `{self.database}`.`{self.table}`: {self.summary()} */ {sql}"


def _type_of(col: Column) -> tuple[str, tuple[str, ...], bool, str | None]:
    return col.data_type, col.params, col.unsigned, col.charset


def _described(col: Column) -> str:
    return f"{col.name} {col.sql_type()}"


def cut_over(before: dict[tuple[str, str], Table], after: dict[tuple[str, str], Table],
             touched: list[tuple[str, str]]) -> list[CutOver]:  # fmt: skip
    """The tables a statement swapped a tool's shadow table in for: a table it touched that
    exists after it, a shadow helper of it that existed before and is gone after, holding the
    definition the table now has."""
    found = []
    for database, table in dict.fromkeys(touched):
        now = after.get((database, table))
        if now is None or (database, table) not in before:
            continue
        for (db, name), shadow in before.items():
            helper = helper_of(name)
            if (db != database or helper is None or helper.role != "shadow" or helper.table != table
                    or (db, name) in after or shadow.columns != now.columns):  # fmt: skip
                continue
            found.append(CutOver(helper.tool, database, table, before[(database, table)], now))
            break
    return found
