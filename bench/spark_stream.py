"""The mirror as a running job under OLTP load: commit-to-Delta latency, median and p99.

`sluice run` and `sluice spark mirror` (no --once, the default trigger) run as the README
starts them while `--writers` writers commit the OLTP mix (bench/oltp.py) at `--rate`
commits/s for `--seconds`. Every change sets `at` to the server's NOW(6). Afterwards each
version of the mirror's Delta table is read (time travel): a change is visible from the
first version that holds its (id, at), and its latency is that version's commit time minus
`at`. A change a later change to the same key replaced within one micro-batch never becomes
visible and is not counted. Run with `make bench`.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from delta.tables import DeltaTable

from bench.oltp import OltpMix
from bench.sequence import choose_server, fresh_table, write_config
from bench.spark import spark_jobs
from connector.config import SparkSection, load_config
from connector.runner import Connector
from spark.jobs import session
from tests.support.live import ROOT, connect, wait_until
from tests.support.pipelines import caught_up, sluice_run

DB = "sluice_bench_stream"
SENTINEL = 2_000_000_000  # an id the writers never reach: written last, its arrival ends the run


def write_spark_config(path: Path, tmp: str, name: str, profile: bool, conf: list[str]) -> None:
    """The connector's config file with a [spark] section on local[2]; `conf`: KEY=VALUE Spark settings."""
    write_config(path, name, 4900, DB, f"{tmp}/schemas")
    settings = ["spark.eventLog.enabled=true", f"spark.eventLog.dir=file://{tmp}/events",
                "spark.eventLog.compress=false"] if profile else []  # fmt: skip
    lines = "".join('"{}" = "{}"\n'.format(*setting.split("=", 1)) for setting in settings + conf)
    path.write_text(
        path.read_text()
        + f'[spark]\nmaster = "local[2]"\nlake_dir = "{tmp}/lake"\ncheckpoint_dir = "{tmp}/checkpoints"\n'
        + f'shuffle_partitions = 2\nivy_settings = "{ROOT / SparkSection().ivy_settings}"\n[spark.conf]\n' + lines
    )  # fmt: skip


def visible_after(spark: Any, table: str) -> list[float]:
    """Seconds from each writer's change (`at`) to the commit of the first version that showed it, sorted."""
    history = DeltaTable.forPath(spark, table).history().select("version", "timestamp").collect()
    seen: set[tuple[int, datetime]] = set()
    latencies = []
    for version, committed in sorted((r["version"], r["timestamp"]) for r in history):
        rows = spark.read.format("delta").option("versionAsOf", version).load(table)
        now = {(r["id"], r["at"]) for r in rows.filter(f"id BETWEEN 1 AND {SENTINEL - 1}").select("id", "at").collect()}
        latencies += [(committed - at).total_seconds() for _, at in now - seen]
        seen |= now
    return sorted(latencies)


def started(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--rate", type=float, default=1000.0, help="commits/s of all writers together")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting to try")
    parser.add_argument("--profile", action="store_true", help="the mirror's Spark jobs: seconds per batch, by kind")
    parser.add_argument("--tables", type=int, default=1, help="the writers' transactions spread over this many tables")
    args = choose_server(parser)
    os.environ["TZ"] = "UTC"
    time.tzset()
    with tempfile.TemporaryDirectory() as tmp:
        path, name = Path(tmp) / "sluice.toml", f"benchstream{uuid.uuid4().hex[:6]}"
        os.makedirs(os.path.join(tmp, "events"))
        write_spark_config(path, tmp, name, args.profile, args.conf)
        config = load_config(path)
        names = ("t",) if args.tables == 1 else tuple(f"t{i:03d}" for i in range(args.tables))
        fresh_table(DB, names)
        Connector(config).run(blocking=False)  # first start: capture and save the position
        sluice = str(ROOT / ".venv" / "bin" / "sluice")
        connector = sluice_run(path, streaming=True)
        mirror = started([sluice, "spark", "mirror", "--config", str(path)], Path(tmp) / "mirror.log")
        tables = [Path(tmp) / "lake" / "mirror" / DB / n for n in names]
        table = tables[-1]  # where the sentinel goes
        try:
            with connect().cursor() as cur:  # the mirror's tables appear
                for n in names:
                    cur.execute(f"INSERT INTO {DB}.{n} VALUES (0, 0, '', 0, NOW(6))")
            wait_until(lambda: all((t / "_delta_log").exists() for t in tables), 600, "the mirror's first batch",
                       every_s=1)  # fmt: skip
            load = OltpMix(connect, tuple(f"{DB}.{n}" for n in names), writers=args.writers, rate=args.rate)
            begun = time.monotonic()
            load.start()
            time.sleep(args.seconds)
            commits = load.stop()
            rate = commits / (time.monotonic() - begun)
            with connect().cursor() as cur:
                cur.execute(f"INSERT INTO {DB}.{names[-1]} VALUES ({SENTINEL}, 0, '', 0, NOW(6))")
            caught_up(config)
            spark = session(config, "bench")
            wait_until(lambda: spark.read.format("delta").load(str(table)).filter(f"id = {SENTINEL}").count() == 1,
                       1800, "the last change in the mirror", every_s=2)  # fmt: skip
        finally:
            for process in (mirror, connector):
                process.send_signal(signal.SIGTERM)
                process.wait(120)
        latencies = sorted(seconds for t in tables for seconds in visible_after(spark, str(t)))
        with connect().cursor() as cur:
            for n, t in zip(names, tables):
                cur.execute(f"SELECT COUNT(*) FROM {DB}.{n}")
                counted = cur.fetchone()
                assert counted is not None and spark.read.format("delta").load(str(t)).count() == counted[0]  # whole
        batches = (Path(tmp) / "mirror.log").read_text(errors="replace").count(": merged ")
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        print(f"{commits:,} commits by {args.writers} writers in {args.seconds:.0f} s ({rate:,.0f}/s, OLTP mix 5:3:2)"
              f" over {len(names)} table(s)")  # fmt: skip
        print(f"mirror (default trigger {SparkSection().trigger_s:g} s, {batches} merges, local[2]): "
              f"{len(latencies):,} changes made visible; commit -> Delta latency median "
              f"{statistics.median(latencies):.1f} s, p99 {p99:.1f} s, max {latencies[-1]:.1f} s")  # fmt: skip
        if args.profile:
            by_kind: dict[str, float] = {}
            for what, seconds in spark_jobs(os.path.join(tmp, "events"), "mirror"):
                by_kind[what[:90]] = by_kind.get(what[:90], 0.0) + seconds
            for what, seconds in sorted(by_kind.items(), key=lambda item: -item[1])[:15]:
                print(f"    {seconds / max(batches, 1):6.2f} s per batch  {what}")
        spark.stop()


if __name__ == "__main__":
    main()
