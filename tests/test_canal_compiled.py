"""canal-json's texts in the compiled code (connector/csrc/canaltext.c, canal_rows) against canal.py.

Where canal's Kafka text of a value differs from flat.py's (canal._renderer), the compiled code
writes it from the stored bytes: a FLOAT's or DOUBLE's Java form (held here to
canal.java_float_text of flat.py's text across magnitudes, at both of Java's switches to
scientific form, on signed zeros, denormals and random bit patterns), an ENUM's index, a SET's
mask; each row's sqlType is canal's for the value (a NULL's, an UNSIGNED value's past its width's
signed maximum). The whole messages are held to the per-message path on live servers
(tests/test_transcode.py) and on every corpus session (tests/test_lane.py).

No services: this runs in `make unit` too.
"""

from __future__ import annotations

import json
import random
import struct

import pytest

from connector.binlog.coltypes import float32_text
from connector.binlog.constants import RowsKind
from connector.binlog.rowplan import KINDS, OP_DOUBLE, OP_ENUM, OP_FLOAT, OP_INT, OP_SET, OP_UINT, OP_VECTOR, Strings
from connector.canal import canal_shape, java_float_text
from connector.native import transcoder
from connector.native_spec import record
from tests.support.units import table

COLUMN, SQLTYPE = record("column_t"), record("sqltype_t")
PARTS = (b'],"old":', b',"sql":"first","sqlType":', b',"sql":"","sqlType":', b"}")


def _names(*names: str) -> bytes:
    strings = Strings()
    strings.add([f'"{name}":'.encode() for name in names])
    return strings.packed()


def _message(body: bytes, op: int, width: int, b: int = 0, strings: bytes = b"",
             types: tuple[int, int, int] = (1, 2, 1), a: int = 0) -> list[dict[str, object]] | None:  # fmt: skip
    """Each row of one column `v`'s images as its message, read back; None: declined."""
    assert transcoder is not None
    program = COLUMN.pack(op, width, a, b, -1, -1, 0)
    rows = transcoder.canal_json(body, program, KINDS[RowsKind.WRITE], b"", strings, _names("v"),
                                 SQLTYPE.pack(*types), False, *PARTS)  # fmt: skip
    return None if rows is None else [json.loads(value) for _, value in rows]


def _text(op: int, width: int, value: bytes, b: int = 0, strings: bytes = b"", a: int = 0) -> object:
    rows = _message(b"\x00" + value, op, width, b, strings, a=a)
    return None if rows is None else rows[0]["data"][0]["v"]  # type: ignore[index]


def _doubles() -> list[float]:
    rng = random.Random(3)
    edges = [0.0, -0.0, 1e7, -1e7, 9999999.999999998, 1e-3, 0.0009999999999999998, 1e-4, 123456.0, 100.0, 1.5,
             5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1e16, 1.2345e22, 0.1, 1 / 3, -7e-11]  # fmt: skip
    bits = (struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(4000))
    scaled = (rng.uniform(1, 10) * 10.0 ** rng.randrange(-9, 12) for _ in range(2000))
    return edges + [d for d in (*bits, *scaled) if d == d and abs(d) != float("inf")]


def test_a_double_is_written_as_java_prints_it() -> None:
    for d in _doubles():
        assert _text(OP_DOUBLE, 8, struct.pack("<d", d)) == java_float_text(repr(d)), repr(d)


def test_a_float_is_written_as_java_prints_it() -> None:
    rng = random.Random(4)
    patterns = [rng.getrandbits(32) for _ in range(4000)] + [0, 1 << 31, 1, 0x7F7FFFFF, 0x4B189680, 0x3A83126F]
    for bits in patterns:
        if (bits >> 23) & 0xFF == 0xFF:  # NaN and infinities: declined, the server refuses them
            assert _text(OP_FLOAT, 4, struct.pack("<I", bits)) is None
            continue
        (f,) = struct.unpack("<f", struct.pack("<I", bits))
        assert _text(OP_FLOAT, 4, struct.pack("<I", bits)) == java_float_text(float32_text(f)), hex(bits)


