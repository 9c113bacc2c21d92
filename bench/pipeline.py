"""End-to-end throughput and memory: binlog -> Avro -> Kafka acknowledged, with checkpoints on.

In one run:
  1. the bench/decode.py workload (>= 200,000 row changes in 1,000-row statements), then
     20,000 single-row transactions, each streamed by the connector from the server into the
     real broker; rows/s counts from the first message handed to Kafka until the last is
     acknowledged and its position saved (the connector's start-up, which connects, reads
     the schema and creates topics, is printed apart: the ceiling's topics are made before
     its clock starts too);
  2. the producer ceiling: the same number of the same pre-encoded messages produced into the
     same broker by a bare confluent-kafka producer with the same settings;
  Steps 1 and 2 alternate `--rounds` times (this machine's speed drifts by 2x within a
     minute); in a round each side is the best of `--tries` back-to-back runs over the same
     bytes (a run of 20,000 transactions lasts 0.1 s: one stall halves it); the ratio printed
     is the median of the rounds' ratios, each round's beside it; a variant is timed beside the
     plain table too, and the bare producer over each one's messages says how much of the gap
     is Kafka's price of the variant's bigger messages (a JSON column's) and how much Sluice's;
  3. the connector's RSS (sampled from /proc every 0.25 s) through one 1,000,000-row transaction.
Run with `make bench`.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.decode import DB, DOC, workload
from bench.sequence import choose_server, write_config
from connector.checkpoint import checkpoint_stores
from connector.config import AvroSection, ColumnRule, Config
from connector.position import Position
from connector.replica.server import master_position
from connector.runner import Connector, kafka_sink
from connector.sink.kafka import KafkaSink
from connector.sink.partitioning import Plain, Tail
from tests.support.live import (
    ROOT,
    connect,
    current_binlog,
    live_config,
    numbers,
)


class RecordingSink:
    """Passes messages to Kafka and keeps a copy, for the ceiling run (by reference, per call:
    a copy per message would be the bench's cost counted as the connector's)."""

    def __init__(self, inner: KafkaSink) -> None:
        self.inner = inner
        self.calls: list[tuple[str, tuple[tuple[bytes | None, bytes], ...], int | None]] = []
        # the kernel's, as it handed them over: (value, key, partition[, count]) each
        self.routed: list[tuple[str, list[Plain], list[Tail]]] = []
        self.first_at = 0.0  # perf_counter() of the first message handed on

    @property
    def kept(self) -> list[tuple[str, bytes | None, bytes, int | None]]:
        """Every message handed on, with the partition it was given (None: its key's)."""
        kept = [(topic, key, value, partition) for topic, messages, partition in self.calls for key, value in messages]
        # the kernel's values are never None (it writes no tombstones)
        routed: list[tuple[str, bytes | None, bytes, int | None]] = []
        for topic, plain, tails in self.routed:  # in the order they were routed
            routed += [(topic, key, value or b"", p) for value, key, p in plain]
            routed += [(topic, key, value or b"", p) for value, key, p, _ in tails]
        return [*kept, *routed]

    def produce(self, topic: str, key: bytes | None, value: bytes, partition: int | None, done: object) -> None:
        self.produce_many(topic, [(key, value)], partition, done)

    def produce_many(
        self, topic: str, messages: list[tuple[bytes | None, bytes]], partition: int | None, done: object,
        headers: object = None,
    ) -> None:
        if not self.calls and not self.routed:
            self.first_at = time.perf_counter()
        self.calls.append((topic, tuple(messages), partition))  # a tuple of tuples: untracked by the GC
        self.inner.produce_many(topic, messages, partition, done, headers)  # type: ignore[arg-type]

    def produce_routed(self, topic: str, plain: list[Plain], tails: list[Tail], done: object) -> None:
        """The compiled kernel's messages (connector/lane.py), partitioned already."""
        if not self.calls and not self.routed:
            self.first_at = time.perf_counter()
        self.routed.append((topic, plain, tails))
        self.inner.produce_routed(topic, plain, tails, done)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


# --variant columns: a [[kafka.columns]] rule on the table, one column left out, one masked, one hashed.
RULES = [ColumnRule(rf"{DB}\.sbtest", exclude=["pad"], mask=["c"], mask_chars=8, hash=["note"], hash_salt="pepper")]


# The plain table a variant is timed beside. A run reads to the binlog's end, so each round writes
# the variant's rows, times them, then writes the plain table's and times those at once: neither
# reads (and skips) the other's, and only the plain rows' writing comes between the two timings.
PLAIN_DB = f"{DB}_plain"


def config(
    name: str, tmp: str, rules: list[ColumnRule] | None = None, records: bool = False, db: str = DB,
    value_format: str = "avro", exactly_once: bool = False,
) -> Config:  # fmt: skip
    base = live_config([rf"{db}\..*"], name=name, server_id=4600)
    return replace(
        base,
        kafka=replace(base.kafka, topic_prefix=name, columns=rules or [], transaction_topic=records,
                      value_format=value_format, exactly_once=exactly_once,
                      transaction_ms=TRANSACTION_MS.get("ms", base.kafka.transaction_ms)),
        avro=AvroSection(schemas_dir=os.path.join(tmp, name, "schemas")),  # a directory per connector
    )


TRANSACTION_MS: dict[str, int] = {}  # --transaction-ms, when given


class Run(NamedTuple):
    rows: int
    startup_s: float  # from Connector.run() to the first message handed to Kafka
    streaming_s: float  # from there until the last is acknowledged and its position saved
    kept: list[tuple[str, bytes | None, bytes, int | None]]


def end_to_end(
    file: str, tmp: str, kernel: bool = True, rules: list[ColumnRule] | None = None, records: bool = False,
    db: str = DB, value_format: str = "avro", exactly_once: bool = False,
) -> Run:  # fmt: skip
    """`kernel` False: every event on the Python path ([source] compiled_kernel = false); `rules`:
    the configuration's [[kafka.columns]]; `records`: transaction records on; `db`: the database
    captured; `value_format`: [kafka] value_format; `exactly_once`: [kafka] exactly_once."""
    cfg = config(f"bench{uuid.uuid4().hex[:6]}", tmp, rules, records, db, value_format, exactly_once)
    cfg = replace(cfg, source=replace(cfg.source, compiled_kernel=kernel))
    stores = checkpoint_stores(cfg)
    for store in (stores.fast, stores.durable):
        assert store is not None
        store.put(Position(file, 4))
    sink = RecordingSink(kafka_sink(cfg))
    connector = Connector(cfg, sink=sink, stores=stores)  # type: ignore[arg-type]
    connector.sole_job = True  # as `sluice run` has it (runner.tune_gc)
    started = time.perf_counter()
    connector.run(blocking=False)  # to the end of the binlog; drains Kafka and saves the position
    ended = time.perf_counter()
    assert connector.pipeline is not None
    return Run(connector.pipeline.counters.rows, sink.first_at - started, ended - sink.first_at, sink.kept)


def profile(file: str, tmp: str, kernel: bool, exactly_once: bool, top: int = 25) -> None:
    """One connector run over `file` under cProfile (the thread that decodes, encodes and
    produces): its cost per binlog event and per row, and where it goes; `kernel` False: every
    event on the Python path; `exactly_once`: [kafka] exactly_once (--variant exactly)."""
    with connect().cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{file}'")
        events = len(cur.fetchall())
    profiler = cProfile.Profile()
    profiler.enable()
    run = end_to_end(file, tmp, kernel=kernel, exactly_once=exactly_once)
    profiler.disable()
    seconds = run.streaming_s
    path = "kernel" if kernel else "Python path alone"
    print(f"profile ({path}): {events:,} events, {run.rows:,} rows in {seconds:.2f} s streaming, under cProfile: "
          f"{seconds / events * 1e6:.1f} us per event, {seconds / run.rows * 1e6:.1f} us per row")  # fmt: skip
    stats = pstats.Stats(profiler)
    listed = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    print(f"  {'own s':>7} {'with callees s':>14} {'calls':>9}  function")
    for (path, line, name), (_, calls, own, cumulative, _) in listed:
        where = path.split("/work/")[-1].split("site-packages/")[-1]
        print(f"  {own:7.2f} {cumulative:14.2f} {calls:9,}  {name} ({where}:{line})")


def ceiling(messages: list[tuple[str, bytes | None, bytes, int | None]], cfg: Config) -> float:
    """The bare producer (same settings) at its fastest: one shared callback, a poll per 1,000."""
    sink = kafka_sink(cfg)
    topics = {t: f"ceiling{uuid.uuid4().hex[:6]}.{t}" for t in {m[0] for m in messages}}
    for topic in topics.values():
        sink.ensure_topic(topic)
    acked = [0]

    def done(err: object, msg: object) -> None:
        acked[0] += err is None

    gc.freeze()  # the kept messages are not garbage: spare the collector from walking them
    produce, poll = sink.producer.produce, sink.producer.poll
    started = time.perf_counter()
    for n, (topic, key, value, partition) in enumerate(messages):
        while True:
            try:
                produce(topics[topic], value, key, -1 if partition is None else partition, on_delivery=done)
                break
            except BufferError:
                poll(0.1)
        if n % 1000 == 0:
            poll(0)
    sink.flush(120)
    elapsed = time.perf_counter() - started
    gc.unfreeze()
    assert acked[0] == len(messages), (acked[0], len(messages))
    return elapsed


def best(tries: int, make: Callable[[], Run]) -> Run:
    """The fastest of `tries` runs, one after another over the same binlog."""
    return max((make() for _ in range(tries)), key=lambda run: run.rows / run.streaming_s)


def ceiling_s(run: Run, tmp: str, tries: int = 1) -> float:
    """The bare producer's time for the messages `run` produced, the best of `tries`."""
    return min(ceiling(run.kept, config("ceiling", tmp)) for _ in range(tries))


def compare(label: str, run: Run, tmp: str, value_format: str = "avro", tries: int = 1) -> tuple[float, float]:
    """One round: the connector's run beside the ceiling on the messages it produced (the best
    of `tries`); their ratio, and the ceiling's rows/s."""
    seconds = ceiling_s(run, tmp, tries)
    e2e_rate, ceiling_rate = len(run.kept) / run.streaming_s, len(run.kept) / seconds
    written = "Avro" if value_format == "avro" else value_format
    print(f"{label}: end to end (binlog -> {written} -> Kafka acked, checkpoints on): {e2e_rate:10,.0f} msgs/s, "
          f"{run.rows / run.streaming_s:10,.0f} rows/s ({run.rows:,} rows, {len(run.kept):,} messages in "
          f"{run.streaming_s:.2f} s, after {run.startup_s:.2f} s of start-up); producer ceiling (same "
          f"pre-encoded messages): {ceiling_rate:10,.0f} msgs/s ({seconds:.2f} s); ratio "
          f"{e2e_rate / ceiling_rate:.2f}")  # fmt: skip
    return e2e_rate / ceiling_rate, run.rows / seconds


def oltp_workload(transactions: int, json: bool = False, db: str = DB) -> str:
    """A fresh binlog file of single-row transactions on the bench table: inserts, updates, deletes
    (`json`: the table's JSON column too, as workload(json=True) made it; `db`: the table's database)."""
    rng = random.Random(7)
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"TRUNCATE {db}.sbtest")
        cur.execute("FLUSH BINARY LOGS")
        file, _ = current_binlog(conn)
        for i in range(transactions):  # autocommit: one transaction each
            if i % 10 < 7 or i < 100:
                row: tuple[Any, ...] = (i, rng.randrange(10**6), "c" * 119, "p" * 59, rng.randrange(10**8) / 100)
                if json:
                    row += (DOC.format(i, i % 10**5, i / 100, i % 9),)
                values = "%s, %s, %s, %s, %s, NOW(6), NULL" + (", %s" if json else "")
                cur.execute(f"INSERT INTO {db}.sbtest VALUES ({values})", row)
            elif i % 10 < 9:
                cur.execute(f"UPDATE {db}.sbtest SET k = k + 1 WHERE id = %s", (rng.randrange(i),))
            else:
                cur.execute(f"DELETE FROM {db}.sbtest WHERE id = %s", (rng.randrange(i),))
        cur.execute("FLUSH BINARY LOGS")
    conn.close()
    return file


