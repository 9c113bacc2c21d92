"""`sluice tail`: live flat messages from the server, as JSON lines (no Kafka, no checkpoint)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TextIO

from connector.config import load_config
from connector.flat import JsonLineEncoder
from connector.items import Changes
from connector.startup import prepare
from connector.stream import ChangeStream, StreamOptions


def tail(config_path: str, start: str | None, out: TextIO) -> None:
    config = load_config(config_path, kafka=False)
    if start is not None:
        config = replace(config, source=replace(config.source, start=start))
    prepared = prepare(config)
    # mysqlType and sqlType as canal-json's, from the schema history
    options = StreamOptions(query=config.source.query_text(), definitions=prepared.tracker.definition)
    stream = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(), options=options)
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
