"""High availability on the real services: two instances, one lease; kill or pause the leader."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from connector.checkpoint import checkpoint_stores
from connector.config import Config, HaSection, MetricsSection
from connector.errors import FencedError
from connector.position import Position
from connector.runner import Connector, run_with_lease
from tests.support.live import wait_until
from tests.support.metrics import free_port, scrape, scrape_or_none
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

LEASE_S = 2.0


def holder(config: Config) -> str:
    value = redis.Redis.from_url(config.checkpoint.redis_url).get(f"sluice:{config.name}:lease")
    return value.decode() if isinstance(value, bytes) else ""


def wait_for_holder(config: Config, process: subprocess.Popen[bytes], timeout_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if f"-{process.pid}-" in holder(config):
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(
        f"process {process.pid} did not take the lease within {timeout_s} s (holder: {holder(config)})"
    )


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_standby_takes_over_and_a_paused_leader_cannot_write(tmp_path: Path, exactly_once: bool) -> None:
    """With [kafka] exactly_once besides, the new leader's init_transactions fences the paused
    one's producer in Kafka too: nothing it produced is committed, nothing reaches a reader twice."""
    name, db = f"ha{uuid.uuid4().hex[:6]}", "hadb"
    fresh(db)
    config = replace(config_for(name, db, tmp_path), ha=HaSection(enabled=True, lease_s=LEASE_S))
    config = replace(config, kafka=replace(config.kafka, exactly_once=exactly_once))
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    path.write_text(path.read_text() + f"[ha]\nenabled = true\nlease_s = {LEASE_S}\n")
    Connector(config).run(blocking=False)  # the first start: schema captured, position saved
    first = sluice_run(path)
    wait_for_holder(config, first, 30)
    second = sluice_run(path)
    try:
        workload(db, 20, seed=31, pause_s=0.01)
        caught_up(config)
        # The leader freezes (SIGSTOP): the standby takes over within the lease.
        os.kill(first.pid, signal.SIGSTOP)
        took = wait_for_holder(config, second, LEASE_S + 10)
        assert took <= LEASE_S + 3
        workload(db, 20, seed=32, pause_s=0.01)
        caught_up(config)
        stores = checkpoint_stores(config)
        assert stores.fast is not None
        newest = stores.fast.get()
        assert newest is not None
        # The old leader wakes up: whatever it tries to save is refused; the position never goes back.
        os.kill(first.pid, signal.SIGCONT)
        time.sleep(3 * LEASE_S)
        for store in (stores.fast, stores.durable):
            saved = store.get()
            assert saved is not None and saved.sort_key() >= newest.sort_key(), store.name
        # The new leader dies: the first instance (a standby again) takes over.
        second.send_signal(signal.SIGKILL)
        second.wait()
        wait_for_holder(config, first, LEASE_S + 10)
        workload(db, 20, seed=33, pause_s=0.01)
        caught_up(config)
    finally:
        for process in (first, second):
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.send_signal(signal.SIGTERM)
                process.wait(60)
    replay = assert_replay_equals_source(config, db)  # read_committed, as exactly_once's readers read
    if exactly_once:
        assert replay.duplicates == []
    log = (tmp_path / "sluice.log").read_text()
    assert "lost the lease" in log or "fenced" in log  # the paused leader noticed it was replaced


def test_checkpoint_writes_with_an_older_fencing_token_are_refused(tmp_path: Path) -> None:
    config = config_for(f"fence{uuid.uuid4().hex[:6]}", "hadb", tmp_path)
    client = redis.Redis.from_url(config.checkpoint.redis_url)
    client.set(f"sluice:{config.name}:fence", 5)  # five leaders so far
    new, old = checkpoint_stores(config, fence=5), checkpoint_stores(config, fence=4)
    newer = Position("mariadb-bin.000009", 900)
    for store in (new.fast, new.durable):
        assert store is not None
        store.put(newer)
    for store in (old.fast, old.durable):
        assert store is not None
        with pytest.raises(FencedError):
            store.put(Position("mariadb-bin.000009", 100))
        assert store.get() == newer


def test_a_standby_is_healthy_but_not_ready_until_it_leads(tmp_path: Path) -> None:
    name, db = f"standby{uuid.uuid4().hex[:6]}", "hadb"
    fresh(db)
    port = free_port()
    config = replace(config_for(name, db, tmp_path), ha=HaSection(enabled=True, lease_s=LEASE_S),
                     metrics=MetricsSection(port=port, host="127.0.0.1"))  # fmt: skip
    Connector(config).run(blocking=False)
    client = redis.Redis.from_url(config.checkpoint.redis_url)
    client.set(f"sluice:{name}:lease", "another-instance", px=int(LEASE_S * 1000))  # someone else leads
    stop = threading.Event()
    instance = threading.Thread(target=run_with_lease, args=(config, stop, lambda c: None), daemon=True)
    instance.start()
    try:
        wait_until(lambda: scrape_or_none(port) is not None, 10, "the metrics endpoint", every_s=0.1)
        assert scrape(port, "/health")[0] == 200 and scrape(port, "/ready")[0] == 503
        client.delete(f"sluice:{name}:lease")  # the other leader is gone
        wait_until(lambda: scrape(port, "/ready")[0] == 200, 30, "/ready once the lease is free", every_s=0.2)
    finally:
        stop.set()
        instance.join(60)
