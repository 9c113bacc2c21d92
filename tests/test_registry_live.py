"""Registry framing against a real Confluent-compatible schema registry, not confluent-kafka's
`mock://`: the Apicurio Registry deploy/services.sh runs (its Confluent API, /apis/ccompat/v7;
global level BACKWARD, Confluent's default). `sluice run` registers as users run it, and the
messages are read back as a consumer would: confluent-kafka's AvroDeserializer, its schemas
from the registry alone (not Sluice's `schemas/`), against the rows SELECT shows."""

from __future__ import annotations

import random
import signal
import struct
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    topic_record_subject_name_strategy,
    topic_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.checkpoint import checkpoint_stores
from connector.config import Config, load_config
from tests.support.live import REGISTRY_URL, connect, fresh_database, position_now, services_toml, source_toml
from tests.support.pipelines import caught_up, sluice_run
from tests.support.replay import consume

pytestmark = pytest.mark.live

Row = dict[str, Any]
Tables = dict[tuple[str, str], dict[Any, Row]]  # (database, table): rows by id
STRATEGIES: dict[str, Callable[..., Any]] = {
    "topic": topic_subject_name_strategy,
    "topic_record": topic_record_subject_name_strategy,
}


def registry() -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": REGISTRY_URL})


def write_config(path: Path, name: str, db: str, strategy: str, routes: str = "") -> Config:
    """A config file as a user writes one: Confluent framing through the registry."""
    path.write_text(
        f'name = "{name}"\n' + source_toml(7000 + random.randrange(1000)) + f"include = ['{db}\\..*']\n"
        + services_toml(name) + "flush_interval_s = 0.5\n" + routes
        + f'[avro]\nschemas_dir = "{path.parent / "schemas"}"\nschema_registry_url = "{REGISTRY_URL}"\n'
        f'subject_name_strategy = "{strategy}"\n'
    )  # fmt: skip
    return load_config(path)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0


def read_back(prefix: str, strategy: str, newest: bool = True) -> tuple[Tables, list[Any]]:
    """Every message under `prefix` through AvroDeserializer: (the tables replayed by key, the DDL
    records). With `newest`, each value is read in its subject's newest version, from the registry
    (use.latest.version), as a consumer reading old and new messages alike does."""
    conf = {"use.latest.version": newest, "subject.name.strategy": STRATEGIES[strategy]}
    values, keys = AvroDeserializer(registry(), conf=conf), AvroDeserializer(registry(), conf=conf)
    tables: Tables = {}
    ddl: list[Any] = []
    for topic, _, _, key, value in consume(prefix):
        record = values(value, SerializationContext(topic, MessageField.VALUE))
        assert isinstance(record, dict)
        if record["isDdl"]:
            ddl.append(record)
            continue
        row = record["data"][0]
        assert key is not None and keys(key, SerializationContext(topic, MessageField.KEY)) == {"id": row["id"]}
        state = tables.setdefault((record["database"], record["table"]), {})
        if record["type"] == "DELETE":
            state.pop(row["id"], None)
        else:
            state[row["id"]] = row
    return tables, ddl


def selected(db: str, table: str) -> dict[Any, Row]:
    with connect(db).cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        names = [d[0] for d in cur.description]
        return {row[0]: dict(zip(names, row)) for row in cur.fetchall()}


def schema_ids(prefix: str, topic: str) -> set[int]:
    """The registry ids the values on `topic` carry (Confluent framing: 00, then the id)."""
    return {struct.unpack(">I", value[1:5])[0] for t, _, _, _, value in consume(prefix) if t == topic}


def versions(subject: str) -> dict[int, int]:
    """A subject's versions and the schema id of each."""
    client = registry()
    return {v: int(client.get_version(subject, v).schema_id or 0) for v in client.get_versions(subject)}


def execute(db: str, *statements: str) -> None:
    with connect(db).cursor() as cur:
        for statement in statements:
            cur.execute(statement)


ITEMS = "CREATE TABLE {db}.items (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, qty INT NOT NULL)"


def items_workload(db: str, table: str, first: int) -> None:
    """Rows `first`..`first`+29: inserts, an update of some, a delete of others."""
    rows = ", ".join(f"({i}, 'n{i}', {i % 7})" for i in range(first, first + 30))
    execute(
        db, f"INSERT INTO `{table}` (id, name, qty) VALUES {rows}",
        f"UPDATE `{table}` SET qty = qty + 100 WHERE id % 3 = 0 AND id >= {first}",
        f"DELETE FROM `{table}` WHERE id % 5 = 0 AND id >= {first}",
    )  # fmt: skip


def test_sluice_run_through_a_real_registry_with_an_added_column(tmp_path: Path) -> None:
    """Two schema versions of a table (ADD COLUMN ... DEFAULT), registered by `sluice run` under
    the topic strategy; a consumer reading every message in the newest version gets SELECT."""
    name, db = f"regt{uuid.uuid4().hex[:6]}", "regtopic"
    fresh_database(db, ITEMS)
    config = write_config(tmp_path / "sluice.toml", name, db, "topic")
    process = sluice_run(tmp_path / "sluice.toml", streaming=True)
    try:
        items_workload(db, "items", 1)
        execute(db, "ALTER TABLE items ADD COLUMN note VARCHAR(20) NOT NULL DEFAULT 'none'")
        items_workload(db, "items", 31)
        execute(db, "UPDATE items SET note = CONCAT('n', id) WHERE id % 4 = 0")
        caught_up(config)
    finally:
        stop(process)
    topic = f"{name}.{db}.items"
    value_versions = versions(f"{topic}-value")
    assert sorted(value_versions) == [1, 2]  # the ADD COLUMN: BACKWARD compatible, so registered
    assert sorted(versions(f"{topic}-key")) == [1]
    assert schema_ids(name, topic) == set(value_versions.values())  # messages of both versions
    tables, ddl = read_back(name, "topic")
    want = selected(db, "items")
    assert len(want) == 48 and tables[(db, "items")] == want  # rows of v1 have the DEFAULT, as SELECT
    assert any("ADD COLUMN note" in record["sql"] for record in ddl)


