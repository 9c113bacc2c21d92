"""The initial snapshot on the real services: READ values equal the binlog's, and a snapshot taken
under concurrent writes (and a SIGKILL) replays to exactly the final table."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from connector.avro.encoding import MessageEncoder
from connector.avro.framing import SingleObjectFraming
from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.checkpoint import checkpoint_stores
from connector.config import KeyColumns, SnapshotSection
from connector.errors import ConfigError
from connector.items import Changes
from connector.schema.history import MemoryHistoryStore
from connector.snapshot.reader import ServerChunks
from connector.snapshot.state import SnapshotState
from connector.startup import prepare
from connector.stream import ChangeStream
from tests.support.live import ROOT, connect, fresh_database, live_config, numbers, position_now, wait_until
from tests.support.pipelines import assert_replay_equals_source, caught_up, config_for, sluice_run, write_config
from tests.support.replay import Replay, comparable, consume, set_columns, source_rows
from tests.support.typed import create_typed_tables, typed_columns

pytestmark = pytest.mark.live


def _typed_table(db: str, rows: int, seed: int) -> None:
    fresh_database(db)
    rng = random.Random(seed)
    conn = connect(db)
    with conn.cursor() as cur:
        insert = create_typed_tables(cur)
        for key in range(rows):
            values = [key] + [None if rng.random() < 0.1 else gen(rng) for _, _, gen in typed_columns()]
            cur.execute(insert, values)
            cur.execute("INSERT INTO keyless VALUES (%s, %s)", (key % 7, rng.choice(["x", "yy", None])))
    conn.close()


def test_read_values_equal_what_the_binlog_gives_for_the_same_rows() -> None:
    db = "snaprender"
    fresh_database(db)
    config = replace(live_config([rf"{db}\..*"]), snapshot=SnapshotSection(mode="never"))
    prepared = prepare(config)  # captures the (empty) database: the table comes from the binlog's DDL
    _typed_table(db, 80, seed=5)
    stream = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter())
    logged = {(m["table"], m["data"][0].get("id"), m["data"][0].get("a")): m["data"][0]
              for item in stream.items(prepared.start, blocking=False) if isinstance(item, Changes)
              for m in item.messages if m["type"] == "INSERT"}  # fmt: skip
    chunks = ServerChunks(config.source.settings())
    chunks.open(position_now())
    table = prepared.tracker.schema.get(db, "t")
    assert table is not None
    read = [data for data, _ in chunks.rows(table, None, None)]
    chunks.close()
    assert len(read) == 80
    for data in read:
        assert data == logged[("t", data["id"], None)], data["id"]
    # Paged by key: the chunks together are the table, in key order.
    pages, after = [], None
    chunks.open(position_now())
    while True:
        page = list(chunks.rows(table, after, 7))
        pages += [d["id"] for d, _ in page]
        if len(page) < 7:
            break
        after = page[-1][1]
    chunks.close()
    assert pages == [str(i) for i in range(80)]


def _seed_big(db: str, rows: int) -> None:
    fresh_database(
        db,
        "CREATE TABLE {db}.accounts (id BIGINT PRIMARY KEY, owner VARCHAR(30) NOT NULL, balance DECIMAL(14,2),"
        " opened DATETIME(3), flags SET('a','b','c'))",
        "CREATE TABLE {db}.entries (acct BIGINT, n INT, note VARCHAR(20), PRIMARY KEY (acct, n))",
    )
    conn = connect(db)
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO accounts SELECT seq, CONCAT('owner-', seq % 997), seq / 100, '2024-01-01 00:00:00.123'"
            f" + INTERVAL seq SECOND, IF(seq % 3 = 0, 'a,c', '') FROM {numbers(rows)}"
        )
        cur.execute(f"INSERT INTO entries SELECT seq % 5000, seq, 'l' FROM {numbers(rows // 10)}")

    conn.close()


def _writer(db: str, rows: int, stop: threading.Event, seed: int) -> int:
    """Updates, deletes, inserts and key changes all over the key range until `stop`."""
    rng, conn, done = random.Random(seed), connect(db), 0
    with conn.cursor() as cur:
        while not stop.is_set():
            key = rng.randint(1, rows)
            op = rng.random()
            if op < 0.5:
                cur.execute("UPDATE accounts SET balance = balance + 1, owner = 'moved' WHERE id = %s", (key,))
            elif op < 0.65:
                cur.execute("DELETE FROM accounts WHERE id = %s", (key,))
            elif op < 0.8:
                cur.execute("INSERT IGNORE INTO accounts (id, owner) VALUES (%s, 'new')", (rows + key,))
            elif op < 0.85:
                cur.execute("UPDATE IGNORE accounts SET id = id + %s WHERE id = %s", (2 * rows, key))
            elif op < 0.9:
                # An XA transaction: its rows are logged at PREPARE, decided a moment later. A READ
                # of the key must never overwrite the change its XA COMMIT publishes.
                xid = f"w{seed}-{done}"
                cur.execute(f"XA START '{xid}'")
                cur.execute("UPDATE accounts SET balance = balance - 1, owner = 'xa' WHERE id = %s", (key,))
                cur.execute(f"XA END '{xid}'")
                cur.execute(f"XA PREPARE '{xid}'")
                time.sleep(0.02)
                cur.execute(f"XA {rng.choice(['COMMIT', 'COMMIT', 'ROLLBACK'])} '{xid}'")

            else:
                cur.execute(
                    "UPDATE entries SET note = 'changed', n = n + 1000000 WHERE acct = %s LIMIT 1", (key % 5000,)
                )
            done += 1
            time.sleep(0.002)
    conn.close()
    return done


def _snapshot_left(config: Any) -> SnapshotState:
    saved = checkpoint_stores(config).durable.get()
    return SnapshotState.of_text(saved.snapshot if saved else "")


def _snapshot_done(config: Any) -> bool:
    """A position is saved and no table is left to read."""
    return checkpoint_stores(config).durable.get() is not None and not _snapshot_left(config).tables


def test_snapshot_under_writes_and_a_kill_replays_to_the_final_tables(tmp_path: Path) -> None:
    rows = 200_000
    name, db = f"snap{uuid.uuid4().hex[:6]}", "snapbig"
    _seed_big(db, rows)
    config = replace(config_for(name, db, tmp_path), snapshot=SnapshotSection(chunk_size=4000))
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    path.write_text(path.read_text() + "[snapshot]\nchunk_size = 4000\n")
    stop = threading.Event()
    writes: list[int] = []
    writer = threading.Thread(target=lambda: writes.append(_writer(db, rows, stop, seed=11)))
    writer.start()
    process = sluice_run(path)
    try:
        # Kill it once a part of the snapshot is saved, then start it again.
        wait_until(lambda: 0 < _snapshot_left(config).rows < rows, 180, "a part of the snapshot saved")
        killed_at = _snapshot_left(config)
        process.send_signal(signal.SIGKILL)
        process.wait()
        process = sluice_run(path)
        wait_until(lambda: _snapshot_left(config).rows > killed_at.rows, 180, "the snapshot to resume")
        stop.set()
        writer.join()
        wait_until(lambda: not _snapshot_left(config).tables, 300, "the snapshot to finish")
        caught_up(config)
    finally:
        stop.set()
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    assert writes[0] > 100
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    replay = Replay(reader)
    messages = consume(config.kafka.topic_prefix)
    replay.apply_all(messages)
    for table in ("accounts", "entries"):
        sets = set_columns(reader, db, table)
        got = comparable(replay.tables.get((db, table), {}), sets)
        want = comparable(source_rows(db, table, reader), sets)
        assert got == want, f"{db}.{table}: replay differs from SELECT * ({len(got)} vs {len(want)} rows)"
    reads = sum(1 for t, *_ in messages if t.endswith(".accounts")) - writes[0]
    print(f"killed with {killed_at.rows} rows saved; {writes[0]} writes during the snapshot; ~{reads} READs")


def test_sluice_snapshot_re_reads_a_table_on_demand(tmp_path: Path) -> None:
    name, db = f"resnap{uuid.uuid4().hex[:6]}", "resnap"
    _seed_big(db, 3000)
    config = config_for(name, db, tmp_path)
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    process = sluice_run(path)
    try:
        wait_until(lambda: _snapshot_done(config), 120, "the initial snapshot")
        done = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "sluice"), "snapshot", "--config", str(path), "--tables", f"{db}.entries"],
            check=False, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "requested" in done.stdout
        wait_until(lambda: _snapshot_left(config).request >= 1 and not _snapshot_left(config).tables, 120,
                    "the requested snapshot")  # fmt: skip
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    kinds: dict[str, int] = {}
    server_ids = set()
    for topic, *_, value in consume(config.kafka.topic_prefix):
        message = reader.read(value)[1]
        kind = f"{topic.rsplit('.', 1)[1]} {message['type']}"
        kinds[kind] = kinds.get(kind, 0) + 1
        server_ids.add(message["source"]["server_id"])
    assert kinds == {"accounts READ": 3000, "entries READ": 2 * 300}
    with connect().cursor() as cur:
        cur.execute("SELECT @@server_id")
        assert server_ids == {cur.fetchone()[0]}  # type: ignore[index]  # READs name their server, as rows do

    bad = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "sluice"), "snapshot", "--config", str(path), "--tables", "nope"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode != 0 and "database.table" in bad.stderr


def _keyless_writer(db: str, stop: threading.Event, seed: int) -> int:
    """Inserts, updates and deletes of duplicate-prone rows of the keyless table until `stop`."""
    rng, conn, done = random.Random(seed), connect(db), 0
    with conn.cursor() as cur:
        while not stop.is_set():
            n = rng.randint(1, 50)
            op = rng.random()
            if op < 0.6:
                cur.execute("INSERT INTO bag VALUES (%s, %s)", (n, rng.choice(["x", "y", None])))
            elif op < 0.8:
                cur.execute("UPDATE bag SET note = 'u' WHERE n = %s LIMIT 1", (n,))
            else:
                cur.execute("DELETE FROM bag WHERE n = %s LIMIT 1", (n,))
            done += 1
            time.sleep(0.003)
    conn.close()
    return done


def _bag_replay_equals_source(config: Any, db: str) -> None:
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    replay = Replay(reader)
    replay.apply_all(consume(config.kafka.topic_prefix))
    sets = set_columns(reader, db, "bag")
    got = comparable(replay.tables.get((db, "bag"), []), sets)
    want = comparable(source_rows(db, "bag", reader), sets)
    assert got == want, f"{db}.bag: the replay's multiset differs from SELECT * ({len(got)} vs {len(want)} rows)"


def test_a_keyless_table_written_by_four_writers_snapshots_exactly(tmp_path: Path) -> None:
    """Initial snapshot and a requested one, each under four concurrent writers: the consumer's
    multiset of rows equals SELECT * (READs once, no change both in a READ and in the stream)."""
    name, db = f"bag{uuid.uuid4().hex[:6]}", "bagdb"
    fresh_database(db, "CREATE TABLE {db}.bag (n INT, note VARCHAR(10))")
    with connect(db).cursor() as cur:
        cur.execute(f"INSERT INTO bag SELECT seq % 50, 'seed' FROM {numbers(20_000)}")
    config = config_for(name, db, tmp_path)
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    for round_ in range(2):
        stop = threading.Event()
        writers = [threading.Thread(target=_keyless_writer, args=(db, stop, 10 * round_ + i)) for i in range(4)]
        for w in writers:
            w.start()
        process = sluice_run(path, streaming=True)
        try:
            if round_ == 0:  # the first start: the initial snapshot
                wait_until(lambda: _snapshot_done(config), 120, "the initial snapshot")
            else:
                sluice = str(ROOT / ".venv" / "bin" / "sluice")
                requested = subprocess.run([sluice, "snapshot", "--config", str(path), "--tables", f"{db}.bag"],
                                           check=False, capture_output=True, text=True, timeout=60)  # fmt: skip
                assert requested.returncode == 0, requested.stderr
                wait_until(lambda: _snapshot_left(config).request >= 1 and not _snapshot_left(config).tables, 120,
                           "the requested snapshot")  # fmt: skip
            time.sleep(1)
            stop.set()
            for w in writers:
                w.join()
            caught_up(config)
        finally:
            stop.set()
            process.send_signal(signal.SIGTERM)
            assert process.wait(60) == 0
        _bag_replay_equals_source(config, db)


def _logs_writer(db: str, stop: threading.Event, seed: int) -> None:
    """Inserts (fresh uids), updates and deletes by uid on the keyless `logs` until `stop`."""
    rng, conn, uid = random.Random(seed), connect(db), 1_000_000 * (seed + 1)
    with conn.cursor() as cur:
        while not stop.is_set():
            op = rng.random()
            if op < 0.5:
                uid += 1
                cur.execute("INSERT INTO logs VALUES (%s, %s, %s)", (rng.randint(1, 9), uid, "new"))
            elif op < 0.8:
                note = f"u{rng.randint(1, 99)}"
                cur.execute("UPDATE logs SET note = %s WHERE uid = %s", (note, rng.randint(1, 3000)))
            else:
                cur.execute("DELETE FROM logs WHERE uid = %s", (rng.randint(1, 3000),))
            time.sleep(0.003)
    conn.close()


def test_a_keyless_table_keyed_by_configured_columns_snapshots_in_chunks_under_writers(tmp_path: Path) -> None:
    """[[source.key_columns]]: the table's messages are keyed by the configured unique column,
    its snapshot is read in chunks like a keyed table's while four writers change it, and the
    consumer's replay (by that key) equals SELECT *."""
    name, db = f"keyed{uuid.uuid4().hex[:6]}", "keyeddb"
    fresh_database(db, "CREATE TABLE {db}.logs (level TINYINT, uid INT NOT NULL, note VARCHAR(10), UNIQUE KEY (uid))")
    with connect(db).cursor() as cur:
        cur.execute(f"INSERT INTO logs SELECT seq % 7, seq, 'seed' FROM {numbers(3000)}")
    base = config_for(name, db, tmp_path)
    config = replace(base, source=replace(base.source, key_columns=[KeyColumns(f"{db}.logs", ["uid"])]),
                     snapshot=SnapshotSection(chunk_size=400))  # fmt: skip
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    path.write_text(path.read_text() + f'[snapshot]\nchunk_size = 400\n[[source.key_columns]]\ntable = "{db}.logs"\n'
                    'columns = ["uid"]\n')  # fmt: skip
    stop = threading.Event()
    writers = [threading.Thread(target=_logs_writer, args=(db, stop, i)) for i in range(4)]
    for w in writers:
        w.start()
    process = sluice_run(path, streaming=True)
    try:
        wait_until(lambda: _snapshot_done(config), 120, "the initial snapshot")
        time.sleep(1)
        stop.set()
        for w in writers:
            w.join()
        caught_up(config)
    finally:
        stop.set()
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    messages = [m for m in consume(name) if m[0] == f"{name}.{db}.logs"]
    assert messages and all(key is not None for _, _, _, key, _ in messages)  # every message keyed by uid
    records = [reader.read(value)[1] for *_, value in messages]
    assert {tuple(r["pkNames"]) for r in records} == {("uid",)}
    reads = {(r["source"]["file"], r["source"]["pos"]) for r in records if r["type"] == "READ"}
    assert len(reads) >= 2, "the snapshot was read in one pass, not in chunks"
    assert not any(r["type"] == "TRUNCATE" for r in records)
    replay = Replay(reader)
    replay.apply_all(consume(name))
    assert comparable(replay.tables[(db, "logs")], set()) == comparable(source_rows(db, "logs", reader), set())


