"""`sluice decode`: binlog files as flat messages, one JSON line each."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TextIO

from connector.binlog.file import iter_file_events
from connector.binlog.parser import BinlogParser
from connector.flat import FlatMessageBuilder, JsonLineEncoder, RowBatch
from connector.offset import Offset
from connector.position import Cursor
from connector.querytext import WHOLE_QUERIES

if TYPE_CHECKING:  # a tracker comes with --schema-from only, and brings the DDL reader
    from connector.schema.tracker import SchemaTracker


def decode_files(
    files: Sequence[str],
    out: TextIO,
    start: int | None = None,
    stop: int | None = None,
    tracker: SchemaTracker | None = None,
    compiled: bool = True,
    clock: Callable[[], float] = time.time,
) -> int:
    """Write one JSON line per changed row (and per DDL); returns how many were written.

    `compiled` False: every row rendered by the Python path (the compiled renderer's reference)."""
    written = 0
    encoder = JsonLineEncoder()
    for path in files:
        cursor = Cursor(os.path.basename(path))  # a file's events name it: one owner, read by all three
        builder = FlatMessageBuilder(Offset.of(cursor), clock, WHOLE_QUERIES)
        parser = BinlogParser(cursor)
        parser.raw_rows = compiled  # images the compiled renderer writes as JSON are never decoded in Python
        if tracker is not None:
            tracker.cursor = cursor
            parser.table_hook = tracker.table_hook
            builder.definitions = tracker.definition  # mysqlType and sqlType as canal-json's
        for event in iter_file_events(path, start, stop, parser):
            for item in builder.feed_batched(event):
                if isinstance(item, RowBatch):
                    out.write(encoder.lines(item))
                    written += len(item.rows.rows)
                else:
                    out.write(encoder.encode(item))
                    out.write("\n")
                    written += 1
    return written


def main(args: argparse.Namespace) -> None:
    tracker = None
    if args.schema_from:
        # Only --schema-from reads a server: its connection and capture load with it.
        from connector.commands.livetables import schema_from  # noqa: PLC0415

        tracker = schema_from(args.schema_from)
    decode_files(args.files, sys.stdout, args.start_position, args.stop_position, tracker)
