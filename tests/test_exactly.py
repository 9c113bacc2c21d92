"""[kafka] exactly_once on the in-memory twin: binlog transactions grouped into Kafka transactions,
each committed with its position as the last record, and only committed positions checkpointed.
tests/test_pipeline_live.py (the random workload under faults) proves it against Kafka."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import cast

import pytest

from connector.checkpoint import position_of_json
from connector.errors import SinkError, TransactionAbortedError
from connector.exactly import IDLE_COMMIT_S, ExactlyOnce, PositionTopic
from connector.items import Commit, Heartbeat, StreamItem
from connector.metrics import Metrics
from connector.pipeline import Options
from connector.runner import RESTARTS, RESTARTS_WINDOW_S, Connector, Restarts, run_restarting
from connector.snapshot.reader import Window
from connector.snapshot.state import SnapshotState
from tests.support.snapshots import Source, T, snapshotter
from tests.support.twins import ManualClock, MemorySink
from tests.support.units import Rig, changes, pos, row

TOPIC = PositionTopic.of("cdc", "conn")


def rig(
    tmp_path: Path, every_s: float = 1.0, max_messages: int = 1000, sink: MemorySink | None = None,
    metrics: Metrics | None = None,
) -> Rig:  # fmt: skip
    options = Options(exactly_once=ExactlyOnce(TOPIC, every_s, max_messages))
    return Rig(tmp_path, sink=sink or MemorySink(transactional=True), options=options, metrics=metrics)


def transaction(n: int, rows: int = 1) -> list[StreamItem]:
    """A binlog transaction of `rows` inserts, ending at pos(100 * n + 50)."""
    inserts = [row("INSERT", 100 * n + i, "v", 100 * n + i) for i in range(rows)]
    return [changes(*inserts), Commit(pos(100 * n + 50), f"0-1-{n}", 1)]


def written(sink: MemorySink, topic: str = "cdc.db.t") -> list[bool]:
    """Each row message Kafka wrote (all it was handed): committed or not."""
    sink.poll(0)
    return [m.committed for m in sink.messages(topic)]


def positions(sink: MemorySink) -> list[tuple[bytes | None, bool, int]]:
    """The position records: key, committed, and the binlog position each names."""
    return [(m.key, m.committed, json.loads(m.value or b"{}")["pos"]) for m in sink.messages(TOPIC.topic)]


def test_transactions_commit_together_once_the_interval_is_up(tmp_path: Path) -> None:
    r = rig(tmp_path, every_s=1.0)
    take = r.pipeline.take
    for item in transaction(1) + transaction(2):
        take(item)
    sink = r.sink
    # Two binlog transactions, no commit yet: their rows are written, not committed, and the
    # checkpoint stays where it was.
    assert written(sink) == [False, False]
    assert sink.commits == 0 and r.fast.get() is None
    r.now += 1.0
    for item in transaction(3):
        take(item)
    assert sink.commits == 1 and written(sink) == [True] * 3
    assert positions(sink) == [(b"conn", True, 350)]  # the commit carries the newest position
    r.pipeline.breathe()
    assert r.fast.get() == pos(350)  # the mirror follows the commit, never ahead of it


def test_a_transaction_commits_when_it_holds_enough_messages(tmp_path: Path) -> None:
    r = rig(tmp_path, every_s=3600, max_messages=5)
    for n in range(1, 5):
        for item in transaction(n, rows=2):
            r.pipeline.take(item)
    # 2, 4, 6 messages at the ends of the first three: the third commits; the fourth is open
    assert [p for _, _, p in positions(r.sink)] == [350]
    assert sorted(written(r.sink)) == [False] * 2 + [True] * 6  # (the partitions' order)


def test_a_kafka_transaction_never_ends_inside_a_binlog_transaction(tmp_path: Path) -> None:
    """A binlog transaction far over the message limit commits only at its end, whole."""
    r = rig(tmp_path, every_s=0.0, max_messages=3)
    items = [changes(*[row("INSERT", i, "v", 100 + i) for i in range(j, j + 4)]) for j in range(0, 40, 4)]
    for item in items:
        r.pipeline.take(item)
    assert r.sink.commits == 0 and written(r.sink) == [False] * 40
    r.pipeline.take(Commit(pos(999), "0-1-1", 1))
    assert r.sink.commits == 1 and written(r.sink) == [True] * 40


def test_a_quiet_stream_commits_its_last_transaction_at_the_next_heartbeat(tmp_path: Path) -> None:
    r = rig(tmp_path, every_s=0.1)
    for item in transaction(1):
        r.pipeline.take(item)
    assert r.sink.commits == 0
    r.now += 0.1
    r.pipeline.take(Heartbeat(pos(160)))  # the server's, sent after transaction_ms of quiet
    assert positions(r.sink) == [(b"conn", True, 160)]
    # Heartbeats with nothing produced commit the moving position only now and then.
    for n in range(10):
        r.now += 0.1
        r.pipeline.take(Heartbeat(pos(170 + n)))
    assert r.sink.commits == 1
    r.now += IDLE_COMMIT_S
    r.pipeline.take(Heartbeat(pos(190)))
    assert [p for _, _, p in positions(r.sink)] == [160, 190]


def test_a_stop_commits_what_closed(tmp_path: Path) -> None:
    r = rig(tmp_path, every_s=3600)
    r.run([*transaction(1), *transaction(2)])
    assert positions(r.sink) == [(b"conn", True, 250)] and written(r.sink) == [True, True]
    assert r.fast.get() == pos(250)


def test_a_stop_inside_a_binlog_transaction_aborts_the_kafka_transaction(tmp_path: Path) -> None:
    """Kafka commits a transaction whole: with part of a binlog transaction in it, committing
    what closed before would commit that part too, and the next start would send it again."""
    r = rig(tmp_path, every_s=3600)
    r.run([*transaction(1), *transaction(2), changes(row("INSERT", 7, "v", 300))])  # the third never ends
    assert r.sink.aborts == 1 and positions(r.sink) == []
    assert written(r.sink) == [False] * 3  # read_committed readers see none of it; the next start redoes it
    assert r.fast.get() is None


def test_the_snapshot_s_progress_rides_in_the_transactions(tmp_path: Path) -> None:
    """Each chunk's READ records commit with the position that records the progress past them:
    a start from any committed position reads on from the chunk after the last one committed."""
    r = rig(tmp_path, every_s=0)  # each chunk its own transaction
    r.pipeline.snapshot = snapshotter(Source({"t": {1: "a", 2: "b", 3: "c"}}, Window(pos(10), pos(10))), T, chunk=1)
    r.pipeline.run([], start=pos(10))
    progress = [SnapshotState.of_text(position_of_json(m.value or b"").snapshot) for m in r.sink.messages(TOPIC.topic)]
    reading = (("db", "t"),)
    assert [(s.after, s.tables) for s in progress] == [(("1",), reading), (("2",), reading), (("3",), reading),
                                                       (None, ())]  # the last chunk: empty, the table done
    assert written(r.sink) == [True] * 3 and r.sink.commits == 4
    # Stopped after the first chunk (its transaction still open): the stop commits it with its progress.
    r = rig(tmp_path, every_s=3600)
    r.pipeline.snapshot = snapshotter(Source({"t": {1: "a", 2: "b"}}, Window(pos(10), pos(10))), T, chunk=1)
    r.pipeline.snapshot.turn(pos(10), r.pipeline, iter([False, True]).__next__)
    r.pipeline.drain()
    (last,) = [position_of_json(m.value or b"") for m in r.sink.messages(TOPIC.topic)]
    assert SnapshotState.of_text(last.snapshot).after == ("1",) and written(r.sink) == [True]
    assert r.fast.get() == last


def test_the_position_record_is_the_checkpoint_s_json(tmp_path: Path) -> None:
    key, value = TOPIC.record(pos(42))
    assert key == b"conn" and position_of_json(value) == pos(42)
    assert TOPIC.topic == "cdc._positions"


def test_a_non_transactional_pipeline_checkpoints_each_transaction(tmp_path: Path) -> None:
    """The default, at least once: each binlog transaction's position closes as it ends."""
    r = Rig(tmp_path)
    r.run([*transaction(1), *transaction(2)])
    assert r.fast.get() == pos(250) and "cdc._positions" not in r.sink.topics


