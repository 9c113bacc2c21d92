"""A consumer for the end-to-end tests: read every CDC topic, replay the changes, compare with the source.

It uses only what a real consumer has: the topics and the schema directory. Changes are
applied in partition order (each key lives in one partition); duplicates from a connector
restart are dropped by their source position, as a consumer would.
"""

from __future__ import annotations

import hashlib
import struct
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from connector.avro.reader import MessageReader
from connector.avro.schemas import avro_name, row_fields
from tests.support.live import KAFKA, connect

Row = dict[str, Any]


def consume(prefix: str, isolation: str = "read_committed") -> list[tuple[str, int, int, bytes | None, bytes]]:
    """(topic, partition, offset, key, value) of every message in the topics under `prefix.`
    (read_uncommitted: aborted transactions' messages too)."""
    admin = AdminClient({"bootstrap.servers": KAFKA})
    topics = {
        name: meta for name, meta in admin.list_topics(timeout=30).topics.items() if name.startswith(prefix + ".")
    }
    read = read_to_end({"isolation.level": isolation}, [TopicPartition(t, p, 0) for t, meta in topics.items()
                                                         for p in meta.partitions])  # fmt: skip
    out = [(str(m.topic()), int(m.partition() or 0), int(m.offset() or 0), m.key(), m.value() or b"") for m in read]
    return sorted(out, key=lambda m: (m[0], m[1], m[2]))


IDLE_S = 3.0  # a read no partition's end ended stops after this long without a message


