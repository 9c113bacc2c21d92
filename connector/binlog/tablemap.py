"""TABLE_MAP_EVENT: column types, per-type metadata, and optional metadata.

Two rules from canal's type-20 bug and its kin: each column's metadata is read by its
type, and afterwards exactly `metadata_length` bytes must have been consumed; optional
metadata is a TLV list where unknown types are skipped by their own length.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from connector.binlog.charmaps.decoding import REPLACE
from connector.binlog.charsets import text_codec
from connector.binlog.coltypes import (
    CHARACTER_TYPES,
    LITTLE_ENDIAN_META,
    MARIADB_CHARACTER_TYPES,
    NUMERIC_TYPES,
    TYPES,
)
from connector.binlog.constants import (
    TYPED_ARRAY_CODES,
)
from connector.binlog.constants import (
    ColumnType as T,
)
from connector.binlog.constants import (
    OptionalMetadataType as M,
)
from connector.binlog.reader import Reader
from connector.errors import FormatError


@dataclass(frozen=True, slots=True)
class ColumnMeta:
    """One column as the TABLE_MAP describes it."""

    index: int
    type_code: int  # the logged type byte
    real_type: int  # ENUM/SET/STRING resolved from the metadata of a logged STRING
    meta: int  # the type's metadata folded into one integer (see _read_meta)
    nullable: bool
    name: str | None = None
    unsigned: bool = False
    collation: int | None = None  # character and ENUM/SET columns, when logged
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None
    geometry_type: int | None = None
    visible: bool = True
    element_type: int | None = None  # element type of a typed array (multi-valued index)
    dimensions: int | None = None  # VECTOR
    compressed: bool = False  # MariaDB's COMPRESSED: logged as 140/141, read as BLOB/VARCHAR (real_type)
    # Logged by MariaDB: where the servers' tables of a charset differ (ascii, ujis, eucjpms), its
    # text is MariaDB's (connector/binlog/charsets.py); the compiled code picks its table by it.
    mariadb: bool = False


@dataclass(frozen=True, slots=True)
class TableMapEvent:
    table_id: int
    flags: int
    schema: str
    table: str
    columns: tuple[ColumnMeta, ...]
    primary_key: tuple[int, ...] = ()
    primary_key_prefixes: tuple[tuple[int, int], ...] = ()
    has_optional_metadata: bool = False
    raw: bytes = field(default=b"", repr=False, compare=False)  # body, the cache key of row codecs
    mariadb: bool = False  # written by MariaDB: its text decodes as MariaDB's charsets (connector/binlog/charsets.py)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(col.name or f"@{col.index + 1}" for col in self.columns)

    @property
    def pk_names(self) -> tuple[str, ...]:
        return tuple(self.column_names[i] for i in self.primary_key if i < len(self.columns))


# MariaDB's compressed types carry the metadata of the type they compress (Field_blob_compressed
# and Field_varstring_compressed save it as Field_blob / Field_varstring do).
COMPRESSED_TYPES: dict[int, int] = {
    T.MYSQL_TYPE_BLOB_COMPRESSED: T.MYSQL_TYPE_BLOB,
    T.MYSQL_TYPE_VARCHAR_COMPRESSED: T.MYSQL_TYPE_VARCHAR,
}


def _read_meta(r: Reader, type_code: int) -> tuple[int, int, int | None]:
    """Read one column's metadata: (real_type, meta, typed-array element type)."""
    if type_code in TYPED_ARRAY_CODES:
        element = r.u8("typed array element type")
        if element in TYPED_ARRAY_CODES:
            raise FormatError("typed array of typed arrays")
        real, meta, _ = _read_meta(r, element)
        return real, meta, element
    if type_code in COMPRESSED_TYPES:
        return _read_meta(r, COMPRESSED_TYPES[type_code])
    kind = TYPES.get(type_code)
    size = 0 if kind is None else kind.meta_bytes
    if size == 0:
        return type_code, 0, None
    if size == 1:
        return type_code, r.u8("column metadata"), None
    if type_code in LITTLE_ENDIAN_META:
        return type_code, r.u16("column metadata"), None
    first, second = r.u8("column metadata"), r.u8("column metadata")
    if type_code == T.MYSQL_TYPE_STRING:
        return _string_meta(first, second)
    return type_code, first << 8 | second, None


