"""The wire framing before a message's Avro body.

  - single-object encoding (default): C3 01, the writer schema's 8-byte CRC-64-AVRO
    fingerprint (little-endian), then the Avro body;
  - Confluent: 00, the registry's 4-byte big-endian schema id, then the body, through
    confluent-kafka's AvroSerializer (subjects `{topic}-value` / `{topic}-key`, or by record name).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import fastavro
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.avro.binary import compile_schema
from connector.errors import RegistryError
from connector.secrets import shown_url

T = TypeVar("T")

SINGLE_OBJECT_MARKER = b"\xc3\x01"


class Framing(Protocol):
    def encode(self, schema: dict[str, Any], fingerprint: bytes, topic: str, field: str, record: Any) -> bytes: ...

    def prefix(self, schema: dict[str, Any], fingerprint: bytes, topic: str, field: str) -> bytes:
        """What comes before the Avro body of a record of `schema` on `topic` (`field`: key or value)."""

    def check(self) -> None:
        """What the framing depends on answers (a registry): said at start, not at the first change."""


class SingleObjectFraming:
    key_bytes = len(SINGLE_OBJECT_MARKER) + 8  # the framing before the Avro body: marker, fingerprint

    def __init__(self) -> None:
        self._encoders: dict[bytes, Callable[[Any], bytes]] = {}

    def check(self) -> None:
        pass

    def encode(self, schema: dict[str, Any], fingerprint: bytes, topic: str, field: str, record: Any) -> bytes:
        encode = self._encoders.get(fingerprint)
        if encode is None:
            fastavro.parse_schema(schema)  # validates it once
            encode = self._encoders[fingerprint] = compile_schema(schema)
        return SINGLE_OBJECT_MARKER + fingerprint + encode(record)

    def prefix(self, schema: dict[str, Any], fingerprint: bytes, topic: str, field: str) -> bytes:
        return SINGLE_OBJECT_MARKER + fingerprint


Serializer = Callable[[Any, SerializationContext], bytes | None]


def subject_name(strategy: str, topic: str, field: str, schema: dict[str, Any]) -> str:
    """The registry subject of a key or value schema, as Confluent's serializers name it:
    topic `{topic}-{field}`; record the schema's full name; topic_record `{topic}-{full name}`.
    Record names let several tables share one topic (a route) without one subject's
    compatibility check refusing the next table's schema."""
    if strategy == "topic":
        return f"{topic}-{field}"
    namespace = schema.get("namespace")
    full = f"{namespace}.{schema['name']}" if namespace else str(schema["name"])
    return full if strategy == "record" else f"{topic}-{full}"


class ConfluentFraming:
    """Registry framing; `mock://` URLs give confluent-kafka's in-memory registry (tests)."""

    key_bytes = 5  # the framing before the Avro body: magic byte 0, schema id

    def __init__(self, url: str, strategy: str = "topic", client: dict[str, str] | None = None) -> None:
        """`client`: further SchemaRegistryClient settings (basic auth, the CA)."""
        self.client = SchemaRegistryClient.new_client({**(client or {}), "url": url})  # mock://: in memory
        self.where = f"schema registry {shown_url(url)}"
        self.strategy = strategy
        # By the schema object, not its fingerprint: Avro's canonical form leaves aliases out, and a
        # version that differs only in them (a rename, then its reverse) must be registered too.
        # The object is kept beside what it keys, so its id cannot be reused.
        self._serializers: dict[tuple[int, str], tuple[dict[str, Any], Serializer]] = {}
        self._prefixes: dict[tuple[int, str, str], tuple[dict[str, Any], bytes]] = {}

    def encode(self, schema: dict[str, Any], fingerprint: bytes, topic: str, field: str, record: Any) -> bytes:
        hit = self._serializers.get((id(schema), field))
        if hit is None or hit[0] is not schema:
            namer = functools.partial(_subject, self.strategy, schema)
            conf = {"auto.register.schemas": True, "subject.name.strategy": namer}
            serializer = AvroSerializer(self.client, json.dumps(schema), conf=conf)
            hit = self._serializers[(id(schema), field)] = (schema, serializer)
        serializer = hit[1]
        kind = MessageField.KEY if field == "key" else MessageField.VALUE
        data = self._asking(
            lambda: _described(schema, field, subject_name(self.strategy, topic, field, schema)),
            lambda: serializer(record, SerializationContext(topic, kind)),
        )
        assert data is not None
        return data

    def prefix(self, schema: dict[str, Any], fingerprint: bytes, topic: str, field: str) -> bytes:
        """00 and the schema's id under its subject, registered as the serializer registers it."""
        hit = self._prefixes.get((id(schema), topic, field))
        if hit is None or hit[0] is not schema:
            subject = subject_name(self.strategy, topic, field, schema)
            schema_id = self._asking(
                lambda: _described(schema, field, subject),
                lambda: self.client.register_schema(subject, Schema(json.dumps(schema), "AVRO")),
            )
            hit = self._prefixes[(id(schema), topic, field)] = (schema, b"\x00" + schema_id.to_bytes(4, "big"))
        return hit[1]

    def check(self) -> None:
        self._asking(lambda: "listing subjects", self.client.get_subjects)

    def _asking(self, what: Callable[[], str], request: Callable[[], T]) -> T:
        """A registry request; its refusal (401, 409 an incompatible schema, ...) or its absence is a
        RegistryError that names the registry, `what` was asked (described only then: encode runs
        per message) and the reason."""
        try:
            return request()
        except SchemaRegistryError as exc:
            reason = " ".join(str(exc.error_message).split())  # Apicurio's reasons span lines
            raise RegistryError(f"{self.where}: {what()}: HTTP {exc.http_status_code}: {reason}") from exc
        except Exception as exc:  # the client raises httpx's HTTP errors, vendored under another name
            if not isinstance(exc, OSError) and not any(c.__name__ == "HTTPError" for c in type(exc).__mro__):
                raise
            raise RegistryError(f"{self.where}: {what()}: cannot reach it ({type(exc).__name__}: {exc})") from exc


def _described(schema: dict[str, Any], field: str, subject: str) -> str:
    """`value schema of db.table version 2 under subject 't-value'`; the DDL and heartbeat topics'
    schemas by their record's full name."""
    database, table, version = (schema.get(k) for k in ("sluice.database", "sluice.table", "sluice.version"))
    if database is None or table is None:
        namespace = schema.get("namespace")
        named = f"{field} schema {namespace + '.' if namespace else ''}{schema.get('name')}"
    else:
        named = f"{field} schema of {database}.{table} version {version}"
    return f"{named} under subject {subject!r}"


def _subject(strategy: str, schema: dict[str, Any], ctx: SerializationContext | None, record_name: str | None) -> str:
    """confluent-kafka's subject.name.strategy signature, answered by `subject_name`."""
    assert ctx is not None
    field = "key" if ctx.field == MessageField.KEY else "value"
    return subject_name(strategy, ctx.topic, field, schema)
