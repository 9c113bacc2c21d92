"""The replica client against the live servers: resume, reconnects, rotation, purge, checks, schema history."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pymysql
import pytest

from connector.checkpointdb import checkpoint_connector
from connector.errors import (
    BinlogPositionLostError,
    SchemaMismatchError,
    ServerConfigError,
    ServerIdConflictError,
    SourceUnavailableError,
)
from connector.filters import TableFilter
from connector.items import Changes, Commit, Heartbeat, StreamItem
from connector.position import MariadbGtidState, MysqlGtidSet, Position
from connector.replica import packets
from connector.replica.client import BinlogDump, SourceSettings, check_server, open_connection
from connector.replica.server import master_position
from connector.schema.history import MariadbHistoryStore, MemoryHistoryStore
from connector.schema.model import Column
from connector.startup import prepare
from connector.stream import ChangeStream, gtid_state_at
from tests.support.live import (
    ROOT,
    RUN,
    connect,
    fresh_database,
    last_gtid,
    live_config,
    position_now,
    replica_ids,
    replica_listing,
    server,
    services_toml,
    source_settings,
    source_toml,
    wait_until,
)
from tests.support.streams import FAST, Consumer, collect, run_to

pytestmark = pytest.mark.live


def workload(
    db: str, transactions: int, seed: int, pause_s: float = 0, first_id: int = 1
) -> dict[str, list[tuple[str, str]]]:
    """Random transactions of 1-4 statements; returns GTID -> the (type, id) of each row change."""
    rng = random.Random(seed)
    conn = connect(db)
    expected: dict[str, list[tuple[str, str]]] = {}
    next_id = first_id
    with conn.cursor() as cur:
        for _ in range(transactions):
            cur.execute("BEGIN")
            changes = []
            for _ in range(rng.randint(1, 4)):
                ids = list(range(next_id, next_id + rng.randint(1, 3)))
                next_id += len(ids)
                cur.executemany("INSERT INTO items VALUES (%s, %s)", [(i, rng.randrange(100)) for i in ids])
                changes += [("INSERT", str(i)) for i in ids]
                if rng.random() < 0.3:
                    cur.execute("UPDATE items SET n = n + 1 WHERE id = %s", (ids[0],))
                    changes.append(("UPDATE", str(ids[0])))
            cur.execute("COMMIT")
            expected[last_gtid(conn)] = changes
            time.sleep(pause_s)
    conn.close()
    return expected


def stream(db: str, tracker_prep: Any, **kwargs: Any) -> ChangeStream:
    config = live_config([rf"{db}\..*"], **kwargs)
    return ChangeStream(config.source.settings(), tracker_prep.tracker, config.table_filter(), FAST)


ITEMS = "CREATE TABLE {db}.items (id INT PRIMARY KEY, n INT)"


def test_stop_and_resume_anywhere_delivers_each_transaction_once() -> None:
    fresh_database("resume", ITEMS)
    prepared = prepare(live_config([r"resume\..*"]), MemoryHistoryStore())
    expected = workload("resume", 60, seed=1)
    end = master_position(connect())
    consumer = Consumer()
    position = prepared.start
    rng = random.Random(7)
    restarts = 0
    while consumer.last is None or consumer.last.sort_key() < end.sort_key():
        items = stream("resume", prepared).items(position, blocking=False)
        budget = rng.randint(1, 12)  # stop after this many items: at a boundary or inside a transaction
        for item in items:
            consumer.take(item)
            budget -= 1
            if budget == 0 or (isinstance(item, Commit) and item.position.sort_key() >= end.sort_key()):
                break
        items.close()
        consumer.drop_partial()  # uncommitted changes die with the stopped client
        assert consumer.last is not None
        position = consumer.last
        restarts += 1
    assert restarts > 10
    assert consumer.duplicates == []
    assert consumer.committed == expected


def dump_thread_ids() -> list[int]:
    with connect().cursor() as cur:
        cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
        return [int(r[0]) for r in cur.fetchall()]


def test_server_side_kill_reconnects_without_loss_or_repeat() -> None:
    fresh_database("killed", ITEMS)
    prepared = prepare(live_config([r"killed\..*"]), MemoryHistoryStore())
    written: dict[str, list[tuple[str, str]]] = {}
    writer = threading.Thread(target=lambda: written.update(workload("killed", 40, seed=2, pause_s=0.05)))
    source = stream("killed", prepared)
    items = source.items(prepared.start)
    consumer = Consumer()
    kills = 0
    writer.start()
    for item in items:
        consumer.take(item)
        if isinstance(item, Changes) and len(consumer.committed) >= 8 * (kills + 1) and kills < 3:
            for thread in dump_thread_ids():  # kill the dump thread in the middle of a transaction
                connect().cursor().execute(f"KILL {thread}")
            kills += 1
        if not writer.is_alive() and len(consumer.committed) == len(written):
            break
    items.close()
    writer.join()
    assert kills == 3 and source.reconnects >= 3
    assert consumer.duplicates == []
    assert consumer.committed == written


def test_binlog_rotation_and_server_restart_are_followed() -> None:
    fresh_database("restart", ITEMS)
    prepared = prepare(live_config([r"restart\..*"]), MemoryHistoryStore())
    source = stream("restart", prepared)
    items = source.items(prepared.start)
    consumer = Consumer()
    expected = workload("restart", 5, seed=3)
    conn = connect()
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
    conn.close()
    expected_more: dict[str, list[tuple[str, str]]] = {}
    for item in items:
        consumer.take(item)
        if len(consumer.committed) == len(expected) and not expected_more:
            rotated_to = master_position(connect()).file
            server().restart()
            expected_more = workload("restart", 5, seed=4, first_id=1000)
            end = master_position(connect())
        if expected_more and isinstance(item, Commit) and item.position.sort_key() >= end.sort_key():
            break
    items.close()
    assert source.reconnects >= 1
    assert consumer.duplicates == []
    assert consumer.committed == {**expected, **expected_more}
    assert consumer.last is not None and consumer.last.sort_key() > Position(rotated_to, 4).sort_key()


def test_purged_binlog_is_fatal_with_the_way_out() -> None:
    # A dump thread whose client left lingers until its next write and keeps its file from PURGE.
    for thread in dump_thread_ids():
        connect().cursor().execute(f"KILL {thread}")
    deadline = time.monotonic() + 10
    while dump_thread_ids() and time.monotonic() < deadline:
        time.sleep(0.1)
    conn = connect()
    old = master_position(conn)
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        current = master_position(conn)
        # MariaDB keeps a file until its binlog checkpoint is written: PURGE until it is gone.
        for _ in range(100):
            cur.execute("PURGE BINARY LOGS TO %s", (current.file,))
            cur.execute("SHOW BINARY LOGS")
            if old.file not in [row[0] for row in cur.fetchall()]:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"PURGE kept {old.file}")
    conn.close()
    source = ChangeStream(source_settings(), prepare(live_config([r"none\..*"]), MemoryHistoryStore()).tracker,
                          TableFilter.of([r"none\..*"], None), FAST)  # fmt: skip
    with pytest.raises(BinlogPositionLostError) as info:
        next(source.items(old, blocking=False))
    message = str(info.value)
    assert str(old) in message and f"oldest binlog is {current.file}:4" in message
    assert "earliest" in message and "current" in message and "re-snapshot" in message
    assert source.reconnects == 0  # fatal: never retried


def test_events_larger_than_16_mib_arrive_whole() -> None:
    fresh_database("bigrow", "CREATE TABLE {db}.blobs (id INT PRIMARY KEY, b LONGBLOB)")
    prepared = prepare(live_config([r"bigrow\..*"]), MemoryHistoryStore())
    payload = bytes(random.Random(5).randrange(256) for _ in range(256)) * (20 * 4096 + 7)  # ~20 MiB
    conn = connect("bigrow")
    with conn.cursor() as cur:
        cur.execute("INSERT INTO blobs VALUES (1, %s)", (payload,))
    end = master_position(conn)
    consumer_rows: list[str] = []
    for item in stream("bigrow", prepared).items(prepared.start, blocking=False):
        if isinstance(item, Changes):
            consumer_rows += [m["data"][0]["b"] for m in item.messages]
        if isinstance(item, Commit) and item.position.sort_key() >= end.sort_key():
            break
    assert len(consumer_rows) == 1
    got = consumer_rows[0].encode("latin-1")
    assert len(got) == len(payload) > 0xFFFFFF
    assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()


# -- server checks ------------------------------------------------------------------------


def set_global(name: str, value: str) -> str:
    with connect().cursor() as cur:
        cur.execute(f"SELECT @@global.{name}")
        row = cur.fetchone()
        assert row is not None
        cur.execute(f"SET GLOBAL {name} = %s", (value,))
    return str(row[0])


@pytest.mark.parametrize(
    ("variable", "value", "advice"),
    [("binlog_format", "STATEMENT", "SET GLOBAL binlog_format = 'ROW'"),
     ("binlog_row_image", "MINIMAL", "SET GLOBAL binlog_row_image = 'FULL'")],
)  # fmt: skip
def test_server_check_names_the_setting(variable: str, value: str, advice: str) -> None:
    old = set_global(variable, value)
    try:
        with pytest.raises(ServerConfigError, match=advice.replace("(", r"\(")):
            check_server(open_connection(source_settings()), source_settings())
    finally:
        set_global(variable, old)


def test_server_check_names_missing_privileges_and_refuses_bad_passwords() -> None:
    with connect().cursor() as cur:
        cur.execute("DROP USER IF EXISTS 'weak'@'%'")
        cur.execute("CREATE USER 'weak'@'%' IDENTIFIED BY 'pw'")
        cur.execute("GRANT SELECT ON *.* TO 'weak'@'%'")
    weak = SourceSettings(port=source_settings().port, user="weak", password="pw", server_id=6100)
    with pytest.raises(ServerConfigError, match="lacks REPLICATION SLAVE, REPLICATION CLIENT"):
        check_server(open_connection(weak), weak)
    wrong = SourceSettings(port=source_settings().port, user="weak", password="nope", server_id=6100)
    with pytest.raises(ServerConfigError, match="Access denied"):
        open_connection(wrong)
    with connect().cursor() as cur:
        cur.execute("SELECT @@server_id")
        row = cur.fetchone()
    assert row is not None
    own = replace(source_settings(), server_id=int(row[0]))
    with pytest.raises(ServerConfigError, match=f"server_id {row[0]} is the source's own"):
        check_server(open_connection(own), own)


def test_server_id_conflict_is_reported() -> None:
    other = pymysql.connect(host="127.0.0.1", port=source_settings().port, user="root", password="")
    # another replica registers server_id 6200 under its own name
    other._write_bytes(packets.frame(packets.register_slave(6200, "other-replica")))  # type: ignore[attr-defined]
    reply = packets.PacketReader(other._read_bytes)  # type: ignore[attr-defined]
    reply.reset(0)
    assert reply.read_payload()[:1] == b"\x00"  # OK: registered
    start = master_position(connect())
    try:
        # MariaDB lists replicas only to REPLICATION MASTER ADMIN (the README's optional grant)
        conflict = pytest.raises(ServerIdConflictError, match="server_id 6200 is already used by the replica at other")
        with replica_listing(), conflict:
            BinlogDump(replace(source_settings(), server_id=6200), start).open()
    finally:
        other.close()


def register_replica(server_id: int, host: str) -> pymysql.connections.Connection:
    """A connection registered as a replica (COM_REGISTER_SLAVE), as long as it stays open."""
    other = pymysql.connect(host="127.0.0.1", port=source_settings().port, user="root", password="")
    other._write_bytes(packets.frame(packets.register_slave(server_id, host)))  # type: ignore[attr-defined]
    reply = packets.PacketReader(other._read_bytes)  # type: ignore[attr-defined]
    reply.reset(0)
    assert reply.read_payload()[:1] == b"\x00"  # OK: registered
    return other


def test_a_crashed_sluice_still_registered_is_waited_out_and_a_live_one_is_a_conflict() -> None:
    # A restart right after a SIGKILL meets the dead process's registration (it lasts until the
    # server's next write to that dump fails): not a conflict, or the connector crash-loops.
    with replica_listing():
        _crashed_then_live()


def _crashed_then_live() -> None:
    start = master_position(connect())
    dying = register_replica(6201, "sluice-oldhost-4242-deadbeef")
    threading.Timer(1.5, dying.close).start()
    began = time.monotonic()
    dump = BinlogDump(replace(source_settings(), server_id=6201), start)
    dump.open()
    dump.close()
    assert time.monotonic() - began >= 1.0  # it waited for the old registration to go
    alive = register_replica(6202, "sluice-otherhost-7-cafe")  # another Sluice, running: a conflict
    try:
        with pytest.raises(ServerIdConflictError, match="server_id 6202 is already used by the replica at sluice-"):
            BinlogDump(replace(source_settings(), server_id=6202, heartbeat_s=0.5), start).open()
    finally:
        alive.close()


# -- schema history ---------------------------------------------------------------------


def clear_history(name: str) -> None:
    config = live_config([], name=name)
    connect_meta = checkpoint_connector(config)
    MariadbHistoryStore(connect_meta, name)
    with connect_meta() as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM schema_history WHERE connector = %s", (name,))


def test_replay_from_before_an_alter_uses_the_names_of_that_time() -> None:
    name = "ddl-replay"
    clear_history(name)
    fresh_database("replay", "CREATE TABLE {db}.t (id INT PRIMARY KEY, a VARCHAR(5), b INT, c INT)")
    config = live_config([r"replay\..*"], name=name)
    first = prepare(config)  # captures and records the snapshot in sluice_meta.schema_history
    conn = connect("replay")
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 'old', 2, 3)")
        before_alter = master_position(conn)
        cur.execute(
            "ALTER TABLE t ADD COLUMN d DATE FIRST, DROP COLUMN b, RENAME COLUMN a TO alpha, MODIFY c INT AFTER d"
        )
        cur.execute("INSERT INTO t VALUES ('2020-01-01', 9, 2, 'new')")
    end = master_position(conn)
    live = collect(ChangeStream(config.source.settings(), first.tracker, config.table_filter(), FAST), first.start, end)
    rows = [m["data"][0] for m in live if m["type"] == "INSERT"]
    assert rows == [
        {"id": "1", "a": "old", "b": "2", "c": "3"},
        {"d": "2020-01-01", "c": "9", "id": "2", "alpha": "new"},
    ]
    # A new process: the schema comes back from the history as of the resume position.
    again = prepare(config, resume=before_alter)
    assert [c.name for c in again.tracker.schema.tables[("replay", "t")].columns] == ["id", "a", "b", "c"]
    replayed = collect(ChangeStream(config.source.settings(), again.tracker, config.table_filter(), FAST),
                       before_alter, end)  # fmt: skip
    assert [m["data"][0] for m in replayed if m["type"] == "INSERT"] == rows[1:]
    history = MariadbHistoryStore(checkpoint_connector(config), name).load()
    assert [r.kind for r in history if r.table == "t"] == ["snapshot", "ddl"]
    assert history[-1].statement.startswith("ALTER TABLE t ADD COLUMN d")


def test_table_map_disagreeing_with_the_history_is_an_error_with_both_sides() -> None:
    fresh_database("mismatch", "CREATE TABLE {db}.t (id INT PRIMARY KEY, a INT)")
    prepared = prepare(live_config([r"mismatch\..*"]), MemoryHistoryStore())
    table = prepared.tracker.schema.tables[("mismatch", "t")]
    wrong = type(table)(table.database, table.name, (*table.columns, Column("ghost", "int")), table.primary_key)
    prepared.tracker.schema.put(wrong)
    conn = connect("mismatch")
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 2)")
    end = master_position(conn)
    with pytest.raises(SchemaMismatchError) as info:
        collect(stream("mismatch", prepared), prepared.start, end)
    message = str(info.value)
    # (names on the TABLE_MAP's side only where the server logs them: binlog_row_metadata=FULL)
    assert "tracked 3 (id, a, ghost), TABLE_MAP 2" in message

    assert info.value.file == prepared.start.file and info.value.pos > prepared.start.pos


def oracle_alter(conn: pymysql.connections.Connection) -> None:
    """A statement MariaDB accepts and Sluice does not read: VARCHAR2 is a sql_mode=ORACLE type."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ORACLE'")
        cur.execute("ALTER TABLE t ADD q VARCHAR2(10)")
        cur.execute("SET SESSION sql_mode = DEFAULT")


