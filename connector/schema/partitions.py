"""Partitioning, read to its end: none of it changes a column.

Two kinds of statement part, as both servers' grammars have them (sql/sql_yacc.yy):

- the partitioning clause, PARTITION BY ... (MySQL's partition_clause, MariaDB's
  partitioning) or REMOVE PARTITIONING, after a CREATE TABLE's options or after an ALTER
  TABLE's specifications, with no comma before it (MySQL's opt_alter_table_actions,
  MariaDB's `alter_list opt_partitioning`); nothing follows it in an ALTER, and only the
  query of a CREATE ... SELECT in a CREATE;
- the partition commands of ALTER TABLE (MySQL's standalone_alter_commands, MariaDB's
  alter_commands): ADD, DROP, REBUILD, OPTIMIZE, ANALYZE, CHECK, REPAIR, COALESCE, TRUNCATE,
  REORGANIZE, EXCHANGE, DISCARD/IMPORT ... TABLESPACE, and MariaDB's CONVERT (10.7+). Each
  stands alone: MySQL lets ALGORITHM, LOCK and [WITH|WITHOUT] VALIDATION come before one,
  MariaDB nothing; nothing comes after one.

Three commands move rows between tables, so the schema history has to know of them:

- EXCHANGE PARTITION p WITH TABLE t swaps rows (none logged); the servers require t to have
  the partitioned table's definition (ER_TABLES_DIFFERENT_METADATA) and change neither;
- CONVERT PARTITION p TO TABLE t (MariaDB) makes t, a table of the partitioned table's
  columns, keys and options, not partitioned (sql/sql_partition.cc, ALTER_PARTITION_CONVERT_OUT);
- CONVERT TABLE t TO PARTITION ... (MariaDB) makes t a partition: the table t is gone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from connector.schema.sqltokens import Cursor, DdlSyntaxError

Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class PartitionCommand:
    """One partition command of an ALTER TABLE, and the other table it names, if any."""

    verb: str  # ADD, DROP, ..., CONVERT (a partition to a table), CONVERT TABLE (a table to a partition)
    made: Key | None = None  # CONVERT PARTITION p TO TABLE t: t, new, of the partitioned table's definition
    gone: Key | None = None  # CONVERT TABLE t TO PARTITION ...: t, a table no more
    exchanged: Key | None = None  # EXCHANGE PARTITION p WITH TABLE t: t, its definition unchanged

    @property
    def admin(self) -> bool:
        """ANALYZE, CHECK, OPTIMIZE, REPAIR: run as those TABLE statements are, of the partitions
        (sql/sql_partition_admin.cc), they change no table, and the servers log the first three
        even of a table that does not exist (its error a row of the result; seen live, both)."""
        return self.verb in _ADMIN


# -- the partitioning clause --------------------------------------------------------------


def clause_start(cur: Cursor) -> int | None:
    """Where the partitioning clause that ends an ALTER TABLE begins (a token index), None
    without one. PARTITION is reserved on both servers and REMOVE is never a column's type,
    so `PARTITION BY` and `REMOVE PARTITIONING` outside parentheses start it."""
    depth = 0
    for i in range(cur.i, cur.end):
        token = cur.tokens[i]
        if token.kind == "punct" and token.text in "()":
            depth += 1 if token.text == "(" else -1
        elif depth == 0 and _starts_clause(cur, i - cur.i):
            return i
    return None


def _starts_clause(cur: Cursor, ahead: int) -> bool:
    if cur.is_at("PARTITION", ahead):
        return cur.is_at("BY", ahead + 1)
    # UPGRADE PARTITIONING: MySQL 5.7 only; binlogs written by one may still be read
    return (cur.is_at("REMOVE", ahead) or cur.is_at("UPGRADE", ahead)) and cur.is_at("PARTITIONING", ahead + 1)


def read_clause(cur: Cursor) -> None:
    """PARTITION BY ... or REMOVE PARTITIONING, the cursor on its first word."""
    if cur.accept("REMOVE", "PARTITIONING") or cur.accept("UPGRADE", "PARTITIONING"):
        return
    read_partitioning(cur)


def read_partitioning(cur: Cursor) -> None:
    """PARTITION BY type [PARTITIONS n] [SUBPARTITION BY type [SUBPARTITIONS n]] [(definitions)]
    (MySQL's partition_clause; MariaDB's `partition` rule, which adds SYSTEM_TIME)."""
    cur.expect("PARTITION", "BY")
    _partition_type(cur)
    if cur.accept("PARTITIONS"):
        _count(cur)
    if cur.accept("SUBPARTITION", "BY"):
        _subpartition_type(cur)
        if cur.accept("SUBPARTITIONS"):
            _count(cur)
    if cur.is_punct("("):
        read_definitions(cur)


def _partition_type(cur: Cursor) -> None:
    """part_type_def: [LINEAR] KEY|HASH, RANGE|LIST [COLUMNS], MariaDB's SYSTEM_TIME."""
    token = cur.next("a partitioning type")
    kind = _TYPES.get(token.text.upper()) if token.kind == "word" else None
    if kind is None:
        raise DdlSyntaxError(f"unknown partitioning type {token.text!r}", token.offset)
    kind(cur)


