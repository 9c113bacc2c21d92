"""Every value exactly as the server has it, on both servers, with the server's zone, the
connector's zone and UTC all different and sessions with zones of their own: ENUM/SET labels
with characters outside the BMP (which SHOW CREATE TABLE prints as '?') and TIMESTAMP DEFAULTs,
through the snapshot and the binlog, in Avro (replayed with the newest schema, whose defaults
fill the rows written before a column was added) and in canal-json (ENUM index, SET mask).
The unit side is tests/test_exact_schema.py."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.avro.schemas import row_fields
from connector.config import AvroSection, Config
from connector.filters import TableFilter
from connector.replica.client import open_connection
from connector.runner import Connector
from connector.schema.capture import capture
from tests.support import live
from tests.support.live import connect, live_config
from tests.support.replay import Replay, comparable, consume, set_columns, source_rows

pytestmark = pytest.mark.live

DB = "exactv"
SERVER_ZONE = "+05:00"  # the server's time_zone, what a session gets unless it says otherwise
CONNECTOR_ZONE = "America/Sao_Paulo"  # the connector process's local zone
TABLE = (
    "CREATE TABLE lab (id INT PRIMARY KEY, e ENUM('a😀','b','c?') NOT NULL DEFAULT 'a😀', "
    "s SET('x','😀y','z') DEFAULT 'x,😀y', ts TIMESTAMP NULL DEFAULT '2021-03-04 05:06:07', "
    "e3 ENUM('é','ü') CHARACTER SET latin1, v VARCHAR(20)) CHARACTER SET utf8mb4"
)
ROWS = "INSERT INTO lab (id, e, s, e3, v) VALUES (%s, %s, %s, %s, %s)"


@contextlib.contextmanager
def zones() -> Iterator[None]:
    """The server's zone SERVER_ZONE and this process's CONNECTOR_ZONE for a while."""
    with connect().cursor() as cur:
        cur.execute("SELECT @@global.time_zone")
        row = cur.fetchone()
        assert row is not None
        cur.execute("SET GLOBAL time_zone = %s", (SERVER_ZONE,))
    local = os.environ.get("TZ")
    os.environ["TZ"] = CONNECTOR_ZONE
    time.tzset()
    try:
        yield
    finally:
        if local is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = local
        time.tzset()
        with connect().cursor() as cur:
            cur.execute("SET GLOBAL time_zone = %s", (row[0],))


def _config(name: str, tmp: Path, value_format: str = "avro") -> Config:
    base = live_config([rf"{DB}\..*"], name=name, server_id=7000 + random.randrange(1000))
    return replace(base, kafka=replace(base.kafka, topic_prefix=name, value_format=value_format, partitions=1),
                   avro=AvroSection(schemas_dir=str(tmp / name)))  # fmt: skip


def _session(zone: str) -> Any:
    conn = connect(DB)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = %s", (zone,))
    return conn


def _before_the_first_start() -> None:
    """The table and its first rows, written before any connector saw them (the snapshot's)."""
    with connect().cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
    with _session("+07:00").cursor() as cur:
        cur.execute(TABLE)
        cur.executemany(ROWS, [(1, "a😀", "😀y", "é", "one"), (2, "c?", "x,😀y,z", "ü", "two"), (3, "b", "", None, "")])


def _after_the_start() -> None:
    """Rows through the binlog, then a TIMESTAMP column added from a session with its own zone."""
    with _session("+09:00").cursor() as cur:
        cur.executemany(ROWS, [(4, "a😀", "😀y,z", "ü", "four"), (5, "c?", "x", "é", "five")])
        cur.execute("UPDATE lab SET e = 'a😀', s = 'z,😀y' WHERE id = 2")
        cur.execute("ALTER TABLE lab ADD COLUMN t2 TIMESTAMP NULL DEFAULT '2022-01-01 00:00:00'")
        cur.execute("INSERT INTO lab (id, e, s) VALUES (6, 'b', '😀y')")


def _instants() -> dict[str, int]:
    """Each TIMESTAMP column's DEFAULT as the server holds it, microseconds since the epoch: read
    off rows that took it (information_schema is no reference: MySQL keeps a default's text as the
    zone of the table's last DDL printed it)."""
    with connect(DB).cursor() as cur:
        cur.execute("SELECT UNIX_TIMESTAMP(ts) FROM lab WHERE id = 3")
        ts = cur.fetchone()
        cur.execute("SELECT UNIX_TIMESTAMP(t2) FROM lab WHERE id = 6")
        t2 = cur.fetchone()
    assert ts is not None and t2 is not None
    return {"ts": int(ts[0]) * 1_000_000, "t2": int(t2[0]) * 1_000_000}


def _avro_defaults(reader: MessageReader) -> dict[str, Any]:
    fields = row_fields(reader.latest(DB, "lab"))
    return {f["name"]: f.get("default") for f in fields}


def _server_numbers() -> dict[int, tuple[str, str, str | None]]:
    """ENUM index, SET mask and the latin1 ENUM's index of each row, as canal carries them."""
    with connect(DB).cursor() as cur:
        cur.execute("SELECT id, CAST(e + 0 AS CHAR), CAST(s + 0 AS CHAR), CAST(e3 + 0 AS CHAR) FROM lab")
        return {int(i): (str(e), str(s), None if e3 is None else str(e3)) for i, e, s, e3 in cur.fetchall()}


def _instants_as_times(row: Any) -> Any:
    """fastavro gives a field filled from its default as the default's long, not the logical
    type's value (a Java reader converts it): TIMESTAMPs as datetimes, as the rest are."""
    return {n: datetime.fromtimestamp(v / 1e6, UTC) if n in ("ts", "t2") and isinstance(v, int) else v
            for n, v in row.items()}  # fmt: skip


def _run(config: Config) -> None:
    Connector(config).run(blocking=False)


@pytest.mark.parametrize("metadata", ["MINIMAL", "FULL"])
def test_labels_and_timestamp_defaults_are_the_servers(tmp_path: Path, server: live.LiveServer, metadata: str) -> None:
    """MINIMAL: the labels of a table that existed before the first start come from a temporary
    table of its type (the optional CREATE TEMPORARY TABLES grant); FULL: from the TABLE_MAP."""
    name = f"xv{uuid.uuid4().hex[:6]}"
    grant = live.granted("CREATE TEMPORARY TABLES") if metadata == "MINIMAL" else contextlib.nullcontext()
    with zones(), live.row_metadata(metadata), grant:
        _before_the_first_start()
        avro, canal = _config(name, tmp_path), _config(name + "c", tmp_path, "canal-json")
        _run(avro)
        _run(canal)
        _after_the_start()
        _run(avro)
        _run(canal)
    reader = MessageReader(SchemaDirectory(avro.avro.schemas_dir))
    messages = consume(avro.kafka.topic_prefix)
    replay = Replay(reader)
    replay.apply_all(messages)
    sets = set_columns(reader, DB, "lab")
    state = replay.tables[(DB, "lab")]
    assert isinstance(state, dict)
    replayed = {key: _instants_as_times(row) for key, row in state.items()}
    assert comparable(replayed, sets) == comparable(source_rows(DB, "lab", reader), sets)
    defaults = _avro_defaults(reader)
    assert {n: defaults[n] for n in ("ts", "t2")} == _instants()
    assert (defaults["e"], defaults["s"]) == ("a😀", "x,😀y")

    numbers = _server_numbers()
    canal_rows: dict[int, tuple[str, str, str | None]] = {}
    for topic, _, _, _, value in consume(canal.kafka.topic_prefix):
        doc = json.loads(value)
        if topic.endswith(".lab") and doc["data"] and doc["type"] != "DELETE":
            for row in doc["data"]:
                canal_rows[int(row["id"])] = (row["e"], row["s"], row["e3"])
    assert canal_rows == numbers


def test_a_capture_without_an_exact_source_says_which_labels_may_differ(
    server: live.LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """MINIMAL and the documented grants only: one WARN per table names the columns and the remedies."""
    _before_the_first_start()
    with live.row_metadata("MINIMAL"), caplog.at_level(logging.WARNING, "sluice.schema"):
        settings = live.source_settings()
        with open_connection(settings) as conn:
            schema = capture(conn, TableFilter.of([rf"{DB}\..*"], None))
    table = schema.tables[(DB, "lab")]
    assert [c.params for c in table.columns if c.name in ("e", "s")] == [("a?", "b", "c?"), ("x", "?y", "z")]
    warned = [r.getMessage() for r in caplog.records if "ENUM/SET labels of" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "column(s) e, s " in warned[0] and "binlog_row_metadata=FULL" in warned[0]
    assert "CREATE TEMPORARY TABLES" in warned[0]
    with live.granted("CREATE TEMPORARY TABLES"), open_connection(settings) as conn:
        exact = capture(conn, TableFilter.of([rf"{DB}\..*"], None)).tables[(DB, "lab")]
    assert [c.params for c in exact.columns if c.name in ("e", "s", "e3")] == [
        ("a😀", "b", "c?"), ("x", "😀y", "z"), ("é", "ü")
    ]
