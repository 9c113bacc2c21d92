"""MySQL binary JSON (sql-common/json_binary.cc): parse, print as MySQL does, apply diffs.

A parsed document is a tree of dict, list, str, int, float, bool, None, `Decimal`
(opaque DECIMAL) and `JsonOpaque` (other opaque values, printed as strings).
"""

from __future__ import annotations

import base64
import math
import struct
from dataclasses import dataclass
from decimal import Decimal

from connector.binlog.reader import Reader
from connector.binlog.values import EXPRESSION_MAX_PRECISION, decimal_size, decode_decimal, packed_datetime_text
from connector.errors import FormatError

# Value type bytes (json_binary.h).
JSONB_SMALL_OBJECT = 0x00
JSONB_LARGE_OBJECT = 0x01
JSONB_SMALL_ARRAY = 0x02
JSONB_LARGE_ARRAY = 0x03
JSONB_LITERAL = 0x04
JSONB_INT16 = 0x05
JSONB_UINT16 = 0x06
JSONB_INT32 = 0x07
JSONB_UINT32 = 0x08
JSONB_INT64 = 0x09
JSONB_UINT64 = 0x0A
JSONB_DOUBLE = 0x0B
JSONB_STRING = 0x0C
JSONB_OPAQUE = 0x0F

JSONB_NULL_LITERAL = 0x00
JSONB_TRUE_LITERAL = 0x01
JSONB_FALSE_LITERAL = 0x02

# MySQL refuses documents nested deeper than this (JSON_DOCUMENT_MAX_DEPTH).
MAX_DEPTH = 100

# Field types that can appear inside an opaque value.
_OPAQUE_DECIMAL = 246
_OPAQUE_TEMPORAL = {7: "datetime", 10: "date", 11: "time", 12: "datetime", 17: "datetime", 18: "datetime", 19: "time"}


@dataclass(frozen=True, slots=True)
class JsonOpaque:
    """An opaque value that MySQL prints as a quoted string."""

    text: str


JsonValue = None | bool | int | float | str | Decimal | JsonOpaque | list["JsonValue"] | dict[str, "JsonValue"]

_NUMBERS = {
    JSONB_INT16: struct.Struct("<h"),
    JSONB_UINT16: struct.Struct("<H"),
    JSONB_INT32: struct.Struct("<i"),
    JSONB_UINT32: struct.Struct("<I"),
    JSONB_INT64: struct.Struct("<q"),
    JSONB_UINT64: struct.Struct("<Q"),
    JSONB_DOUBLE: struct.Struct("<d"),
}


def parse(doc: bytes) -> JsonValue:
    """Parse a whole binary JSON document; empty bytes are the JSON null literal."""
    if not doc:
        return None
    return _value(doc, doc[0], 1, len(doc), 0)


def parse_value(type_byte: int, data: bytes) -> JsonValue:
    return _value(data, type_byte, 0, len(data), 0)


def _value(buf: bytes, kind: int, pos: int, end: int, depth: int) -> JsonValue:
    if depth > MAX_DEPTH:
        raise FormatError(f"JSON nested deeper than {MAX_DEPTH}")
    if kind in (JSONB_SMALL_OBJECT, JSONB_LARGE_OBJECT, JSONB_SMALL_ARRAY, JSONB_LARGE_ARRAY):
        return _container(buf, kind, pos, end, depth)
    if kind == JSONB_LITERAL:
        return _literal(_byte(buf, pos, end))
    if kind in _NUMBERS:
        return _scalar(_NUMBERS[kind], buf, pos, end)
    if kind == JSONB_STRING:
        r = Reader(buf, pos, end)
        return r.take(_varlen(r), "JSON string").decode("utf-8")
    if kind == JSONB_OPAQUE:
        return _opaque(Reader(buf, pos, end))
    raise FormatError(f"JSON value type 0x{kind:02x} is unknown")


def _byte(buf: bytes, pos: int, end: int) -> int:
    if pos >= end:
        raise FormatError("JSON literal runs past its document")
    return buf[pos]


def _scalar(codec: struct.Struct, buf: bytes, pos: int, end: int) -> int | float:
    if pos + codec.size > end:
        raise FormatError("JSON number runs past its document")
    value: int | float = codec.unpack_from(buf, pos)[0]
    return value


