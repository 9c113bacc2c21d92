"""One description per binlog column type: what Sluice decides by the type a TABLE_MAP logs.

`TYPES` has an entry per type code. Each says how many metadata bytes the TABLE_MAP gives the
type (connector/binlog/tablemap.py), the SQL type text flat and canal-json messages call a
column of it (`mysql_type`; canal's sqlType follows from that text: connector/sqltypes.py), the
declared types a tracked column of it may have (connector/schema/binlogmatch.py), and how a
value is rendered as text. A fixed-width type also says a value's width from the metadata, how
the Python rows decoder reads one (`value`; `number`: the typed decoder's Avro number,
connector/binlog/rowcodec.py), the compiled module's operation for it (`op`, native_spec.OPS:
connector/binlog/rowplan.py) and whether a walk may defer its decoding (`deferrable`). The
length-prefixed types (strings, BLOBs, JSON, GEOMETRY, VECTOR) are read by their length prefix
and charset, which rowcodec and rowplan work out from the same metadata. A new type is an entry
here, and its op in native_spec and connector/csrc/ where the compiled module is to read it.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from connector.binlog import values
from connector.binlog.charsets import BINARY_COLLATION, max_char_len
from connector.binlog.constants import ColumnType as T
from connector.native_spec import NUMBERS, OPS

if TYPE_CHECKING:
    from connector.binlog.rowplan import Strings
    from connector.binlog.tablemap import ColumnMeta

Op = tuple[int, int, int, int]  # the compiled module's op, width, a, b (native_spec's column_t)
Decode = Callable[[bytes], Any]  # a fixed-width value's bytes -> the value
Renderer = Callable[[Any], str | None]  # a decoded value -> its text in flat messages (None: NULL)
MAX_DIGITS = NUMBERS["MAX_DECIMAL_DIGITS"]  # every DECIMAL a server makes: 65 digits


# -- rendering: a decoded value's text, as canal prints it ---------------------------------


def float32_text(value: float) -> str:
    """Shortest decimal that reads back as the same 32-bit float."""
    packed = struct.pack("<f", value)
    for digits in range(1, 10):
        text = "%.*g" % (digits, value)
        try:
            if struct.pack("<f", float(text)) == packed:
                return repr(float(text))
        except OverflowError:  # e.g. 3.4e+38 rounds above FLT_MAX
            continue
    return repr(value)


def render_plain(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("latin-1")  # one character per byte, as canal does
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    return str(value)


def render_text(value: Any) -> str | None:
    """Character columns with a known charset decode to str already."""
    return value if value is None or isinstance(value, str) else render_plain(value)


def render_int(value: Any) -> str | None:
    return None if value is None else str(value)


def render_decimal(value: Any) -> str | None:
    """A DECIMAL's text: the binlog's row images hold it already (values.decimal_text_decoder), a
    snapshot's value is a Decimal."""
    return None if value is None else value if value.__class__ is str else format(value, "f")


# -- the SQL type text, by the rule of each family ------------------------------------------

_BLOB_NAMES = {1: "tiny", 2: "", 3: "medium", 4: "long"}


def is_binary(col: ColumnMeta) -> bool:
    """A character column's bytes are binary. Without charset metadata a BLOB-family column cannot
    be told from TEXT: it is called binary."""
    if col.collation is None:
        return col.real_type in BLOB_TYPES
    return col.collation == BINARY_COLLATION


def _signed(kind: BinlogType, col: ColumnMeta) -> str:
    return kind.sql + (" unsigned" if col.unsigned else "")


def _fsp(kind: BinlogType, col: ColumnMeta) -> str:
    return f"{kind.sql}({col.meta})" if col.meta else kind.sql


def _decimal(kind: BinlogType, col: ColumnMeta) -> str:
    return f"decimal({col.meta >> 8},{col.meta & 0xFF})" + (" unsigned" if col.unsigned else "")


def _blob(kind: BinlogType, col: ColumnMeta) -> str:
    return _BLOB_NAMES.get(col.meta, "") + ("blob" if is_binary(col) else "text")


def _labelled(kind: BinlogType, col: ColumnMeta) -> str:
    labels = col.enum_values if kind.code == T.MYSQL_TYPE_ENUM else col.set_values
    return f"{kind.sql}({','.join(_sql_quote(v) for v in labels)})" if labels is not None else kind.sql


def _string(kind: BinlogType | None, col: ColumnMeta) -> str:
    fixed = col.real_type == T.MYSQL_TYPE_STRING
    if is_binary(col):
        return f"{'binary' if fixed else 'varbinary'}({col.meta})"
    chars = col.meta // max_char_len(col.collation) if col.collation is not None else col.meta
    return f"{'char' if fixed else 'varchar'}({chars})"


