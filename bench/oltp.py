"""The OLTP mix: concurrent writers committing single-row transactions, as production does.

Each writer has its own connection and its own keys (ids equal to its number modulo the
writer count), and commits autocommit INSERT, UPDATE and DELETE statements in the ratio
5:3:2, each setting `at` to the server's NOW(6) in UTC: the time a change was made, which the
Spark streaming bench compares with the time the change became visible downstream. The
writers are paced to `rate` commits/s in all (0: as fast as the server takes them).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

STATEMENTS = ("insert",) * 5 + ("update",) * 3 + ("delete",) * 2


class OltpMix:
    def __init__(
        self, connect: Callable[[], Any], table: str, writers: int = 4, rate: float = 1000.0, first_id: int = 1
    ) -> None:
        self.connect, self.table, self.writers, self.rate, self.first_id = connect, table, writers, rate, first_id
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
        live: list[int] = []
        next_id = self.first_id + number
        interval = self.writers / self.rate if self.rate > 0 else 0.0
        started = time.monotonic()
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            while not self._stop.is_set():
                kind = rng.choice(STATEMENTS) if len(live) > 10 else "insert"
                if kind == "insert":
                    cur.execute(f"INSERT INTO {self.table} VALUES (%s, %s, REPEAT('c', 60), %s, NOW(6))",
                                (next_id, next_id % 1000, next_id / 100))  # fmt: skip
                    live.append(next_id)
                    next_id += self.writers
                elif kind == "update":
                    cur.execute(f"UPDATE {self.table} SET k = k + 1, at = NOW(6) WHERE id = %s", (rng.choice(live),))
                else:
                    cur.execute(f"DELETE FROM {self.table} WHERE id = %s", (live.pop(rng.randrange(len(live))),))
                self.commits[number] += 1
                wait = started + self.commits[number] * interval - time.monotonic()
                if wait > 0:
                    self._stop.wait(wait)
        conn.close()
