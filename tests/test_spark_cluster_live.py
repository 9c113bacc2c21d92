"""The Spark jobs submitted to a Spark standalone cluster on loopback (deploy/spark/cluster.sh),
with the spark-submit command spark/README.md gives: the mirror equals the source, the
changelog has each change once, and both ran on the cluster's worker, not in local mode.

On one server: what the cluster adds is where the jobs run, the same for either source (the
jobs' results from each server's changes are tests/test_spark_live.py's, on both)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.config import SPARK_PACKAGES
from spark.jobs import session
from tests.support.live import ROOT, RUN
from tests.support.pipelines import fresh
from tests.support.spark import (
    assert_changelog_has_each_change_once,
    assert_mirror_equals_source,
    feed_with_a_crash,
    lake_config,
    write_spark_config,
)

pytestmark = pytest.mark.live

CLUSTER = ROOT / "deploy" / "spark" / "cluster.sh"
MASTER = "spark://127.0.0.1:7177"
MASTER_JSON = "http://127.0.0.1:8190/json/"
BIN = Path(sys.executable).parent  # the venv this test runs in: its pyspark is the cluster's and the driver's


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    env = {**os.environ, "SLUICE_VENV": str(BIN.parent)}
    subprocess.run(["bash", str(CLUSTER), "up"], env=env, check=True, timeout=300)
    yield
    subprocess.run(["bash", str(CLUSTER), "down"], env=env, check=True, timeout=120)


def spark_submit(job: str, config_path: Path) -> None:
    """spark/README.md's command for the local cluster, the checkout's code on PYTHONPATH (the
    venv's editable install may be another checkout's)."""
    command = [
        str(BIN / "spark-submit"), "--master", MASTER, "--packages", ",".join(SPARK_PACKAGES),
        "--conf", f"spark.jars.ivySettings={ROOT / 'deploy' / 'spark' / 'ivysettings.xml'}",
        str(ROOT / "spark" / "jobs.py"), job, str(config_path), "--once",
    ]  # fmt: skip
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": path}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, f"spark-submit {job} failed:\n{done.stderr[-3000:]}"


def completed_apps() -> list[dict[str, Any]]:
    with urllib.request.urlopen(MASTER_JSON, timeout=10) as answer:
        apps: list[dict[str, Any]] = json.load(answer)["completedapps"]
    return apps


@pytest.mark.servers("mariadb")
def test_mirror_and_changelog_submitted_to_a_standalone_cluster(
    tmp_path: Path, cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "UTC")  # mirror_rows reads Spark's naive timestamps as UTC
    time.tzset()
    config, db = lake_config(tmp_path, "lakecluster")
    fresh(db)
    feed_with_a_crash(config, db, tmp_path)
    config_path = tmp_path / "spark.toml"
    write_spark_config(config, config_path)  # [spark] master = "local[2]": spark-submit's --master must win

    for job in ("mirror", "changelog"):
        spark_submit(job, config_path)

    # Each job registered with the master, and the worker ran its executors (their directory
    # is made only for an application the master scheduled there): not local mode.
    names = {f"sluice-{job}-{config.name}" for job in ("mirror", "changelog")}
    ran = {app["name"]: app["id"] for app in completed_apps() if app["name"] in names}
    assert set(ran) == names, f"not run on {MASTER}: {sorted(names - set(ran))}"
    for name, app_id in ran.items():
        assert (RUN / "spark-cluster" / "work" / app_id).is_dir(), f"{name} ({app_id}) had no executor on the worker"

    spark = session(config, "test")  # in this process: local mode, to read the Delta tables
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    assert_mirror_equals_source(spark, config, db, reader)
    assert_changelog_has_each_change_once(spark, config, db, reader)