def read_to_end(settings: dict[str, Any], partitions: list[TopicPartition]) -> list[Message]:
    """Every message of `partitions` from their offsets to each one's end as the broker tells it
    (librdkafka's partition EOF: the high watermark; read_committed, the last stable offset). It
    waited for three idle seconds at the end instead, about a hundred times a suite."""
    consumer = Consumer({"bootstrap.servers": KAFKA, "group.id": f"replay-{uuid.uuid4()}", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.wait.max.ms": 20, **settings})  # fmt: skip
    consumer.assign(partitions)
    open_ = {(tp.topic, tp.partition) for tp in partitions}
    out: list[Message] = []
    last = time.monotonic()
    while open_ and time.monotonic() - last < IDLE_S:
        for m in consumer.consume(1000, 0.5):
            error = m.error()
            if error is None:
                out.append(m)
                open_.add((str(m.topic()), int(m.partition() or 0)))  # past its end, if it was: read on
                last = time.monotonic()
            elif error.code() == KafkaError._PARTITION_EOF:
                open_.discard((str(m.topic()), int(m.partition() or 0)))
    consumer.close()
    return out


class Bag:
    """A keyless table's rows as a multiset: adding and removing a row cost the same however many
    there are (a list's remove made a 100,000-row table's bulk UPDATE quadratic)."""

    def __init__(self) -> None:
        self.counts: Counter[Any] = Counter()
        self.rows: dict[Any, Row] = {}

    def add(self, row: Row) -> None:
        frozen = _frozen(row)
        self.counts[frozen] += 1
        self.rows.setdefault(frozen, row)

    def remove(self, row: Row) -> None:
        frozen = _frozen(row)
        if self.counts[frozen] <= 0:
            raise ValueError(f"a change removes a row the replay does not hold: {row}")
        self.counts[frozen] -= 1

    def clear(self) -> None:
        self.counts.clear()

    def __iter__(self) -> Iterator[Row]:
        for frozen, count in self.counts.items():
            yield from [self.rows[frozen]] * count

    def __len__(self) -> int:
        return sum(self.counts.values())


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, set):
        return frozenset(value)
    return value


class Replay:
    def __init__(self, reader: MessageReader) -> None:
        self.reader = reader
        self.tables: dict[tuple[str, str], dict[Any, Row] | Bag] = {}
        self.seen: set[tuple[str, int, int, str]] = set()
        self.table_of: dict[tuple[str, int, int, str], str] = {}
        self.duplicates: list[tuple[str, int, int, str]] = []
        # (topic, partition, offset, change) of each row message applied, in the order applied:
        # what an order check reads instead of decoding every message again
        self.order: list[tuple[str, int, int, tuple[str, int, int, str]]] = []
        self._fields: dict[tuple[str, str, Any, tuple[str, ...]], list[str]] = {}  # field_of, per version and key

    def apply_all(self, messages: list[tuple[str, int, int, bytes | None, bytes]]) -> None:
        for topic, partition, offset, _, value in messages:
            if topic.endswith(("._ddl", "._positions")):
                continue
            self.order.append((topic, partition, offset, self.apply(value)))

    def apply(self, value: bytes) -> tuple[str, int, int, str]:
        """Applies one row message; returns its change (source file, pos, row, type)."""
        schema, record = self.reader.read_newest(value)
        database, table = schema["sluice.database"], schema["sluice.table"]
        source = record["source"]
        mark = (source["file"], source["pos"], source["row"], record["type"])
        if mark in self.seen:
            self.duplicates.append(mark)
            return mark
        self.seen.add(mark)
        self.table_of[mark] = table
        names = (database, table, schema.get("sluice.version"), tuple(record["pkNames"] or ()))
        keys = self._fields.get(names)
        if keys is None:  # as written: maybe renamed since
            keys = self._fields[names] = [field_of(schema, k) for k in names[3]]
        state = self.tables.setdefault((database, table), {} if keys else Bag())
        if record["type"] == "TRUNCATE":  # a keyless table's READ pass begins: it replaces the table
            state.clear()
            return mark
        row = record["data"][0]
        if isinstance(state, dict):
            key = tuple(row[k] for k in keys)
            if record["type"] == "DELETE":
                state.pop(key, None)
            else:
                state[key] = row
        elif record["type"] in ("INSERT", "READ"):
            state.add(row)
        elif record["type"] == "DELETE":
            state.remove(row)
        else:
            state.remove(record["old"][0])
            state.add(row)
        return mark


def field_of(schema: dict[str, Any], column: str) -> str:
    """The field of a value schema that holds `column`: by name, or by an alias (renamed since)."""
    name = avro_name(column)
    fields = row_fields(schema)
    found = next((f for f in fields if f["name"] == name), None) or next(
        (f for f in fields if name in f.get("aliases", ())), None
    )
    return str(found["name"]) if found is not None else name


def normalise(value: Any, avro_type: Any) -> Any:
    """A SELECT value in the form the Avro reader gives for that column."""
    if value is None:
        return None
    logical = avro_type.get("logicalType") if isinstance(avro_type, dict) else None
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC)
    if isinstance(value, timedelta):
        return (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    if avro_type == "float":
        return struct.unpack("<f", struct.pack("<f", value))[0]
    if avro_type == "long" and isinstance(value, bytes):
        return int.from_bytes(value, "big")  # BIT
    if logical == "decimal":  # BIT(64) too, as decimal(20,0)
        return Decimal(int.from_bytes(value, "big")) if isinstance(value, bytes) else Decimal(value)

    return value


def source_rows(database: str, table: str, reader: MessageReader) -> dict[Any, Row] | list[Row]:
    schema = reader.latest(database, table)
    fields = row_fields(schema)
    types = {f["name"]: (f["type"][1] if isinstance(f["type"], list) and f["type"][0] == "null" else
                         f["type"][0] if isinstance(f["type"], list) else f["type"]) for f in fields}  # fmt: skip
    conn = connect(database)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SELECT * FROM `{table}` LIMIT 0")
        names = [d[0] for d in cur.description]
        # FLOAT at full precision: the text protocol rounds it to 6 digits; Avro has the stored value
        shown = [f"CAST(`{n}` AS DOUBLE)" if types.get(n) == "float" else f"`{n}`" for n in names]
        cur.execute(f"SELECT {', '.join(shown)} FROM `{table}`")
        rows = [{n: normalise(v, types[n]) for n, v in zip(names, r)} for r in cur.fetchall()]
    keys = [k for k in _primary_key(conn, database, table)]
    if keys:
        return {tuple(r[k] for k in keys): r for r in rows}
    return rows


def _primary_key(conn: Any, database: str, table: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
            " AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION", (database, table))  # fmt: skip
        return [r[0] for r in cur.fetchall()]


def set_columns(reader: MessageReader, database: str, table: str) -> set[str]:
    fields = reader.latest(database, table)["fields"][10]["type"][1]["items"]["fields"]
    return {f["name"] for f in fields if str(f.get("mysqlType", "")).startswith("set(")}


def comparable(state: dict[Any, Row] | list[Row] | Bag, sets: set[str]) -> list[Any]:
    """Rows in a canonical order; SET values as sets (their label order is not the point)."""

    def canon(row: Row) -> list[tuple[str, Any]]:
        return sorted(
            (k, frozenset(v.split(",")) - {""} if k in sets and isinstance(v, str) else
             frozenset(v) if isinstance(v, set) else v)
            for k, v in row.items()
        )  # fmt: skip

    def order(row: list[tuple[str, Any]]) -> str:
        """The row's repr with a digest for each long text or bytes: repr of a 40 MiB blob, once a row
        of a sort, took longer than the rest of a test."""
        return repr([(k, _digest(v) if isinstance(v, str | bytes) and len(v) > 512 else v) for k, v in row])

    rows = state.values() if isinstance(state, dict) else state
    return sorted((canon(r) for r in rows), key=order)


def _digest(value: str | bytes) -> tuple[str, int, str]:
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
    return type(value).__name__, len(value), hashlib.blake2b(data, digest_size=16).hexdigest()
