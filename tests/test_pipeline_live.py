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
from typing import Any, cast

import pytest

from connector.avro.registry import SchemaDirectory
from connector.checkpoint import checkpoint_stores
from connector.commands.position import position_command
from connector.config import Config
from connector.errors import TransactionAbortedError
from connector.exactly import PositionTopic, read_position
from connector.metrics import Metrics
from connector.position import binlog_sort_key
from connector.replica.server import master_position
from connector.runner import Connector, kafka_sink, run_restarting
from connector.sink.kafka import Delivered, Headers, KafkaSink, Sink
from tests.support.live import ROOT, connect, numbers, server
from tests.support.pipelines import (
    Control,
    Messages,
    assert_in_order,
    assert_replay_equals_source,
    caught_up,
    config_for,
    fresh,
    sluice_run,
    workload,
    write_config,
)
from tests.support.replay import consume

pytestmark = pytest.mark.live


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
    """The Python path gathers a statement's rows events into one hand-off (the compiled kernel's
    unit is its burst, up to lane.MAX_MESSAGES: it takes these statements from the first one)."""
    name, db = f"stmt{uuid.uuid4().hex[:6]}", "stmt"
    fresh(db)
    config = config_for(name, db, tmp_path)
    config = replace(config, source=replace(config.source, compiled_kernel=False))
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


def test_sigkill_at_random_moments_loses_nothing(tmp_path: Path) -> None:
    name, db = f"crash{uuid.uuid4().hex[:6]}", "crash"
    fresh(db)
    config = config_for(name, db, tmp_path)
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    Connector(config).run(blocking=False)  # the first start: schema captured, position saved
    rng = random.Random(3)
    writer = threading.Thread(target=workload, args=(db, 400, 2, 0.02, 200, 40))
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
        workload(db, 30, seed=5, pause_s=0.01, big_every=10)
        subprocess.run(["bash", str(services), "restart-kafka"], check=True)
        workload(db, 30, seed=6, pause_s=0.01, big_every=10)
        caught_up(config)
        # Redis restarts empty (no persistence): the database copy carries the position.
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        subprocess.run(["bash", str(services), "restart-redis"], check=True)
        assert checkpoint_stores(config).fast.get() is None  # type: ignore[union-attr]
        workload(db, 20, seed=7, big_every=10)
        process = sluice_run(path)
        caught_up(config)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    replay = assert_replay_equals_source(config, db)
    assert replay.duplicates == []  # clean stops: nothing was sent twice
    assert os.path.exists(config.avro.schemas_dir)


def chaos_config(db: str, folder: Path, exactly_once: bool, server_id: int) -> tuple[Config, Path]:
    """A connector of `db` with its own folder and server_id; its config file's path."""
    folder.mkdir()
    prefix = "once" if exactly_once else "chaos"
    config = config_for(f"{prefix}{uuid.uuid4().hex[:6]}", db, folder)
    config = replace(config, source=replace(config.source, server_id=server_id),
                     kafka=replace(config.kafka, max_message_bytes=16 << 20, exactly_once=exactly_once))  # fmt: skip
    write_config(config, folder / "sluice.toml")
    return config, folder / "sluice.toml"


def row_records(messages: Messages) -> int:
    return sum(1 for topic, *_ in messages if not topic.endswith(("._ddl", "._positions")))


