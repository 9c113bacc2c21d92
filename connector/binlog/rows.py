"""WRITE/UPDATE/DELETE rows events (v1, v2, PARTIAL_UPDATE_ROWS, MariaDB compressed)."""

from __future__ import annotations

import copy
import functools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from connector.binlog import jsonb
from connector.binlog.constants import MAX_COLUMNS, ColumnType, RowsKind
from connector.binlog.constants import EventType as E
from connector.binlog.reader import Reader
from connector.binlog.rowcodec import LenientDecoder, RowChange, RowsDecoder, build_lenient_decoder, build_rows_decoder
from connector.binlog.rowplan import walk_layout
from connector.binlog.tablemap import TableMapEvent
from connector.binlog.values import NotTyped
from connector.errors import FormatError
from connector.identity import ByIdentity
from connector.lazy import Lazy
from connector.native import transcoder

# type code -> (operation, has v2 extra data, MariaDB compressed)
ROWS_EVENT_TYPES: dict[int, tuple[RowsKind, bool, bool]] = {
    E.WRITE_ROWS_EVENT_V1: (RowsKind.WRITE, False, False),
    E.UPDATE_ROWS_EVENT_V1: (RowsKind.UPDATE, False, False),
    E.DELETE_ROWS_EVENT_V1: (RowsKind.DELETE, False, False),
    E.WRITE_ROWS_EVENT: (RowsKind.WRITE, True, False),
    E.UPDATE_ROWS_EVENT: (RowsKind.UPDATE, True, False),
    E.DELETE_ROWS_EVENT: (RowsKind.DELETE, True, False),
    E.PARTIAL_UPDATE_ROWS_EVENT: (RowsKind.UPDATE, True, False),
    E.WRITE_ROWS_COMPRESSED_EVENT_V1: (RowsKind.WRITE, False, True),
    E.UPDATE_ROWS_COMPRESSED_EVENT_V1: (RowsKind.UPDATE, False, True),
    E.DELETE_ROWS_COMPRESSED_EVENT_V1: (RowsKind.DELETE, False, True),
    E.WRITE_ROWS_COMPRESSED_EVENT: (RowsKind.WRITE, True, True),
    E.UPDATE_ROWS_COMPRESSED_EVENT: (RowsKind.UPDATE, True, True),
    E.DELETE_ROWS_COMPRESSED_EVENT: (RowsKind.DELETE, True, True),
}


# A rows event with this table id only marks a statement end (no table map, no rows).
DUMMY_TABLE_ID = 0x00FFFFFF


@dataclass(frozen=True, slots=True)
class RowsHeader:
    table_id: int
    flags: int
    extra_data: bytes


class RowsEvent(NamedTuple):  # a tuple, as Event: made per rows event, a frozen dataclass costs 3x
    kind: RowsKind
    type_code: int
    table_id: int
    flags: int
    extra_data: bytes
    table: TableMapEvent | None  # None only for the statement-end dummy
    present: tuple[int, ...]  # column indexes of the (before) image
    present_after: tuple[int, ...]  # column indexes of the after image (UPDATE)
    rows: Sequence[RowChange]  # values as text renders them (Lazy when typed images were asked for)
    decoded: bool = True  # False: a filtered-out table, whose row images were not read
    typed: tuple[RowChange, ...] | None = None  # coltypes.typed_number's columns as numbers, when asked for
    # Typed images whose decoding waits until someone asks (`typed_images`), and the images'
    # bytes: the compiled transcoder (connector/avro/transcode.py) reads those instead.
    deferred: Callable[[], tuple[RowChange, ...] | None] | None = None
    raw: bytes = b""
    # The column index of each text value not exact in its charset, decoded with the replacement
    # (connector/binlog/charsets.py): what the stream reports (connector/stream.py).
    replaced: tuple[int, ...] = ()

    def typed_images(self) -> tuple[RowChange, ...] | None:
        """The typed images; None where a value has no typed form (or none were asked for)."""
        return self.typed if self.deferred is None else self.deferred()


def decode_rows_header(r: Reader, type_code: int, post_header_len: int) -> RowsHeader:
    _, has_extra, _ = ROWS_EVENT_TYPES[type_code]
    table_id = r.uint(4 if post_header_len == 6 else 6, "table id")
    flags = r.u16("rows flags")
    extra = b""
    if has_extra:
        extra_len = r.u16("extra data length")
        if extra_len < 2:
            raise FormatError(f"extra data length {extra_len} is below its own 2 bytes")
        extra = r.take(extra_len - 2, "extra data")
    return RowsHeader(table_id, flags, extra)


@functools.lru_cache(maxsize=1024)
def _bitmap(raw: bytes, count: int) -> tuple[int, ...]:
    bits = int.from_bytes(raw, "little")
    return tuple(i for i in range(count) if bits >> i & 1)


