"""`sluice schema show|set`: what the schema history holds, and an operator's definition of a table.

A table whose definition a statement left unknown (connector/schema/tracker.py) stops the
connector at its next row. `sluice schema set DB.TABLE --from-server` records the server's
definition now, `--ddl 'CREATE TABLE ...'` one the operator writes, as of that statement's
position (or `--at FILE:POS` for a table that is not blocked); the next start rebuilds the
schema with it. The server's definition now is right only if the table has not changed
since the statement: that is the operator's call, which is why Sluice never makes it alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TextIO

from connector.checkpointdb import checkpoint_connector
from connector.config import Config
from connector.errors import ConfigError
from connector.filters import table_name
from connector.position import Position, position_of_text
from connector.replica.client import open_connection
from connector.schema.capture import read_table
from connector.schema.ddl import Unreadable, read_ddl
from connector.schema.history import HistoryRecord, HistoryStore, MariadbHistoryStore, rebuild
from connector.schema.model import Database, Schema, Table


def history_store(config: Config) -> HistoryStore:
    return MariadbHistoryStore(checkpoint_connector(config), config.name)


def schema_show(config: Config, names: list[str], out: TextIO, store: HistoryStore | None = None) -> int:
    """One JSON line per tracked or blocked table (all of them, or those named), as of the newest record."""
    schema = rebuild((store or history_store(config)).load(), None)
    wanted = {table_name(n) for n in names}
    for key in sorted(set(schema.tables) | set(schema.blocked)):
        if wanted and key not in wanted:
            continue
        out.write(json.dumps(_shown(schema, key), ensure_ascii=False) + "\n")
    return 0


def _shown(schema: Schema, key: tuple[str, str]) -> dict[str, Any]:
    blocked = schema.blocked.get(key)
    if blocked is not None:
        return {"table": ".".join(key), "blocked": {"position": blocked.position, "reason": blocked.reason,
                                                     "statement": blocked.statement}}  # fmt: skip
    table = schema.tables[key]
    columns = [f"{c.name} {c.sql_type()}{'' if c.nullable else ' NOT NULL'}" for c in table.columns]
    return {"table": ".".join(key), "columns": columns, "primary_key": list(table.primary_key)}


def schema_set(
    config: Config, name: str, from_server: bool, ddl: str | None, at: str | None, store: HistoryStore | None = None,
    out: Callable[[str], None] = print,
) -> int:  # fmt: skip
    """Record a definition of one table (None: it does not exist) at the statement that blocked it."""
    if from_server == (ddl is not None):
        raise ConfigError("schema set needs exactly one of --from-server and --ddl")
    key = table_name(name)
    store = store or history_store(config)
    records = store.load()
    schema = rebuild(records, None)
    position = _position(schema, key, at)
    definition = _from_server(config, key) if from_server else _from_ddl(schema, key, ddl or "")
    statement = f"sluice schema set {name} {'--from-server' if from_server else '--ddl'}"
    store.append([HistoryRecord(position, "override", key[0], key[1],
                                None if definition is None else definition.to_json(), statement)])  # fmt: skip
    shown = "does not exist" if definition is None else f"({', '.join(definition.column_names())})"
    out(f"{key[0]}.{key[1]} {shown} as of {position.file}:{position.pos}; start the connector again to use it")
    return 0


def _position(schema: Schema, key: tuple[str, str], at: str | None) -> Position:
    if at is not None:
        return position_of_text(at)
    blocked = schema.blocked.get(key)
    if blocked is None:
        raise ConfigError(f"{key[0]}.{key[1]} is not blocked by a statement Sluice could not read: say where the "
                          "definition takes effect with --at FILE:POS")  # fmt: skip
    return position_of_text(blocked.position)


def _from_server(config: Config, key: tuple[str, str]) -> Table | None:
    with open_connection(config.source.settings()) as conn:
        return read_table(conn, key[0], key[1], Schema())


def _from_ddl(schema: Schema, key: tuple[str, str], sql: str) -> Table:
    """A CREATE TABLE statement, read as the stream would read it, under the table's name."""
    work = Schema(databases=dict(schema.databases) or {key[0]: Database(key[0])})
    result = read_ddl(work, sql, key[0])
    if isinstance(result, Unreadable):
        raise ConfigError(f"--ddl: {result.reason}")
    made = [c.definition for c in result if c.definition is not None]
    if len(made) != 1 or not sql.lstrip().upper().startswith("CREATE"):
        raise ConfigError("--ddl must be one CREATE TABLE statement")
    return replace(made[0], database=key[0], name=key[1])
