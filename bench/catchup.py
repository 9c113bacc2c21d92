"""Catch-up: a connector started behind a backlog of `--rows` row changes, timed to the end.

The backlog (inserts from MariaDB's SEQUENCE engine in 100,000-row transactions) is written
while no connector runs; then `sluice run` starts from the position before it. Prints the time
to catch up (the saved position reaching the end of the backlog), rows/s, and the connector's
peak RSS sampled from /proc. Run with `make bench` (2,000,000 rows by default).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, TopicPartition

from bench.pipeline import _rss_mib
from bench.sequence import choose_server, fresh_table, insert, write_config
from connector.checkpoint import checkpoint_stores
from connector.replica.server import master_position
from tests.support.live import KAFKA, ROOT, connect, live_config

DB = "sluice_backlog"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = choose_server(parser)
    with tempfile.TemporaryDirectory() as tmp:
        name = f"catchup{uuid.uuid4().hex[:6]}"
        path = Path(tmp) / "sluice.toml"
        write_config(path, name, 4800, DB, f"{tmp}/schemas")
        fresh_table(DB)
        conn = connect()
        sluice = [str(ROOT / ".venv" / "bin" / "sluice")]
        subprocess.run([*sluice, "position", "set", str(master_position(conn)).split(" ")[0], "--config", str(path)],
                       check=True, capture_output=True)  # fmt: skip
        with conn.cursor() as cur:
            for start in range(0, args.rows, 100_000):
                insert(cur, DB, start + 1, min(args.rows, start + 100_000))
        end = master_position(conn)
        stores = checkpoint_stores(live_config([], name=name))
        assert stores.fast is not None
        process = subprocess.Popen([*sluice, "run", "--config", str(path)], stderr=subprocess.DEVNULL)
        started, peak = time.monotonic(), 0
        try:
            while True:
                peak = max(peak, _rss_mib(process.pid))
                saved = stores.fast.get()
                if saved is not None and saved.sort_key() >= end.sort_key():
                    break
                if process.poll() is not None:
                    raise SystemExit(f"the connector exited with {process.returncode}")
                time.sleep(0.5)
        finally:
            elapsed = time.monotonic() - started
            process.send_signal(signal.SIGTERM)
            process.wait(120)
        topic_rows = _messages_in(f"{name}.{DB}.t")
        assert topic_rows >= args.rows, f"only {topic_rows:,} messages reached Kafka"
        print(f"backlog of {args.rows:,} row changes caught up in {elapsed:.0f} s: {args.rows / elapsed:,.0f} rows/s, "
              f"peak RSS {peak} MiB (connector start-up included)")  # fmt: skip


def _messages_in(topic: str) -> int:
    """Messages in a topic: the sum of its partitions' high watermarks."""
    consumer = Consumer({"bootstrap.servers": KAFKA, "group.id": f"count-{uuid.uuid4()}"})
    metadata = consumer.list_topics(topic, timeout=30).topics[topic]
    total = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in metadata.partitions)
    consumer.close()
    return int(total)


if __name__ == "__main__":
    main()
