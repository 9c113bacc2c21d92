"""Transaction boundaries over real binlog files from the corpus (MySQL 5.7 and 8.0)."""

from __future__ import annotations

import pytest

from connector.assembler import TransactionAssembler, statement_logged_change
from connector.binlog import constants as c
from connector.binlog.events import Event, EventHeader, HeartbeatEvent, QueryEvent, QueryStatus, RotateEvent
from connector.binlog.file import iter_file_events
from connector.binlog.parser import BinlogParser
from connector.filters import TableFilter
from connector.items import Changes, Commit, Heartbeat
from connector.position import MysqlGtidSet, Position
from connector.querytext import QueryText
from connector.schema.history import MemoryHistoryStore
from connector.schema.tracker import SchemaTracker
from tests.support.corpus import CORPUS
from tests.support.units import assemble


def test_rows_query_attaches_sql_and_is_no_boundary() -> None:
    items = assemble("mysql-cdc-rs/5.7_29_row_query_log.bin", query=QueryText(include=True))
    kinds = [type(i).__name__ for i in items]
    # CREATE DATABASE, CREATE TABLE (each a Changes + Commit), then one INSERT transaction, then the rotate.
    assert kinds == ["Changes", "Commit", "Changes", "Commit", "Changes", "Commit", "Heartbeat"]
    changes, commit = items[4], items[5]
    assert isinstance(changes, Changes) and isinstance(commit, Commit)
    assert changes.messages[0]["sql"].upper().startswith("INSERT")
    assert commit.rows == len(changes.messages) and commit.gtid is not None
    # the position handed on is the end of the XID event, never between TABLE_MAP and rows
    assert commit.position.pos > changes.pos
    # By default a row message carries no statement text (include_query off)
    plain = assemble("mysql-cdc-rs/5.7_29_row_query_log.bin")[4]
    assert isinstance(plain, Changes) and {m["sql"] for m in plain.messages} == {""}


def test_statement_text_is_cut_on_a_character_boundary_and_says_so() -> None:
    text = "INSERT INTO t VALUES " + ", ".join(f"({i}, 'ü€😀')" for i in range(2000))
    size = len(text.encode())
    for limit in range(256, 300):  # every cut point among the multi-byte characters
        cut = QueryText(include=True, max_bytes=limit).of(text)
        assert len(cut.encode()) <= limit
        assert cut.endswith(f" /* cut by Sluice: {size} bytes, query_max_bytes {limit} */")
        assert text.startswith(cut[: cut.index(" /* cut by Sluice")])  # a prefix, no broken character
    assert QueryText(include=True, max_bytes=4096).of("SELECT 1") == "SELECT 1"
    assert QueryText().of(text) == ""


def test_filtered_transactions_still_commit() -> None:
    everything = assemble("mysql-cdc-rs/5.7_32_delete_rows_v2_log.bin")
    nothing = assemble("mysql-cdc-rs/5.7_32_delete_rows_v2_log.bin", TableFilter(include=("none\\.none",)))
    commits = [i.position for i in everything if isinstance(i, Commit)]
    assert [i.position for i in nothing if isinstance(i, Commit)] == commits
    assert not [i for i in nothing if isinstance(i, Changes)]
    assert [i.rows for i in nothing if isinstance(i, Commit)] == [0] * len(commits)


def test_mysql_gtid_set_grows_with_each_commit() -> None:
    commits = [i for i in assemble("mysql-cdc-rs/5.7_33_35_gtid_prev_gtid_log.bin") if isinstance(i, Commit)]
    assert len(commits) == 3
    for k, commit in enumerate(commits):
        assert commit.gtid is not None
        sid, gno = commit.gtid.rsplit(":", 1)
        ((held_sid, _), intervals), *_ = MysqlGtidSet.parse(commit.position.gtid_set).sets
        # every GTID committed so far, this one included, is in the set handed on with it
        assert held_sid == sid and intervals == ((int(gno) - k, int(gno)),)


def test_positions_carry_the_files_history_and_tagged_gtids() -> None:
    # MySQL 8.3+ tagged GTIDs (`SET gtid_next = 'AUTOMATIC:mytag'`): the file's PREVIOUS_GTIDS
    # (everything executed before it) is part of the GTID state handed on, so a resume by
    # GTID never asks the server for history from before the connector's start.
    items = assemble("rust_mysql_common/binlog_transaction_with_GTID_TAG.000001")
    commits = [i for i in items if isinstance(i, Commit)]
    assert [c.gtid for c in commits] == ["55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3"]
    held = MysqlGtidSet.parse(commits[0].position.gtid_set)
    assert str(held) == "55778904-0299-11f1-b1b8-4ef0c4956feb:1-13:mytag:1-3"


