"""The `sluice` command line."""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TextIO

import redis
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient

from connector import logs
from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.binlog.file import iter_file_events
from connector.binlog.parser import BinlogParser
from connector.checkpoint import BlockingNotes, redis_client
from connector.config import Config, load_config
from connector.errors import (
    CheckpointUnavailableError,
    ConfigError,
    OversizedMessageError,
    SluiceError,
    UnreadableMessageError,
)
from connector.filters import TableFilter
from connector.flat import WHOLE_QUERIES, FlatMessageBuilder, JsonLineEncoder, RowBatch
from connector.position import POSITION_TEXT, Cursor, Position, position_of_text
from connector.replica.client import open_connection
from connector.runner import Connector, checkpoint_stores, presence_key, run_with_lease
from connector.schema.capture import master_position
from connector.schema.commands import schema_set, schema_show
from connector.schema.history import MemoryHistoryStore
from connector.schema.tracker import SchemaTracker
from connector.secrets import REDACT, expanded_url
from connector.snapshot.requests import DatabaseSnapshotRequests
from connector.snapshot.state import SnapshotState
from connector.startup import checkpoint_connector, consistent_capture, missing_on_server, prepare
from connector.stream import Changes, ChangeStream
from connector.urls import source_settings_of_url


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="log at DEBUG and show the traceback of a fatal error")  # fmt: skip
    parser = argparse.ArgumentParser(prog="sluice", description="MySQL/MariaDB change data capture", parents=[common])
    parser.add_argument("--version", action="version", version=f"sluice {_version()}")
    parser.set_defaults(debug=False)
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


def _version() -> str:
    try:
        return importlib.metadata.version("sluice-cdc")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


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
        builder = FlatMessageBuilder(cursor, clock, WHOLE_QUERIES)
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


def schema_from(url: str) -> SchemaTracker:
    """A tracker holding a live server's current tables (for naming columns of offline files)."""
    included = TableFilter.of(None, None)
    tracker = SchemaTracker(MemoryHistoryStore(), included)
    with open_connection(source_settings_of_url(expanded_url(url, "--schema-from"))) as conn:
        tracker.schema, _ = consistent_capture(conn, included)
    return tracker


def tail(config_path: str, start: str | None, out: TextIO) -> None:
    config = load_config(config_path)
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


def run_connector(config_path: str, debug: bool = False) -> None:
    config = load_config(config_path)
    logs.configure(config.metrics.log_format, debug)
    stop = threading.Event()
    # SIGHUP too: a terminal or supervisor hanging up stops the connector the same way, its
    # position saved (it used to kill it with no final flush).
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    if config.ha.enabled:
        run_with_lease(config, stop, _sole_job)
        return
    connector = Connector(config, stop=stop)  # given, not set after: the Kafka sink's wait reads it
    _sole_job(connector)
    connector.run()


def _sole_job(connector: Connector) -> None:
    connector.sole_job = True  # this process is the connector's: runner.tune_gc()


def status(config: Config) -> dict[str, Any]:
    """Saved positions and how far behind the server they are, whether a connector is running
    (and which instance leads, with HA), and what snapshot is queued. Read-only: it creates
    nothing on the checkpoint database (which may be the source server, binlogging it)."""
    stores = checkpoint_stores(config, readonly=True)
    report: dict[str, Any] = {"connector": config.name, **_running(config)}
    with open_connection(config.source.settings()) as conn:
        server = master_position(conn)
    report["server"] = str(server)
    for label, store in (("redis", stores.fast), ("database", stores.durable)):
        if store is None:
            report[label] = "not configured"
            continue
        try:
            saved = store.get()
        except CheckpointUnavailableError as exc:
            report[label] = f"unavailable: {exc}"
            continue
        report[label] = None if saved is None else {"position": str(saved), **_lag(saved, server), **_snapshot(saved)}
    durable = stores.durable
    if isinstance(durable, BlockingNotes):
        with contextlib.suppress(CheckpointUnavailableError):
            blocked = durable.blocked()
            if blocked is not None:
                report["blocked"] = blocked  # the last run stopped before a message it may not pass
    report["snapshot_requests_waiting"] = _waiting_requests(config, report)
    return report


def _running(config: Config) -> dict[str, Any]:
    """What Redis says of running instances: the streaming one's presence, and the HA lease."""
    url = config.checkpoint.redis_url
    if not url:
        return {"running": "unknown (no Redis: a running connector announces itself there)"}
    client = redis_client(url, config.checkpoint.redis_ssl_ca)
    try:
        presence = client.get(presence_key(config.name))
        leader = client.get(f"sluice:{config.name}:lease") if config.ha.enabled else None
    except redis.RedisError as exc:
        return {"running": f"unknown (Redis: {exc})"}
    found: dict[str, Any] = {"running": presence is not None}
    if presence is not None:
        found["instance"] = json.loads(presence)
    if config.ha.enabled:
        found["leader"] = leader.decode() if isinstance(leader, bytes) else None
    return found


def _waiting_requests(config: Config, report: dict[str, Any]) -> list[dict[str, Any]]:
    """`sluice snapshot` requests no connector has queued yet (a stopped one takes them at start)."""
    taken = 0
    with contextlib.suppress(CheckpointUnavailableError):
        saved = checkpoint_stores(config, readonly=True).durable.get()
        if saved is not None:
            taken = SnapshotState.of_text(saved.snapshot).request
    requests = DatabaseSnapshotRequests(checkpoint_connector(config, create=False), config.name, create=False)
    return [{"request": n, "tables": [".".join(t) for t in tables]} for n, tables in requests.after(taken)]

