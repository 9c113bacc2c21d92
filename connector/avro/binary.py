"""A compiled Avro binary encoder for the schemas Sluice writes.

fastavro's `schemaless_writer` re-walks the schema on every call (about 30 us per message
here, half of the pipeline's time). This module walks a schema once and returns one
function per schema that appends each field's bytes: the hot path is a chain of
closures, with no schema lookups per message. It covers the types Sluice's schemas use
(null, boolean, int, long, float, double, string, bytes, enum, array, record, unions,
and the decimal/date/time/timestamp logical types with the values Sluice's converters
give); tests/test_avro_binary.py checks it byte for byte against fastavro.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from connector.errors import AvroWriteError

Write = Callable[[list[bytes], Any], None]


_SMALL = 1 << 13
_VARINTS: list[bytes] = []  # filled below, once _zigzag exists


def varint(n: int) -> bytes:
    """Zig-zag varint of a long. Large values repeat a lot in a stream (the rows of one event
    share their position and times), so they are remembered in a bounded table."""
    if -_SMALL <= n < _SMALL:
        return _VARINTS[n + _SMALL]
    found = _LARGE.get(n)
    if found is None:
        if len(_LARGE) >= 65536:
            _LARGE.clear()
        found = _LARGE[n] = _zigzag(n)
    return found


_LARGE: dict[int, bytes] = {}


# Varint bytes of 14-bit groups: with the continuation bit on both bytes, and as the last group.
_MORE = [bytes((i & 0x7F | 0x80, i >> 7 | 0x80)) for i in range(0x4000)]
_LAST = [bytes((i,)) if i < 0x80 else bytes((i & 0x7F | 0x80, i >> 7)) for i in range(0x4000)]


_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def _zigzag(n: int) -> bytes:
    """Zig-zag varint, 14 bits per table lookup (a 7-bit loop costs twice as much)."""
    if not _LONG_MIN <= n <= _LONG_MAX:  # Java readers reject a longer varint ("Invalid long encoding")
        raise AvroWriteError(f"{n} does not fit an Avro long")
    z = (n << 1) ^ (n >> 63)
    if z < 0x4000:
        return _LAST[z]
    if z < 0x10000000:
        return _MORE[z & 0x3FFF] + _LAST[z >> 14]
    parts = []
    while z >= 0x4000:
        parts.append(_MORE[z & 0x3FFF])
        z >>= 14
    parts.append(_LAST[z])
    return b"".join(parts)


_VARINTS += [_zigzag(n) for n in range(-_SMALL, _SMALL)]


def _decimal(scale: int) -> Write:
    power = 10**scale

    def write(out: list[bytes], value: Any) -> None:
        try:  # exact: a decimal's ratio has a power-of-ten-dividing denominator
            numerator, denominator = (value if isinstance(value, Decimal) else Decimal(value)).as_integer_ratio()
        except (ValueError, OverflowError) as exc:
            raise AvroWriteError(f"decimal {value} is not finite") from exc
        unscaled, rest = divmod(numerator * power, denominator)
        if rest:
            raise AvroWriteError(f"decimal {value} has more than {scale} fraction digits")
        data = unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)
        out.append(varint(len(data)))
        out.append(data)

    return write


def compile_schema(schema: Any) -> Callable[[Any], bytes]:
    """The encoder of one schema: record -> Avro binary, as one generated function.

    Like the rows decoders, the schema is walked once into Python source: each field is
    inlined (small longs through a table, the rest through `varint`), records inside
    arrays become loops, nullable unions an if. Named types referenced again (`old` reuses
    the row record) are inlined again."""
    gen = _Gen()
    _emit(gen, schema, "r", 1, {}, 0)
    return _build(gen, "r")


def _build(gen: _Gen, argument: str) -> Callable[[Any], bytes]:
    """`encode(argument)`: the lines made, appending to `out` through `a`, then joined."""
    lines = [f"def encode({argument}):", "    out = []", "    a = out.append", *gen.lines, '    return b"".join(out)']
    source = "\n".join(lines)
    namespace: dict[str, Any] = {**gen.consts, "_V": _VARINTS, "_vi": varint, "_S": _SMALL,
                                 "_f": struct.Struct("<f").pack, "_d": struct.Struct("<d").pack,
                                 "_err": AvroWriteError}  # fmt: skip
    exec(compile(source, "<avro encoder>", "exec"), namespace)  # noqa: S102
    encode: Callable[[Any], bytes] = namespace["encode"]
    encode.__doc__ = source
    return encode


Convert = tuple[type | None, Callable[[Any], Any] | None]


def compile_tuple_record(
    record: dict[str, Any], columns: list[int], converters: list[Convert], unscaled: frozenset[int] = frozenset()
) -> Callable[[tuple[Any, ...]], bytes]:
    """The encoder of one record whose field values come from a tuple.

    Field i is `t[columns[i]]`, passed through `convert` unless it is None or already of
    class `cls` (`(cls, convert)` = `converters[i]`; `(None, None)`: as it is). Decimal
    fields whose index is in `unscaled` take the unscaled integer. The rows path uses it to
    encode decoded row images without building a dict per row."""
    gen = _Gen()
    named: dict[str, Any] = {}
    _remember(record, named)
    for i, (field, column, (cls, convert)) in enumerate(zip(record["fields"], columns, converters, strict=True)):
        fv = gen.var()
        gen.emit(1, f"{fv} = t[{column}]")
        if convert is not None and cls is not None:
            gen.emit(1, f"if {fv} is not None and {fv}.__class__ is not {gen.const(cls)}:")
            gen.emit(2, f"{fv} = {gen.const(convert)}({fv})")
        elif convert is not None:
            gen.emit(1, f"if {fv} is not None: {fv} = {gen.const(convert)}({fv})")
        if i in unscaled:
            _emit_unscaled(gen, field["type"], fv)
        else:
            _emit(gen, field["type"], fv, 1, named, 1)
    return _build(gen, "t")


def _emit_unscaled(gen: _Gen, kind: Any, v: str) -> None:
    """A decimal from its unscaled integer: big-endian two's complement, as `_decimal` writes it."""
    ind = 1
    if isinstance(kind, list):
        null_index = kind.index("null")
        gen.emit(1, f"if {v} is None:")
        gen.emit(2, f"a({varint(null_index)!r})")
        gen.emit(1, "else:")
        gen.emit(2, f"a({varint(1 - null_index)!r})")
        kind, ind = kind[1 - null_index], 2
    if not (isinstance(kind, dict) and kind.get("logicalType") == "decimal" and kind["type"] == "bytes"):
        raise AvroWriteError(f"an unscaled value for a field of type {kind}")
    gen.emit(ind, f"{v} = {v}.to_bytes(({v}.bit_length() + 8) >> 3, 'big', signed=True)")
    gen.emit(ind, f"a(_V[len({v}) + _S]); a({v})")