def test_key_columns_that_may_not_identify_a_row_are_refused_at_start() -> None:
    fresh_database("keyedbad", "CREATE TABLE {db}.t (a INT NOT NULL, b INT, KEY (a), UNIQUE KEY (b))")
    for columns in (["a"], ["b"]):  # a: not unique; b: unique but nullable
        config = live_config([r"keyedbad\..*"], key_columns=[{"table": "keyedbad.t", "columns": columns}])
        with pytest.raises(ConfigError, match=rf"`keyedbad`.`t` \({columns[0]}\) may not identify one row"):
            prepare(config, MemoryHistoryStore())
    config = live_config([r"keyedbad\..*"], key_columns=[{"table": "keyedbad.t", "columns": ["a", "b"]}])
    with pytest.raises(ConfigError):
        prepare(config, MemoryHistoryStore())  # still no UNIQUE index over NOT NULL columns


@pytest.mark.servers("mysql")
def test_chunks_read_while_commits_linger_between_binlog_and_engine_are_exact(tmp_path: Path) -> None:
    """MySQL writes a transaction to the binlog before its engine commit. With
    binlog_group_commit_sync_delay every commit lingers there for a while, so read views keep
    opening with transactions logged but not yet visible: a window may look like one point and
    still miss one. Many small chunks under three writers (the race the mtls and keyless runs
    once hit by chance): the replay must equal SELECT *."""
    rows = 3000
    name, db = f"linger{uuid.uuid4().hex[:6]}", "lingerdb"
    _seed_big(db, rows)
    config = replace(config_for(name, db, tmp_path), snapshot=SnapshotSection(chunk_size=50))
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    path.write_text(path.read_text() + "[snapshot]\nchunk_size = 50\n")
    stop = threading.Event()
    writes: list[int] = []
    writers = [
        threading.Thread(target=lambda s=s: writes.append(_writer(db, rows, stop, seed=s))) for s in (21, 22, 23)
    ]
    with connect().cursor() as cur:
        cur.execute("SET GLOBAL binlog_group_commit_sync_delay = 20000")  # 20 ms in the sync stage
    try:
        for w in writers:
            w.start()
        process = sluice_run(path)
        try:
            wait_until(lambda: _snapshot_done(config), 300, "the snapshot to finish")
        finally:
            stop.set()
            for w in writers:
                w.join()
        caught_up(config)
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        stop.set()
        with connect().cursor() as cur:
            cur.execute("SET GLOBAL binlog_group_commit_sync_delay = 0")
    assert sum(writes) > 100
    assert_replay_equals_source(config, db, ("accounts", "entries"))


