"""canal's FlatMessage JSON (`[kafka] value_format = "canal-json"`), for canal and Flink readers.

Field for field what canal 1.1.8 puts on Kafka with `canal.mq.flatMessage=true` (its
FlatMessage, filled as MQMessageUtils fills it from LogEventConvert's entries): `id`,
`database`, `table`, `pkNames`, `isDdl`, `type`, `es`, `ts`, `sql`, `sqlType`, `mysqlType`,
`data`, `old`, `gtid`, every one present (null where canal leaves it null). Values are strings
as canal's RowsLogBuffer and LogEventConvert print them; `sqlType` is the java.sql.Types code
canal derives per value and `mysqlType` the type as the server prints it (display widths on
MariaDB), both by connector/sqltypes.py. schemas/README.md has the whole mapping and the
documented choices.

Rows: one message per row (the default; keyed by the primary key, as a JSON object of canal's
strings) or, with `message_rows = "event"`, one message per rows event holding all its rows
(canal's own shape; no key: the table's partition keeps its order). `old`: the changed
columns of each row (canal) or, with `old = "full"`, the whole before image; one entry per
row either way (canal skips rows with no changed column, which shifts later rows' entries).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

from connector.avro.encoding import message_id
from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.binlog.coltypes import Op
from connector.binlog.constants import RowsKind
from connector.binlog.rowplan import (
    KIND_TYPES,
    KINDS,
    OP_ENUM,
    OP_SET,
    OP_UINT,
    OP_UINT64,
    Strings,
    packed_column,
)
from connector.binlog.tablemap import TableMapEvent
from connector.columns import DROP, KEEP, Shaping, compiled_op, rule_flags
from connector.flat import FlatMessage, RowBatch, TableShape, key_changed, shape_of
from connector.identity import ByIdentity
from connector.native import CanalParts, KernelRows, transcoder
from connector.native_spec import record
from connector.schema.model import GEOMETRY_TYPES, Column, Table
from connector.schema.types import as_printed
from connector.sqltypes import CanalType, canal_type, mysql_type_of

Text = str | None
Render = Callable[[str], str]

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

# -- values -----------------------------------------------------------------------------------


def java_float_text(text: str) -> str:
    """Java's Double/Float.toString of the number whose shortest digits `text` holds:
    plain between 10^-3 and 10^7 (at least one decimal), else d.dddE[-]n."""
    value = Decimal(text)
    if value.is_nan() or value.is_infinite():
        return {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}.get(str(value), str(value))
    if value == 0:
        return "-0.0" if text.startswith("-") else "0.0"
    if Decimal("1e-3") <= abs(value) < Decimal("1e7"):
        plain = format(value.normalize(), "f")
        return plain if "." in plain else plain + ".0"
    sign, digits, exponent = value.normalize().as_tuple()
    assert isinstance(exponent, int)
    head, tail = str(digits[0]), "".join(map(str, digits[1:])) or "0"
    return f"{'-' if sign else ''}{head}.{tail}E{exponent + len(digits) - 1}"


T = TypeVar("T")


def _enum_index(labels: tuple[str, ...]) -> Render:
    index = _by_label({label: str(i) for i, label in enumerate(labels, 1)})
    return lambda text: index(text) or "0"  # "": the error value MySQL stores, index 0


def _set_mask(labels: tuple[str, ...]) -> Render:
    bit = _by_label({label: 1 << i for i, label in enumerate(labels)})
    return lambda text: str(sum(bit(part) or 0 for part in text.split(",") if part))


def _by_label(table: dict[str, T]) -> Callable[[str], T | None]:
    """A label's entry; a label SELECT gave exactly (a snapshot's) is found too where the history
    still holds it as SHOW CREATE TABLE printed it, '?' for characters outside the BMP, until
    a TABLE_MAP gives the exact labels (connector/schema/labels.py)."""
    if not any("?" in label for label in table):
        return table.get
    return lambda label: table.get(label, table.get(as_printed(label)))


def _latin1_of_hex(text: str) -> str:
    return bytes.fromhex(text).decode("latin-1")


def _vector_bytes(text: str) -> str:
    values = [float(x) for x in text.strip("[]").split(",") if x]
    return struct.pack(f"<{len(values)}f", *values).decode("latin-1")


def _renderer(col: Column) -> Render | None:
    """How flat.py's text of a column becomes canal's; None: the same text."""
    kind = col.data_type
    if kind in ("float", "double"):
        return java_float_text
    if kind == "enum":
        return _enum_index(col.params)
    if kind == "set":
        return _set_mask(col.params)
    if kind in GEOMETRY_TYPES:
        return _latin1_of_hex
    if kind == "vector":
        return _vector_bytes
    return None


# -- tables (sqlType and mysqlType: connector/sqltypes.py, the one rule `sluice decode` and `tail` use too)


@dataclass(frozen=True, slots=True)
class CanalShape:
    """A table version's per-column work, computed once."""

    names: tuple[str, ...]
    renders: tuple[tuple[str, Render], ...]  # only the columns whose text differs from flat.py's
    sql_types: tuple[tuple[str, CanalType], ...]
    mysql_type: dict[str, str]
    key: tuple[str, ...]


