"""The compiled module (connector/_transcode.c and connector/csrc/), when it was built: its interface.

`make install` builds it. Without it (a platform with no C compiler), every event takes the
Python path, which is the reference the compiled one is tested against. Its constants and record
layouts come from connector/native_spec.py."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast


@dataclass(frozen=True, slots=True)
class CanalParts:
    """canal-json's side of a kernel plan (connector/canal.py, CanalJsonEncoder.kernel_rows; kernel.c,
    canal_from reads these attributes by name: native_spec.BOUNDARY's CANAL)."""

    names: bytes  # each column's JSON key (the program's strings)
    types: bytes  # each column's sqlType (sqltype_t records)
    full_old: bool  # an UPDATE's `old` holds every column, not only the changed ones
    per_event: bool  # a rows event's rows in one message, without a key (message_rows = "event")
    database: bytes  # the table's parts of a message
    mysql: bytes
    pk: bytes
    table: bytes
    kinds: tuple[bytes, bytes, bytes]  # INSERT, UPDATE, DELETE


@dataclass(frozen=True, slots=True)
class KernelRows:
    """An encoder's side of a kernel plan (connector/lane.KernelPlan; made by connector/avro/encoding.py
    and connector/canal.py): the transcode program, the framing, and the envelope's parts that are
    the same for every event of the table."""

    columns: bytes  # the transcode program (connector/avro/transcode.Program)
    keys: bytes  # empty for a table without a primary key
    strings: bytes  # the program's labels and charset tables
    value_prefix: bytes  # the framing before a value's Avro body (and a key's)
    key_prefix: bytes
    heads: tuple[bytes, bytes, bytes]  # database .. pkNames, for INSERT, UPDATE, DELETE
    data_open: bytes  # `data`'s union branch and block count; `old` null, or its opening
    old_null: bytes
    old_open: bytes
    canal: CanalParts | None = None  # canal-json's rows instead (the Avro parts empty)


class KernelTransaction(Protocol):
    """The open transaction a kernel hands over (release(), and a run's `transaction`)."""

    @property
    def in_txn(self) -> bool: ...
    @property
    def began(self) -> bool: ...  # its BEGIN was read (by the kernel or before)
    @property
    def gtid(self) -> str | None: ...
    @property
    def rows(self) -> int: ...  # rows events handed on in it
    @property
    def start(self) -> int: ...  # its first change's position, -1: none yet
    @property
    def handed(self) -> int: ...  # the last rows event handed on, -1: none
    @property
    def sql(self) -> str: ...  # the statement text its next rows event carries


class KernelRun(Protocol):
    """What one kernel run made (run(); each field as its docstring says)."""

    @property
    def consumed(self) -> int: ...
    @property
    def reason(self) -> int: ...  # native_spec.REASONS
    @property
    def sequence(self) -> int: ...
    @property
    def topics(self) -> list[tuple[int, tuple[list[Any], list[Any], int]]]: ...
    @property
    def counts(self) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]: ...  # rows, events
    @property
    def bytes(self) -> int: ...
    @property
    def commits(self) -> int: ...
    @property
    def commit(self) -> tuple[int, int, int] | None: ...  # the last XID's log_pos, timestamp, server_id
    @property
    def gtids(self) -> list[tuple[Any, int, int]]: ...
    @property
    def last_event(self) -> tuple[int, int] | None: ...
    @property
    def transaction(self) -> KernelTransaction: ...
    @property
    def parts(self) -> list[tuple[str | None, int, bool, list[tuple[int, int]]]]: ...


