"""The pipeline on its in-memory twins: checkpoints behind acknowledgements, back-pressure, outages."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from connector.avro.reader import MessageReader
from connector.checkpoint import Checkpointer
from connector.clock import SystemClock
from connector.errors import (
    CheckpointUnavailableError,
    DeliveryError,
    FencedError,
    OversizedMessageError,
    StoppedWaitingError,
)
from connector.inflight import InFlight
from connector.items import Changes, Commit, Heartbeat, StreamItem
from connector.metrics import Metrics
from connector.oversize import TRUNCATED_HEADER
from connector.position import Position, gtid_order
from connector.sink.partitioning import partition_for
from tests.support.live import wait_until
from tests.support.twins import ManualClock, MemoryCheckpointStore, MemorySink
from tests.support.units import Rig, assemble, changes, pos, row, table


def test_inflight_tracks_a_batch_with_one_callback() -> None:
    inflight = InFlight()
    batch = inflight.track(3)
    assert inflight.track() is batch  # the open transaction's messages share it
    inflight.close(pos(100))
    later = inflight.track(2)
    assert later is not batch
    inflight.close(pos(200))
    for _ in range(3):
        batch(None)
    assert inflight.outstanding == 3 and inflight.committable() is None  # one of the four is out
    batch(None)
    later(None)
    assert inflight.committable() == pos(100)  # the second transaction has one message out
    later(None)
    assert inflight.committable() == pos(200) and inflight.outstanding == 0
    third = inflight.track(2)
    inflight.close(pos(300))
    third(None)
    third("broker gone")
    assert inflight.committable() is None and inflight.errors == ["broker gone"]


def test_inflight_commits_only_behind_the_oldest_unacknowledged() -> None:
    inflight = InFlight()
    a1, a2 = inflight.track(), inflight.track()
    inflight.close(pos(10))
    b1 = inflight.track()
    inflight.close(pos(20))
    inflight.close(pos(30))  # an empty transaction
    b1(None)  # the second transaction is acknowledged first
    assert inflight.committable() is None
    a2(None)
    a1(None)
    assert inflight.committable() == pos(30)
    c1 = inflight.track()
    inflight.close(pos(40))
    d1 = inflight.track()
    inflight.close(pos(50))
    c1("broker gone")
    d1(None)
    assert inflight.committable() is None  # a failed transaction is never passed
    assert inflight.errors == ["broker gone"]


@pytest.mark.parametrize(
    "items",
    [
        pytest.param([changes(row("INSERT", 1, "a", 100)), Commit(pos(150), "0-1-1", 1)], id="one-transaction batch"),
        pytest.param([Commit(pos(150), "0-1-1", 0)], id="empty transaction"),
        pytest.param([Heartbeat(pos(150))], id="heartbeat"),
    ],
)
def test_each_kind_of_end_advances_the_position(tmp_path: Path, items: list[StreamItem]) -> None:
    rig = Rig(tmp_path)
    rig.run(items)
    assert rig.fast.value == pos(150)
    rig.checkpointer.flush()
    assert rig.durable.value == pos(150)


def test_a_transaction_with_rows_query_advances_the_position(tmp_path: Path) -> None:
    items = assemble("mysql-cdc-rs/5.7_29_row_query_log.bin")
    last_commit = [i for i in items if isinstance(i, Commit)][-1]
    rig = Rig(tmp_path)
    rig.run_in_time([i if not isinstance(i, Changes) else Changes(i.messages, i.file, i.pos, None) for i in items])
    # the INSERT transaction (ROWS_QUERY, TABLE_MAP, rows, XID) committed, then the rotation moved on
    assert rig.fast.writes[-2] == last_commit.position
    assert rig.fast.value == items[-1].position  # type: ignore[union-attr]


def test_rows_are_keyed_partitioned_and_typed(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    nokey = table("CREATE TABLE n (x INT, y VARCHAR(5))")
    rig.run([
        changes(row("INSERT", 1, "a", 100), row("INSERT", 2, None, 100)),
        changes(row("UPDATE", 2, "b", 200, {"v": None})),
        changes(row("UPDATE", 3, "b", 300, {"id": "2"})),  # the key changes: DELETE 2, INSERT 3
        changes({**row("INSERT", 0, None, 400), "table": "n", "pkNames": None, "data": [{"x": "7", "y": "q"}]},
                t=nokey),
        Commit(pos(500), "0-1-9", 5),
    ])  # fmt: skip
    records = rig.records()
    seen = sorted((r["type"], r["data"][0]["id"], str(r["data"][0]["v"])) for r in records)
    assert seen == sorted([("INSERT", 1, "a"), ("INSERT", 2, "None"), ("UPDATE", 2, "b"), ("DELETE", 2, "b"),
                           ("INSERT", 3, "b")])  # fmt: skip
    by_key = {(m.key, m.partition) for m in rig.sink.messages("cdc.db.t")}
    assert all(part == partition_for(key, 3) for key, part in by_key if key is not None)
    update = next(r for r in records if r["type"] == "UPDATE")
    assert update["old"] == [{"id": 2, "v": None}]  # the whole before image
    nokey_msgs = rig.sink.messages("cdc.db.n")
    assert [m.key for m in nokey_msgs] == [None]
    assert nokey_msgs[0].partition == partition_for(b"db.n", 3)
    assert rig.fast.value == pos(500)


def test_pk_change_keeps_each_keys_history_in_its_partition(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.run([changes(row("UPDATE", 3, "b", 300, {"id": "2"})), Commit(pos(400), None, 1)])
    messages = rig.sink.messages("cdc.db.t")
    reader = MessageReader(rig.directory)
    seen = set()
    for message in messages:
        assert message.key is not None and message.partition == partition_for(message.key, 3)
        assert message.value is not None
        seen.add((reader.read(message.value)[1]["type"], reader.read(message.key)[1]["id"]))
    assert seen == {("DELETE", 2), ("INSERT", 3)}


def test_delivery_failure_stops_with_the_checkpoint_before_it(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    items: list[StreamItem] = [changes(row("INSERT", 1, "a", 100)), Commit(pos(150), None, 1)]
    rig.run(items)
    rig.sink.fail_next(1, "Local: Message timed out")
    with pytest.raises(DeliveryError, match=r"Message timed out.*checkpoint stays at bin\.000001:150"):
        rig.run([changes(row("INSERT", 2, "b", 200)), Commit(pos(250), None, 1), Heartbeat(pos(300))])
    assert rig.fast.value == pos(150)


def test_inflight_takes_acknowledgements_that_cover_several_messages() -> None:
    inflight = InFlight()
    first = inflight.track(5)
    inflight.close(pos(10))
    second = inflight.track(3)
    inflight.close(pos(20))
    second(None, 3)
    first(None, 4)
    assert inflight.committable() is None and inflight.outstanding == 1
    first(None, 1)
    assert inflight.committable() == pos(20) and inflight.outstanding == 0


def test_kafka_silent_past_the_delivery_timeout_stops_with_the_checkpoint_before_it(tmp_path: Path) -> None:
    rig = Rig(tmp_path, sink=SlowSink(stalls=0))
    rig.run([changes(row("INSERT", 1, "a", 100)), Commit(pos(150), None, 1)])
    assert isinstance(rig.sink, SlowSink)
    rig.sink.stalls = 10**9  # from here on, Kafka acknowledges nothing
    items: list[StreamItem] = [changes(row("INSERT", 2, "b", 200)), Commit(pos(250), None, 1)]
    rig.pipeline.take(items[0])
    rig.now += 299  # within the timeout: waiting is not an error
    rig.pipeline.take(items[1])
    rig.now += 2
    with pytest.raises(DeliveryError, match=r"acknowledged nothing for 300 s with 1 message.*stays at bin\.000001:150"):
        rig.pipeline.breathe()
    assert rig.fast.value == pos(150)


def test_silence_counts_from_the_last_acknowledgement_while_messages_wait() -> None:
    clock = ManualClock(100.0)
    inflight = InFlight(clock)
    done = inflight.track(3)
    clock.at = 350
    assert inflight.silent_s() == 250
    done(None, 2)  # Kafka answered: the one left has waited 0 s since
    clock.at = 400
    assert inflight.silent_s() == 50
    done(None, 1)
    clock.at = 900
    assert inflight.silent_s() == 0  # nothing waits
    inflight.track(1)
    assert inflight.silent_s() == 0  # its wait starts now, not at the last acknowledgement
    clock.at = 910
    assert inflight.silent_s() == 10


class UnreachableSink(MemorySink):
    """Once `down`, knows only the topics it has; a new one waits for a broker that is down, until
    the stop (a SIGTERM in `sluice run`) ends the wait, as KafkaSink's wait does."""

    def __init__(self) -> None:
        super().__init__()
        self.stop = threading.Event()
        self.down = False

    def ensure_topic(self, topic: str, single: bool = False, compacted: bool = False) -> None:
        if not self.down:
            super().ensure_topic(topic, single, compacted)
        elif topic not in self.topics:
            self.stop.set()
            raise StoppedWaitingError(f"cannot read the metadata of topic {topic}: stopped while Kafka was unreachable")


