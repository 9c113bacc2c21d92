"""The schema history stores: one test class, run against the in-memory twin and the table on each server."""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Iterator

import pytest

from connector.checkpointdb import checkpoint_connector
from connector.commands.decode import decode_files
from connector.commands.livetables import schema_from
from connector.position import Position
from connector.schema.history import HistoryRecord, HistoryStore, MariadbHistoryStore, MemoryHistoryStore, rebuild
from connector.schema.model import Column, Table
from tests.support import live
from tests.support.live import admin_url, connect, current_binlog, live_config, row_metadata, server


def table(*names: str) -> Table:
    return Table("db", "t", tuple(Column(n, "int") for n in names), (names[0],))


def at(file_number: int, pos: int) -> Position:
    return Position(f"bin.{file_number:06d}", pos, "0-1-5", 1, 1700000000)


RECORDS = [
    HistoryRecord(at(2, 100), "snapshot", "db", "", {"name": "db", "charset": "utf8mb4", "collation": None}),
    HistoryRecord(at(2, 100), "snapshot", "db", "t", table("id", "a").to_json()),
    HistoryRecord(at(2, 900), "ddl", "db", "t", table("id", "a", "b").to_json(), "ALTER TABLE t ADD b INT"),
    HistoryRecord(at(10, 4), "ddl", "db", "t", None, "DROP TABLE t"),
]


@pytest.fixture(params=["memory", *(pytest.param(name, marks=pytest.mark.live) for name in live.SERVERS)])
def store(request: pytest.FixtureRequest) -> Iterator[HistoryStore]:
    if request.param == "memory":
        yield MemoryHistoryStore()
        return
    live.use(live.SERVERS[request.param])
    name = "history-test"
    connector = checkpoint_connector(live_config([], name=name))
    mariadb = MariadbHistoryStore(connector, name)
    with connector() as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM schema_history WHERE connector = %s", (name,))
    yield mariadb


class TestHistoryStore:
    def test_records_come_back_in_order_and_whole(self, store: HistoryStore) -> None:
        store.append(RECORDS[:2])
        store.append(RECORDS[2:])
        assert store.load() == RECORDS

    def test_the_schema_at_each_position(self, store: HistoryStore) -> None:
        store.append(RECORDS)
        records = store.load()
        assert rebuild(records, at(2, 100)).tables[("db", "t")] == table("id", "a")
        assert rebuild(records, at(2, 899)).tables[("db", "t")] == table("id", "a")
        assert rebuild(records, at(2, 900)).tables[("db", "t")] == table("id", "a", "b")
        assert rebuild(records, at(9, 5000)).tables[("db", "t")] == table("id", "a", "b")  # file 9 < file 10
        assert ("db", "t") not in rebuild(records, at(10, 4)).tables
        assert rebuild(records, at(2, 100)).databases["db"].charset == "utf8mb4"

    def test_renamed_columns_come_back_with_their_earlier_names(self, store: HistoryStore) -> None:
        renamed = Table("db", "t", (Column("id", "int"), Column("c", "int", aliases=("b", "a"))), ("id",))
        records = [RECORDS[1], HistoryRecord(at(3, 50), "ddl", "db", "t", renamed.to_json(), "ALTER TABLE t ...")]
        assert "aliases" not in json.dumps(RECORDS[1].definition)  # as written before renames were followed
        store.append(records)
        assert store.load() == records
        assert rebuild(store.load(), at(2, 100)).tables[("db", "t")] == table("id", "a")
        assert rebuild(store.load(), at(3, 50)).tables[("db", "t")] == renamed


@pytest.mark.live
def test_decode_schema_from_names_columns_of_minimal_metadata_files() -> None:
    conn = connect()
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS minimal")
        cur.execute("CREATE DATABASE minimal")
        cur.execute("CREATE TABLE minimal.t (id INT UNSIGNED PRIMARY KEY, label ENUM('a','b'), note VARCHAR(9))")
    with row_metadata("MINIMAL"), conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        file, _ = current_binlog(conn)
        cur.execute("INSERT INTO minimal.t VALUES (4000000000, 'b', 'ü')")
        cur.execute("FLUSH BINARY LOGS")
    path = str(server().binlog_dir / file)
    plain, named = io.StringIO(), io.StringIO()
    decode_files([path], plain)
    decode_files([path], named, tracker=schema_from(admin_url()))

    row_plain = next(json.loads(line) for line in plain.getvalue().splitlines() if '"INSERT"' in line)
    row_named = next(json.loads(line) for line in named.getvalue().splitlines() if '"INSERT"' in line)
    assert row_plain["data"] == [{"@1": "4000000000", "@2": "2", "@3": "ü"}]  # no names, no labels logged
    assert row_named["data"] == [{"id": "4000000000", "label": "b", "note": "ü"}]
    assert row_named["pkNames"] == ["id"]
    cli = subprocess.run(
        [".venv/bin/sluice", "decode", "--schema-from", "mysql://root@127.0.0.1:1", path],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert cli.returncode == 1 and "cannot connect to 127.0.0.1:1" in cli.stderr
