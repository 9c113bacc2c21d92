"""The Spark jobs beside their ceiling and the connector, for the same changes, in one run.

Workloads on a table of the local server, each streamed into Kafka by the connector (rows/s,
acknowledged, checkpoints on): an initial load of `--rows` inserts, then `--rounds` times
`--rows` more inserts with a tenth of the previous workload's rows updated and a tenth
deleted (1.2 x `--rows` changes, a sixth of them to rows the mirror holds). In one Spark
session on local[2] (each job warmed up first: an untimed run of its own on the initial load
and, for the mirror and changelog, on the first changes), for each workload in turn:

- ceiling: the batch read from Kafka and appended to a Delta table as it is (no decoding,
  no merge): what reading Kafka and writing Delta cost here;
- unmerged: the mirror without its MERGE (the batch read and framed, its writer schemas,
  each table's changes decoded and reduced to the newest per key, appended to a Delta table
  of their own): the cheapest write of what the mirror computes. What the mirror spends past
  it is its MERGE, and its ratio to the ceiling is about the best any way of writing the
  mirror's rows could reach;
- mirror: `mirror --once` (decode per writer schema, newest change per key; a new table is
  written, an existing one MERGEd into);
- changelog: `changelog --once`.

Each figure is rows/s from the job's start to its end (Spark's start-up excluded). The
figure that counts is the mirror's ratio to the ceiling for the workloads of changes, their
median (this machine's speed drifts between rounds). `--profile` prints each Spark job of
the mirror with its wall time (Spark's event log). Run with `make bench`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import AdminClient
from pyspark.sql import functions as F

from bench.sequence import choose_server, fresh_table, insert
from connector.avro.registry import SchemaDirectory
from connector.config import AvroSection, Config, SparkSection
from connector.runner import Connector
from spark.jobs import (
    MIRRORED,
    WriterSchemas,
    decode,
    fields_of,
    framed_once,
    mirror_row,
    newest_per_key,
    read_changes,
    row_names,
    run,
    session,
    writers_in,
)
from tests.support.live import KAFKA, ROOT, connect, live_config

DB = "sluice_bench_lake"

# Every run here is a query of its own in one JVM, and Spark keeps each query's Kafka consumers
# and the records they fetched last (a database of 100 tables: 300 of them, the whole batch)
# for 5 minutes after it ends: the runs of a round held 300,000 records and ran the driver's
# heap out. A job in production is one query whose consumers serve every batch. Let go of a
# finished run's after seconds, as a job's own would be when it exits.
RUNS_IN_ONE_JVM = {
    "spark.kafka.consumer.cache.timeout": "2s", "spark.kafka.consumer.cache.evictorThreadRunInterval": "1s",
    "spark.kafka.consumer.fetchedData.cache.timeout": "2s",
    "spark.kafka.consumer.fetchedData.cache.evictorThreadRunInterval": "1s",
}  # fmt: skip


def bench_config(tmp: str, conf: dict[str, str], key_range: int) -> Config:
    name = f"benchlake{uuid.uuid4().hex[:6]}"
    base = live_config([rf"{DB}\..*"], name=name, server_id=4700)
    return replace(
        base,
        kafka=replace(base.kafka, topic_prefix=name),
        avro=AvroSection(schemas_dir=os.path.join(tmp, "schemas")),
        spark=SparkSection(master="local[2]", lake_dir="", checkpoint_dir="", shuffle_partitions=2,
                           ivy_settings=str(ROOT / "deploy" / "spark" / "ivysettings.xml"), conf=conf,
                           key_range=key_range),
    )  # fmt: skip


def in_round(config: Config, tmp: str, label: str) -> Config:
    """The config of one job in one round: its own lake and checkpoints, so each starts from nothing."""
    spark = replace(config.spark, lake_dir=os.path.join(tmp, label, "lake"),
                    checkpoint_dir=os.path.join(tmp, label, "ckpt"))  # fmt: skip
    return replace(config, spark=spark)


def drain(spark: Any, config: Config, name: str, each: Any, statements: bool = False) -> None:
    """What the topics hold now, batch by batch through `each` (checkpoints under `name`)."""
    query = (
        read_changes(spark, config, statements).writeStream.foreachBatch(each)
        .option("checkpointLocation", os.path.join(config.spark.checkpoint_dir, name))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()


def ceiling(spark: Any, config: Config) -> None:
    """The topics' messages appended to one Delta table as they are: Kafka in, Delta out, nothing between."""
    path = os.path.join(config.spark.lake_dir, "raw")

    def append(batch: Any, _batch_id: int) -> None:
        batch.write.format("delta").mode("append").save(path)

    drain(spark, config, "raw", append)