def test_a_vector_is_its_floats_from_their_six_digit_text() -> None:
    """canal's VECTOR text (connector/canal.py's renderer of flat.py's text, each float "%.5e": read
    back and packed again), for random bit patterns, the extremes, denormals and signed zeros; a value
    of no whole floats is declined (values.decode_vector raises)."""
    rng = random.Random(5)
    patterns = [rng.getrandbits(32) for _ in range(3000)] + [0, 1 << 31, 1, 0x00800000, 0x80000001, 0x7F7FFFFF]
    (name, render), = canal_shape(table("CREATE TABLE t (id INT PRIMARY KEY, v VECTOR(3))")).renders
    assert name == "v"
    for at in range(0, len(patterns), 3):
        floats = [p for p in patterns[at : at + 3] if (p >> 23) & 0xFF != 0xFF]  # the server refuses NaN, inf
        value = struct.pack(f"<{len(floats)}I", *floats)
        text = "[" + ",".join("%.5e" % x for x in struct.unpack(f"<{len(floats)}f", value)) + "]"
        assert _text(OP_VECTOR, 0, bytes([len(value)]) + value, a=1) == render(text), [hex(p) for p in floats]
    assert _text(OP_VECTOR, 0, b"\x03abc", a=1) is None


def test_an_enum_is_its_index_and_a_set_its_mask() -> None:
    labels = Strings()
    labels.add([b"x", b"y", "zé".encode()])
    strings = labels.packed()
    assert [_text(OP_ENUM, 1, bytes([i]), 3, strings) for i in range(4)] == ["0", "1", "2", "3"]
    assert _text(OP_ENUM, 1, b"\x04", 3, strings) is None  # past the labels: the Python path raises
    # bits past the labels name nothing (values.decode_set), so they are not in the mask either
    assert [_text(OP_SET, 1, bytes([m]), 3, strings) for m in (0, 5, 7, 0xFF)] == ["0", "5", "7", "7"]


def test_each_row_s_sql_type_is_canal_s_for_its_value() -> None:
    images = b"".join(b"\x00" + struct.pack("<I", v) for v in (2**31 - 1, 2**31, 2**32 - 1)) + b"\x01"
    rows = _message(images, OP_UINT, 4, types=(4, 12, -5))
    assert rows is not None
    assert [row["sqlType"] for row in rows] == [{"v": 4}, {"v": -5}, {"v": -5}, {"v": 12}]  # the last: NULL
    assert [row["sql"] for row in rows] == ["first", "", "", ""]  # the statement's text on the first row


def test_a_rows_event_s_rows_in_one_message_carry_the_last_row_s_sql_type() -> None:
    """message_rows = "event": one message with no key, every row's `data` and (an UPDATE's) `old`,
    the statement's text, the sqlType codes of the last row's after image (MQMessageUtils')."""
    assert transcoder is not None
    program = COLUMN.pack(OP_UINT, 4, 0, 0, -1, -1, 0)
    types = SQLTYPE.pack(4, 12, -5)
    inserts = b"".join(b"\x00" + struct.pack("<I", v) for v in (7, 2**31)) + b"\x01"
    written = transcoder.canal_json(inserts, program, KINDS[RowsKind.WRITE], b"", b"", _names("v"), types, False,
                                    *PARTS, True)  # fmt: skip
    assert written is not None
    ((key, value),) = written
    message = json.loads(value)
    assert key is None and message["data"] == [{"v": "7"}, {"v": "2147483648"}, {"v": None}]
    assert message["old"] is None and message["sql"] == "first" and message["sqlType"] == {"v": 12}
    # an UPDATE: a NULL before a value past the signed maximum, which is the last row's code
    same, wide = struct.pack("<I", 1), struct.pack("<I", 2**31)
    update = b"\x00" + same + b"\x00" + same + b"\x01" + b"\x00" + wide
    written = transcoder.canal_json(update, program, KINDS[RowsKind.UPDATE], b"", b"", _names("v"), types, False,
                                    *PARTS, True)  # fmt: skip
    assert written is not None
    ((_, value),) = written
    message = json.loads(value)
    assert message["data"] == [{"v": "1"}, {"v": "2147483648"}] and message["old"] == [{}, {"v": None}]
    assert message["sqlType"] == {"v": -5}
    # a key is refused: such a message has none
    key_cols = struct.pack("<3i", 0, -1, -1)
    assert transcoder.canal_json(inserts, program, KINDS[RowsKind.WRITE], key_cols, b"", _names("v"), types, False,
                                 *PARTS, True) is None  # fmt: skip


def test_a_wider_code_is_refused_for_a_column_that_is_not_an_unsigned_integer() -> None:
    assert transcoder is not None
    with pytest.raises(ValueError, match="canal-json program"):
        transcoder.canal_json(b"\x00\x01", COLUMN.pack(OP_INT, 1, 0, 0, -1, -1, 0), 0, b"", b"", _names("v"),
                              SQLTYPE.pack(-6, -6, 5), False, *PARTS)  # fmt: skip
