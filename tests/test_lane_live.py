"""Issue 17: the compiled kernel (connector/lane.py) hands Kafka what the Python path hands it, and
the compiled JSON renderer writes the lines it writes.

The same binlog, read from the live server twice as `sluice run` reads it: once with the kernel
taking what it can, once with every event on the Python path. The messages (topic, partition,
key, value, in order), the saved position and its GTID set, and the counts must be equal, and the
kernel must have taken most of the rows, including transactions it began and the Python path
finished (a value it declines: a JSON document with opaque values; a key that moves, an image
that leaves columns out).
Both reads write transaction records, which the kernel's bursts give the pipeline (issue 33);
a third read, with the kernel and heartbeats, checks the heartbeats."""

from __future__ import annotations

import io
import itertools
import json
import random
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from connector.avro.encoding import MessageEncoder
from connector.avro.framing import SingleObjectFraming
from connector.avro.registry import SchemaDirectory
from connector.canal import CanalJsonEncoder
from connector.checkpoint import Checkpointer
from connector.commands.decode import decode_files
from connector.config import SnapshotSection
from connector.extras import HeartbeatTopic, TransactionTopic
from connector.pipeline import NO_OPTIONS, Options, Pipeline
from connector.position import Position, position_of_text
from connector.querytext import NO_QUERIES, QueryText
from connector.schema.history import MemoryHistoryStore
from connector.sink.partitioning import TopicRouter
from connector.startup import Prepared, prepare
from connector.steps import Encoder
from connector.stream import ChangeStream, StreamOptions
from tests.support.live import connect, fresh_database, live_config, server
from tests.support.twins import MemoryCheckpointStore, MemorySink
from tests.support.typed import TYPED_DB, typed_workload

pytestmark = pytest.mark.live

DB = "lanes"
OTHER = "lanes_other"  # not captured: its tables' rows are skipped, by the kernel too
# Every column type the kernel writes itself (connector/avro/transcode.py covers them).
COVERED = (
    "id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT UNSIGNED, bi BIGINT, "
    "bu BIGINT UNSIGNED, f FLOAT, d DOUBLE, dec1 DECIMAL(10,2), dec2 DECIMAL(38,10), dt DATE, "
    "dtm DATETIME(6), ts TIMESTAMP(3) NULL, y YEAR, vc VARCHAR(40), ch CHAR(5), bn BINARY(4), vb VARBINARY(20), "
    "bl BLOB, tx TEXT, lb LONGBLOB, tm TIME(3), tm0 TIME, b1 BIT(1), b12 BIT(12), b64 BIT(64), "
    "en ENUM('new','paid','shipped'), st SET('a','b','c','d'), l1 VARCHAR(20) CHARACTER SET latin1, "
    "w1 CHAR(4) CHARACTER SET cp1251, j JSON, dec3 DECIMAL(65,30), gk VARCHAR(20) CHARACTER SET gbk, "
    "sj CHAR(8) CHARACTER SET sjis, b5 VARCHAR(10) CHARACTER SET big5, kr TINYTEXT CHARACTER SET euckr, "
    "uj VARCHAR(10) CHARACTER SET ujis, ej VARCHAR(10) CHARACTER SET eucjpms, ac VARCHAR(10) CHARACTER SET ascii, "
    "u16 VARCHAR(10) CHARACTER SET utf16, u32 TEXT CHARACTER SET utf32, u2 CHAR(3) CHARACTER SET ucs2, "
    "ge GEOMETRY"
)
# MySQL's binary JSON as the server writes it (connector/csrc/jsonb.c; MariaDB's JSON is text).
JSONS = ('{"id": 7, "name": "a\\nb", "tags": [1.5, null, true, "x"], "n": {"deep": [1e300, -2.5e-7, 12345678.9]}}',
         "[]", "{}", '"just a string"', "null", "-32769", "18446744073709551615", "0.1", '{"":[[[]]],"é中😀":{}}',
         "[" + ",".join(str(i * 1000) for i in range(300)) + "]", '{"big": "' + "v" * 70000 + '"}', None)  # fmt: skip


