"""Differential test on the live servers: Sluice (from the binlog file) against
python-mysql-replication (from the server), value by value, on a random typed workload."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from connector.binlog.constants import EventType
from connector.binlog.events import QueryEvent
from connector.binlog.file import iter_file_events
from connector.binlog.rows import RowsEvent
from tests.support.live import connect, current_binlog, peer_settings, row_metadata, server
from tests.support.typed import (
    BINARY_COLUMNS,
    BITS,
    COLUMNS,
    placeholder,
)

pytestmark = pytest.mark.live

# The peer renders TIMESTAMP in local time; Sluice in UTC. Make local time UTC here.
os.environ["TZ"] = "UTC"
time.tzset()

DB = "sluice_difftest"


def _row(rng: random.Random, key: int) -> list[Any]:
    return [key] + [None if rng.random() < 0.15 else gen(rng) for _, _, gen in COLUMNS]


def _workload(seed: int, inserts: int) -> list[tuple[int, str, Any]]:
    """Run the workload; returns every (id, column, value) it wrote, in order."""
    rng = random.Random(seed)
    written: list[tuple[int, str, Any]] = []
    conn = connect()
    names = ["id"] + [name for name, _, _ in COLUMNS]
    insert = f"INSERT INTO {DB}.t ({', '.join(names)}) VALUES (%s, {', '.join(placeholder(n) for n in names[1:])})"
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        columns = ", ".join(f"{name} {kind}" for name, kind, _ in COLUMNS)
        cur.execute(f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, {columns}) CHARACTER SET utf8mb4")
        cur.execute("SET time_zone = '+00:00'")
        for start in range(0, inserts, 10):  # multi-row transactions
            cur.execute("BEGIN")
            for key in range(start, start + 10):
                row = _row(rng, key)
                written += [(key, name, value) for name, value in zip(names[1:], row[1:], strict=True)]
                cur.execute(insert, row)
            cur.execute("COMMIT")
        for key in rng.sample(range(inserts), inserts // 3):
            name, _, gen = rng.choice(COLUMNS)
            value = None if rng.random() < 0.2 else gen(rng)
            cur.execute(f"UPDATE {DB}.t SET {name} = {placeholder(name)} WHERE id = %s", (value, key))
            written.append((key, name, value))
        for key in rng.sample(range(inserts), inserts // 5):
            cur.execute(f"DELETE FROM {DB}.t WHERE id = %s", (key,))
    conn.close()
    return written


def _sluice_rows(file: str) -> Iterator[tuple[str, tuple[Any, ...] | None, tuple[Any, ...] | None]]:
    names = ["id"] + [name for name, _, _ in COLUMNS]
    for event in iter_file_events(str(server().binlog_dir / file)):
        body = event.body
        if isinstance(body, RowsEvent) and body.table is not None and body.table.schema == DB:
            # With binlog_row_metadata=MINIMAL (MySQL's default) the file has no names: @1, @2, ...
            assert list(body.table.column_names) in (names, [f"@{i + 1}" for i in range(len(names))])
            for before, after in body.rows:
                yield body.kind.name, before, after


def _peer_rows(file: str) -> Iterator[tuple[str, tuple[Any, ...] | None, tuple[Any, ...] | None]]:
    names = ["id"] + [name for name, _, _ in COLUMNS]
    stream = BinLogStreamReader(
        connection_settings=peer_settings(), server_id=4242, log_file=file, log_pos=4, resume_stream=True,
        blocking=False, only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], only_schemas=[DB],
    )  # fmt: skip
    try:
        for event in stream:
            for row in event.rows:
                if isinstance(event, UpdateRowsEvent):
                    yield (
                        "UPDATE",
                        tuple(row["before_values"][n] for n in names),
                        tuple(row["after_values"][n] for n in names),
                    )
                elif isinstance(event, WriteRowsEvent):
                    yield "WRITE", None, tuple(row["values"][n] for n in names)
                else:
                    yield "DELETE", tuple(row["values"][n] for n in names), None
    finally:
        stream.close()


_FSP = {
    name: int(kind.split("(")[1][0])
    for name, kind, _ in COLUMNS
    if kind.startswith(("TIME", "DATETIME")) and "(" in kind
}


def _peer_value(name: str, value: Any) -> Any:
    """python-mysql-replication's value in Sluice's representation."""
    if value is None:
        return None
    fsp = _FSP.get(name, 0)

    def frac(micros: int) -> str:
        return f".{micros:06d}"[: fsp + 1] if fsp else ""

    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S") + frac(value.microsecond)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        sign, total = ("-", -value) if value < dt.timedelta(0) else ("", value)
        seconds = total.days * 86400 + total.seconds
        return f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" + frac(total.microseconds)
    if isinstance(value, set):
        return value
    if name == "c_json" and isinstance(value, dict):  # MySQL's binary JSON, as the peer parses it
        return _peer_json(value)
    if name in BITS and isinstance(value, str):
        return int(value, 2)
    if name in BINARY_COLUMNS and isinstance(value, str):
        value = value.encode("latin-1")  # the peer hands back empty binary values as ''
    if name == "c_binary":
        # The peer neither pads BINARY(8) back to 8 bytes nor keeps it bytes when empty.
        raw = value.encode("latin-1") if isinstance(value, str) else value
        return raw.ljust(8, b"\0")
    return value


def _peer_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {_peer_json(k): _peer_json(v) for k, v in value.items()}
    return value.decode() if isinstance(value, bytes) else value


def _sluice_value(name: str, value: Any) -> Any:
    if name.startswith("c_dec") and isinstance(value, str):  # a row image holds a DECIMAL's text
        return Decimal(value)
    if name == "c_set" and isinstance(value, str):
        return set(value.split(",")) if value else set()
    if name == "c_json" and isinstance(value, str) and not server().mariadb:
        return json.loads(value)  # MariaDB's JSON is LONGTEXT: the text as written, on both sides
    return value


@pytest.mark.parametrize("seed", [7, 2024])
def test_sluice_matches_python_mysql_replication(seed: int) -> None:
    conn = connect()
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
    file, _ = current_binlog(conn)
    # The peer reads charsets and ENUM/SET labels only from FULL row metadata, and checks the
    # server's setting as it starts (with MySQL's default MINIMAL it decodes latin1 as UTF-8):
    # this comparison runs in the FULL variant.
    with row_metadata("FULL"):
        written = _workload(seed, inserts=120)
        with conn.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")  # close the file so both read the same finished bytes
        conn.close()
        ours, theirs = list(_sluice_rows(file)), list(_peer_rows(file))
    negative_times = {
        v for _, name, v in written if name in _FSP and name.startswith("c_time") and _is_negative_fraction(v)
    }
    # 120 inserts and 24 deletes always log; an UPDATE that sets the value a row already
    # has logs nothing, so up to 40 updates appear.
    assert len(ours) == len(theirs)
    assert 120 + 30 + 24 <= len(ours) <= 120 + 40 + 24
    names = ["id"] + [name for name, _, _ in COLUMNS]
    compared = 0
    for n, (mine, peer) in enumerate(zip(ours, theirs, strict=True)):
        assert mine[0] == peer[0], f"row change {n}"
        for image_mine, image_peer in ((mine[1], peer[1]), (mine[2], peer[2])):
            if image_mine is None or image_peer is None:
                assert image_mine is image_peer is None
                continue
            for name, a, b in zip(names, image_mine, image_peer, strict=True):
                if a in negative_times:
                    # python-mysql-replication reads the fraction of a negative TIME(n) as its
                    # complement (-780:01:30.985 comes back as .015); Sluice matches what was written.
                    continue
                if name == "c_set" and b is None:
                    # The peer returns None for both NULL and the empty set; Sluice keeps them apart.
                    assert a in (None, ""), f"row change {n}, column {name}"
                    continue
                assert _sluice_value(name, a) == _peer_value(name, b), f"row change {n}, column {name}"
                compared += 1
    assert negative_times, "the workload wrote no negative fractional TIME; the check above did nothing"
    assert compared > 8_000


def _is_negative_fraction(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("-") and "." in value and value.split(".")[1].strip("0") != ""


TIME_CASES = [
    ("TIME(3)", "-780:01:30.015"), ("TIME(3)", "-780:01:30.985"), ("TIME(6)", "-00:00:01.000001"),
    ("TIME(1)", "-01:00:00.1"), ("TIME(4)", "-838:59:58.9999"), ("TIME(3)", "-00:00:00.500"),
    ("TIME(6)", "-12:00:00.500000"), ("TIME(2)", "-00:00:00.99"), ("TIME(4)", "00:00:01.0001"),
    ("TIME", "-838:59:59"), ("TIME(6)", "838:59:59.000000"), ("DATETIME(6)", "9999-12-31 23:59:59.999999"),
    ("DATETIME(3)", "1000-01-01 00:00:00.001"), ("DATE", "0000-00-00"), ("DATETIME", "0000-00-00 00:00:00"),
    ("TIMESTAMP(6) NULL", "2038-01-19 03:14:07.999999"), ("TIMESTAMP(2) NULL", "1970-01-01 00:00:01.01"),
]  # fmt: skip


def test_temporal_values_match_what_the_server_prints() -> None:
    """Ground truth for temporal edges: the server's own SELECT output, not a peer."""
    conn = connect()
    columns = ", ".join(f"c{i} {kind}" for i, (kind, _) in enumerate(TIME_CASES))
    with conn.cursor() as cur:
        cur.execute("SET sql_mode = '', time_zone = '+00:00'")
        cur.execute("CREATE DATABASE IF NOT EXISTS sluice_scratch")
        cur.execute("DROP TABLE IF EXISTS sluice_scratch.temporal")
        cur.execute(f"CREATE TABLE sluice_scratch.temporal ({columns})")
        cur.execute("FLUSH BINARY LOGS")
        file, _ = current_binlog(conn)
        values = ", ".join(f"'{value}'" for _, value in TIME_CASES)
        cur.execute(f"INSERT INTO sluice_scratch.temporal VALUES ({values})")
        cur.execute(
            f"SELECT {', '.join(f'CAST(c{i} AS CHAR)' for i in range(len(TIME_CASES)))} FROM sluice_scratch.temporal"
        )
        printed = cur.fetchone()
        cur.execute("FLUSH BINARY LOGS")
    conn.close()
    assert printed is not None
    rows = [
        after for e in iter_file_events(str(server().binlog_dir / file))
        if isinstance(e.body, RowsEvent) and e.body.table is not None and e.body.table.table == "temporal"
        for _, after in e.body.rows
    ]  # fmt: skip
    assert rows == [tuple(printed)]


