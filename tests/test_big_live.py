"""What users write that once stopped or doubled the stream: big statements, big rows, dumps.

Each on the real services (both servers), each through a `sluice run` that is SIGKILLed in the
middle where it matters, each ending with a consumer's replay of the topics equal to SELECT *.
"""

from __future__ import annotations

import contextlib
import functools
import json
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from connector.checkpoint import checkpoint_stores
from connector.config import Config
from connector.replica.server import master_position
from connector.runner import Connector
from connector.sink.kafka import KafkaSettings, KafkaSink
from tests.support.live import KAFKA, ROOT, RUN, connect, fresh_database, numbers, server
from tests.support.metrics import free_port, metric, scrape
from tests.support.pipelines import assert_replay_equals_source, caught_up, config_for, sluice_run, write_config
from tests.support.replay import consume
from tests.support.typed import COLUMNS, one_statement, placeholder

pytestmark = pytest.mark.live

MIB = 1 << 20
# A wide table of every column type of the differential test (46 columns).
WIDE = "CREATE TABLE {db}.wide (id INT PRIMARY KEY, " + ", ".join(f"{n} {k}" for n, k, _ in COLUMNS) + ")"
WIDE_INSERT = (f"INSERT INTO wide (id, {', '.join(n for n, _, _ in COLUMNS)}) VALUES "
               f"(%s, {', '.join(placeholder(n) for n, _, _ in COLUMNS)})")  # fmt: skip


# The BLOB and TEXT columns, cut short in the wide statement's rows but one in a hundred.
LONG = [i for i, (_, kind, _) in enumerate(COLUMNS, 1) if "BLOB" in kind or "TEXT" in kind]


@functools.cache
def wide_rows(count: int) -> list[list[Any]]:
    """`count` rows of the wide table, the same for both servers (made once: seconds of text). At
    the generators' full lengths 10,000 rows are a 640 MB statement (its MEDIUMBLOBs alone 300 MB of
    binlog); one row in a hundred keeps them, the others keep 200 of each BLOB's or TEXT's bytes or
    characters: a 31 MB statement, inside MySQL's default max_allowed_packet of 64 MiB."""
    rng = random.Random(21)
    rows: list[list[Any]] = []
    for key in range(count):
        row: list[Any] = [key] + [None if rng.random() < 0.15 else gen(rng) for _, _, gen in COLUMNS]
        for i in LONG if key % 100 else ():
            row[i] = None if row[i] is None else row[i][:200]
        rows.append(row)
    return rows


def blob_sql(mib: int) -> str:
    """SQL for `mib` MiB of bytes made on the server (a 1 KiB random block repeated)."""
    return f"REPEAT(RANDOM_BYTES(1024), {mib * 1024})"


def kafka_config(name: str, db: str, tmp: Path, **kafka: object) -> Config:
    base = config_for(name, db, tmp)
    return replace(base, kafka=replace(base.kafka, **kafka))  # type: ignore[arg-type]


@pytest.mark.no_source
def test_topics_sluice_makes_take_the_setting_and_existing_ones_keep_their_own() -> None:
    sink = KafkaSink(KafkaSettings(KAFKA, partitions=1, max_message_bytes=3 * MIB))
    made = f"sized.{uuid.uuid4().hex[:8]}"
    sink.ensure_topic(made)
    assert sink.limit(made) == 3 * MIB
    smaller = f"sized.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": KAFKA})
    admin.create_topics([NewTopic(smaller, 1, 1, config={"max.message.bytes": str(MIB)})])[smaller].result(60)
    sink.ensure_topic(smaller)
    assert sink.limit(smaller) == MIB  # DescribeConfigs: the topic's own limit
    larger = f"sized.{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(larger, 1, 1, config={"max.message.bytes": str(9 * MIB)})])[larger].result(60)
    assert sink.limit(larger) == 3 * MIB  # never above what the producer itself may send


