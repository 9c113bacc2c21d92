"""The compiled JSON printer (connector/csrc/jsonb.c) against the Python path it accelerates
(connector/binlog/jsonb.py): for documents written as MySQL writes binary JSON (small and
large containers, every scalar type, keys in binary JSON's order), the canal-JSON renderer and
the Avro transcoder give exactly the Python path's text; for any other bytes they give it or
decline, and the Python path decodes the event. The live side, with the server's own
documents: tests/test_transcode.py; the fuzzing: tests/test_native_fuzz.py."""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.avro.binary import varint
from connector.binlog import jsonb
from connector.binlog.constants import ColumnType as T
from connector.binlog.constants import RowsKind
from connector.binlog.rowplan import KINDS, json_program, walk_layout
from connector.binlog.rows import RowsDecoderCache
from connector.binlog.tablemap import ColumnMeta, TableMapEvent
from connector.errors import FormatError
from connector.flat import table_shape
from connector.native import transcoder

pytestmark = pytest.mark.skipif(transcoder is None, reason="the compiled module is not built")

COLUMNS = (ColumnMeta(0, T.MYSQL_TYPE_JSON, T.MYSQL_TYPE_JSON, 4, True),)  # a 4-byte length prefix
TABLE = TableMapEvent(1, 0, "db", "t", COLUMNS, raw=b"t", mariadb=False)


# -- binary JSON as MySQL writes it (sql-common/json_binary.cc, serialize_json_value) ----------


def encode(value: Any, large: bool = False) -> bytes:
    """A document: its type byte, then its value."""
    kind, data = _value(value, large)
    return bytes([kind]) + data


def _value(value: Any, large: bool) -> tuple[int, bytes]:
    if value is None or isinstance(value, bool):
        return jsonb.JSONB_LITERAL, bytes([{None: 0, True: 1, False: 2}[value]])
    if isinstance(value, int):
        for kind, fmt in ((jsonb.JSONB_INT16, "<h"), (jsonb.JSONB_INT32, "<i"), (jsonb.JSONB_INT64, "<q")):
            try:
                return kind, struct.pack(fmt, value)
            except struct.error:
                continue
        return jsonb.JSONB_UINT64, struct.pack("<Q", value)
    if isinstance(value, float):
        return jsonb.JSONB_DOUBLE, struct.pack("<d", value)
    if isinstance(value, str):
        raw = value.encode("utf-8")
        return jsonb.JSONB_STRING, _varlen(len(raw)) + raw
    if isinstance(value, tuple):  # (large, container): the container's own size choice
        return _value(value[1], value[0])
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode()))
        kind = jsonb.JSONB_LARGE_OBJECT if large else jsonb.JSONB_SMALL_OBJECT
        return kind, _container([k for k, _ in items], [v for _, v in items], large)
    kind = jsonb.JSONB_LARGE_ARRAY if large else jsonb.JSONB_SMALL_ARRAY
    return kind, _container(None, list(value), large)


