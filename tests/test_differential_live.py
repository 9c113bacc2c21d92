"""Differential test on the live servers: Sluice (from the binlog file) against
python-mysql-replication (from the server), value by value, on a random typed workload."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from connector.binlog.constants import EventType
from connector.binlog.events import QueryEvent
from connector.binlog.file import iter_file_events
from connector.binlog.rows import RowsEvent
from tests.live import connect, current_binlog, peer_settings, row_metadata, server

pytestmark = pytest.mark.live

# The peer renders TIMESTAMP in local time; Sluice in UTC. Make local time UTC here.
os.environ["TZ"] = "UTC"
time.tzset()

DB = "sluice_difftest"
Gen = Callable[[random.Random], Any]


def _text(rng: random.Random, n: int) -> str:
    alphabet = "abcXYZ 019_'\"\\\n\tßéü中文字💾🚀"
    return "".join(rng.choices(alphabet, k=rng.randint(0, n)))


def _latin1(rng: random.Random, n: int) -> str:
    return "".join(rng.choices("abc XYZ éèàçñü¿", k=rng.randint(0, n)))


def _bytes(rng: random.Random, n: int) -> bytes:
    return rng.randbytes(rng.randint(0, n))


def _datetime(rng: random.Random, fsp: int) -> str:
    moment = dt.datetime(1970, 1, 2) + dt.timedelta(seconds=rng.randrange(2_000_000_000))
    micros = rng.randrange(1_000_000) // 10 ** (6 - fsp) * 10 ** (6 - fsp)
    return (moment + dt.timedelta(microseconds=micros)).isoformat(" ")


def _time(rng: random.Random, fsp: int) -> str:
    seconds = rng.randrange(-838 * 3600 + 1, 838 * 3600)
    micros = rng.randrange(10**fsp) if fsp else 0
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    frac = f".{micros:0{fsp}d}" if fsp else ""
    return f"{sign}{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}{frac}"


def _decimal(rng: random.Random, precision: int, scale: int) -> Decimal:
    digits = "".join(rng.choice("0123456789") for _ in range(precision))
    sign = rng.choice(["", "-"])
    return Decimal(
        f"{sign}{digits[: precision - scale] or '0'}.{digits[precision - scale :]}" if scale else sign + digits
    )


# name, column type, generator of a non-NULL value
COLUMNS: list[tuple[str, str, Gen]] = [
    ("c_tiny", "TINYINT", lambda r: r.randint(-128, 127)),
    ("c_utiny", "TINYINT UNSIGNED", lambda r: r.randint(0, 255)),
    ("c_small", "SMALLINT", lambda r: r.randint(-32768, 32767)),
    ("c_usmall", "SMALLINT UNSIGNED", lambda r: r.randint(0, 65535)),
    ("c_medium", "MEDIUMINT", lambda r: r.randint(-(2**23), 2**23 - 1)),
    ("c_umedium", "MEDIUMINT UNSIGNED", lambda r: r.randint(0, 2**24 - 1)),
    ("c_int", "INT", lambda r: r.randint(-(2**31), 2**31 - 1)),
    ("c_uint", "INT UNSIGNED", lambda r: r.randint(0, 2**32 - 1)),
    ("c_big", "BIGINT", lambda r: r.randint(-(2**63), 2**63 - 1)),
    ("c_ubig", "BIGINT UNSIGNED", lambda r: r.randint(0, 2**64 - 1)),
    ("c_float", "FLOAT", lambda r: r.choice([0.0, 1.5, -3.25, r.uniform(-1e6, 1e6)])),
    ("c_double", "DOUBLE", lambda r: r.uniform(-1e300, 1e300)),
    ("c_dec", "DECIMAL(10,2)", lambda r: _decimal(r, 10, 2)),
    ("c_dec65", "DECIMAL(65,30)", lambda r: _decimal(r, 65, 30)),
    ("c_dec0", "DECIMAL(18,0)", lambda r: _decimal(r, 18, 0)),
    ("c_year", "YEAR", lambda r: r.randint(1901, 2155)),
    ("c_date", "DATE", lambda r: _datetime(r, 0)[:10]),
    ("c_time", "TIME", lambda r: _time(r, 0)),
    ("c_time6", "TIME(6)", lambda r: _time(r, 6)),
    ("c_time3", "TIME(3)", lambda r: _time(r, 3)),
    ("c_dt", "DATETIME", lambda r: _datetime(r, 0)),
    ("c_dt6", "DATETIME(6)", lambda r: _datetime(r, 6)),
    ("c_dt2", "DATETIME(2)", lambda r: _datetime(r, 2)),
    ("c_ts", "TIMESTAMP NULL", lambda r: _datetime(r, 0)),  # all within 1970-2033
    ("c_ts4", "TIMESTAMP(4) NULL", lambda r: _datetime(r, 4)),
    ("c_char", "CHAR(20)", lambda r: _text(r, 20).rstrip(" ")),
    ("c_varchar", "VARCHAR(300)", lambda r: _text(r, 300)),
    ("c_latin1", "VARCHAR(40) CHARACTER SET latin1", lambda r: _latin1(r, 40)),
    ("c_binary", "BINARY(8)", lambda r: _bytes(r, 8).ljust(8, b"\0")),
    ("c_varbinary", "VARBINARY(50)", lambda r: _bytes(r, 50)),
    ("c_tinyblob", "TINYBLOB", lambda r: _bytes(r, 255)),
    ("c_blob", "BLOB", lambda r: _bytes(r, 2000)),
    ("c_mediumblob", "MEDIUMBLOB", lambda r: _bytes(r, 70000)),
    ("c_longblob", "LONGBLOB", lambda r: _bytes(r, 300)),
    ("c_tinytext", "TINYTEXT", lambda r: _text(r, 60)),
    ("c_text", "TEXT", lambda r: _text(r, 3000)),
    ("c_mediumtext", "MEDIUMTEXT", lambda r: _text(r, 100)),
    ("c_longtext", "LONGTEXT", lambda r: _text(r, 100)),
    ("c_enum", "ENUM('a','bb','ccc','ü')", lambda r: r.choice(["a", "bb", "ccc", "ü"])),
    ("c_set", "SET('x','y','z','w')", lambda r: ",".join(s for s in "xyzw" if r.random() < 0.5)),
    ("c_bit1", "BIT(1)", lambda r: r.randint(0, 1)),
    ("c_bit13", "BIT(13)", lambda r: r.randint(0, 2**13 - 1)),
    ("c_bit64", "BIT(64)", lambda r: r.randint(0, 2**64 - 1)),
    ("c_json", "JSON", lambda r: '{"k": %d, "s": "%s"}' % (r.randint(0, 99), r.choice(["x", "中", "💾"]))),
    ("c_geom", "GEOMETRY", lambda r: f"POINT({r.randint(-90, 90)} {r.randint(-90, 90)})"),
]
GEOMETRY = {"c_geom"}
BITS = {"c_bit1", "c_bit13", "c_bit64"}
BINARY_COLUMNS = {"c_binary", "c_varbinary", "c_tinyblob", "c_blob", "c_mediumblob", "c_longblob"}


def _placeholder(name: str) -> str:
    if name in GEOMETRY:
        return "ST_GeomFromText(%s)"
    if name in BITS:
        return "CAST(%s AS UNSIGNED)"
    return "%s"


def _row(rng: random.Random, key: int) -> list[Any]:
    return [key] + [None if rng.random() < 0.15 else gen(rng) for _, _, gen in COLUMNS]


def _workload(seed: int, inserts: int) -> list[tuple[int, str, Any]]:
    """Run the workload; returns every (id, column, value) it wrote, in order."""
    rng = random.Random(seed)
    written: list[tuple[int, str, Any]] = []
    conn = connect()
    names = ["id"] + [name for name, _, _ in COLUMNS]
    insert = f"INSERT INTO {DB}.t ({', '.join(names)}) VALUES (%s, {', '.join(_placeholder(n) for n in names[1:])})"
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
            cur.execute(f"UPDATE {DB}.t SET {name} = {_placeholder(name)} WHERE id = %s", (value, key))
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
