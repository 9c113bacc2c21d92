"""canal-style flat messages from decoded events.

`FlatMessageBuilder` follows one event stream: it remembers the transaction's GTID and
the statement's SQL (ROWS_QUERY / ANNOTATE_ROWS) and turns each changed row into one
message. Values are strings rendered as canal renders them; per-table renderers and
type maps are built once per TABLE_MAP and reused for every row.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from connector.binlog.coltypes import (
    STRING_TYPES,
    TYPES,
    Renderer,
    is_binary,
    mysql_type,
    render_decimal,
    render_int,
    render_plain,
    render_text,
)
from connector.binlog.constants import ColumnType as T
from connector.binlog.constants import RowsKind
from connector.binlog.events import (
    AnnotateRowsEvent,
    Event,
    GtidEvent,
    MariadbGtidEvent,
    QueryEvent,
    RowsQueryEvent,
    TransactionPayloadEvent,
    XidEvent,
)
from connector.binlog.jsonb import JsonPartial
from connector.binlog.rowplan import KINDS, TYPE_NAMES, Program, json_program
from connector.binlog.rows import RowsEvent
from connector.binlog.tablemap import ColumnMeta, TableMapEvent
from connector.control import Txn, control
from connector.ddlkind import DdlKind, ddl_kind
from connector.identity import ByIdentity
from connector.native import transcoder
from connector.querytext import NO_QUERIES, QueryText
from connector.schema.model import Table
from connector.secrets import without_passwords
from connector.sqltypes import canal_type, mysql_type_of

if TYPE_CHECKING:
    from connector.offset import Offset  # which names items, which name this module's messages

FlatMessage = dict[str, Any]
Definitions = Callable[[TableMapEvent], Table]  # a resolved TABLE_MAP's definition (SchemaTracker.definition)


def key_changed(message: FlatMessage, table: Table) -> bool:
    """An UPDATE whose old image differs in a primary key column: the key moves, so the pipeline
    publishes a DELETE under the old key and an INSERT under the new (each key's history in its
    one partition), and the encoders' per-event paths leave the event to it."""
    old = message["old"][0] if message["old"] else {}
    return any(k in old for k in table.primary_key)


def sql_type(col: ColumnMeta) -> int:
    """canal's sqlType of a (non-NULL, in-range) value of the column, by the binlog's type text:
    the rule of connector/sqltypes.py, which canal-json applies per value."""
    return canal_type(mysql_type(col)).value


# -- value rendering -----------------------------------------------------------------------


# Renderers that print a decoded value of the given class as a text that the Avro
# converter of the same name parses back to an equal value: the Avro path takes such
# values as they are, without the text (connector/avro/encoding.py).
VERBATIM: dict[Renderer, type] = {render_int: int, render_decimal: Decimal, render_text: str}


def _renderer(col: ColumnMeta, name: str) -> Renderer:
    kind = col.real_type
    if kind == T.MYSQL_TYPE_JSON:
        return lambda v: v.to_sql(name) if isinstance(v, JsonPartial) else render_plain(v)
    if kind in STRING_TYPES:
        return render_plain if is_binary(col) else render_text
    entry = TYPES.get(kind)
    return render_plain if entry is None else entry.render


@dataclass(frozen=True, slots=True)
class TableShape:
    """Everything about a table that every message of it repeats, computed once."""

    names: tuple[str, ...]
    renderers: tuple[Renderer, ...]
    pk_names: list[str] | None
    sql_types: dict[str, int]
    mysql_types: dict[str, str]
    whole: Callable[[tuple[Any, ...]], dict[str, str | None]]  # `_render` of an image of every column
    whole_json: Callable[[tuple[Any, ...]], str]  # and that dict's compact JSON text (ensure_ascii off)
    # Each name's column in such a dict: the last of a repeated name, in the first's place.
    last: dict[str, int]


_SHAPES: dict[tuple[bytes, tuple[ColumnMeta, ...], tuple[int, ...], Table | None], TableShape] = {}


def shape_of(table: TableMapEvent, definition: Table | None = None) -> TableShape:
    """The table's shape, one object per TABLE_MAP body, columns, key and definition (the encoder
    keys its plans by it: a session started again, or the compiled kernel's plan, finds them made)."""
    key = (table.raw, table.columns, table.primary_key, definition)
    shape = _SHAPES.get(key)
    if shape is None:
        if len(_SHAPES) > 4096:
            _SHAPES.clear()
        shape = _SHAPES[key] = table_shape(table, definition)
    return shape