def test_a_stop_while_kafka_is_unreachable_is_a_stop_with_what_kafka_confirmed(tmp_path: Path) -> None:
    sink = UnreachableSink()
    rig = Rig(tmp_path, sink=sink)
    sink.stop = rig.stop
    rig.run([changes(row("INSERT", 1, "a", 100)), Commit(pos(150), None, 1)])
    sink.down = True
    other = table("CREATE TABLE u (id INT PRIMARY KEY, v VARCHAR(10))")
    rig.run([
        changes(row("INSERT", 2, "b", 200)), Commit(pos(250), None, 1),  # a known topic: sent
        changes({**row("INSERT", 3, "c", 300), "table": "u"}, t=other), Commit(pos(350), None, 1),
    ])  # fmt: skip
    assert rig.pipeline.stop.is_set()
    assert rig.fast.value == pos(250)  # not past the transaction that waited


class SlowSink(MemorySink):
    """Acknowledges nothing for the first `stalls` polls (a broker that is down: each waits its
    timeout on the rig's clock), then everything."""

    def __init__(self, stalls: int) -> None:
        super().__init__()
        self.stalls = stalls
        self.peak = 0

    def produce_many(self, *args: Any) -> None:
        super().produce_many(*args)
        self.peak = max(self.peak, self.waiting)

    def poll(self, timeout: float) -> int:
        if self.stalls > 0:
            self.stalls -= 1
            self.clock.sleep(timeout)
            return 0
        return super().poll(timeout)