class RowsDecoderCache:
    """Compiled decoders by (table map bytes, event shape); bounded, cleared when full."""

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._decoders: dict[tuple[Any, ...], RowsDecoder] = {}
        self._by_identity: dict[tuple[Any, ...], tuple[TableMapEvent, RowsDecoder]] = {}
        # rowplan.walk_layout of every column of a table, by TABLE_MAP identity.
        self.layout: ByIdentity[TableMapEvent, bytes | None] = ByIdentity(lambda t: walk_layout(t.columns), limit)
        self._lenient: dict[tuple[Any, ...], LenientDecoder] = {}

    def get(
        self, table: TableMapEvent, kind: RowsKind, present: tuple[int, ...],
        present_after: tuple[int, ...], partial: bool, typed: bool = False,
    ) -> RowsDecoder:  # fmt: skip
        # The same TABLE_MAP object recurs (the parser decodes each body once): by identity
        # first, which spares hashing every column of it on every event.
        fast = (id(table), kind, present, present_after, partial, typed)
        hit = self._by_identity.get(fast)
        if hit is not None and hit[0] is table:
            return hit[1]
        # The columns are part of the key: a schema history may name or label the same bytes.
        key = (table.raw, table.columns, table.mariadb, kind, present, present_after, partial, typed)
        decoder = self._decoders.get(key)
        if decoder is None:
            if len(self._decoders) >= self._limit:
                self._decoders.clear()
            decoder = build_rows_decoder(table, kind, present, present_after, partial, typed)
            self._decoders[key] = decoder
        if len(self._by_identity) >= self._limit:
            self._by_identity.clear()
        self._by_identity[fast] = (table, decoder)
        return decoder

    def decode(self, body: bytes, *shape: Any) -> tuple[list[RowChange], tuple[int, ...]]:
        """The rows of `body` by `get(*shape)`'s decoder; where a text value is not exact, again
        by the lenient one: with the column index of each value that took the replacement."""
        try:
            return self.get(*shape)(body, 0, len(body)), ()
        except UnicodeDecodeError:
            return self.lenient(*shape)(body, 0, len(body))

    def lenient(
        self, table: TableMapEvent, kind: RowsKind, present: tuple[int, ...],
        present_after: tuple[int, ...], partial: bool, typed: bool = False,
    ) -> LenientDecoder:  # fmt: skip
        """rowcodec.build_lenient_decoder's decoder (made rarely: only for events with such text)."""
        key = (table.raw, table.columns, table.mariadb, kind, present, present_after, partial, typed)
        decoder = self._lenient.get(key)
        if decoder is None:
            if len(self._lenient) >= self._limit:
                self._lenient.clear()
            decoder = self._lenient[key] = build_lenient_decoder(table, kind, present, present_after, partial, typed)
        return decoder


def decode_rows(
    r: Reader,
    type_code: int,
    header: RowsHeader,
    table: TableMapEvent | None,
    cache: RowsDecoderCache,
    skip: bool = False,
    typed: bool = False,
    raw: bool = False,
) -> RowsEvent:
    """`typed`: the images' numbers too (the Avro path); `raw`: the images' bytes kept where they
    walk (`_deferred`), their decoding left until someone asks (the compiled JSON renderer reads the
    bytes: connector/flat.py)."""
    kind, _, compressed = ROWS_EVENT_TYPES[type_code]
    # Not r.count(): a wide row of NULLs has fewer bytes than columns (one bit each).
    count = r.packed("column count")
    if count > MAX_COLUMNS:
        raise FormatError(f"column count {count} is above MySQL's limit of {MAX_COLUMNS}")
    width = (count + 7) // 8
    present = _bitmap(r.take(width, "columns-present bitmap"), count)
    present_after = _bitmap(r.take(width, "after-image bitmap"), count) if kind == RowsKind.UPDATE else ()
    if table is None:
        if header.table_id != DUMMY_TABLE_ID:
            raise FormatError(f"rows event for table id {header.table_id} with no TABLE_MAP before it")
        r.rest()
        return RowsEvent(
            kind, type_code, header.table_id, header.flags, header.extra_data, None, present, present_after, ()
        )
    if skip:  # a table not captured: its TABLE_MAP may have been read only up to its names
        r.rest()
        return RowsEvent(
            kind, type_code, header.table_id, header.flags, header.extra_data, table, present, present_after, (), False
        )
    if count != len(table.columns):
        raise FormatError(
            f"rows event has {count} columns but the TABLE_MAP of "
            f"`{table.schema}`.`{table.table}` has {len(table.columns)}"
        )
    body = uncompress_mariadb(r.rest()) if compressed else r.rest()
    partial = type_code == E.PARTIAL_UPDATE_ROWS_EVENT
    if (typed or raw) and not partial:
        later = _deferred(kind, type_code, header, table, present, present_after, body, cache)
        if later is not None:
            return later
    if typed and not partial:
        try:
            numbers, replaced = cache.decode(body, table, kind, present, present_after, False, True)
        except NotTyped:
            pass  # a value whose number could differ from its text's: the text it is
        else:
            # The text images only if someone reads them (flat messages, a fallback).
            shape = (table, kind, present, present_after, False)
            lazy = Lazy(lambda: tuple(cache.decode(body, *shape)[0]), len(numbers))
            return RowsEvent(
                kind, type_code, header.table_id, header.flags, header.extra_data, table,
                present, present_after, lazy, True, tuple(numbers), replaced=replaced,
            )  # fmt: skip
    rows, replaced = cache.decode(body, table, kind, present, present_after, partial)
    if partial:
        rows = [_resolve_partial(table, present, present_after, row) for row in rows]
    return RowsEvent(
        kind, type_code, header.table_id, header.flags, header.extra_data, table,
        present, present_after, tuple(rows), replaced=replaced,
    )  # fmt: skip