def _varlen(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n >= 0x80 else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _container(keys: list[str] | None, values: list[Any], large: bool) -> bytes:
    width, count = (4, "<I") if large else (2, "<H")
    n = len(values)
    raw_keys = [k.encode() for k in keys or ()]
    header = 2 * width + (n * (width + 2) if keys is not None else 0) + n * (1 + width)
    tail, key_entries = bytearray(), bytearray()
    for key in raw_keys:
        key_entries += struct.pack(count, header + len(tail)) + struct.pack("<H", len(key))
        tail += key
    value_entries = bytearray()
    for value in values:
        kind, data = _value(value, False)
        inlined = kind in (jsonb.JSONB_LITERAL, jsonb.JSONB_INT16, jsonb.JSONB_UINT16) or (
            large and kind in (jsonb.JSONB_INT32, jsonb.JSONB_UINT32)
        )
        if inlined:
            value_entries += bytes([kind]) + data.ljust(width, b"\x00")
        else:
            value_entries += bytes([kind]) + struct.pack(count, header + len(tail))
            tail += data
    size = header + len(tail)
    return struct.pack(count, n) + struct.pack(count, size) + bytes(key_entries) + bytes(value_entries) + bytes(tail)


# -- the two renderers beside the Python path -----------------------------------------------


def _image(doc: bytes) -> bytes:
    return b"\x00" + struct.pack("<I", len(doc)) + doc


def compiled(doc: bytes) -> tuple[object, object]:
    """(canal-JSON rows, Avro messages) the compiled code gives a one-column row of `doc`."""
    assert transcoder is not None
    program = json_program(COLUMNS)
    assert program is not None
    kind = KINDS[RowsKind.WRITE]
    names = tuple(f'"{name}":'.encode() for name in table_shape(TABLE).names)
    rendered = transcoder.render_json(_image(doc), program.columns, kind, program.strings, names)
    avro = transcoder.transcode(_image(doc), program.columns, kind, b"", program.strings, b"", b"P", b"P", b"N",
                                b"O", b"T", 0)  # fmt: skip
    return rendered, avro


def python_text(doc: bytes) -> str | None:
    try:
        return jsonb.to_text(jsonb.parse(doc))
    except (FormatError, UnicodeDecodeError):
        return None


def expected(doc: bytes, text: str) -> tuple[object, object]:
    """What the Python path writes of `doc`, whose text is `text`: its canal-JSON row and its Avro message."""
    rows, _ = RowsDecoderCache().decode(_image(doc), TABLE, RowsKind.WRITE, (0,), (), False)
    raw = text.encode("utf-8")
    return [table_shape(TABLE).whole_json(rows[0][1] or ())], [(None, b"P" + varint(len(raw)) + raw + b"\x00NT\x00")]


def walked(doc: bytes) -> bool:
    """Whether the walk takes a row of `doc` (its decoding then waits: connector/binlog/rows._deferred)."""
    assert transcoder is not None
    layout = walk_layout(COLUMNS)
    assert layout is not None
    return bool(transcoder.count_rows(_image(doc), layout, 1) == 1)


def check(doc: bytes) -> None:
    """Both renderers give the Python path's text, or decline (and always where it has none);
    the walk takes exactly what they take, so a document whose decoding waits never fails it."""
    text = python_text(doc)
    rendered, avro = compiled(doc)
    assert walked(doc) == (rendered is not None) == (avro is not None), doc.hex()
    if text is None:
        assert rendered is None and avro is None, doc.hex()
        return
    want_rendered, want_avro = expected(doc, text)
    assert rendered in (None, want_rendered), doc.hex()
    assert avro in (None, want_avro), doc.hex()


def taken(doc: bytes) -> None:
    """As `check`, and the compiled code takes it (no decline)."""
    check(doc)
    rendered, avro = compiled(doc)
    assert rendered is not None and avro is not None, doc.hex()


# -- cases --------------------------------------------------------------------------------------

DOUBLES = [1.5, -2.25, 0.1, 1e15, 1e16, 1e-15, 1e-16, 123456789012345.6, 1234567890123456.8, 2.5e15, 5e-324,
           1.7976931348623157e308, -1.5e-300, 100.0, 0.001, 3.0, 1e21, 12345678901234567890.0]  # fmt: skip


@pytest.mark.parametrize("value", [
    None, True, False, 0, -1, 32767, -32768, 32768, 2**31 - 1, -(2**31), 2**31, 2**63 - 1, -(2**63), 2**63,
    2**64 - 1, 0.0, -0.0, *DOUBLES, "", "plain", 'quote " and \\ and \n\t\b\f\r and \x01\x1f\x7f', "é中😀",
    [], {}, [1, "a", None, [2.5, {"k": []}]], {"b": 1, "a": 2, "aa": {"x": [True, False]}, "": "empty key"},
    {"\n": 1, "é": [1, 2, 3]}, (True, [1, 2**31 - 1, "large array"]), (True, {"k": 65535, "kk": -(2**31)}),
    [[[[[[[[[[1]]]]]]]]]],
])  # fmt: skip
def test_mysql_s_documents_print_as_the_python_path_prints_them(value: Any) -> None:
    taken(encode(value))


def test_an_empty_document_is_the_null_literal() -> None:
    taken(b"")


def test_what_the_python_path_refuses_or_reorders_is_declined() -> None:
    assert compiled(encode("x").replace(b"x", b"\xff"))[0] is None  # a string that is not UTF-8
    opaque = bytes([jsonb.JSONB_OPAQUE, 246, 4, 4, 2, 0x81, 0x0D])  # DECIMAL(4,2) 1.13 by an expression
    assert python_text(opaque) == "1.13" and compiled(opaque) == (None, None)
    swapped = encode({"a": 1, "b": 2}).replace(b"ab", b"ba")  # keys out of binary JSON's order
    assert python_text(swapped) == '{"a": 2, "b": 1}' and compiled(swapped) == (None, None)
    nested: Any = 1  # deeper than MySQL's limit (100)
    for _ in range(102):
        nested = [nested]
    deep = encode(nested)
    assert python_text(deep) is None and compiled(deep) == (None, None)
    shared = bytearray(encode([[1, 2, 3]] * 2))  # two entries naming one value: a tree from a few bytes
    check(bytes(shared))


def test_every_cut_and_every_flipped_byte_gives_the_python_text_or_nothing() -> None:
    doc = encode({"id": 7, "name": "a\nb", "tags": [1.5, None, "x", 2**40], "deep": {"e": (True, [70000, -3])}})
    for cut in range(len(doc)):
        check(doc[:cut])
    for at in range(len(doc)):
        for bit in (0x01, 0x80, 0xFF):
            check(doc[:at] + bytes([doc[at] ^ bit]) + doc[at + 1 :])


def _doubles() -> list[float]:
    """Doubles where a shortest-digits printer goes wrong: short decimals (the exact way's case),
    every power of two in range and its neighbours (the gap below is half the gap above), exact
    halves and ties, the range's edges (2^52, 2^-64), and random bit patterns of every exponent."""
    rng = random.Random(20261129)
    values = [i / 10**k for k in range(0, 18) for i in (1, 3, 5, 7, 9, 25, 99, 123, 999999, 10**k - 1)]
    values += [rng.randrange(10**8) / 100 for _ in range(2000)]
    values += [rng.random() * 10 ** rng.randint(-20, 20) for _ in range(2000)]
    for e in range(-70, 56):
        two = 2.0**e
        values += [two, math.nextafter(two, 0), math.nextafter(two, math.inf), two * 1.5, two + 0.5]
    values += [0.5, 2.5, 0.125, 1e-5 / 2, 4503599627370495.5, 9007199254740991.0, 5.421010862427522e-20]
    values += [i + f for i in (0, 1, 7, 1234, 10**9, 2**40, 2**51) for f in (0.5, 0.25, 0.75, 0.125, 0.0625, 2.0**-20)]
    for _ in range(4000):
        bits = rng.getrandbits(52) | rng.randrange(0x3B0, 0x450) << 52
        values.append(struct.unpack("<d", struct.pack("<Q", bits))[0])
    return [v for v in values if math.isfinite(v) and v != 0]


def test_every_double_prints_as_repr_prints_it() -> None:
    """jsonb.c finds most doubles' digits exactly by integer arithmetic and the rest through
    Python's repr: either way, the Python path's text (repr's shortest digits) for each value, with
    either sign. 500 values a document: each checked whole and so each value's text."""
    values = _doubles()
    values += [-v for v in values]
    for at in range(0, len(values), 500):
        taken(encode((True, values[at : at + 500]), True))


scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))  # fmt: skip
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5)
    | st.dictionaries(st.text(max_size=6), inner, max_size=5)
    | st.tuples(st.booleans(), st.lists(inner, max_size=4)),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(documents, st.booleans())
def test_any_document_prints_as_the_python_path_prints_it(value: Any, large: bool) -> None:
    taken(encode(value, large))
