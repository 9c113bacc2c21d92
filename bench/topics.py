"""What a database of many tables pays Kafka before its rows flow: the routes of N tables whose
topics exist (a restart), made one by one at each table's first rows (a metadata and a
configuration request each, on the decoding path) against `Routes.prefetch` before the stream
starts (one of each for them all). Both over the same topics of the real broker, in the same
run, each the best of `--tries` fresh sinks. Run with `python bench/topics.py`.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.cimpl import NewTopic

from connector.routes import Routes
from connector.sink.kafka import KafkaSettings, KafkaSink
from connector.sink.partitioning import TopicRouter
from tests.support.live import KAFKA


def routes_made(tables: list[tuple[str, str]], prefix: str, ahead: bool) -> float:
    """Seconds until every table has its route, with a fresh sink (nothing known of any topic)."""
    sink = KafkaSink(KafkaSettings(KAFKA, partitions=3))
    routes = Routes(TopicRouter(prefix, []), sink, tombstones=False)
    started = time.perf_counter()
    if ahead:
        routes.prefetch(tables)
    for database, table in tables:
        routes.of(database, table)
    took = time.perf_counter() - started
    sink.close()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tables", type=int, default=500)
    parser.add_argument("--tries", type=int, default=3)
    args = parser.parse_args()
    prefix = f"topics{uuid.uuid4().hex[:6]}"
    tables = [("shop", f"t{i}") for i in range(args.tables)]
    admin = KafkaSink(KafkaSettings(KAFKA)).admin
    router = TopicRouter(prefix, [])
    for future in admin.create_topics([NewTopic(router.topic(*t), 3, 1) for t in tables]).values():
        future.result(120)
    try:
        one_by_one = min(routes_made(tables, prefix, ahead=False) for _ in range(args.tries))
        ahead = min(routes_made(tables, prefix, ahead=True) for _ in range(args.tries))
        print(f"{args.tables} tables whose topics exist: routes made one by one at each table's first rows "
              f"{one_by_one:.2f} s ({1000 * one_by_one / args.tables:.1f} ms a table, on the decoding path); "
              f"read ahead before streaming {ahead:.2f} s; {one_by_one / ahead:.0f}x less")  # fmt: skip
    finally:
        for future in admin.delete_topics([router.topic(*t) for t in tables]).values():
            future.result(120)


if __name__ == "__main__":
    main()