def _literal(code: int) -> bool | None:
    if code == JSONB_NULL_LITERAL:
        return None
    if code == JSONB_TRUE_LITERAL:
        return True
    if code == JSONB_FALSE_LITERAL:
        return False
    raise FormatError(f"JSON literal 0x{code:02x} is unknown")


def _varlen(r: Reader) -> int:
    """JSON string/opaque lengths: 7 bits a byte, low first, at most 5 bytes."""
    value = 0
    for i in range(5):
        b = r.u8("JSON length")
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value
    raise FormatError("JSON length longer than 5 bytes")


def _container(buf: bytes, kind: int, pos: int, end: int, depth: int) -> JsonValue:
    large = kind in (JSONB_LARGE_OBJECT, JSONB_LARGE_ARRAY)
    width = 4 if large else 2
    r = Reader(buf, pos, end)
    count, size = r.uint(width, "JSON element count"), r.uint(width, "JSON size")
    if size > end - pos:
        raise FormatError(f"JSON container of {size} bytes in {end - pos}")
    stop = pos + size
    is_object = kind in (JSONB_SMALL_OBJECT, JSONB_LARGE_OBJECT)
    entry = 1 + width  # value entry: type byte, then an offset or an inlined value
    key_entry = width + 2
    r.need(count * (entry + (key_entry if is_object else 0)), "JSON entries")
    keys = [_key(buf, pos, stop, r, width) for _ in range(count)] if is_object else []
    values = [_entry(buf, pos, stop, r, large, depth) for _ in range(count)]
    return dict(zip(keys, values)) if is_object else values


def _key(buf: bytes, base: int, stop: int, r: Reader, width: int) -> str:
    offset, length = r.uint(width, "JSON key offset"), r.u16("JSON key length")
    if base + offset + length > stop:
        raise FormatError("JSON key runs past its container")
    return buf[base + offset : base + offset + length].decode("utf-8")


def _entry(buf: bytes, base: int, stop: int, r: Reader, large: bool, depth: int) -> JsonValue:
    kind = r.u8("JSON value type")
    inline = kind in (JSONB_LITERAL, JSONB_INT16, JSONB_UINT16) or (large and kind in (JSONB_INT32, JSONB_UINT32))
    if inline:
        here = r.pos
        r.take(4 if large else 2, "JSON inline value")
        return _value(buf, kind, here, r.pos, depth + 1)
    offset = r.uint(4 if large else 2, "JSON value offset")
    if base + offset >= stop:
        raise FormatError("JSON value offset points past its container")
    return _value(buf, kind, base + offset, stop, depth + 1)


def _opaque(r: Reader) -> JsonValue:
    field_type = r.u8("JSON opaque type")
    data = r.take(_varlen(r), "JSON opaque data")
    if field_type == _OPAQUE_DECIMAL:
        if len(data) < 2:
            raise FormatError("JSON opaque DECIMAL without precision and scale")
        if len(data) - 2 != decimal_size(data[0], data[1]):
            raise FormatError(f"JSON opaque DECIMAL({data[0]},{data[1]}) of {len(data) - 2} bytes")
        # An expression's decimal, not a column's: MySQL writes precisions above 65 here.
        return decode_decimal(data[2:], data[0], data[1], EXPRESSION_MAX_PRECISION)
    kind = _OPAQUE_TEMPORAL.get(field_type)
    if kind is not None:
        if len(data) < 8:
            raise FormatError(f"JSON opaque {kind} of {len(data)} bytes; 8 expected")
        return JsonOpaque(packed_datetime_text(int.from_bytes(data[:8], "little", signed=True), kind))
    # MySQL's base64 encoder breaks its text every 76 characters (base64_encode, mysys/base64.cc).
    return JsonOpaque(f"base64:type{field_type}:{base64.encodebytes(data).decode().rstrip(chr(10))}")


# ---------------------------------------------------------------------------------------
# Printing, as MySQL's Json_wrapper::to_string does.
# ---------------------------------------------------------------------------------------


def to_text(value: JsonValue) -> str:
    out: list[str] = []
    _print(value, out)
    return "".join(out)