def _covered_row(rng: random.Random, key: int) -> tuple[Any, ...]:
    return (
        key, rng.randint(-128, 127), rng.randint(0, 255), rng.randint(-30000, 30000), rng.randint(0, 2**24 - 1),
        rng.randint(-(2**63), 2**63 - 1), rng.randint(0, 2**64 - 1), rng.random() * 100, rng.random() * 1e10,
        f"{rng.randint(-99999999, 99999999) / 100:.2f}", f"{rng.randint(-10**27, 10**27)}.{rng.randint(0, 10**9)}",
        f"20{rng.randint(10, 30)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}", "2024-02-29 23:59:59.123456",
        "2021-06-01 12:00:00.250", rng.randint(1901, 2155), "ünï" * rng.randint(0, 10), "ab",
        bytes([rng.randint(0, 255) for _ in range(rng.randint(0, 4))]), b"\x00\xff" * rng.randint(0, 8),
        b"blob" * rng.randint(0, 50), "text ✓" * rng.randint(0, 20), None,
        rng.choice(["-838:59:59.000", "838:59:58.999", "00:00:00.001", "-00:00:00.500", "12:34:56.789"]),
        rng.choice(["-01:00:00", "23:59:59", "100:00:00"]), rng.randint(0, 1), rng.randint(0, 4095),
        rng.choice([0, 2**64 - 1, 2**63, rng.randint(0, 2**64 - 1)]), rng.choice(["new", "paid", "shipped", None]),
        rng.choice(["", "a", "b,d", "a,b,c,d"]), rng.choice(["", "café", "naïve ×÷", "plain"]),
        rng.choice(["", "Дом", "мир"]), rng.choice(JSONS),
        rng.choice(["-" + "9" * 35 + "." + "9" * 30, f"{rng.randrange(10**35)}.{rng.randrange(10**30):030d}", "-0.5"]),
        # codes whose server text is not Python's codec's: gbk's 0xA140 ("?"), sjis's 0x815F ("\\"), big5's 0xA15A
        rng.choice(["", "中文 \"q\"", b"\xa1\x40"]), rng.choice(["日本語", b"\x81\x5f\x82\xa0", None]),
        rng.choice(["繁體", b"\xa1\x5a"]), rng.choice(["한국어", "plain"]),
        # ujis and eucjpms (each server's own table), with JIS X 0212's three-byte codes; ascii (the same)
        rng.choice(["日本語", "丂", "ｶﾅ", None]), rng.choice(["①②", "丂", ""]), rng.choice(["plain \\", ""]),
        # UTF-16, UTF-32 and UCS-2 (beyond the BMP but in ucs2)
        rng.choice(["a😀", "", None]), rng.choice(["💾" * 30, "x"]), rng.choice(["中", "\ue000", ""]),
        # a GEOMETRY as stored: its SRID, then WKB (a POINT)
        rng.choice([None, struct.pack("<IBIdd", rng.choice([0, 4326]), 1, 1, 45.5, rng.uniform(-90, 90))]),
    )  # fmt: skip


WIDTH = len(_covered_row(random.Random(0), 0))  # COVERED's columns


