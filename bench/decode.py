"""Decode throughput: Sluice against python-mysql-replication on the same binlog events.

Writes a sysbench-like workload (ints, CHAR(120), DECIMAL, DATETIME(6), TEXT) of at
least 200,000 row changes on the local MariaDB into a fresh binlog file, once with its text in
utf8mb4 and once in latin1 (the default charset of many older installs: single-byte text the
compiled path reads by the server's table), then measures, for each, in one run:
  - sluice decode: the file's bytes to canal flat messages as JSON lines (what
    `sluice decode` does, output discarded), and to decoded rows only;
  - python-mysql-replication reading the same events from the server, values materialised.
Prints rows/s for each and the ratios. Run with `make bench`.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from bench.sequence import choose_server
from connector.binlog.file import iter_file_events
from connector.binlog.rows import RowsEvent
from connector.commands.decode import decode_files
from tests.support.live import connect, current_binlog, peer_settings, server

DB = "sluice_bench"


# The JSON column of bench/pipeline.py --variant json: a document like an order's attributes.
DOC = (
    '{{"id": {}, "sku": "A-{:05d}", "tags": ["new", "sale"], "price": {:.2f}, '
    '"attrs": {{"color": "red", "size": {}}}}}'
)


# A note's words in a charset: ASCII but where the charset is one of Asian text (the peer reads
# MINIMAL text as UTF-8, so the decode bench's charsets keep to ASCII).
NOTES = {"gbk": "备注：订单已发货 ", "gb18030": "备注：订单已发货 📦 "}


def workload(rows: int, charset: str = "utf8mb4", json: bool = False, db: str = DB) -> str:
    """Fill a fresh binlog file with `rows` inserts plus updates and deletes of a tenth each;
    `json`: the table has a JSON column `doc` too; `db`: the database it is made in (made anew)."""
    rng = random.Random(42)
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(
            f"CREATE TABLE {db}.sbtest (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, "
            "pad CHAR(60) NOT NULL, amount DECIMAL(12,2) NOT NULL, created DATETIME(6) NOT NULL, note TEXT"
            f"{', doc JSON' if json else ''}) CHARACTER SET {charset}"
        )
        cur.execute("FLUSH BINARY LOGS")
        file, _ = current_binlog(conn)
        batch = []
        for i in range(rows):
            c = "-".join(f"{rng.randrange(10**11):011d}" for _ in range(10))
            note = None if i % 7 == 0 else NOTES.get(charset, "note ") * rng.randint(1, 20)
            row = (i, rng.randrange(rows), c, c[:59], rng.randrange(10**8) / 100, "2024-05-06 07:08:09.123456", note)
            batch.append((*row, DOC.format(i, i % 10**5, i / 100, i % 9)) if json else row)
            if len(batch) == 1000:
                cur.executemany(f"INSERT INTO {db}.sbtest VALUES ({', '.join(['%s'] * len(batch[0]))})", batch)
                batch = []
        if batch:
            cur.executemany(f"INSERT INTO {db}.sbtest VALUES ({', '.join(['%s'] * len(batch[0]))})", batch)
        cur.execute(f"UPDATE {db}.sbtest SET k = k + 1 WHERE id % 10 = 0")
        cur.execute(f"DELETE FROM {db}.sbtest WHERE id % 10 = 5")
        cur.execute("FLUSH BINARY LOGS")
    conn.close()
    return file


def sluice_rows(path: str) -> tuple[int, float]:
    started = time.perf_counter()
    count = 0
    for event in iter_file_events(path):
        if isinstance(event.body, RowsEvent):
            count += len(event.body.rows)
    return count, time.perf_counter() - started


def sluice_jsonl(path: str) -> tuple[int, float]:
    started = time.perf_counter()
    sink = io.StringIO()
    count = decode_files([path], sink)
    return count, time.perf_counter() - started


def peer_rows(file: str) -> tuple[int, float]:
    started = time.perf_counter()
    stream = BinLogStreamReader(
        connection_settings=peer_settings(), server_id=4343, log_file=file, log_pos=4, resume_stream=True,
        blocking=False, only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], only_schemas=[DB],
    )  # fmt: skip
    count = 0
    try:
        for event in stream:
            count += len(event.rows)  # .rows decodes every value of every row
    finally:
        stream.close()
    return count, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="the three readers in turn, this many times")
    args = choose_server(parser)
    os.environ["TZ"] = "UTC"
    time.tzset()
    for charset in ("utf8mb4", "latin1"):
        measure(args.rows, args.rounds, charset)


def measure(rows: int, rounds: int, charset: str) -> None:
    file = workload(rows, charset)
    path = str(server().binlog_dir / file)
    size = os.path.getsize(path)
    labels = ("sluice decode (rows)", "sluice decode --format jsonl", "python-mysql-replication")
    rates: dict[str, list[float]] = {label: [] for label in labels}
    changes = 0
    for _ in range(rounds):  # in turn: this machine's speed drifts within a minute
        ours_rows, ours_t = sluice_rows(path)
        ours_json, ours_json_t = sluice_jsonl(path)
        theirs, theirs_t = peer_rows(file)
        changes = ours_rows
        assert ours_json >= changes and theirs == changes, (ours_json, theirs, changes)
        for label, t in zip(labels, (ours_t, ours_json_t, theirs_t)):
            rates[label].append(changes / t)
    print(f"{charset} text, binlog {file}: {size / 1e6:.1f} MB, {changes:,} row changes, {rounds} rounds")
    peer = rates[labels[2]]
    for label in labels:
        ratios = [rate / peer_rate for rate, peer_rate in zip(rates[label], peer)]
        listed = ", ".join(f"{r:.1f}" for r in ratios)
        print(f"{label:32s} {statistics.median(rates[label]):12,.0f} rows/s  x{statistics.median(ratios):5.1f} vs "
              f"peer (median of {listed})")  # fmt: skip


if __name__ == "__main__":
    main()
