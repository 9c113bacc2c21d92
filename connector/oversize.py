"""A message larger than its topic takes: a decision, never a crash loop.

Kafka refuses a message over its topic's max.message.bytes for good, and the gapless
producer then stops (connector/sink/kafka.py): before this, one bulk INSERT's text or one
3 MiB BLOB stopped the connector at every restart. The pipeline measures every message
against its topic's limit before producing it and hands the ones over it here, to the
policy `[kafka] oversized` names:

- "fail" (the default): stop before it, with one line naming the table, the key, the binlog
  position, the size, the limit and the ways out; the saved position stays before it.
- "truncate": the largest string and bytes values (BLOB/TEXT/JSON in practice) emptied,
  largest first, until it fits: null where the column may be null, else "" or b""; the
  emptied columns named in the Kafka header `sluice.truncated`. Key columns are never touched.
- "dead-letter": a small JSON record on `{prefix}._oversized` (table, key, position, size,
  limit, reason) instead of the message; the stream goes on.

Nothing is dropped silently: each decision is logged (WARN) and counted
(`sluice_oversized_total{database,table,policy}`).
"""

from __future__ import annotations

import copy
import io
import json
import logging
from dataclasses import dataclass
from typing import Any

import fastavro

from connector.avro.framing import SINGLE_OBJECT_MARKER
from connector.avro.reader import MessageReader, plain_time
from connector.errors import OversizedMessageError
from connector.sink.kafka import Headers

log = logging.getLogger("sluice.oversize")

TRUNCATED_HEADER = "sluice.truncated"
DEAD_LETTER_SUFFIX = "._oversized"


@dataclass(frozen=True, slots=True)
class Oversized:
    """One message over its topic's limit."""

    topic: str
    database: str
    table: str
    key: bytes | None
    value: bytes
    limit: int  # what the topic takes, for key, value and Kafka's framing together
    overhead: int  # Kafka's framing, counted against the limit

    @property
    def size(self) -> int:
        return len(self.key or b"") + len(self.value) + self.overhead


@dataclass(frozen=True, slots=True)
class Replacement:
    """What to produce instead: on `topic` (the same, or the dead-letter topic)."""

    topic: str
    key: bytes | None
    value: bytes
    headers: Headers | None = None


class OversizePolicy:
    def __init__(self, policy: str, reader: MessageReader, prefix: str) -> None:
        self.policy = policy
        self.reader = reader
        self.dead_letter_topic = prefix + DEAD_LETTER_SUFFIX

    def decide(self, message: Oversized) -> Replacement:
        """The message to produce in its place; OversizedMessageError under "fail"."""
        if self.policy == "truncate":
            return self._truncate(message)
        where = self._where(message)
        if self.policy == "dead-letter":
            log.warning("%s: %d bytes over the limit of %d of %s; recorded on %s instead", where, message.size,
                        message.limit, message.topic, self.dead_letter_topic)  # fmt: skip
            return Replacement(self.dead_letter_topic, message.key, self._record(message))
        raise OversizedMessageError(
            f"{where} is {message.size} bytes, over the limit of {message.limit} of topic {message.topic}; "
            f"raise the topic's max.message.bytes and [kafka] max_message_bytes, or set [kafka] oversized to "
            f'"truncate" or "dead-letter"; the saved position stays before it'
        )

    # -- truncate ------------------------------------------------------------------------

    def _truncate(self, message: Oversized) -> Replacement:
        prefix = message.value[: _prefix_length(message.value)]
        schema, record = self.reader.read(message.value)
        parsed = fastavro.parse_schema(plain_time(copy.deepcopy(schema)))
        emptied: list[str] = []
        value = message.value
        for _, image, column, empty in _largest_values(schema, record):
            if len(message.key or b"") + len(value) + message.overhead <= message.limit:
                break
            image[column] = empty
            if column not in emptied:
                emptied.append(column)
            value = prefix + _encoded(parsed, record)
        if len(message.key or b"") + len(value) + message.overhead > message.limit:
            raise OversizedMessageError(
                f"{self._where(message)} is over the limit of {message.limit} of topic {message.topic} even with "
                f"every string and bytes value emptied ({len(value)} bytes); raise the topic's max.message.bytes"
            )
        log.warning("%s: %d bytes, over the limit of %d; emptied %s to fit (header %s)", self._where(message),
                    message.size, message.limit, ", ".join(emptied), TRUNCATED_HEADER)  # fmt: skip
        return Replacement(message.topic, message.key, value, [(TRUNCATED_HEADER, ",".join(emptied).encode())])

    # -- describing it ---------------------------------------------------------------------

    def _where(self, message: Oversized) -> str:
        key, source = self._described(message)
        position = f"{source.get('file')}:{source.get('pos')} row {source.get('row')}" if source else "unknown"
        return f"`{message.database}`.`{message.table}` key {key} at {position}"

    def _described(self, message: Oversized) -> tuple[str, dict[str, Any]]:
        key = "none" if message.key is None else json.dumps(self.reader.read(message.key)[1], default=_plain)
        record = self.reader.read(message.value)[1]
        source = record.get("source") if isinstance(record, dict) else None
        return key, source if isinstance(source, dict) else {}

    def _record(self, message: Oversized) -> bytes:
        key, source = self._described(message)
        return json.dumps({
            "database": message.database, "table": message.table, "topic": message.topic,
            "key": None if message.key is None else json.loads(key), "source": source, "size": message.size,
            "limit": message.limit, "reason": f"over the limit of {message.limit} of topic {message.topic}",
        }, default=_plain).encode()  # fmt: skip


def _prefix_length(value: bytes) -> int:
    """Single-object encoding: C3 01 and an 8-byte fingerprint; Confluent framing: 00 and a 4-byte id."""
    return 10 if value[:2] == SINGLE_OBJECT_MARKER else 5


def _encoded(parsed: Any, record: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, record)
    return out.getvalue()


def _largest_values(schema: dict[str, Any], record: dict[str, Any]) -> list[tuple[int, dict[str, Any], str, Any]]:
    """(size, image, column, empty value) of every string and bytes value of the row images
    (`data`, `old`), key columns left out, largest first."""
    keys = set(record.get("pkNames") or ())
    empties = _empty_values(schema)
    found = []
    for images in (record.get("data") or [], record.get("old") or []):
        for image in images:
            for column, value in image.items():
                if column in keys or column not in empties or not isinstance(value, (str, bytes)):
                    continue
                size = len(value.encode("utf-8")) if isinstance(value, str) else len(value)
                found.append((size, image, column, empties[column]))
    found.sort(key=lambda entry: -entry[0])
    return found


def _empty_values(schema: dict[str, Any]) -> dict[str, Any]:
    """Each row field's emptied value: None where the field takes null, else its type's empty value."""
    data = next(f for f in schema["fields"] if f["name"] == "data")["type"]  # ["null", {"type": "array", ...}]
    row = next(t for t in (data if isinstance(data, list) else [data]) if isinstance(t, dict))["items"]
    out: dict[str, Any] = {}
    for field in row["fields"]:
        kinds = field["type"] if isinstance(field["type"], list) else [field["type"]]
        names = [k if isinstance(k, str) else k.get("type") for k in kinds]
        if "null" in names:
            out[field["name"]] = None
        elif "string" in names:
            out[field["name"]] = ""
        elif "bytes" in names and not any(isinstance(k, dict) and k.get("logicalType") for k in kinds):
            out[field["name"]] = b""
    return out


def _plain(value: Any) -> Any:
    """JSON for what Avro decodes: bytes as hex, decimals and times as text."""
    if isinstance(value, bytes):
        return value.hex()
    return str(value)