def canal_shape(table: Table) -> CanalShape:
    names = table.column_names()
    renders = tuple((c.name, r) for c in table.columns if (r := _renderer(c)) is not None)
    by_lower = {c.name.lower(): c.name for c in table.columns}
    mysql_types = {c.name: mysql_type_of(c) for c in table.columns}
    return CanalShape(
        names, renders, tuple((c.name, canal_type(mysql_types[c.name])) for c in table.columns), mysql_types,
        tuple(by_lower.get(k.lower(), k) for k in table.primary_key),
    )  # fmt: skip


def _canal_row(shape: CanalShape, row: dict[str, Text]) -> dict[str, Text]:
    out = dict(row)
    for name, render in shape.renders:
        text = out.get(name)
        if text is not None:
            out[name] = render(text)
    return out


def _sql_types(shape: CanalShape, row: dict[str, Text]) -> dict[str, int]:
    """canal's codes for a row (the last of a message, as MQMessageUtils leaves them): a NULL's or
    a large UNSIGNED value's code can differ from the column's."""
    return {name: kind.of(row[name]) for name, kind in shape.sql_types if name in row}


# -- compiled ---------------------------------------------------------------------------------

_KEY = record("key_t_")
_SQLTYPE = record("sqltype_t")


@dataclass(frozen=True, slots=True)
class CanalProgram:
    """What connector/csrc/canaltext.c's canal_rows needs of one table version (besides the event's
    fields): the columns' program, the key's columns, each column's JSON key and sqlType codes,
    and the mysqlType object's text."""

    columns: bytes
    strings: bytes
    keys: bytes
    names: bytes
    types: bytes
    mysql_type: str


def canal_program(
    flat: TableShape, table: Table, metas: tuple[Any, ...], shape: CanalShape, shaping: Shaping | None = None
) -> CanalProgram | str:
    """The compiled program of a rows event's table; else why there is none, where the Python path's
    text could differ from what the compiled code knows: names that repeat or are not the tracked
    table's, ENUM or SET labels the binlog's and the table's do not agree on (an index or bit found
    under another label), a wider sqlType on a column that is not an unsigned integer of the width its
    limit says. `shaping`: a [[kafka.columns]] rule's (connector/columns.py), `shape` then the shaped
    table's: a dropped column is read and left out, a masked one written as its mask, a hashed one as
    its digest (of the text the flat message holds: none where that text is not compiled)."""
    names = tuple(c.name for c in table.columns)
    treatment = (KEEP,) * len(names) if shaping is None else shaping.treatment
    if flat.names != names or not names or len(set(names)) != len(names):
        return "the binlog's and the tracked table's column names differ, or repeat"
    if not len(metas) == len(names) == len(treatment):
        return "the binlog's columns are not the tracked table's"
    strings, kinds, renders = Strings(), dict(shape.sql_types), dict(shape.renders)
    mask = b"" if shaping is None else json.encoder.encode_basestring(shaping.mask)[1:-1].encode()  # JSON-escaped
    flags = rule_flags(treatment, strings, mask, "" if shaping is None else shaping.salt)
    columns, types = [], []
    for meta, col, treat in zip(metas, table.columns, treatment):
        op = compiled_op(meta, col, treat, strings)
        if isinstance(op, str):
            return op
        kind = kinds.get(col.name) if treat != DROP else None
        if treat == KEEP and (kind is None or not _kept_as_canal(op, meta, kind, renders.get(col.name))):
            return (f"column `{col.name}` ({col.data_type}): the binlog's and the schema's ENUM or SET labels or "
                    "sqlTypes differ")
        columns.append(packed_column(op, strings, flags=flags[treat]))
        codes = (0, 0, 0) if kind is None else (kind.value, kind.null, kind.value if kind.wider is None else kind.wider)
        types.append(_SQLTYPE.pack(*codes))
    if any(k not in names or treatment[names.index(k)] == DROP for k in shape.key):
        return "a column of its key is not in its messages"
    quoted = Strings()
    quoted.add([f"{json.encoder.encode_basestring(name)}:".encode() for name in names])
    keys = b"".join(_KEY.pack(names.index(k), -1, -1) for k in shape.key)
    return CanalProgram(b"".join(columns), strings.packed(), keys, quoted.packed(), b"".join(types),
                        _dumps(shape.mysql_type))  # fmt: skip