def test_a_key_with_zero_dates_pages_through_every_row_once(tmp_path: Path) -> None:
    """Legacy tables hold zero dates in key columns (written without NO_ZERO_DATE). The chunked
    read pages by the key's values as the server prints them; each row comes once, in key
    order, as the binlog gives it, and each gets its own Avro key (schemas/README.md)."""
    db = "snapzero"
    fresh_database(db)
    config = replace(live_config([rf"{db}\..*"]), snapshot=SnapshotSection(mode="never"))
    prepared = prepare(config)
    conn = connect(db)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("CREATE TABLE zk (d DATE, at DATETIME, n INT, PRIMARY KEY (d, at))")
        days = ["0000-00-00", "2024-00-15", "2024-01-00", "2024-01-01"]
        times = ["0000-00-00 00:00:00", "2024-02-00 10:00:00", "2024-02-01 10:00:00"]
        pairs = [(d, t) for d in days for t in times]
        cur.executemany("INSERT INTO zk VALUES (%s, %s, %s)", [(d, t, n) for n, (d, t) in enumerate(pairs)])
    conn.close()
    stream = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter())
    messages = [m for item in stream.items(prepared.start, blocking=False) if isinstance(item, Changes)
                for m in item.messages if m["type"] == "INSERT"]  # fmt: skip
    logged = [m["data"][0] for m in messages]
    assert len(logged) == 12
    table = prepared.tracker.schema.get(db, "zk")
    assert table is not None
    pages, after = [], None
    chunks = ServerChunks(config.source.settings())
    chunks.open(position_now())
    while True:
        page = list(chunks.rows(table, after, 5))
        pages += [data for data, _ in page]
        if len(page) < 5:
            break
        after = page[-1][1]
    chunks.close()
    assert sorted(pages, key=lambda d: str(d["n"])) == sorted(logged, key=lambda d: str(d["n"]))
    assert [(d["d"], d["at"]) for d in pages] == sorted((str(d["d"]), str(d["at"])) for d in logged)  # key order
    encoder = MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming())
    keys = {encoder.row({**messages[0], "data": [data]}, table, "t")[0] for data in pages}
    assert len(keys) == 12 and None not in keys