def test_an_oversized_row_stops_with_one_line_then_dead_letters_when_asked(tmp_path: Path) -> None:
    name, db = f"over{uuid.uuid4().hex[:6]}", "oversized"
    fresh_database(db, "CREATE TABLE {db}.docs (id INT PRIMARY KEY, body LONGBLOB)")
    config = kafka_config(name, db, tmp_path)
    topic = f"{name}.{db}.docs"
    admin = AdminClient({"bootstrap.servers": KAFKA})  # a topic that exists already, limited to 1 MiB
    admin.create_topics([NewTopic(topic, 3, 1, config={"max.message.bytes": str(MIB)})])[topic].result(60)
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    Connector(config).run(blocking=False)  # the first start: schema captured, nothing to stream yet
    with connect(db).cursor() as cur:
        cur.execute("INSERT INTO docs VALUES (1, 'small')")
        before_big = master_position(connect())
        cur.execute(f"INSERT INTO docs VALUES (2, {blob_sql(3)})")
        cur.execute("INSERT INTO docs VALUES (3, 'after')")
    stopped = subprocess.run([str(ROOT / ".venv" / "bin" / "sluice"), "run", "--config", str(path)],
                             capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    err = stopped.stderr
    assert stopped.returncode == 3, err
    line = next(x for x in err.splitlines() if x.startswith("sluice:"))
    assert f'`{db}`.`docs` key {{"id": 2}} at' in line and f"over the limit of {MIB} of topic {topic}" in line
    assert '"dead-letter"' in line and "max.message.bytes" in line
    saved = checkpoint_stores(config).durable.get()
    assert saved is not None and saved.sort_key() >= before_big.sort_key()  # the row before it went on
    status = json.loads(subprocess.run([str(ROOT / ".venv" / "bin" / "sluice"), "status", "--config", str(path)],
                                       capture_output=True, text=True, check=True).stdout)  # fmt: skip
    assert status["blocked"] == line.removeprefix("sluice: OversizedMessageError: ")
    # The user chooses dead-letter: the stream goes on, the row is recorded and counted, the next
    # row published.
    write_config(replace(config, kafka=replace(config.kafka, oversized="dead-letter")), path)
    port = free_port()
    path.write_text(path.read_text() + f'[metrics]\nport = {port}\nhost = "127.0.0.1"\n')
    process = sluice_run(path, streaming=True)
    try:
        caught_up(config)
        counted = metric(scrape(port, "/metrics")[1], "sluice_oversized_total", database=db, policy="dead-letter",
                         table="docs")  # fmt: skip  (labels in the exposition's order)
        assert counted == 1
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    letters = [json.loads(value) for t, _, _, _, value in consume(name) if t == f"{name}._oversized"]
    assert [(d["table"], d["key"], d["limit"]) for d in letters] == [("docs", {"id": 2}, MIB)]
    assert letters[0]["size"] > 3 * MIB
    assert "blocked" not in json.loads(subprocess.run(
        [str(ROOT / ".venv" / "bin" / "sluice"), "status", "--config", str(path)], capture_output=True, text=True,
        check=True).stdout)  # fmt: skip
    published = [t for t, *_ in consume(name) if t == topic]
    assert len(published) == 2  # rows 1 and 3


def test_big_rows_and_a_10000_row_statement_survive_a_sigkill(tmp_path: Path) -> None:
    name, db = f"big{uuid.uuid4().hex[:6]}", "bigrows"
    fresh_database(db, "CREATE TABLE {db}.blobs (id INT PRIMARY KEY, b LONGBLOB, j JSON)",
                   "CREATE TABLE {db}.plain (id INT PRIMARY KEY, n INT)", WIDE)  # fmt: skip
    conn = connect(db)
    config = kafka_config(name, db, tmp_path, max_message_bytes=64 * MIB)
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    process = sluice_run(path, streaming=True)
    with conn.cursor() as cur:
        if not server().mariadb:  # the statement's text in the binlog, as MariaDB logs it by default
            cur.execute("SET SESSION binlog_rows_query_log_events = ON")
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute(f"INSERT INTO blobs VALUES (1, {blob_sql(3)}, NULL)")
        cur.execute(f"INSERT INTO blobs VALUES (2, {blob_sql(40)}, NULL)")
        cur.execute(f"INSERT INTO blobs VALUES (3, NULL, JSON_OBJECT('doc', REPEAT('x', {20 * MIB})))")
        cur.execute(one_statement(cur, WIDE_INSERT, wide_rows(10_000)))  # megabytes of text
        process.send_signal(signal.SIGKILL)  # in the middle of it all
        process.wait()
        fast = checkpoint_stores(config).fast
        saved = fast.get() if fast else None
        assert saved is None or saved.sort_key() < master_position(conn).sort_key(), "killed once all was saved"
        for i in range(200):
            cur.execute("INSERT INTO plain VALUES (%s, %s)", (i, i))
        cur.execute("DELETE FROM blobs WHERE id = 1")
    process = sluice_run(path, streaming=True)
    try:
        caught_up(config, timeout_s=300)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    assert_replay_equals_source(config, db, ("blobs", "plain", "wide"))


@pytest.mark.parametrize("rows", [100_000])
def test_a_dump_restored_into_a_captured_database_replays_exactly(tmp_path: Path, rows: int) -> None:
    """mysqldump / mariadb-dump with their default extended INSERTs, restored by the client."""
    source, target = "dumpsrc", "dumped"
    fresh_database(source, "CREATE TABLE {db}.t (id INT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(12,2),"
                   " at DATETIME(6), note TEXT)")  # fmt: skip
    with connect(source).cursor() as cur:
        cur.execute(f"INSERT INTO t SELECT seq, CONCAT('name ', seq), seq / 7, '2024-01-01' + INTERVAL seq SECOND,"
                    f" IF(seq % 5 = 0, NULL, REPEAT('n', seq % 97)) FROM {numbers(rows)}")  # fmt: skip
    dump_tool, client = _tools()
    dump = tmp_path / "dump.sql"
    with dump.open("wb") as out:
        subprocess.run([*dump_tool, "-h127.0.0.1", f"-P{server().port}", "-uroot", source], stdout=out, check=True)
    assert dump.read_text().count("INSERT INTO") < rows / 100  # extended INSERTs: many rows each
    name = f"dump{uuid.uuid4().hex[:6]}"
    fresh_database(target)
    config = kafka_config(name, target, tmp_path)
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    process = sluice_run(path, streaming=True)
    with query_logging(), dump.open("rb") as text:
        restore = subprocess.Popen([*client, "-h127.0.0.1", f"-P{server().port}", "-uroot", target], stdin=text)
        time.sleep(2)
        process.send_signal(signal.SIGKILL)  # while the restore runs
        process.wait()
        assert restore.wait(300) == 0
    process = sluice_run(path, streaming=True)
    try:
        caught_up(config, timeout_s=300)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    assert_replay_equals_source(config, target, ("t",))


@contextlib.contextmanager
def query_logging() -> Iterator[None]:
    """Statements' text in the binlog for sessions that connect meanwhile: MySQL logs it only
    when asked (binlog_rows_query_log_events), MariaDB by default (binlog_annotate_row_events)."""
    if server().mariadb:
        yield
        return
    with connect().cursor() as cur:
        cur.execute("SET GLOBAL binlog_rows_query_log_events = ON")
    try:
        yield
    finally:
        with connect().cursor() as cur:
            cur.execute("SET GLOBAL binlog_rows_query_log_events = OFF")


def _tools() -> tuple[list[str], list[str]]:
    """The server's own dump tool and client (MySQL's from its sid root, MariaDB's from Debian)."""
    if server().mariadb:
        return ["mariadb-dump", "--skip-ssl"], ["mariadb", "--skip-ssl"]
    bin_dir = RUN / "mysql" / "bin"
    plain = "--ssl-mode=DISABLED"
    return [str(bin_dir / "mysqldump"), plain, "--set-gtid-purged=OFF"], [str(bin_dir / "mysql"), plain]


def _memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (the peak) of a process, KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


ROW_MIB = 64
# The peak's growth over the idle connector, in multiples of the row: measured 4.00 on both
# servers (the rows event's body, the Avro message, the producer's copy, its compressed batch).
PEAK_MULTIPLE = 4.5


def test_a_64_mib_row_costs_a_small_multiple_of_itself_in_memory(tmp_path: Path) -> None:
    """Decode, Avro and produce of one 64 MiB row: the `sluice run` process's peak RSS grows by at
    most PEAK_MULTIPLE times the row, and the row arrives whole. Before, the dump's packet, its
    slice without the OK byte and the event held by two generator frames made it 6x."""
    name, db = f"huge{uuid.uuid4().hex[:6]}", "hugerow"
    fresh_database(db, "CREATE TABLE {db}.docs (id INT PRIMARY KEY, body LONGBLOB)")
    config = kafka_config(name, db, tmp_path, max_message_bytes=(ROW_MIB + 16) * MIB)
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    process = sluice_run(path, streaming=True)
    try:
        with connect(db).cursor() as cur:
            cur.execute("INSERT INTO docs VALUES (0, 'warm-up')")  # topic made, codecs built
        caught_up(config)
        idle = _memory_kib(process.pid)["VmRSS"]
        with connect(db).cursor() as cur:
            cur.execute(f"INSERT INTO docs VALUES (1, {blob_sql(ROW_MIB)})")
            cur.execute("SELECT LENGTH(body) FROM docs WHERE id = 1")
            assert cur.fetchone() == (ROW_MIB * MIB,)  # the server kept it whole (max_allowed_packet)
        caught_up(config, timeout_s=300)
        peak = _memory_kib(process.pid)["VmHWM"]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    growth = (peak - idle) / 1024 / ROW_MIB
    print(f"idle {idle / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB: {growth:.2f}x the {ROW_MIB} MiB row")
    assert growth <= PEAK_MULTIPLE, f"peak RSS grew by {growth:.2f}x the row"
    assert_replay_equals_source(config, db, ("docs",))
