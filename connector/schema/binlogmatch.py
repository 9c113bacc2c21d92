"""Checking a TABLE_MAP against the tracked table, and naming its columns from it.

The tracked schema is the authority for names and keys; the TABLE_MAP is what the row
images really hold. They must agree on the column count and on each column's type
family, and, when the server logged names (binlog_row_metadata=FULL), on the names.
"""

from __future__ import annotations

from dataclasses import replace

from connector.binlog.charsets import collation_id_of_charset
from connector.binlog.coltypes import TYPES
from connector.binlog.constants import ColumnType as T
from connector.binlog.tablemap import ColumnMeta, TableMapEvent
from connector.schema.model import BINARY_TYPES, CHARACTER_TYPES, GEOMETRY_TYPES, Column, Table


def _binlog_types() -> dict[str, frozenset[int]]:
    """Declared type -> the binlog real types a column of it may be logged as (coltypes.TYPES)."""
    types: dict[str, set[int]] = {}
    for kind in TYPES.values():
        for word in (kind.sql, *kind.words):
            types.setdefault(word, set()).add(kind.code)
    types.update({word: {T.MYSQL_TYPE_GEOMETRY} for word in GEOMETRY_TYPES})
    return {word: frozenset(codes) for word, codes in types.items()}


BINLOG_TYPES = _binlog_types()
# MariaDB's INET4/INET6/UUID are plugin types logged as fixed binary strings.
_PLUGIN_TYPES = {"inet4": T.MYSQL_TYPE_STRING, "inet6": T.MYSQL_TYPE_STRING, "uuid": T.MYSQL_TYPE_STRING}


def disagreements(table: Table, table_map: TableMapEvent) -> list[str]:
    """How the TABLE_MAP differs from the tracked table; empty when they agree."""
    logged = table_map.columns
    if len(logged) != len(table.columns):
        return [
            f"column count: tracked {len(table.columns)} ({', '.join(table.column_names())}), "
            f"TABLE_MAP {len(logged)}{_logged_names(table_map)}"
        ]
    problems = []
    for col, meta in zip(table.columns, logged):
        allowed = BINLOG_TYPES.get(col.data_type) or frozenset({_PLUGIN_TYPES.get(col.data_type, meta.real_type)})
        if meta.real_type not in allowed:
            problems.append(
                f"column {meta.index + 1} `{col.name}`: tracked {col.sql_type()}, TABLE_MAP type {meta.real_type}"
            )
        if meta.compressed != col.compressed:
            problems.append(f"column {meta.index + 1} `{col.name}`: tracked {'' if col.compressed else 'not '}"
                            f"COMPRESSED, TABLE_MAP type {meta.type_code}")  # fmt: skip
        if meta.name is not None and meta.name.lower() != col.name.lower():
            problems.append(f"column {meta.index + 1}: tracked name `{col.name}`, TABLE_MAP name `{meta.name}`")
    return problems


def _logged_names(table_map: TableMapEvent) -> str:
    if any(c.name is None for c in table_map.columns):
        return ""
    return f" ({', '.join(table_map.column_names)})"


def named(table_map: TableMapEvent, table: Table) -> TableMapEvent:
    """The TABLE_MAP with the tracked names, key, signedness and charsets filled in.

    Signedness and charsets come from the tracked table only where the server did not
    log them (binlog_row_metadata=MINIMAL); what the binlog says is what the bytes are.
    """
    has_metadata = table_map.has_optional_metadata
    columns = tuple(_named_column(meta, col, has_metadata) for meta, col in zip(table_map.columns, table.columns))
    primary = tuple(i for name in table.primary_key if (i := table.index_of(name)) >= 0)
    return replace(table_map, columns=columns, primary_key=primary)


def _named_column(meta: ColumnMeta, col: Column, has_metadata: bool) -> ColumnMeta:
    changes: dict[str, object] = {"name": col.name}
    if not has_metadata:  # no SIGNEDNESS either
        changes["unsigned"] = col.unsigned
    if meta.collation is None and col.charset is not None and (col.data_type in CHARACTER_TYPES | BINARY_TYPES):
        changes["collation"] = collation_id_of_charset(col.charset)
    if col.data_type == "enum" and meta.enum_values is None:
        changes["enum_values"] = col.params
    if col.data_type == "set" and meta.set_values is None:
        changes["set_values"] = col.params
    return replace(meta, **changes)  # type: ignore[arg-type]