def _key_order(key: str) -> tuple[int, bytes]:
    # Binary JSON keeps object keys sorted by length, then bytes; MySQL prints them so.
    raw = key.encode("utf-8")
    return len(raw), raw


def _print(value: JsonValue, out: list[str]) -> None:
    if isinstance(value, dict):
        out.append("{")
        for i, key in enumerate(sorted(value, key=_key_order)):
            out.append(", " if i else "")
            out.append(quote(key))
            out.append(": ")
            _print(value[key], out)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            out.append(", " if i else "")
            _print(item, out)
        out.append("]")
    else:
        out.append(_scalar_text(value))


def _scalar_text(value: JsonValue) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, JsonOpaque):
        return quote(value.text)
    if isinstance(value, float):
        return double_text(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def double_text(value: float) -> str:
    """A double as MySQL's JSON printer writes it: my_gcvt(d, MY_GCVT_ARG_DOUBLE,
    MY_GCVT_MAX_FIELD_WIDTH) (strings/dtoa.cc), then ".0" if that has no '.' and no 'e'
    (wrapper_to_string, sql-common/json_dom.cc).

    The digits are the shortest that round-trip (dtoa mode 4 with a 34-character width never
    cuts them, so they are repr's). With d = 0.DIGITS x 10**point, plain notation is used for
    -15 < point <= 15 (1e-15 is `0.000000000000001`, 1e14 `100000000000000.0`) and whenever
    the number has a fractional part (`1234567890123456.8`); otherwise `2.5e15`, `1e-16`,
    `-1.5e-300`: no '+', no zero-padded exponent, no ".0". JSON holds no inf or nan; were
    one given, it comes out as repr writes it.
    """
    if value == 0 or not math.isfinite(value):
        return repr(value)  # "0.0", "-0.0": the sign of zero is printed
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)  # finite
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    point = len(digit_tuple) + exponent
    plain = point >= _MIN_POINT and (point <= _MAX_POINT or point < len(digits))
    body = _plain(digits, point) if plain else _scientific(digits, point)
    return "-" + body if sign else body


# MAX_DECPT_FOR_F_FORMAT = DBL_DIG (include/mysql/strings/dtoa.h) bounds plain notation.
_MAX_POINT = 15
_MIN_POINT = 1 - _MAX_POINT


def _plain(digits: str, point: int) -> str:
    if point <= 0:
        return "0." + "0" * -point + digits
    if point >= len(digits):
        return digits + "0" * (point - len(digits)) + ".0"  # the ".0" json_dom.cc appends
    return digits[:point] + "." + digits[point:]


def _scientific(digits: str, point: int) -> str:
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{mantissa}e{point - 1}"


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(text: str) -> str:
    parts = ['"']
    for ch in text:
        if ch in _ESCAPES:
            parts.append(_ESCAPES[ch])
        elif ch < " ":
            parts.append("\\u%04x" % ord(ch))
        else:
            parts.append(ch)
    parts.append('"')
    return "".join(parts)


# ---------------------------------------------------------------------------------------
# Partial updates (PARTIAL_UPDATE_ROWS_EVENT): Json_diff_vector::read_binary and apply.
# ---------------------------------------------------------------------------------------

DIFF_REPLACE = 0
DIFF_INSERT = 1
DIFF_REMOVE = 2


@dataclass(frozen=True, slots=True)
class JsonDiff:
    operation: int
    path: str
    value: JsonValue = None


@dataclass(frozen=True, slots=True)
class JsonPartial:
    """Diffs whose before document the event does not carry (MINIMAL row image).

    The full value cannot be rebuilt from the binlog alone; it is rendered the way
    mysqlbinlog prints it, as nested JSON_REPLACE/JSON_INSERT/JSON_REMOVE calls.
    """

    diffs: tuple[JsonDiff, ...]

    def to_sql(self, column: str) -> str:
        expr = f"`{column}`"
        for diff in self.diffs:
            path = _sql_string(diff.path)
            if diff.operation == DIFF_REMOVE:
                expr = f"JSON_REMOVE({expr}, {path})"
            else:
                func = "JSON_REPLACE" if diff.operation == DIFF_REPLACE else "JSON_INSERT"
                expr = f"{func}({expr}, {path}, CAST({_sql_string(to_text(diff.value))} AS JSON))"
        return expr


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def parse_diffs(data: bytes) -> tuple[JsonDiff, ...]:
    r = Reader(data)
    diffs = []
    while r.remaining():
        op = r.u8("JSON diff operation")
        if op not in (DIFF_REPLACE, DIFF_INSERT, DIFF_REMOVE):
            raise FormatError(f"JSON diff operation {op} is unknown")
        path = r.packed_bytes("JSON diff path").decode("utf-8")
        value: JsonValue = None
        if op != DIFF_REMOVE:
            raw = r.packed_bytes("JSON diff value")
            if not raw:
                raise FormatError("JSON diff value is empty")
            value = parse_value(raw[0], raw[1:])
        diffs.append(JsonDiff(op, path, value))
    return tuple(diffs)