def table_shape(table: TableMapEvent, definition: Table | None = None) -> TableShape:
    names = table.column_names
    renderers = tuple(_renderer(col, name) for col, name in zip(table.columns, names))
    types = mysql_types(table, definition)
    return TableShape(
        names,
        renderers,
        list(table.pk_names) or None,
        {name: canal_type(text).value for name, text in types.items()},
        types,
        *whole_renderers(names, renderers),
        {name: i for i, name in enumerate(names)},
    )


def mysql_types(table: TableMapEvent, definition: Table | None) -> dict[str, str]:
    """Each column's mysqlType: as the server prints it where the schema history defines the
    table (canal-json's, connector/sqltypes.py), else as far as the TABLE_MAP tells it."""
    names = table.column_names
    if definition is not None and len(definition.columns) == len(names):
        return {name: mysql_type_of(col) for name, col in zip(names, definition.columns)}
    return {name: mysql_type(col) for name, col in zip(names, table.columns)}


# The renderers whose work is written inline (one expression each) by `whole_renderers`: the
# text, and the text's JSON (digits, sign and point need no escaping: integers' and decimals'
# texts are quoted as they are).
_INLINE: dict[Renderer, str] = {
    render_text: "(v{i} if v{i} is None or v{i}.__class__ is str else _plain(v{i}))",
    render_int: "(None if v{i} is None else str(v{i}))",
    render_decimal: "(None if v{i} is None else v{i} if v{i}.__class__ is str else format(v{i}, 'f'))",
}
_INLINE_JSON: dict[Renderer, str] = {
    render_text: "('null' if v{i} is None else q(v{i}) if v{i}.__class__ is str else q(_plain(v{i})))",
    render_int: "('null' if v{i} is None else f'\"{{v{i}}}\"')",
    render_decimal: "('null' if v{i} is None else f'\"{{v{i}}}\"' if v{i}.__class__ is str else f'\"{{v{i}:f}}\"')",
}


def whole_renderers(
    names: tuple[str, ...], renderers: tuple[Renderer, ...]
) -> tuple[Callable[[tuple[Any, ...]], Any], Callable[[tuple[Any, ...]], str]]:
    """Two functions of an image of every column: its `{name: text}`, and that dict as compact
    JSON (what json.dumps(ensure_ascii=False, separators=(",", ":")) writes, with the same
    string encoder). The columns' renderers are called in one expression each, the common ones
    written inline, and the JSON is one f-string: a rows event's images are mostly whole, and
    this is their per-row work on the JSON lines and canal paths."""
    q = json.encoder.encode_basestring
    env: dict[str, Any] = {"_plain": render_plain, "q": q, "_json": lambda t: "null" if t is None else q(t)}
    texts, items = [], []
    unique: dict[str, int] = {}  # a repeated name: the dict keeps the last value, in the first's place
    for i, (name, renderer) in enumerate(zip(names, renderers)):
        inline = _INLINE.get(renderer)
        if inline is None:
            env[f"r{i}"] = renderer
            inline = "r{i}(v{i})"
        texts.append(f"    t{i} = {inline.format(i=i)}\n")
        items.append(f"{name!r}: t{i}")
        unique[name] = i
    fragments, template = [], "{{"
    for n, (name, i) in enumerate(unique.items()):
        key = ("," if n else "") + q(name) + ":"
        fragment = _INLINE_JSON.get(renderers[i], "_json(r{i}(v{i}))")
        fragments.append(f"    j{i} = {fragment.format(i=i)}\n")
        template += key.replace("{", "{{").replace("}", "}}") + f"{{j{i}}}"
    template += "}}"
    unpack = f"    {', '.join(f'v{i}' for i in range(len(names)))}, = image\n" if names else ""
    code = (f"def render(image):\n{unpack}{''.join(texts)}    return {{{', '.join(items)}}}\n"
            f"def render_json(image):\n{unpack}{''.join(fragments)}    return f{template!r}\n")  # fmt: skip
    exec(compile(code, "<flat renderer>", "exec"), env)  # noqa: S102 - code made here, of repr'd names
    return env["render"], env["render_json"]


# -- DDL recognition (enough to label statements; the schema history parses them fully) --

