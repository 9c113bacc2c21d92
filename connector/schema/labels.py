"""ENUM and SET labels exactly as the server holds them.

SHOW CREATE TABLE and information_schema.COLUMNS print a column's type in utf8mb3: each
label is converted into the system charset (Field_enum::sql_type, sql/field.cc, on both
servers), so a character outside the BMP comes out as '?'. A label read that way with a '?'
in a charset that can hold such characters is ambiguous: the '?' may be its own.

The exact sources, best first:
- DDL statements in the binlog (the tracker applies their text as written);
- the TABLE_MAP's labels where the server logs them (binlog_row_metadata=FULL): `repaired`;
- a temporary table of the column's type, filled by index and read back with SELECT, which
  converts nothing (`read_exact`; it needs CREATE TEMPORARY TABLES, which the documented
  grants do not hold, and writes nothing to the binlog under binlog_format=ROW).
Where none is there, the capture says so once per column (`InexactLabels.warning`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import pymysql

from connector.binlog.tablemap import TableMapEvent
from connector.schema.model import Column, Table
from connector.schema.sqltokens import quote_identifier
from connector.schema.types import as_printed

log = logging.getLogger("sluice.schema")

# Charsets with characters outside the BMP, which utf8mb3 prints as '?'.
WIDE_CHARSETS = frozenset({"utf8mb4", "utf16", "utf16le", "utf32", "gb18030"})
_SCRATCH = "_sluice_labels"  # the temporary table's name, in the table's database


def ambiguous(col: Column) -> bool:
    """Could a '?' in this column's labels stand for another character?"""
    return col.data_type in ("enum", "set") and col.charset in WIDE_CHARSETS and any("?" in p for p in col.params)


def with_labels(col: Column, labels: tuple[str, ...]) -> Column:
    """The column with exact labels; a DEFAULT naming the printed ones names the exact ones."""
    exact = dict(zip(col.params, labels))
    default = col.default
    if default is not None and col.data_type == "enum":
        default = exact.get(default, default)
    elif default is not None:
        default = ",".join(exact.get(part, part) for part in default.split(","))
    return replace(col, params=labels, default=default)


# -- from the binlog ---------------------------------------------------------------------------


def repaired(table: Table, table_map: TableMapEvent) -> Table | None:
    """The table with the TABLE_MAP's labels where they are the exact form of ambiguous ones
    (binlog_row_metadata=FULL); None when nothing changes."""
    columns, changed = list(table.columns), False
    for i, (col, meta) in enumerate(zip(table.columns, table_map.columns)):
        logged = meta.enum_values if col.data_type == "enum" else meta.set_values
        if not ambiguous(col) or logged is None or tuple(logged) == col.params or len(logged) != len(col.params):
            continue
        if all(as_printed(exact) == printed for exact, printed in zip(logged, col.params)):
            columns[i], changed = with_labels(col, tuple(logged)), True
    return replace(table, columns=tuple(columns)) if changed else None


# -- from the server ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InexactLabels:
    """Columns of a captured table whose labels may differ from the server's, and why."""

    table: Table
    columns: tuple[str, ...]
    reason: str

    def warning(self, full_metadata: bool) -> str:
        name = f"`{self.table.database}`.`{self.table.name}`"
        then = ("Sluice takes them from the table's next TABLE_MAP (binlog_row_metadata=FULL)" if full_metadata
                else "a value of such a label is published with its '?' until a DDL statement on the table gives "
                     "them; set binlog_row_metadata=FULL (read from the binlog), or GRANT CREATE TEMPORARY TABLES ON "
                     f"{quote_identifier(self.table.database)}.* TO the connector's user and run `sluice schema set "
                     f"{self.table.database}.{self.table.name} --from-server`")  # fmt: skip
        return (f"ENUM/SET labels of {name} column(s) {', '.join(self.columns)} read as SHOW CREATE TABLE prints "
                f"them, where '?' stands for any character outside the BMP; the exact read failed ({self.reason}): "
                f"{then}")  # fmt: skip


def read_exact(conn: pymysql.connections.Connection, table: Table) -> Table | InexactLabels:
    """The table with the server's exact labels for its ambiguous columns (the table itself when
    none is), or what could not be read and why."""
    wanted = [c for c in table.columns if ambiguous(c)]
    if not wanted:
        return table
    try:
        labels = _scratch_read(conn, table, wanted)
    except pymysql.err.MySQLError as exc:
        reason = str(exc.args[-1]) if exc.args else type(exc).__name__
        return InexactLabels(table, tuple(c.name for c in wanted), reason)
    exact = {c.name: with_labels(c, labels[i]) for i, c in enumerate(wanted)}
    return replace(table, columns=tuple(exact.get(c.name, c) for c in table.columns))


def _scratch_read(
    conn: pymysql.connections.Connection, table: Table, columns: list[Column]
) -> list[tuple[str, ...]]:
    """Each column's labels, read back from a temporary table of its type filled by index (an
    ENUM's index k, a SET's bit k), converted to utf8mb4 by the server."""
    scratch = f"{quote_identifier(table.database)}.{quote_identifier(_SCRATCH)}"
    names = [quote_identifier(c.name) for c in columns]
    rows = max(len(c.params) for c in columns)
    values = ", ".join(
        "(" + ", ".join([str(k), *(_nth(c, k) for c in columns)]) + ")" for k in range(1, rows + 1)
    )
    source = f"{quote_identifier(table.database)}.{quote_identifier(table.name)}"
    # Identifiers quoted, values integers: nothing here comes from a user as text.
    create = f"CREATE TEMPORARY TABLE {scratch} AS SELECT 0 AS k, {', '.join(names)} FROM {source} LIMIT 0"  # noqa: S608
    select = f"SELECT {', '.join(f'CONVERT({n} USING utf8mb4)' for n in names)} FROM {scratch} ORDER BY k"  # noqa: S608
    with conn.cursor() as cur:
        cur.execute(f"DROP TEMPORARY TABLE IF EXISTS {scratch}")
        cur.execute(create)
        try:
            cur.execute(f"INSERT INTO {scratch} VALUES {values}")  # noqa: S608
            cur.execute(select)
            read = cur.fetchall()
        finally:
            cur.execute(f"DROP TEMPORARY TABLE IF EXISTS {scratch}")
    return [tuple(str(read[k][i]) for k in range(len(c.params))) for i, c in enumerate(columns)]


def _nth(col: Column, k: int) -> str:
    """The value that stores label k (1-based): its index, or its bit; the first past the end."""
    k = min(k, len(col.params))
    return str(k) if col.data_type == "enum" else str(1 << (k - 1))