def _kept_as_canal(op: Op, meta: Any, kind: CanalType, render: Render | None) -> bool:
    """Whether the compiled code writes a kept column's text and sqlType as canal.py does: a wider
    sqlType only on an unsigned integer of the width its limit says, ENUM and SET labels that agree."""
    if kind.wider is not None and (op[0] not in (OP_UINT, OP_UINT64) or kind.limit != (1 << (8 * op[1] - 1)) - 1):
        return False
    return op[0] not in (OP_ENUM, OP_SET) or _labels_agree(op[0], meta, render)


def _labels_agree(op: int, meta: Any, render: Render | None) -> bool:
    """Whether canal's text of each label the binlog names a value by is its index (ENUM; "" is index
    0) or its bit (SET), which is what the compiled code prints."""
    labels = meta.enum_values if op == OP_ENUM else meta.set_values
    if render is None or labels is None:
        return False
    if op == OP_ENUM:
        return render("") == "0" and all(render(label) == str(i) for i, label in enumerate(labels, 1))
    return all(label and "," not in label and render(label) == str(1 << i) for i, label in enumerate(labels))


@dataclass(frozen=True, slots=True)
class TableParts:
    """A table's parts of each canal-json row message, as CanalJsonEncoder.document writes one: the
    message is `{"data":[`, the row, `database` (then the event's time), `gtid` and `id` (the
    event's), `mysql` (then the row's `old`), `pk` (then the statement's text, `,"sqlType":` and the
    row's codes), `table` (then the run's ts) and the part of its kind. What the event gives between
    them, the kernel writes itself (connector/csrc/kernel.c, canal_parts), and _event_parts here."""

    database: bytes  # ],"database":..,"es":
    mysql: bytes  # ,"isDdl":false,"mysqlType":{..},"old":
    pk: bytes  # ,"pkNames":[..],"sql":
    table: bytes  # ,"table":..,"ts":
    kinds: tuple[bytes, bytes, bytes]  # ,"type":"INSERT"} .. for each of KINDS

    @staticmethod
    def of(database: str, table: str, pk_names: list[str] | None, program: CanalProgram) -> TableParts:
        kinds = tuple(f',"type":"{kind}"}}'.encode() for kind in KIND_TYPES)
        return TableParts(
            f'],"database":{_dumps(database)},"es":'.encode(),
            f',"isDdl":false,"mysqlType":{program.mysql_type},"old":'.encode(),
            f',"pkNames":{_dumps(pk_names)},"sql":'.encode(), f',"table":{_dumps(table)},"ts":'.encode(),
            (kinds[0], kinds[1], kinds[2]),
        )  # fmt: skip


