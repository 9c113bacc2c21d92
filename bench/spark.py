"""The mirror job's rate beside the connector's, for the same workload, in one run.

Writes `--rows` inserts (plus a tenth updated and a tenth deleted) to a table on the local
MariaDB, streams them into Kafka with the connector (rows/s, acknowledged, checkpoints on),
then runs `mirror --once` on local[2] over those topics (rows/s applied to Delta, Spark's
start-up excluded). Run with `make bench`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sequence import choose_server, fresh_table, insert
from connector.config import AvroSection, SparkSection
from connector.runner import Connector
from spark.jobs import run, session
from tests.live import ROOT, connect, live_config

DB = "sluice_bench_lake"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    args = choose_server(parser)
    os.environ["TZ"] = "UTC"
    time.tzset()
    with tempfile.TemporaryDirectory() as tmp:
        name = f"benchlake{uuid.uuid4().hex[:6]}"
        base = live_config([rf"{DB}\..*"], name=name, server_id=4700)
        config = replace(
            base,
            kafka=replace(base.kafka, topic_prefix=name),
            avro=AvroSection(schemas_dir=os.path.join(tmp, "schemas")),
            spark=SparkSection(master="local[2]", lake_dir=os.path.join(tmp, "lake"),
                               checkpoint_dir=os.path.join(tmp, "ckpt"), shuffle_partitions=2,
                               ivy_settings=str(ROOT / "deploy" / "spark" / "ivysettings.xml")),
        )  # fmt: skip
        fresh_table(DB)
        Connector(config).run(blocking=False)  # first start: capture and save the position
        conn = connect()
        with conn.cursor() as cur:
            insert(cur, DB, 1, args.rows, at="'2024-01-02 03:04:05.678901'")
            cur.execute(f"UPDATE {DB}.t SET k = k + 1 WHERE id % 10 = 0")
            cur.execute(f"DELETE FROM {DB}.t WHERE id % 10 = 5")
        changes = args.rows + args.rows // 5
        connector = Connector(config)
        started = time.perf_counter()
        connector.run(blocking=False)
        connector_s = time.perf_counter() - started
        spark = session(config, "bench")  # started before timing: the job reuses it
        started = time.perf_counter()
        run(config, "mirror", once=True)
        mirror_s = time.perf_counter() - started
        mirrored = spark.read.format("delta").load(os.path.join(tmp, "lake", "mirror", DB, "t")).count()
        assert mirrored == args.rows - args.rows // 10, mirrored
        print(f"{changes:,} row changes")
        print(f"connector (binlog -> Kafka, acked): {changes / connector_s:10,.0f} rows/s ({connector_s:.1f} s)")
        print(
            f"mirror --once on local[2] (Kafka -> Delta MERGE): {changes / mirror_s:10,.0f} rows/s ({mirror_s:.1f} s)"
        )


if __name__ == "__main__":
    main()
