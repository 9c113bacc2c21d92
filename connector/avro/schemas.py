"""Avro schemas from tracked table definitions: one value schema and one key schema per table version.

A value is the canal envelope with typed rows:
  id, database, table, type, isDdl, pkNames, es, ts, sql, gtid, data, old, source
where `data` (and, for UPDATE, `old`: the whole before image) are arrays of one row record
whose fields are the table's columns, typed and nullable as in MySQL. `mysqlType` and
`sqlType` are properties of each column field, not parts of every message. The key is a
record of the primary-key columns.

Column names that are not Avro names (spaces, dashes, non-ASCII) become Avro names with
`_` in place of the rest; the field keeps the MySQL name in its `mysqlName` property.
A column renamed by RENAME COLUMN or CHANGE COLUMN carries its earlier names as the field's
`aliases` (made Avro names the same way), so a reader on a newer version resolves data
written under an older name to the renamed field. Aliases are not part of the parsing
canonical form: they do not change a schema's fingerprint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from connector.avro.values import STRING_TYPES, bit_width, converter
from connector.schema.model import GEOMETRY_TYPES, Column, Table

AvroType = Any  # a JSON-shaped Avro type

# java.sql.Types by declared type, as canal reports them (flat.py derives the same from the binlog).
_SQL_TYPES = {
    "tinyint": -6, "smallint": 5, "mediumint": 4, "int": 4, "bigint": -5, "float": 7, "double": 8,
    "decimal": 3, "year": 12, "date": 91, "time": 92, "datetime": 93, "timestamp": 93, "bit": -7,
    "enum": 1, "set": 1, "json": 12, "char": 1, "varchar": 12, "binary": -2, "varbinary": -3,
    "tinytext": 2005, "text": 2005, "mediumtext": 2005, "longtext": 2005, "tinyblob": 2004, "blob": 2004,
    "mediumblob": 2004, "longblob": 2004, "vector": -2,
}  # fmt: skip


def avro_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return "_" + name if not name or name[0].isdigit() else name


def _decimal(precision: int, scale: int) -> AvroType:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}


def column_type(col: Column) -> AvroType:
    """The Avro type of a column's non-null values."""
    kind = col.data_type
    if kind in ("tinyint", "smallint", "mediumint", "year") or (kind == "int" and not col.unsigned):
        return "int"
    if kind == "bit" and bit_width(col) == 64:
        return _decimal(20, 0)  # BIT(64) reaches 2^64 - 1, past a signed long, as BIGINT UNSIGNED does
    if kind == "int" or (kind == "bigint" and not col.unsigned) or kind == "bit":
        return "long"
    if kind == "bigint":
        return _decimal(20, 0)  # BIGINT UNSIGNED reaches 2^64 - 1, past a signed long
    if kind in ("float", "double"):
        return kind
    if kind == "decimal":
        return _decimal(int(col.params[0]), int(col.params[1]))
    if kind == "date":
        return {"type": "int", "logicalType": "date"}
    if kind == "time":
        return {"type": "long", "logicalType": "time-micros"}
    if kind in ("datetime", "timestamp"):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if kind == "vector":
        return {"type": "array", "items": "float"}
    if kind in STRING_TYPES:
        return "string"
    return "bytes"  # binary strings, BLOBs, geometry, MariaDB INET4/INET6/UUID, and the unknown


