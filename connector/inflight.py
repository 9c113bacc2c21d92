"""In-flight transactions: which position is safe to resume from.

`InFlight` is the FIFO of transactions whose messages Kafka has not all acknowledged.
A transaction's end position becomes committable when it and every transaction before
it are fully acknowledged, so a saved position never runs ahead of Kafka. A delivery
error poisons its transaction: nothing at or after it is ever committed. The committable
positions go to the checkpoint stores (connector/checkpoint.py).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from connector.clock import SYSTEM_CLOCK, Clock
from connector.position import Position
from connector.sink.kafka import Delivered


@dataclass(slots=True)
class _Transaction:
    pending: int = 0
    messages: int = 0  # tracked in all
    failed: str | None = None
    position: Position | None = None
    delivered: Delivered | None = None  # the callback of all its messages


class InFlight:
    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._queue: deque[_Transaction] = deque()
        self._open = _Transaction()
        self.outstanding = 0  # messages handed to Kafka and not yet acknowledged
        self.errors: list[str] = []
        self.clock = clock
        self.heard_at = clock.now()  # the last acknowledgement, or when messages began to wait

    def track(self, count: int = 1) -> Delivered:
        """The delivery callback of `count` more messages of the open transaction.

        Called as `(error, n)` for n of them at a time, until the n add up to `count`."""
        txn = self._open
        if not self.outstanding:
            self.heard_at = self.clock.now()
        txn.pending += count
        txn.messages += count
        self.outstanding += count
        if txn.delivered is None:
            txn.delivered = self._callback(txn)
        return txn.delivered

    def _callback(self, txn: _Transaction) -> Delivered:
        def delivered(error: str | None, count: int = 1) -> None:
            txn.pending -= count
            self.outstanding -= count
            self.heard_at = self.clock.now()
            if error is not None:
                txn.failed = txn.failed or error
                self.errors.append(error)

        return delivered

    def silent_s(self) -> float:
        """How long messages have waited without any acknowledgement (0 with none waiting)."""
        return self.clock.now() - self.heard_at if self.outstanding else 0.0

    def close(self, position: Position) -> None:
        """The open transaction ends at `position` (a commit, or a heartbeat between transactions)."""
        self._open.position = position
        self._open.delivered = None  # its messages keep their reference; the FIFO need not
        self._queue.append(self._open)
        self._open = _Transaction()

    @property
    def open_messages(self) -> int:
        """Messages tracked since the last `close`."""
        return self._open.messages

    def committable(self) -> Position | None:
        """The newest position whose transaction and all before it are acknowledged."""
        newest = None
        while self._queue and self._queue[0].pending == 0 and self._queue[0].failed is None:
            newest = self._queue.popleft().position
        return newest