def _string_meta(first: int, second: int) -> tuple[int, int, None]:
    """STRING metadata: the real type, and a length whose high bits hide in byte one.

    CHAR columns longer than 255 bytes store length bits 8-9 inverted in bits 4-5 of the
    real-type byte (Field_string::save_field_metadata, bug 37426).
    """
    if first & 0x30 != 0x30:
        return first | 0x30, second | ((first & 0x30) ^ 0x30) << 4, None
    return first, second, None


# Whether YEAR has a bit in the SIGNEDNESS bitmap (Field_year is an unsigned Field_tiny):
# MariaDB always (Binlog_type_info of every Field_num); MySQL since its server switched from
# is_numeric_type to has_signedess_information_type (sql/field_common_properties.h; seen in
# 8.1-8.4 and 9.x sources, reported from 8.0.29, absent from early 8.0). Seen live on MariaDB
# 10.11 and MySQL 9.7.4: `CREATE TABLE t (y YEAR, a INT UNSIGNED, b INT)` logs 0b110.
WITH_YEAR = NUMERIC_TYPES | {T.MYSQL_TYPE_YEAR}
MYSQL_YEAR_SIGNED_SINCE = (8, 0, 29)


def year_is_signed(server_version: str, mariadb: bool) -> bool:
    if mariadb:
        return True
    numbers = tuple(int(n) for n in re.findall(r"\d+", server_version.split("-", maxsplit=1)[0])[:3])
    return numbers >= MYSQL_YEAR_SIGNED_SINCE


def table_map_names(r: Reader, post_header_len: int, mariadb: bool = False) -> TableMapEvent:
    """Only the table id, flags and names: enough to tell whether a table is captured."""
    start = r.pos
    table_id = r.uint(4 if post_header_len == 6 else 6, "table id")
    flags = r.u16("table map flags")
    schema = r.cstring(r.u8("schema length"), "schema").decode("utf-8", "backslashreplace")
    table = r.cstring(r.u8("table length"), "table").decode("utf-8", "backslashreplace")
    return TableMapEvent(table_id, flags, schema, table, (), raw=r.data[start : r.end], mariadb=mariadb)


