"""The `sluice` command line: its arguments, and one line for whatever stops a command.

Each command is a module of connector/commands, imported only when it runs: a command loads
what it uses (`sluice decode` neither Kafka's nor Redis's clients), so it starts in a fraction
of a second."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

from connector import logs
from connector.errors import ConfigError, OversizedMessageError, SluiceError
from connector.secrets import REDACT


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="log at DEBUG and show the traceback of a fatal error")  # fmt: skip
    parser = argparse.ArgumentParser(prog="sluice", description="MySQL/MariaDB change data capture", parents=[common])
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    commands = parser.add_subparsers(dest="command", required=True)
    add_parser = commands.add_parser

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return add_parser(name, parents=[common], **kwargs)

    commands.add_parser = command  # type: ignore[method-assign]  # every command takes --debug too
    decode = commands.add_parser("decode", help="decode binlog files into flat messages (JSON lines)")
    decode.add_argument("files", nargs="+", metavar="FILE")
    decode.add_argument("--format", choices=["jsonl"], default="jsonl")
    decode.add_argument("--start-position", type=int, default=None, metavar="POS")
    decode.add_argument("--stop-position", type=int, default=None, metavar="POS")
    decode.add_argument(
        "--schema-from", metavar="URL", default=None,
        help="name columns from a live server's current tables: mysql://user:password@host:port; write the "
        "password as ${VARIABLE} (in single quotes) to keep it out of the process's arguments",
    )  # fmt: skip
    tail = commands.add_parser("tail", help="stream live flat messages from the server as JSON lines")
    tail.add_argument("--config", required=True, metavar="FILE")
    tail.add_argument("--start", default=None, help='override [source] start: "current", "earliest", FILE:POS')
    run = commands.add_parser("run", help="run the connector: binlog -> Avro -> Kafka, with checkpoints")
    run.add_argument("--config", required=True, metavar="FILE")
    status = commands.add_parser("status", help="saved positions (Redis, database) and the lag behind the server")
    status.add_argument("--config", required=True, metavar="FILE")
    position = commands.add_parser("position", help="show, set or reset the saved position (connector stopped)")
    position.add_argument("action", choices=["show", "set", "reset"])
    position.add_argument("value", nargs="?", help="for set: FILE:POS, or gtid:SET")
    position.add_argument("--config", required=True, metavar="FILE")
    snapshot = commands.add_parser("snapshot", help="read tables again as READ messages (a running connector does it)")
    snapshot.add_argument("--config", required=True, metavar="FILE")
    snapshot.add_argument("--tables", required=True, nargs="+", metavar="DB.TABLE")
    schema = commands.add_parser("schema", help="show the schema history's tables, or give a table's definition")
    schema.add_argument("action", choices=["show", "set"])
    schema.add_argument("tables", nargs="*", metavar="DB.TABLE", help="show: these only; set: the one to define")
    schema.add_argument("--config", required=True, metavar="FILE")
    schema.add_argument("--from-server", action="store_true", help="set: the server's definition now")
    schema.add_argument("--ddl", metavar="SQL", help="set: this CREATE TABLE statement")
    schema.add_argument("--at", metavar="FILE:POS", help="set: where it takes effect (default: the blocking statement)")
    spark = commands.add_parser("spark", help="run a Spark job on the topics: mirror (Delta MERGE) or changelog")
    spark.add_argument("job", choices=["mirror", "changelog"])
    spark.add_argument("--config", required=True, metavar="FILE")
    spark.add_argument("--once", action="store_true", help="process what is there now, then stop (AvailableNow)")
    consume = commands.add_parser("consume", help="print the connector's topics, decoded, as JSON lines")
    consume.add_argument("--config", required=True, metavar="FILE")
    consume.add_argument("--max", type=int, default=0, help="stop after this many messages (0: never)")
    consume.add_argument("--idle-s", type=float, default=0, help="stop after this long without a message (0: never)")
    return parser


class _Version(argparse.Action):
    """--version reads the installed package's metadata (importlib.metadata: tens of milliseconds
    to import), only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        import importlib.metadata  # noqa: PLC0415

        try:
            version = importlib.metadata.version("sluice-cdc")
        except importlib.metadata.PackageNotFoundError:
            version = "(not installed)"
        print(f"sluice {version}")
        parser.exit()


EXIT_OVERSIZED = 3  # stopped before a message over its topic's limit ([kafka] oversized = "fail")

# Each command's module (connector/commands/NAME.py), whose main(args) runs it; None is exit status 0.
_COMMANDS = ("decode", "tail", "run", "status", "position", "snapshot", "schema", "spark", "consume")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # --debug before or after the command: its action (shared by every parser through `parents`)
    # sets it only where given; a default set on one parser would be every parser's, and the
    # command's parser then put False over a --debug given before it.
    args.debug = getattr(args, "debug", False)
    logs.configure("text", args.debug)
    try:
        command = importlib.import_module(f"connector.commands.{args.command}")
        return int(command.main(args) or 0)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        return _fatal(exc, args.debug)


def _fatal(exc: Exception, debug: bool) -> int:
    """One line on stderr that says what stopped Sluice (secrets redacted), and the exit status:
    2 a configuration, 3 a message over its topic's limit (a supervisor must not restart into
    it), 1 anything else. --debug adds the traceback."""
    sys.stdout.flush()
    if debug:
        logging.getLogger("sluice").exception("stopped by")
    if isinstance(exc, ConfigError):
        line, status = f"configuration: {exc}", 2
    elif isinstance(exc, OversizedMessageError):
        line, status = f"{type(exc).__name__}: {exc}", EXIT_OVERSIZED
    elif isinstance(exc, SluiceError):
        line, status = f"{type(exc).__name__}: {exc}", 1
    elif isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        line, status = f"{where}{exc.strerror or exc}", 1
    else:
        line, status = f"unexpected {type(exc).__name__}: {exc} (sluice --debug ... shows where)", 1
    print(REDACT(f"sluice: {line}"), file=sys.stderr)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
