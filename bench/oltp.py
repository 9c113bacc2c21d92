"""The OLTP mix: concurrent writers committing single-row transactions, as production does.

Each writer has its own connection and its own keys (ids equal to its number modulo the
writer count), and commits autocommit INSERT, UPDATE and DELETE statements in the ratio
5:3:2, each setting `at` to the server's NOW(6) in UTC (bench/spark_stream.py compares it
with the time a change became visible downstream). The writers are paced to `rate` commits/s
in all (0: as fast as the server takes them).

Run as a bench: `sluice run` streams while `--writers` writers commit the mix as fast as the
server takes them for `--seconds`; every second the connector's lag (binlog bytes between
the server's position and the saved one) is sampled. Prints the server's commit rate, the
connector's rate over the same changes (to the moment it caught up) and whether its lag
stayed bounded (it caught up within a few seconds of the writers' stop).
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sequence import choose_server, fresh_table, write_config
from connector.checkpoint import checkpoint_stores
from connector.position import Position
from connector.replica.server import master_position
from tests.support.live import ROOT, connect, live_config
from tests.support.pipelines import sluice_run

DB = "sluice_bench_oltp"

STATEMENTS = ("insert",) * 5 + ("update",) * 3 + ("delete",) * 2


class OltpMix:
    def __init__(
        self, connect: Callable[[], Any], table: str | tuple[str, ...], writers: int = 4, rate: float = 1000.0,
        first_id: int = 1,
    ) -> None:  # fmt: skip
        """`table`: one table, or several, each transaction on one of them at random."""
        self.tables = (table,) if isinstance(table, str) else table
        self.connect, self.writers, self.rate, self.first_id = connect, writers, rate, first_id
        self.commits = [0] * writers
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []

    def start(self) -> None:
        for number in range(self.writers):
            thread = threading.Thread(target=self._guarded, args=(number,), name=f"oltp-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> int:
        """Stop the writers; the commits they made. A writer's failure is raised here."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        if self._errors:
            raise self._errors[0]
        return sum(self.commits)

    def _guarded(self, number: int) -> None:
        try:
            self._write(number)
        except BaseException as exc:  # handed to stop(): a bench must not report a rate its writers did not reach
            self._errors.append(exc)

    def _write(self, number: int) -> None:
        conn = self.connect()
        rng = random.Random(number)
        lives: dict[str, list[int]] = {table: [] for table in self.tables}
        next_id = self.first_id + number
        interval = self.writers / self.rate if self.rate > 0 else 0.0
        started = time.monotonic()
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            while not self._stop.is_set():
                table = rng.choice(self.tables) if len(self.tables) > 1 else self.tables[0]
                live = lives[table]
                kind = rng.choice(STATEMENTS) if len(live) > 10 else "insert"
                if kind == "insert":
                    cur.execute(f"INSERT INTO {table} VALUES (%s, %s, REPEAT('c', 60), %s, NOW(6))",
                                (next_id, next_id % 1000, next_id / 100))  # fmt: skip
                    live.append(next_id)
                    next_id += self.writers
                elif kind == "update":
                    cur.execute(f"UPDATE {table} SET k = k + 1, at = NOW(6) WHERE id = %s", (rng.choice(live),))
                else:
                    cur.execute(f"DELETE FROM {table} WHERE id = %s", (live.pop(rng.randrange(len(live))),))
                self.commits[number] += 1
                wait = started + self.commits[number] * interval - time.monotonic()
                if wait > 0:
                    self._stop.wait(wait)
        conn.close()


def behind(server: Position, saved: Position | None) -> int | None:
    """Binlog bytes between the saved position and the server's; None across files."""
    if saved is None or saved.file != server.file:
        return None
    return max(0, server.pos - saved.pos)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--writers", type=int, default=8)
    args = choose_server(parser)
    with tempfile.TemporaryDirectory() as tmp:
        name = f"oltp{uuid.uuid4().hex[:6]}"
        path = Path(tmp) / "sluice.toml"
        write_config(path, name, 4950, DB, f"{tmp}/schemas")
        fresh_table(DB)
        stores = checkpoint_stores(live_config([], name=name))
        assert stores.fast is not None
        conn, lags = connect(), []
        sluice = str(ROOT / ".venv" / "bin" / "sluice")
        subprocess.run([sluice, "position", "set", f"{master_position(conn).file}:{master_position(conn).pos}",
                        "--config", str(path)], check=True, capture_output=True)  # fmt: skip
        process = sluice_run(path, streaming=True)
        try:
            load = OltpMix(connect, f"{DB}.t", writers=args.writers, rate=0)
            begun = time.monotonic()
            load.start()
            while time.monotonic() - begun < args.seconds:
                time.sleep(1)
                lags.append(behind(master_position(conn), stores.fast.get()))
            commits = load.stop()
            writing_s, end = time.monotonic() - begun, master_position(conn)
            while (saved := stores.fast.get()) is None or saved.sort_key() < end.sort_key():
                time.sleep(0.05)
            caught_s = time.monotonic() - begun
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(60)
        known = sorted(lag for lag in lags if lag is not None)
        median = known[len(known) // 2] if known else 0
        print(f"server: {commits:,} single-row commits by {args.writers} writers in {writing_s:.0f} s "
              f"({commits / writing_s:,.0f}/s, OLTP mix 5:3:2)")  # fmt: skip
        print(f"sluice: the same changes published and checkpointed in {caught_s:.1f} s ({commits / caught_s:,.0f} "
              f"rows/s, {commits / caught_s / (commits / writing_s):.2f} of the server's rate); caught up "
              f"{caught_s - writing_s:.1f} s after the writers stopped; lag sampled each second: median "
              f"{median:,} bytes, max {max(known, default=0):,} bytes")  # fmt: skip
        print("lag bounded" if caught_s - writing_s < 5 else "lag NOT bounded: the connector falls behind this server")


if __name__ == "__main__":
    main()
