"""Checkpoints that only move forward, and never feed themselves (the issue's findings, live).

Redis is made unreachable with SIGSTOP, not stopped: it keeps its old position, as a Redis
behind a network fault does, so the start that follows has two positions to choose from.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from connector.checkpoint import checkpoint_stores
from connector.config import Config, load_config
from connector.position import Position, binlog_sort_key
from connector.runner import Connector
from tests.support.live import RUN, TLS, checkpoint_user_settings, position_now, wait_until
from tests.support.pipelines import (
    assert_replay_equals_source,
    caught_up,
    config_for,
    fresh,
    sluice_run,
    workload,
    write_config,
)

pytestmark = pytest.mark.live


@contextmanager
def redis_unreachable() -> Iterator[None]:
    """The plaintext Redis frozen: connections hang until the client's timeout, its data kept."""
    pid = int((RUN / "redis" / "redis.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def durable(config: Config) -> Position | None:
    return checkpoint_stores(config).durable.get()


def test_redis_down_for_a_spell_then_a_restart_resumes_at_the_databases_newer_position(tmp_path: Path) -> None:
    name, db = f"ckdown{uuid.uuid4().hex[:6]}", "ckdown"
    fresh(db)
    config = config_for(name, db, tmp_path)
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    Connector(config).run(blocking=False)  # the first start: schema captured, position saved
    process = sluice_run(path, streaming=True)
    try:
        workload(db, 20, seed=61, pause_s=0.01)
        caught_up(config)
        with redis_unreachable():
            # Rows flow for 15 s (thirty flush intervals), positions go to the database alone
            until = time.monotonic() + 15
            seed = 1000
            while time.monotonic() < until:
                workload(db, 5, seed=seed, pause_s=0.05)
                seed += 1
            target = position_now()

            def in_database() -> bool:
                saved = durable(config)
                return saved is not None and saved.sort_key() >= target.sort_key()

            wait_until(in_database, 60, "the database's copy to reach the server's position", every_s=0.5)
            process.kill()  # SIGKILL while Redis is unreachable: Redis keeps its position from before the spell
            process.wait(30)
            at_kill = durable(config)
        stores = checkpoint_stores(config)
        old, new = stores.fast.get() if stores.fast else None, stores.durable.get()
        assert old is not None and new is not None and at_kill is not None
        assert old.sort_key() < new.sort_key()  # Redis is behind: resuming there would send the spell again
        process = sluice_run(path, streaming=True)
        workload(db, 10, seed=99, pause_s=0.01)
        caught_up(config)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    log = path.with_suffix(".log").read_text()
    assert "writing positions to the" in log  # the spell was noticed and said once
    resumed = [line for line in log.splitlines() if "resuming from the newer" in line]
    # Both positions carry the server's GTID state (both test servers run with GTIDs), which decides.
    chose = "resuming from the newer by GTID state (checkpoint database)"
    assert len(resumed) == 1 and resumed[0].endswith(chose), resumed
    replay = assert_replay_equals_source(config, db)
    # Nothing before the database's position was sent again: only what came after it (the
    # connector was killed, so the stretch after its last write may repeat, as at any crash).
    floor = binlog_sort_key(at_kill.file, at_kill.pos)
    assert all(binlog_sort_key(file, pos) >= floor for file, pos, _, _ in replay.duplicates), replay.duplicates[:5]


def test_an_idle_connector_adds_no_binlog_bytes_with_redis_up_or_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint database on the source server, its least-privilege TLS user (who may SET
    sql_log_bin = 0), the connector's own least-privilege user: an idle connector writes positions
    and nothing of that reaches the binlog it reads, with Redis up and with Redis unreachable
    (when every position goes to the database)."""
    name, db = f"ckidle{uuid.uuid4().hex[:6]}", "ckidle"
    fresh(db)
    url, password = checkpoint_user_settings()
    monkeypatch.setenv("SLUICE_TEST_CHECKPOINT_PASSWORD", password)  # the connector's and this process's
    base = config_for(name, db, tmp_path)
    path = tmp_path / "sluice.toml"
    write_config(replace(base, checkpoint=replace(base.checkpoint, db_url=url)), path)
    path.write_text(path.read_text().replace("[checkpoint]\n", f'[checkpoint]\ndb_ssl_ca = "{TLS / "ca.pem"}"\n'))
    config = load_config(path)
    process = sluice_run(path, streaming=True)
    try:
        workload(db, 10, seed=71, pause_s=0.01)
        caught_up(config)
        time.sleep(2)  # the last flush of the workload's positions
        quiet = position_now()
        time.sleep(8)  # idle, Redis up: positions keep being written (flush_interval_s 0.5)
        assert position_now() == quiet
        with redis_unreachable():
            time.sleep(15)  # idle, Redis unreachable: the database takes every position
            assert position_now() == quiet
        time.sleep(3)  # Redis back
        assert position_now() == quiet
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    log = path.with_suffix(".log").read_text()
    assert "Traceback" not in log and "writing positions to the" in log, log[-3000:]
    assert password not in log