def default_value(col: Column) -> Any:
    """The column's literal DEFAULT as an Avro JSON default, or None."""
    if col.default is None:
        return None
    try:
        value = converter(col)(col.default)
    except (ValueError, ArithmeticError):
        return None
    if isinstance(value, Decimal):
        unscaled = int(value.scaleb(int(col.params[1] if col.params else 0)).to_integral_value())
        size = max(1, (unscaled.bit_length() + 8) // 8)
        return unscaled.to_bytes(size, "big", signed=True).decode("latin-1")
    if isinstance(value, bytes):
        return value.decode("latin-1")  # Avro JSON defaults give bytes as one character per byte
    return value


def nullable(col: Column) -> bool:
    # Zero dates ('0000-00-00') have no Avro value: temporal columns carry them as null.
    return col.nullable or col.data_type in ("date", "datetime", "timestamp")


def _field(col: Column, name: str, aliases: tuple[str, ...] = ()) -> dict[str, Any]:
    """A column's field. Its Avro default is the column's DEFAULT, so a reader on a newer
    version fills a column added by ALTER ... ADD COLUMN ... DEFAULT x with x, as MySQL did."""
    kind = column_type(col)
    default = default_value(col)
    field: dict[str, Any] = {"name": name}
    if aliases:
        field["aliases"] = list(aliases)
    if default is not None:
        field["type"] = [kind, "null"] if nullable(col) else kind  # a union's default is of its first branch
        field["default"] = default
    elif nullable(col):
        field["type"], field["default"] = ["null", kind], None
    else:
        field["type"] = kind
    field["mysqlType"] = col.sql_type()
    field["sqlType"] = _SQL_TYPES.get(col.data_type, -2 if col.data_type in GEOMETRY_TYPES else 1111)
    if name != col.name:
        field["mysqlName"] = col.name
    return field


def field_names(table: Table) -> list[str]:
    """Avro field names of the columns, unique within the table."""
    names: list[str] = []
    for col in table.columns:
        base = name = avro_name(col.name)
        n = 2
        while name in names:
            name, n = f"{base}_{n}", n + 1
        names.append(name)
    return names


def field_aliases(table: Table) -> list[tuple[str, ...]]:
    """Per column, its field's aliases: its earlier names as Avro names, leaving out any that is
    a field's name in this table or an alias of two fields. Resolution would send old data
    of such a name to the wrong field, or could not choose (Java rewrites the writer's field
    names by the reader's aliases and refuses two fields of one name)."""
    names = field_names(table)
    wanted = [dict.fromkeys(avro_name(a) for a in col.aliases) for col in table.columns]
    count: dict[str, int] = {}
    for aliases in wanted:
        for alias in aliases:
            count[alias] = count.get(alias, 0) + 1
    taken = set(names)
    return [tuple(a for a in aliases if a not in taken and count[a] == 1) for aliases in wanted]


def _source_record() -> AvroType:
    return {
        "type": "record", "name": "Source", "namespace": "sluice",
        "fields": [
            {"name": "server_id", "type": "long"}, {"name": "file", "type": "string"},
            {"name": "pos", "type": "long"}, {"name": "row", "type": "int"},
        ],
    }  # fmt: skip


def value_schema(table: Table, version: int) -> dict[str, Any]:
    namespace = f"sluice.{avro_name(table.database)}"
    name = avro_name(table.name)
    row = {
        "type": "record", "name": f"{name}_row", "namespace": namespace,
        "fields": [
            _field(col, fname, aliases)
            for col, fname, aliases in zip(table.columns, field_names(table), field_aliases(table))
        ],
    }  # fmt: skip
    return {
        "type": "record", "name": name, "namespace": namespace,
        "doc": f"Changes of `{table.database}`.`{table.name}`, schema version {version}",
        "sluice.database": table.database, "sluice.table": table.name, "sluice.version": version,
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "database", "type": "string"}, {"name": "table", "type": "string"},
            # TRUNCATE: a keyless table's READ pass begins (data null: a consumer clears the table).
            # Symbols are only ever appended (the compiled rows path writes their indexes), and a
            # reader of this version maps a later one to READ.
            {"name": "type", "type": {"type": "enum", "name": "ChangeType", "namespace": "sluice",
                                      "symbols": ["INSERT", "UPDATE", "DELETE", "READ", "TRUNCATE"],
                                      "default": "READ"}},
            {"name": "isDdl", "type": "boolean"},
            {"name": "pkNames", "type": ["null", {"type": "array", "items": "string"}], "default": None},
            {"name": "es", "type": "long"}, {"name": "ts", "type": "long"},
            {"name": "sql", "type": "string"}, {"name": "gtid", "type": ["null", "string"], "default": None},
            {"name": "data", "type": ["null", {"type": "array", "items": row}], "default": None},
            {"name": "old", "type": ["null", {"type": "array", "items": f"{namespace}.{name}_row"}],
             "default": None},
            {"name": "source", "type": _source_record()},
        ],
    }  # fmt: skip


def row_fields(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The fields of a value schema's row record (its `data` items), as value_schema lays it out."""
    data = next(f for f in schema["fields"] if f["name"] == "data")
    fields: list[dict[str, Any]] = data["type"][1]["items"]["fields"]
    return fields


def key_schema(table: Table) -> dict[str, Any] | None:
    if not table.primary_key:
        return None
    by_name = {c.name.lower(): (c, f, a) for c, f, a in zip(table.columns, field_names(table), field_aliases(table))}
    fields = []
    for key in table.primary_key:
        col, fname, aliases = by_name[key.lower()]
        field = _field(col, fname, aliases)
        field.pop("default", None)
        field["type"] = column_type(col)  # key columns are never null
        fields.append(field)
    return {
        "type": "record", "name": f"{avro_name(table.name)}_key", "namespace": f"sluice.{avro_name(table.database)}",
        "fields": fields,
    }  # fmt: skip


def ddl_schema() -> dict[str, Any]:
    """Statements, on `{prefix}.{database}._ddl`."""
    return {
        "type": "record", "name": "Ddl", "namespace": "sluice",
        "fields": [
            {"name": "id", "type": "long"}, {"name": "database", "type": "string"},
            {"name": "table", "type": "string"}, {"name": "type", "type": "string"},
            {"name": "isDdl", "type": "boolean"}, {"name": "es", "type": "long"}, {"name": "ts", "type": "long"},
            {"name": "sql", "type": "string"}, {"name": "gtid", "type": ["null", "string"], "default": None},
            {"name": "source", "type": _source_record()},
        ],
    }  # fmt: skip


def ddl_key_schema() -> dict[str, Any]:
    return {
        "type": "record", "name": "DdlKey", "namespace": "sluice",
        "fields": [{"name": "database", "type": "string"}, {"name": "table", "type": "string"}],
    }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Compatibility:
    backward: bool  # readers of the new version can read data written with the old one
    reasons: tuple[str, ...]


def backward_compatible(old: Table, new: Table) -> Compatibility:
    """Can a reader using `new`'s schema read rows written with `old`'s? (Avro schema resolution.)"""
    reasons = []
    before = {avro_name(c.name): c for c in old.columns}
    for col, aliases in zip(new.columns, field_aliases(new)):
        # Resolution matches the old field by name, else by the new field's aliases (a rename).
        name = next((n for n in (avro_name(col.name), *aliases) if n in before), None)
        if name is None:
            if not nullable(col) and default_value(col) is None:
                reasons.append(f"new column `{col.name}` is NOT NULL with no default")
            continue
        was, now = column_type(before[name]), column_type(col)
        if was != now and not _promotable(was, now):
            reasons.append(f"column `{col.name}` changed from {was} to {now}")
        if nullable(before[name]) and not nullable(col):
            reasons.append(f"column `{col.name}` is no longer nullable")
    return Compatibility(not reasons, tuple(reasons))


_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
               ("float", "double"), ("string", "bytes"), ("bytes", "string")}  # fmt: skip


def _promotable(was: AvroType, now: AvroType) -> bool:
    return isinstance(was, str) and isinstance(now, str) and (was, now) in _PROMOTIONS