def unmerged(spark: Any, config: Config) -> None:
    """The mirror up to its MERGE, each table's newest change per key appended instead."""
    schemas = WriterSchemas(SchemaDirectory(config.avro.schemas_dir))

    def append(framed: Any, _batch_id: int) -> None:
        writers = writers_in(framed, schemas).writers
        for (database, table), messages in decode(framed, schemas, writers, MIRRORED).items():
            rows = fields_of(messages, mirror_row(F.col("m"), row_names(schemas.directory, (database, table))))
            latest = newest_per_key(rows, schemas.directory.key_columns(database, table))
            latest.write.format("delta").mode("append").save(os.path.join(config.spark.lake_dir, database, table))

    drain(spark, config, "unmerged", framed_once(schemas, append), statements=True)


BASELINES = {"ceiling": ceiling, "unmerged": unmerged}  # timed beside the jobs, in the bench's own session


def one(spark: Any, config: Config, job: str) -> None:
    """A baseline run in the bench's session, or a job run as `sluice spark JOB --once` runs it."""
    baseline = BASELINES.get(job)
    if baseline:
        baseline(spark, config)
    else:
        run(config, job, once=True)


def timed(what: Any) -> float:
    started = time.perf_counter()
    what()
    return time.perf_counter() - started


def feed(config: Config, rows: int, number: int) -> float:
    """Workload `number` into the topics; the connector's seconds to publish it, acknowledged.
    0: rows 1..`rows` inserted. n > 0: the next `rows` inserted, and of workload n-1's rows a
    tenth updated and a tenth deleted."""
    with connect().cursor() as cur:
        insert(cur, DB, number * rows + 1, (number + 1) * rows, at=f"'2024-01-0{1 + number % 9} 03:04:05.678901'")
        if number:
            earlier = f"id BETWEEN {(number - 1) * rows + 1} AND {number * rows}"
            cur.execute(f"UPDATE {DB}.t SET k = k + 1 WHERE {earlier} AND id % 10 = 0")
            cur.execute(f"DELETE FROM {DB}.t WHERE {earlier} AND id % 10 = 5")
    return timed(lambda: Connector(config).run(blocking=False))


def spark_jobs(events: str, app: str = "") -> list[tuple[str, float]]:
    """(description, seconds) of every SQL execution in the newest event log under `events`
    (of an application whose name holds `app`)."""
    logs = [log for log in Path(events).glob("*/events_*") if app in log.read_text()[:20_000]]
    log = max(logs, key=os.path.getmtime)
    started: dict[int, tuple[int, str]] = {}
    out = []
    for line in log.read_text().splitlines():
        event = json.loads(line)
        kind = event["Event"].rpartition(".")[2]
        if kind == "SparkListenerSQLExecutionStart":
            said = [line for line in event["description"].splitlines() if " = " not in line]
            plan = event.get("physicalPlanDescription", "").splitlines()[1:2]
            started[event["executionId"]] = (event["time"], " ".join(said + plan))
        elif kind == "SparkListenerSQLExecutionEnd" and event["executionId"] in started:
            at, what = started.pop(event["executionId"])
            out.append((what, (event["time"] - at) / 1000))
    return out


def merge_metrics(spark: Any, path: str) -> str:
    """What the mirror's last commit wrote and rewrote (Delta's operation metrics)."""
    last = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]
    metrics = last["operationMetrics"] or {}
    shown = ("numTargetFilesRemoved", "numTargetFilesAdded", "numTargetRowsCopied", "numTargetRowsUpdated",
             "numTargetRowsDeleted", "numTargetRowsInserted", "numOutputRows")  # fmt: skip
    return f"{last['operation']}: " + ", ".join(f"{k} {metrics[k]}" for k in shown if k in metrics)


def engine(config: Config, driver_rows: int) -> Config:
    return replace(config, spark=replace(config.spark, driver_rows=driver_rows))


def profile(events: str, mark: int, tables: int) -> None:
    """The kinds of Spark job since the `mark`-th in the event log, the costliest first."""
    kinds: dict[str, list[float]] = {}
    for what, seconds in spark_jobs(events)[mark:]:
        kinds.setdefault(" ".join(what.split()[:3])[:60], []).append(seconds)
    for kind, times in sorted(kinds.items(), key=lambda item: -sum(item[1]))[:8]:
        each = sum(times) / tables * 1000
        print(f"    {sum(times):6.2f} s in {len(times):4d} jobs ({each:5.0f} ms a table)  {kind}")