@pytest.mark.servers("mariadb")  # sql_mode=ORACLE
def test_ddl_the_parser_cannot_read_stops_only_its_table_until_told(tmp_path: Any) -> None:
    """The default: the rows of the table it names stop `sluice tail` with one line saying how
    to go on; the other table's rows before it flow; `sluice schema set --from-server` records
    the definition at the statement, and a start from before it reads the rows by it."""
    name = "unreadable-ddl"
    clear_history(name)
    fresh_database("oracle", "CREATE TABLE {db}.t (id INT PRIMARY KEY)", "CREATE TABLE {db}.u (id INT PRIMARY KEY)")
    config = tmp_path / "sluice.toml"
    # No [kafka]: neither `tail` nor `schema set` uses it, so neither asks for it.
    config.write_text(f'name = "{name}"\n' + source_toml(6310) + 'include = ["oracle\\\\..*"]\n'
                      + services_toml(name, kafka=False))  # fmt: skip
    sluice = str(ROOT / ".venv" / "bin" / "sluice")
    first = subprocess.Popen([sluice, "tail", "--config", str(config)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    wait_until(lambda: 6310 in replica_ids(), 30, "`sluice tail` to register as replica 6310", every_s=0.2)
    before = position_now()
    conn = connect("oracle")
    oracle_alter(conn)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO u VALUES (1)")
        cur.execute("INSERT INTO t VALUES (2, 'x')")
    out, err = first.communicate(timeout=60)
    assert first.returncode == 1
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(m["table"], m["type"], m["data"]) for m in lines] == [("t", "ALTER", None), ("u", "INSERT", [{"id": "1"}])]
    stop = err.strip().splitlines()[-1]
    assert stop.startswith("sluice: UnreadableDdlError: ") and "rows of `oracle`.`t`" in stop
    assert "ADD q VARCHAR2(10)" in stop and "sluice schema set oracle.t --from-server" in stop
    assert "Traceback" not in err

    told = subprocess.run([sluice, "schema", "set", "oracle.t", "--from-server", "--config", str(config)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert told.returncode == 0, told.stderr
    assert told.stdout.startswith("oracle.t (id, q) as of ")
    second = subprocess.Popen([sluice, "tail", "--config", str(config), "--start", f"{before.file}:{before.pos}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert second.stdout is not None
        rows = [json.loads(second.stdout.readline()) for _ in range(3)]
    finally:
        second.terminate()
        second.wait(10)
    assert [(r["table"], r["data"]) for r in rows[1:]] == [("u", [{"id": "1"}]), ("t", [{"id": "2", "q": "x"}])]


@pytest.mark.servers("mariadb")  # sql_mode=ORACLE
def test_ddl_the_parser_cannot_read_refreshes_the_table_with_the_opt_in() -> None:
    fresh_database("oracle", "CREATE TABLE {db}.t (id INT PRIMARY KEY)")
    prepared = prepare(live_config([r"oracle\..*"], unreadable_ddl="refresh"), MemoryHistoryStore())
    conn = connect("oracle")
    oracle_alter(conn)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 'x')")
    end = master_position(conn)
    messages = collect(stream("oracle", prepared), prepared.start, end)
    assert [m["data"][0] for m in messages if m["type"] == "INSERT"] == [{"id": "1", "q": "x"}]
    store = prepared.tracker.store
    assert isinstance(store, MemoryHistoryStore)
    assert [r.kind for r in store.records if r.table == "t"] == ["snapshot", "refresh"]


def test_sluice_tail_streams_json_lines(tmp_path: Any) -> None:
    fresh_database("tailed", ITEMS)
    config = tmp_path / "sluice.toml"
    config.write_text(
        'name = "tail-test"\n' + source_toml(6300) + 'include = ["tailed\\\\..*"]\n' + services_toml("tail-test")
    )
    process = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "sluice"), "tail", "--config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: 6300 in replica_ids(), 30, "`sluice tail` to register as replica 6300", every_s=0.2)
        with connect("tailed").cursor() as cur:
            cur.execute("INSERT INTO items VALUES (1, 10), (2, 20)")
        assert process.stdout is not None
        lines = [process.stdout.readline(), process.stdout.readline()]
    finally:
        process.terminate()
        process.wait(10)
    rows = [json.loads(line) for line in lines]
    assert [(r["table"], r["type"], r["data"]) for r in rows] == [
        ("items", "INSERT", [{"id": "1", "n": "10"}]), ("items", "INSERT", [{"id": "2", "n": "20"}]),
    ]  # fmt: skip


def test_tls_connection_is_verified_and_streams() -> None:
    ca = str(RUN / "tls" / "ca.pem")
    fresh_database("tls", ITEMS)
    config = live_config([r"tls\..*"], ssl_ca=ca)
    with open_connection(config.source.settings()) as conn, conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        row = cur.fetchone()
    assert row is not None and row[1], "the connection is not encrypted"
    prepared = prepare(config, MemoryHistoryStore())
    expected = workload("tls", 5, seed=9)
    end = master_position(connect())
    consumer = Consumer()
    source = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(), FAST)
    run_to(source.items(prepared.start, blocking=False), consumer, end)
    assert consumer.committed == expected
    wrong_ca = replace(source_settings(), ssl_ca=str(RUN / "tls" / "server.pem"))
    with pytest.raises(SourceUnavailableError, match="certificate verify failed"):
        open_connection(wrong_ca)


def contains(gtid_set: str, gtid: str) -> bool:
    state = MariadbGtidState.parse(gtid_set) if server().mariadb else MysqlGtidSet.parse(gtid_set)
    return state.contains(gtid)


def test_gtid_start_and_positions_carry_gtid_state() -> None:
    fresh_database("gtids", ITEMS)
    prepared = prepare(live_config([r"gtids\..*"]), MemoryHistoryStore())
    first = workload("gtids", 3, seed=10)
    end = master_position(connect())
    consumer = Consumer()
    run_to(stream("gtids", prepared).items(prepared.start, blocking=False), consumer, end)
    assert consumer.last is not None and contains(consumer.last.gtid_set, list(first)[-1])
    # Resume by GTID alone: no file, no position.
    second = workload("gtids", 3, seed=11, first_id=500)
    end = master_position(connect())
    by_gtid = Consumer()
    gtid_stream = stream("gtids", prepared, use_gtid=True)
    run_to(gtid_stream.items(Position("", 4, consumer.last.gtid_set), blocking=False), by_gtid, end)
    assert by_gtid.committed == second


def test_heartbeats_move_an_idle_position() -> None:
    fresh_database("idle", ITEMS)
    prepared = prepare(live_config([r"idle\..*"]), MemoryHistoryStore())
    workload("idle", 1, seed=12)
    items = stream("idle", prepared).items(prepared.start)
    seen: list[StreamItem] = []
    started = time.monotonic()
    for item in items:
        seen.append(item)
        if sum(isinstance(i, Heartbeat) for i in seen) >= 2 or time.monotonic() - started > 20:
            break
    items.close()
    beats = [i for i in seen if isinstance(i, Heartbeat)]
    commit = next(i for i in seen if isinstance(i, Commit))
    assert len(beats) >= 2
    assert all(b.position.sort_key() >= commit.position.sort_key() for b in beats)


# -- XA transactions ------------------------------------------------------------------------


def forget_prepared_xa() -> None:
    """Roll back prepared XA transactions an interrupted run left: they outlive sessions and
    restarts, and their locks would block this run's DROP DATABASE."""
    with connect().cursor() as cur:
        cur.execute("XA RECOVER")
        for format_id, gtrid_length, _, data in cur.fetchall():
            raw = data if isinstance(data, bytes) else str(data).encode()
            gtrid, bqual = raw[: int(gtrid_length)], raw[int(gtrid_length) :]
            cur.execute(f"XA ROLLBACK X'{gtrid.hex()}',X'{bqual.hex()}',{int(format_id)}")


def xa(cur: Any, xid: str, *statements: str, decide: str | None = None) -> None:
    """XA START .. XA PREPARE on one session; `decide` then "COMMIT" or "ROLLBACK" (or "ONE PHASE")."""
    cur.execute(f"XA START '{xid}'")
    for statement in statements:
        cur.execute(statement)
    cur.execute(f"XA END '{xid}'")
    if decide == "ONE PHASE":
        cur.execute(f"XA COMMIT '{xid}' ONE PHASE")
        return
    cur.execute(f"XA PREPARE '{xid}'")
    if decide is not None:
        cur.execute(f"XA {decide} '{xid}'")


def published(items: Iterator[StreamItem], end: Position) -> tuple[list[tuple[str, str, int]], Position]:
    """(type, id, source pos) of each row handed on with a committed transaction, until `end`."""
    out: list[tuple[str, str, int]] = []
    pending: list[tuple[str, str, int]] = []
    last = None
    for item in items:
        if isinstance(item, Changes):
            pending += [(m["type"], m["data"][0]["id"], m["source"]["pos"]) for m in item.messages]
        elif item.position is not None:  # no lanes: no Burst, whose position may be None
            out += pending
            pending, last = [], item.position
            if item.position.sort_key() >= end.sort_key():
                break
    assert last is not None
    return out, last


def test_xa_rows_are_published_when_committed_and_never_when_rolled_back() -> None:
    forget_prepared_xa()
    fresh_database("xa", ITEMS)
    prepared = prepare(live_config([r"xa\..*"]), MemoryHistoryStore())
    sessions = [connect("xa") for _ in range(3)]  # MariaDB keeps a prepared XA attached to its session
    a, b, c = (s.cursor() for s in sessions)
    xa(a, "x1", "INSERT INTO items VALUES (1, 1)")  # prepared: its rows are in the binlog already
    xa(b, "x2", "INSERT INTO items VALUES (2, 2)")
    c.execute("INSERT INTO items VALUES (3, 3)")  # committed while both are undecided
    a.execute("XA COMMIT 'x1'")
    b.execute("XA ROLLBACK 'x2'")
    xa(c, "x3", "INSERT INTO items VALUES (4, 4)", decide="ONE PHASE")
    end = master_position(sessions[0])
    rows, _ = published(stream("xa", prepared).items(prepared.start, blocking=False), end)
    assert [(kind, key) for kind, key, _ in rows] == [("INSERT", "3"), ("INSERT", "1"), ("INSERT", "4")]
    # x1's row carries its XA COMMIT's position: after the row committed before it.
    assert rows[1][2] > rows[0][2]


def test_a_restart_between_prepare_and_commit_still_publishes_the_rows_once() -> None:
    forget_prepared_xa()
    fresh_database("xarestart", ITEMS)
    prepared = prepare(live_config([r"xarestart\..*"]), MemoryHistoryStore())
    held = connect("xarestart")
    other = connect("xarestart").cursor()
    xa(held.cursor(), "r1", "INSERT INTO items VALUES (1, 1)", "UPDATE items SET n = 5 WHERE id = 1")
    other.execute("INSERT INTO items VALUES (2, 2)")
    middle = master_position(held)
    first, stopped_at = published(stream("xarestart", prepared).items(prepared.start, blocking=False), middle)
    assert [key for _, key, _ in first] == ["2"]
    assert stopped_at.xa, "the position handed on must say where the undecided XA transaction begins"
    server().restart()  # the prepared transaction survives the server's restart, undecided
    resumed = connect("xarestart")
    with resumed.cursor() as cur:
        cur.execute("XA COMMIT 'r1'")
        cur.execute("INSERT INTO items VALUES (3, 3)")
    end = master_position(resumed)
    # A new connector process: it resumes from the saved position alone, schema from the history.
    again = prepare(live_config([r"xarestart\..*"]), prepared.tracker.store, resume=stopped_at)
    rows, last = published(stream("xarestart", again).items(stopped_at, blocking=False), end)
    assert [(kind, key) for kind, key, _ in rows] == [("INSERT", "1"), ("UPDATE", "1"), ("INSERT", "3")]
    assert not last.xa


# -- GTIDs ---------------------------------------------------------------------------------


def test_a_gtid_resume_after_a_current_start_sends_nothing_from_before_it() -> None:
    fresh_database("gtidhist", ITEMS)
    workload("gtidhist", 20, seed=21)  # history from before the connector's first start
    config = live_config([r"gtidhist\..*"], use_gtid=True, start="current")
    prepared = prepare(config, MemoryHistoryStore())
    seen = workload("gtidhist", 5, seed=22, first_id=1000)
    end = master_position(connect())
    first = Consumer()
    source = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(), FAST)
    run_to(source.items(prepared.start, blocking=False), first, end)
    assert first.committed == seen and first.last is not None
    later = workload("gtidhist", 5, seed=23, first_id=2000)
    end = master_position(connect())
    # Resume by the GTID set alone, as after a restart with use_gtid: only what came after.
    resumed = Consumer()
    source = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(), FAST)
    run_to(source.items(Position("", 4, first.last.gtid_set), blocking=False), resumed, end)
    assert resumed.committed == later