def _subpartition_type(cur: Cursor) -> None:
    """opt_sub_part: [LINEAR] HASH (expr) or [LINEAR] KEY [ALGORITHM = n] (columns)."""
    cur.accept("LINEAR")
    _hash_or_key(cur)


def _hash_or_key(cur: Cursor) -> None:
    if cur.accept("HASH"):
        _group(cur, "a HASH expression")
    else:
        cur.expect("KEY")
        _key(cur)


def _key(cur: Cursor) -> None:
    """KEY [ALGORITHM = 1|2] ([columns]): the columns may be none (the primary key's)."""
    if cur.accept("ALGORITHM"):
        cur.expect("=")
        _count(cur)
    _group(cur, "the KEY columns")


def _hash(cur: Cursor) -> None:
    _group(cur, "a HASH expression")


def _range_or_list(cur: Cursor) -> None:
    """RANGE|LIST (expr) or RANGE|LIST COLUMNS (columns)."""
    cur.accept("COLUMNS")
    _group(cur, "a partitioning expression")


def _system_time(cur: Cursor) -> None:
    """MariaDB's SYSTEM_TIME [INTERVAL expr unit [STARTS literal] [AUTO] | LIMIT n [AUTO]]
    (opt_versioning_rotation): the history of a system-versioned table by time or by rows."""
    if cur.accept("INTERVAL"):
        _skip_expression(cur, _is_unit)
        cur.next("an interval unit")
        if cur.accept("STARTS"):
            _literal(cur)
    elif cur.accept("LIMIT"):
        _count(cur)
    cur.accept("AUTO")


def _is_unit(cur: Cursor) -> bool:
    token = cur.peek()
    return token is not None and token.kind == "word" and token.text.upper() in _UNITS


_TYPES: dict[str, Callable[[Cursor], None]] = {
    "LINEAR": _hash_or_key, "KEY": _key, "HASH": _hash, "RANGE": _range_or_list, "LIST": _range_or_list,
    "SYSTEM_TIME": _system_time,
}  # fmt: skip
# interval units (sql/sql_yacc.yy, interval and interval_time_stamp)
_UNITS = frozenset({
    "MICROSECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR", "SECOND_MICROSECOND",
    "MINUTE_MICROSECOND", "MINUTE_SECOND", "HOUR_MICROSECOND", "HOUR_SECOND", "HOUR_MINUTE", "DAY_MICROSECOND",
    "DAY_SECOND", "DAY_MINUTE", "DAY_HOUR", "YEAR_MONTH",
})  # fmt: skip


# -- partition definitions ----------------------------------------------------------------


def read_definitions(cur: Cursor) -> None:
    """( PARTITION ..., PARTITION ... ): part_def_list in parentheses."""
    cur.expect("(")
    for _ in cur.items():
        read_definition(cur)


def read_definition(cur: Cursor) -> None:
    """PARTITION name [values] [options] [(SUBPARTITION name [options], ...)] (part_definition;
    MariaDB takes the name alone too, without PARTITION)."""
    cur.accept("PARTITION")
    cur.name("a partition name")
    _values(cur)
    _options(cur)
    if cur.accept("("):
        for _ in cur.items():
            cur.expect("SUBPARTITION")
            cur.name("a subpartition name")
            _options(cur)