def tables_round(spark: Any, base: Config, tmp: str, n: int, total: int, events: str,
                 engines: list[int], repeat: int = 1) -> dict[str, float]:  # fmt: skip
    """The tables axis at `n` tables: `total` changes spread over them, per job and per
    `[spark] driver_rows` in `engines` the median seconds of `repeat` runs that apply them, after
    one untimed (its tables made by a run before, untimed, each its own lake, copied for each
    run); with an event log, each kind of Spark job's seconds in the first timed run."""
    db, per = f"{DB}_{n}", total // n
    names = tuple(f"t{i:03d}" for i in range(n))
    fresh_table(db, names)
    name = f"benchtables{uuid.uuid4().hex[:6]}"
    config = replace(base, name=name, kafka=replace(base.kafka, topic_prefix=name),
                     source=replace(base.source, include=[rf"{db}\..*"]),
                     avro=AvroSection(schemas_dir=os.path.join(tmp, name, "schemas")))  # fmt: skip
    Connector(config).run(blocking=False)  # first start: capture and save the position
    with connect().cursor() as cur:
        for table in names:
            insert(cur, db, 1, per, table=table)
    Connector(config).run(blocking=False)
    runs = [(job, rows) for rows in engines for job in ("mirror", "changelog")]
    for job, rows in runs:
        run(engine(in_round(config, tmp, f"{name}-{job}-{rows}"), rows), job, once=True)
    with connect().cursor() as cur:  # per table: a tenth of its rows updated, a tenth deleted, the rest new
        for table in names:
            insert(cur, db, per + 1, per + per - 2 * (per // 10), table=table)
            cur.execute(f"UPDATE {db}.{table} SET k = k + 1 WHERE id <= {per} AND id % 10 = 0")
            cur.execute(f"DELETE FROM {db}.{table} WHERE id <= {per} AND id % 10 = 5")
    Connector(config).run(blocking=False)
    for job, rows in runs:  # each run from a copy of the same lake and checkpoints
        label = f"{name}-{job}-{rows}"
        for copy in range(1, repeat + 1):
            shutil.copytree(os.path.join(tmp, label), os.path.join(tmp, f"{label}-{copy}"))
    figures = {}
    for job, rows in runs:
        label, times = f"{name}-{job}-{rows}", []
        # The first run on these changes is not timed: of three runs of one table's 100,000
        # changes, the first took 7.2 s, the next 5.6 and 4.7 (the JVM's code for a batch of
        # that size, warmed as a running job's is).
        run(engine(in_round(config, tmp, label), rows), job, once=True)
        for copy in range(1, repeat + 1):
            mark = len(spark_jobs(events)) if events else 0
            cfg = engine(in_round(config, tmp, f"{label}-{copy}"), rows)
            times.append(timed(lambda cfg=cfg, job=job: run(cfg, job, once=True)))
            if events and copy == 1:
                profile(events, mark, n)
        figures[f"{job} driver_rows={rows}"] = statistics.median(times)
        if repeat > 1:
            print(f"  {n} tables, {job} driver_rows={rows}: " + ", ".join(f"{t:.1f}" for t in times) + " s")
    for rows in engines:
        lake = os.path.join(tmp, f"{name}-mirror-{rows}", "lake", "mirror", db)  # the untimed run's
        for table in (names[0], names[-1]):
            mirrored = spark.read.format("delta").load(os.path.join(lake, table))
            assert mirrored.count() == per + per - 2 * (per // 10) - per // 10, mirrored.count()  # the mirror is whole
    drop_topics(name)
    return figures


def drop_topics(prefix: str) -> None:
    """The topics a round made: a round of 300 tables makes 900 partitions, and the project's
    broker (512 MiB of heap) ran out of it after a day of rounds (13,500 partitions)."""
    admin = AdminClient({"bootstrap.servers": KAFKA})
    topics = [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix + ".") or t == prefix]
    for future in admin.delete_topics(topics).values() if topics else ():
        future.result(60)


def tables_axis(spark: Any, config: Config, tmp: str, counts: list[int], total: int, events: str,
                engines: list[int], repeat: int) -> None:  # fmt: skip
    """`--tables`: the same number of changes over 1, 10, 100, ... tables, a few per table as
    under OLTP. What grows with the tables is a batch's cost per table. Each line's ratio is
    to the first count's run of the same job and engine."""
    # The JVM's first MERGE of the session is slower (JIT, class loading): one small round first,
    # untimed, or the first count's first job pays it (7.6 s against 4.7 s for the same run).
    tables_round(spark, config, tmp, 1, 2_000, "", engines)
    first: dict[str, float] = {}
    for n in counts:
        figures = tables_round(spark, config, tmp, n, total, events, engines, repeat)
        first = first or figures
        for job, s in figures.items():
            print(f"{n} tables x {total // n:,} changes, {job}: {s:.1f} s ({total / s:,.0f} rows/s, "
                  f"{s / first[job]:.2f}x {counts[0]} table(s))", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3, help="workloads of changes after the initial load")
    parser.add_argument("--profile", action="store_true", help="each Spark job of the mirror with its seconds")
    parser.add_argument("--key-range", type=int, default=0, help="[spark] key_range of the mirror (0: off)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting to try")
    parser.add_argument("--tables", default="", metavar="N,N,...",
                        help="the tables axis instead: --changes spread over N tables, for each N")
    parser.add_argument("--changes", type=int, default=100_000, help="with --tables: the changes of a batch")
    parser.add_argument("--driver-rows", default="0,20000", metavar="N,N,...",
                        help="with --tables: each [spark] driver_rows to time (0: every table by Spark)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="with --tables: timed runs of each job on the same changes (their median counts)")
    parser.add_argument("--master", default="local[2]", help="Spark's master (the cluster: deploy/spark/cluster.sh)")
    args = choose_server(parser)
    os.environ["TZ"] = "UTC"
    time.tzset()
    with tempfile.TemporaryDirectory() as tmp:
        events = os.path.join(tmp, "events")
        os.makedirs(events)
        conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": "file://" + events,
                "spark.eventLog.compress": "false"} if args.profile else {}  # fmt: skip
        conf.update(RUNS_IN_ONE_JVM)
        conf.update(setting.split("=", 1) for setting in args.conf)
        config = bench_config(tmp, conf, args.key_range)
        config = replace(config, spark=replace(config.spark, master=args.master))
        if args.tables:
            spark = session(in_round(config, tmp, "warm-up"), "bench")
            tables_axis(spark, config, tmp, [int(n) for n in args.tables.split(",")], args.changes,
                        events if args.profile else "", [int(n) for n in args.driver_rows.split(",")],
                        args.repeat)  # fmt: skip
            spark.stop()
            return
        fresh_table(DB)
        Connector(config).run(blocking=False)  # first start: capture and save the position
        spark = session(in_round(config, tmp, "warm-up"), "bench")  # started before timing: the jobs reuse it
        rows, ratios, unmerged_ratios, rates = args.rows, [], [], []
        mirrored = os.path.join(tmp, "mirror", "lake", "mirror", DB, "t")  # the timed mirror's table
        for number in range(args.rounds + 1):
            label, changes = ("initial load", rows) if number == 0 else (f"changes {number}", rows * 6 // 5)
            connector_s = feed(config, rows, number)
            print(f"{label}: {changes:,} row changes; connector (binlog -> Kafka, acked) "
                  f"{changes / connector_s:,.0f} rows/s ({connector_s:.1f} s)")  # fmt: skip
            if number == 0:
                for baseline in BASELINES.values():  # the JVM's first jobs: not timed
                    baseline(spark, in_round(config, tmp, "warm-up"))
            if number <= 1:
                # Each job's first run of a kind (creating its table, its first MERGE) is the JVM's
                # first: JIT and class loading, not timed, as for the ceiling. Own lakes: the timed
                # jobs' tables are as they would be without it.
                for job in ("mirror", "changelog"):
                    run(in_round(config, tmp, f"warm-up-{job}"), job, once=True)
            figures = {}
            for job in ("ceiling", "unmerged", "mirror", "changelog"):
                cfg = in_round(config, tmp, job)
                mark = len(spark_jobs(events)) if args.profile else 0
                figures[job] = timed(lambda cfg=cfg, job=job: one(spark, cfg, job))
                if args.profile and job == "mirror":
                    for what, seconds in spark_jobs(events)[mark:]:
                        print(f"    {seconds:6.2f} s  {what[:100]}")
                    print(f"    {merge_metrics(spark, mirrored)}")
            table = spark.read.format("delta").load(mirrored)
            assert table.count() == rows + number * (rows - rows // 10), table.count()  # the mirror is whole
            line = ", ".join(f"{job} {changes / s:,.0f} rows/s ({s:.1f} s)" for job, s in figures.items())
            print(f"  local[2]: {line}; mirror/ceiling {figures['ceiling'] / figures['mirror']:.2f}, "
                  f"unmerged/ceiling {figures['ceiling'] / figures['unmerged']:.2f}")  # fmt: skip
            if number:
                ratios.append(figures["ceiling"] / figures["mirror"])
                unmerged_ratios.append(figures["ceiling"] / figures["unmerged"])
                rates.append(changes / figures["mirror"])
        print(f"changes into the mirror, median of {args.rounds} rounds: {statistics.median(rates):,.0f} rows/s, "
              f"{statistics.median(ratios):.2f} of the ceiling; unmerged "
              f"{statistics.median(unmerged_ratios):.2f}")  # fmt: skip
        spark.stop()  # before the temporary folder goes: the event log is written there


if __name__ == "__main__":
    main()