class AbortingSink(MemorySink):
    """Kafka aborting each commit (its coordinator moved): what the real sink then does, the
    abort, and its error."""

    def commit_transaction(self, topic: str, key: bytes, value: bytes) -> None:
        self.abort_transaction()
        raise TransactionAbortedError("Kafka aborted the transaction (coordinator moved)")


def test_a_transaction_kafka_aborts_is_counted_and_its_position_never_mirrored(tmp_path: Path) -> None:
    metrics = Metrics()
    r = rig(tmp_path, every_s=0, sink=AbortingSink(transactional=True), metrics=metrics)
    with pytest.raises(TransactionAbortedError):
        r.run(transaction(1))
    assert written(r.sink) == [False] and r.fast.get() is None and r.durable.get() is None
    assert metrics.registry.get_sample_value("sluice_kafka_transactions_total", {"outcome": "aborted_by_kafka"}) == 1


class Started:
    """A connector as run_restarting starts it: its run raises what the test lines up."""

    def __init__(self, outcomes: list[Exception | None], metrics: Metrics | None, made: list[Started]) -> None:
        self.outcomes, self.metrics, self.given = outcomes, metrics or Metrics(), metrics
        self.sink = MemorySink()
        made.append(self)

    def run(self, blocking: bool = True) -> None:
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise outcome


def run_lined_up(outcomes: list[Exception | None], stop: threading.Event | None = None) -> list[Started]:
    made: list[Started] = []
    run_restarting(lambda metrics: cast(Connector, Started(outcomes, metrics, made)), stop or threading.Event())
    return made


def test_an_aborted_transaction_starts_the_connector_again_with_the_same_metrics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    aborted = TransactionAbortedError("Kafka aborted the transaction (coordinator moved); read_committed ...")
    made = run_lined_up([aborted, None])
    assert len(made) == 2 and made[0].given is None and made[1].given is made[0].metrics
    assert made[0].sink.closed and not made[1].sink.closed  # the old producer released, not left to linger
    assert "starting again from the last committed position (1 of 3 restarts in 600 s)" in caplog.text


def test_aborts_past_the_retries_or_at_a_stop_end_the_run() -> None:
    aborted = TransactionAbortedError("Kafka aborted the transaction (transaction timed out)")
    with pytest.raises(TransactionAbortedError):
        run_lined_up([aborted] * 4)
    stop = threading.Event()
    stop.set()
    with pytest.raises(TransactionAbortedError):
        run_lined_up([aborted, None], stop)
    with pytest.raises(SinkError, match="not an abort"):  # any other error is no retry
        run_lined_up([SinkError("not an abort"), None])


def test_the_retries_are_counted_in_a_sliding_window() -> None:
    clock = ManualClock()
    retries = Restarts(clock)
    aborted = TransactionAbortedError("aborted")
    assert [retries.allow(aborted) for _ in range(RESTARTS)] == [True] * RESTARTS
    assert not retries.allow(aborted)
    clock.at += RESTARTS_WINDOW_S  # the earlier aborts have left the window
    assert retries.allow(aborted)
