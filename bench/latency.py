"""How late a change reaches a reader, at least once and with [kafka] exactly_once, in the same run.

A connector streams a table while one writer commits single-row inserts at `--rate` a second;
a consumer (read_committed, as exactly_once's readers read) notes when each row's message
arrives. The latency of a row is its arrival minus the moment its INSERT's commit returned to
the writer (the first second's rows left out: they wait for the topic's creation). Printed per
mode: the median, the 99th percentile and the largest; and exactly once's median and 99th
percentile minus at least once's: what the mode adds, which should stay under [kafka]
transaction_ms (a Kafka transaction commits at the first binlog transaction end that late, and
a quiet server's heartbeat comes as often). Messages are canal-json, so the row's id is read
without a schema.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

from confluent_kafka import Consumer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sequence import choose_server, fresh_table
from connector.config import AvroSection, Config
from connector.runner import Connector
from tests.support.live import KAFKA, connect, live_config

DB = "sluice_latency"
FETCH_WAIT_MS = 500  # librdkafka's default: how long the broker may hold a fetch with nothing new


def config(tmp: str, exactly_once: bool) -> Config:
    name = f"lat{uuid.uuid4().hex[:6]}"
    base = live_config([rf"{DB}\..*"], name=name, server_id=4700 + exactly_once)
    kafka = replace(base.kafka, topic_prefix=name, value_format="canal-json", exactly_once=exactly_once)
    return replace(base, kafka=kafka, avro=AvroSection(schemas_dir=f"{tmp}/{name}"))


def arrivals(topic: str, expected: int, until: float, fetch_wait_ms: int) -> dict[int, float]:
    """When each row id's message arrived, read_committed, until `expected` arrived or `until`."""
    consumer = Consumer({"bootstrap.servers": KAFKA, "group.id": f"lat-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "fetch.wait.max.ms": fetch_wait_ms})  # fmt: skip
    consumer.subscribe([topic])
    seen: dict[int, float] = {}
    try:
        while len(seen) < expected and time.time() < until:
            message = consumer.poll(0.05)
            if message is None or message.error() is not None or message.value() is None:
                continue
            now = time.time()
            for row in json.loads(message.value() or b"{}").get("data") or []:
                seen.setdefault(int(row["id"]), now)
    finally:
        consumer.close()
    return seen


def measure(cfg: Config, rows: int, rate: float, fetch_wait_ms: int) -> list[float]:
    """Seconds from each INSERT's commit to its message's arrival, for `rows` rows at `rate`/s."""
    Connector(cfg).run(blocking=False)  # the schema captured and the position saved before the writes
    stop = threading.Event()
    connector = Connector(cfg, stop=stop)
    streaming = threading.Thread(target=connector.run, name="connector")
    streaming.start()
    topic = f"{cfg.kafka.topic_prefix}.{DB}.t"
    committed: dict[int, float] = {}
    seen: dict[int, float] = {}
    until = time.time() + rows / rate + 60
    reader = threading.Thread(target=lambda: seen.update(arrivals(topic, rows, until, fetch_wait_ms)))
    reader.start()
    time.sleep(2)  # the connector streaming, the reader subscribed
    conn = connect(DB)
    with conn.cursor() as cur:
        for i in range(1, rows + 1):
            cur.execute("INSERT INTO t VALUES (%s, %s, 'c', 1, NOW(6))", (i, i))  # autocommit: its own transaction
            committed[i] = time.time()
            time.sleep(max(0.0, 1 / rate - (time.time() - committed[i])))
    conn.close()
    reader.join()
    stop.set()
    streaming.join()
    warm = int(rate)  # the first second's rows wait for the topic's creation and the reader's metadata
    return [seen[i] - committed[i] for i in committed if i in seen and i > warm]


def summary(label: str, latencies: list[float], expected: int) -> tuple[float, float]:
    ordered = sorted(latencies)
    median, p99 = statistics.median(ordered), ordered[int(0.99 * (len(ordered) - 1))]
    print(f"{label}: {len(ordered):,} of {expected:,} rows after the first second; latency median "
          f"{median * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms")  # fmt: skip
    return median, p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000)
    parser.add_argument("--rate", type=float, default=100.0, help="single-row transactions a second")
    parser.add_argument("--fetch-wait-ms", type=int, default=FETCH_WAIT_MS, help="the reader's fetch.wait.max.ms")
    args = choose_server(parser)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for exactly_once in (False, True):
            cfg = config(tmp, exactly_once)
            label = f"exactly once (transaction_ms {cfg.kafka.transaction_ms})" if exactly_once else "at least once"
            fresh_table(DB)
            results[exactly_once] = summary(label, measure(cfg, args.rows, args.rate, args.fetch_wait_ms), args.rows)
    (least_median, least_p99), (once_median, once_p99) = results[False], results[True]
    print(f"exactly once adds: median {(once_median - least_median) * 1000:.0f} ms, "
          f"p99 {(once_p99 - least_p99) * 1000:.0f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
