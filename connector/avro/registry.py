"""The schema directory (`[avro] schemas_dir`): every schema version as .avsc, and an index.

Layout, read by consumers and the Spark jobs:
    index.json                      {"fingerprints": {hex: file}, "tables": {"db.table": [version, ...]}}
    <db>/<table>/v<N>.avsc          value schema of version N
    <db>/<table>/v<N>.key.avsc      key schema (tables with a primary key)
    _ddl.avsc, _ddl.key.avsc        statements on the `_ddl` topics
A fingerprint is the CRC-64-AVRO (Rabin) of the schema's parsing canonical form, as the
single-object encoding carries it (little-endian bytes in the message, lowercase hex of
those bytes as the index key). Writers take a file lock, so several connectors can share it.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from connector.avro.schemas import backward_compatible, ddl_key_schema, ddl_schema, key_schema, value_schema
from connector.schema.model import Table


def fingerprint_of(schema: dict[str, Any] | str) -> bytes:
    """The 8 bytes the single-object encoding puts after C3 01 (CRC-64-AVRO, little-endian)."""
    canonical = to_parsing_canonical_form(fastavro.parse_schema(schema, _write_hint=False))
    # fastavro gives the fingerprint's bytes in little-endian order already, as hex
    return bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    database: str
    table: str
    version: int
    value: dict[str, Any]
    key: dict[str, Any] | None
    value_fingerprint: bytes
    key_fingerprint: bytes | None


class SchemaDirectory:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._known: dict[tuple[str, str, str], SchemaVersion] = {}

    def version_of(self, table: Table) -> SchemaVersion:
        """The version for this definition, written to the directory the first time it is seen."""
        probe = json.dumps(value_schema(table, 0), sort_keys=True)
        cache_key = (table.database, table.name, probe)
        found = self._known.get(cache_key)
        if found is None:
            found = self._known[cache_key] = self._register(table, probe)
        return found

    def _register(self, table: Table, probe: str) -> SchemaVersion:
        with self._locked_index() as index:
            versions: list[dict[str, Any]] = index["tables"].setdefault(f"{table.database}.{table.name}", [])
            for entry in versions:
                if entry["probe"] == probe:
                    return self._load_version(table, entry)
            number = len(versions) + 1
            value, key = value_schema(table, number), key_schema(table)
            folder = Path(_safe(table.database)) / _safe(table.name)
            (self.root / folder).mkdir(parents=True, exist_ok=True)
            entry = {"version": number, "file": str(folder / f"v{number}.avsc"), "probe": probe,
                     "definition": table.to_json()}  # fmt: skip
            _write(self.root / entry["file"], value)
            value_fp = fingerprint_of(value)
            index["fingerprints"][value_fp.hex()] = entry["file"]
            entry["fingerprint"] = value_fp.hex()
            if key is not None:
                entry["key_file"] = str(folder / f"v{number}.key.avsc")
                _write(self.root / entry["key_file"], key)
                index["fingerprints"][fingerprint_of(key).hex()] = entry["key_file"]
            if versions:
                previous = Table.from_json(versions[-1]["definition"])
                compat = backward_compatible(previous, table)
                entry["backward_compatible"], entry["reasons"] = compat.backward, list(compat.reasons)
            versions.append(entry)
            return self._load_version(table, entry)

    def _load_version(self, table: Table, entry: dict[str, Any]) -> SchemaVersion:
        value = json.loads((self.root / entry["file"]).read_text())
        key = json.loads((self.root / entry["key_file"]).read_text()) if "key_file" in entry else None
        return SchemaVersion(
            table.database, table.name, entry["version"], value, key, fingerprint_of(value),
            fingerprint_of(key) if key is not None else None,
        )  # fmt: skip

    def ddl(self) -> tuple[dict[str, Any], dict[str, Any]]:
        value, key = ddl_schema(), ddl_key_schema()
        with self._locked_index() as index:
            for name, schema in (("_ddl.avsc", value), ("_ddl.key.avsc", key)):
                _write(self.root / name, schema)
                index["fingerprints"][fingerprint_of(schema).hex()] = name
        return value, key

    def schema_by_fingerprint(self, fp: bytes) -> dict[str, Any]:
        """For readers: the writer schema of a single-object encoded message."""
        index = json.loads((self.root / "index.json").read_text())
        file = index["fingerprints"].get(fp.hex())
        if file is None:
            raise KeyError(f"no schema with fingerprint {fp.hex()} in {self.root}")
        schema: dict[str, Any] = json.loads((self.root / file).read_text())
        return schema

    def latest_schema(self, database: str, table: str) -> dict[str, Any]:
        index = json.loads((self.root / "index.json").read_text())
        versions = index["tables"].get(f"{database}.{table}")
        if not versions:
            raise KeyError(f"no schema for `{database}`.`{table}` in {self.root}")
        schema: dict[str, Any] = json.loads((self.root / versions[-1]["file"]).read_text())
        return schema

    def key_columns(self, database: str, table: str) -> list[str]:
        """Field names of the newest key schema; empty for a table without a primary key."""
        index = json.loads((self.root / "index.json").read_text())
        newest = index["tables"][f"{database}.{table}"][-1]
        if "key_file" not in newest:
            return []
        key: dict[str, Any] = json.loads((self.root / newest["key_file"]).read_text())
        return [field["name"] for field in key["fields"]]

    @contextmanager
    def _locked_index(self) -> Iterator[dict[str, Any]]:
        with open(self.root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = self.root / "index.json"
            index = json.loads(path.read_text()) if path.exists() else {"fingerprints": {}, "tables": {}}
            yield index
            _write(path, index)


def _safe(name: str) -> str:
    """A path component for a database or table name (names may hold any character but `/` and NUL)."""
    return name.replace("%", "%25").replace("/", "%2F") or "%"


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