# Schema statements; CREATE USER, GRANT and the like are not DDL of any table.
_DDL = re.compile(
    r"^\s*(?:/\*.*?\*/\s*)*(CREATE|ALTER|DROP|RENAME|TRUNCATE)\b"
    r"(?!\s+(?:USER|ROLE|SERVER|RESOURCE|LOGFILE|TABLESPACE|UNDO|SPATIAL\s+REFERENCE)\b)",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class RowBatch:
    """The rows of one rows event, before they are rendered as flat messages.

    The Avro path encodes straight from `rows` (the decoded values); `messages()` renders
    canal's strings for everything else (JSON lines, the snapshot's key bookkeeping)."""

    shape: TableShape
    rows: RowsEvent
    head: FlatMessage  # the fields every row's message shares; `sql` belongs to the first row only
    source: dict[str, Any]  # file, pos and server_id of the event
    base: int  # the `source.row` of the first row

    def messages(self) -> Iterator[FlatMessage]:
        shape, rows, head = self.shape, self.rows, dict(self.head)
        for i, (before, after) in enumerate(rows.rows):
            message = dict(head)
            message.update(_images(shape, rows, before, after))
            message["source"] = {**self.source, "row": self.base + i}
            yield message
            # The statement's text rides on its first row only: a 1,000-row INSERT would
            # otherwise repeat a ~300 KB text 1,000 times (bench/decode.py ran out of memory).
            head["sql"] = ""


class FlatMessageBuilder:
    """Turns one ordered event stream into flat messages."""

    def __init__(self, offset: Offset, clock: Callable[[], float] = time.time, query: QueryText = NO_QUERIES) -> None:
        """`offset`: the offset context (connector/offset.py) whose transaction's GTID and statement
        text the messages carry, and whose file they name (`Offset.of(file)`: one of its own)."""
        self.offset = offset
        self.cursor = self.offset.cursor  # the file named in `source`
        self._clock = clock
        self._query_text = query
        # by TABLE_MAP, then by its definition (a DDL makes a new one)
        self._shapes: ByIdentity[TableMapEvent, ByIdentity[Table | None, TableShape]] = ByIdentity(
            lambda table: ByIdentity(lambda definition: shape_of(table, definition), most=8)
        )
        # The schema history's definition of a (resolved) TABLE_MAP, where there is one
        # (SchemaTracker.definition): mysqlType and sqlType as canal-json gives them.
        self.definitions: Definitions | None = None

    def feed(self, event: Event) -> Iterator[FlatMessage]:
        """The messages of an event other than a rows event or a compressed transaction (the
        assembler's and `feed_batched`'s: a rows event's are its RowBatch's)."""
        body = event.body
        if isinstance(body, (GtidEvent, MariadbGtidEvent)):
            self.offset.rows_gtid = body.gtid
        elif isinstance(body, (RowsQueryEvent, AnnotateRowsEvent)):
            self.offset.sql = self._query_text.of(body.query)
        elif isinstance(body, XidEvent):
            self.end_transaction()
        elif isinstance(body, QueryEvent):
            yield from self._query(event, body)

    def feed_batched(self, event: Event) -> Iterator[FlatMessage | RowBatch]:
        """`feed`, with a rows event's messages as their RowBatch, for the caller to render."""
        body = event.body
        if isinstance(body, RowsEvent):
            batch = self.batch(event, body)
            if batch is not None:
                yield batch
        elif isinstance(body, TransactionPayloadEvent):
            for inner in body.events:
                yield from self.feed_batched(inner)
        else:
            yield from self.feed(event)

    def end_transaction(self) -> None:
        """The transaction's GTID, statement text and row numbering forgotten (at its end)."""
        offset = self.offset
        offset.rows_gtid, offset.sql, offset.last_rows_pos = None, "", -1  # rows are numbered within a payload

    def _shape(self, table: TableMapEvent) -> TableShape:
        # The same TABLE_MAP object comes back for every transaction (the parser decodes each
        # body once): look it up by identity before hashing its columns.
        return self._shapes(table)(self.definitions(table) if self.definitions is not None else None)

    def _base(self, event: Event, rows: RowsEvent, shape: TableShape) -> FlatMessage:
        assert rows.table is not None
        return {
            "database": rows.table.schema,
            "table": rows.table.table,
            "type": TYPE_NAMES[rows.kind],
            "isDdl": False,
            "pkNames": shape.pk_names,
            "es": event.header.timestamp * 1000,
            "ts": int(self._clock() * 1000),
            "sql": self.offset.sql,
            "sqlType": shape.sql_types,
            "mysqlType": shape.mysql_types,
            "gtid": self.offset.rows_gtid,
        }

    def batch(self, event: Event, rows: RowsEvent) -> RowBatch | None:
        """The event's rows with everything their messages share; None when it has none to hand on.

        The transaction's GTID and the statement's SQL are taken now, so the batch renders
        the same messages whenever it is asked to."""
        if rows.table is None or not rows.decoded:
            return None
        # Events inside one TRANSACTION_PAYLOAD share its position: number rows across them (the
        # compiled kernel does too: kernel.c, rows).
        offset = self.offset
        base = offset.row_base if event.pos == offset.last_rows_pos else 0
        offset.last_rows_pos, offset.row_base = event.pos, base + len(rows.rows)
        shape = self._shape(rows.table)
        head = self._base(event, rows, shape)
        offset.sql = ""
        if not rows.rows:
            return None
        source = {"file": self.cursor.file, "pos": event.pos, "server_id": event.header.server_id}
        return RowBatch(shape, rows, head, source, base)

    def _query(self, event: Event, query: QueryEvent) -> Iterator[FlatMessage]:
        sql = query.query
        meaning = control(sql)
        if meaning is not None:  # transaction control: no message
            if meaning.txn is Txn.END or meaning.xa:
                self.end_transaction()
            return
        ddl = _DDL.match(sql)
        kind = ddl_kind(sql, query.schema) if ddl else DdlKind("QUERY", query.schema, "")
        yield {
            "database": kind.database,
            "table": kind.table,
            "type": kind.type,
            "isDdl": bool(ddl),
            "pkNames": None,
            "es": event.header.timestamp * 1000,
            "ts": int(self._clock() * 1000),
            "sql": without_passwords(sql),  # MariaDB logs CREATE USER ... IDENTIFIED BY 'secret' as written
            "sqlType": None,
            "mysqlType": None,
            "data": None,
            "old": None,
            "gtid": self.offset.rows_gtid,
            "source": {"file": self.cursor.file, "pos": event.pos, "server_id": event.header.server_id, "row": 0},
        }
        if ddl:
            self.offset.rows_gtid = None  # DDL commits on its own


def _render(shape: TableShape, columns: tuple[int, ...], image: tuple[Any, ...]) -> dict[str, str | None]:
    names, renderers = shape.names, shape.renderers
    if len(columns) == len(names) == len(image):  # every column: `columns` is 0 .. n - 1
        return shape.whole(image)
    return {names[i]: renderers[i](v) for i, v in zip(columns, image)}


def _images(shape: TableShape, rows: RowsEvent, before: Any, after: Any) -> dict[str, Any]:
    if rows.kind == RowsKind.WRITE:
        return {"data": [_render(shape, rows.present, after)], "old": None}
    if rows.kind == RowsKind.DELETE:
        return {"data": [_render(shape, rows.present, before)], "old": None}
    if len(rows.present) == len(rows.present_after) == len(shape.names):
        return {"data": [shape.whole(after)], "old": [_changed(shape, before, after)]}
    old = _render(shape, rows.present, before)
    new = _render(shape, rows.present_after, after)
    # With MINIMAL/NOBLOB images the after image omits unchanged columns: take them from before.
    data = {**old, **new}
    changed = {k: v for k, v in old.items() if k in new and new[k] != v}
    return {"data": [data], "old": [changed]}


# Classes whose equal values always render to the same text (a float's -0.0 == 0.0 does not).
_EQUAL_TEXT = frozenset({str, int, bytes, type(None)})


def _changed(shape: TableShape, before: tuple[Any, ...], after: tuple[Any, ...]) -> dict[str, str | None]:
    """An UPDATE's `old` from two whole images: the before text of each column whose text the
    update changed. What `_images` computes from both images rendered whole, rendering only
    the columns whose values could differ in text (an UPDATE changes a few of many)."""
    changed: dict[str, str | None] = {}
    renderers = shape.renderers
    for name, i in shape.last.items():
        b, a = before[i], after[i]
        if b is a or (b.__class__ is a.__class__ and b.__class__ in _EQUAL_TEXT and b == a):
            continue
        text = renderers[i](b)
        if text != renderers[i](a):
            changed[name] = text
    return changed


def _texts_json(texts: dict[str, str | None]) -> str:
    """Compact JSON of a dict of texts, as the C encoder writes it (one call of it costs more)."""
    q = json.encoder.encode_basestring
    return "{" + ",".join([f"{q(k)}:{'null' if v is None else q(v)}" for k, v in texts.items()]) + "}"


class JsonLineEncoder:
    """Flat messages as compact JSON lines, encoding each table's constant parts once.

    `pkNames`, `sqlType` and `mysqlType` are the same objects in every message of a table
    shape and most of a message's bytes: their text is cached by identity (the cache holds
    the object, so an id is not reused while cached) and appended after the other fields.
    The rest is one call of the C encoder, made once (json.dumps rebuilds it per call).
    """

    _SHARED = ("pkNames", "sqlType", "mysqlType")

    def __init__(self) -> None:
        self._dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
        self._c_encode = _c_encoder()
        self._shared = ByIdentity(self._dumps)  # pkNames, sqlType, mysqlType: a table's objects
        self._programs: dict[int, tuple[TableShape, Program | None, tuple[bytes, ...]]] = {}  # by shape
        self.compiled_rows = 0  # rows the compiled renderer wrote

    def encode(self, message: FlatMessage) -> str:
        rest = {k: v for k, v in message.items() if k not in self._SHARED}
        return self._text(rest)[:-1] + self._shared_fields(message) + "}"

    def lines(self, batch: RowBatch) -> str:
        """`encode` of each of `batch.messages()`, each ending in a newline, in one string: what
        the rows share (the head, the source's file and position, the shared fields) is encoded
        once, and each row costs its images' encoding alone."""
        dumps = self._text
        head = {k: v for k, v in batch.head.items() if k not in self._SHARED}
        first = dumps(head)[:-1] + ',"data":['  # the statement's text rides on the first row only
        later = first if not head.get("sql") else dumps({**head, "sql": ""})[:-1] + ',"data":['
        source = dumps(batch.source)[:-1] + ',"row":'
        tail = "}" + self._shared_fields(batch.head) + "}\n"
        shape, rows = batch.shape, batch.rows
        compiled = self._compiled(batch)
        if rows.kind == RowsKind.UPDATE and compiled is not None:
            texts = [f'{data}],"old":[{old}' for data, old in compiled]
            source = '],"source":' + source
        elif compiled is not None:
            texts = compiled
            source = '],"old":null,"source":' + source
        elif rows.kind == RowsKind.UPDATE:  # each text: `data`'s image, then `old` (unclosed)
            whole = len(rows.present) == len(rows.present_after) == len(shape.names)
            texts = []
            for before, after in rows.rows:
                if whole:
                    new, was = after or (), before or ()  # an UPDATE's images are both there
                    data, old = shape.whole_json(new), _texts_json(_changed(shape, was, new))
                else:
                    images = _images(shape, rows, before, after)
                    data, old = dumps(images["data"][0]), dumps(images["old"][0])
                texts.append(f'{data}],"old":[{old}')
            source = '],"source":' + source
        else:
            image = 1 if rows.kind == RowsKind.WRITE else 0
            if len(rows.present) == len(shape.names):
                render = shape.whole_json
                texts = [render(pair[image] or ()) for pair in rows.rows]
            else:
                present = rows.present
                texts = [dumps(_render(shape, present, pair[image] or ())) for pair in rows.rows]
            source = '],"old":null,"source":' + source
        lines = [f"{later}{text}{source}{row}{tail}" for row, text in enumerate(texts, batch.base)]
        lines[0] = f"{first}{texts[0]}{source}{batch.base}{tail}"
        return "".join(lines)

    def _compiled(self, batch: RowBatch) -> list[Any] | None:
        """Each row's `data` JSON text (an UPDATE's with its `old`'s) from the images' bytes, by the
        compiled renderer (connector/csrc/canaltext.c); None where it does not apply or declines."""
        rows, shape = batch.rows, batch.shape
        if not rows.raw or transcoder is None or rows.table is None:
            return None
        hit = self._programs.get(id(shape))
        if hit is None or hit[0] is not shape:
            unique = len(set(shape.names)) == len(shape.names)  # a repeated name: the dict keeps one (Python's)
            program = json_program(rows.table.columns) if unique else None
            names = tuple(f"{json.encoder.encode_basestring(name)}:".encode() for name in shape.names)
            if len(self._programs) > 4096:
                self._programs.clear()
            hit = self._programs[id(shape)] = (shape, program, names)
        program = hit[1]
        if program is None:
            return None
        texts = transcoder.render_json(rows.raw, program.columns, KINDS[rows.kind], program.strings, hit[2])
        if texts is not None:
            self.compiled_rows += len(texts)
        return texts

    def _shared_fields(self, message: FlatMessage) -> str:
        """`,"pkNames":..,"sqlType":..,"mysqlType":..`: those of the three the message has."""
        return "".join(f',"{key}":{self._shared(message[key])}' for key in self._SHARED if key in message)

    def _text(self, value: object) -> str:
        return "".join(self._c_encode(value, 0)) if self._c_encode else self._dumps(value)


def _c_encoder() -> Callable[[object, int], list[str]] | None:
    """CPython's C JSON encoder, with the settings of `ensure_ascii=False`, compact separators."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    encoder: Callable[[object, int], list[str]] = make(
        None, _no_default, json.encoder.encode_basestring, None, ":", ",", False, False, True
    )
    return encoder


def _no_default(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
