"""Flat messages to Avro bytes, behind the framing (connector/avro/framing.py).

Two ways in, one set of bytes out:
  - `rows`: a rows event's changes. First the compiled transcoder (connector/_transcode.c,
    programs in connector/avro/transcode.py), straight from the images' bytes; where it
    declines, the decoded images (text or typed, see RowsEvent.typed_images), written by
    functions generated per schema version and table shape. Either way the envelope's
    shared parts are encoded once per event, behind the framing's prefix. The hot path.
  - `row`: one flat message, whose values are canal's strings; each column's converter turns
    them into the Avro value its schema wants. Everything `rows` declines comes this way.
tests/test_rows_avro_live.py and tests/test_transcode.py hold them to the same bytes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from connector.avro.binary import Convert, compile_schema, compile_tuple_record, varint
from connector.avro.framing import Framing
from connector.avro.registry import SchemaDirectory, SchemaVersion, fingerprint_of
from connector.avro.schemas import column_type, field_names, nullable
from connector.avro.transcode import program, shaped_program
from connector.avro.values import Converter, converter, zero_date_key
from connector.binlog.coltypes import TYPES, Renderer, typed_number
from connector.binlog.constants import ColumnType, RowsKind
from connector.binlog.rowcodec import RowChange
from connector.binlog.rowplan import KIND_TYPES, KINDS, Program
from connector.binlog.tablemap import ColumnMeta, TableMapEvent
from connector.columns import DROP, Shaping
from connector.errors import AvroWriteError, EncodingError
from connector.flat import VERBATIM, FlatMessage, RowBatch, TableShape, shape_of
from connector.identity import ByIdentity
from connector.native import KernelRows, transcoder
from connector.position import binlog_sort_key
from connector.schema.model import Table

Encoded = tuple[bytes | None, bytes]  # a row change's key (None without a primary key) and value


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
        self.required = frozenset(col.name for col in table.columns if not nullable(col))  # no null in Avro
        # by table shape, whether the images are typed, and the [[kafka.columns]] rule's shaping that
        # makes this codec's table of the binlog's (None: the binlog's are its own): see MessageEncoder.rows
        self.plans: dict[tuple[int, bool, int], tuple[TableShape, Shaping | None, _RowsPlan | None]] = {}

    def row(self, values: dict[str, str | None]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for column, name, convert in self.columns:
            text = values.get(column)
            if text is None and column in self.required:
                # A NULL the binlog logged for a column the schema has NOT NULL (a TABLE_MAP older
                # than the tracked definition, or bytes no server wrote): its field has no null.
                sql_type = self.table.columns[self.table.index_of(column)].sql_type()
                raise EncodingError(
                    f"`{self.table.database}`.`{self.table.name}`.`{column}`: a NULL, but the column is "
                    f"{sql_type} NOT NULL (its Avro field has no null)"
                )
            try:
                out[name] = None if text is None else convert(text)
            except (ValueError, ArithmeticError) as exc:
                raise EncodingError(
                    f"`{self.table.database}`.`{self.table.name}`.`{column}`: {str(text)[:100]!r} does not fit "
                    f"{column_type(self.table.columns[self.table.index_of(column)])} ({exc})"
                ) from exc
        return out

    def fill_key(self, record: dict[str, Any], values: dict[str, str | None]) -> None:
        """Key fields whose value is null: a zero date gets its key number; anything else (bytes
        no server wrote: a NULL in a key column) is refused, naming the column."""
        for column, name, _ in self.key:
            if record[name] is not None:
                continue
            text, col = values.get(column), self.table.columns[self.table.index_of(column)]
            if text is not None and col.data_type in ("date", "datetime", "timestamp"):
                record[name] = zero_date_key(text, col.data_type)
                continue
            raise EncodingError(
                f"`{self.table.database}`.`{self.table.name}`.`{column}`: a NULL, but the column is in the "
                "primary key (its Avro key field has no null)"
            )


_ENVELOPE = ("id", "database", "table", "type", "isDdl", "pkNames", "es", "ts", "sql", "gtid", "data", "old", "source")
_SOURCE = ("server_id", "file", "pos", "row")


def _typed(convert: Converter, render: Renderer) -> Convert:
    """How a decoded value becomes its Avro value: `convert(render(value))`, what the flat
    message path does, except that a value the renderer would print verbatim is taken as it is."""
    cls = VERBATIM.get(render)
    composed = _compose(convert, render)
    if cls is not None and cls is convert:
        return cls, composed
    if cls is str:  # temporal columns: the decoder's value is the text already
        return None, lambda v: convert(v) if v.__class__ is str else composed(v)
    return None, composed


def _compose(convert: Converter, render: Renderer) -> Callable[[Any], Any]:
    def typed(value: Any) -> Any:
        text = render(value)
        return None if text is None else convert(text)

    return typed


def _branch(union: Any, null: bool) -> bytes:
    """The Avro branch index of a [null, T] union's null (or non-null) branch."""
    index = union.index("null")
    return varint(index if null else 1 - index)