ROUTED = (
    "CREATE TABLE {db}.alpha (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, qty INT NOT NULL)",
    "CREATE TABLE {db}.beta (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, qty INT NOT NULL, price DECIMAL(8,2))",
)


def test_a_routed_topic_under_the_topic_record_strategy_across_restarts(tmp_path: Path) -> None:
    """Two tables routed into one topic, each under its own `{topic}-{record}` subject (under the
    topic strategy the second table's schema would be checked against the first's): registered
    again by a restarted `sluice run` without a refusal, read back by AvroDeserializer."""
    name, db = f"regr{uuid.uuid4().hex[:6]}", "regroute"
    fresh_database(db, *ROUTED)
    topic = f"{name}.{db}.merged"
    route = f"[[kafka.routes]]\npattern = '{db}\\.(alpha|beta)'\ntopic = \"{topic}\"\n"
    path = tmp_path / "sluice.toml"
    config = write_config(path, name, db, "topic_record", route)
    for run in range(3):
        process = sluice_run(path, streaming=True)
        try:
            items_workload(db, "alpha", 1 + 30 * run)
            items_workload(db, "beta", 1 + 30 * run)
            execute(db, f"UPDATE beta SET price = id * 1.5 WHERE id > {30 * run}")
            if run == 1:  # a second version of one table, between restarts
                execute(db, "ALTER TABLE alpha ADD COLUMN tag VARCHAR(10) NULL")
                execute(db, "UPDATE alpha SET tag = 'late' WHERE id % 2 = 0")
            caught_up(config)
        finally:
            stop(process)  # exit status 0: nothing was refused
    log = path.with_suffix(".log").read_text()
    # "HTTP 409", how a refusal is logged: a bare "409" also matched a binlog position (CI, mysql-bin.000012:13240959).
    assert log.count("streaming from") == 3 and "RegistryError" not in log and "HTTP 409" not in log
    subjects = {s for s in registry().get_subjects() if s.startswith(topic)}
    record = f"{topic}-sluice.{db}"
    assert subjects == {f"{record}.alpha", f"{record}.beta", f"{record}.alpha_key", f"{record}.beta_key"}
    assert sorted(versions(f"{record}.alpha")) == [1, 2] and sorted(versions(f"{record}.beta")) == [1]
    tables, _ = read_back(name, "topic_record")
    assert set(tables) == {(db, "alpha"), (db, "beta")}
    for table in ("alpha", "beta"):
        assert tables[(db, table)] == selected(db, table), table


def test_a_compatibility_refusal_stops_with_one_line_and_loses_nothing(tmp_path: Path) -> None:
    """The subject at FULL, and an ADD COLUMN without a DEFAULT (old rows cannot be read with the
    new version): the registry refuses it (409), `sluice run` stops with one line naming the
    subject and the registry's reason, no traceback, its position before the refused rows; once
    the level is changed to one the version meets, the next run sends every row."""
    name, db = f"regc{uuid.uuid4().hex[:6]}", "regrefuse"
    fresh_database(db, ITEMS)
    path = tmp_path / "sluice.toml"
    config = write_config(path, name, db, "topic")
    topic = f"{name}.{db}.items"
    subject = f"{topic}-value"
    process = sluice_run(path, streaming=True)
    try:
        items_workload(db, "items", 1)
        caught_up(config)
        registry().set_compatibility(subject, "FULL")
        execute(db, "ALTER TABLE items ADD COLUMN extra INT NOT NULL")
        after_alter = position_now()
        rows = ", ".join(f"({i}, 'n{i}', {i % 7}, {i * 10})" for i in range(31, 41))
        execute(
            db, "UPDATE items SET extra = id * 10",  # every row's newest message is of version 2
            f"INSERT INTO items (id, name, qty, extra) VALUES {rows}",
        )  # fmt: skip
        status = process.wait(120)
    finally:
        if process.poll() is None:
            process.kill()
    assert status == 1
    log = path.with_suffix(".log").read_text()
    assert "Traceback" not in log
    last = log.strip().splitlines()[-1]
    assert last.startswith(
        f"sluice: RegistryError: schema registry {REGISTRY_URL}: value schema of {db}.items version 2 "
        f"under subject '{subject}': HTTP 409: "
    ), last
    assert "HTTP 409" in last and "ncompatible" in last, last
    stores = checkpoint_stores(config)
    saved = [store.get() for store in (stores.fast, stores.durable) if store is not None]
    assert saved and all(p is not None and p.sort_key() <= after_alter.sort_key() for p in saved), saved
    assert sorted(versions(subject)) == [1]

    # The operator's way out: a level the new version meets (old readers skip the new field).
    # Not NONE: Apicurio takes a subject's NONE as "no rule of its own", so its global BACKWARD holds.
    registry().set_compatibility(subject, "FORWARD")
    process = sluice_run(path, streaming=True)
    try:
        caught_up(config)
    finally:
        stop(process)
    assert sorted(versions(subject)) == [1, 2]
    tables, _ = read_back(name, "topic", newest=False)  # each message in its writer's version
    want = selected(db, "items")
    assert len(want) == 34 and all(row["extra"] == row["id"] * 10 for row in want.values())
    assert tables[(db, "items")] == want
