"""GEOMETRY and VECTOR in the compiled transcoder (issue 33): the ops that write a value as stored.

A GEOMETRY's Avro value is its stored bytes (SRID, then WKB), as the Python path's. A VECTOR's is
the Python path's too: its flat text (VECTOR_TO_STRING's "%.5e" of each float) read back into
floats (connector/avro/encoding._typed: convert(render(value))), so six significant digits; the
compiled code formats and parses each float with Python's own functions, and these tests hold it
to the Python chain on ties, denormals, signed zeros, infinities and random bit patterns. A NaN
(the server refuses one) and a length that is not whole floats are declined.

No services: this runs in `make unit` too.
"""

from __future__ import annotations

import io
import random
import struct

import fastavro
import pytest

from connector.avro.values import converter
from connector.binlog.constants import RowsKind
from connector.binlog.rowplan import KINDS, OP_GEOMETRY, OP_VECTOR
from connector.binlog.values import decode_vector
from connector.native import transcoder
from connector.native_spec import record
from connector.schema.model import Column

COLUMN = record("column_t")
VECTOR_SCHEMA = fastavro.parse_schema({"type": "array", "items": "float"})


def _written(op: int, prefix: int, value: bytes) -> bytes | None:
    """One non-null column's Avro bytes, as the transcoder writes it; None: declined."""
    assert transcoder is not None
    body = b"\x00" + len(value).to_bytes(prefix, "little") + value  # the null bitmap, the prefix, the value
    program = COLUMN.pack(op, 0, prefix, 0, -1, -1, 0)
    rows = transcoder.transcode(body, program, KINDS[RowsKind.WRITE], b"", b"", b"", b"", b"", b"", b"", b"", 0)
    if rows is None:
        return None
    ((_, value_bytes),) = rows
    return value_bytes[:-2]  # the image, then the record's end (0), `old` and the tail (empty), the row number (0)


def _python_vector(raw: bytes) -> bytes:
    """The Python path's Avro value of a VECTOR: render (flat.py's text), convert, write."""
    text = "[" + ",".join("%.5e" % x for x in decode_vector(raw)) + "]"
    out = io.BytesIO()
    fastavro.schemaless_writer(out, VECTOR_SCHEMA, converter(Column("v", "vector"))(text))
    return out.getvalue()


@pytest.mark.parametrize("prefix", [1, 2, 3, 4])
def test_a_geometry_is_its_stored_bytes(prefix: int) -> None:
    point = struct.pack("<IBIdd", 4326, 1, 1, 45.0, 7.5)
    assert _written(OP_GEOMETRY, prefix, point) == b"\x32" + point  # 25 bytes: zig-zag 50
    assert _written(OP_GEOMETRY, prefix, b"") == b"\x00"


def _floats(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def test_a_vector_is_the_python_path_s_floats() -> None:
    rng = random.Random(9)
    cases = [
        b"",  # no floats: the array's end alone
        _floats(1.5, -2.0, 3e38),
        _floats(0.0, -0.0, float("inf"), float("-inf")),
        _floats(3.4028234663852886e38, -3.4028234663852886e38, 1e-45, -1e-45, 1.17549435e-38),
        # exact ties at the sixth digit (round half to even): 123456.5, 1234565.0, 0.5 steps
        _floats(123456.5, 123457.5, 1234565.0, 1234575.0, 2.5, 12345.25),
        _floats(*(i / 8 for i in range(-200, 200))),
    ]
    for _ in range(3000):  # random bit patterns, NaNs left out
        bits = [rng.getrandbits(32) for _ in range(rng.randrange(1, 9))]
        cases.append(b"".join(struct.pack("<I", b) for b in bits if (b >> 23) & 0xFF != 0xFF))
    for raw in cases:
        assert _written(OP_VECTOR, 4, raw) == _python_vector(raw), raw.hex()
    # six significant digits, as VECTOR_TO_STRING prints them
    stored = _floats(1.2345678)
    rounded = _floats(1.23457)
    assert rounded != stored and _written(OP_VECTOR, 1, stored) == b"\x02" + rounded + b"\x00"


def test_a_vector_with_a_nan_or_a_part_of_a_float_is_declined() -> None:
    assert _written(OP_VECTOR, 4, _floats(1.0, float("nan"))) is None
    assert _written(OP_VECTOR, 4, _floats(1.0) + struct.pack("<I", 0x7FC00001)) is None  # a payload too
    assert _written(OP_VECTOR, 4, _floats(1.0)[:3]) is None
    assert _written(OP_VECTOR, 4, _floats(1.0, 2.0) + b"\x00") is None