class _RowsPlan:
    """One schema version and table shape's encoders for rows taken from decoded images."""

    def __init__(
        self, version: SchemaVersion, shape: TableShape, codec: _TableCodec, numbers: tuple[ColumnMeta, ...] | None,
        shaped: tuple[Table, Shaping] | None = None,
    ) -> None:  # fmt: skip
        """`numbers`: the binlog's columns when the images come from a typed decoder (RowsEvent.typed).
        `shaped`: the table a [[kafka.columns]] rule shapes into codec's, and how; its rows are only
        transcoded (`native`), from the images' bytes."""
        fields = version.value["fields"]
        n = len(codec.columns)
        renderers = shape.renderers
        if shaped is not None:  # the shaped table's columns: those the rule keeps
            renderers = tuple(r for r, treat in zip(shape.renderers, shaped[1].treatment) if treat != DROP)
        converts = [_typed(convert, render) for (_, _, convert), render in zip(codec.columns, renderers)]
        unscaled: set[int] = set()
        for i, meta in enumerate(numbers or () if shaped is None else ()):
            if typed_number(meta) is not None:
                converts[i] = (None, None)  # the decoder's number is the Avro value
                if meta.real_type == ColumnType.MYSQL_TYPE_NEWDECIMAL:
                    unscaled.add(i)
        row = fields[10]["type"][1 - fields[10]["type"].index("null")]["items"]
        self.row = compile_tuple_record(row, list(range(n)), converts, frozenset(unscaled))
        self.key = None
        columns: list[int] = []
        if version.key is not None:
            index = {name.lower(): i for i, (name, _, _) in enumerate(codec.columns)}
            columns = [index[name.lower()] for name, _, _ in codec.key]
            self.key = compile_tuple_record(
                version.key, columns, [converts[i] for i in columns],
                frozenset(k for k, i in enumerate(columns) if i in unscaled),
            )  # fmt: skip
        # The compiled transcoder's program, for images it reads from the binlog's bytes itself;
        # `declined`: why there is none.
        made: Program | str = "the images are decoded, not read from their bytes"
        if numbers is not None and shaped is None:
            made = program(numbers, codec.table.columns, row, version.key, columns)
        elif numbers is not None and shaped is not None:
            source, shaping = shaped
            made = shaped_program(numbers, source.columns, shaping.treatment, shaping.mask, shaping.salt,
                                  row, version.key, columns)  # fmt: skip
        self.native: Program | None = None if isinstance(made, str) else made
        self.declined = made if isinstance(made, str) else ""
        # The envelope before `data`, in three runs (a record's bytes are its fields' in order):
        # `id`; the fields a table and operation repeat on every event (encoded once each);
        # and es, ts, sql, gtid (the same for the events of a statement within a millisecond).
        self.head_id = _long_field(fields[0])
        self.head_table = compile_schema({"type": "record", "name": "HeadTable", "fields": fields[1:6]})
        self.head_event = compile_schema({"type": "record", "name": "HeadEvent", "fields": fields[6:10]})
        self.tables: dict[tuple[Any, ...], bytes] = {}
        self.events: dict[tuple[Any, ...], bytes] = {}
        source = fields[12]["type"]
        self.source_file = compile_schema({"type": "record", "name": "SourceFile", "fields": source["fields"][:2]})
        self.source_pos = _long_field(source["fields"][2])
        self.files: dict[tuple[Any, ...], bytes] = {}
        self.data_open = _branch(fields[10]["type"], False) + varint(1)
        self.old_open = _branch(fields[11]["type"], False) + varint(1)
        self.old_null = _branch(fields[11]["type"], True)

    @staticmethod
    def fits(version: SchemaVersion, shape: TableShape, table: Table, numbers: tuple[ColumnMeta, ...] | None) -> bool:
        """The version's envelope is the one this plan writes, and the binlog's columns are the table's
        (with the types a typed decoder's numbers stand for)."""
        if shape.names != tuple(col.name for col in table.columns):
            return False
        for meta, col in zip(numbers or (), table.columns):  # same length: the names matched
            if typed_number(meta) is None:
                continue
            if TYPES[meta.real_type].sql != col.data_type:  # the tracked type the number is the Avro value of
                return False
            if meta.real_type == ColumnType.MYSQL_TYPE_NEWDECIMAL and col.params[1:2] != (str(meta.meta & 0xFF),):
                return False  # the tracked scale (the Avro type's) is not the binlog's
        fields = version.value["fields"]
        if tuple(f["name"] for f in fields) != _ENVELOPE:
            return False
        source = fields[12]["type"]["fields"]
        return tuple(f["name"] for f in source) == _SOURCE and source[3]["type"] == "int"


