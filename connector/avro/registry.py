"""The schema directory (`[avro] schemas_dir`): every schema version as .avsc, and an index.

Layout, read by consumers and the Spark jobs:
    index.json                      {"fingerprints": {hex: file}, "tables": {"db.table": [version, ...]},
                                     "current": {"db.table": {"version": N, "at": [binlog sort key]}}}
    <db>/<table>/v<N>.avsc          value schema of version N
    <db>/<table>/v<N>.key.avsc      key schema (tables with a primary key)
    _ddl.avsc, _ddl.key.avsc        statements on the `_ddl` topics
A fingerprint is the CRC-64-AVRO (Rabin) of the schema's parsing canonical form, as the
single-object encoding carries it (little-endian bytes in the message, lowercase hex of
those bytes as the index key). Writers take a file lock, so several connectors can share it.

Renamed columns: a version's fields carry their earlier names as Avro aliases (from the
schema history's DDL). A table re-read from the server has none, so a new version takes over
the aliases its columns had in the previous one: a later version never forgets them. Aliases
are not in the canonical form, so versions that differ only in aliases share a fingerprint;
the index maps it to the newest of them. Each entry's `renamed` says which columns the version
renamed since the previous one (`{"new": "old"}`, MySQL names).

A definition that comes back to an earlier layout (ADD COLUMN then DROP COLUMN; another table
renamed onto the name) takes that layout's version again, so the table's newest schema, the
one readers read every message in, is not its last version but its `current` one: the
version of the definition the table has at the newest binlog position a connector reached
(set_current, at each DDL and start; a replay of older positions after a restart leaves it).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from connector.avro.schemas import (
    avro_name,
    backward_compatible,
    ddl_key_schema,
    ddl_schema,
    field_names,
    key_schema,
    value_schema,
)
from connector.errors import ConfigError, UnreadableMessageError
from connector.position import Position
from connector.schema.model import Table, without_aliases


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
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"[avro] schemas_dir {root}: cannot make it ({exc.strerror or exc})") from exc
        self._known: dict[tuple[str, str, str, tuple[str, ...]], SchemaVersion] = {}
        self._current: dict[str, tuple[int, tuple[str, int, int]]] = {}  # what set_current last wrote
        self._read: tuple[tuple[int, int, int], dict[str, Any]] | None = None  # the index as last read, by stamp
        self._index_path = os.path.join(self.root, "index.json")  # a str: readers stat it per message

    def claim(self, connector: str) -> None:
        """The directory is this connector's: two connectors writing one directory would number
        their versions of a same-named table as one table's (two servers' `shop.orders`, say)."""
        owner = self.root / ".owner"
        try:
            with self._locked_index():  # the first connector's claim stands
                if not owner.exists():
                    _write(owner, {"connector": connector})
                    return
                held = json.loads(owner.read_text()).get("connector")
        except (OSError, ValueError) as exc:
            raise ConfigError(f"[avro] schemas_dir {self.root}: cannot read or write {owner.name} ({exc})") from exc
        if held != connector:
            raise ConfigError(
                f"[avro] schemas_dir {self.root} holds connector {held!r}'s schemas; give connector {connector!r} a "
                "directory of its own (two connectors' versions of one table would be numbered as one's)"
            )

    def version_of(self, table: Table) -> SchemaVersion:
        """The version for this definition, written to the directory the first time it is seen."""
        probe = json.dumps(value_schema(table, 0), sort_keys=True)  # with the columns' aliases
        cache_key = (table.database, table.name, probe, _key_of(table))
        found = self._known.get(cache_key)
        if found is None:
            found = self._known[cache_key] = self._register(table)
        return found

    def _register(self, table: Table) -> SchemaVersion:
        """The newest version of the same layout that has every (unambiguous) alias of `table`;
        else a new version, with the aliases of the previous one carried over."""
        layout = json.dumps(value_schema(without_aliases(table), 0), sort_keys=True)  # the entries' `probe`
        with self._locked_index() as index:
            versions: list[dict[str, Any]] = index["tables"].setdefault(f"{table.database}.{table.name}", [])
            known = [Table.from_json(entry["definition"]) for entry in versions]
            wanted = unambiguous(table, known)
            for entry, defined in reversed(list(zip(versions, known))):
                if entry["probe"] == layout and _key_of(defined) == _key_of(table) and _has_aliases(defined, wanted):
                    return self._load_version(table, entry)
            if known:
                table = carried(table, known[-1])
            number = len(versions) + 1
            renames = renamed(known[-1], table) if known else {}
            table = unambiguous(table, known)
            value, key = value_schema(table, number), key_schema(table)
            folder = Path(_safe(table.database)) / _safe(table.name)
            (self.root / folder).mkdir(parents=True, exist_ok=True)
            entry = {"version": number, "file": str(folder / f"v{number}.avsc"), "probe": layout,
                     "definition": table.to_json(), "renamed": renames}  # fmt: skip
            _write(self.root / entry["file"], value)
            value_fp = fingerprint_of(value)
            index["fingerprints"][value_fp.hex()] = entry["file"]
            entry["fingerprint"] = value_fp.hex()
            if key is not None:
                entry["key_file"] = str(folder / f"v{number}.key.avsc")
                _write(self.root / entry["key_file"], key)
                index["fingerprints"][fingerprint_of(key).hex()] = entry["key_file"]
            if known:
                compat = backward_compatible(known[-1], table)
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

    def index_stamp(self) -> tuple[int, int, int] | None:
        """For readers that keep what they read: changes whenever index.json is written (each
        write replaces the file); None while there is none."""
        try:
            found = os.stat(self._index_path)
        except OSError:
            return None
        return found.st_ino, found.st_mtime_ns, found.st_size

    def _index(self) -> dict[str, Any]:
        """For readers: the index (shared, not to be modified), or an UnreadableMessageError that
        says why there is none. Read again only when it changed (`index_stamp`): readers ask for
        it per table and per schema, and it holds every table's versions and fingerprints (the
        Spark changelog of 100 tables parsed it 200 times a batch: 0.5 s of its 4 s decoding)."""
        path = self.root / "index.json"
        stamp = self.index_stamp()
        if stamp is not None and self._read is not None and self._read[0] == stamp:
            return self._read[1]
        try:
            index: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError:
            raise UnreadableMessageError(
                f"[avro] schemas_dir {self.root} holds no index.json: not the directory a connector writes its "
                "schemas to (the one its [avro] schemas_dir names, shared with readers), or none written yet"
            ) from None
        except (OSError, ValueError) as exc:
            raise UnreadableMessageError(f"{path}: cannot be read ({exc})") from exc
        if stamp is not None:  # stamped before the read: a write after it is read next time
            self._read = (stamp, index)
        return index

    def schema_by_fingerprint(self, fp: bytes) -> dict[str, Any]:
        """For readers: the writer schema of a single-object encoded message."""
        index = self._index()
        file = index["fingerprints"].get(fp.hex())
        if file is None:
            raise KeyError(f"no schema with fingerprint {fp.hex()} in {self.root}")
        schema: dict[str, Any] = json.loads((self.root / file).read_text())
        return schema

    def table_names(self) -> list[tuple[str, str]]:
        """The tables with a schema here: (database, table)."""
        return [(name.split(".", 1)[0], name.split(".", 1)[1]) for name in self._index()["tables"]]

    def set_current(self, tables: list[Table], at: Position) -> None:
        """Each table's version is its current one from `at` on, unless the index holds a later
        position's (a replay after a restart passes older positions again)."""
        wanted = {f"{t.database}.{t.name}": self.version_of(t).version for t in tables}
        fresh = {name: n for name, n in wanted.items() if self._current.get(name, (0, ("", 0, 0)))[1] < at.sort_key()}
        if not fresh:
            return
        with self._locked_index() as index:
            current = index.setdefault("current", {})
            for name, number in fresh.items():
                held = current.get(name)
                if held is None or tuple(held["at"]) < at.sort_key():
                    current[name] = {"version": number, "at": list(at.sort_key())}
        self._current.update({name: (number, at.sort_key()) for name, number in fresh.items()})

    def _newest(self, index: dict[str, Any], database: str, table: str) -> dict[str, Any]:
        """The index entry of the table's current version (the last one where none is said)."""
        name = f"{database}.{table}"
        versions: list[dict[str, Any]] = index["tables"].get(name) or []
        if not versions:
            raise KeyError(f"no schema for `{database}`.`{table}` in {self.root}")
        current = index.get("current", {}).get(name)
        found = next((v for v in versions if current is not None and v["version"] == current["version"]), None)
        return found or versions[-1]

    def latest_schema(self, database: str, table: str) -> dict[str, Any]:
        """The table's newest schema: its current version's (readers read every message in it)."""
        newest = self._newest(self._index(), database, table)
        schema: dict[str, Any] = json.loads((self.root / newest["file"]).read_text())
        return schema

    def key_columns(self, database: str, table: str) -> list[str]:
        """Field names of the newest key schema; empty for a table without a primary key."""
        newest = self._newest(self._index(), database, table)
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