def apply_diffs(doc: JsonValue, diffs: tuple[JsonDiff, ...]) -> JsonValue:
    for diff in diffs:
        doc = _apply(doc, diff)
    return doc


def _apply(doc: JsonValue, diff: JsonDiff) -> JsonValue:
    legs = parse_path(diff.path)
    if not legs:
        if diff.operation == DIFF_REPLACE:
            return diff.value
        raise FormatError(f"JSON diff {diff.operation} on the document root")
    parent = doc
    for step in legs[:-1]:
        parent = _child(parent, step, diff.path)
    leg = legs[-1]
    if isinstance(parent, dict) and isinstance(leg, str):
        _apply_member(parent, leg, diff)
    elif isinstance(parent, list) and isinstance(leg, int):
        _apply_cell(parent, leg, diff)
    else:
        raise FormatError(f"JSON diff path {diff.path} does not fit the document")
    return doc


def _child(node: JsonValue, leg: str | int, path: str) -> JsonValue:
    if isinstance(node, dict) and isinstance(leg, str) and leg in node:
        return node[leg]
    if isinstance(node, list) and isinstance(leg, int) and leg < len(node):
        return node[leg]
    raise FormatError(f"JSON diff path {path} is not in the before image")


def _apply_member(parent: dict[str, JsonValue], key: str, diff: JsonDiff) -> None:
    if diff.operation == DIFF_REMOVE:
        parent.pop(key, None)
    else:
        parent[key] = diff.value


def _apply_cell(parent: list[JsonValue], index: int, diff: JsonDiff) -> None:
    if diff.operation == DIFF_REMOVE:
        if index < len(parent):
            del parent[index]
    elif diff.operation == DIFF_INSERT:
        parent.insert(min(index, len(parent)), diff.value)
    elif index < len(parent):
        parent[index] = diff.value
    else:
        raise FormatError(f"JSON diff replaces [{index}] of an array of {len(parent)}")


def parse_path(path: str) -> list[str | int]:
    """Legs of a canonical JSON path as the server logs it: `$`, `.key`, `."k y"`, `[3]`."""
    if not path.startswith("$"):
        raise FormatError(f"JSON path {path!r} does not start with $")
    legs: list[str | int] = []
    i = 1
    while i < len(path):
        if path[i] == ".":
            i, leg = _member_leg(path, i + 1)
            legs.append(leg)
        elif path[i] == "[":
            close = path.find("]", i)
            if close < 0 or not path[i + 1 : close].isdigit():
                raise FormatError(f"JSON path {path!r}: bad array leg at {i}")
            legs.append(int(path[i + 1 : close]))
            i = close + 1
        else:
            raise FormatError(f"JSON path {path!r}: unexpected {path[i]!r} at {i}")
    return legs


def _member_leg(path: str, i: int) -> tuple[int, str]:
    if i < len(path) and path[i] == '"':
        j, chars = i + 1, []
        while j < len(path) and path[j] != '"':
            if path[j] == "\\" and j + 1 < len(path):
                j += 1
            chars.append(path[j])
            j += 1
        if j >= len(path):
            raise FormatError(f"JSON path {path!r}: unterminated quoted key")
        return j + 1, "".join(chars)
    j = i
    while j < len(path) and path[j] not in ".[":
        j += 1
    if j == i:
        raise FormatError(f"JSON path {path!r}: empty key at {i}")
    return j, path[i:j]
