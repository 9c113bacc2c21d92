"""The pipeline's shared test material: the workload tables and writer the pipeline's live tests
run, connector configurations for them, `sluice run` as a process, and the replay check
(consumer's replay == SELECT *). Test modules share these from here, never from each other."""

from __future__ import annotations

import contextlib
import random
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.checkpoint import checkpoint_stores
from connector.config import AvroSection, Config
from connector.position import binlog_sort_key
from connector.replica.server import master_position
from tests.support.live import ROOT, connect, fresh_database, live_config, numbers, source_toml, wait_until
from tests.support.replay import Replay, comparable, consume, set_columns, source_rows

TABLES = [
    "CREATE TABLE {db}.orders (id INT PRIMARY KEY, customer VARCHAR(40) CHARACTER SET utf8mb4 NOT NULL,"
    " amount DECIMAL(12,2) NOT NULL, status ENUM('new','paid','shipped') NOT NULL DEFAULT 'new',"
    " created DATETIME(6) NOT NULL, note TEXT NULL, tags SET('a','b','c') NULL, raw VARBINARY(16) NULL,"
    " due DATE NULL, window_ TIME(3) NULL, big BIGINT UNSIGNED NULL, ratio DOUBLE NULL, f FLOAT NULL)",
    "CREATE TABLE {db}.order_lines (order_id INT, line INT, sku CHAR(8), qty SMALLINT NOT NULL,"
    " PRIMARY KEY (order_id, line))",
    "CREATE TABLE {db}.events (msg VARCHAR(100), n INT)",
    "CREATE TABLE {db}.docs (id INT PRIMARY KEY, body LONGBLOB)",
]


def fresh(db: str) -> None:
    fresh_database(db, *TABLES)


class Control:
    """A workload's pauses (held between steps while a server restarts) and its end."""

    def __init__(self) -> None:
        self.go, self.parked, self.done = threading.Event(), threading.Event(), threading.Event()
        self.go.set()

    def between_steps(self) -> bool:
        """Waits while held; True when it waited (the connection may be gone)."""
        if self.go.is_set():
            return False
        self.parked.set()
        self.go.wait()
        self.parked.clear()
        return True

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.go.clear()
        assert self.parked.wait(120), "the workload did not pause"
        try:
            yield
        finally:
            self.go.set()


