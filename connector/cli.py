"""The `sluice` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from connector.binlog.file import iter_file_events
from connector.errors import SluiceError
from connector.flat import FlatMessageBuilder, JsonLineEncoder


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice", description="MySQL/MariaDB change data capture")
    commands = parser.add_subparsers(dest="command", required=True)
    decode = commands.add_parser("decode", help="decode binlog files into flat messages (JSON lines)")
    decode.add_argument("files", nargs="+", metavar="FILE")
    decode.add_argument("--format", choices=["jsonl"], default="jsonl")
    decode.add_argument("--start-position", type=int, default=None, metavar="POS")
    decode.add_argument("--stop-position", type=int, default=None, metavar="POS")
    return parser


def decode_files(files: Sequence[str], out: TextIO, start: int | None = None, stop: int | None = None) -> int:
    """Write one JSON line per changed row (and per DDL); returns how many were written."""
    written = 0
    dumps = JsonLineEncoder().encode
    for path in files:
        builder = FlatMessageBuilder(os.path.basename(path))
        for event in iter_file_events(path, start, stop):
            for message in builder.feed(event):
                out.write(dumps(message))
                out.write("\n")
                written += 1
    return written


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "decode":
            decode_files(args.files, sys.stdout, args.start_position, args.stop_position)
    except SluiceError as exc:
        sys.stdout.flush()
        print(f"sluice: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