@pytest.mark.servers("mysql")
def test_tagged_gtids_stream_and_resume() -> None:
    fresh_database("tagged", ITEMS)
    config = live_config([r"tagged\..*"], use_gtid=True)
    prepared = prepare(config, MemoryHistoryStore())
    conn = connect("tagged")
    with conn.cursor() as cur:
        cur.execute("SET gtid_next = 'AUTOMATIC:batch_a'")
        cur.execute("INSERT INTO items VALUES (1, 1)")
        cur.execute("SET gtid_next = 'AUTOMATIC'")
        cur.execute("INSERT INTO items VALUES (2, 2)")
    end = master_position(conn)
    first = Consumer()
    source = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(), FAST)
    run_to(source.items(prepared.start, blocking=False), first, end)
    assert first.last is not None
    tagged, untagged = first.committed  # uuid:batch_a:N, then uuid:M
    assert tagged.split(":")[1] == "batch_a" and untagged.count(":") == 1
    assert ":batch_a:" in first.last.gtid_set
    with conn.cursor() as cur:
        cur.execute("SET gtid_next = 'AUTOMATIC:batch_b'")
        cur.execute("INSERT INTO items VALUES (3, 3)")
    end = master_position(conn)
    resumed = Consumer()
    source = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(), FAST)
    run_to(source.items(Position("", 4, first.last.gtid_set), blocking=False), resumed, end)
    ((gtid, rows),) = resumed.committed.items()
    assert rows == [("INSERT", "3")] and ":batch_b:" in gtid