def _deferred(
    kind: RowsKind, type_code: int, header: RowsHeader, table: TableMapEvent,
    present: tuple[int, ...], present_after: tuple[int, ...], body: bytes, cache: RowsDecoderCache,
) -> RowsEvent | None:  # fmt: skip
    """A rows event whose images are only walked (counted and checked) now, in C, and decoded
    if someone asks: the compiled transcoder writes Avro from `raw` without them.

    None (decode now) without the compiled module, for partial images, for column types
    whose decoding could still fail after the walk, and for images the walk refuses: the
    decoder then says what is wrong, with the event's position."""
    full = tuple(range(len(table.columns)))
    if transcoder is None or present != full or (kind == RowsKind.UPDATE and present_after != full):
        return None
    layout = cache.layout(table)
    if layout is None:
        return None
    count = transcoder.count_rows(body, layout, 2 if kind == RowsKind.UPDATE else 1)
    if count < 0:
        return None
    images = _Images(body, cache, table, kind, present, present_after)
    return RowsEvent(
        kind, type_code, header.table_id, header.flags, header.extra_data, table,
        present, present_after, Lazy(images.text, count), True, None, images.typed, body,
    )  # fmt: skip


class _Images:
    """A deferred event's images, decoded when first asked for (decoders looked up then too)."""

    __slots__ = ("_args", "_body", "_cache", "_typed")

    def __init__(
        self, body: bytes, cache: RowsDecoderCache, table: TableMapEvent, kind: RowsKind,
        present: tuple[int, ...], present_after: tuple[int, ...],
    ) -> None:  # fmt: skip
        self._body, self._cache, self._args = body, cache, (table, kind, present, present_after, False)
        self._typed: tuple[tuple[RowChange, ...] | None] | None = None

    def text(self) -> tuple[RowChange, ...]:
        return tuple(self._cache.decode(self._body, *self._args)[0])

    def typed(self) -> tuple[RowChange, ...] | None:
        if self._typed is None:
            try:
                self._typed = (tuple(self._cache.decode(self._body, *self._args, True)[0]),)
            except NotTyped:
                self._typed = (None,)  # a value whose number could differ from its text's: the text it is
        return self._typed[0]


def uncompress_mariadb(data: bytes) -> bytes:
    """MariaDB's compressed event block (binlog_buf_uncompress in sql/log_event.cc).

    One header byte (0x80 | algorithm << 4 | size of the length field), the uncompressed
    length big-endian in that many bytes, then a zlib stream.
    """
    if not data:
        raise FormatError("compressed block is empty")
    head = data[0]
    lenlen, algorithm = head & 0x07, head >> 4 & 0x07
    if not head & 0x80 or algorithm != 0 or not 1 <= lenlen <= 4:
        raise FormatError(f"compressed block header 0x{head:02x} is not zlib with a 1-4 byte length")
    if len(data) < 1 + lenlen:
        raise FormatError("compressed block ends inside its length")
    size = int.from_bytes(data[1 : 1 + lenlen], "big")
    out = zlib.decompressobj()
    result = out.decompress(data[1 + lenlen :], size + 1)
    if len(result) != size or not out.eof:
        raise FormatError(f"compressed block inflates to {len(result)} bytes, header says {size}")
    return result


def _resolve_partial(
    table: TableMapEvent, present: tuple[int, ...], present_after: tuple[int, ...], row: RowChange
) -> RowChange:
    """Apply JSON diffs to the before image and print every JSON tree as text."""
    before, after = row
    assert before is not None and after is not None
    trees = dict(zip(present, before))
    new_after: list[Any] = []
    for index, value in zip(present_after, after):
        if isinstance(value, tuple) and all(isinstance(d, jsonb.JsonDiff) for d in value):
            if index not in trees:  # MINIMAL before image: nothing to apply the diffs to
                new_after.append(jsonb.JsonPartial(value))
            else:
                new_after.append(jsonb.to_text(jsonb.apply_diffs(copy.deepcopy(trees[index]), value)))
        else:
            new_after.append(_json_out(table, index, value))
    new_before = tuple(_json_out(table, i, v) for i, v in zip(present, before))
    return new_before, tuple(new_after)


def _json_out(table: TableMapEvent, index: int, value: Any) -> Any:
    if value is None or table.columns[index].type_code != ColumnType.MYSQL_TYPE_JSON:
        return value
    return jsonb.to_text(value)
