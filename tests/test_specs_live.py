"""The spec files in tests/specs/, run against each live server and streamed back by the replica client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from connector.items import Changes, Commit
from connector.position import Position
from connector.replica.server import master_position
from connector.schema.history import MemoryHistoryStore
from connector.startup import prepare
from connector.stream import ChangeStream, StreamOptions
from tests.support import live
from tests.support.live import connect, live_config
from tests.support.specs import differences, parse_spec, spec_files, spec_servers

pytestmark = pytest.mark.live


def stream_until(config_include: list[str], start: Position, end: Position, prepared: Any) -> list[dict[str, Any]]:
    config = live_config(config_include, include_query=True)
    # the specs expect each statement's text on its first row
    stream = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(),
                          options=StreamOptions(query=config.source.query_text()))  # fmt: skip
    messages: list[dict[str, Any]] = []

    for item in stream.items(start, blocking=False):
        if isinstance(item, Changes):
            messages.extend(item.messages)
        elif isinstance(item, Commit) and item.position.sort_key() >= end.sort_key():
            break
    return messages


@pytest.mark.parametrize(
    ("path", "live_server"),
    [pytest.param(p, s, id=f"{p.stem}-{s}") for p in spec_files() for s in spec_servers(p, list(live.SERVERS))],
    indirect=["live_server"],
)
def test_spec(path: Path, server: live.LiveServer) -> None:
    steps = parse_spec(path)
    conn = connect()
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS spec")
        cur.execute("CREATE DATABASE spec")
    include = [r"spec\..*"]
    prepared = prepare(live_config(include, include_query=True), MemoryHistoryStore())
    start = prepared.start
    spec_conn = connect("spec")
    with spec_conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        if not server.mariadb:
            # The specs expect each statement's text on its first row (`sql`): MariaDB logs it by
            # default (binlog_annotate_row_events), MySQL when the session asks.
            cur.execute("SET SESSION binlog_rows_query_log_events = ON")

        for step in steps:
            cur.execute(step.sql)
    end = master_position(spec_conn)
    messages = stream_until(include, start, end, prepared)
    expected = [(step, want) for step in steps for want in step.expected]
    problems = []
    for i, (step, want) in enumerate(expected):
        got = messages[i] if i < len(messages) else {}
        diff = differences(want, got)
        if diff:
            problems.append(f"{path.name}:{step.line} message {i + 1}: " + "; ".join(diff))
    if len(messages) != len(expected):
        extra = [f"{m['type']} {m['table']}" for m in messages[len(expected) :]]
        problems.append(f"{len(messages)} messages for {len(expected)} expected; unexpected: {extra}")
    assert not problems, "\n".join(problems)