@pytest.mark.parametrize(
    ("sql", "target"),
    [
        ("INSERT INTO t VALUES (1)", ("shop", "t")),
        ("insert low_priority ignore into `odd``name` (a) values (1)", ("shop", "odd`name")),
        ("REPLACE other.t SET a = 1", ("other", "t")),
        ("/* app */ UPDATE IGNORE `other` . `t` SET a = 2", ("other", "t")),
        ("DELETE QUICK FROM t WHERE a = 1", ("shop", "t")),
        ("LOAD DATA INFILE '/tmp/x' REPLACE INTO TABLE d.t", ("d", "t")),
        ("DELETE t1, t2 FROM t1 JOIN t2", ("shop", "")),  # several tables: the database decides
        ("UPDATE (SELECT 1) x SET a = 1", ("shop", "")),
        ("CREATE TABLE t (a INT)", None),
        ("SELECT 1", None),
    ],
)
def test_a_row_change_logged_as_a_statement_names_its_table(sql: str, target: tuple[str, str] | None) -> None:
    assert statement_logged_change(sql, "shop") == target


def test_rows_logged_as_a_statement_are_reported_for_captured_tables_only() -> None:
    included = TableFilter(include=(r"shop\.orders",))
    seen: list[tuple[str, str]] = []
    tracker = SchemaTracker(MemoryHistoryStore(), included)
    assembler = TransactionAssembler(Position("binlog.000001", 4), tracker, included, mariadb=False,
                                     on_statement_rows=lambda d, t: seen.append((d, t)))  # fmt: skip
    pos = 4
    for sql in ("BEGIN", "INSERT INTO orders VALUES (1)", "UPDATE shop.other SET a = 1", "COMMIT",
                "DELETE FROM `orders` WHERE id = 2", "CREATE TABLE orders2 (id INT)"):  # fmt: skip
        body = QueryEvent(thread_id=1, exec_time=0, error_code=0, schema="shop", query=sql, status=QueryStatus())
        header = EventHeader(timestamp=1, type_code=c.EventType.QUERY_EVENT, server_id=1, event_length=50,
                             log_pos=pos + 50, flags=0)  # fmt: skip
        items = list(assembler.feed(Event(pos, header, body)))
        assert not [i for i in items if isinstance(i, Changes)]  # no row message can be made of the text
        pos += 50
    assert seen == [("shop", "orders"), ("shop", "orders")]


def test_a_rotate_moves_the_file_for_the_builder_the_tracker_and_the_parser_at_once() -> None:
    path = CORPUS / "mysql-cdc-rs/5.7_29_row_query_log.bin"
    included = TableFilter.of(None, None)
    tracker = SchemaTracker(MemoryHistoryStore(), included)
    assembler = TransactionAssembler(Position(path.name, 4), tracker, included, mariadb=False)
    parser = BinlogParser(assembler.cursor)
    items = [item for event in iter_file_events(str(path), parser=parser) for item in assembler.feed(event)]
    last = items[-1]
    assert isinstance(last, Heartbeat) and last.position.file != path.name
    rotated = last.position.file
    assert (assembler.file, tracker.cursor.file, parser.cursor.file, assembler.builder.cursor.file) == (rotated,) * 4


def test_a_heartbeat_naming_the_file_a_rotate_closed_moves_no_position() -> None:
    """MariaDB sends a heartbeat naming the file a ROTATE just closed, with that file's end, while
    it opens the next (seen live: mariadb-bin.000097's 1,073,770,887 bytes, after the ROTATE to
    000098). Read as a position in the file being read, it became 000098:1073770887, the
    checkpoint saved it, and every restart from it met "impossible position"."""
    included = TableFilter.of(None, None)
    assembler = TransactionAssembler(Position("mariadb-bin.000097", 4), SchemaTracker(MemoryHistoryStore(), included),
                                     included, mariadb=True)  # fmt: skip
    end = 1_073_770_887

    def event(type_code: int, body: object, log_pos: int, flags: int = 0) -> Event:
        return Event(log_pos, EventHeader(0, type_code, 1, 19, log_pos, flags), body)  # type: ignore[arg-type]

    rotated = list(assembler.feed(event(c.EventType.ROTATE_EVENT, RotateEvent(4, "mariadb-bin.000098"), end)))
    assert [i.position.file for i in rotated if isinstance(i, Heartbeat)] == ["mariadb-bin.000098"]
    stale = HeartbeatEvent("mariadb-bin.000097", None)
    assert list(assembler.feed(event(c.EventType.HEARTBEAT_LOG_EVENT, stale, end))) == []
    current = HeartbeatEvent("mariadb-bin.000098", None)
    beats = list(assembler.feed(event(c.EventType.HEARTBEAT_LOG_EVENT, current, 2_000)))
    assert [(b.position.file, b.position.pos) for b in beats if isinstance(b, Heartbeat)] == [("mariadb-bin.000098",
                                                                                              2_000)]  # fmt: skip