def test_a_random_workload_survives_kills_and_a_restart_of_every_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Statements of up to 10,000 rows, rows of several MiB, keyed and keyless tables and an ADD
    COLUMN mid-stream, under three SIGKILLs and a restart each of Kafka, Redis and the source
    server, read by two connectors side by side that share the faults:
    - at least once (the default): nothing lost, reordered or stuck;
    - [kafka] exactly_once, and a second instance of it started while it streams, which fences
      it: besides, nothing twice for a read_committed reader, while a read_uncommitted one is
      shown the aborted transactions' records (proof that the run went through aborts)."""
    db = "chaos"
    fresh(db)
    least, least_path = chaos_config(db, tmp_path / "least", False, 7101)
    once, once_path = chaos_config(db, tmp_path / "once", True, 7102)
    for config in (least, once):
        Connector(config).run(blocking=False)  # the first start: schema captured, position saved
    topic = PositionTopic.of(once.kafka.topic_prefix, once.name)
    assert read_position(once.kafka.client_config(), topic) is not None  # Kafka's, in that mode
    control = Control()
    writer = threading.Thread(target=workload, args=(db, 100_000, 9, 0.03, 60, 80, control))
    writer.start()
    services, rng = ROOT / "deploy" / "services.sh", random.Random(9)
    processes = {path: sluice_run(path, streaming=True) for path in (least_path, once_path)}
    try:
        for fault in ("kill", "second", "kafka", "kill", "redis", "server", "kill"):
            time.sleep(rng.uniform(2.0, 5.0))
            if fault == "kill":
                for path, process in processes.items():
                    process.send_signal(signal.SIGKILL)
                    process.wait()
                    processes[path] = sluice_run(path)
            elif fault == "second":  # the same connector again: Kafka fences the first
                second, log = sluice_run(once_path, streaming=True), once_path.with_suffix(".log")
                assert processes[once_path].wait(60) == 1, log.read_text()[-3000:]
                assert "sluice: FencedError: another instance took" in log.read_text(), log.read_text()[-3000:]
                processes[once_path] = second
            elif fault == "server":
                with control.held():
                    server().restart()
            else:
                subprocess.run(["bash", str(services), f"restart-{fault}"], check=True)
        time.sleep(2)
        control.done.set()
        writer.join()
        for config in (least, once):
            caught_up(config, timeout_s=300)
    finally:
        control.done.set()
        control.go.set()
        for process in processes.values():
            process.send_signal(signal.SIGTERM)
        assert [process.wait(60) for process in processes.values()] == [0, 0]
    least_messages, once_messages = consume(least.kafka.topic_prefix), consume(once.kafka.topic_prefix)
    replay = assert_replay_equals_source(least, db, messages=least_messages)
    checked = assert_in_order(replay)
    # read_committed (consume's), as the README tells exactly_once's readers to read
    exact = assert_replay_equals_source(once, db, messages=once_messages)
    assert assert_in_order(exact) == checked > 10_000
    assert exact.duplicates == [], f"{len(exact.duplicates)} changes twice, first {exact.duplicates[:3]}"
    # A read_uncommitted reader sees every record written: the committed ones and the aborted ones.
    aborted = row_records(consume(once.kafka.topic_prefix, "read_uncommitted")) - row_records(once_messages)
    with capsys.disabled():
        print(f"{checked} changes in order; at least once: {len(replay.duplicates)} duplicates dropped; "
              f"exactly once: none, {aborted} aborted records seen read_uncommitted")  # fmt: skip
    assert aborted > 0, "no Kafka transaction was aborted: the run did not test what it claims"
    # After a clean stop the mirror holds what Kafka committed last; `sluice position` shows it
    last = read_position(once.kafka.client_config(), topic)
    assert last is not None and last == checkpoint_stores(once).fast.get()  # type: ignore[union-attr]
    position_command(once, "show", None)
    assert f"{topic.topic} (the position of record): {last}" in capsys.readouterr().out
    position_command(once, "reset", None)  # a tombstone: the next start takes [source] start
    assert read_position(once.kafka.client_config(), topic) is None


class AbortedCommits:
    """The Kafka sink, whose commits the test has Kafka abort (the records written stay on the
    log, marked aborted, as after a coordinator's abort) until `aborts` runs out."""

    def __init__(self, inner: KafkaSink, aborts: list[int]) -> None:
        self.inner, self.aborts = inner, aborts

    def commit_transaction(self, topic: str, key: bytes, value: bytes) -> None:
        if self.aborts:
            self.aborts.pop()
            self.inner.abort_transaction()
            raise TransactionAbortedError("Kafka aborted the transaction (by the test)")
        self.inner.commit_transaction(topic, key, value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_transactions_kafka_aborts_are_redone_in_the_process_from_the_last_commit(tmp_path: Path) -> None:
    """[kafka] exactly_once: each abort starts the connector again from Kafka's committed
    position (what `sluice run` does); read_committed readers see each change once."""
    db = "aborts"
    fresh(db)
    config = config_for(f"abort{uuid.uuid4().hex[:6]}", db, tmp_path)
    config = replace(config, kafka=replace(config.kafka, exactly_once=True))
    Connector(config).run(blocking=False)  # the first start: its position committed
    workload(db, 200, seed=5, big_every=50)
    aborts, made = [1, 1], []

    def connector(metrics: Metrics | None) -> Connector:
        made.append(Connector(config, sink=cast(Sink, AbortedCommits(kafka_sink(config), aborts)), metrics=metrics))
        return made[-1]

    run_restarting(connector, threading.Event(), blocking=False)
    assert len(made) == 3 and aborts == []  # two aborted runs, then one that committed
    committed = consume(config.kafka.topic_prefix)
    replay = assert_replay_equals_source(config, db, messages=committed)
    assert replay.duplicates == []
    aborted = row_records(consume(config.kafka.topic_prefix, "read_uncommitted")) - row_records(committed)
    assert aborted >= 2  # each aborted run had written records: none of them is visible read_committed
    assert made[2].metrics is made[0].metrics
    assert made[0].metrics.registry.get_sample_value("sluice_kafka_transactions_total",
                                                     {"outcome": "aborted_by_kafka"}) == 2  # fmt: skip


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
