"""How far a snapshot got: saved with the checkpoint position, so it resumes after a crash.

It rides in `Position.snapshot` as JSON, so it is committed exactly when the binlog
position is, behind Kafka's acknowledgements and under the HA fence: a saved state
never claims rows Kafka has not confirmed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from connector.errors import SnapshotStateError

TableName = tuple[str, str]
KeyValue = str | int | None | dict[str, str]  # dict: {"hex": ...} for a binary key part
Key = tuple[KeyValue, ...]


@dataclass(frozen=True, slots=True)
class SnapshotState:
    tables: tuple[TableName, ...] = ()  # still to read, the first one in progress
    after: Key | None = None  # the last primary key read from tables[0]; None: from its start
    rows: int = 0  # READ messages so far (numbers each one's `source.row`)
    request: int = 0  # the newest on-demand request (`sluice snapshot`) already queued

    def text(self) -> str:
        if not self.tables and not self.request:
            return ""
        data = {"tables": [list(t) for t in self.tables], "after": self.after, "rows": self.rows,
                "request": self.request}  # fmt: skip
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def of_text(cls, text: str) -> SnapshotState:
        if not text:
            return cls()
        try:
            data: dict[str, Any] = json.loads(text)
            after = data.get("after")
            return cls(
                tuple((str(d), str(t)) for d, t in data.get("tables", [])),
                None if after is None else tuple(after),
                int(data.get("rows", 0)),
                int(data.get("request", 0)),
            )
        except (ValueError, TypeError) as exc:
            raise SnapshotStateError(f"saved snapshot state {text[:200]!r} is not readable ({exc})") from exc

    def queued(self, tables: list[TableName], request: int) -> SnapshotState:
        """With `tables` appended (those already waiting are not queued twice)."""
        fresh = tuple(t for t in dict.fromkeys(tables) if t not in self.tables)
        return replace(self, tables=self.tables + fresh, request=max(self.request, request))

    def advanced(self, last: Key | None, finished: bool, rows: int) -> SnapshotState:
        """After a chunk of tables[0]: its last key, or the next table when it is finished."""
        if finished:
            return replace(self, tables=self.tables[1:], after=None, rows=self.rows + rows)
        return replace(self, after=last, rows=self.rows + rows)
