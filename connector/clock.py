"""Time as the connector measures and waits on it: one `Clock`, passed to every part that times
an interval or waits (the pipeline's steps, the in-flight FIFO, Kafka transactions, the sink's
waits for the broker, the checkpointer, restarts, the snapshot, the stream's reconnects).

Tests pass a `ManualClock`: it moves only when told to or when something waits on it, so a wait
ends after the seconds it asked for, at once. The in-memory Kafka twin (connector/sink/kafka.py
MemorySink) waits on the clock it is given when a poll has nothing to serve, as a real poll
blocks for its timeout. Wall time for what messages carry (`ts`, heartbeats) is not this clock's:
those parts take a function of their own.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds, monotonic: for intervals and deadlines."""
        ...

    def sleep(self, seconds: float, /) -> None:
        """Wait `seconds`."""
        ...


class SystemClock:
    """The system's: time.monotonic and time.sleep themselves (`now` is read per kernel burst
    and per acknowledgement, where one Python frame more is measurable)."""

    now = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)


SYSTEM_CLOCK: Clock = SystemClock()


class ManualClock:
    """A clock tests move: `at` is now; a sleep moves it on (and is noted in `slept`)."""

    def __init__(self, at: float = 0.0) -> None:
        self.at = at
        self.slept: list[float] = []

    def now(self) -> float:
        return self.at

    def sleep(self, seconds: float, /) -> None:
        self.slept.append(seconds)
        self.at += max(seconds, 0.0)