# What the kernel writes of the envelope itself (connector/csrc/kernel.c, envelope()): `id`, `es`
# and `ts` as longs, `sql` as "", `gtid` as a [null, string] union, and `source`'s fields.
_KERNEL_FIELDS = {0: "long", 6: "long", 7: "long", 8: "string", 9: ["null", "string"]}
_KERNEL_SOURCE = ["long", "string", "long", "int"]


def kernel_envelope(value: dict[str, Any]) -> bool:
    """The value schema's envelope is the one the kernel writes (a version written by this Sluice)."""
    fields = value["fields"]
    if tuple(f["name"] for f in fields) != _ENVELOPE or any(fields[i]["type"] != t for i, t in _KERNEL_FIELDS.items()):
        return False
    source = fields[12]["type"]
    return isinstance(source, dict) and [f["type"] for f in source.get("fields", ())] == _KERNEL_SOURCE


class MessageEncoder:
    # A keyless table's snapshot begins with a TRUNCATE message (data null) on its topic.
    truncate_markers = True

    def __init__(self, directory: SchemaDirectory, framing: Framing) -> None:
        self.directory = directory
        self.framing = framing
        self._codec: ByIdentity[Table, _TableCodec] = ByIdentity(lambda t: _TableCodec(self.directory.version_of(t), t))
        self._ddl = directory.ddl()
        self._ddl_fps = (fingerprint_of(self._ddl[0]), fingerprint_of(self._ddl[1]))
        self.compiled_rows = 0  # rows the compiled transcoder wrote (connector/avro/transcode.py)

    def check(self) -> None:
        """The registry answers, when messages are framed through one."""
        self.framing.check()

    def registry(self) -> Any:
        """The schema registry client Confluent framing writes through (readers need it); None otherwise."""
        return getattr(self.framing, "client", None)

    def rows(
        self, batch: RowBatch, table: Table, topic: str, shaping: Shaping | None = None
    ) -> list[tuple[bytes | None, bytes]] | None:
        """Keys and values of a rows event's changes, encoded from the decoded images.

        The bytes equal what `row` writes for each of `batch.messages()`, in either framing.
        None when this path does not apply, and the caller takes the messages one by one:
        partial row images, binlog columns that are not the tracked table's, an UPDATE that
        changes a key (which becomes a DELETE and an INSERT), or a value its type refuses
        (`row` names it). `shaping`: a [[kafka.columns]] rule's (connector/columns.py), the bytes
        `row` writes for its messages as the rule shapes them, by the compiled transcoder alone."""
        rows, n = batch.rows, len(table.columns)
        if len(rows.present) != n or (rows.kind == RowsKind.UPDATE and len(rows.present_after) != n):
            return None  # the images leave columns out (binlog_row_image=MINIMAL / NOBLOB)
        assert rows.table is not None
        shaped = None if shaping is None else (table, shaping)
        codec = self._codec(table if shaping is None else shaping.table)
        value_prefix, key_prefix = self._prefixes(codec.version, topic)
        if rows.raw:  # the images were only walked: the compiled transcoder reads their bytes
            encoded = self._compiled(codec, batch, value_prefix, key_prefix, shaped)
            if encoded is not None:
                self.compiled_rows += len(encoded)
                return encoded
        if shaped is not None:
            return None  # a shaped table's rows are the transcoder's alone
        typed = rows.typed_images()
        plan = self._plan(codec, batch.shape, rows.table.columns if typed is not None else None)
        if plan is None:
            return None
        try:
            return _encode_rows(plan, batch, typed if typed is not None else rows.rows, value_prefix, key_prefix)
        except (ValueError, ArithmeticError, AvroWriteError, TypeError, AttributeError):
            # TypeError, AttributeError: a NULL in a field with no null branch (the generated
            # encoders do not test for it, on the hot path): `row` names the column.
            return None

    def kernel_rows(
        self, table_map: TableMapEvent, table: Table, topic: str, shaping: Shaping | None = None
    ) -> KernelRows | str:
        """What the compiled kernel needs to write this TABLE_MAP's rows as `rows` writes them
        (connector/lane.py); else why it cannot, in a few words (a log line says it): a column the
        transcoder does not cover, binlog columns that are not the table's, or an envelope other
        than the one the kernel writes. `shaping`: as `rows`."""
        codec = self._codec(table if shaping is None else shaping.table)
        shape = shape_of(table_map)
        plan = self._plan(codec, shape, table_map.columns, None if shaping is None else (table, shaping))
        if plan is None:
            return "the binlog's columns are not the tracked table's"
        if not kernel_envelope(codec.version.value):
            return f"its schema version {codec.version.version} has the envelope of an earlier Sluice"
        if plan.native is None:
            return plan.declined
        value_prefix, key_prefix = self._prefixes(codec.version, topic)
        head = {"database": table_map.schema, "table": table_map.table, "isDdl": False, "pkNames": shape.pk_names}
        heads = tuple(_head_table(plan, {**head, "type": kind}) for kind in KIND_TYPES)
        return KernelRows(plan.native.columns, plan.native.keys, plan.native.strings, value_prefix, key_prefix,
                          (heads[0], heads[1], heads[2]), plan.data_open, plan.old_null, plan.old_open)  # fmt: skip

    def compiled(self, batch: RowBatch, table: Table, topic: str) -> list[Encoded] | None:
        """`rows` through the compiled transcoder alone: None where it declines (or does not apply)."""
        rows = batch.rows
        if not rows.raw:
            return None
        codec = self._codec(table)
        value_prefix, key_prefix = self._prefixes(codec.version, topic)
        return self._compiled(codec, batch, value_prefix, key_prefix)

    def _prefixes(self, version: SchemaVersion, topic: str) -> tuple[bytes, bytes]:
        """What the framing puts before a value's and a key's Avro body on this topic."""
        value_prefix = self.framing.prefix(version.value, version.value_fingerprint, topic, "value")
        key_prefix = b""
        if version.key is not None and version.key_fingerprint is not None:
            key_prefix = self.framing.prefix(version.key, version.key_fingerprint, topic, "key")
        return value_prefix, key_prefix

    def _compiled(
        self, codec: _TableCodec, batch: RowBatch, value_prefix: bytes, key_prefix: bytes,
        shaped: tuple[Table, Shaping] | None = None,
    ) -> list[Encoded] | None:  # fmt: skip
        assert batch.rows.table is not None
        plan = self._plan(codec, batch.shape, batch.rows.table.columns, shaped)
        if plan is None or plan.native is None:
            return None
        return _transcode(plan, batch, value_prefix, key_prefix)

    @staticmethod
    def _plan(
        codec: _TableCodec, shape: TableShape, numbers: tuple[ColumnMeta, ...] | None,
        shaped: tuple[Table, Shaping] | None = None,
    ) -> _RowsPlan | None:  # fmt: skip
        """`shaped`: the binlog's table a [[kafka.columns]] rule shapes into codec's, and how."""
        shaping = None if shaped is None else shaped[1]
        key = (id(shape), numbers is not None, id(shaping))
        hit = codec.plans.get(key)
        if hit is not None and hit[0] is shape and hit[1] is shaping:
            return hit[2]
        fits = _RowsPlan.fits(codec.version, shape, codec.table if shaped is None else shaped[0], numbers)
        plan = _RowsPlan(codec.version, shape, codec, numbers, shaped) if fits else None
        if len(codec.plans) > 64:
            codec.plans.clear()
        codec.plans[key] = (shape, shaping, plan)
        return plan

    def row(self, message: FlatMessage, table: Table, topic: str) -> tuple[bytes | None, bytes]:
        """Key (None without a primary key) and value of one row change."""
        codec = self._codec(table)
        version = codec.version
        if message["data"] is None:  # a keyless table's TRUNCATE marker before its READs: no row
            return self._marker(message, codec, topic)
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
        if None in key_record.values():
            codec.fill_key(key_record, message["data"][0])
        return self.framing.encode(version.key, version.key_fingerprint, topic, "key", key_record), value

    def _marker(self, message: FlatMessage, codec: _TableCodec, topic: str) -> tuple[bytes | None, bytes]:
        record = {k: message[k] for k in ("database", "table", "type", "isDdl", "pkNames", "es", "ts", "sql", "gtid",
                                          "source")}  # fmt: skip
        record.update(id=message_id(message), data=None, old=None)
        version = codec.version
        return None, self.framing.encode(version.value, version.value_fingerprint, topic, "value", record)

    def ddl(self, message: FlatMessage, topic: str) -> tuple[bytes, bytes]:
        record = {k: message[k] for k in ("database", "table", "type", "isDdl", "es", "ts", "sql", "gtid", "source")}
        record["id"] = message_id(message)
        value = self.framing.encode(self._ddl[0], self._ddl_fps[0], topic, "value", record)
        key_record = {"database": message["database"], "table": message["table"]}
        return self.framing.encode(self._ddl[1], self._ddl_fps[1], topic, "key", key_record), value


