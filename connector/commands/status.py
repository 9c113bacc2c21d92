"""`sluice status`: saved positions, their lag behind the server, what runs and what waits."""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from typing import Any

import redis

from connector.checkpoint import BlockingNotes, checkpoint_stores, presence_key, redis_client
from connector.checkpointdb import checkpoint_connector
from connector.config import Config, load_config
from connector.errors import CheckpointUnavailableError
from connector.position import Position
from connector.replica.client import open_connection
from connector.replica.server import master_position
from connector.secrets import REDACT
from connector.snapshot.requests import DatabaseSnapshotRequests
from connector.snapshot.state import SnapshotState


def status(config: Config) -> dict[str, Any]:
    """Saved positions and how far behind the server they are, whether a connector is running
    (and which instance leads, with HA), and what snapshot is queued. Read-only: it creates
    nothing on the checkpoint database (which may be the source server, binlogging it)."""
    stores = checkpoint_stores(config, readonly=True)
    report: dict[str, Any] = {"connector": config.name, **_running(config)}
    with open_connection(config.source.settings()) as conn:
        server = master_position(conn)
    report["server"] = str(server)
    for label, store in (("redis", stores.fast), ("database", stores.durable)):
        if store is None:
            report[label] = "not configured"
            continue
        try:
            saved = store.get()
        except CheckpointUnavailableError as exc:
            report[label] = f"unavailable: {exc}"
            continue
        report[label] = None if saved is None else {"position": str(saved), **_lag(saved, server), **_snapshot(saved)}
    durable = stores.durable
    if isinstance(durable, BlockingNotes):
        with contextlib.suppress(CheckpointUnavailableError):
            blocked = durable.blocked()
            if blocked is not None:
                report["blocked"] = blocked  # the last run stopped before a message it may not pass
    report["snapshot_requests_waiting"] = _waiting_requests(config)
    return report


def _running(config: Config) -> dict[str, Any]:
    """What Redis says of running instances: the streaming one's presence, and the HA lease."""
    url = config.checkpoint.redis_url
    if not url:
        return {"running": "unknown (no Redis: a running connector announces itself there)"}
    client = redis_client(url, config.checkpoint.redis_ssl_ca)
    try:
        presence = client.get(presence_key(config.name))
        leader = client.get(f"sluice:{config.name}:lease") if config.ha.enabled else None
    except redis.RedisError as exc:
        return {"running": f"unknown (Redis: {exc})"}
    found: dict[str, Any] = {"running": presence is not None}
    if presence is not None:
        found["instance"] = json.loads(presence)
    if config.ha.enabled:
        found["leader"] = leader.decode() if isinstance(leader, bytes) else None
    return found


def _waiting_requests(config: Config) -> list[dict[str, Any]]:
    """`sluice snapshot` requests no connector has queued yet (a stopped one takes them at start)."""
    taken = 0
    with contextlib.suppress(CheckpointUnavailableError):
        saved = checkpoint_stores(config, readonly=True).durable.get()
        if saved is not None:
            taken = SnapshotState.of_text(saved.snapshot).request
    requests = DatabaseSnapshotRequests(checkpoint_connector(config, create=False), config.name, create=False)
    return [{"request": n, "tables": [".".join(t) for t in tables]} for n, tables in requests.after(taken)]


def _snapshot(saved: Position) -> dict[str, Any]:
    state = SnapshotState.of_text(saved.snapshot)
    if not state.tables:
        return {}
    return {"snapshot": {"tables_left": [".".join(t) for t in state.tables], "rows_read": state.rows,
                         "reading": ".".join(state.tables[0]), "after_key": state.after}}  # fmt: skip


def _lag(saved: Position, server: Position) -> dict[str, Any]:
    lag: dict[str, Any] = {"event_age_s": round(time.time() - saved.timestamp, 1) if saved.timestamp else None}
    if saved.file == server.file:
        lag["bytes_behind"] = server.pos - saved.pos
    else:
        lag["files_behind"] = server.sort_key()[1] - saved.sort_key()[1]
    return lag


def main(args: argparse.Namespace) -> None:
    print(REDACT(json.dumps(status(load_config(args.config, kafka=False)), indent=2)))
