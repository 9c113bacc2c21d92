"""Reading a ChangeStream in live tests: a fast reconnect backoff, a consumer that counts changes
only at their Commit, reading to a position."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from connector.items import Changes, Commit, StreamItem
from connector.position import Position
from connector.stream import Backoff, ChangeStream

FAST = Backoff(first_s=0.05, max_s=1.0, attempts=200)


class Consumer:
    """Changes count only once their Commit arrives, as a Kafka producer would treat them."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, str]] = []
        self.committed: dict[str, list[tuple[str, str]]] = {}
        self.duplicates: list[str] = []
        self.last: Position | None = None

    def take(self, item: StreamItem) -> None:
        if isinstance(item, Changes):
            self.pending += [(m["type"], m["data"][0]["id"]) for m in item.messages if not m["isDdl"] and m["data"]]
        elif isinstance(item, Commit):
            if item.gtid in self.committed:
                self.duplicates.append(item.gtid)
            if item.gtid is not None and (self.pending or item.rows):
                self.committed[item.gtid] = self.pending
            self.pending = []
            self.last = item.position
        else:
            self.last = item.position

    def drop_partial(self) -> None:
        self.pending = []


def run_to(items: Iterator[StreamItem], consumer: Consumer, end: Position) -> None:
    for item in items:
        consumer.take(item)
        if isinstance(item, Commit) and item.position.sort_key() >= end.sort_key():
            return


def collect(source: ChangeStream, start: Position, end: Position) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for item in source.items(start, blocking=False):
        if isinstance(item, Changes):
            messages += item.messages
        if isinstance(item, Commit) and item.position.sort_key() >= end.sort_key():
            break
    return messages