def message_id(message: FlatMessage) -> int:
    """The binlog position as one number: file number x 2^32 + offset (rows of an event share it)."""
    source = message["source"]
    return _id(source["file"], source["pos"])


def _id(file: str, pos: int) -> int:
    return _file_number(file) << 32 | pos


def _encode_rows(
    plan: _RowsPlan, batch: RowBatch, images: Sequence[RowChange], value_prefix: bytes, key_prefix: bytes
) -> list[tuple[bytes | None, bytes]] | None:
    kind = batch.rows.kind
    first, rest, tail = _envelope(plan, batch)
    row, key, out = plan.row, plan.key, []
    for i, (before, after) in enumerate(images):
        image = before if kind == RowsKind.DELETE else after
        assert image is not None
        old = plan.old_null
        if before is not None and kind == RowsKind.UPDATE:
            old = plan.old_open + row(before) + b"\x00"
        parts = (value_prefix, first if i == 0 else rest, plan.data_open, row(image), b"\x00", old, tail,
                 varint(batch.base + i))  # fmt: skip
        key_bytes = None
        if key is not None:
            key_bytes = key(image)
            if before is not None and kind == RowsKind.UPDATE and key(before) != key_bytes:
                return None  # the key changes: a DELETE under the old key and an INSERT under the new
            key_bytes = key_prefix + key_bytes
        out.append((key_bytes, b"".join(parts)))
    return out