def _snapshot(saved: Position) -> dict[str, Any]:
    state = SnapshotState.of_text(saved.snapshot)
    if not state.tables:
        return {}
    current = ".".join(state.tables[0])
    return {"snapshot": {"tables_left": [".".join(t) for t in state.tables], "rows_read": state.rows,
                         "reading": current, "after_key": state.after}}  # fmt: skip


def request_snapshot(config: Config, names: list[str]) -> int:
    """Queue a snapshot of existing, captured tables for the connector to read."""
    tables = [_table_name(part) for name in names for part in name.split(",") if part]
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


def _table_name(text: str) -> tuple[str, str]:
    database, dot, table = text.strip().partition(".")
    if not dot or not database or not table:
        raise ConfigError(f"--tables: {text!r} is not database.table")
    return database, table


def _lag(saved: Position, server: Position) -> dict[str, Any]:
    lag: dict[str, Any] = {"event_age_s": round(time.time() - saved.timestamp, 1) if saved.timestamp else None}
    if saved.file == server.file:
        lag["bytes_behind"] = server.pos - saved.pos
    else:
        lag["files_behind"] = server.sort_key()[1] - saved.sort_key()[1]
    return lag


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


def consume_topics(config: Config, limit: int, idle_s: float, out: TextIO) -> int:
    """Every message under the topic prefix, from the beginning, decoded with `schemas/` alone,
    each value in its table's newest version (`version`: which one; columns renamed since under
    their new names), or as written when that version cannot read it."""
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir), _registry(config))
    consumer = Consumer({
        **config.kafka.client_config(), "group.id": f"sluice-consume-{uuid.uuid4()}", "logger": logs.LIBRDKAFKA,
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 2000,
    })  # fmt: skip
    consumer.subscribe([f"^{re.escape(config.kafka.topic_prefix)}\\..*"])
    dumps = json.JSONEncoder(ensure_ascii=False, default=_shown).encode
    shown, quiet_since = 0, time.monotonic()
    try:
        while not limit or shown < limit:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                if idle_s and time.monotonic() - quiet_since > idle_s:
                    break
                continue
            quiet_since = time.monotonic()
            try:
                version, record = _decoded(reader, message.value())
            except UnreadableMessageError as exc:
                where = f"{message.topic()}[{message.partition()}]@{message.offset()}"
                raise UnreadableMessageError(f"{where}: {exc}") from exc
            out.write(dumps({"topic": message.topic(), "partition": message.partition(), "offset": message.offset(),
                             "version": version, "value": record}) + "\n")  # fmt: skip
            out.flush()
            shown += 1
    finally:
        consumer.close()
    return shown


def _decoded(reader: MessageReader, value: bytes | None) -> tuple[Any, Any]:
    """(schema version, record) of a value: Avro in its table's newest version; JSON (canal-json,
    heartbeats, transactions, dead letters) as it is; a tombstone as null."""
    if value is None:
        return None, None
    if value[:1] in (b"{", b"["):
        return None, json.loads(value)
    schema, record = reader.read_newest(value)
    return schema.get("sluice.version"), record


def _shown(value: object) -> object:
    """JSON for what Avro decodes to: bytes as hex ("0x..."), the rest (decimals, dates) as text."""
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return str(value)


def _registry(config: Config) -> Any:
    avro = config.avro
    return SchemaRegistryClient.new_client(avro.registry_config()) if avro.schema_registry_url else None


EXIT_OVERSIZED = 3  # stopped before a message over its topic's limit ([kafka] oversized = "fail")


def _decode(args: argparse.Namespace) -> int | None:
    tracker = schema_from(args.schema_from) if args.schema_from else None
    decode_files(args.files, sys.stdout, args.start_position, args.stop_position, tracker)
    return None


def _schema(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.action == "show":
        return schema_show(config, args.tables, sys.stdout)
    if len(args.tables) != 1:
        raise ConfigError("schema set takes one DB.TABLE")
    return schema_set(config, args.tables[0], args.from_server, args.ddl, args.at)


def _spark(args: argparse.Namespace) -> int | None:
    from spark.jobs import run as run_spark  # noqa: PLC0415  (pyspark loads a JVM: only when asked)

    run_spark(load_config(args.config), args.job, args.once)
    return None


# Each command: what it runs, given the parsed arguments; None means exit status 0.
_COMMANDS: dict[str, Callable[[argparse.Namespace], int | None]] = {
    "decode": _decode,
    "tail": lambda a: tail(a.config, a.start, sys.stdout),
    "run": lambda a: run_connector(a.config, a.debug),
    "status": lambda a: print(REDACT(json.dumps(status(load_config(a.config)), indent=2))),
    "position": lambda a: position_command(load_config(a.config), a.action, a.value),
    "snapshot": lambda a: request_snapshot(load_config(a.config), a.tables),
    "schema": _schema,
    "spark": _spark,
    "consume": lambda a: _printed(consume_topics(load_config(a.config), a.max, a.idle_s, sys.stdout)),
}


def _printed(count: int) -> None:
    """`consume` returns how many messages it printed; its exit status is 0 all the same."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logs.configure("text", args.debug)
    try:
        return _COMMANDS[args.command](args) or 0
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
