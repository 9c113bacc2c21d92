"""The `sluice` command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TextIO

from connector.binlog.file import iter_file_events
from connector.binlog.parser import BinlogParser
from connector.config import load_config
from connector.errors import ConfigError, SluiceError
from connector.filters import TableFilter
from connector.flat import FlatMessageBuilder, JsonLineEncoder
from connector.replica.client import open_connection
from connector.schema.history import MemoryHistoryStore
from connector.schema.tracker import SchemaTracker
from connector.startup import consistent_capture, prepare
from connector.stream import Changes, ChangeStream
from connector.urls import source_settings_of_url


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice", description="MySQL/MariaDB change data capture")
    commands = parser.add_subparsers(dest="command", required=True)
    decode = commands.add_parser("decode", help="decode binlog files into flat messages (JSON lines)")
    decode.add_argument("files", nargs="+", metavar="FILE")
    decode.add_argument("--format", choices=["jsonl"], default="jsonl")
    decode.add_argument("--start-position", type=int, default=None, metavar="POS")
    decode.add_argument("--stop-position", type=int, default=None, metavar="POS")
    decode.add_argument(
        "--schema-from", metavar="URL", default=None,
        help="name columns from a live server's current tables: mysql://user:pass@host:port",
    )  # fmt: skip
    tail = commands.add_parser("tail", help="stream live flat messages from the server as JSON lines")
    tail.add_argument("--config", required=True, metavar="FILE")
    tail.add_argument("--start", default=None, help='override [source] start: "current", "earliest", FILE:POS')
    return parser


def decode_files(
    files: Sequence[str],
    out: TextIO,
    start: int | None = None,
    stop: int | None = None,
    tracker: SchemaTracker | None = None,
) -> int:
    """Write one JSON line per changed row (and per DDL); returns how many were written."""
    written = 0
    dumps = JsonLineEncoder().encode
    for path in files:
        builder = FlatMessageBuilder(os.path.basename(path))
        parser = BinlogParser(os.path.basename(path))
        if tracker is not None:
            tracker.source = parser.source
            parser.table_hook = tracker.table_hook
        for event in iter_file_events(path, start, stop, parser):
            for message in builder.feed(event):
                out.write(dumps(message))
                out.write("\n")
                written += 1
    return written


def schema_from(url: str) -> SchemaTracker:
    """A tracker holding a live server's current tables (for naming columns of offline files)."""
    included = TableFilter.of(None, None)
    tracker = SchemaTracker(MemoryHistoryStore(), included)
    with open_connection(source_settings_of_url(url)) as conn:
        tracker.schema, _ = consistent_capture(conn, included)
    return tracker


def tail(config_path: str, start: str | None, out: TextIO) -> None:
    config = load_config(config_path)
    if start is not None:
        config = replace(config, source=replace(config.source, start=start))
    prepared = prepare(config)
    stream = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter())
    dumps = JsonLineEncoder().encode
    for item in stream.items(prepared.start):
        if isinstance(item, Changes):
            out.write("".join(dumps(m) + "\n" for m in item.messages))
        else:
            out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        if args.command == "decode":
            tracker = schema_from(args.schema_from) if args.schema_from else None
            decode_files(args.files, sys.stdout, args.start_position, args.stop_position, tracker)
        elif args.command == "tail":
            tail(args.config, args.start, sys.stdout)
    except ConfigError as exc:
        print(f"sluice: configuration: {exc}", file=sys.stderr)
        return 2
    except SluiceError as exc:
        sys.stdout.flush()
        print(f"sluice: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