def _envelope(plan: _RowsPlan, batch: RowBatch) -> tuple[bytes, bytes, bytes]:
    """The encoded envelope before the first row's data, before the other rows' (the statement
    rides on the first row only), and the `source` fields before `row`."""
    start, first, rest, tail = _envelope_parts(plan, batch)
    return start + first, start + rest, tail


def _envelope_parts(plan: _RowsPlan, batch: RowBatch) -> tuple[bytes, bytes, bytes, bytes]:
    """`_envelope` before joining: id and the table's fields, the first row's es..gtid, the other
    rows', and the tail. (A statement's text can be hundreds of KB: copied once, not per join.)"""
    head, source = batch.head, batch.source
    start = plan.head_id(_id(source["file"], source["pos"])) + _head_table(plan, head)
    first = rest = _head_event(plan, head["es"], head["ts"], head["sql"], head["gtid"])
    if head["sql"] and len(batch.rows.rows) > 1:
        rest = _head_event(plan, head["es"], head["ts"], "", head["gtid"])
    where = (source["server_id"], source["file"])
    file = plan.files.get(where)
    if file is None:
        if len(plan.files) > 64:
            plan.files.clear()
        file = plan.files[where] = plan.source_file(source)
    return start, first, rest, file + plan.source_pos(source["pos"])


