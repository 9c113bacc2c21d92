"""Live decode throughput: Sluice's replica stream against python-mysql-replication, same server, same run.

Writes the bench/decode.py workload (>= 200,000 row changes) into a fresh binlog file,
then both read it from the server over the replication protocol (non-blocking dump):
  - Sluice: ChangeStream, every row turned into a canal flat message, transactions assembled;
  - python-mysql-replication: BinLogStreamReader, every row's values materialised.
Prints rows/s for each and the ratio. Run with `make bench`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.decode import DB, peer_rows, workload
from bench.sequence import choose_server
from connector.items import Changes, Commit
from connector.position import Position
from connector.schema.history import MemoryHistoryStore
from connector.startup import prepare
from connector.stream import ChangeStream
from tests.support.live import live_config


def sluice_live(file: str) -> tuple[int, float]:
    config = live_config([rf"{DB}\..*"], server_id=4444)
    prepared = prepare(config, MemoryHistoryStore(), resume=Position(file, 4))
    stream = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter())
    started = time.perf_counter()
    count = 0
    for item in stream.items(Position(file, 4), blocking=False):
        if isinstance(item, Changes):
            count += len(item.messages)
        elif isinstance(item, Commit) and item.position.file != file:
            break
    return count, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    args = choose_server(parser)
    os.environ["TZ"] = "UTC"
    time.tzset()
    file = workload(args.rows)
    ours, ours_t = sluice_live(file)
    theirs, theirs_t = peer_rows(file)
    assert ours == theirs, (ours, theirs)
    print(f"binlog {file}: {ours:,} row changes read from the server")
    peer_rate = theirs / theirs_t
    for label, n, t in (
        ("sluice stream (flat messages)", ours, ours_t),
        ("python-mysql-replication", theirs, theirs_t),
    ):
        rate = n / t
        print(f"{label:32s} {rate:12,.0f} rows/s  ({t:6.2f} s)  x{rate / peer_rate:5.1f} vs peer")


if __name__ == "__main__":
    main()
