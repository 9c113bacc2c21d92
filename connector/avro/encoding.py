"""Flat messages to Avro bytes: typed rows, and the wire framing.

Framings:
  - single-object encoding (default): C3 01, the writer schema's 8-byte CRC-64-AVRO
    fingerprint (little-endian), then the Avro body;
  - Confluent: 00, the registry's 4-byte big-endian schema id, then the body, through
    confluent-kafka's AvroSerializer (subjects `{topic}-value` / `{topic}-key`).
Values in flat messages are canal's strings; each column's converter turns them into the
Avro value its schema wants, built once per schema version.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, Protocol

import fastavro
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.avro.binary import compile_schema
from connector.avro.registry import SchemaDirectory, SchemaVersion, fingerprint_of
from connector.avro.schemas import column_type, field_names
from connector.avro.values import converter
from connector.errors import SluiceError
from connector.flat import FlatMessage
from connector.position import binlog_sort_key
from connector.schema.model import Table

SINGLE_OBJECT_MARKER = b"\xc3\x01"


class EncodingError(SluiceError):
    """A value that does not fit its column's Avro type (names the table, column and value)."""


# -- framing ---------------------------------------------------------------------------


class Framing(Protocol):
    def encode(self, schema: dict[str, Any], fingerprint: bytes, topic: str, field: str, record: Any) -> bytes: ...


class SingleObjectFraming:
    def __init__(self) -> None:
        self._encoders: dict[bytes, Callable[[Any], bytes]] = {}

    def encode(self, schema: dict[str, Any], fingerprint: bytes, topic: str, field: str, record: Any) -> bytes:
        encode = self._encoders.get(fingerprint)
        if encode is None:
            fastavro.parse_schema(schema)  # validates it once
            encode = self._encoders[fingerprint] = compile_schema(schema)
        return SINGLE_OBJECT_MARKER + fingerprint + encode(record)


class ConfluentFraming:
    """Registry framing; `mock://` URLs give confluent-kafka's in-memory registry (tests)."""

    def __init__(self, url: str) -> None:
        self.client = SchemaRegistryClient.new_client({"url": url})  # mock:// gives the in-memory one
        self._serializers: dict[tuple[bytes, str], Callable[[Any, SerializationContext], bytes | None]] = {}

    def encode(self, schema: dict[str, Any], fingerprint: bytes, topic: str, field: str, record: Any) -> bytes:
        serializer = self._serializers.get((fingerprint, field))
        if serializer is None:
            serializer = AvroSerializer(self.client, json.dumps(schema), conf={"auto.register.schemas": True})
            self._serializers[(fingerprint, field)] = serializer
        kind = MessageField.KEY if field == "key" else MessageField.VALUE
        data = serializer(record, SerializationContext(topic, kind))
        assert data is not None
        return data


# -- messages ----------------------------------------------------------------------------


class _TableCodec:
    """One schema version's converters and field names."""

    def __init__(self, version: SchemaVersion, table: Table) -> None:
        self.version = version
        names = field_names(table)
        self.columns = [(col.name, name, converter(col)) for col, name in zip(table.columns, names)]
        by_name = {col.name.lower(): (col.name, name, converter(col)) for col, name in zip(table.columns, names)}
        self.key = [by_name[k.lower()] for k in table.primary_key]
        self.table = table

    def row(self, values: dict[str, str | None]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for column, name, convert in self.columns:
            text = values.get(column)
            try:
                out[name] = None if text is None else convert(text)
            except (ValueError, ArithmeticError) as exc:
                raise EncodingError(
                    f"`{self.table.database}`.`{self.table.name}`.`{column}`: {str(text)[:100]!r} does not fit "
                    f"{column_type(self.table.columns[self.table.index_of(column)])} ({exc})"
                ) from exc
        return out


class MessageEncoder:
    def __init__(self, directory: SchemaDirectory, framing: Framing) -> None:
        self.directory = directory
        self.framing = framing
        self._codecs: dict[int, tuple[Table, _TableCodec]] = {}
        self._ddl = directory.ddl()
        self._ddl_fps = (fingerprint_of(self._ddl[0]), fingerprint_of(self._ddl[1]))

    def _codec(self, table: Table) -> _TableCodec:
        hit = self._codecs.get(id(table))
        if hit is not None and hit[0] is table:
            return hit[1]
        if len(self._codecs) > 4096:
            self._codecs.clear()
        codec = _TableCodec(self.directory.version_of(table), table)
        self._codecs[id(table)] = (table, codec)
        return codec

    def row(self, message: FlatMessage, table: Table, topic: str) -> tuple[bytes | None, bytes]:
        """Key (None without a primary key) and value of one row change."""
        codec = self._codec(table)
        version = codec.version
        data = codec.row(message["data"][0])
        old = None
        if message["type"] == "UPDATE":
            old = [codec.row({**message["data"][0], **message["old"][0]})]  # the whole before image
        record = {
            "id": message_id(message), "database": message["database"], "table": message["table"],
            "type": message["type"], "isDdl": False, "pkNames": message["pkNames"], "es": message["es"],
            "ts": message["ts"], "sql": message["sql"], "gtid": message["gtid"], "data": [data], "old": old,
            "source": message["source"],
        }  # fmt: skip
        value = self.framing.encode(version.value, version.value_fingerprint, topic, "value", record)
        if version.key is None or version.key_fingerprint is None:
            return None, value
        key_record = {name: data[name] for _, name, _ in codec.key}
        return self.framing.encode(version.key, version.key_fingerprint, topic, "key", key_record), value

    def ddl(self, message: FlatMessage, topic: str) -> tuple[bytes, bytes]:
        record = {k: message[k] for k in ("database", "table", "type", "isDdl", "es", "ts", "sql", "gtid", "source")}
        record["id"] = message_id(message)
        value = self.framing.encode(self._ddl[0], self._ddl_fps[0], topic, "value", record)
        key_record = {"database": message["database"], "table": message["table"]}
        return self.framing.encode(self._ddl[1], self._ddl_fps[1], topic, "key", key_record), value


def message_id(message: FlatMessage) -> int:
    """The binlog position as one number: file number x 2^32 + offset (rows of an event share it)."""
    source = message["source"]
    pos: int = source["pos"]
    return _file_number(source["file"]) << 32 | pos


@functools.lru_cache(maxsize=64)
def _file_number(file: str) -> int:
    return max(binlog_sort_key(file, 0)[1], 0)
