"""The whole pipeline on the real services: MariaDB or MySQL -> Sluice -> Kafka -> a consumer's replay == SELECT *."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.config import AvroSection, Config
from connector.position import binlog_sort_key
from connector.runner import Connector, checkpoint_stores, kafka_sink
from connector.schema.capture import master_position
from connector.sink.kafka import Delivered, Headers, KafkaSink
from tests.live import ROOT, connect, fresh_database, live_config, numbers, source_toml, wait_until
from tests.replay import Replay, comparable, consume, set_columns, source_rows

pytestmark = pytest.mark.live

TABLES = [
    "CREATE TABLE {db}.orders (id INT PRIMARY KEY, customer VARCHAR(40) CHARACTER SET utf8mb4 NOT NULL,"
    " amount DECIMAL(12,2) NOT NULL, status ENUM('new','paid','shipped') NOT NULL DEFAULT 'new',"
    " created DATETIME(6) NOT NULL, note TEXT NULL, tags SET('a','b','c') NULL, raw VARBINARY(16) NULL,"
    " due DATE NULL, window_ TIME(3) NULL, big BIGINT UNSIGNED NULL, ratio DOUBLE NULL, f FLOAT NULL)",
    "CREATE TABLE {db}.order_lines (order_id INT, line INT, sku CHAR(8), qty SMALLINT NOT NULL,"
    " PRIMARY KEY (order_id, line))",
    "CREATE TABLE {db}.events (msg VARCHAR(100), n INT)",
]


def fresh(db: str) -> None:
    fresh_database(db, *TABLES)


def workload(db: str, steps: int, seed: int, pause_s: float = 0.0, alter_at: int = -1) -> None:
    """Inserts, updates (some changing primary keys), deletes, multi-table transactions; an ADD COLUMN."""
    rng = random.Random(seed)
    conn = connect(db)
    ids = set(range(1_000_000 * seed, 1_000_000 * seed))
    next_id = 1_000_000 * seed
    with conn.cursor() as cur:
        for step in range(steps):
            if step == alter_at:
                cur.execute("ALTER TABLE orders ADD COLUMN region VARCHAR(8) NOT NULL DEFAULT 'eu' AFTER customer")
            cur.execute("BEGIN")
            for _ in range(rng.randint(1, 3)):
                op = rng.random()
                if op < 0.5 or not ids:
                    next_id += 1
                    ids.add(next_id)
                    cur.execute(
                        "INSERT INTO orders (id, customer, amount, created, note, tags, raw, due, window_, big,"
                        " ratio, f) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        (next_id, rng.choice(["ann", "bö", "çé 🐬", "d"]), f"{rng.randrange(10**9) / 100:.2f}",
                         f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 12:34:56.{rng.randrange(10**6):06d}",
                         None if rng.random() < 0.3 else "n" * rng.randint(0, 50), rng.choice(["", "a", "a,c", None]),
                         rng.randbytes(rng.randint(0, 16)), rng.choice([None, "2000-02-29"]),
                         rng.choice([None, "-12:00:00.500", "100:00:00"]), rng.choice([None, 2**64 - 1, 7]),
                         rng.random(), rng.choice([None, 0.1, 1.5])),
                    )  # fmt: skip
                    cur.execute("INSERT INTO order_lines VALUES (%s, 1, %s, %s)", (next_id, "sku", rng.randint(1, 9)))
                    cur.execute("INSERT INTO events VALUES (%s, %s)", ("created", rng.randint(0, 3)))
                elif op < 0.75:
                    target = rng.choice(sorted(ids))
                    cur.execute("UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id = %s", (target,))
                    cur.execute("UPDATE events SET n = n + 1 WHERE n = %s LIMIT 1", (rng.randint(0, 3),))
                elif op < 0.85:
                    old = rng.choice(sorted(ids))
                    next_id += 1
                    cur.execute("UPDATE orders SET id = %s WHERE id = %s", (next_id, old))  # a primary-key change
                    cur.execute(
                        "UPDATE order_lines SET order_id = %s, line = line + 1 WHERE order_id = %s", (next_id, old)
                    )
                    ids.discard(old)
                    ids.add(next_id)
                else:
                    target = rng.choice(sorted(ids))
                    cur.execute("DELETE FROM order_lines WHERE order_id = %s", (target,))
                    cur.execute("DELETE FROM orders WHERE id = %s", (target,))
                    cur.execute("DELETE FROM events WHERE n = %s LIMIT 1", (rng.randint(0, 3),))
                    ids.discard(target)
            cur.execute("COMMIT")
            time.sleep(pause_s)


def config_for(name: str, db: str, tmp: Path) -> Config:
    base = live_config([rf"{db}\..*"], name=name, server_id=7000 + random.randrange(1000))
    return replace(
        base,
        kafka=replace(base.kafka, topic_prefix=name, partitions=3),
        checkpoint=replace(base.checkpoint, flush_interval_s=0.5),
        avro=AvroSection(schemas_dir=str(tmp / "schemas")),
    )


def assert_replay_equals_source(
    config: Config, db: str, tables: tuple[str, ...] = ("orders", "order_lines", "events")
) -> Replay:
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    replay = Replay(reader)
    replay.apply_all(consume(config.kafka.topic_prefix))
    for table in tables:
        sets = set_columns(reader, db, table)
        got = comparable(replay.tables.get((db, table), {}), sets)
        want = comparable(source_rows(db, table, reader), sets)
        assert got == want, f"{db}.{table}: replay differs from SELECT * ({len(got)} vs {len(want)} rows)"
    return replay


def test_end_to_end_replay_equals_the_source(tmp_path: Path) -> None:
    name, db = f"e2e{uuid.uuid4().hex[:6]}", "e2e"
    fresh(db)
    config = config_for(name, db, tmp_path)
    Connector(config).run(blocking=False)  # captures the schema, nothing to stream yet
    workload(db, 120, seed=1, alter_at=60)
    end = master_position(connect())
    connector = Connector(config)
    connector.run(blocking=False)  # from its checkpoint to the end of the binlog
    replay = assert_replay_equals_source(config, db)
    assert replay.duplicates == []
    saved = checkpoint_stores(config).durable.get()
    assert saved is not None and saved.sort_key() >= end.sort_key()
    index = SchemaDirectory(config.avro.schemas_dir).latest_schema(db, "orders")
    assert index["sluice.version"] == 2  # ADD COLUMN made a second version


class CountingSink:
    """The Kafka sink, noting each batch handed to it: (topic, messages)."""

    def __init__(self, inner: KafkaSink) -> None:
        self.inner = inner
        self.batches: list[tuple[str, int]] = []

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None, done: Delivered
    ) -> None:
        self.produce_many(topic, [(key, value)], partition, done)

    def produce_many(
        self, topic: str, messages: Sequence[tuple[bytes | None, bytes | None]], partition: int | None,
        done: Delivered, headers: Headers | None = None,
    ) -> None:
        self.batches.append((topic, len(messages)))
        self.inner.produce_many(topic, messages, partition, done, headers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_statement_of_many_rows_events_is_handed_to_kafka_whole(tmp_path: Path) -> None:
    name, db = f"stmt{uuid.uuid4().hex[:6]}", "stmt"
    fresh(db)
    config = config_for(name, db, tmp_path)
    Connector(config).run(blocking=False)
    start = master_position(connect())
    with connect(db).cursor() as cur:
        cur.execute(f"INSERT INTO events SELECT REPEAT('x', 90), seq FROM {numbers(3000)}")  # no primary key
        cur.execute(f"INSERT INTO order_lines SELECT seq, 1, 'sku', 2 FROM {numbers(3000)}")
        cur.execute(f"SHOW BINLOG EVENTS IN '{start.file}' FROM {start.pos}")
        rows_events = sum(1 for event in cur.fetchall() if str(event[2]).startswith("Write_rows"))
    assert rows_events > 20  # each statement took more than ten 8 KiB rows events
    sink = CountingSink(kafka_sink(config))
    Connector(config, sink=sink).run(blocking=False)
    assert [n for topic, n in sink.batches if topic == f"{name}.{db}.events"] == [3000]
    assert [n for topic, n in sink.batches if topic == f"{name}.{db}.order_lines"] == [3000]
    assert_replay_equals_source(config, db, ("order_lines", "events"))


def sluice_run(config_path: Path, streaming: bool = False) -> subprocess.Popen[bytes]:
    """`sluice run` on the config file, its log appended next to it; with `streaming`, returned
    once it streams (a SIGTERM before its handler is installed would end it with -15, not a stop)."""
    log = config_path.with_suffix(".log")
    before = log.read_text(errors="replace").count("streaming from") if log.exists() else 0
    with log.open("ab") as err:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "sluice"), "run", "--config", str(config_path)],
            stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip

    if streaming:
        wait_until(lambda: log.read_text(errors="replace").count("streaming from") > before, 60,
                   "`sluice run` to stream", every_s=0.1)  # fmt: skip
    return process


def write_config(config: Config, path: Path) -> None:
    path.write_text(
        f'name = "{config.name}"\n' + source_toml(config.source.server_id)
        + f"include = ['{config.source.include[0]}']\ninclude_query = {str(config.source.include_query).lower()}\n"
        f"[kafka]\ntopic_prefix = \"{config.kafka.topic_prefix}\"\n"
        f'bootstrap_servers = "{config.kafka.bootstrap_servers}"\n'
        f'max_message_bytes = {config.kafka.max_message_bytes}\noversized = "{config.kafka.oversized}"\n'
        f'[checkpoint]\ndb_url = "{config.checkpoint.db_url}"\nredis_url = "{config.checkpoint.redis_url}"\n'
        f"flush_interval_s = 0.5\n"
        f'[avro]\nschemas_dir = "{config.avro.schemas_dir}"\n'
    )


def caught_up(config: Config, timeout_s: float = 120) -> None:
    stores = checkpoint_stores(config)
    target = master_position(connect())

    def reached() -> bool:
        saved = stores.fast.get() if stores.fast else None
        return saved is not None and saved.sort_key() >= target.sort_key()

    wait_until(reached, timeout_s, f"the connector to reach {target}", every_s=0.2)


def test_sigkill_at_random_moments_loses_nothing(tmp_path: Path) -> None:
    name, db = f"crash{uuid.uuid4().hex[:6]}", "crash"
    fresh(db)
    config = config_for(name, db, tmp_path)
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    Connector(config).run(blocking=False)  # the first start: schema captured, position saved
    rng = random.Random(3)
    writer = threading.Thread(target=workload, args=(db, 400, 2, 0.02, 200))
    writer.start()
    kills: list[Any] = []
    while writer.is_alive():
        process = sluice_run(path)
        time.sleep(rng.uniform(1.2, 3.0))
        process.send_signal(signal.SIGKILL)
        process.wait()
        kills.append(checkpoint_stores(config).fast.get())  # type: ignore[union-attr]
    writer.join()
    process = sluice_run(path, streaming=True)
    try:
        caught_up(config)

    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    replay = assert_replay_equals_source(config, db)
    assert len(kills) >= 2
    print(f"kills: {len(kills)}, duplicates dropped: {len(replay.duplicates)}")
    # Duplicates come only from transactions after the position saved when a process was killed.
    saved = [k.sort_key() for k in kills if k is not None]
    for file, pos, _, _ in replay.duplicates:
        assert any(k <= binlog_sort_key(file, pos) for k in saved), (file, pos)


def test_kafka_and_redis_restarts_mid_stream(tmp_path: Path) -> None:
    name, db = f"outage{uuid.uuid4().hex[:6]}", "outage"
    fresh(db)
    config = config_for(name, db, tmp_path)
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    Connector(config).run(blocking=False)
    process = sluice_run(path)
    services = ROOT / "deploy" / "services.sh"
    try:
        workload(db, 30, seed=5, pause_s=0.01)
        subprocess.run(["bash", str(services), "restart-kafka"], check=True)
        workload(db, 30, seed=6, pause_s=0.01)
        caught_up(config)
        # Redis restarts empty (no persistence): the database copy carries the position.
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        subprocess.run(["bash", str(services), "restart-redis"], check=True)
        assert checkpoint_stores(config).fast.get() is None  # type: ignore[union-attr]
        workload(db, 20, seed=7)
        process = sluice_run(path)
        caught_up(config)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    replay = assert_replay_equals_source(config, db)
    assert replay.duplicates == []  # clean stops: nothing was sent twice
    assert os.path.exists(config.avro.schemas_dir)


def test_status_and_position_commands(tmp_path: Path) -> None:
    name, db = f"cli{uuid.uuid4().hex[:6]}", "clidb"
    fresh(db)
    config = config_for(name, db, tmp_path)
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    sluice = str(ROOT / ".venv" / "bin" / "sluice")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sluice, *args, "--config", str(path)], capture_output=True, text=True, check=False)

    here = master_position(connect())
    assert run("position", "set", f"{here.file}:{here.pos}").returncode == 0
    shown = run("position", "show")
    assert shown.stdout.count(f"{here.file}:{here.pos}") == 2  # Redis and the database
    Connector(config).run(blocking=False)  # from the position set, through to the end
    status = json.loads(run("status").stdout)
    assert status["connector"] == name and status["redis"]["bytes_behind"] >= 0
    assert status["server"].startswith(here.file.split(".")[0] + ".")

    assert run("position", "reset").returncode == 0
    assert run("position", "show").stdout.count(": None") == 2
    bad = run("position", "set", "nonsense")
    assert bad.returncode == 2 and "FILE:POS or gtid:SET" in bad.stderr
