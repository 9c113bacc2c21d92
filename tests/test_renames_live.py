"""Renamed columns end to end: rows written before RENAME COLUMN, between, and after CHANGE COLUMN,
read back with the table's newest schema (as schemas/README.md tells readers to), equal SELECT."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.config import Config
from connector.runner import Connector
from tests.support.live import ROOT, connect, fresh_database
from tests.support.pipelines import assert_replay_equals_source, config_for, write_config
from tests.support.renames import PHASE_ROWS, RENAMED_TABLE, RENAMES, names_on_server, write_phase
from tests.support.replay import consume

pytestmark = pytest.mark.live


def renamed_workload(db: str) -> None:
    write_phase(db, 0)
    for phase, statement in enumerate(RENAMES, 1):
        with connect(db).cursor() as cur:
            cur.execute(statement)
        write_phase(db, phase)


def run_renames(tmp_path: Path, db: str, partitions: int = 1, **avro: Any) -> tuple[Config, Connector]:
    """The workload through the connector (one partition unless asked)."""
    config = config_for(f"ren{uuid.uuid4().hex[:6]}", db, tmp_path)
    config = replace(config, avro=replace(config.avro, **avro), kafka=replace(config.kafka, partitions=partitions))
    fresh_database(db, RENAMED_TABLE)
    Connector(config).run(blocking=False)  # first start: the table captured before any row
    renamed_workload(db)
    connector = Connector(config)
    connector.run(blocking=False)  # to the end of the binlog
    return config, connector


def assert_newest_reads_old_names(config: Config, db: str, reader: MessageReader) -> None:
    """Every message of the table read with its newest version: the renamed columns hold what
    SELECT shows, whichever version wrote the message; keys too, with the newest key schema."""
    server = names_on_server(db)
    assert len(server) == PHASE_ROWS * 3
    newest = reader.latest(db, "people")
    assert newest["sluice.version"] == 3
    newest_key = json.loads((Path(config.avro.schemas_dir) / db / "people" / "v3.key.avsc").read_text())
    written: Counter[int] = Counter()
    topic = f"{config.kafka.topic_prefix}.{db}.people"
    for _, _, _, key, value in (m for m in consume(config.kafka.topic_prefix) if m[0] == topic):
        written[reader.writer_schema(value)["sluice.version"]] += 1
        schema, record = reader.read_newest(value)
        assert schema == newest
        images = record["data"] + (record["old"] or [])
        assert [image["display"] for image in images] == [server[image["pid"]] for image in images]
        assert key is not None and reader.read(key, newest_key)[1] == {"pid": record["data"][0]["pid"]}
    assert sorted(written) == [1, 2, 3]  # before RENAME COLUMN, between, after CHANGE COLUMN
    assert written[1] >= PHASE_ROWS and written[2] >= PHASE_ROWS and written[3] >= PHASE_ROWS


def test_rows_written_before_renames_read_with_the_newest_schema(tmp_path: Path) -> None:
    db = "renames"
    config, _ = run_renames(tmp_path, db)
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    assert_newest_reads_old_names(config, db, reader)
    assert_replay_equals_source(config, db, ("people",))
    index = json.loads((Path(config.avro.schemas_dir) / "index.json").read_text())
    assert [e["renamed"] for e in index["tables"][f"{db}.people"]] == [
        {}, {"full_name": "name"}, {"display": "full_name", "pid": "id"}
    ]  # fmt: skip
    fields = {f["name"]: f for f in reader.latest(db, "people")["fields"][10]["type"][1]["items"]["fields"]}
    assert fields["display"]["aliases"] == ["full_name", "name"] and fields["pid"]["aliases"] == ["id"]

    # `sluice consume` prints each value in the newest version.
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    printed = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "sluice"), "consume", "--config", str(path), "--idle-s", "5"],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout.splitlines()  # fmt: skip
    server = names_on_server(db)
    lines = [json.loads(line) for line in printed]
    rows = [line for line in lines if line["topic"] == f"{config.kafka.topic_prefix}.{db}.people"]
    assert len(rows) >= PHASE_ROWS * 3 and {line["version"] for line in rows} == {3}
    for line in rows:
        for image in line["value"]["data"] + (line["value"]["old"] or []):
            assert image["display"] == server[image["pid"]], line


def test_renames_with_registry_framing(tmp_path: Path) -> None:
    db = "renamesreg"
    config, connector = run_renames(tmp_path, db, schema_registry_url=f"mock://renames-{uuid.uuid4().hex[:6]}")
    registry = connector.encoder.framing.client  # type: ignore[attr-defined]  # the in-process mock registry
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir), registry)
    assert_newest_reads_old_names(config, db, reader)


def test_a_renamed_key_column_keeps_each_key_in_its_partition(tmp_path: Path) -> None:
    db = "renameskey"
    config, _ = run_renames(tmp_path, db, partitions=3)
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    partitions: dict[int, set[int]] = {}
    topic = f"{config.kafka.topic_prefix}.{db}.people"
    for _, partition, _, _, value in (m for m in consume(config.kafka.topic_prefix) if m[0] == topic):
        partitions.setdefault(reader.read_newest(value)[1]["data"][0]["pid"], set()).add(partition)
    assert len(partitions) == PHASE_ROWS * 3
    moved = sorted(pid for pid, found in partitions.items() if len(found) > 1)
    assert moved == [], f"{len(moved)} keys have messages in two partitions: their order is lost"
