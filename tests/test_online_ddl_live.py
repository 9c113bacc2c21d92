"""Online schema changes as big shops run them, on both servers (issue 36): pt-online-schema-
change (both) and gh-ost (MySQL; it does not run on MariaDB 10.11) add a column, change a type,
drop a column and reorder the columns of a table a writer keeps changing. Two connectors read
the same binlog: one whose include names only the table, one capturing the whole database.
Both are SIGKILLed in the middle of a copy and right after a cut-over. Afterwards, for
both: replay == SELECT *, the newest schema is the table's columns, no helper table reached any
topic, each cut-over reached the DDL topic as one ALTER of the table, and neither connector
ever exited by itself. The tooling: tests/support/onlineddl.py; the unit side: tests/test_online_ddl.py."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.config import AvroSection, Config
from connector.schema.onlineddl import helper_of
from tests.support import live, onlineddl
from tests.support.live import live_config
from tests.support.pipelines import caught_up, sluice_run, write_config
from tests.support.replay import Replay, comparable, consume, set_columns, source_rows

pytestmark = pytest.mark.live

DB, TABLE = "oscx", "t"
ALTERS = (
    "ADD COLUMN c INT NOT NULL DEFAULT 7",
    "MODIFY COLUMN v VARCHAR(128) NOT NULL",  # a type the copy converts: the table is read again
    "DROP COLUMN c",
    "MODIFY COLUMN v VARCHAR(128) NOT NULL AFTER id",  # a reorder
)


def _tools(server: live.LiveServer) -> list[onlineddl.Tool]:
    """gh-ost and pt-osc in turn where gh-ost runs; pt-osc alone elsewhere."""
    if server.name in onlineddl.GH_OST_SERVERS:
        return ["gh-ost", "pt-osc", "gh-ost", "pt-osc"]
    return ["pt-osc"] * len(ALTERS)


def _config(name: str, include: str, tmp: Path) -> tuple[Config, Path]:
    base = live_config([include], name=name, server_id=7000 + random.randrange(1000))
    config = replace(base, kafka=replace(base.kafka, topic_prefix=name, partitions=2),
                     avro=AvroSection(schemas_dir=str(tmp / name)))  # fmt: skip
    path = tmp / f"{name}.toml"
    write_config(config, path)
    return config, path


class Connectors:
    """`sluice run` processes of the configurations, each watched to never exit by itself."""

    def __init__(self, configs: list[tuple[Config, Path]]) -> None:
        self.configs = configs
        self.processes = [sluice_run(path, streaming=True) for _, path in configs]

    def kill_and_restart(self) -> None:
        self.alive()
        for i, process in enumerate(self.processes):
            process.send_signal(signal.SIGKILL)
            process.wait(30)
            self.processes[i] = sluice_run(self.configs[i][1], streaming=True)

    def alive(self) -> None:
        for (config, path), process in zip(self.configs, self.processes):
            log = path.with_suffix(".log").read_text(errors="replace")
            assert process.poll() is None, f"{config.name} exited by itself ({process.returncode}):\n{log[-3000:]}"

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


def _alter(tool: onlineddl.Tool, server: live.LiveServer, alter: str, during_copy: object = None) -> None:
    """One tool run, paused once in the middle of its copy (the callable runs there)."""
    with live.connect(DB).cursor() as cur:  # pt-osc sizes its chunks by the statistics a swapped-in table lacks
        cur.execute(f"ANALYZE TABLE {TABLE}")
        cur.fetchall()
    with onlineddl.running(tool, server, DB, TABLE, alter, pause_after_rows=300) as run:
        run.wait_paused()
        if callable(during_copy):
            during_copy()
        run.resume()


def _check(config: Config, server: live.LiveServer, cut_overs: int) -> None:
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    messages = consume(config.kafka.topic_prefix)
    topics = {topic for topic, *_ in messages}
    assert topics == {f"{config.name}.{DB}.{TABLE}", f"{config.name}.{DB}._ddl"}, topics
    ddl = [json.loads(value) if value[:1] == b"{" else reader.read(value)[1]
           for topic, _, _, _, value in messages if topic.endswith("._ddl")]  # fmt: skip
    assert not [d for d in ddl if d["table"] and helper_of(d["table"])], "a helper table's DDL was published"
    # Each cut-over once (a connector killed after one publishes it again: at least once, one id)
    told = {d["id"]: d for d in ddl if d["type"] == "ALTER" and d["table"] == TABLE and "cut-over of" in d["sql"]}
    assert len(told) == cut_overs, [d["sql"][:160] for d in ddl]
    replay = Replay(reader)
    replay.apply_all(messages)
    sets = set_columns(reader, DB, TABLE)
    got = comparable(replay.tables.get((DB, TABLE), {}), sets)
    want = comparable(source_rows(DB, TABLE, reader), sets)
    assert got == want, f"{config.name}: replay differs from SELECT * ({len(got)} vs {len(want)} rows)"
    newest = [f["name"] for f in reader.latest(DB, TABLE)["fields"][10]["type"][1]["items"]["fields"]]
    assert newest == onlineddl.table_columns(server, DB, TABLE)


def test_online_schema_changes_keep_every_topic_exact(tmp_path: Path, server: live.LiveServer) -> None:
    live.fresh_database(DB)
    rows = onlineddl.seed_table(server, DB, TABLE, 1200)
    name = f"osc{random.randrange(10**6):06d}"
    configs = [_config(name + "t", rf"{DB}\.{TABLE}", tmp_path), _config(name + "d", rf"{DB}\..*", tmp_path)]
    connectors = Connectors(configs)
    try:
        with onlineddl.Writer(server, DB, TABLE, rows, rate=25) as writer:
            for i, (tool, alter) in enumerate(zip(_tools(server), ALTERS)):
                # Both connectors killed and started again in the first run's copy ...
                _alter(tool, server, alter, connectors.kill_and_restart if i == 0 else None)
                if i == 1:  # ... and right after the second cut-over
                    connectors.kill_and_restart()
                connectors.alive()
            time.sleep(0.5)  # the writer goes on into the last table
            report = writer.stop()
        assert report.transactions > 20
        for config, _ in configs:
            caught_up(config)
        connectors.alive()
    finally:
        connectors.stop()
    assert onlineddl.table_columns(server, DB, TABLE) == ["id", "v", "k"]
    for config, _ in configs:
        _check(config, server, len(ALTERS))


def test_a_table_added_to_the_filter_is_read_while_the_others_stream(tmp_path: Path, server: live.LiveServer) -> None:
    """A restart whose include adds `b` reads it as a new table, in chunks, while `a` streams on:
    every row of b arrives (READ, then its changes), none twice, and a's changes go out between
    b's chunks (the stream is not held for the whole read)."""
    database = "oscadd"
    live.fresh_database(database)
    seeded = {name: onlineddl.seed_table(server, database, name, 1500) for name in ("a", "b")}
    name = f"add{random.randrange(10**6):06d}"
    config, path = _config(name, rf"{database}\.a", tmp_path)
    writers = [onlineddl.Writer(server, database, table, rows, rate=20, seed=i).start()
               for i, (table, rows) in enumerate(seeded.items())]  # fmt: skip
    try:
        process = sluice_run(path, streaming=True)
        time.sleep(1.0)
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        widened = replace(config, source=replace(config.source, include=[rf"{database}\.(a|b)"]))
        write_config(widened, path)
        path.write_text(path.read_text() + "[snapshot]\nchunk_size = 200\n")
        process = sluice_run(path, streaming=True)
        log = path.with_suffix(".log")
        live.wait_until(lambda: "snapshot of `oscadd`.`b` finished" in log.read_text(errors="replace"), 120,
                        "b's snapshot")  # fmt: skip
        time.sleep(0.5)
        for writer in writers:
            writer.stop()
        caught_up(widened)
        assert process.poll() is None
    finally:
        for writer in writers:
            writer.stop()
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    assert "captured since the last start, read as new tables while the others stream: oscadd.b" in log.read_text()
    reader = MessageReader(SchemaDirectory(widened.avro.schemas_dir))
    messages = consume(widened.kafka.topic_prefix)
    replay = Replay(reader)
    replay.apply_all(messages)
    assert replay.duplicates == []
    for table in ("a", "b"):
        sets = set_columns(reader, database, table)
        got = comparable(replay.tables.get((database, table), {}), sets)
        assert got == comparable(source_rows(database, table, reader), sets), f"{table}: replay differs from SELECT *"
    records = [reader.read(value)[1] for topic, _, _, _, value in messages if not topic.endswith("._ddl")]
    reads = [r for r in records if r["table"] == "b" and r["type"] == "READ"]
    keys = [r["data"][0]["id"] for r in reads]
    assert len(keys) == len(set(keys)) >= 1500 - 200  # each row read once (a few deleted before its chunk)
    # Chunks handed over at a turn share its position: the stream moved on between those
    chunks = sorted({(r["source"]["file"], r["source"]["pos"]) for r in reads})
    assert len(chunks) >= 2
    a_between = [r for r in records if r["table"] == "a" and chunks[0] < (r["source"]["file"], r["source"]["pos"])
                 < chunks[-1]]  # fmt: skip
    assert a_between, "a's changes waited for b's whole read"
