"""`sluice snapshot --tables`: queue a re-read of tables for the running (or next) connector."""

from __future__ import annotations

import argparse

from connector.checkpointdb import checkpoint_connector
from connector.config import Config, load_config
from connector.errors import ConfigError
from connector.filters import table_name
from connector.replica.client import open_connection
from connector.snapshot.requests import DatabaseSnapshotRequests


def request_snapshot(config: Config, names: list[str]) -> int:
    """Queue a snapshot of existing, captured tables for the connector to read."""
    tables = [table_name(part, "--tables") for name in names for part in name.split(",") if part]
    included = config.table_filter()
    excluded = [f"{d}.{t}" for d, t in tables if not included(d, t)]
    if excluded:
        raise ConfigError(f"not captured by [source] include/exclude: {', '.join(excluded)}")
    with open_connection(config.source.settings()) as conn, conn.cursor() as cur:
        for database, table in tables:
            cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                        (database, table))  # fmt: skip
            if cur.fetchone() is None:
                raise ConfigError(f"{database}.{table} does not exist on {config.source.host}:{config.source.port}")
    request = DatabaseSnapshotRequests(checkpoint_connector(config), config.name).add(tables)
    print(f"snapshot requested (#{request}): {', '.join(f'{d}.{t}' for d, t in tables)}; a running connector "
          "starts it within seconds, a stopped one when it starts")  # fmt: skip
    return 0


def main(args: argparse.Namespace) -> int:
    return request_snapshot(load_config(args.config, kafka=False), args.tables)