def test_backpressure_bounds_what_is_in_flight(tmp_path: Path) -> None:
    slow = SlowSink(stalls=300)
    rig = Rig(tmp_path, max_in_flight=100, sink=slow)
    items: list[StreamItem] = []
    for n in range(1, 501):
        items += [changes(row("INSERT", n, "x", n * 10)), Commit(pos(n * 10 + 5), None, 1)]
    rig.run(items)
    assert 90 <= slow.peak <= 100  # it filled up to the bound, and no further
    assert rig.pipeline.counters.pauses > 0
    assert rig.fast.value == pos(5005)
    assert len(rig.sink.messages("cdc.db.t")) == 500


def test_take_says_when_kafka_is_behind_and_waits_for_nothing_itself(tmp_path: Path) -> None:
    slow = SlowSink(stalls=10**9)  # Kafka acknowledges nothing
    rig = Rig(tmp_path, max_in_flight=100, sink=slow, metrics=Metrics())
    rooms = []
    for n in range(1, 101):
        rooms.append(rig.pipeline.take(changes(row("INSERT", n, "x", n * 10))))
        rooms.append(rig.pipeline.take(Commit(pos(n * 10 + 5), None, 1)))
    # From the 100th unacknowledged message on there is no room, and take said so and returned.
    assert rooms == [True] * 198 + [False, False]
    assert slow.waiting == 100 and rig.pipeline.counters.pauses == 0
    slow.stalls = 3  # Kafka catches up after three polls: the driver's wait ends, counted as a pause
    rig.pipeline.wait_for_room()
    assert slow.waiting == 0 and rig.pipeline.counters.pauses == 1
    assert rig.pipeline.counters.paused_s == pytest.approx(0.3)  # three polls of 0.1 s
    assert _paused_seconds(rig, "kafka") == pytest.approx(0.3)
    assert rig.pipeline.take(changes(row("INSERT", 101, "x", 1010))) is True