class _Gen:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.n = 0

    def var(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def const(self, value: Any) -> str:
        name = f"_k{len(self.consts)}"
        self.consts[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


def _long_expr(v: str) -> str:
    return f"_V[{v} + _S] if -_S <= {v} < _S else _vi({v})"


def _emit(gen: _Gen, schema: Any, v: str, ind: int, named: dict[str, Any], depth: int) -> None:
    if depth > 32:
        raise AvroWriteError("schema nests deeper than 32 levels (recursive types are not used by Sluice)")
    if isinstance(schema, list):
        _emit_union(gen, schema, v, ind, named, depth)
        return
    if isinstance(schema, str):
        if schema in named:
            _emit(gen, named[schema], v, ind, named, depth + 1)
            return
        _emit_primitive(gen, schema, v, ind)
        return
    kind = schema["type"]
    if kind == "record":
        _remember(schema, named)
        for field in schema["fields"]:
            fv = gen.var()
            gen.emit(ind, f"{fv} = {v}[{field['name']!r}]")
            _emit(gen, field["type"], fv, ind, named, depth + 1)
    elif kind == "enum":
        _remember(schema, named)
        index = gen.const({symbol: varint(i) for i, symbol in enumerate(schema["symbols"])})
        gen.emit(ind, f"a({index}[{v}])")
    elif kind == "array":
        item = gen.var()
        gen.emit(ind, f"if {v}:")
        gen.emit(ind + 1, f"a(_vi(len({v})))")
        gen.emit(ind + 1, f"for {item} in {v}:")
        _emit(gen, schema["items"], item, ind + 2, named, depth + 1)
        gen.emit(ind, "a(b'\\x00')")
    elif schema.get("logicalType") == "decimal" and kind == "bytes":
        writer = gen.const(_decimal(int(schema.get("scale", 0))))
        gen.emit(ind, f"{writer}(out, {v})")
    else:
        _emit(gen, kind, v, ind, named, depth + 1)  # date, time-micros, timestamp-micros: ints already


def _remember(schema: dict[str, Any], named: dict[str, Any]) -> None:
    name = schema["name"]
    named[name] = schema
    if schema.get("namespace") and "." not in name:
        named[f"{schema['namespace']}.{name}"] = schema


def _emit_primitive(gen: _Gen, kind: str, v: str, ind: int) -> None:
    if kind in ("int", "long"):
        gen.emit(ind, f"a({_long_expr(v)})")
    elif kind == "string":
        gen.emit(ind, f"{v} = {v}.encode('utf-8')")
        gen.emit(ind, f"a({_long_expr(f'len({v})')}); a({v})")
    elif kind == "bytes":
        gen.emit(ind, f"a({_long_expr(f'len({v})')}); a({v})")
    elif kind == "double":
        gen.emit(ind, f"a(_d({v}))")
    elif kind == "float":
        gen.emit(ind, f"a(_f({v}))")
    elif kind == "boolean":
        gen.emit(ind, f"a(b'\\x01' if {v} else b'\\x00')")
    elif kind != "null":
        raise AvroWriteError(f"type {kind!r} is not used by Sluice's schemas")


def _emit_union(gen: _Gen, branches: list[Any], v: str, ind: int, named: dict[str, Any], depth: int) -> None:
    if len(branches) != 2 or "null" not in branches:
        raise AvroWriteError(f"unions other than [null, T] are not used by Sluice's schemas: {branches}")
    null_index = branches.index("null")
    gen.emit(ind, f"if {v} is None:")
    gen.emit(ind + 1, f"a({varint(null_index)!r})")
    gen.emit(ind, "else:")
    gen.emit(ind + 1, f"a({varint(1 - null_index)!r})")
    _emit(gen, branches[1 - null_index], v, ind + 1, named, depth + 1)
