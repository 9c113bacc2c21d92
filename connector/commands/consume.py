"""`sluice consume`: the connector's topics, decoded, as JSON lines."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from typing import Any, TextIO

from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient

from connector import logs
from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.config import Config, load_config
from connector.errors import UnreadableMessageError


def consume_topics(config: Config, limit: int, idle_s: float, out: TextIO) -> int:
    """Every message under the topic prefix, from the beginning, decoded with `schemas/` alone,
    each value in its table's newest version (`version`: which one; columns renamed since under
    their new names), or as written when that version cannot read it."""
    avro = config.avro
    registry = SchemaRegistryClient.new_client(avro.registry_config()) if avro.schema_registry_url else None
    reader = MessageReader(SchemaDirectory(avro.schemas_dir), registry)
    consumer = Consumer({
        **config.kafka.client_config(), "group.id": f"sluice-consume-{uuid.uuid4()}", "logger": logs.LIBRDKAFKA,
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 2000,
        "isolation.level": "read_committed",  # (librdkafka's default) what [kafka] exactly_once readers need
    })  # fmt: skip
    if config.kafka.exactly_once:
        print("sluice consume: committed Kafka transactions only ([kafka] exactly_once)", file=sys.stderr)
    consumer.subscribe([f"^{re.escape(config.kafka.topic_prefix)}\\..*"])
    dumps = json.JSONEncoder(ensure_ascii=False, default=_shown).encode
    shown, quiet_since = 0, time.monotonic()
    try:
        while not limit or shown < limit:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                if idle_s and time.monotonic() - quiet_since > idle_s:
                    break
                continue
            quiet_since = time.monotonic()
            try:
                version, record = _decoded(reader, message.value())
            except UnreadableMessageError as exc:
                where = f"{message.topic()}[{message.partition()}]@{message.offset()}"
                raise UnreadableMessageError(f"{where}: {exc}") from exc
            out.write(dumps({"topic": message.topic(), "partition": message.partition(), "offset": message.offset(),
                             "version": version, "value": record}) + "\n")  # fmt: skip
            out.flush()
            shown += 1
    finally:
        consumer.close()
    return shown


def _decoded(reader: MessageReader, value: bytes | None) -> tuple[Any, Any]:
    """(schema version, record) of a value: Avro in its table's newest version; JSON (canal-json,
    heartbeats, transactions, dead letters) as it is; a tombstone as null."""
    if value is None:
        return None, None
    if value[:1] in (b"{", b"["):
        return None, json.loads(value)
    schema, record = reader.read_newest(value)
    return schema.get("sluice.version"), record


def _shown(value: object) -> object:
    """JSON for what Avro decodes to: bytes as hex ("0x..."), the rest (decimals, dates) as text."""
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return str(value)


def main(args: argparse.Namespace) -> None:
    consume_topics(load_config(args.config), args.max, args.idle_s, sys.stdout)
