"""Log lines: one format (text or JSON), every line through the redactor, librdkafka's among them.

librdkafka logs through a Python logger (`LIBRDKAFKA`) instead of writing to stderr itself, so
its lines take the configured format, pass `REDACT`, and are deduplicated: a broker that stays
down is said once per state change, not once per reconnect attempt (before: ~620 raw lines in
31 s with Kafka unreachable at start).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from connector.secrets import RedactingFormatter

LIBRDKAFKA = logging.getLogger("sluice.librdkafka")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

_NUMBERS = re.compile(r"\d+")
# librdkafka's warning at every start that the gapless guarantee is experimental: Sluice sets
# it on purpose (connector/sink/kafka.py says why), so it is a debug line, not a warning.
_KNOWN_CHOICES = ("enable.gapless.guarantee is experimental",)


class Deduplicated(logging.Filter):
    """Drops a line that repeats one passed within `window_s` (its numbers aside: "after 12ms",
    ports, counts); the next one passed after the window says how many were dropped."""

    def __init__(self, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self.clock = clock
        self._seen: dict[tuple[str, str], list[float]] = {}  # key -> [when passed, dropped since]

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if any(choice in text for choice in _KNOWN_CHOICES):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        key = (record.name, _NUMBERS.sub("#", text))
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.window_s:
            seen[1] += 1
            return False
        if seen is not None and seen[1]:
            record.msg, record.args = f"{text} (and {int(seen[1])} more like it in {self.window_s:g} s)", None
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[key] = [now, 0]
        return True


class JsonLogFormatter(logging.Formatter):
    """One JSON object per log line: time, level, logger, message (and the exception)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }  # fmt: skip
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return time.strftime(datefmt or "%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))


def configure(log_format: str = "text", debug: bool = False) -> None:
    """The root logger's one handler (stderr): the format, the redactor, the level; librdkafka's
    and httpx's lines at levels that suit a service's log."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    inner = JsonLogFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(RedactingFormatter(inner))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    if not any(isinstance(f, Deduplicated) for f in LIBRDKAFKA.filters):
        LIBRDKAFKA.addFilter(Deduplicated())
    # httpx (the schema registry client) logs every request at INFO, its URL included.
    # confluent-kafka vendors its own copy of httpx, which logs as "httpx2".
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).setLevel(logging.DEBUG if debug else logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.INFO if debug else logging.WARNING)