def test_redis_down_goes_to_the_database_and_both_down_pauses(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.fast.down = True
    rig.run([Heartbeat(pos(10))])
    assert rig.durable.value == pos(10) and rig.fast.value is None
    rig.durable.down = True

    def recover(delay: float) -> None:  # the stores come back after three waits
        rig.sleeps.append(delay)
        if len(rig.sleeps) == 3:
            rig.durable.down = False

    rig.on_sleep = recover
    rig.now += 3.0  # the database takes positions at most once per flush interval while Redis is down
    rig.run([Heartbeat(pos(20))])
    assert rig.sleeps and rig.durable.value == pos(20)
    rig.fast.down = False
    rig.run([Heartbeat(pos(30))])
    assert rig.fast.value == pos(30)


def test_with_redis_down_the_database_is_written_at_most_once_per_flush_interval(tmp_path: Path) -> None:
    # Seen: with Redis down every transaction was a database write (~200 a second).
    rig = Rig(tmp_path)
    rig.fast.down = True
    for n in range(1, 101):
        rig.now += 0.1
        rig.run([Commit(pos(n * 10), None, 0)])
    assert len(rig.durable.writes) == 4  # 10 s at one write per 3 s: t = 0.1, 3.1, 6.1, 9.1
    assert rig.checkpointer.committed == pos(1000)  # the newest is kept for the next flush
    rig.checkpointer.flush()
    assert rig.durable.value == pos(1000)


def test_checkpointer_resumes_from_the_newer_of_redis_and_the_database() -> None:
    fast, durable = MemoryCheckpointStore("redis"), MemoryCheckpointStore("database")
    checkpointer = Checkpointer(fast, durable)
    assert checkpointer.load() == (None, "database")
    durable.value = pos(5)
    assert checkpointer.load() == (pos(5), "database")
    fast.value = pos(9)
    assert checkpointer.load() == (pos(9), "redis")  # a crash between flushes: Redis is newer
    durable.value = pos(12)
    assert checkpointer.load() == (pos(12), "database")  # after a spell with Redis down: the database is
    fast.down = True
    assert checkpointer.load() == (pos(12), "database")
    durable.down = True
    with pytest.raises(CheckpointUnavailableError):
        checkpointer.load()


class SlowStore(MemoryCheckpointStore):
    """A store with a slow network: each write waits until `go` is set; then `refusal`, when there
    is one, is raised (a store that fences this instance) instead of writing."""

    def __init__(self, name: str = "redis", refusal: Exception | None = None) -> None:
        super().__init__(name)
        self.go = threading.Event()
        self.refusal = refusal

    def put(self, position: Position) -> None:
        self.go.wait(10)
        if self.refusal is not None:
            raise self.refusal
        super().put(position)


def test_the_writer_thread_saves_the_newest_position_without_holding_up_the_loop() -> None:
    fast, durable = SlowStore(), MemoryCheckpointStore("database")
    checkpointer = Checkpointer(fast, durable, 60.0)
    checkpointer.start()
    try:
        for n in range(1, 6):
            checkpointer.submit(pos(n * 10))  # returns at once though Redis has not answered
        assert fast.writes == []
        fast.go.set()
        checkpointer.settle(10)
        assert fast.value == pos(50)
        assert fast.writes[-1] == pos(50) and len(fast.writes) <= 2  # the ones in between folded into one
    finally:
        checkpointer.stop()
    assert durable.value == pos(50)  # stop() flushes to the database


def test_a_flush_refused_by_a_newer_leader_ends_a_settle_waiting_for_it() -> None:
    # An HA leader that woke after losing its lease stopped 30 s late: the flush met the fence,
    # and the drain's settle was not woken, so it waited out its whole timeout.
    fenced = FencedError("database: a newer leader holds the connector (this token: 1)")
    fast, durable = MemoryCheckpointStore("redis"), SlowStore("database", fenced)
    checkpointer = Checkpointer(fast, durable, 0.0)
    checkpointer.start()
    settled = threading.Event()
    try:
        checkpointer.submit(pos(10))  # Redis takes it; the copy to the database waits for `go`
        wait_until(lambda: fast.value == pos(10), 10, "Redis to take the position")
        checkpointer.submit(pos(20))  # owed while the writer is held in the flush

        def settle() -> None:
            checkpointer.settle(120)
            settled.set()

        threading.Thread(target=settle, daemon=True).start()
        time.sleep(0.2)  # the settle is waiting before the flush is refused
        durable.go.set()
        assert settled.wait(30), "settle still waiting after the writer was fenced"
        assert checkpointer.fenced is not None
        with pytest.raises(FencedError):
            checkpointer.submit(pos(30))
    finally:
        checkpointer.stop()
    assert fast.value == pos(10) and durable.value is None


def test_the_writer_copies_to_the_database_once_per_interval_of_the_injected_clock() -> None:
    clock = ManualClock()
    fast, durable = MemoryCheckpointStore("redis"), MemoryCheckpointStore("database")
    checkpointer = Checkpointer(fast, durable, 0.2, clock=clock)

    def soon(done: Any) -> None:
        deadline = time.monotonic() + 10
        while not done() and time.monotonic() < deadline:
            time.sleep(0.01)

    checkpointer.start()
    try:
        checkpointer.submit(pos(10))
        soon(lambda: durable.value == pos(10))  # the first position goes to the database at once
        checkpointer.submit(pos(20))
        checkpointer.settle(10)
        time.sleep(0.5)  # 0.5 s of real time, none of the injected clock's: no copy is due
        assert (fast.value, durable.value) == (pos(20), pos(10))
        clock.at = 0.2
        soon(lambda: durable.value == pos(20))
    finally:
        checkpointer.stop()
    assert durable.writes == [pos(10), pos(20)]


def test_an_idle_writer_sleeps_until_a_position_or_its_next_flush() -> None:
    # Flushed and idle past the interval, the writer has nothing due: it must wait for a
    # submit, not wake again and again (a busy loop asks the clock without end).
    asked = [0]

    class Counted(SystemClock):
        def now(self) -> float:
            asked[0] += 1
            return super().now()

    fast, durable = MemoryCheckpointStore("redis"), MemoryCheckpointStore("database")
    checkpointer = Checkpointer(fast, durable, 0.05, clock=Counted())
    checkpointer.start()
    try:
        checkpointer.submit(pos(10))
        checkpointer.settle(10)
        time.sleep(0.3)  # the position is flushed within the first interval; then nothing is due
        assert durable.value == pos(10)
        before = asked[0]
        time.sleep(0.3)
        assert asked[0] - before < 20
        checkpointer.submit(pos(20))  # a new position wakes it: Redis now, the database an interval on
        checkpointer.settle(10)
        assert fast.value == pos(20)
    finally:
        checkpointer.stop()
    assert durable.value == pos(20)


def _paused_seconds(rig: Rig, reason: str) -> float:
    assert rig.pipeline.metrics is not None
    found = rig.pipeline.metrics.registry.get_sample_value("sluice_paused_seconds_total", {"reason": reason})
    assert found is not None
    return found


def test_when_the_writer_cannot_save_the_loop_takes_over_and_pauses(tmp_path: Path) -> None:
    rig = Rig(tmp_path, metrics=Metrics())
    rig.checkpointer.start()
    rig.fast.down = rig.durable.down = True

    def recover(delay: float) -> None:  # the database comes back after three waits
        rig.sleeps.append(delay)
        if len(rig.sleeps) == 3:
            rig.durable.down = False

    rig.on_sleep = recover
    try:
        rig.run([changes(row("INSERT", 1, "a", 100)), Commit(pos(150), None, 1), Heartbeat(pos(200))])
    finally:
        rig.checkpointer.stop()
    assert len(rig.sleeps) >= 3 and rig.pipeline.counters.pauses >= 3
    assert rig.durable.value == pos(200) and rig.checkpointer.failing is None
    # each wait counted once, for what it took: the stop line's figures and the metric
    assert rig.pipeline.counters.pauses == len(rig.sleeps)
    assert rig.pipeline.counters.paused_s == pytest.approx(sum(rig.sleeps))
    assert _paused_seconds(rig, "checkpoint stores") == pytest.approx(sum(rig.sleeps))


# -- messages over their topic's limit ([kafka] oversized) -----------------------------------

BIG = table("CREATE TABLE t (id INT PRIMARY KEY, v LONGTEXT, w LONGTEXT NOT NULL)")


def big(id_: int, v: str | None, w: str, at: int) -> dict[str, Any]:
    return {**row("INSERT", id_, v, at), "data": [{"id": str(id_), "v": v, "w": w}]}


def oversized_run(rig: Rig) -> list[StreamItem]:
    """A transaction that fits, then one whose second row is over the topic's 100,000 bytes."""
    rig.sink.limits["cdc.db.t"] = 100_000
    return [
        changes(big(1, "a", "b", 100), t=BIG), Commit(pos(150), None, 1),
        changes(big(2, "c", "d", 200), big(3, "x" * 150_000, "y" * 60_000, 200), big(4, "e", "f", 200), t=BIG),
        Commit(pos(300), None, 3),
    ]  # fmt: skip


def test_an_oversized_message_stops_the_pipeline_saying_what_where_and_what_to_do(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    with pytest.raises(OversizedMessageError) as info:
        rig.run(oversized_run(rig))
    message = str(info.value)
    assert '`db`.`t` key {"id": 3} at bin.000001:200 row 0' in message
    assert "over the limit of 100000 of topic cdc.db.t" in message
    assert "max.message.bytes" in message and "[kafka] max_message_bytes" in message and "dead-letter" in message
    assert rig.fast.value == pos(150)  # the position before it stays saved


def test_truncate_empties_the_largest_values_until_it_fits_and_names_them(tmp_path: Path) -> None:
    rig = Rig(tmp_path, oversized="truncate")
    rig.run(oversized_run(rig))
    records = rig.records()
    assert [r["data"][0]["id"] for r in records] == [1, 2, 3, 4]  # nothing dropped, order kept
    third = records[2]["data"][0]
    # v (150,000 bytes, nullable) went first; w (60,000, NOT NULL) then fit and stayed
    assert third["v"] is None and third["w"] == "y" * 60_000
    headers = [m.headers for m in rig.sink.messages("cdc.db.t")]
    assert headers == [None, None, [(TRUNCATED_HEADER, b"v")], None]
    assert rig.fast.value == pos(300)


def test_truncate_empties_not_null_values_as_empty_strings(tmp_path: Path) -> None:
    rig = Rig(tmp_path, oversized="truncate")
    rig.sink.limits["cdc.db.t"] = 100_000
    rig.run([changes(big(9, "x" * 70_000, "y" * 80_000, 100), t=BIG), Commit(pos(150), None, 1)])
    (record,) = rig.records()
    assert record["data"][0]["w"] == "" and record["data"][0]["v"] == "x" * 70_000
    assert rig.sink.messages("cdc.db.t")[0].headers == [(TRUNCATED_HEADER, b"w")]


def test_dead_letter_records_the_message_and_the_stream_goes_on(tmp_path: Path) -> None:
    rig = Rig(tmp_path, oversized="dead-letter")
    rig.run(oversized_run(rig))
    assert [r["data"][0]["id"] for r in rig.records()] == [1, 2, 4]
    (letter,) = rig.sink.messages("cdc._oversized")
    record = json.loads(letter.value or b"")
    assert (record["database"], record["table"], record["topic"], record["key"]) == ("db", "t", "cdc.db.t", {"id": 3})
    assert record["source"]["pos"] == 200 and record["limit"] == 100_000 and record["size"] > 210_000
    assert letter.key is not None and MessageReader(rig.directory).read(letter.key)[1] == {"id": 3}  # the row's key
    assert rig.fast.value == pos(300)


def test_checkpointer_resumes_from_the_newer_gtid_state_when_file_names_disagree() -> None:
    # A failover: the database's position is in the old primary's file 000120, Redis's in the new
    # one's 000003; only the GTIDs say which is newer. Seen too: a position past a file's end
    # (a misread heartbeat) sorted after a sound one whose GTID state was further on.
    fast, durable = MemoryCheckpointStore("redis"), MemoryCheckpointStore("database")
    checkpointer = Checkpointer(fast, durable)
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    durable.value = Position("bin.000120", 4000, f"{uuid}:1-90")
    fast.value = Position("bin.000003", 500, f"{uuid}:1-95")
    assert checkpointer.load() == (fast.value, "redis")
    fast.value, durable.value = durable.value, fast.value
    assert checkpointer.load() == (durable.value, "database")
    durable.value = Position("mariadb-bin.000098", 1073770887, "0-1-130700")
    fast.value = Position("mariadb-bin.000098", 14639814, "0-1-130869")
    assert checkpointer.load() == (fast.value, "redis")
    fast.value = Position("mariadb-bin.000099", 400, "0-1-130700,1-1-5")  # a second domain: still ahead
    assert checkpointer.load() == (fast.value, "redis")
    # The same GTIDs (a heartbeat moved one on), or states neither of which holds the other: the file's order.
    durable.value, fast.value = Position("bin.000004", 900, f"{uuid}:1-95"), Position("bin.000004", 700, f"{uuid}:1-95")
    assert checkpointer.load() == (durable.value, "database")
    fast.value = Position("bin.000005", 4, f"{uuid}:1-94:96")
    assert checkpointer.load() == (fast.value, "redis")


def test_gtid_order_of_both_servers_states() -> None:
    a = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    b = "4e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert gtid_order(f"{a}:1-10,{b}:1-3", f"{a}:1-10") == 1
    assert gtid_order(f"{a}:1-10", f"{a}:1-10,{b}:1-3") == -1
    assert gtid_order(f"{a}:1-10", f"{a}:1-10") == 0
    assert gtid_order(f"{a}:1-10", f"{b}:1-10") is None
    assert gtid_order("0-1-5,1-2-7", "0-2-4") == 1  # a domain's sequence, whichever server wrote it
    assert gtid_order("0-1-5", "0-1-5,1-2-7") == -1
    assert gtid_order("0-1-5,1-1-2", "0-1-4,1-1-3") is None
    assert gtid_order("0-1-5", f"{a}:1-5") is None  # not one source's states
    assert gtid_order("0-1-5", "not a gtid") is None