def decode_table_map(
    r: Reader, post_header_len: int, mariadb: bool = False, year_signed: bool | None = None
) -> TableMapEvent:
    head = table_map_names(r, post_header_len, mariadb)
    count = r.count("column count")
    types = r.take(count, "column types")
    meta_len = r.packed("metadata length")
    meta_end = r.pos + meta_len
    r.need(meta_len, "column metadata")
    metas = [_read_meta(r, t) for t in types]
    if r.pos != meta_end:
        raise FormatError(
            f"column metadata of `{head.schema}`.`{head.table}` used {r.pos - (meta_end - meta_len)} "
            f"bytes but metadata_length says {meta_len}; column types {list(types)}"
        )
    null_bits = int.from_bytes(r.take((count + 7) // 8, "null bitmap"), "little")
    columns = [
        ColumnMeta(i, types[i], real, meta, bool(null_bits >> i & 1), element_type=element,
                   compressed=types[i] in COMPRESSED_TYPES, mariadb=mariadb)
        for i, (real, meta, element) in enumerate(metas)
    ]  # fmt: skip
    numeric = WITH_YEAR if (mariadb if year_signed is None else year_signed) else NUMERIC_TYPES
    character = MARIADB_CHARACTER_TYPES if mariadb else CHARACTER_TYPES
    optional = _decode_optional(r, columns, numeric, character) if r.remaining() else _Optional()
    return replace(
        head, columns=tuple(optional.apply(columns, mariadb)), primary_key=optional.primary_key,
        primary_key_prefixes=optional.pk_prefixes, has_optional_metadata=optional.present,
    )  # fmt: skip


@dataclass
class _Optional:
    """Optional metadata as read, before it is folded into the columns."""

    present: bool = False
    numeric: frozenset[int] = WITH_YEAR
    character: frozenset[int] = CHARACTER_TYPES
    unsigned: list[bool] | None = None
    charsets: dict[int, int] = field(default_factory=dict)  # column index -> collation
    names: list[str] | None = None
    # Labels as logged: each in its column's charset, which ENUM_AND_SET_*_CHARSET gives after them.
    enum_values: list[tuple[bytes, ...]] = field(default_factory=list)
    set_values: list[tuple[bytes, ...]] = field(default_factory=list)
    geometry: list[int] = field(default_factory=list)
    primary_key: tuple[int, ...] = ()
    pk_prefixes: tuple[tuple[int, int], ...] = ()
    visibility: list[bool] | None = None
    dimensions: list[int] = field(default_factory=list)

    def apply(self, columns: list[ColumnMeta], mariadb: bool) -> list[ColumnMeta]:
        numeric = iter(self.unsigned or ())
        enums, sets = iter(self.enum_values), iter(self.set_values)
        geoms, dims = iter(self.geometry), iter(self.dimensions)
        out = []
        for col in columns:
            kind = col.real_type
            updates: dict[str, object] = {"collation": self.charsets.get(col.index)}
            if self.names is not None and col.index < len(self.names):
                updates["name"] = self.names[col.index]
            if kind in self.numeric and col.element_type is None:
                updates["unsigned"] = next(numeric, False)
            if kind == T.MYSQL_TYPE_ENUM:
                updates["enum_values"] = _labels(next(enums, None), self.charsets.get(col.index), mariadb)
            if kind == T.MYSQL_TYPE_SET:
                updates["set_values"] = _labels(next(sets, None), self.charsets.get(col.index), mariadb)
            if kind == T.MYSQL_TYPE_GEOMETRY:
                updates["geometry_type"] = next(geoms, None)
            if kind == T.MYSQL_TYPE_VECTOR:
                updates["dimensions"] = next(dims, None)
            if self.visibility is not None and col.index < len(self.visibility):
                updates["visible"] = self.visibility[col.index]
            out.append(replace(col, **updates))  # type: ignore[arg-type]
        return out


def _labels(raw: tuple[bytes, ...] | None, collation: int | None, mariadb: bool) -> tuple[str, ...] | None:
    """ENUM/SET labels in their column's charset as the server has it (latin1 labels are not
    UTF-8); bytes that are not exact take the replacement that values take."""
    if raw is None:
        return None
    codec = (text_codec(collation, mariadb) if collation is not None else None) or "utf-8"
    return tuple(label.decode(codec, REPLACE) for label in raw)


def _bits(raw: bytes, n: int) -> list[bool]:
    """Optional-metadata bitmaps are most-significant-bit first, one bit per column."""
    if len(raw) != (n + 7) // 8:
        raise FormatError(f"bitmap of {len(raw)} bytes for {n} columns; {(n + 7) // 8} expected")
    return [bool(raw[i >> 3] >> (7 - (i & 7)) & 1) for i in range(n)]


def _strings(r: Reader, what: str) -> tuple[bytes, ...]:
    n = r.count(what)
    return tuple(r.packed_bytes(what) for _ in range(n))


def _decode_optional(
    r: Reader, columns: list[ColumnMeta], numeric: frozenset[int], character: frozenset[int]
) -> _Optional:
    opt = _Optional(present=True, numeric=numeric, character=character)
    while r.remaining():
        kind = r.u8("optional metadata type")
        body = Reader(r.packed_bytes(f"optional metadata {kind}"))
        handler = _OPTIONAL_HANDLERS.get(kind)  # keyed by int: unknown types are skipped
        if handler is not None:
            handler(body, columns, opt)
            if body.remaining():
                raise FormatError(f"optional metadata {M(kind).name}: {body.remaining()} bytes left over")
    return opt


def _signedness(body: Reader, columns: list[ColumnMeta], opt: _Optional) -> None:
    raw = body.rest()
    # MySQL 8.0 releases around the YEAR change: where the two rules need bitmaps of different
    # lengths, the length (which the format fixes) says which rule wrote it.
    other = NUMERIC_TYPES if opt.numeric == WITH_YEAR else WITH_YEAR
    for numeric in (opt.numeric, other):
        if len(raw) == (_numeric_count(columns, numeric) + 7) // 8:
            opt.numeric = numeric
            break
    opt.unsigned = _bits(raw, _numeric_count(columns, opt.numeric))


def _numeric_count(columns: list[ColumnMeta], numeric: frozenset[int]) -> int:
    return sum(1 for col in columns if col.real_type in numeric and col.element_type is None)


def _default_charset(targets: list[int], body: Reader, opt: _Optional) -> None:
    default = body.packed("default charset")
    overrides = {}
    while body.remaining():
        position = body.packed("charset column index")
        overrides[position] = body.packed("charset collation")
    for position, index in enumerate(targets):
        opt.charsets[index] = overrides.get(position, default)


def _column_charsets(targets: list[int], body: Reader, opt: _Optional) -> None:
    for index in targets:
        opt.charsets[index] = body.packed("column charset")


def _char_targets(columns: list[ColumnMeta], character: frozenset[int]) -> list[int]:
    return [col.index for col in columns if col.real_type in character and col.element_type is None]


def _enum_targets(columns: list[ColumnMeta]) -> list[int]:
    return [col.index for col in columns if col.real_type in (T.MYSQL_TYPE_ENUM, T.MYSQL_TYPE_SET)]


def _names(body: Reader, columns: list[ColumnMeta], opt: _Optional) -> None:
    names = []
    while body.remaining():
        names.append(body.packed_bytes("column name").decode("utf-8", "backslashreplace"))
    opt.names = names


def _simple_pk(body: Reader, columns: list[ColumnMeta], opt: _Optional) -> None:
    keys = []
    while body.remaining():
        keys.append(body.packed("primary key column"))
    opt.primary_key = tuple(keys)


def _prefixed_pk(body: Reader, columns: list[ColumnMeta], opt: _Optional) -> None:
    pairs = []
    while body.remaining():
        pairs.append((body.packed("primary key column"), body.packed("primary key prefix")))
    opt.pk_prefixes = tuple(pairs)
    opt.primary_key = tuple(index for index, _ in pairs)


def _geometry(body: Reader, columns: list[ColumnMeta], opt: _Optional) -> None:
    while body.remaining():
        opt.geometry.append(body.packed("geometry type"))


def _dimensions(body: Reader, columns: list[ColumnMeta], opt: _Optional) -> None:
    while body.remaining():
        opt.dimensions.append(body.packed("vector dimensionality"))


def _visibility(body: Reader, columns: list[ColumnMeta], opt: _Optional) -> None:
    opt.visibility = _bits(body.rest(), len(columns))


def _enum_strs(body: Reader, columns: list[ColumnMeta], opt: _Optional) -> None:
    while body.remaining():
        opt.enum_values.append(_strings(body, "enum value"))


def _set_strs(body: Reader, columns: list[ColumnMeta], opt: _Optional) -> None:
    while body.remaining():
        opt.set_values.append(_strings(body, "set value"))


_OPTIONAL_HANDLERS: dict[int, Callable[[Reader, list[ColumnMeta], _Optional], None]] = {
    M.SIGNEDNESS: _signedness,
    M.DEFAULT_CHARSET: lambda b, cols, o: _default_charset(_char_targets(cols, o.character), b, o),
    M.COLUMN_CHARSET: lambda b, cols, o: _column_charsets(_char_targets(cols, o.character), b, o),
    M.COLUMN_NAME: _names,
    M.SET_STR_VALUE: _set_strs,
    M.ENUM_STR_VALUE: _enum_strs,
    M.GEOMETRY_TYPE: _geometry,
    M.SIMPLE_PRIMARY_KEY: _simple_pk,
    M.PRIMARY_KEY_WITH_PREFIX: _prefixed_pk,
    M.ENUM_AND_SET_DEFAULT_CHARSET: lambda b, cols, o: _default_charset(_enum_targets(cols), b, o),
    M.ENUM_AND_SET_COLUMN_CHARSET: lambda b, cols, o: _column_charsets(_enum_targets(cols), b, o),
    M.COLUMN_VISIBILITY: _visibility,
    M.VECTOR_DIMENSIONALITY: _dimensions,
}