def _sql_quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# -- the compiled module's op of a fixed-width value, from the column and its width ---------


def _integer(col: ColumnMeta, width: int, strings: Strings) -> Op:
    if width == 8 and col.unsigned:
        return OPS["OP_UINT64"], 8, 0, 0
    return OPS["OP_UINT" if col.unsigned else "OP_INT"], width, 0, 0


def _op(name: str, fsp: bool = False) -> Callable[[ColumnMeta, int, Strings], Op | None]:
    """An op whose `a` is the column's fraction digits (`fsp`, 0 to 6), or none."""
    if fsp:
        return lambda col, width, strings: (OPS[name], width, col.meta, 0) if 0 <= col.meta <= 6 else None
    return lambda col, width, strings: (OPS[name], width, 0, 0)


def _decimal_op(col: ColumnMeta, width: int, strings: Strings) -> Op | None:
    precision, scale = col.meta >> 8, col.meta & 0xFF
    return (OPS["OP_DECIMAL"], width, precision, scale) if 0 < precision <= MAX_DIGITS and scale <= precision else None


def _bit_op(col: ColumnMeta, width: int, strings: Strings) -> Op | None:
    bits = (col.meta & 0xFF) * 8 + (col.meta >> 8)
    return (OPS["OP_BIT64" if bits == 64 else "OP_BIT"], width, 0, 0) if 1 <= width <= 8 else None


def _labels(col: ColumnMeta, width: int, strings: Strings) -> Op | None:
    """ENUM and SET: the labels the decoder names values by (values.decode_enum, decode_set), as UTF-8."""
    enum = col.real_type == T.MYSQL_TYPE_ENUM
    labels = col.enum_values if enum else col.set_values
    if labels is None or not (width in (1, 2) if enum else 1 <= width <= 8 and len(labels) <= 64):
        return None
    try:
        texts = [label.encode("utf-8") for label in labels]
    except UnicodeEncodeError:  # a label no UTF-8 writer takes: Python's path says so
        return None
    return OPS["OP_ENUM" if enum else "OP_SET"], width, strings.add(texts), len(texts)


# -- widths and the Python decoder's values of fixed-width types ----------------------------


def bit_bytes(meta: int) -> int:
    """A BIT value's bytes, from its metadata: whole bytes (low byte) and odd bits (high byte)."""
    return ((meta & 0xFF) * 8 + (meta >> 8) + 7) // 8


def _plus_fraction(width: int) -> Callable[[int], int]:
    return lambda fsp: width + values.frac_size(fsp)


def _labels_decoder(enum: bool) -> Callable[[ColumnMeta], Decode]:
    def make(col: ColumnMeta) -> Decode:
        labels = col.enum_values if enum else col.set_values
        read = values.decode_enum if enum else values.decode_set
        return lambda raw: read(int.from_bytes(raw, "little"), labels)

    return make


@dataclass(frozen=True, slots=True)
class BinlogType:
    """One binlog column type (see the module's text)."""

    code: int
    sql: str  # the declared type's word; `named` makes a column's whole SQL type text of it
    named: Callable[[BinlogType, ColumnMeta], str] = lambda kind, col: kind.sql
    meta_bytes: int = 0  # the TABLE_MAP's metadata bytes of the type
    words: tuple[str, ...] = ()  # the declared types, besides `sql`, a column logged as it may have
    render: Renderer = render_plain
    width: Callable[[int], int] | None = None  # a fixed-width value's bytes, from the metadata
    struct: str = ""  # the struct character that reads it as it is (signed; unsigned: its upper case)
    value: Callable[[ColumnMeta], Decode] | None = None  # the rows decoder's value, where not `struct`
    number: Callable[[int], Decode | None] | None = None  # the typed decoder's number (typed_number)
    op: Callable[[ColumnMeta, int, Strings], Op | None] | None = None  # the compiled module's (rowplan.column_op)
    # A fixed-width value whose Python decoding cannot fail once its width is there, so a rows
    # event's images may be walked now and decoded later (rowplan.walk_layout). Not ENUM: an index
    # beyond the labels is an error, said at once while the event can still be named.
    deferrable: bool = True

    def struct_of(self, unsigned: bool) -> str:
        return self.struct.upper() if unsigned and self.struct not in "fd" else self.struct