def _covered_workload(rng: random.Random) -> None:
    """Single-row transactions, statements of many rows, transactions over captured and uncovered
    and uncaptured tables, key moves, DDL between, a row larger than the dump's read buffer."""
    conn = connect(DB)
    insert = f"INSERT INTO k VALUES ({', '.join(['%s'] * WIDTH)})"
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"CREATE TABLE k ({COVERED}) CHARACTER SET utf8mb4")
        cur.execute("CREATE TABLE nokey (a INT, b VARCHAR(10))")
        cur.execute(f"CREATE TABLE {OTHER}.o (id INT PRIMARY KEY, v INT)")
        marks = ["%s"] * WIDTH
        marks[12] = "NOW(6)"  # dtm
        now = f"INSERT INTO k VALUES ({', '.join(marks)})"
        for key in range(40):  # autocommit: single-row transactions; NOW(6) logs the start's microseconds
            row = _covered_row(rng, key)
            cur.execute(now, row[:12] + row[13:]) if key % 2 else cur.execute(insert, row)
        cur.executemany(insert, [_covered_row(rng, key) for key in range(40, 400)])  # many rows a statement
        cur.executemany("INSERT INTO nokey VALUES (%s, %s)", [(i % 5, rng.choice(["x", None])) for i in range(30)])
        for key in range(400, 420):  # captured, uncaptured and uncovered tables in one transaction
            cur.execute("BEGIN")
            cur.execute(insert, _covered_row(rng, key))
            cur.execute(f"INSERT INTO {OTHER}.o VALUES (%s, %s)", (key, key))
            cur.execute(f"INSERT INTO {TYPED_DB}.pair VALUES (%s, %s, %s)", (key, "z", 0.5))
            cur.execute("UPDATE k SET vc = 'moved' WHERE id = %s", (key - 400,))
            cur.execute("COMMIT")
        if not server().mariadb:  # gb18030, MySQL's alone: two- and four-byte codes, beyond the BMP, a "?" one
            cur.execute("CREATE TABLE g (id INT PRIMARY KEY, gb VARCHAR(10) CHARACTER SET gb18030,"
                        " gt TEXT CHARACTER SET gb18030)")  # fmt: skip
            rows = [(key, rng.choice(["中文", "€\u0080", "😀", b"\x84\x31\xa5\x30", None]),
                     rng.choice(["\U0010ffff" * 9, "x", ""])) for key in range(30)]  # fmt: skip
            for row in rows[:10]:
                cur.execute("INSERT INTO g VALUES (%s, %s, %s)", row)
            cur.executemany("INSERT INTO g VALUES (%s, %s, %s)", rows[10:20])
        if not server().mariadb:  # MySQL's compressed transactions: the same kinds, each in a TRANSACTION_PAYLOAD
            cur.execute("SET SESSION binlog_transaction_compression = ON")
            for row in rows[20:]:
                cur.execute("INSERT INTO g VALUES (%s, %s, %s)", row)
            for key in range(600, 640):
                cur.execute(insert, _covered_row(rng, key))
            cur.executemany(insert, [_covered_row(rng, key) for key in range(640, 740)])
            cur.execute("BEGIN")  # rows of three tables in one payload, and two statements of k
            cur.execute(insert, _covered_row(rng, 740))
            cur.execute(f"INSERT INTO {OTHER}.o VALUES (%s, %s)", (740, 740))
            cur.execute(f"INSERT INTO {TYPED_DB}.pair VALUES (%s, %s, %s)", (740, "z", 0.5))
            cur.execute("UPDATE k SET vc = 'twice' WHERE id BETWEEN 600 AND 605")
            cur.execute("COMMIT")
            cur.execute("UPDATE k SET id = id + 10000 WHERE id = 610")  # a key that moves: all of it Python's
            cur.execute("SET SESSION binlog_transaction_compression = OFF")
        cur.execute("UPDATE k SET bi = bi DIV 2 WHERE id < 100")
        cur.execute("UPDATE k SET en = 'paid', st = 'c', tm = '-01:02:03.4' WHERE id BETWEEN 100 AND 150")
        # JSON with opaque values (a DECIMAL and a DATE made by SQL): the kernel declines the event
        cur.execute("UPDATE k SET j = JSON_OBJECT('d', CAST(1.5 AS DECIMAL(4,2)), 't', CAST('2024-01-02' AS DATE))"
                    " WHERE id IN (1, 2)")  # fmt: skip
        cur.execute("UPDATE k SET id = id + 10000 WHERE id = 5")  # a key that moves: the Python path's
        cur.execute("DELETE FROM k WHERE id % 7 = 0")
        cur.execute("DELETE FROM nokey WHERE a = 3")
        cur.execute("ALTER TABLE k ADD COLUMN extra INT DEFAULT 9")  # the kernel forgets and plans again
        cur.execute(insert.replace(", %s)", ", %s, %s)"), (*_covered_row(rng, 500), 1))  # and `extra`
        cur.execute("UPDATE k SET lb = %s WHERE id = 500", (b"L" * (3 << 20),))  # longer than the read buffer
        cur.execute("UPDATE k SET tx = 'after the big row' WHERE id = 500")
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute("UPDATE k SET ti = 1 WHERE id = 1")  # an after image of one column: the Python path's
        cur.execute("SET SESSION binlog_row_image = 'FULL'")
        cur.execute("TRUNCATE TABLE nokey")
        cur.execute("INSERT INTO nokey VALUES (1, 'again')")
    conn.close()


