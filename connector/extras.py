"""Debezium's side topics: transaction metadata and heartbeats (JSON values, in either value format).

Transaction metadata (`[kafka] transaction_topic`), on `{prefix}._transaction`, one partition,
keyed by the transaction's id, as Debezium's `<prefix>.transaction` topic:
  {"status": "BEGIN", "id": ..., "ts_ms": ..., "event_count": null, "data_collections": null}
  {"status": "END", "id": ..., "ts_ms": ..., "event_count": N,
   "data_collections": [{"data_collection": "db.table", "event_count": n}, ...]}
The id is the transaction's GTID, else `file:pos` of its first change. BEGIN is published
before the transaction's first change, END at its commit; transactions with no published
change have neither.

Heartbeats (`[kafka] heartbeat_interval_s`), on `{prefix}._heartbeat`, one partition, keyed
`{"serverName": prefix}` as Debezium's: `{"ts_ms": ..., "position": "file:pos[...]"}` at
most once per interval, at a transaction end or a server heartbeat: a consumer sees the
connector alive, and its offsets move, while the captured tables are quiet.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

_dumps = json.JSONEncoder(separators=(",", ":")).encode


@dataclass
class TransactionTopic:
    topic: str
    clock: Callable[[], float] = time.time
    current: str | None = None  # the open transaction's id, once its first change was published
    counts: dict[str, int] = field(default_factory=dict)

    def begin(self, gtid: str | None, file: str, pos: int) -> tuple[bytes, bytes] | None:
        """The BEGIN record when this change opens a transaction; None inside one."""
        if self.current is not None:
            return None
        self.current = gtid or f"{file}:{pos}"
        self.counts = {}
        return self._record({"status": "BEGIN", "id": self.current, "ts_ms": self._ms(), "event_count": None,
                             "data_collections": None})  # fmt: skip

    def count(self, database: str, table: str, events: int) -> None:
        name = f"{database}.{table}"
        self.counts[name] = self.counts.get(name, 0) + events

    def end(self) -> tuple[bytes, bytes] | None:
        """The END record of the open transaction; None when none is open."""
        if self.current is None:
            return None
        collections = [{"data_collection": k, "event_count": v} for k, v in self.counts.items()]
        record = self._record({"status": "END", "id": self.current, "ts_ms": self._ms(),
                               "event_count": sum(self.counts.values()), "data_collections": collections})  # fmt: skip
        self.current = None
        return record

    def _ms(self) -> int:
        return int(self.clock() * 1000)

    def _record(self, value: dict[str, object]) -> tuple[bytes, bytes]:
        return _dumps({"id": value["id"]}).encode(), _dumps(value).encode()


@dataclass
class HeartbeatTopic:
    topic: str
    server_name: str
    interval_s: float
    clock: Callable[[], float] = time.time
    last: float = float("-inf")

    def due(self, position: str) -> tuple[bytes, bytes] | None:
        now = self.clock()
        if now - self.last < self.interval_s:
            return None
        self.last = now
        key = _dumps({"serverName": self.server_name}).encode()
        return key, _dumps({"ts_ms": int(now * 1000), "position": position}).encode()
