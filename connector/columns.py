"""Per-table column rules (`[[kafka.columns]]`): include/exclude, masking and hashing.

As Debezium's `column.include.list` / `column.exclude.list` / `column.mask.with.N.chars` /
`column.mask.hash.SHA-256.with.salt` and canal's `canal.instance.filter.field`: a rule applies
to the tables whose `database.table` it matches in full (the first matching rule wins). A
table a rule touches is published through the per-message path with its table definition
changed to match: excluded columns are gone from its messages and its schema, a masked or
hashed column is a string column (`varchar`) carrying the mask or the hex digest. Tables
without a rule keep the compiled rows path untouched; a rule's table is written by the compiled
code too (`Shaping`: connector/avro/transcode.shaped_program for Avro, connector/canal.canal_program
for canal-json), to the same bytes. A masked or hashed key column keys its messages by the mask or
digest, on either path.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, replace

from connector.binlog.coltypes import Op
from connector.binlog.rowplan import NO_TEXT_OPS, Strings, column_op
from connector.binlog.tablemap import ColumnMeta
from connector.config import ColumnRule
from connector.errors import ConfigError
from connector.flat import FlatMessage
from connector.identity import ByIdentity
from connector.native_spec import COL_STRING_SHIFT, COLUMN_FLAGS
from connector.schema.model import Column, Table

KEEP, DROP, MASK, HASH = 0, 1, 2, 3  # what a rule does to a column (Shaping.treatment)
log = logging.getLogger("sluice.columns")


def compiled_op(meta: ColumnMeta, col: Column, treat: int, strings: Strings) -> Op | str:
    """The compiled module's op for a column a rule treats so (KEEP without a rule), else why the
    compiled code does not write it: no op reads its type, or it is hashed and the text its digest
    is of (its flat text) is Python's. Both program compilers ask (connector/avro/transcode.py,
    connector/canal.py), each then checking what its format writes."""
    op = column_op(meta, strings)
    if op is None:
        return f"column `{col.name}` ({col.data_type}) is not compiled"
    if treat == HASH and op[0] in NO_TEXT_OPS:
        return f"column `{col.name}` ({col.data_type}) is hashed, and the text its digest is of is not compiled"
    return op


def rule_flags(treatment: tuple[int, ...], strings: Strings, mask: bytes, salt: str) -> dict[int, int]:
    """The column flags (native_spec.COLUMN_FLAGS) of each treatment, with the string each reads:
    `mask`, a masked value as the format writes it; `salt`, what a hashed value's text follows."""
    flags = {KEEP: 0, DROP: COLUMN_FLAGS["COL_DROP"], MASK: COLUMN_FLAGS["COL_MASK"], HASH: COLUMN_FLAGS["COL_HASH"]}
    if MASK in treatment:
        flags[MASK] |= strings.add([mask]) << COL_STRING_SHIFT
    if HASH in treatment:
        flags[HASH] |= strings.add([salt.encode("utf-8", "surrogatepass")]) << COL_STRING_SHIFT
    return flags


@dataclass(frozen=True, slots=True)
class Shaping:
    """What the compiled code needs to write a shaped table's rows: the table as its messages carry
    it, what the rule does to each of the table's columns, a masked value and the hashes' salt."""

    table: Table
    treatment: tuple[int, ...]
    mask: str
    salt: str
    by_name: dict[str, int]  # the treatment of each of the binlog table's columns, by name

    def message(self, message: FlatMessage) -> FlatMessage:
        """A change as the rule shapes it: dropped columns gone, masked and hashed values replaced."""
        if message.get("data") is None:
            return message
        out = dict(message)
        out["data"] = [self._row(row) for row in message["data"]]
        if message.get("old"):
            out["old"] = [self._row(row) for row in message["old"]]
        return out

    def _row(self, row: dict[str, str | None]) -> dict[str, str | None]:
        out = {}
        for name, value in row.items():
            treat = self.by_name.get(name, KEEP)
            if treat != DROP:
                out[name] = self._value(value, treat)
        return out

    def _value(self, value: str | None, treat: int) -> str | None:
        if value is None or treat == KEEP:
            return value
        if treat == MASK:
            return self.mask
        return hashlib.sha256((self.salt + value).encode("utf-8", "surrogatepass")).hexdigest()


class ColumnRules:
    def __init__(self, rules: list[ColumnRule]) -> None:
        """`rules`: the `[[kafka.columns]]` sections (connector.config.ColumnRule), in order."""
        self.rules = [(re.compile(rule.tables), rule) for rule in rules]
        self.table = ByIdentity(self._table)
        self.shaping = ByIdentity(self._shaping)

    def rule(self, database: str, table: str) -> ColumnRule | None:
        """The first rule whose pattern matches `database.table` in full."""
        name = f"{database}.{table}"
        return next((rule for pattern, rule in self.rules if pattern.fullmatch(name)), None)

    def _table(self, table: Table) -> Table | None:
        """`table(t)`: the table as its messages carry it under its rule; None when no rule applies."""
        rule = self.rule(table.database, table.name)
        return None if rule is None else _shaped(table, rule)

    def _shaping(self, table: Table) -> Shaping | None:
        """`shaping(t)`: how the compiled code writes the table under its rule; None without a rule."""
        shaped, rule = self.table(table), self.rule(table.database, table.name)
        if shaped is None or rule is None:
            return None
        treatment = tuple(_treatment(rule, c.name) for c in table.columns)
        by_name = {c.name: treat for c, treat in zip(table.columns, treatment)}
        return Shaping(shaped, treatment, "*" * rule.mask_chars, rule.hash_salt, by_name)

    def message(self, message: FlatMessage, table: Table) -> FlatMessage:
        shaping = self.shaping(table)
        return message if shaping is None else shaping.message(message)


def _named(names: list[str], name: str) -> bool:
    """Whether a rule's list names the column (case-insensitively)."""
    return name.lower() in {n.lower() for n in names}


def _kept(rule: ColumnRule, name: str) -> bool:
    return (not rule.include or _named(rule.include, name)) and not _named(rule.exclude, name)


def _treatment(rule: ColumnRule, name: str) -> int:
    if not _kept(rule, name):
        return DROP
    return MASK if _named(rule.mask, name) else HASH if _named(rule.hash, name) else KEEP


def _shaped(table: Table, rule: ColumnRule) -> Table:
    keys = {k.lower() for k in table.primary_key}
    dropped = [c.name for c in table.columns if not _kept(rule, c.name) and c.name.lower() in keys]
    if dropped:
        raise ConfigError(f"kafka.columns: {table.database}.{table.name}: key column(s) {', '.join(dropped)} "
                          "cannot be left out (the message key is made of them)")  # fmt: skip
    masked = [c.name for c in table.columns if _treatment(rule, c.name) == MASK and c.name.lower() in keys]
    if masked and (table.database, table.name) not in _warned:
        _warned.add((table.database, table.name))
        log.warning("kafka.columns: %s.%s: key column(s) %s masked: messages are keyed by the mask, so rows "
                    "that differ only there share a key and a partition (log compaction keeps one of them); "
                    "hash them to keep a key per row", table.database, table.name, ", ".join(masked))  # fmt: skip
    columns = tuple(_as_text(c, rule) for c in table.columns if _kept(rule, c.name))
    return replace(table, columns=columns)


_warned: set[tuple[str, str]] = set()  # tables said to be keyed by a mask


def _as_text(col: Column, rule: ColumnRule) -> Column:
    if not _named(rule.mask + rule.hash, col.name):
        return col
    return Column(col.name, "varchar", ("255",), nullable=col.nullable, charset="utf8mb4", aliases=col.aliases)
