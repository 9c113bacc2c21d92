"""The offset context (connector/offset.py): what a reconnect starts from and does not hand on again,
and the transaction state the kernel hands over."""

from __future__ import annotations

from connector.items import Burst, Changes, Commit, Heartbeat
from connector.offset import Offset, PreparedXa, Xid
from connector.position import Position

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def _changes(file: str, pos: int) -> Changes:
    return Changes((), file, pos)


def _burst(file: str, position: Position | None, handed: int | None) -> Burst:
    return Burst(file, [], [], [], 0, None, position, 1 if position else 0, handed)


def test_a_new_session_skips_the_changes_handed_on_and_stops_skipping_at_the_first_other_item() -> None:
    offset = Offset(Position("binlog.000001", 4), mariadb=False)
    end = Position("binlog.000001", 500, f"{UUID}:1-7")
    offset.handing(Commit(end, None, 1))
    offset.handing(_changes("binlog.000001", 600))
    offset.handing(_changes("binlog.000001", 700))
    assert (offset.committed, offset.handed) == (end, ("binlog.000001", 700))

    offset.session(offset.committed, mariadb=False)
    assert str(offset.gtids) == f"{UUID}:1-7"
    assert offset.handed_before(_changes("binlog.000001", 600))
    assert offset.handed_before(_changes("binlog.000001", 700))
    assert not offset.handed_before(_changes("binlog.000001", 800))  # new: handed on, still skipping
    assert offset.skip_to is not None
    assert not offset.handed_before(Commit(Position("binlog.000001", 900), None, 3))
    assert offset.skip_to is None  # the transaction ended: nothing after it was handed on before
    assert not offset.handed_before(_changes("binlog.000001", 600))


def test_a_burst_that_leaves_a_transaction_open_says_how_far_it_was_handed_on() -> None:
    offset = Offset(Position("binlog.000002", 4))
    end = Position("binlog.000002", 1_000)
    offset.handing(_burst("binlog.000002", end, 1_300))
    assert (offset.committed, offset.handed) == (end, ("binlog.000002", 1_300))
    offset.handing(_burst("binlog.000002", None, None))  # committed nothing, left nothing open
    assert (offset.committed, offset.handed) == (end, ("binlog.000002", 1_300))
    offset.handing(Heartbeat(Position("binlog.000002", 2_000)))
    assert offset.handed is None


def test_prepared_xa_transactions_are_those_as_of_the_last_end_handed_on() -> None:
    start = Position("binlog.000001", 4, xa="binlog.000001:4")
    offset = Offset(start, mariadb=False)
    assert offset.prepared_then is None  # a start whose position says some are pending: read them again
    xid = Xid(1, b"g", b"b")
    offset.prepared[xid] = PreparedXa(Position("binlog.000001", 120), ())
    end = offset.position(400, 1_700_000_000, 1)
    assert end.xa == "binlog.000001:120"
    offset.handing(Commit(end, None, 0))
    offset.prepared.pop(xid)  # decided after the last end handed on: a reconnect reads the decision again
    offset.session(offset.committed, mariadb=False)
    assert offset.prepared == {xid: PreparedXa(Position("binlog.000001", 120), ())}


def test_a_transaction_the_kernel_hands_over_goes_on_with_its_gtid_rows_and_statement() -> None:
    offset = Offset(Position("binlog.000003", 4, "0-1-10"), mariadb=True)
    offset.take_over(True, "0-1-11", 3, 900, "INSERT INTO t VALUES (1)")
    assert (offset.in_txn, offset.began, offset.gtid, offset.rows) == (True, True, "0-1-11", 3)
    assert offset.txn_start == Position("binlog.000003", 900)
    assert (offset.rows_gtid, offset.sql) == ("0-1-11", "INSERT INTO t VALUES (1)")
    assert str(offset.gtid_after()) == "0-1-11"
    done = offset.kernel_commit([(0, 1, 12)], 2_000, 1_700_000_001, 1)
    assert (done.file, done.pos, done.gtid_set, done.timestamp) == ("binlog.000003", 2_000, "0-1-12", 1_700_000_001)