def carried(table: Table, previous: Table) -> Table:
    """`table` with the earlier names its columns had in `previous` as well: those of the
    same-named column (a table re-read from the server knows none) and of the columns it
    was renamed from. A name another column of `table` has now is left out."""
    before = {c.name.lower(): c for c in previous.columns}
    current = {c.name.lower() for c in table.columns}
    columns = []
    for col in table.columns:
        names = list(col.aliases)
        for source in (col.name, *col.aliases):
            was = before.get(source.lower())
            if was is not None:
                names += [was.name, *was.aliases]
        others = current - {col.name.lower()}
        kept = dict.fromkeys(n for n in names if n != col.name and n.lower() not in others)
        columns.append(replace(col, aliases=tuple(kept)))
    return replace(table, columns=tuple(columns))


def renamed(previous: Table, table: Table) -> dict[str, str]:
    """{new name: old name} of the columns of `table` that `previous` had under another name."""
    names = set(previous.column_names())
    out = {}
    for col in table.columns:
        if col.name not in names:
            old = next((a for a in col.aliases if a in names), None)
            if old is not None:
                out[col.name] = old
    return out


def unambiguous(table: Table, versions: list[Table]) -> Table:
    """`table` without the aliases that would mix two columns' data: alias `a` of field `b`
    when a version had fields `a` and `b` both (after DROP b, RENAME a TO b, or a swap). A
    reader of that version's data would put its `a` into `b` and find `b` twice (Java's Avro
    refuses it; fastavro keeps one). Such a rename is in the index's `renamed`, not in aliases."""
    fields = [set(field_names(v)) for v in versions]
    columns = []
    for col, name in zip(table.columns, field_names(table)):
        clash = [f for f in fields if name in f]
        kept = tuple(a for a in col.aliases if not any(avro_name(a) in f for f in clash))
        columns.append(col if kept == col.aliases else replace(col, aliases=kept))
    return replace(table, columns=tuple(columns))


def _key_of(table: Table) -> tuple[str, ...]:
    """The primary key, which the value layout (the index's `probe`) leaves out: a new key over
    the same columns (DROP PRIMARY KEY, ADD PRIMARY KEY (b)) is a new version, with its key schema."""
    return tuple(name.lower() for name in table.primary_key)


def _has_aliases(defined: Table, wanted: Table) -> bool:
    """Every alias `wanted` asks for is in `defined` (a table of the same layout)."""
    return all(set(w.aliases) <= set(d.aliases) for d, w in zip(defined.columns, wanted.columns))


def _safe(name: str) -> str:
    """A path component for a database or table name (names may hold any character but `/` and NUL)."""
    return name.replace("%", "%25").replace("/", "%2F") or "%"


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except OSError as exc:  # a directory this user may not write: one line naming it
        raise ConfigError(f"[avro] schemas_dir: cannot write {path} ({exc.strerror or exc})") from exc