def _event_parts(batch: RowBatch, parts: TableParts) -> tuple[bytes, bytes, bytes, bytes]:
    """What a rows event's messages share, around each row's `data`, `old` and `sqlType`: middle,
    the first row's and the others' `sql` part, tail (what canal_parts writes in the kernel)."""
    head, source = batch.head, batch.source
    message = message_id({"source": source})
    event = f'{head["es"]},"gtid":{_dumps(head["gtid"])},"id":{message}'.encode()
    first = parts.pk + f'{_dumps(head["sql"])},"sqlType":'.encode()
    rest = parts.pk + b'"","sqlType":'
    tail = parts.table + str(head["ts"]).encode() + parts.kinds[KINDS[batch.rows.kind]]
    return parts.database + event + parts.mysql, first, rest, tail


# -- messages ---------------------------------------------------------------------------------


def _old(message: FlatMessage, full: bool) -> dict[str, Text]:
    changed: dict[str, Text] = message["old"][0] if message["old"] else {}
    return {**message["data"][0], **changed} if full else changed


class CanalJsonEncoder:
    """Row changes and statements as canal's FlatMessage JSON: the `MessageEncoder` interface
    the pipeline writes through (`rows`, `row`, `ddl`, `kernel_rows`)."""

    key_bytes = 0  # a key is its JSON text: hashed whole
    # No TRUNCATE row message before a keyless table's snapshot: canal has no such row type and
    # Flink's canal-json format stops on it (schemas/README.md says what a consumer loses).
    truncate_markers = False

    def __init__(self, directory: SchemaDirectory, rows: str = "row", old: str = "changed") -> None:
        self.directory = directory  # unused by JSON; OversizePolicy and readers expect it
        self.per_event = rows == "event"
        self.full_old = old == "full"
        self._shapes = ByIdentity(canal_shape)
        # by the flat shape: its program and table parts (the head's database, table and pkNames are
        # its TABLE_MAP's)
        self._programs: dict[
            tuple[int, int], tuple[TableShape, Table, Shaping | None, tuple[CanalProgram, TableParts] | None]
        ] = {}
        self.compiled_rows = 0  # rows written by the compiled code (canal_rows)

    def registry(self) -> None:
        return None

    def kernel_rows(
        self, table_map: TableMapEvent, table: Table, topic: str, shaping: Shaping | None = None
    ) -> KernelRows | str:
        """What the compiled kernel needs to write this TABLE_MAP's rows as `rows` writes them
        (connector/lane.py): the program, and the table's parts of a message; else why `rows` does
        not compile them (`canal_program`'s cases). `shaping`: a [[kafka.columns]] rule's
        (connector/columns.py), whose table the messages carry."""
        flat = shape_of(table_map)
        program = canal_program(flat, table, table_map.columns, self._shape_of(table, shaping), shaping)
        if isinstance(program, str):
            return program
        parts = TableParts.of(table_map.schema, table_map.table, flat.pk_names, program)
        canal = CanalParts(program.names, program.types, self.full_old, self.per_event, parts.database, parts.mysql,
                           parts.pk, parts.table, parts.kinds)  # fmt: skip
        return KernelRows(program.columns, self._keys(program), program.strings, b"", b"", (b"", b"", b""), b"", b"",
                          b"", canal)  # fmt: skip

    def _keys(self, program: CanalProgram) -> bytes:
        """The key's columns the compiled code writes: none for a message of an event's rows."""
        return b"" if self.per_event else program.keys

    def check(self) -> None:
        pass

    def _shape_of(self, table: Table, shaping: Shaping | None) -> CanalShape:
        """The shape of the table the messages carry: a [[kafka.columns]] rule's shaped one."""
        return self.shape(table if shaping is None else shaping.table)

    def shape(self, table: Table) -> CanalShape:
        return self._shapes(table)

    def document(self, messages: list[FlatMessage], table: Table | None) -> dict[str, Any]:
        """One FlatMessage of one or more row messages of a rows event (or one statement)."""
        first = messages[0]
        doc: dict[str, Any] = {
            "data": None, "database": first["database"], "es": first["es"], "gtid": first["gtid"],
            "id": message_id(first), "isDdl": first["isDdl"], "mysqlType": None, "old": None,
            "pkNames": first.get("pkNames"), "sql": first["sql"], "sqlType": None, "table": first["table"],
            "ts": first["ts"], "type": _canal_type(first["type"]),
        }  # fmt: skip
        if table is None or first.get("data") is None:
            return doc
        shape = self.shape(table)
        data = [_canal_row(shape, m["data"][0]) for m in messages]
        doc.update(data=data, mysqlType=shape.mysql_type, sqlType=_sql_types(shape, data[-1]))
        if first["type"] == "UPDATE":
            doc["old"] = [_canal_row(shape, _old(m, self.full_old)) for m in messages]
        return doc

    def key(self, message: FlatMessage, table: Table) -> bytes | None:
        shape = self.shape(table)
        if not shape.key or message.get("data") is None:
            return None
        row = _canal_row(shape, message["data"][0])
        return _dumps({name: row.get(name) for name in shape.key}).encode()

    def row(self, message: FlatMessage, table: Table, topic: str) -> tuple[bytes | None, bytes]:
        return self.key(message, table), _dumps(self.document([message], table)).encode()

    def rows(
        self, batch: RowBatch, table: Table, topic: str, shaping: Shaping | None = None
    ) -> list[tuple[bytes | None, bytes]] | None:
        """A rows event's messages; None where the pipeline takes them one by one (a row whose key
        changes; MINIMAL or NOBLOB images, which flat.py fills per message; a table a [[kafka.columns]]
        rule shapes, where the compiled code declines). Per event, every rows event is one message."""
        if len(batch.rows.present) == len(table.columns):
            compiled = self.compiled(batch, table, shaping)
            if compiled is not None or (shaping is not None and not self.per_event):
                return compiled
        elif not self.per_event:
            return None
        messages = list(batch.messages())
        if self.per_event:
            if shaping is not None:
                messages, table = [shaping.message(m) for m in messages], shaping.table
            return [(None, _dumps(self.document(messages, table)).encode())]
        out = []
        for message in messages:
            key = self.key(message, table)
            if batch.rows.kind == RowsKind.UPDATE and key_changed(message, table):
                return None
            out.append((key, _dumps(self.document([message], table)).encode()))
        return out

    def compiled(
        self, batch: RowBatch, table: Table, shaping: Shaping | None = None
    ) -> list[tuple[bytes | None, bytes]] | None:
        """`rows` (a message per row, or per event) by the compiled code from the images' bytes; None
        where it does not apply (no bytes kept, a table it does not cover) or declines the event."""
        rows = batch.rows
        if not rows.raw or transcoder is None or rows.table is None:
            return None
        hit = self._programs.get((id(batch.shape), id(shaping)))
        if hit is None or hit[0] is not batch.shape or hit[1] is not table or hit[2] is not shaping:
            if len(self._programs) > 4096:
                self._programs.clear()
            program = canal_program(batch.shape, table, rows.table.columns, self._shape_of(table, shaping), shaping)
            made = None
            if not isinstance(program, str):
                made = program, TableParts.of(rows.table.schema, rows.table.table, batch.shape.pk_names, program)
            hit = self._programs[id(batch.shape), id(shaping)] = (batch.shape, table, shaping, made)
        if hit[3] is None:
            return None
        program, parts = hit[3]
        middle, first, rest, tail = _event_parts(batch, parts)
        out = transcoder.canal_json(rows.raw, program.columns, KINDS[rows.kind], self._keys(program), program.strings,
                                    program.names, program.types, self.full_old, middle, first, rest, tail,
                                    self.per_event)  # fmt: skip
        if out is not None:
            self.compiled_rows += len(out)
        return out

    def ddl(self, message: FlatMessage, topic: str) -> tuple[bytes, bytes]:
        key = _dumps({"database": message["database"], "table": message["table"]}).encode()
        return key, _dumps(self.document([message], None)).encode()


def _canal_type(kind: str) -> str:
    return "INSERT" if kind == "READ" else kind  # canal has no snapshot type: a READ is an INSERT


class CanalJsonReader(MessageReader):
    """Reads canal-json keys and values back (the oversize policy's and `sluice consume`'s view)."""

    def read(self, data: bytes, reader_schema: dict[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
        return {}, json.loads(data)

    def read_newest(self, data: bytes) -> tuple[dict[str, Any], Any]:
        return self.read(data)
