"""Time as the connector measures and waits on it: one `Clock`, passed to every part that times
an interval or waits (the pipeline's steps, the in-flight FIFO, Kafka transactions, the sink's
waits for the broker, the checkpointer, restarts, the snapshot, the stream's reconnects).

Tests pass a manual one (tests/support/twins.py ManualClock): it moves only when told to or when
something waits on it, so a wait ends after the seconds it asked for, at once. Wall time for what
messages carry (`ts`, heartbeats) is not this clock's: those parts take a function of their own.
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