class EventKernel(Protocol):
    """A streaming session's per-event loop (connector/csrc/kernel.c; connector/lane.py drives it)."""

    def configure(self, checksum: bool, mariadb: bool, table_map: int, rows_v1: int, rows_v2: int, query: int,
                  query_max: int, mark_before: bytes, mark_after: bytes, /) -> bool: ...  # fmt: skip
    def file(self, name: bytes, number: int, /) -> None: ...
    def table(self, table_id: int, body: bytes, plan: object, topic: int = 0, metric: int = 0, /) -> None: ...
    def begin(self, shape: bytes, keep: bytes, /) -> None: ...
    def clear(self) -> None: ...
    def inflater(self, decompress: Callable[[bytes, int], bytes], native: bool = True, /) -> None: ...
    def records(self, on: bool, /) -> None: ...
    def release(self) -> KernelTransaction: ...
    def run(self, buffer: bytearray, start: int, end: int, sequence: int, ts_ms: int, timestamp: int,
            max_messages: int, /) -> KernelRun: ...  # fmt: skip


class Transcoder(Protocol):
    """The module's functions: this is their one declaration for the type checker (no stub)."""

    Kernel: Callable[[], EventKernel]

    def transcode(
        self, body: bytes, program: bytes, kind: int, keys: bytes, strings: bytes, key_prefix: bytes, first: bytes,
        rest: bytes, old_null: bytes, old_open: bytes, tail: bytes, base: int, /,
    ) -> list[tuple[bytes | None, bytes]] | None:  # fmt: skip
        """Every row as (key or None, value) Avro bytes; None: declined (connector/avro/transcode.py)."""

    def render_json(
        self, body: bytes, program: bytes, kind: int, strings: bytes, names: tuple[bytes, ...], /
    ) -> list[str] | list[tuple[str, str]] | None:
        """Each row's canal strings as JSON: `data` (and an UPDATE's `old`); None: declined
        (programs: connector/binlog/rowplan.json_program)."""

    def canal_json(
        self, body: bytes, program: bytes, kind: int, keys: bytes, strings: bytes, names: bytes, types: bytes,
        full_old: bool, middle: bytes, first_sql: bytes, rest_sql: bytes, tail: bytes, per_event: bool = False, /,
    ) -> list[tuple[bytes | None, bytes]] | None:  # fmt: skip
        """Every row as canal-json (key or None, value), or all of them as one message with no key
        (`per_event`); None: declined (connector/canal.py)."""

    def learn_code_table(self, number: int, nodes: bytes, texts: bytes, range_: bytes = b"", /) -> None:
        """A multi-byte charset's code table, learnt once (native_spec.CODE_TABLES; rowplan.code_table)."""

    def count_rows(self, body: bytes, layout: bytes, images: int, /) -> int:
        """Rows in the images, or -1 if they do not fit the layout (connector/binlog/rowplan.walk_layout)."""

    def route(
        self, messages: list[tuple[bytes | None, bytes]], partitions: int, fixed: int, skip: int, /
    ) -> tuple[list[tuple[bytes | None, bytes | None, int]], list[tuple[bytes | None, bytes | None, int, int]]]:
        """Each message's partition, the last of each partition apart (connector/sink/partitioning.route_python)."""

    def crc32(self, data: bytes, generic: bool = False, /) -> int:
        """The CRC-32 the kernel checks events' checksums with (connector/csrc/hashes.c): zlib.crc32's;
        `generic`: without the CPU's carry-less multiply."""

    def sha256(self, salt: bytes, text: bytes, generic: bool = False, /) -> str:
        """The hex SHA-256 of salt then text, as a hashed column gets it (COL_HASH); `generic`:
        without the CPU's SHA extensions."""


def _load() -> Transcoder | None:
    try:
        module = importlib.import_module("connector._transcode")
    except ImportError:  # the build makes it; tests/test_transcode.py insists that it is there
        return None
    return cast(Transcoder, module)


transcoder = _load()

# Said once when `sluice run` starts without it (pip installs Sluice without it where it cannot
# be compiled: the extension is optional in pyproject.toml).
NOT_BUILT = (
    "the compiled kernel (connector/_transcode.c) is not built here: every event takes the Python"
    " path, several times slower; `make install`, or pip install with a C compiler and Python's headers,"
    " builds it"
)