def test_a_checkpoint_user_without_create_is_told_what_to_grant() -> None:
    with connect().cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS ck_meta")
        cur.execute("DROP USER IF EXISTS 'ck'@'127.0.0.1'")
        cur.execute("CREATE USER 'ck'@'127.0.0.1' IDENTIFIED BY 'ck-pw'")
        cur.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ck_meta.* TO 'ck'@'127.0.0.1'")
        # The checkpoint database is on the source: its writes must stay out of the binlog.
        quiet = "BINLOG ADMIN" if server().mariadb else "SESSION_VARIABLES_ADMIN"
        cur.execute(f"GRANT {quiet} ON *.* TO 'ck'@'127.0.0.1'")
    url = f"mysql://ck:ck-pw@127.0.0.1:{server().port}/ck_meta"
    base = live_config([r"none\..*"], name="ck-test")
    config = replace(base, checkpoint=replace(base.checkpoint, db_url=url))
    grant = "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER"
    with pytest.raises(ServerConfigError, match=rf"ck_meta: Access denied .*{grant}"):
        prepare(config, None)
    with connect().cursor() as cur:
        cur.execute("CREATE DATABASE ck_meta")
    with pytest.raises(ServerConfigError, match=rf"CREATE command denied .*{grant}"):
        prepare(config, None)
    with connect().cursor() as cur:
        cur.execute("GRANT CREATE, ALTER ON ck_meta.* TO 'ck'@'127.0.0.1'")
    assert prepare(config, None).captured


