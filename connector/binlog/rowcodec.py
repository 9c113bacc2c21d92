"""Per-table specialised row decoding.

For each TABLE_MAP (and each column-present bitmap a rows event uses) this module writes
the source of one Python function that decodes every row of an event for exactly that
column list, and compiles it once. Decoding a row then does no per-column type dispatch:
fixed-width runs are one precompiled `struct` call, and each column's code is inlined.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from connector.binlog import jsonb, values
from connector.binlog.charmaps.decoding import REPLACE
from connector.binlog.charsets import BINARY_COLLATION, decoder, text_codec
from connector.binlog.coltypes import STRING_TYPES, TYPES, fixed, typed_number
from connector.binlog.constants import TYPED_ARRAY_CODES, RowsKind
from connector.binlog.constants import ColumnType as T
from connector.binlog.tablemap import ColumnMeta, TableMapEvent
from connector.errors import FormatError

Row = tuple[Any, ...]
# (before image, after image); None where the operation has no such image.
RowChange = tuple[Row | None, Row | None]
RowsDecoder = Callable[[bytes, int, int], list[RowChange]]
# A lenient decoder's rows, and the column index of each text value it decoded with a replacement.
LenientDecoder = Callable[[bytes, int, int], tuple[list[RowChange], tuple[int, ...]]]

def _json_text(raw: bytes) -> str:
    return jsonb.to_text(jsonb.parse(raw))


def _text_or_bytes(raw: bytes) -> str | bytes:
    """Character data whose charset the binlog did not say: UTF-8 if it is, else bytes."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _lenient_text(raw: bytes, codec: str, index: int, replaced: list[int]) -> str:
    """A text value in a lenient decoder: exact if it can be, else with the replacement
    (connector/binlog/charsets.py), its column noted."""
    try:
        return raw.decode(codec)
    except UnicodeDecodeError:
        replaced.append(index)
        return raw.decode(codec, REPLACE)


def _typed_array(raw: object) -> None:
    raise FormatError("a typed-array (multi-valued index) value inside a row image")


def _unsupported(type_code: int) -> Callable[[object], None]:
    def fail(raw: object) -> None:
        raise FormatError(f"column type {type_code} cannot be decoded from a row image")

    return fail


_HELPERS: dict[str, object] = {
    "_fe": FormatError,
    "_vector": values.decode_vector,
    "_json": _json_text,
    "_diffs": jsonb.parse_diffs,
    "_jtree": jsonb.parse,
    "_tob": _text_or_bytes,
    "_lt": _lenient_text,
    "_typed_array": _typed_array,
    "_ifb": int.from_bytes,
    "_unz": values.decompress_column,
}