@pytest.mark.servers("mariadb")
def test_mariadb_compressed_events_decode() -> None:
    """log_bin_compress makes MariaDB write QUERY_COMPRESSED and *_ROWS_COMPRESSED events."""
    conn = connect()
    payload = "compressible " * 40
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL log_bin_compress = ON")
        cur.execute("SET GLOBAL log_bin_compress_min_len = 10")
        try:
            cur.execute("FLUSH BINARY LOGS")
            file, _ = current_binlog(conn)
            cur.execute("CREATE DATABASE IF NOT EXISTS sluice_scratch")
            cur.execute("DROP TABLE IF EXISTS sluice_scratch.packed")
            cur.execute("CREATE TABLE sluice_scratch.packed (id INT PRIMARY KEY, body TEXT) COMMENT '%s'" % ("x" * 50))
            cur.execute("INSERT INTO sluice_scratch.packed VALUES (1, %s), (2, %s)", (payload, payload + "2"))
            cur.execute("UPDATE sluice_scratch.packed SET body = %s WHERE id = 1", (payload + "u",))
            cur.execute("DELETE FROM sluice_scratch.packed WHERE id = 2")
            cur.execute("FLUSH BINARY LOGS")
        finally:
            cur.execute("SET GLOBAL log_bin_compress = OFF")
    conn.close()
    events = list(iter_file_events(str(server().binlog_dir / file)))

    codes = {e.header.type_code for e in events}
    assert {EventType.QUERY_COMPRESSED_EVENT, EventType.WRITE_ROWS_COMPRESSED_EVENT_V1} <= codes
    assert {EventType.UPDATE_ROWS_COMPRESSED_EVENT_V1, EventType.DELETE_ROWS_COMPRESSED_EVENT_V1} <= codes
    queries = [e.body.query for e in events if isinstance(e.body, QueryEvent)]
    assert any(q.startswith("CREATE TABLE sluice_scratch.packed") for q in queries)
    rows = [(e.body.kind.name, r) for e in events if isinstance(e.body, RowsEvent) for r in e.body.rows]
    assert rows == [
        ("WRITE", (None, (1, payload))),
        ("WRITE", (None, (2, payload + "2"))),
        ("UPDATE", ((1, payload), (1, payload + "u"))),
        ("DELETE", ((2, payload + "2"), None)),
    ]
