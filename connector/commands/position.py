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
    # [kafka] exactly_once: Kafka holds the position of record; the stores mirror it. (Kafka's
    # client is loaded only then: the command starts light.)
    once = None
    if config.kafka.exactly_once:
        from connector.exactly import PositionTopic, read_position, write_position  # noqa: PLC0415

        once = PositionTopic.of(config.kafka.topic_prefix, config.name)
    if action == "show":
        if once is not None:
            print(f"{once.topic} (the position of record): {read_position(config.kafka.client_config(), once)}")
        for store in targets:
            print(f"{store.name}: {store.get()}")
    elif action == "reset":
        if once is not None:
            write_position(config.kafka.client_config(), config.name, once, None)
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
        if once is not None:
            write_position(config.kafka.client_config(), config.name, once, position)
        for store in targets:
            store.put(position)
        print(f"position set to {position} (stop the connector first: a running one overwrites it)")
    return 0


def main(args: argparse.Namespace) -> int:
    return position_command(load_config(args.config, kafka=False), args.action, args.value)