class Writer:
    """The workload's statements on one connection, remembering which orders exist."""

    def __init__(self, db: str, seed: int) -> None:
        self.rng = random.Random(seed)
        self.conn = connect(db)
        self.ids: set[int] = set()
        self.next_id = 1_000_000 * seed
        self.idle = threading.Event()

    def alter(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute("ALTER TABLE orders ADD COLUMN region VARCHAR(8) NOT NULL DEFAULT 'eu' AFTER customer")

    def small(self) -> None:
        rng = self.rng
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            for _ in range(rng.randint(1, 3)):
                op = rng.random()
                if op < 0.5 or not self.ids:
                    self._insert(cur)
                elif op < 0.75:
                    target = self._any()
                    cur.execute("UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id = %s", (target,))
                    cur.execute("UPDATE events SET n = n + 1 WHERE n = %s LIMIT 1", (rng.randint(0, 3),))
                elif op < 0.85:
                    old = self._any()
                    self.next_id += 1
                    cur.execute("UPDATE orders SET id = %s WHERE id = %s", (self.next_id, old))  # a primary-key change
                    cur.execute(
                        "UPDATE order_lines SET order_id = %s, line = line + 1 WHERE order_id = %s", (self.next_id, old)
                    )
                    self.ids.discard(old)
                    self.ids.add(self.next_id)
                else:
                    target = self._any()
                    cur.execute("DELETE FROM order_lines WHERE order_id = %s", (target,))
                    cur.execute("DELETE FROM orders WHERE id = %s", (target,))
                    cur.execute("DELETE FROM events WHERE n = %s LIMIT 1", (rng.randint(0, 3),))
                    self.ids.discard(target)
            cur.execute("COMMIT")

    def big(self) -> None:
        """One big statement (each in its own transaction, as a bulk load or a batch job runs)."""
        rng = self.rng
        kind = rng.choice(("insert", "insert", "update", "delete", "blob")) if len(self.ids) > 100 else "insert"
        with self.conn.cursor() as cur:
            if kind == "insert":
                n, first = rng.randint(2_000, 10_000), self.next_id
                cur.execute(
                    f"INSERT INTO orders (id, customer, amount, created, note) SELECT {first} + seq,"
                    " CONCAT('bulk ', seq), seq / 100, '2024-05-01 00:00:00' + INTERVAL seq SECOND,"
                    f" IF(seq % 3 = 0, NULL, REPEAT('b', seq % 40)) FROM {numbers(n)}"
                )  # fmt: skip
                cur.execute(f"INSERT INTO events SELECT 'bulk', seq % 4 FROM {numbers(n)}")  # keyless: 10,000 at once
                self.ids.update(range(first + 1, first + n + 1))
                self.next_id = first + n
            elif kind == "update":
                low = self._any()
                cur.execute("UPDATE orders SET amount = amount + 1, note = 'bulk update' WHERE id BETWEEN %s AND %s",
                            (low, low + 10_000))  # fmt: skip
                cur.execute("UPDATE events SET n = n + 10 WHERE msg = 'bulk' LIMIT 10000")
            elif kind == "delete":
                low = self._any()
                cur.execute("DELETE FROM order_lines WHERE order_id BETWEEN %s AND %s", (low, low + 5_000))
                cur.execute("DELETE FROM orders WHERE id BETWEEN %s AND %s", (low, low + 5_000))
                cur.execute("DELETE FROM events WHERE msg = 'bulk' LIMIT 5000")
                self.ids -= set(range(low, low + 5_001))
            else:  # a row of several MiB, made on the server
                mib, key = rng.randint(2, 6), rng.randint(1, 5)
                cur.execute("DELETE FROM docs WHERE id = %s", (key,))
                cur.execute(f"INSERT INTO docs VALUES (%s, REPEAT(RANDOM_BYTES(1024), {mib * 1024}))", (key,))

    def _insert(self, cur: Any) -> None:
        rng = self.rng
        self.next_id += 1
        self.ids.add(self.next_id)
        cur.execute(
            "INSERT INTO orders (id, customer, amount, created, note, tags, raw, due, window_, big,"
            " ratio, f) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (self.next_id, rng.choice(["ann", "bö", "çé 🐬", "d"]), f"{rng.randrange(10**9) / 100:.2f}",
             f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 12:34:56.{rng.randrange(10**6):06d}",
             None if rng.random() < 0.3 else "n" * rng.randint(0, 50), rng.choice(["", "a", "a,c", None]),
             rng.randbytes(rng.randint(0, 16)), rng.choice([None, "2000-02-29"]),
             rng.choice([None, "-12:00:00.500", "100:00:00"]), rng.choice([None, 2**64 - 1, 7]),
             rng.random(), rng.choice([None, 0.1, 1.5])),
        )  # fmt: skip
        cur.execute("INSERT INTO order_lines VALUES (%s, 1, %s, %s)", (self.next_id, "sku", rng.randint(1, 9)))
        cur.execute("INSERT INTO events VALUES (%s, %s)", ("created", rng.randint(0, 3)))

    def _any(self) -> int:
        """An existing order: by sorting while there are few, then by probing (bulk loads make
        them dense) rather than sorting 100,000 ids for every small step."""
        if len(self.ids) > 1000:
            low, high = self.next_id - 5 * len(self.ids), self.next_id
            for _ in range(16):
                pick = self.rng.randint(low, high)
                if pick in self.ids:
                    return pick
        return self.rng.choice(sorted(self.ids))


def workload(
    db: str, steps: int, seed: int, pause_s: float = 0.0, alter_at: int = -1, big_every: int = 0,
    control: Control | None = None,
) -> None:
    """Inserts, updates (some changing primary keys), deletes, multi-table transactions; an ADD COLUMN.

    big_every: every so many steps, one statement of the size users write (up to 10,000 rows of
    orders and of the keyless events at once, a bulk UPDATE or DELETE, or a docs row of several
    MiB). control: pauses between steps while held (then reconnects), ends when done."""
    writer = Writer(db, seed)
    for step in range(steps):
        if control is not None:
            if control.done.is_set():
                break
            if control.between_steps():
                writer.conn = connect(db)
        if step == alter_at:
            writer.alter()
        if big_every and step % big_every == big_every - 1:
            writer.big()
        else:
            writer.small()
        time.sleep(pause_s)
    writer.conn.close()
    if control is not None:
        control.parked.set()  # done: nothing left to hold


