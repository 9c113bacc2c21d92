"""The snapshot's twins: an in-memory ChunkSource, and a Snapshotter of in-memory tables."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from connector.errors import SnapshotReadError
from connector.filters import TableFilter
from connector.position import Position
from connector.schema.history import MemoryHistoryStore
from connector.schema.model import Table
from connector.schema.tracker import SchemaTracker
from connector.snapshot.coordinator import Snapshotter, first_snapshot
from connector.snapshot.reader import Chunk, Window
from connector.snapshot.state import Key
from tests.support.units import table


class Source:
    def __init__(self, rows: dict[str, dict[int, str | None]], window: Window) -> None:
        self.rows_of = rows  # table name -> {id: v}
        self.window = window
        self.opened = 0
        self.closed = 0
        self.fail_rows = False
        self.opened_after: Position | None = None

    def open(self, after: Position) -> Window:
        self.opened += 1
        self.opened_after = after
        return self.window

    def rows(self, table: Table, after: Key | None, limit: int | None) -> Chunk:
        if self.fail_rows:
            raise SnapshotReadError("connection lost")
        data = self.rows_of[table.name]
        keys = sorted(k for k in data if after is None or k > int(str(after[0])))
        return self._rows(table, keys[:limit] if limit else keys, data)

    def _rows(self, table: Table, keys: list[int], data: dict[int, str | None]) -> Iterator[tuple[Any, Key]]:
        for k in keys:
            if table.primary_key:
                yield {"id": str(k), "v": data[k]}, (str(k),)
            else:
                yield {"n": str(k), "v": data[k]}, ()

    def close(self) -> None:
        self.closed += 1


def tracker(*tables: Table, include: list[str] | None = None) -> SchemaTracker:
    t = SchemaTracker(MemoryHistoryStore(), TableFilter.of(include, None))
    for each in tables:
        t.schema.put(each)
    return t


T = table()  # db.t (id INT PRIMARY KEY, v VARCHAR(10))
KEYLESS = table("CREATE TABLE k (n INT, v VARCHAR(10))")


def snapshotter(source: Source, *tables: Table, chunk: int = 3, **kw: Any) -> Snapshotter:
    t = tracker(*tables)
    return Snapshotter(source, t, first_snapshot(t), chunk, **kw)