class _Gen:
    """Accumulates generated source lines and the constants they refer to."""

    def __init__(self, typed: bool = False, mariadb: bool = False, lenient: bool = False) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, object] = {}
        self.typed = typed
        self.mariadb = mariadb  # the server that wrote the binlog: text decodes as its charsets do
        self.lenient = lenient  # text that is not exact takes the replacement (noted) instead of raising

    def const(self, value: object) -> str:
        name = f"_k{len(self.consts)}"
        self.consts[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


def length_prefix(col: ColumnMeta) -> int:
    if col.real_type in (T.MYSQL_TYPE_VARCHAR, T.MYSQL_TYPE_VAR_STRING, T.MYSQL_TYPE_STRING):
        return 1 if col.meta < 256 else 2
    return col.meta  # BLOB family, JSON, GEOMETRY, VECTOR: the metadata is the prefix size


def _text_expr(gen: _Gen, col: ColumnMeta, raw: str) -> str:
    if col.collation is None:
        return f"_tob({raw})"
    codec = text_codec(col.collation, gen.mariadb)
    if codec is None:  # binary
        return raw
    if gen.lenient:
        return f"_lt({raw}, {codec!r}, {col.index}, replaced)"
    own = decoder(codec)  # a server's table: called as it is, without the codec registry's lookup
    if own is None:
        return f"{raw}.decode({codec!r})"
    if own.exact_or_raises is not None:  # where it raises, the lenient decoder reads the table
        return f"{raw}.decode({own.exact_or_raises!r})"
    return f"{gen.const(own.text)}({raw})"


def _variable(gen: _Gen, col: ColumnMeta, v: str, ind: int, json_bit: int | None) -> None:
    prefix = length_prefix(col)
    if not 1 <= prefix <= 4:
        raise FormatError(f"column {col.index + 1}: length prefix of {prefix} bytes")
    if prefix == 1:
        gen.emit(ind, "n_ = b[p]; p += 1")
    else:
        gen.emit(ind, f"n_ = _ifb(b[p:p + {prefix}], 'little'); p += {prefix}")
    raw = "b[p:p + n_]"
    kind = col.real_type
    if col.compressed:  # MariaDB's COMPRESSED columns: the value is compressed as stored
        gen.emit(ind, f"{v} = {_text_expr(gen, col, f'_unz({raw})')}")
    elif kind == T.MYSQL_TYPE_JSON:
        if json_bit is None:
            gen.emit(ind, f"{v} = _json({raw})")
        elif json_bit < 0:  # before image of a partial update: kept as a tree for the diffs
            gen.emit(ind, f"{v} = _jtree({raw})")
        else:
            gen.emit(ind, f"{v} = _diffs({raw}) if pb >> {json_bit} & 1 else _jtree({raw})")
    elif kind == T.MYSQL_TYPE_GEOMETRY:
        gen.emit(ind, f"{v} = {raw}")
    elif kind == T.MYSQL_TYPE_VECTOR:
        gen.emit(ind, f"{v} = _vector({raw})")
    elif kind == T.MYSQL_TYPE_STRING and col.collation == BINARY_COLLATION:
        # BINARY(n) is logged without its trailing 0x00 pad (Field_string::pack);
        # SELECT returns all n bytes, so the pad is put back.
        gen.emit(ind, f"{v} = {raw}.ljust({col.meta}, b'\\0')")
    else:
        gen.emit(ind, f"{v} = {_text_expr(gen, col, raw)}")
    gen.emit(ind, "p += n_")


def _fixed(gen: _Gen, col: ColumnMeta, v: str, ind: int) -> bool:
    """Emit fixed-width decoding (coltypes.TYPES); False when the type is not fixed-width."""
    kind = fixed(col)
    if kind is None or kind.value is None:
        return False
    assert kind.width is not None
    width = kind.width(col.meta)
    number = typed_number(col) if gen.typed else None
    read = kind.value(col) if number is None else number
    gen.emit(ind, f"{v} = {gen.const(read)}(b[p:p + {width}]); p += {width}")
    return True


def _column(gen: _Gen, col: ColumnMeta, v: str, ind: int, json_bit: int | None) -> None:
    kind = col.real_type
    if col.element_type is not None or col.type_code in TYPED_ARRAY_CODES:
        gen.emit(ind, f"{v} = _typed_array(None)")
    elif fmt := _struct(col):
        s = gen.const(struct.Struct("<" + fmt))
        gen.emit(ind, f"{v} = {s}.unpack_from(b, p)[0]; p += {struct.calcsize(fmt)}")
    elif not _fixed(gen, col, v, ind):
        if kind in _VARIABLE_TYPES:
            _variable(gen, col, v, ind, json_bit)
        else:
            gen.emit(ind, f"{v} = {gen.const(_unsupported(col.type_code))}(None)")


_VARIABLE_TYPES = STRING_TYPES | {T.MYSQL_TYPE_GEOMETRY, T.MYSQL_TYPE_JSON, T.MYSQL_TYPE_VECTOR}


def _struct(col: ColumnMeta) -> str:
    """The struct character that reads the column's value as it is ("" where none does)."""
    kind = TYPES.get(col.real_type)
    return kind.struct_of(col.unsigned) if kind is not None else ""


def _struct_runs(columns: list[ColumnMeta]) -> list[tuple[int, int]]:
    """[start, stop) runs of two or more adjacent columns one struct call can decode."""
    runs, start = [], None
    for i, col in enumerate([*columns, None]):
        ok = col is not None and bool(_struct(col)) and col.element_type is None
        if ok and start is None:
            start = i
        elif not ok and start is not None:
            if i - start >= 2:
                runs.append((start, i))
            start = None
    return runs


def _image(
    gen: _Gen, columns: list[ColumnMeta], ind: int, json_bits: dict[int, int] | None, first: bool = False
) -> str:
    """Emit the decoding of one row image; returns the tuple expression of its values. `first`:
    the row's first image, whose first byte is there (p < end), so one byte is read by index."""
    nbytes = (len(columns) + 7) // 8
    if first and nbytes == 1:
        gen.emit(ind, "nb = b[p]; p += 1")
    else:
        gen.emit(ind, f"nb = _ifb(b[p:p + {nbytes}], 'little'); p += {nbytes}")
    runs = {start: stop for start, stop in _struct_runs(columns)}
    j = 0
    while j < len(columns):
        stop = runs.get(j)
        if stop is not None:
            _run(gen, columns, j, stop, ind, json_bits)
            j = stop
            continue
        _nullable(gen, columns[j], j, ind, json_bits)
        j += 1
    return "(" + "".join(f"v{k}, " for k in range(len(columns))) + ")"


def _run(gen: _Gen, columns: list[ColumnMeta], start: int, stop: int, ind: int, jb: dict[int, int] | None) -> None:
    fmt = "".join(_struct(c) for c in columns[start:stop])
    codec = struct.Struct("<" + fmt)
    mask = sum(1 << k for k in range(start, stop))
    names = ", ".join(f"v{k}" for k in range(start, stop))
    gen.emit(ind, f"if not nb & {mask}:")
    gen.emit(ind + 1, f"{names}, = {gen.const(codec)}.unpack_from(b, p); p += {codec.size}")
    gen.emit(ind, "else:")
    for k in range(start, stop):
        _nullable(gen, columns[k], k, ind + 1, jb)


def _nullable(gen: _Gen, col: ColumnMeta, j: int, ind: int, json_bits: dict[int, int] | None) -> None:
    gen.emit(ind, f"if nb & {1 << j}:")
    gen.emit(ind + 1, f"v{j} = None")
    gen.emit(ind, "else:")
    bit = json_bits.get(col.index) if json_bits is not None else None
    _column(gen, col, f"v{j}", ind + 1, bit)


def _json_ordinals(table: TableMapEvent) -> dict[int, int]:
    """Column index -> bit of the partial-update bitmap, which counts every JSON column."""
    json_cols = [c.index for c in table.columns if c.type_code == T.MYSQL_TYPE_JSON]
    return {index: k for k, index in enumerate(json_cols)}


def build_rows_decoder(
    table: TableMapEvent,
    kind: RowsKind,
    present: tuple[int, ...],
    present_after: tuple[int, ...],
    partial: bool = False,
    typed: bool = False,
) -> RowsDecoder:
    """Compile the decoder of every row of one rows event shape for this table.

    `typed`: coltypes.typed_number's columns as numbers (what the Avro path writes), not text. A text value
    that is not exact raises UnicodeDecodeError (`build_lenient_decoder` decodes it then)."""
    decoder: RowsDecoder = _rows_function(_Gen(typed, table.mariadb), table, kind, present, present_after, partial)
    return decoder


def build_lenient_decoder(
    table: TableMapEvent, kind: RowsKind, present: tuple[int, ...], present_after: tuple[int, ...],
    partial: bool = False, typed: bool = False,
) -> LenientDecoder:  # fmt: skip
    """`build_rows_decoder`'s decoder, but a text value that is not exact takes the replacement
    (connector/binlog/charsets.py) instead of raising: it returns the rows, and the column index
    of each value that took it."""
    gen = _Gen(typed, table.mariadb, lenient=True)
    decoder: LenientDecoder = _rows_function(gen, table, kind, present, present_after, partial)
    return decoder


def _rows_function(
    gen: _Gen, table: TableMapEvent, kind: RowsKind, present: tuple[int, ...], present_after: tuple[int, ...],
    partial: bool,
) -> Any:  # fmt: skip
    """The decoder, compiled (a lenient one also returns the columns that took the replacement)."""
    before = [table.columns[i] for i in present]
    after = [table.columns[i] for i in present_after]
    gen.emit(0, "def decode_rows(b, p, end):")
    gen.emit(1, "out = []")
    if gen.lenient:
        gen.emit(1, "replaced = []")
    gen.emit(1, "while p < end:")
    gen.emit(2, "start = p")
    if kind == RowsKind.UPDATE:
        first = _image(gen, before, 2, {c.index: -1 for c in before} if partial else None, first=True)
        gen.emit(2, f"bi = {first}")
        _partial_header(gen, table, partial)
        second = _image(gen, after, 2, _json_ordinals(table) if partial else None)
        gen.emit(2, f"out.append((bi, {second}))")
    else:
        image = _image(gen, before, 2, None, first=True)
        pair = f"(None, {image})" if kind == RowsKind.WRITE else f"({image}, None)"
        gen.emit(2, f"out.append({pair})")
    gen.emit(2, "if p > end:")
    gen.emit(3, "raise _fe(f'row ends at {p}, past the event end {end}')")
    # A row image with no columns reads no bytes: without this the loop never ends.
    gen.emit(2, "if p == start:")
    gen.emit(3, "raise _fe(f'row at {p} is empty: no column in either image')")
    gen.emit(1, "return out, tuple(replaced)" if gen.lenient else "return out")
    return _compile(gen, f"{table.schema}.{table.table}" + (" (lenient)" if gen.lenient else ""))


def _partial_header(gen: _Gen, table: TableMapEvent, partial: bool) -> None:
    """PARTIAL_UPDATE_ROWS after images start with value_options and partial bits."""
    if not partial:
        return
    width = (len(_json_ordinals(table)) + 7) // 8
    gen.emit(2, "vo = b[p]; p += 1")
    gen.emit(2, "if vo >= 251: raise _fe(f'value_options 0x{vo:02x} is not one byte')")
    gen.emit(2, "pb = 0")
    gen.emit(2, "if vo & 1:")
    gen.emit(3, f"pb = _ifb(b[p:p + {width}], 'little'); p += {width}")


def _compile(gen: _Gen, label: str) -> Any:
    source = "\n".join(gen.lines)
    namespace: dict[str, Any] = {**_HELPERS, **gen.consts}
    exec(compile(source, f"<rows decoder {label}>", "exec"), namespace)  # noqa: S102
    decoder = namespace["decode_rows"]
    decoder.__doc__ = source  # kept for debugging: `print(decoder.__doc__)`
    return decoder