VARIANTS = ("plain", "json", "compressed", "gbk", "gb18030", "columns", "records", "canal", "canal-columns", "exactly")


def compressed(variant: str, write: Callable[[], str]) -> str:
    """`write`'s binlog file; with the compressed variant, written with binlog_transaction_compression
    on (each transaction one TRANSACTION_PAYLOAD), set back after."""
    if variant != "compressed":
        return write()
    with connect().cursor() as cur:
        cur.execute("SET GLOBAL binlog_transaction_compression = ON")
    try:
        return write()
    finally:
        with connect().cursor() as cur:
            cur.execute("SET GLOBAL binlog_transaction_compression = OFF")


def rss_through_big_transaction(tmp: str, rows: int, exactly_once: bool) -> list[tuple[float, int, int]]:
    """(seconds, RSS MiB, rows handed on so far) samples of `sluice run` through one transaction,
    until its position is saved (`exactly_once`: one Kafka transaction of every row, committed
    at the statement's end, within the producer's transaction.timeout.ms)."""
    conn = connect()
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS sluice_bigtxn")
        cur.execute("CREATE DATABASE sluice_bigtxn")
        cur.execute("CREATE TABLE sluice_bigtxn.t (id INT PRIMARY KEY, pad CHAR(60), n DECIMAL(10,2))")
    name = f"bigtxn{uuid.uuid4().hex[:6]}"
    path = Path(tmp) / "big.toml"
    write_config(path, name, 4601, "sluice_bigtxn", f"{tmp}/schemas-big")
    if exactly_once:
        path.write_text(path.read_text().replace("[kafka]\n", "[kafka]\nexactly_once = true\n", 1))
    process = subprocess.Popen([str(ROOT / ".venv" / "bin" / "sluice"), "run", "--config", str(path)],
                               stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(3)
    writer = threading.Thread(target=_insert_many, args=(rows,))
    samples: list[tuple[float, int, int]] = []
    started = time.monotonic()
    writer.start()
    stores = checkpoint_stores(live_config([], name=name))
    try:
        while True:
            samples.append((time.monotonic() - started, _rss_mib(process.pid), 0))
            saved = stores.fast.get() if stores.fast else None
            if not writer.is_alive() and saved is not None and saved.sort_key() >= master_position(conn).sort_key():
                break
            time.sleep(0.25)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(120)
    return samples


def _insert_many(rows: int) -> None:
    with connect("sluice_bigtxn").cursor() as cur:  # MariaDB's SEQUENCE engine gives the numbers
        cur.execute(f"INSERT INTO t SELECT seq, REPEAT('x', 60), seq / 100 FROM {numbers(rows)}")


def _rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--oltp", type=int, default=20_000, help="single-row transactions")
    parser.add_argument("--big-transaction", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="connector and ceiling runs, alternating")
    parser.add_argument("--tries", type=int, default=3, help="runs in a round of each side: its best counts")
    parser.add_argument("--transaction-ms", type=int, help="with --variant exactly: [kafka] transaction_ms")
    parser.add_argument("--profile", action="store_true", help="only: one cProfile run, kernel on, one off")
    parser.add_argument("--variant", choices=VARIANTS, default="plain",
                        help="json: the table has a JSON column; compressed: binlog_transaction_compression "
                             "on while the workloads are written (both MySQL's); gbk: the table's text in gbk, "
                             "its notes Chinese; gb18030 (MySQL's): the same in gb18030, an emoji in each note "
                             "(four-byte codes); columns: a [[kafka.columns]] rule leaves `pad` out, masks "
                             "`c` and hashes `note`; records: transaction records on (a BEGIN and an END "
                             "message a transaction: the ratio is of messages); canal: value_format = "
                             "canal-json; canal-columns: canal-json under the columns variant's rule; "
                             "exactly: [kafka] exactly_once (Kafka transactions, the "
                             "plain table at least once). Every variant but plain is timed beside the plain "
                             "table (Avro, same rows) in the same rounds: its rows/s as a share of the "
                             "plain table's")  # fmt: skip
    args = choose_server(parser)
    json = args.variant == "json"
    charset = args.variant if args.variant in ("gbk", "gb18030") else "utf8mb4"
    rules = RULES if args.variant in ("columns", "canal-columns") else None
    records = args.variant == "records"
    value_format = "canal-json" if args.variant in ("canal", "canal-columns") else "avro"
    once = args.variant == "exactly"
    if args.transaction_ms:
        TRANSACTION_MS["ms"] = args.transaction_ms
    os.environ["TZ"] = "UTC"
    time.tzset()
    with tempfile.TemporaryDirectory() as tmp:
        if args.profile:
            workload(1_000)  # makes the table
            file = oltp_workload(args.oltp)
            profile(file, tmp, kernel=True, exactly_once=once)
            profile(file, tmp, kernel=False, exactly_once=once)
            return
        runs: list[tuple[str, Callable[[], str], Callable[[], str]]] = [
            ("bulk", lambda: compressed(args.variant, lambda: workload(args.rows, charset, json)),
             lambda: workload(args.rows, db=PLAIN_DB)),
            ("single-row transactions", lambda: compressed(args.variant, lambda: oltp_workload(args.oltp, json)),
             lambda: oltp_workload(args.oltp, db=PLAIN_DB)),
        ]  # fmt: skip
        beside = args.variant != "plain"
        print(f"variant: {args.variant}")
        for label, write, write_plain in runs:  # each workload right before its runs: a run reads to the binlog's end
            file = write()
            ratios, speedups, shares, kafka_shares = [], [], [], []
            for round_ in range(args.rounds):
                if beside and round_:
                    file = write()  # after the plain table's rows of the last round
                python = end_to_end(file, tmp, kernel=False, rules=rules, records=records,
                                    value_format=value_format, exactly_once=once)  # all on the Python path  # fmt: skip
                run = best(args.tries, partial(end_to_end, file, tmp, rules=rules, records=records,
                                               value_format=value_format, exactly_once=once))  # fmt: skip
                # The plain table's runs right after the variant's (only its rows written between), so
                # the machine's drift weighs on both alike; the ceilings after both.
                plain = best(args.tries, partial(end_to_end, write_plain(), tmp, db=PLAIN_DB)) if beside else None
                ratio, run_ceiling = compare(label, run, tmp, value_format, args.tries)
                ratios.append(ratio)
                speedups.append(run.rows / run.streaming_s / (python.rows / python.streaming_s))
                print(f"{label}: Python path alone {python.rows / python.streaming_s:10,.0f} rows/s; "
                      f"the kernel {speedups[-1]:.1f}x that")  # fmt: skip
                if plain is not None:
                    shares.append(run.rows / run.streaming_s / (plain.rows / plain.streaming_s))
                    # What Kafka alone makes of the variant's messages beside the plain table's: the
                    # bare producer's rows/s over each (bigger messages cost the broker and lz4 more).
                    kafka_shares.append(run_ceiling / (plain.rows / ceiling_s(plain, tmp, args.tries)))
                    print(f"{label}: the plain table {plain.rows / plain.streaming_s:10,.0f} rows/s; "
                          f"the variant {shares[-1]:.2f} of that; the bare producer's rows/s over the variant's "
                          f"messages {kafka_shares[-1]:.2f} of its rows/s over the plain table's")  # fmt: skip
            if shares:
                print(f"{label}: the variant {statistics.median(shares):.2f} of the plain table's rows/s, median of "
                      f"{', '.join(f'{x:.2f}' for x in shares)} (goal: at least 0.8); the bare producer "
                      f"{statistics.median(kafka_shares):.2f} on the same messages, median of "
                      f"{', '.join(f'{x:.2f}' for x in kafka_shares)}")  # fmt: skip
            listed = ", ".join(f"{r:.2f}" for r in ratios)
            goal = "0.6" if label == "bulk" else "0.3, and 50,000 rows/s"  # issue 17's
            print(f"{label}: ratio {statistics.median(ratios):.2f} of the ceiling, median of {listed} "
                  f"(goal: at least {goal})")  # fmt: skip
            print(f"{label}: the kernel {statistics.median(speedups):.1f}x the Python path alone, median of "
                  f"{', '.join(f'{x:.1f}' for x in speedups)}")  # fmt: skip
        if not args.big_transaction:
            return
        samples = rss_through_big_transaction(tmp, args.big_transaction, once)
        peak = max(s[1] for s in samples)
        series = ", ".join(f"{t:.0f}s:{m}" for t, m, _ in samples[:: max(1, len(samples) // 12)])
        mode = " (exactly once: one Kafka transaction)" if once else ""
        print(f"RSS through one {args.big_transaction:,}-row transaction{mode}: peak {peak} MiB, its position saved "
              f"after {samples[-1][0]:.0f} s; samples (time:MiB) {series}")  # fmt: skip


if __name__ == "__main__":
    main()
