"""`sluice position show|set|reset`: the saved position, with the connector stopped."""

from __future__ import annotations

import argparse

from connector.checkpoint import checkpoint_stores
from connector.config import Config, load_config
from connector.errors import ConfigError
from connector.position import POSITION_TEXT, position_of_text
from connector.replica.client import open_connection
from connector.startup import missing_on_server


def position_command(config: Config, action: str, value: str | None) -> int:
    stores = checkpoint_stores(config)
    targets = [s for s in (stores.fast, stores.durable) if s is not None]
    if action == "show":
        for store in targets:
            print(f"{store.name}: {store.get()}")
    elif action == "reset":
        for store in targets:
            store.delete()
        print("position reset: the next start uses [source] start")
    else:
        if value is None or not POSITION_TEXT.match(value):
            raise ConfigError("position set needs FILE:POS or gtid:SET")
        position = position_of_text(value)
        with open_connection(config.source.settings()) as conn:
            problem = missing_on_server(conn, position)
        if problem is not None:
            raise ConfigError(f"position set {value}: {problem}; nothing was saved")
        for store in targets:
            store.put(position)
        print(f"position set to {position} (stop the connector first: a running one overwrites it)")
    return 0


def main(args: argparse.Namespace) -> int:
    return position_command(load_config(args.config, kafka=False), args.action, args.value)
