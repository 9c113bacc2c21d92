"""The Spark jobs in live tests: a lake configuration, the workload fed through a connector killed
once, and what the mirror and the changelog must then hold."""

from __future__ import annotations

import signal
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from connector.avro.reader import MessageReader
from connector.config import Config, SparkSection
from connector.runner import Connector
from tests.support.live import ROOT
from tests.support.pipelines import caught_up, config_for, sluice_run, workload, write_config
from tests.support.replay import Replay, comparable, consume, set_columns, source_rows


def lake_config(tmp: Path, db: str = "lake") -> tuple[Config, str]:
    name = f"lake{uuid.uuid4().hex[:6]}"
    config = config_for(name, db, tmp)
    ivy = str(ROOT / "deploy" / "spark" / "ivysettings.xml")
    spark = SparkSection(master="local[2]", lake_dir=str(tmp / "lake"), checkpoint_dir=str(tmp / "checkpoints"),
                         shuffle_partitions=2, ivy_settings=ivy)  # fmt: skip
    return replace(config, spark=spark), db


def feed_with_a_crash(config: Config, db: str, tmp: Path) -> None:
    """The workload (PK changes, deletes, ADD COLUMN mid-stream) through a connector killed once."""
    path = tmp / "sluice.toml"
    write_config(config, path)
    Connector(config).run(blocking=False)  # first start: schema captured, position saved
    process = sluice_run(path)
    workload(db, 40, seed=11, pause_s=0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    workload(db, 40, seed=12, pause_s=0.01, alter_at=10)
    process = sluice_run(path)
    try:
        caught_up(config)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def python_value(v: Any) -> Any:
    """A Spark value like the replay's: bytes, and timestamps in UTC (Spark gives naive ones, TZ=UTC)."""
    if isinstance(v, bytearray):
        return bytes(v)
    if isinstance(v, datetime):
        return v.replace(tzinfo=UTC)
    return v


def mirror_rows(spark: Any, path: str) -> list[dict[str, Any]]:
    frame = spark.read.format("delta").load(path)
    return [{k: python_value(v) for k, v in r.asDict().items() if not k.startswith("_sluice")} for r in frame.collect()]


def assert_mirror_equals_source(spark: Any, config: Config, db: str, reader: MessageReader) -> None:
    """Each mirrored table (the workload's keyed ones) holds what SELECT * on the source does."""
    for table in ("orders", "order_lines"):
        path = str(Path(config.spark.lake_dir) / "mirror" / db / table)
        sets = set_columns(reader, db, table)
        got = comparable(mirror_rows(spark, path), sets)
        want = comparable(source_rows(db, table, reader), sets)
        assert got == want, f"mirror of {db}.{table} differs from SELECT * ({len(got)} vs {len(want)} rows)"


WORKLOAD_LOGGED = ("orders", "order_lines", "events")  # the workload's tables the changelog test reads


def assert_changelog_has_each_change_once(
    spark: Any, config: Config, db: str, reader: MessageReader, tables: tuple[str, ...] = WORKLOAD_LOGGED
) -> Replay:
    """Each change in the row topics is in its table's changelog, once; returns the topics' replay."""
    replay = Replay(reader)
    messages = [m for m in consume(config.kafka.topic_prefix) if not m[0].endswith("._ddl")]
    replay.apply_all(messages)
    for table in tables:
        path = str(Path(config.spark.lake_dir) / "changelog" / db / table)
        entries = spark.read.format("delta").load(path).select("sluice_id", "source_row", "op").collect()
        keys = [(r["sluice_id"], r["source_row"], r["op"]) for r in entries]
        assert len(keys) == len(set(keys)), f"duplicate changelog entries in {table}"
        seen = [change for change in replay.seen if replay.table_of[change] == table]
        expected = {(changelog_id(f, p), row, op) for f, p, row, op in seen}
        assert set(keys) == expected, f"changelog of {table}: {len(keys)} entries, {len(expected)} changes"
    return replay


def changelog_id(file: str, pos: int) -> int:
    return int(file.rpartition(".")[2]) << 32 | pos


def write_spark_config(config: Config, path: Path) -> None:
    write_config(config, path)
    spark = config.spark
    path.write_text(
        path.read_text() + f'[spark]\nmaster = "local[2]"\nlake_dir = "{spark.lake_dir}"\n'
        f'checkpoint_dir = "{spark.checkpoint_dir}"\nshuffle_partitions = 2\nivy_settings = "{spark.ivy_settings}"\n'
    )
