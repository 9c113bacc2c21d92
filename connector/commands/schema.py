"""`sluice schema show|set`: the schema history's tables, or a blocked table's definition."""

from __future__ import annotations

import argparse
import sys

from connector.config import load_config
from connector.errors import ConfigError
from connector.schema.commands import schema_set, schema_show


def main(args: argparse.Namespace) -> int:
    config = load_config(args.config, kafka=False)
    if args.action == "show":
        return schema_show(config, args.tables, sys.stdout)
    if len(args.tables) != 1:
        raise ConfigError("schema set takes one DB.TABLE")
    return schema_set(config, args.tables[0], args.from_server, args.ddl, args.at)