def _values(cur: Cursor) -> None:
    """VALUES LESS THAN MAXVALUE|(values), VALUES IN (values); MariaDB's DEFAULT (a LIST
    partition for every other value), CURRENT and HISTORY (SYSTEM_TIME partitions)."""
    if cur.accept("VALUES", "LESS", "THAN"):
        if not cur.accept("MAXVALUE"):
            _group(cur, "the values of a partition")
    elif cur.accept("VALUES", "IN"):
        _group(cur, "the values of a partition")
    else:
        cur.accept("DEFAULT") or cur.accept("CURRENT") or cur.accept("HISTORY")


def _options(cur: Cursor) -> None:
    """part_option list: [STORAGE] ENGINE, DATA|INDEX DIRECTORY, COMMENT, TABLESPACE, MAX_ROWS,
    MIN_ROWS, NODEGROUP, MariaDB's CONNECTION and engine-defined `name = value`: each a word
    (two for those), an `=` (optional but for the engine-defined), one value."""
    while not cur.at_end() and not (cur.is_punct(",") or cur.is_punct(")") or cur.is_punct("(")):
        token = cur.next("a partition option")
        word = token.text.upper() if token.kind == "word" else ""
        if word in _TWO_WORDS:
            cur.expect(_TWO_WORDS[word])
        elif word not in _OPTIONS and not (word and cur.is_punct("=")):
            raise DdlSyntaxError(f"unknown partition option {token.text!r}", token.offset)
        cur.accept("=")
        if cur.is_next_string():
            cur.string("a partition option's value")
        elif cur.next("a partition option's value").kind == "punct":
            raise DdlSyntaxError(f"no value for the partition option {token.text!r}", token.offset)


_TWO_WORDS = {"STORAGE": "ENGINE", "DATA": "DIRECTORY", "INDEX": "DIRECTORY"}
_OPTIONS = frozenset({"ENGINE", "COMMENT", "MAX_ROWS", "MIN_ROWS", "TABLESPACE", "NODEGROUP", "CONNECTION"})


# -- partition commands -------------------------------------------------------------------


def read_command(cur: Cursor, default_db: str) -> PartitionCommand | None:
    """A partition command at the cursor, read to its end; None (nothing read) for any other
    specification."""
    token = cur.peek()
    if token is None or token.kind != "word":
        return None
    verb = token.text.upper()
    if verb == "CONVERT" and cur.is_at("TABLE", 1):
        cur.i += 2
        return _convert_table(cur, default_db)
    command = _COMMANDS.get(verb)
    if command is None or not cur.is_at("PARTITION", 1):
        return None
    cur.i += 2
    return command(cur, verb, default_db)


def _add(cur: Cursor, verb: str, default_db: str) -> PartitionCommand:
    """ADD PARTITION [IF NOT EXISTS] [LOCAL] [(definitions) | PARTITIONS n]."""
    cur.accept("IF", "NOT", "EXISTS")
    _no_write_to_binlog(cur)
    if cur.accept("PARTITIONS"):
        _count(cur)
    elif cur.is_punct("("):
        read_definitions(cur)
    return PartitionCommand(verb)


def _drop(cur: Cursor, verb: str, default_db: str) -> PartitionCommand:
    """DROP PARTITION [IF EXISTS] name, ..."""
    cur.accept("IF", "EXISTS")
    _names(cur)
    return PartitionCommand(verb)


def _maintain(cur: Cursor, verb: str, default_db: str) -> PartitionCommand:
    """REBUILD|OPTIMIZE|ANALYZE|CHECK|REPAIR|TRUNCATE PARTITION [LOCAL] ALL|name, ... [options]
    (CHECK's QUICK, FAST, MEDIUM, EXTENDED, CHANGED, FOR UPGRADE; REPAIR's QUICK, EXTENDED,
    USE_FRM; MariaDB reads a second LOCAL after OPTIMIZE's names)."""
    _no_write_to_binlog(cur)
    if not cur.accept("ALL"):
        _names(cur)
    while any(cur.is_at(word) for word in _CHECK_OPTIONS):
        cur.i += 2 if cur.is_at("FOR") else 1  # FOR UPGRADE
    return PartitionCommand(verb)


def _coalesce(cur: Cursor, verb: str, default_db: str) -> PartitionCommand:
    """COALESCE PARTITION [LOCAL] n."""
    _no_write_to_binlog(cur)
    _count(cur)
    return PartitionCommand(verb)