def config_for(name: str, db: str, tmp: Path) -> Config:
    base = live_config([rf"{db}\..*"], name=name, server_id=7000 + random.randrange(1000))
    return replace(
        base,
        kafka=replace(base.kafka, topic_prefix=name, partitions=3),
        checkpoint=replace(base.checkpoint, flush_interval_s=0.5),
        avro=AvroSection(schemas_dir=str(tmp / "schemas")),
    )


Messages = list[tuple[str, int, int, bytes | None, bytes]]  # what tests/support/replay.consume returns


def assert_replay_equals_source(
    config: Config, db: str, tables: tuple[str, ...] = ("orders", "order_lines", "events", "docs"),
    messages: Messages | None = None,
) -> Replay:  # fmt: skip
    """The replay of the connector's topics (`messages`, when read already) equals SELECT *."""
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    replay = Replay(reader)
    replay.apply_all(consume(config.kafka.topic_prefix) if messages is None else messages)
    for table in tables:
        try:
            sets = set_columns(reader, db, table)
        except KeyError:  # no schema: no message was written for it, so it must be empty
            with connect(db).cursor() as cur:
                cur.execute(f"SELECT COUNT(*) FROM `{table}`")
                assert cur.fetchone() == (0,), f"{db}.{table}: rows on the server, no message"
            continue
        got = comparable(replay.tables.get((db, table), {}), sets)
        want = comparable(source_rows(db, table, reader), sets)
        assert got == want, f"{db}.{table}: replay differs from SELECT * ({len(got)} vs {len(want)} rows)"
    return replay


def sluice_run(
    config_path: Path, streaming: bool = False, sluice: Sequence[str] = (str(ROOT / ".venv" / "bin" / "sluice"),),
    env: dict[str, str] | None = None, cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """`sluice run` on the config file, its log appended next to it; with `streaming`, returned
    once it streams (a SIGTERM before its handler is installed would end it with -15, not a stop).
    `sluice`, `env`, `cwd`: another way to start it."""
    log = config_path.with_suffix(".log")
    before = log.read_text(errors="replace").count("streaming from") if log.exists() else 0
    with log.open("ab") as err:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [*sluice, "run", "--config", str(config_path)],
            stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=cwd,
        )  # fmt: skip

    if streaming:
        wait_until(lambda: log.read_text(errors="replace").count("streaming from") > before, 60,
                   "`sluice run` to stream", every_s=0.1)  # fmt: skip
    return process


def write_config(config: Config, path: Path) -> None:
    path.write_text(
        f'name = "{config.name}"\n' + source_toml(config.source.server_id)
        + f"include = ['{config.source.include[0]}']\ninclude_query = {str(config.source.include_query).lower()}\n"
        f"[kafka]\ntopic_prefix = \"{config.kafka.topic_prefix}\"\n"
        f'bootstrap_servers = "{config.kafka.bootstrap_servers}"\n'
        f'max_message_bytes = {config.kafka.max_message_bytes}\noversized = "{config.kafka.oversized}"\n'
        f"exactly_once = {str(config.kafka.exactly_once).lower()}\n"
        f'[checkpoint]\ndb_url = "{config.checkpoint.db_url}"\nredis_url = "{config.checkpoint.redis_url}"\n'
        f"flush_interval_s = 0.5\n"
        f'[avro]\nschemas_dir = "{config.avro.schemas_dir}"\n'
    )


def caught_up(config: Config, timeout_s: float = 120) -> None:
    stores = checkpoint_stores(config)
    target = master_position(connect())

    def reached() -> bool:
        saved = stores.fast.get() if stores.fast else None
        return saved is not None and saved.sort_key() >= target.sort_key()

    wait_until(reached, timeout_s, f"the connector to reach {target}", every_s=0.2)


def assert_in_order(replay: Replay) -> int:
    """In every partition, the messages the replay applied (less duplicates re-sent after a
    crash, dropped by their source position as a consumer does) follow the binlog's order;
    returns how many."""
    seen: set[tuple[str, int, int, str]] = set()
    last: dict[tuple[str, int], tuple[tuple[str, int, int], int]] = {}
    for topic, partition, offset, mark in replay.order:
        if mark in seen:
            continue
        seen.add(mark)
        order = (binlog_sort_key(mark[0], mark[1]), mark[2])
        before = last.get((topic, partition))
        assert before is None or before <= order, f"{topic}[{partition}]@{offset}: {mark} after {before}"
        last[(topic, partition)] = order
    return len(seen)