def _head_table(plan: _RowsPlan, head: FlatMessage) -> bytes:
    pk = head["pkNames"]
    key = (head["database"], head["table"], head["type"], head["isDdl"], tuple(pk) if pk is not None else None)
    table = plan.tables.get(key)
    if table is None:
        if len(plan.tables) > 64:
            plan.tables.clear()
        table = plan.tables[key] = plan.head_table({name: head[name] for name in _ENVELOPE[1:6]})
    return table


def _head_event(plan: _RowsPlan, es: int, ts: int, sql: str, gtid: str | None) -> bytes:
    if sql:  # a statement's text rides on one event: not worth keeping (and it can be large)
        return plan.head_event({"es": es, "ts": ts, "sql": sql, "gtid": gtid})
    key = (es, ts, gtid)
    found = plan.events.get(key)
    if found is None:
        if len(plan.events) > 256:
            plan.events.clear()
        found = plan.events[key] = plan.head_event({"es": es, "ts": ts, "sql": "", "gtid": gtid})
    return found


def _long_field(field: dict[str, Any]) -> Callable[[int], bytes]:
    """The encoder of one integer field of a record: a varint when it is a plain long."""
    if field["type"] == "long":
        return varint
    record = compile_schema({"type": "record", "name": "OneField", "fields": [field]})
    return lambda value: record({field["name"]: value})


def _transcode(plan: _RowsPlan, batch: RowBatch, value_prefix: bytes, key_prefix: bytes) -> list[Encoded] | None:
    """`_encode_rows` in C, from the images' bytes (connector/avro/transcode.py); None: declined."""
    assert plan.native is not None and transcoder is not None
    start, first, rest, tail = _envelope_parts(plan, batch)
    rows, opening = batch.rows, b"".join((value_prefix, start, first, plan.data_open))
    return transcoder.transcode(
        rows.raw, plan.native.columns, KINDS[rows.kind], plan.native.keys, plan.native.strings, key_prefix, opening,
        opening if rest is first else b"".join((value_prefix, start, rest, plan.data_open)),
        plan.old_null, plan.old_open, tail, batch.base,
    )  # fmt: skip


@functools.lru_cache(maxsize=64)
def _file_number(file: str) -> int:
    return max(binlog_sort_key(file, 0)[1], 0)