def _micros(decoder: Callable[[int], Decode]) -> Callable[[int], Decode | None]:
    """A temporal number of fsp 0-6; any other fsp is read as text, which refuses it."""
    return lambda fsp: decoder(fsp) if fsp <= 6 else None


def typed_number(col: ColumnMeta) -> Decode | None:
    """How a typed decoder reads `col` as a number that is its Avro value as it is (DATE as days
    since 1970-01-01, DATETIME2 and TIMESTAMP2 as microseconds, None for zero dates, NEWDECIMAL as its
    unscaled integer), or None: read as text. Each raises values.NotTyped where the number and
    the text's Avro value could differ; the caller then decodes the text (values.py)."""
    kind = TYPES.get(col.real_type)
    return None if kind is None or kind.number is None else kind.number(col.meta)


BLOB_TYPES = frozenset({T.MYSQL_TYPE_BLOB, T.MYSQL_TYPE_TINY_BLOB, T.MYSQL_TYPE_MEDIUM_BLOB, T.MYSQL_TYPE_LONG_BLOB})
_BLOB_WORDS = ("tinyblob", "mediumblob", "longblob", "tinytext", "text", "mediumtext", "longtext", "json")


TYPES: dict[int, BinlogType] = {kind.code: kind for kind in (
    BinlogType(T.MYSQL_TYPE_TINY, "tinyint", _signed, render=render_int, width=lambda m: 1, struct="b", op=_integer),
    BinlogType(T.MYSQL_TYPE_SHORT, "smallint", _signed, render=render_int, width=lambda m: 2, struct="h", op=_integer),
    BinlogType(T.MYSQL_TYPE_INT24, "mediumint", _signed, render=render_int, width=lambda m: 3, op=_integer,
               value=lambda col: functools.partial(int.from_bytes, byteorder="little", signed=not col.unsigned)),
    BinlogType(T.MYSQL_TYPE_LONG, "int", _signed, render=render_int, width=lambda m: 4, struct="i", op=_integer),
    BinlogType(T.MYSQL_TYPE_LONGLONG, "bigint", _signed, render=render_int, width=lambda m: 8, struct="q", op=_integer),
    BinlogType(T.MYSQL_TYPE_FLOAT, "float", _signed, 1, render=lambda v: None if v is None else float32_text(v),
               width=lambda m: 4, struct="f", op=_op("OP_FLOAT")),
    BinlogType(T.MYSQL_TYPE_DOUBLE, "double", _signed, 1, width=lambda m: 8, struct="d", op=_op("OP_DOUBLE")),
    BinlogType(T.MYSQL_TYPE_NEWDECIMAL, "decimal", _decimal, 2, render=render_decimal,
               width=lambda m: values.decimal_size(m >> 8, m & 0xFF),
               value=lambda col: values.decimal_text_decoder(col.meta >> 8, col.meta & 0xFF),
               number=lambda m: values.decimal_unscaled_decoder(m >> 8, m & 0xFF), op=_decimal_op),
    BinlogType(T.MYSQL_TYPE_DECIMAL, "decimal", _decimal, 2),  # before MySQL 5.0: not read (FormatError)
    BinlogType(T.MYSQL_TYPE_YEAR, "year", render=lambda v: None if v is None else "%04d" % v, width=lambda m: 1,
               value=lambda col: lambda raw: values.decode_year(raw[0]), op=_op("OP_YEAR")),
    *(BinlogType(code, "date", render=render_text, width=lambda m: 3, value=lambda col: values.decode_date,
                 number=lambda m: values.date_days, op=_op("OP_DATE"))
      for code in (T.MYSQL_TYPE_DATE, T.MYSQL_TYPE_NEWDATE)),
    BinlogType(T.MYSQL_TYPE_TIME, "time", width=lambda m: 3, value=lambda col: values.decode_time),
    BinlogType(T.MYSQL_TYPE_DATETIME, "datetime", width=lambda m: 8, value=lambda col: values.decode_datetime),
    BinlogType(T.MYSQL_TYPE_TIMESTAMP, "timestamp", width=lambda m: 4, value=lambda col: values.decode_timestamp),
    BinlogType(T.MYSQL_TYPE_TIME2, "time", _fsp, 1, render=render_text, width=_plus_fraction(3),
               value=lambda col: values.time2_decoder(col.meta), op=_op("OP_TIME2", fsp=True)),
    BinlogType(T.MYSQL_TYPE_DATETIME2, "datetime", _fsp, 1, render=render_text, width=_plus_fraction(5),
               value=lambda col: values.datetime2_decoder(col.meta), number=_micros(values.datetime2_micros_decoder),
               op=_op("OP_DATETIME2", fsp=True)),
    BinlogType(T.MYSQL_TYPE_TIMESTAMP2, "timestamp", _fsp, 1, render=render_text, width=_plus_fraction(4),
               value=lambda col: values.timestamp2_decoder(col.meta), number=_micros(values.timestamp2_micros_decoder),
               op=_op("OP_TIMESTAMP2", fsp=True)),
    BinlogType(T.MYSQL_TYPE_BIT, "bit", lambda kind, col: f"bit({(col.meta & 0xFF) * 8 + (col.meta >> 8)})", 2,
               width=bit_bytes, value=lambda col: functools.partial(int.from_bytes, byteorder="big"), op=_bit_op),
    BinlogType(T.MYSQL_TYPE_ENUM, "enum", _labelled, 2, width=lambda m: m & 0xFF, value=_labels_decoder(True),
               op=_labels, deferrable=False),
    BinlogType(T.MYSQL_TYPE_SET, "set", _labelled, 2, width=lambda m: m & 0xFF, value=_labels_decoder(False),
               op=_labels),
    BinlogType(T.MYSQL_TYPE_NULL, "null", width=lambda m: 0, value=lambda col: lambda raw: None),
    # Length-prefixed: the prefix and charset read them (rowcodec._variable, rowplan.column_op).
    BinlogType(T.MYSQL_TYPE_VARCHAR, "varchar", _string, 2, ("varbinary", "vector")),  # MariaDB's VECTOR
    BinlogType(T.MYSQL_TYPE_VAR_STRING, "varchar", _string, 2, ("varbinary",)),
    BinlogType(T.MYSQL_TYPE_STRING, "char", _string, 2, ("binary",)),
    *(BinlogType(code, "blob", _blob, 1, _BLOB_WORDS) for code in sorted(BLOB_TYPES)),  # MariaDB's JSON: a LONGTEXT
    BinlogType(T.MYSQL_TYPE_JSON, "json", meta_bytes=1),
    BinlogType(T.MYSQL_TYPE_GEOMETRY, "geometry", meta_bytes=1, render=lambda v: None if v is None else v.hex()),
    BinlogType(T.MYSQL_TYPE_VECTOR, "vector",
               lambda kind, col: f"vector({col.dimensions})" if col.dimensions else "vector", 1,
               render=lambda v: None if v is None else "[" + ",".join("%.5e" % x for x in v) + "]"),
)}  # fmt: skip
# Length-prefixed strings and BLOBs: text in their collation's charset, or binary bytes.
STRING_TYPES = frozenset(code for code, kind in TYPES.items() if kind.named in (_string, _blob))
# Types whose SIGNEDNESS bit is logged (Table_map_log_event::is_numeric_type): those that can be UNSIGNED.
NUMERIC_TYPES = frozenset(code for code, kind in TYPES.items() if kind.named in (_signed, _decimal))
# Types that carry a character set in optional metadata (COLUMN_CHARSET / DEFAULT_CHARSET),
# judged on the real type, so ENUM and SET are excluded here. The servers differ, as seen in
# their TABLE_MAPs of one table (GEOMETRY, POINT, VECTOR beside text columns): MySQL counts
# VECTOR (a blob underneath, collation 63) and not GEOMETRY (is_character_type in
# libs/mysql/binlog/event/rows_event.h; `mysqlbinlog --print-table-metadata` agrees);
# MariaDB counts GEOMETRY (Field_geom is a Field_blob there, logged as binary) and has no
# VECTOR type in the versions that log this metadata.
CHARACTER_TYPES = STRING_TYPES | {T.MYSQL_TYPE_VECTOR}
MARIADB_CHARACTER_TYPES = STRING_TYPES | {T.MYSQL_TYPE_GEOMETRY}
# The two-byte metadata VARCHAR's length is, little-endian; the other types' is two separate
# bytes, folded as (first << 8) | second.
LITTLE_ENDIAN_META = frozenset({T.MYSQL_TYPE_VARCHAR, T.MYSQL_TYPE_VAR_STRING})


def mysql_type(col: ColumnMeta) -> str:
    """The column's SQL type as far as the binlog tells it (no display widths; a BLOB-family column
    without charset metadata is called a blob)."""
    kind = TYPES.get(col.real_type)
    return _string(None, col) if kind is None else kind.named(kind, col)


def fixed(col: ColumnMeta) -> BinlogType | None:
    """The column's entry if its values are fixed-width (every such entry has a width)."""
    kind = TYPES.get(col.real_type)
    return kind if kind is not None and kind.width is not None else None