@dataclass
class Read:
    messages: dict[tuple[str, int], list[tuple[bytes | None, bytes | None]]]
    committed: Position | None
    rows: int
    kernel_rows: int
    transactions: int
    kernel_transactions: int


def _read(
    config: Any, prepared: Prepared, work: Path, kernel: bool, query: QueryText = NO_QUERIES,
    options: Options = NO_OPTIONS, canal: str | None = None,
) -> Read:  # fmt: skip
    """The binlog from the prepared start to its end, as `sluice run` reads it, into a MemorySink
    (`query`: what row messages' `sql` carries of their statement's text; `options`: the [kafka]
    options that add messages; `canal`: canal-json with this `old`, not Avro)."""
    encoder: Encoder = MessageEncoder(SchemaDirectory(work), SingleObjectFraming())
    if canal is not None:
        encoder = CanalJsonEncoder(SchemaDirectory(work), "row", canal)
    sink = MemorySink(partitions=3)
    checkpointer = Checkpointer(MemoryCheckpointStore("redis"), MemoryCheckpointStore("database"))
    pipeline = Pipeline(encoder, sink, TopicRouter("lane", []), checkpointer, options=options)
    stream = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(),
                          lanes=pipeline if kernel else None, wall=lambda: 1_700_000_000.5,
                          options=StreamOptions(typed_rows=True, query=query))  # fmt: skip
    pipeline.run(stream.items(prepared.start, blocking=False), prepared.start)
    # Partitions that hold messages: the kernel's plan makes a table's topic at its TABLE_MAP,
    # the Python path at its first message (a rows event that fails leaves an empty topic or none).
    messages = {
        (topic, p): [(m.key, m.value) for m in partition]
        for topic, partitions in sink.topics.items() for p, partition in enumerate(partitions) if partition
    }  # fmt: skip
    counters = pipeline.counters
    return Read(messages, checkpointer.committed, counters.rows, counters.kernel_rows, counters.transactions,
                counters.kernel_transactions)  # fmt: skip


def _files_from(first: str) -> list[str]:
    """The server's binlog files from `first` to the current one, the current one closed first."""
    with connect().cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW BINARY LOGS")
        names = [str(row[0]) for row in cur.fetchall()]
    return [str(server().binlog_dir / name) for name in names[names.index(first) : -1]]