def _reorganize(cur: Cursor, verb: str, default_db: str) -> PartitionCommand:
    """REORGANIZE PARTITION [LOCAL] [name, ... INTO (definitions)]."""
    _no_write_to_binlog(cur)
    if not cur.at_end():
        _names(cur)
        cur.expect("INTO")
        read_definitions(cur)
    return PartitionCommand(verb)


def _exchange(cur: Cursor, verb: str, default_db: str) -> PartitionCommand:
    """EXCHANGE PARTITION p WITH TABLE t [WITH|WITHOUT VALIDATION] (the validation: MySQL)."""
    cur.name("a partition name")
    cur.expect("WITH", "TABLE")
    other = cur.qualified(default_db)
    cur.accept("WITH", "VALIDATION") or cur.accept("WITHOUT", "VALIDATION")
    return PartitionCommand(verb, exchanged=other)


def _tablespace(cur: Cursor, verb: str, default_db: str) -> PartitionCommand:
    """DISCARD|IMPORT PARTITION ALL|name, ... TABLESPACE."""
    if not cur.accept("ALL"):
        _names(cur)
    cur.expect("TABLESPACE")
    return PartitionCommand(verb)


def _convert_partition(cur: Cursor, verb: str, default_db: str) -> PartitionCommand:
    """MariaDB's CONVERT PARTITION p TO TABLE t."""
    cur.name("a partition name")
    cur.expect("TO", "TABLE")
    return PartitionCommand(verb, made=cur.qualified(default_db))


def _convert_table(cur: Cursor, default_db: str) -> PartitionCommand:
    """MariaDB's CONVERT TABLE t TO PARTITION name [values] [options] (one definition)."""
    gone = cur.qualified(default_db)
    cur.expect("TO")
    read_definition(cur)
    return PartitionCommand("CONVERT TABLE", gone=gone)


_COMMANDS: dict[str, Callable[[Cursor, str, str], PartitionCommand]] = {
    "ADD": _add, "DROP": _drop, "COALESCE": _coalesce, "REORGANIZE": _reorganize, "EXCHANGE": _exchange,
    "CONVERT": _convert_partition, "DISCARD": _tablespace, "IMPORT": _tablespace,
    **dict.fromkeys(("REBUILD", "OPTIMIZE", "ANALYZE", "CHECK", "REPAIR", "TRUNCATE"), _maintain),
}  # fmt: skip
_ADMIN = frozenset({"ANALYZE", "CHECK", "OPTIMIZE", "REPAIR"})
_CHECK_OPTIONS = ("QUICK", "FAST", "MEDIUM", "EXTENDED", "CHANGED", "FOR", "USE_FRM", "LOCAL", "NO_WRITE_TO_BINLOG")


# -- pieces -------------------------------------------------------------------------------


def _no_write_to_binlog(cur: Cursor) -> None:
    cur.accept("LOCAL") or cur.accept("NO_WRITE_TO_BINLOG")


def _names(cur: Cursor) -> None:
    """name, name, ...: partition names (the command's last part, or before INTO/TABLESPACE)."""
    cur.name("a partition name")
    while cur.accept(","):
        cur.name("a partition name")


def _count(cur: Cursor) -> None:
    token = cur.next("a number")
    if token.kind != "number":
        raise DdlSyntaxError(f"expected a number, found {token.text!r}", token.offset)


def _group(cur: Cursor, what: str) -> None:
    """A parenthesised expression or list, skipped: its values change no column."""
    if not cur.is_punct("("):
        token = cur.peek()
        raise DdlSyntaxError(f"expected {what}, found {token.text if token else 'the end'!r}", cur.offset())
    cur.skip_balanced()


def _literal(cur: Cursor) -> None:
    """A literal: a string (maybe DATE, TIME or TIMESTAMP before it, or an introducer), or one token."""
    following = cur.peek(1)
    if any(cur.is_at(word) for word in ("DATE", "TIME", "TIMESTAMP")) and following and following.kind == "string":
        cur.i += 1
    if cur.is_next_string():
        cur.string("a literal")
    else:
        cur.next("a literal")


def _skip_expression(cur: Cursor, ends: Callable[[Cursor], bool]) -> None:
    """An expression up to where `ends` says the clause goes on (or the statement ends)."""
    if cur.at_end() or ends(cur):
        raise DdlSyntaxError("expected an expression", cur.offset())
    while not cur.at_end() and not ends(cur):
        cur.skip_one()