def test_an_xa_commit_whose_prepare_came_before_the_start_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    forget_prepared_xa()
    fresh_database("xaearly", ITEMS, "CREATE TABLE {db}.skipped (id INT PRIMARY KEY)")

    early = connect("xaearly")
    xa(early.cursor(), "early", "INSERT INTO items VALUES (1, 1)")  # prepared before the connector starts
    config = live_config([r"xaearly\.items"])
    prepared = prepare(config, MemoryHistoryStore())
    late = connect("xaearly")
    xa(late.cursor(), "late", "INSERT INTO skipped VALUES (1)", decide="COMMIT")  # a table not captured
    early.cursor().execute("XA COMMIT 'early'")
    end = master_position(late)
    with caplog.at_level("WARNING", logger="sluice.stream"):
        source = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(), FAST)
        rows, _ = published(source.items(prepared.start, blocking=False), end)

    assert rows == []
    warned = [r.getMessage() for r in caplog.records if "XA COMMIT" in r.getMessage()]
    assert len(warned) == 1 and "X'6561726c79'" in warned[0] and "re-snapshot" in warned[0]


def test_the_gtid_state_of_a_position_is_the_servers_at_that_moment() -> None:
    fresh_database("gtidstate", ITEMS)
    workload("gtidstate", 5, seed=31)
    settings = source_settings()
    with open_connection(settings) as conn:
        info = check_server(conn, settings)
    conn = connect()
    with conn.cursor() as cur:
        here = master_position(conn)
        cur.execute("SELECT @@global.gtid_binlog_pos" if server().mariadb else "SELECT @@global.gtid_executed")
        row = cur.fetchone()
    assert row is not None
    state = gtid_state_at(settings, info, here)
    if server().mariadb:
        assert MariadbGtidState.parse(state) == MariadbGtidState.parse(str(row[0]))
    else:
        assert MysqlGtidSet.parse(state) == MysqlGtidSet.parse(str(row[0]))
        # A later transaction is not in the state of the position before it.
        workload("gtidstate", 1, seed=32, first_id=100)
        assert not MysqlGtidSet.parse(state).contains(last_gtid(connect()))
