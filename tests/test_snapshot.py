"""The snapshot hand-over on twins: when chunks are published, what they leave out, how progress is saved.

`Source` is an in-memory ChunkSource: tables of rows and a read-view window chosen by
each test. The pipeline-level test runs the Snapshotter inside the real Pipeline with
the in-memory Kafka twin."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from connector.errors import SnapshotStateError
from connector.flat import FlatMessage
from connector.items import Changes, Commit
from connector.position import Position
from connector.schema.model import Table
from connector.snapshot import coordinator
from connector.snapshot.coordinator import Snapshotter, first_snapshot
from connector.snapshot.reader import Chunk, Window, after_clause, bound, chunk_query
from connector.snapshot.state import Key, SnapshotState
from tests.support.snapshots import KEYLESS, Source, T, snapshotter, tracker
from tests.support.twins import ManualClock, MemorySnapshotRequests
from tests.support.units import Rig, changes, pos, row, table


class Out:
    def __init__(self) -> None:
        self.messages: list[FlatMessage] = []
        self.positions: list[Position] = []

    def publish(self, message: FlatMessage, table: Table) -> None:
        self.messages.append(message)

    def close_position(self, position: Position) -> None:
        self.positions.append(position)

    def breathe(self) -> bool:
        return True  # room: nothing here waits for acknowledgements

    def wait_for_room(self) -> None:
        raise AssertionError("breathe said there is room")

    def ids(self) -> list[str]:
        return [m["data"][0].get("id") or m["data"][0]["n"] for m in self.messages if m["data"]]


def never() -> bool:
    return False


def test_an_idle_server_gets_every_chunk_in_one_turn_with_its_progress_saved() -> None:
    source = Source({"t": {i: f"v{i}" for i in range(1, 8)}}, Window(pos(100), pos(100)))
    snap, out = snapshotter(source, T), Out()
    snap.turn(pos(100), out, never)
    assert out.ids() == [str(i) for i in range(1, 8)]
    assert {m["type"] for m in out.messages} == {"READ"}
    assert [m["source"]["row"] for m in out.messages] == list(range(7))
    # Three chunks (3 + 3 + 1 rows); each closes the position with the progress after it.
    states = [SnapshotState.of_text(p.snapshot) for p in out.positions]
    assert [s.after for s in states] == [("3",), ("6",), None]
    assert [s.tables for s in states] == [(("db", "t"),), (("db", "t"),), ()]
    assert out.positions[-1].snapshot == "" and snap.state_text == ""
    assert source.closed >= 3


def test_a_chunk_waits_until_the_stream_reaches_its_read_view() -> None:
    source = Source({"t": {1: "a"}}, Window(pos(200), pos(200)))
    snap, out = snapshotter(source, T), Out()
    snap.turn(pos(100), out, never)
    snap.turn(pos(150), out, never)
    assert out.messages == [] and source.opened == 1  # one read view, held
    snap.turn(pos(200), out, never)
    assert out.ids() == ["1"]
    assert out.messages[0]["source"]["pos"] == 200


def test_a_read_view_behind_the_stream_is_dropped_and_read_again() -> None:
    source = Source({"t": {1: "a"}}, Window(pos(90), pos(90)))
    snap, out = snapshotter(source, T), Out()
    snap.turn(pos(100), out, never)
    assert out.messages == [] and source.closed == 1
    source.window = Window(pos(120), pos(120))
    snap.turn(pos(120), out, never)
    assert out.ids() == ["1"]


def test_mysql_window_leaves_out_keys_the_stream_changed_inside_it() -> None:
    source = Source({"t": {1: "a", 2: "b", 3: "c"}}, Window(pos(100), pos(130)))
    snap, out = snapshotter(source, T, chunk=10), Out()
    snap.turn(pos(100), out, never)
    snap.saw(changes(row("UPDATE", 2, "b2", 110, {"v": "b"})))
    snap.turn(pos(130), out, never)
    assert out.ids() == ["1", "3"]  # key 2's newest state came from the stream
    assert SnapshotState.of_text(out.positions[-1].snapshot).tables == ()


def test_mysql_window_leaves_out_the_old_key_of_an_update_that_moved_one_key_part() -> None:
    # `old` holds only the columns an UPDATE changed: with a key (a, b) and only b changed, the
    # row's old key is `old` laid over `data`. Left in, its READ (the view saw the row before the
    # UPDATE) brought back a row the stream had already moved away.
    pair = table("CREATE TABLE t (a INT, b INT, v VARCHAR(10), PRIMARY KEY (a, b))")

    class Pairs(Source):
        def rows(self, table: Table, after: Key | None, limit: int | None) -> Chunk:
            return iter([({"id": f"7/{b}", "a": "7", "b": str(b), "v": "x"}, ("7", str(b))) for b in (1, 2)])

    source = Pairs({}, Window(pos(100), pos(130)))
    snap, out = snapshotter(source, pair, chunk=10), Out()
    snap.turn(pos(100), out, never)
    moved = {**row("UPDATE", 0, "x", 110, {"b": "1"}), "pkNames": ["a", "b"], "data": [{"a": "7", "b": "9", "v": "x"}]}
    snap.saw(changes(moved, t=pair))
    snap.turn(pos(130), out, never)
    assert out.ids() == ["7/2"]


def test_a_read_view_opens_at_the_streams_position_with_its_gtids() -> None:
    # MySQL's read view must see every transaction the stream handed on: ServerChunks waits for
    # the GTID set of the position it is given (WAIT_FOR_EXECUTED_GTID_SET) before opening it.
    source = Source({"t": {1: "a"}}, Window(pos(100), pos(130)))
    snap, out = snapshotter(source, T), Out()
    at = replace(pos(100), gtid_set="3e11fa47-71ca-11e1-9e33-c80aa9429562:1-41")
    snap.turn(at, out, never)
    assert source.opened_after == at


def test_mysql_window_reads_a_keyless_table_only_when_the_stream_left_it_alone() -> None:

    source = Source({"k": {1: "a", 2: "b"}}, Window(pos(100), pos(130)))
    snap, out = snapshotter(source, KEYLESS), Out()
    snap.turn(pos(100), out, never)
    message = {**row("INSERT", 9, "z", 110), "table": "k", "data": [{"n": "9", "v": "z"}]}
    snap.saw(Changes((message,), "bin.000001", 110, KEYLESS))
    snap.turn(pos(130), out, never)
    assert out.messages == []  # changed inside the window: read again
    source.window = Window(pos(140), pos(140))
    snap.turn(pos(140), out, never)
    assert out.ids() == ["1", "2"]  # a keyless table is one chunk
    assert [m["type"] for m in out.messages] == ["TRUNCATE", "READ", "READ"]  # cleared first


SID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


@pytest.mark.parametrize(("committed", "read"), [(f"{SID}:1-130", True), (f"{SID}:1-129", False), ("", False)])
def test_mysql_window_is_whole_when_every_transaction_to_its_end_was_committed_before_it(
    committed: str, read: bool
) -> None:
    """A keyless table changed inside the window is still read when gtid_executed, read just
    before the view opened, holds every transaction up to where the stream is at hand-over:
    all of them are in the view. One transaction short, it is not known to be: read again."""
    source = Source({"k": {1: "a", 2: "b"}}, Window(pos(100), pos(130), committed))
    snap, out = snapshotter(source, KEYLESS), Out()
    snap.turn(replace(pos(100), gtid_set=f"{SID}:1-100"), out, never)
    message = {**row("INSERT", 9, "z", 110), "table": "k", "data": [{"n": "9", "v": "z"}]}
    snap.saw(Changes((message,), "bin.000001", 110, KEYLESS))
    snap.turn(replace(pos(130), gtid_set=f"{SID}:1-130"), out, never)
    assert out.ids() == (["1", "2"] if read else [])


def test_a_keyless_tables_changes_wait_for_its_read_and_then_flow() -> None:
    # Its READ holds every change before it: handed on too, each would be counted twice.
    source = Source({"t": {1: "a"}, "k": {1: "a", 2: "b"}}, Window(pos(200), pos(200)))
    snap, out = snapshotter(source, T, KEYLESS, chunk=10), Out()
    keyless = Changes(({**row("INSERT", 9, "z", 110), "table": "k", "data": [{"n": "9", "v": "z"}]},),
                      "bin.000001", 110, KEYLESS)  # fmt: skip
    keyed = changes(row("INSERT", 9, "z", 110))
    assert snap.holds(keyless) and not snap.holds(keyed)
    snap.turn(pos(200), out, never)  # both tables read
    assert [m["type"] for m in out.messages] == ["TRUNCATE", "READ", "READ", "READ"]
    assert not snap.holds(keyless)
    requests = MemorySnapshotRequests()
    snap.requests = requests
    requests.add([("db", "k")])
    snap.turn(pos(300), out, never)  # the request is taken (the read view is behind: read later)
    assert snap.holds(keyless)  # a requested re-read holds its changes back again


def test_a_read_view_is_not_held_through_a_long_catch_up() -> None:
    clock = ManualClock()
    source = Source({"t": {1: "a"}}, Window(pos(500), pos(500)))
    snap, out = snapshotter(source, T, clock=clock), Out()
    snap.turn(pos(100), out, never)
    clock.at = coordinator.MAX_OPEN_S + 1
    snap.turn(pos(200), out, never)
    assert source.closed == 1  # dropped
    snap.turn(pos(300), out, never)
    assert source.opened == 1  # not opened again before the stream gets to 500
    source.window = Window(pos(600), pos(600))
    snap.turn(pos(500), out, never)
    snap.turn(pos(600), out, never)
    assert source.opened == 2 and out.ids() == ["1"]


def test_a_failed_read_publishes_nothing_new_and_keeps_the_progress() -> None:
    source = Source({"t": {1: "a"}}, Window(pos(100), pos(100)))
    snap, out = snapshotter(source, T), Out()
    source.fail_rows = True
    snap.turn(pos(100), out, never)
    assert out.messages == [] and out.positions == [] and snap.state.tables == (("db", "t"),)
    source.fail_rows = False
    snap.turn(pos(101), out, never)
    source.window = Window(pos(101), pos(101))
    snap.turn(pos(101), out, never)
    assert out.ids() == ["1"]


def test_a_dropped_table_is_skipped() -> None:
    source = Source({"t": {1: "a"}}, Window(pos(100), pos(100)))
    t = tracker(T)
    snap = Snapshotter(source, t, SnapshotState((("db", "gone"), ("db", "t"))), 3)
    out = Out()
    snap.turn(pos(100), out, never)
    assert out.ids() == ["1"] and snap.state.tables == ()


def test_requests_queue_captured_tables_once() -> None:
    requests = MemorySnapshotRequests()
    source = Source({"t": {1: "a"}}, Window(pos(100), pos(100)))
    t = tracker(T, include=[r"db\.t"])
    snap = Snapshotter(source, t, SnapshotState(), 3, requests)
    requests.add([("db", "t"), ("other", "x")])
    out = Out()
    snap.turn(pos(100), out, never)
    assert out.ids() == ["1"] and snap.state.request == 1
    assert SnapshotState.of_text(snap.state_text).request == 1  # not taken again after a restart


def test_a_table_renamed_onto_a_captured_name_is_read_again() -> None:
    """SchemaTracker.rereads (a RENAME gave db.t another table's rows): the next turn queues it
    like a requested table, captured tables only, and saves it with the position."""
    source = Source({"t": {1: "a", 2: "b"}}, Window(pos(100), pos(100)))
    t = tracker(T, include=[r"db\.t"])
    snap = Snapshotter(source, t, SnapshotState(), 3)
    t.rereads += [("db", "t"), ("db", "helper")]
    out = Out()
    snap.turn(pos(100), out, never)
    assert out.ids() == ["1", "2"] and t.rereads == [] and snap.state.tables == ()
    assert [SnapshotState.of_text(p.snapshot).tables for p in out.positions] == [()]


def test_stop_ends_the_turn_between_chunks() -> None:
    source = Source({"t": {i: "x" for i in range(1, 10)}}, Window(pos(100), pos(100)))
    snap, out = snapshotter(source, T), Out()
    calls = iter([False, True])
    snap.turn(pos(100), out, lambda: next(calls, True))
    assert out.ids() == ["1", "2", "3"]


def test_the_pipeline_saves_the_snapshot_progress_with_every_position(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    source = Source({"t": {1: "a", 2: "b"}}, Window(pos(10), pos(10)))
    rig.pipeline.snapshot = snapshotter(source, T, chunk=1)
    rig.pipeline.run([changes(row("INSERT", 3, "c", 12)), Commit(pos(20), None, 1)], start=pos(10))
    records = rig.records()
    assert [(r["type"], r["data"][0]["id"]) for r in records] == [("READ", 1), ("READ", 2), ("INSERT", 3)]
    saved = rig.fast.get()
    assert saved is not None and saved.pos == 20 and saved.snapshot == ""


def test_snapshot_state_round_trips_and_refuses_garbage() -> None:
    state = SnapshotState((("d", "t"), ("d", "u")), ("42", {"hex": "00ff"}), 17, 3)
    assert SnapshotState.of_text(state.text()) == state
    assert SnapshotState().text() == ""
    with pytest.raises(SnapshotStateError, match="not readable"):
        SnapshotState.of_text("{nope")


def test_chunk_queries_page_by_the_whole_key_with_typed_parameters() -> None:
    lines = table("CREATE TABLE l (o BIGINT UNSIGNED, n INT, v VARBINARY(4), PRIMARY KEY (o, v))")
    sql, params = chunk_query(lines, ("18446744073709551615", {"hex": "00ff"}), 500)
    assert sql == (
        "SELECT `o`, `n`, `v`, `o`, `v` FROM `db`.`l` WHERE (`o` > %s) OR (`o` = %s AND `v` > %s)"
        " ORDER BY `o`, `v` LIMIT 500"
    )
    assert params == [2**64 - 1, 2**64 - 1, b"\x00\xff"]  # no float comparison of a big key
    assert chunk_query(KEYLESS, None, None)[0] == "SELECT `n`, `v` FROM `db`.`k`"
    assert after_clause([lines.columns[0]], ("7",))[1] == [7]
    assert bound(lines.columns[1], None) is None


def test_configured_key_columns_key_a_keyless_table_and_chunk_its_snapshot() -> None:
    source = Source({"k": {i: f"v{i}" for i in range(1, 8)}}, Window(pos(100), pos(100)))
    t = tracker(KEYLESS)
    t.keys = {("db", "k"): ("N",)}  # names compare as the server's do: case-insensitively
    assert t.keyed(KEYLESS).primary_key == ("n",) and KEYLESS.primary_key == ()
    assert t.keyed(KEYLESS) is t.keyed(KEYLESS)  # one keyed definition per tracked one
    assert t.keyed(T) is T  # a table with its own primary key keeps it
    t.keys = {("db", "k"): ("gone",)}
    assert t.keyed(table("CREATE TABLE k (n INT, v VARCHAR(10))")).primary_key == ()  # no such column: keyless
    t.keys = {("db", "k"): ("n",)}
    snap, out = Snapshotter(source, t, first_snapshot(t), 3), Out()
    keyless_change = Changes((), "bin.000001", 110, t.keyed(KEYLESS))
    assert not snap.holds(keyless_change)  # keyed: its changes flow, and its chunks leave their keys out
    snap.turn(pos(100), out, never)
    assert [m["type"] for m in out.messages] == ["READ"] * 7  # no TRUNCATE: READs upsert by key
    assert [SnapshotState.of_text(p.snapshot).after for p in out.positions] == [("3",), ("6",), None]
