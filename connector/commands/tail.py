"""`sluice tail`: live flat messages from the server, as JSON lines (no Kafka, no checkpoint)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TextIO

from connector.config import load_config
from connector.flat import JsonLineEncoder
from connector.startup import prepare
from connector.stream import Changes, ChangeStream


def tail(config_path: str, start: str | None, out: TextIO) -> None:
    config = load_config(config_path, kafka=False)
    if start is not None:
        config = replace(config, source=replace(config.source, start=start))
    prepared = prepare(config)
    stream = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter())
    stream.query = config.source.query_text()
    stream.definitions = prepared.tracker.definition  # mysqlType and sqlType as canal-json's
    encoder = JsonLineEncoder()
    for item in stream.items(prepared.start):
        if isinstance(item, Changes) and item.batch is not None:
            out.write(encoder.lines(item.batch))  # `messages` is what the batch renders
        elif isinstance(item, Changes):
            out.write("".join(encoder.encode(m) + "\n" for m in item.messages))
        else:
            out.flush()


def main(args: argparse.Namespace) -> None:
    tail(args.config, args.start, sys.stdout)