def test_the_kernel_hands_on_what_the_python_path_does(tmp_path: Path) -> None:
    fresh_database(TYPED_DB)
    fresh_database(DB)
    fresh_database(OTHER)
    config = replace(live_config([rf"{DB}\..*", rf"{TYPED_DB}\..*"]), snapshot=SnapshotSection(mode="never"))
    history = MemoryHistoryStore()
    first = prepare(config, history)
    typed_workload(random.Random(11))
    _covered_workload(random.Random(12))
    # Both with transaction records (their own state each): the kernel's bursts say their transactions
    records = "lane._transaction"
    with_kernel = _read(config, first, tmp_path / "kernel", kernel=True,
                        options=Options(transactions=TransactionTopic(records, clock=lambda: 1.0)))  # fmt: skip
    again = prepare(config, history, resume=first.start)  # the schema as of the start, from the history
    python = _read(config, again, tmp_path / "python", kernel=False,
                   options=Options(transactions=TransactionTopic(records, clock=lambda: 1.0)))  # fmt: skip
    ticks = itertools.count()  # a heartbeat is due every tenth look
    heartbeats = HeartbeatTopic("lane._heartbeat", "lane", 10.0, clock=lambda: float(next(ticks)))
    again = prepare(config, history, resume=first.start)
    beating = _read(config, again, tmp_path / "beating", kernel=True, options=Options(heartbeats=heartbeats))

    assert python.kernel_rows == 0 and python.rows > 800
    assert with_kernel.rows == python.rows and with_kernel.transactions == python.transactions
    assert with_kernel.committed == python.committed and with_kernel.committed is not None
    assert with_kernel.messages.keys() == python.messages.keys()
    for where, expected in python.messages.items():
        assert with_kernel.messages[where] == expected, where
    # the records: a BEGIN and an END for each transaction with captured rows, ids and counts the Python path's
    statuses = [json.loads(value or b"")["status"] for _, value in python.messages[(records, 0)]]
    assert statuses == ["BEGIN", "END"] * (len(statuses) // 2) and len(statuses) >= 2 * 60
    # `sluice decode` of the same binlog files: the compiled JSON renderer's lines are the Python path's
    compiled, python_lines = io.StringIO(), io.StringIO()
    files = _files_from(first.start.file)
    written = decode_files(files, compiled, clock=lambda: 1_700_000_000.5)
    assert decode_files(files, python_lines, compiled=False, clock=lambda: 1_700_000_000.5) == written > 800
    assert compiled.getvalue() == python_lines.getvalue()
    # most rows came by the kernel: k's and pair's, nokey's, the transactions it handed over; and it
    # committed the single-row ones, each with its own BEGIN on MySQL (its start time's microseconds)
    assert with_kernel.kernel_rows > 0.6 * with_kernel.rows, (with_kernel.kernel_rows, with_kernel.rows)
    assert with_kernel.kernel_transactions >= 60 and python.kernel_transactions == 0, with_kernel
    if not server().mariadb:  # and the compressed ones after the first (the Python path's, which teaches it)
        assert with_kernel.kernel_transactions >= 60 + 40, with_kernel

    # With heartbeats on, the kernel still takes the rows (a burst's position closes as any other,
    # and a heartbeat goes out then when one is due): the same row messages, and heartbeats at
    # positions that closed, in order, the last at most the saved one.
    beats = beating.messages.pop(("lane._heartbeat", 0))
    python.messages.pop((records, 0))
    assert beating.messages == python.messages and beating.committed == python.committed
    assert beating.kernel_rows == with_kernel.kernel_rows, (beating.kernel_rows, with_kernel.kernel_rows)
    assert len(beats) >= 3 and {key for key, _ in beats} == {b'{"serverName":"lane"}'}
    positions = [position_of_text(json.loads(value or b"")["position"].split()[0]) for _, value in beats]
    assert positions == sorted(positions, key=Position.sort_key) and len(set(positions)) == len(positions)
    assert python.committed is not None and positions[-1].sort_key() <= python.committed.sort_key()

    # canal-json (issue 33): the kernel writes the Python path's messages, `old` changed and whole
    for old in ("changed", "full"):
        canal_kernel = _read(config, prepare(config, history, resume=first.start), tmp_path / f"canal-{old}",
                             kernel=True, canal=old)  # fmt: skip
        canal_python = _read(config, prepare(config, history, resume=first.start), tmp_path / f"canal-p-{old}",
                             kernel=False, canal=old)  # fmt: skip
        assert canal_kernel.messages == canal_python.messages and canal_kernel.rows == canal_python.rows
        assert canal_kernel.committed == canal_python.committed
        assert canal_kernel.kernel_rows > 0.6 * canal_kernel.rows, (canal_kernel.kernel_rows, canal_kernel.rows)


# What `sql` carries here: up to 300 bytes (the configuration's least is 256), so that long
# statements are cut, some inside a character (the Chinese text is three bytes a character).
QUERY = QueryText(True, 300)


def _statement_workload(rng: random.Random) -> None:
    """Statements whose text the rows carry: one row and many, cut and whole, in UTF-8 and not (a
    latin1 client's bytes: the Python path's, escaped), beside an uncaptured table, a key that moves
    (the kernel hands its transaction over with the text), compressed on MySQL."""
    conn = connect(DB)
    with conn.cursor() as cur:
        if not server().mariadb:  # MariaDB logs each statement's text by default (binlog_annotate_row_events)
            cur.execute("SET SESSION binlog_rows_query_log_events = ON")
        cur.execute("CREATE TABLE q (id INT PRIMARY KEY, t VARCHAR(400))")
        cur.execute(f"CREATE TABLE {OTHER}.o (id INT PRIMARY KEY, v INT)")
        for key in range(30):  # single rows, the text around the cut
            cur.execute(f"INSERT INTO q VALUES ({key}, '{'中文' * (key * 4)}')")
        cur.execute("INSERT INTO q VALUES " + ", ".join(f"({key}, 'many {key}')" for key in range(30, 90)))
        cur.execute("INSERT INTO q VALUES (300, 'say \"hi\"\\\\ \t now')")  # JSON escapes in canal-json's `sql`
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {OTHER}.o VALUES (1, 1)")  # its text is read, its rows skipped
        cur.execute("UPDATE q SET t = CONCAT(t, '+') WHERE id < 5")
        cur.execute("COMMIT")
        cur.execute("UPDATE q SET id = id + 1000 WHERE id = 7")  # a key that moves: the Python path's
        if not server().mariadb:
            cur.execute("SET SESSION binlog_transaction_compression = ON")
            for key in range(90, 100):
                cur.execute(f"INSERT INTO q VALUES ({key}, 'packed {rng.random()}')")
            cur.execute("SET SESSION binlog_transaction_compression = OFF")
        cur.execute("SET NAMES latin1")
        conn.query(b"INSERT INTO q VALUES (200, 'caf\xe9')")  # sent as bytes: the statement's text is not UTF-8
        cur.execute("SET NAMES utf8mb4")
        cur.execute("DELETE FROM q WHERE id BETWEEN 40 AND 49")
    conn.close()


def test_the_kernel_carries_statement_text_as_the_python_path_does(tmp_path: Path) -> None:
    fresh_database(DB)
    fresh_database(OTHER)
    config = replace(live_config([rf"{DB}\..*"], include_query=True), snapshot=SnapshotSection(mode="never"))
    history = MemoryHistoryStore()
    first = prepare(config, history)
    _statement_workload(random.Random(13))
    with_kernel = _read(config, first, tmp_path / "kernel", kernel=True, query=QUERY)
    again = prepare(config, history, resume=first.start)
    python = _read(config, again, tmp_path / "python", kernel=False, query=QUERY)

    assert with_kernel.rows == python.rows > 100 and with_kernel.committed == python.committed
    assert with_kernel.messages == python.messages
    values = [value or b"" for partition in python.messages.values() for _, value in partition]
    assert any(b"many 30" in v for v in values) and any(b"cut by Sluice" in v for v in values)
    assert sum(b"INSERT INTO q VALUES (30, 'many 30')" in v for v in values) == 1  # the first row's only
    # the kernel's: the single rows and the statement of many (not the key move, nor the latin1 text)
    assert with_kernel.kernel_rows >= 80 and with_kernel.kernel_transactions >= 25, with_kernel
    # canal-json's `sql` too, the first row's text JSON-escaped
    canal_kernel = _read(config, prepare(config, history, resume=first.start), tmp_path / "canal", kernel=True,
                         query=QUERY, canal="changed")  # fmt: skip
    canal_python = _read(config, prepare(config, history, resume=first.start), tmp_path / "canal-p", kernel=False,
                         query=QUERY, canal="changed")  # fmt: skip
    assert canal_kernel.messages == canal_python.messages and canal_kernel.committed == canal_python.committed
    assert canal_kernel.kernel_rows == with_kernel.kernel_rows, (canal_kernel.kernel_rows, with_kernel.kernel_rows)
