"""Reading Sluice's messages back: framing, writer schema from `schemas/` (or the registry), body.

For consumers and tests. TIME columns (time-micros) are returned as signed microseconds,
not `datetime.time`: MySQL's TIME runs from -838:59:59 to 838:59:59.
"""

from __future__ import annotations

import copy
import io
import json
import struct
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError

from connector.avro.framing import SINGLE_OBJECT_MARKER
from connector.avro.registry import SchemaDirectory, fingerprint_of
from connector.errors import UnreadableMessageError


def plain_time(schema: Any) -> Any:
    """The schema with time-micros as plain longs (same bytes, wider range)."""
    return _plain(schema, ("time-micros",))


def plain_dates(schema: Any) -> Any:
    """The schema with every date and time type as its plain int or long."""
    return _plain(schema, ("date", "time-micros", "timestamp-micros", "timestamp-millis"))


def _plain(schema: Any, logical: tuple[str, ...]) -> Any:
    """The schema with these logical types as the type they annotate (time-micros: a long)."""
    if isinstance(schema, dict):
        if schema.get("logicalType") in logical:
            return schema["type"]
        return {k: _plain(v, logical) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_plain(v, logical) for v in schema]
    return schema


def _key_of(schema: dict[str, Any] | None) -> bytes:
    return json.dumps(schema, sort_keys=True).encode()


class MessageReader:
    def __init__(self, directory: SchemaDirectory, registry: Any = None) -> None:
        self.directory = directory
        self.registry = registry  # a confluent_kafka SchemaRegistryClient, for Confluent-framed messages
        self._parsed: dict[bytes, tuple[dict[str, Any], Any]] = {}
        # Each table's newest schema and its cache key, kept while the directory's index is the
        # one they were read from (a running connector replaces index.json when a table changes).
        # The third item: the newest's fingerprint when a message of it is read as written (its
        # writer schema is the newest itself, so resolving one to the other would change nothing
        # and cost more than the decoding: 25 us of 60 a message).
        self._newest: dict[tuple[str, str], tuple[dict[str, Any], bytes, bytes | None]] = {}
        self._index_seen: object = None

    def read(self, data: bytes, reader_schema: dict[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
        """(writer schema, record) of one key or value; resolved to `reader_schema` when given
        (a newer version of the table: columns added since get their defaults)."""
        return self._read(data, reader_schema, _key_of(reader_schema) if reader_schema is not None else b"")

    def _read(self, data: bytes, reader_schema: dict[str, Any] | None, key: bytes) -> tuple[dict[str, Any], Any]:
        schema, parsed, body = self._writer(data)
        resolved = self._schema(key, lambda: reader_schema)[1] if reader_schema is not None else None
        try:
            return schema, fastavro.schemaless_reader(io.BytesIO(body), parsed, resolved)
        except (ValueError, OverflowError):
            # a day before 0001-01-01, which Python's dates do not reach: a zero date's number in
            # a key (schemas/README.md). Such a key's dates and times come as the numbers they are.
            plain = self._schema(b"plain" + _key_of(schema), lambda: plain_dates(schema))[1]
            return schema, fastavro.schemaless_reader(io.BytesIO(body), plain, None)

    def read_newest(self, data: bytes) -> tuple[dict[str, Any], Any]:
        """(schema the record is in, record) of a value, in its table's newest version, as
        schemas/README.md tells readers to: columns renamed since are under their new names
        (through the fields' aliases), columns added since have their defaults. A value the
        newest version cannot read (a backward-incompatible change) and the DDL topics'
        values come as written."""
        writer = self.writer_schema(data)
        database, table = writer.get("sluice.database"), writer.get("sluice.table")
        if not isinstance(database, str) or not isinstance(table, str):
            return self.read(data)
        newest, key, itself = self._latest(database, table)
        try:
            if itself is not None and data[2:10] == itself and data[:2] == SINGLE_OBJECT_MARKER:
                return newest, self.read(data)[1]
            return newest, self._read(data, newest, key)[1]
        except SchemaResolutionError:
            return self.read(data)

    def writer_schema(self, data: bytes) -> dict[str, Any]:
        """The writer schema of a key or value, without decoding it."""
        return self._writer(data)[0]

    def _writer(self, data: bytes) -> tuple[dict[str, Any], Any, bytes]:
        if data[:2] == SINGLE_OBJECT_MARKER and len(data) >= 10:
            fingerprint, body = data[2:10], data[10:]
            schema, parsed = self._schema(fingerprint, lambda: self.directory.schema_by_fingerprint(fingerprint))
        elif data[:1] == b"\x00" and len(data) >= 5 and self.registry is not None:
            schema_id = struct.unpack(">I", data[1:5])[0]
            body = data[5:]
            schema, parsed = self._schema(
                b"id" + data[1:5], lambda: json.loads(self.registry.get_schema(schema_id).schema_str)
            )
        else:
            raise UnreadableMessageError(f"message starts {data[:10].hex()}: not C3 01 + fingerprint nor 00 + id")
        return schema, parsed, body

    def latest(self, database: str, table: str) -> dict[str, Any]:
        """The newest value schema of a table, from the directory's index. The reader keeps it
        (shared, not to be modified) until the index changes."""
        return self._latest(database, table)[0]

    def _latest(self, database: str, table: str) -> tuple[dict[str, Any], bytes, bytes | None]:
        seen = self.directory.index_stamp()  # before the read: a change after it is seen next time
        if seen != self._index_seen:
            self._newest.clear()
            self._index_seen = seen
        hit = self._newest.get((database, table))
        if hit is None:
            schema = self.directory.latest_schema(database, table)
            fingerprint = fingerprint_of(schema)
            try:  # the schema this reader decodes that fingerprint's messages with: the newest itself?
                written = self._schema(fingerprint, lambda: self.directory.schema_by_fingerprint(fingerprint))[0]
            except UnreadableMessageError:
                written = None
            itself = fingerprint if written == schema else None
            hit = self._newest[(database, table)] = (schema, _key_of(schema), itself)
        return hit

    def _schema(self, key: bytes, load: Any) -> tuple[dict[str, Any], Any]:
        hit = self._parsed.get(key)
        if hit is None:
            try:
                schema = load()
            except KeyError as exc:
                raise UnreadableMessageError(str(exc)) from exc
            hit = self._parsed[key] = (schema, fastavro.parse_schema(plain_time(copy.deepcopy(schema))))
        return hit
