"""Byte-literal cases for every column type, and round trips against tests/support/encoders.py."""

from __future__ import annotations

import datetime as dt
import math
import random
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.avro.values import converter
from connector.binlog import jsonb
from connector.binlog.coltypes import float32_text
from connector.binlog.constants import ColumnType as T
from connector.binlog.constants import RowsKind
from connector.binlog.reader import Reader
from connector.binlog.rowcodec import build_rows_decoder
from connector.binlog.tablemap import ColumnMeta, TableMapEvent, decode_table_map
from connector.binlog.values import (
    NotTyped,
    date_days,
    datetime2_decoder,
    datetime2_micros_decoder,
    decimal_decoder,
    decimal_size,
    decimal_text_decoder,
    decimal_unscaled_decoder,
    decode_date,
    decode_datetime,
    decode_datetime2,
    decode_decimal,
    decode_time,
    decode_time2,
    decode_timestamp2,
    frac_size,
    timestamp2_decoder,
    timestamp2_micros_decoder,
)
from connector.errors import FormatError
from connector.schema.model import Column
from tests.support import live
from tests.support.encoders import (
    encode_date,
    encode_datetime2,
    encode_decimal,
    encode_json,
    encode_time2,
    encode_timestamp2,
)

# -- DECIMAL -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "precision", "scale", "text"),
    [
        # The worked example of decimal.cc's decimal2bin comment, and its negative.
        ("810DFB38D204D2", 14, 4, "1234567890.1234"),
        ("7EF204C72DFB2D", 14, 4, "-1234567890.1234"),
        ("800000", 5, 0, "0"),
        ("8000000000", 10, 2, "0.00"),
        ("7FFFFFFFFF", 10, 2, "-0.00"),
        ("80000000000001", 12, 5, "0.00001"),
    ],
)
def test_decimal_byte_literals(raw: str, precision: int, scale: int, text: str) -> None:
    data = bytes.fromhex(raw)
    assert len(data) == decimal_size(precision, scale)
    assert format(decode_decimal(data, precision, scale), "f") == text


def test_decimal_65_digits_scale_30() -> None:
    value = Decimal("-" + "9" * 35 + "." + "9" * 30)
    raw = encode_decimal(value, 65, 30)
    assert len(raw) == decimal_size(65, 30) == 30
    assert decode_decimal(raw, 65, 30) == value
    assert format(decode_decimal(encode_decimal(Decimal("0.5"), 65, 30), 65, 30), "f") == "0." + "5" + "0" * 29


@st.composite
def decimals(draw: st.DrawFn) -> tuple[Decimal, int, int]:
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(30, precision)))
    digits = draw(st.text("0123456789", min_size=precision, max_size=precision))
    sign = draw(st.sampled_from(["", "-"]))
    body = digits[: precision - scale] or "0"
    text = f"{sign}{body}.{digits[precision - scale :]}" if scale else sign + body
    return Decimal(text), precision, scale


@given(decimals())
@settings(max_examples=400)
def test_decimal_round_trip(case: tuple[Decimal, int, int]) -> None:
    value, precision, scale = case
    decoded = decode_decimal(encode_decimal(value, precision, scale), precision, scale)
    assert decoded == value
    assert len(format(decoded, "f").partition(".")[2]) == scale  # exactly `scale` digits


def test_decimal_out_of_range_is_a_format_error() -> None:
    with pytest.raises(FormatError):
        decode_decimal(b"\x80", 70, 0)


# -- temporal ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "fsp", "text"),
    [
        ("8000000000", 0, "0000-00-00 00:00:00"),
        # 2016-11-28 16:53:42: ((2016*13+11) << 5 | 28) << 17 | (16 << 12 | 53 << 6 | 42), + 2^39
        ("999af90d6a", 0, "2016-11-28 16:53:42"),
        ("999af90d6a0f423f", 6, "2016-11-28 16:53:42.999999"),
        ("999af90d6a63", 2, "2016-11-28 16:53:42.99"),
        ("999af90d6a270f", 4, "2016-11-28 16:53:42.9999"),
    ],
)
def test_datetime2_byte_literals(raw: str, fsp: int, text: str) -> None:
    assert decode_datetime2(bytes.fromhex(raw), fsp) == text


@given(
    st.integers(0, 9999), st.integers(0, 12), st.integers(0, 31), st.integers(0, 23), st.integers(0, 59),
    st.integers(0, 59), st.integers(0, 999999), st.integers(0, 6),
)  # fmt: skip
def test_datetime2_round_trip(y: int, mo: int, d: int, h: int, mi: int, s: int, micros: int, fsp: int) -> None:
    micros = micros // 10 ** (6 - fsp) * 10 ** (6 - fsp)
    text = decode_datetime2(encode_datetime2(y, mo, d, h, mi, s, micros, fsp), fsp)
    frac = f".{micros:06d}"[: fsp + 1] if fsp else ""
    assert text == f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}{frac}"


@given(
    st.booleans(),
    st.integers(0, 838),
    st.integers(0, 59),
    st.integers(0, 59),
    st.integers(0, 999999),
    st.integers(0, 6),
)
def test_time2_round_trip(negative: bool, h: int, mi: int, s: int, micros: int, fsp: int) -> None:
    micros = micros // 10 ** (6 - fsp) * 10 ** (6 - fsp)
    if not (h or mi or s or micros):
        negative = False  # there is no negative zero
    frac = f".{micros:06d}"[: fsp + 1] if fsp else ""
    expected = f"{'-' if negative else ''}{h:02d}:{mi:02d}:{s:02d}{frac}"
    assert decode_time2(encode_time2(negative, h, mi, s, micros, fsp), fsp) == expected


@pytest.mark.parametrize(
    ("raw", "fsp", "text"),
    [
        ("800000", 0, "00:00:00"),
        ("7FFFFF", 0, "-00:00:01"),
        ("B46EFB", 0, "838:59:59"),
        ("4B9105", 0, "-838:59:59"),
        ("7FFFFFCE", 1, "-00:00:00.5"),  # the fraction borrows from the integer part
        ("7FFFFFEC78", 4, "-00:00:00.5000"),
        ("7FFFFFF85EE0", 6, "-00:00:00.500000"),
    ],
)
def test_time2_byte_literals(raw: str, fsp: int, text: str) -> None:
    assert decode_time2(bytes.fromhex(raw), fsp) == text


@given(st.integers(0, 2**31 - 1), st.integers(0, 999999), st.integers(0, 6))
def test_timestamp2_round_trip(seconds: int, micros: int, fsp: int) -> None:
    micros = micros // 10 ** (6 - fsp) * 10 ** (6 - fsp)
    text = decode_timestamp2(encode_timestamp2(seconds, micros, fsp), fsp)
    frac = f".{micros:06d}"[: fsp + 1] if fsp else ""
    if seconds == 0 and micros == 0:  # the zero TIMESTAMP; second 0 with a fraction is MariaDB's 1970-01-01
        assert text == "0000-00-00 00:00:00" + frac
    else:
        moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
        assert text == moment.strftime("%Y-%m-%d %H:%M:%S") + frac


def test_date_and_old_temporal_formats() -> None:
    assert decode_date(encode_date(2024, 2, 29)) == "2024-02-29"
    assert decode_date(b"\0\0\0") == "0000-00-00"
    assert decode_datetime(struct.pack("<Q", 20240229235959)) == "2024-02-29 23:59:59"
    assert decode_time(struct.pack("<i", -8385959)[:3]) == "-838:59:59"


# -- integers, floats and strings through a generated row decoder -------------------------------


def _table(columns: list[ColumnMeta]) -> TableMapEvent:
    return TableMapEvent(1, 0, "db", "t", tuple(columns), raw=repr(columns).encode())


def _col(i: int, kind: int, meta: int = 0, unsigned: bool = False, collation: int | None = None) -> ColumnMeta:
    return ColumnMeta(i, kind, kind, meta, True, unsigned=unsigned, collation=collation)


INT_CASES = [
    (T.MYSQL_TYPE_TINY, "<b", "<B", 8), (T.MYSQL_TYPE_SHORT, "<h", "<H", 16),
    (T.MYSQL_TYPE_LONG, "<i", "<I", 32), (T.MYSQL_TYPE_LONGLONG, "<q", "<Q", 64),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "signed", "unsigned", "bits"), INT_CASES)
def test_integer_extremes(kind: int, signed: str, unsigned: str, bits: int) -> None:
    table = _table(
        [
            _col(0, kind),
            _col(1, kind, unsigned=True),
            _col(2, T.MYSQL_TYPE_INT24),
            _col(3, T.MYSQL_TYPE_INT24, unsigned=True),
        ]
    )
    decode = build_rows_decoder(table, RowsKind.WRITE, (0, 1, 2, 3), ())
    lo, hi, umax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1, 2**bits - 1
    for a, b, c, d in ((lo, umax, -(2**23), 2**24 - 1), (hi, 0, 2**23 - 1, 0), (-1, 1, -1, 1)):
        body = b"\x00" + struct.pack(signed, a) + struct.pack(unsigned, b)
        body += c.to_bytes(3, "little", signed=True) + d.to_bytes(3, "little")
        assert decode(body, 0, len(body)) == [(None, (a, b, c, d))]


def test_nulls_skip_their_bytes_and_bits_past_the_count_are_ignored() -> None:
    table = _table([_col(i, T.MYSQL_TYPE_LONG) for i in range(3)])
    decode = build_rows_decoder(table, RowsKind.WRITE, (0, 1, 2), ())
    body = bytes([0b11111010]) + struct.pack("<ii", 7, 9)  # column 2 NULL; bits 3-7 set and ignored
    assert decode(body, 0, len(body)) == [(None, (7, None, 9))]


def test_a_row_running_past_the_event_is_an_error() -> None:
    table = _table([_col(0, T.MYSQL_TYPE_VARCHAR, 300, collation=45)])
    decode = build_rows_decoder(table, RowsKind.WRITE, (0,), ())
    body = b"\x00" + (200).to_bytes(2, "little") + b"short"
    with pytest.raises(FormatError, match="past the event end"):
        decode(body, 0, len(body))


def test_float_rendering_is_the_shortest_round_trip() -> None:
    cases = {"0.1": "0.1", "3.4028234663852886e+38": "3.4028235e+38", "1e-45": "1e-45", "-2.5": "-2.5"}
    for stored, shown in cases.items():
        value = struct.unpack("<f", struct.pack("<f", float(stored)))[0]
        assert float32_text(value) == shown


def test_strings_decode_with_their_collation() -> None:
    columns = [
        _col(0, T.MYSQL_TYPE_VARCHAR, 100, collation=45),  # utf8mb4
        _col(1, T.MYSQL_TYPE_VARCHAR, 100, collation=8),  # latin1 (cp1252 in MySQL)
        _col(2, T.MYSQL_TYPE_VARCHAR, 100, collation=63),  # varbinary
        ColumnMeta(3, T.MYSQL_TYPE_STRING, T.MYSQL_TYPE_STRING, 4, True, collation=63),  # binary(4)
        _col(4, T.MYSQL_TYPE_BLOB, 2, collation=63),
        _col(5, T.MYSQL_TYPE_BLOB, 1, collation=45),
    ]
    decode = build_rows_decoder(_table(columns), RowsKind.WRITE, tuple(range(6)), ())
    values = ["💾é".encode(), b"\x80\xe9", b"\x00\xff", b"a"]
    body = b"\x00" + b"".join(bytes([len(v)]) + v for v in values)
    body += (3).to_bytes(2, "little") + b"\x01\x02\x00" + b"\x03abc"
    assert decode(body, 0, len(body)) == [(None, ("💾é", "€é", b"\x00\xff", b"a\0\0\0", b"\x01\x02\x00", "abc"))]


# -- TABLE_MAP ---------------------------------------------------------------------------------


def _table_map_body(types: bytes, meta: bytes, optional: bytes = b"") -> bytes:
    head = (1).to_bytes(6, "little") + b"\x01\x00" + b"\x02db\x00" + b"\x01t\x00"
    return head + bytes([len(types)]) + types + bytes([len(meta)]) + meta + b"\x00" * ((len(types) + 7) // 8) + optional


def test_table_map_metadata_length_is_enforced() -> None:
    # canal misread MYSQL_TYPE_TYPED_ARRAY (20) and shifted every later byte: the declared
    # metadata length must match what the per-type reads used.
    good = _table_map_body(bytes([3, 20, 15]), b"\x0f\x2c\x01" + b"\x40\x00")
    table = decode_table_map(Reader(good), 8)
    assert [c.element_type for c in table.columns] == [None, 15, None]
    assert table.columns[1].meta == 300 and table.columns[2].meta == 64
    bad = _table_map_body(bytes([3, 20, 15]), b"\x0f\x2c\x01\x40\x00\x00")
    with pytest.raises(FormatError, match="metadata_length says 6"):
        decode_table_map(Reader(bad), 8)


def test_a_nul_inside_a_table_map_s_names_is_a_format_error() -> None:
    """Found by tests/test_native_fuzz.py: a database name `\\0est` reached the schema directory,
    whose mkdir raised ValueError (embedded null byte). No server lets a name hold U+0000."""
    good = _table_map_body(bytes([3]), b"")
    assert decode_table_map(Reader(good), 8).schema == "db"
    for at, what in ((9, "schema"), (13, "table")):  # the first byte of `db`, of `t`
        bad = good[:at] + b"\x00" + good[at + 1 :]
        with pytest.raises(FormatError, match=f"{what}: a NUL byte at 0"):
            decode_table_map(Reader(bad), 8)


def test_optional_metadata_is_decoded_and_unknown_types_are_skipped() -> None:
    optional = (
        b"\x04\x06\x02id\x02nm"  # COLUMN_NAME
        + b"\x01\x01\x80"  # SIGNEDNESS: first numeric column unsigned
        + b"\x02\x01\x2d"  # DEFAULT_CHARSET 45
        + b"\x63\x03abc"  # unknown type 99, skipped by its length
        + b"\x08\x01\x00"  # SIMPLE_PRIMARY_KEY: column 0
    )
    table = decode_table_map(Reader(_table_map_body(bytes([3, 15]), b"\x40\x00", optional)), 8)
    assert table.column_names == ("id", "nm") and table.pk_names == ("id",)
    assert table.columns[0].unsigned and table.columns[1].collation == 45


# Captured from the live servers (binlog_row_metadata=FULL) after
#   CREATE TABLE cs.t (id INT PRIMARY KEY, a VARCHAR(10) CHARACTER SET utf8mb4, g GEOMETRY,
#     b VARCHAR(10) CHARACTER SET latin1, [v VECTOR(2),] c TEXT CHARACTER SET utf8mb4, j JSON,
#     p POINT [SRID 4326], e ENUM('x','y') CHARACTER SET latin1, bl BLOB)
# MySQL 9.7.4 (with VECTOR): COLUMN_CHARSET has entries for a, b, v, c, bl; none for g or p.
MYSQL_97_CHARSETS = bytes.fromhex(
    "5c00000000000100026373000174000a030fff0ff2fcf5fffefc0c2800040a0004020404f70102fe030101000309fcff00083ffcff"
    "003f070200010d0102041602696401610167016201760163016a0170016502626c0a0108060502017801790801000c02ffc0"
)
# MariaDB 10.11 (no VECTOR): entries for a, g, b, c, j (LONGTEXT), p, bl.
MARIADB_1011_CHARSETS = bytes.fromhex(
    "18000000000001000263730001740009030fff0ffcfcfffefc0b2800040a00020404f70102fe0101010003072d3f082d2e3f3f0702"
    "000104140269640161016701620163016a0170016502626c0a010806050201780179080100"
)


@pytest.mark.parametrize(
    ("raw", "mariadb", "expected"),
    [(MYSQL_97_CHARSETS, False, {"a": 255, "g": None, "b": 8, "v": 63, "c": 255, "j": None, "p": None, "e": 8,
                                  "bl": 63}),
     (MARIADB_1011_CHARSETS, True, {"a": 45, "g": 63, "b": 8, "c": 45, "j": 46, "p": 63, "e": 8, "bl": 63})],
    ids=["mysql-9.7", "mariadb-10.11"],
)  # fmt: skip
def test_column_charsets_are_counted_as_each_server_logs_them(
    raw: bytes, mariadb: bool, expected: dict[str, int | None]
) -> None:
    # MySQL gives VECTOR a charset entry and GEOMETRY none; MariaDB the other way round. Counted
    # the wrong way, a utf8mb4 column was decoded as latin1, or the event was refused.
    table = decode_table_map(Reader(raw), 8, mariadb)
    assert {c.name: c.collation for c in table.columns if c.name != "id"} == expected


def test_optional_metadata_with_leftover_bytes_is_an_error() -> None:
    optional = b"\x01\x02\x80\x00"  # SIGNEDNESS for one numeric column but two bytes
    with pytest.raises(FormatError, match="bitmap of 2 bytes for 1 columns"):
        decode_table_map(Reader(_table_map_body(bytes([3, 15]), b"\x40\x00", optional)), 8)


def test_char_longer_than_255_bytes_uses_the_hidden_length_bits() -> None:
    # CHAR(100) utf8mb4 = 400 bytes: real-type byte 0xEE carries length bits 8-9.
    table = decode_table_map(Reader(_table_map_body(bytes([254]), b"\xee\x90")), 8)
    assert table.columns[0].real_type == T.MYSQL_TYPE_STRING and table.columns[0].meta == 400


# -- JSON --------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)  # fmt: skip


@given(json_values, st.booleans())
@settings(max_examples=300)
def test_json_round_trip(value: object, large: bool) -> None:
    assert jsonb.parse(encode_json(value, large)) == value


def test_json_printing_matches_mysql() -> None:
    doc = {"b": [1, 2], "a": 1, "long key": 'x\n"y"', "n": None, "t": True, "f": 2.5, "e": 1e100}
    assert jsonb.to_text(jsonb.parse(encode_json(doc))) == (
        '{"a": 1, "b": [1, 2], "e": 1e100, "f": 2.5, "n": null, "t": true, "long key": "x\\n\\"y\\""}'
    )
    assert jsonb.to_text(jsonb.parse(b"")) == "null"


def test_json_opaque_values() -> None:
    decimal = bytes([0x0F, 246, 4, 4, 2]) + encode_decimal(Decimal("12.34"), 4, 2)
    assert jsonb.to_text(jsonb.parse(decimal)) == "12.34"
    packed = ((2024 * 13 + 2) << 5 | 29) << 17 | (13 << 12 | 14 << 6 | 15)
    datetime = bytes([0x0F, 12, 8]) + (packed << 24 | 500).to_bytes(8, "little")
    assert jsonb.to_text(jsonb.parse(datetime)) == '"2024-02-29 13:14:15.000500"'


def test_json_diffs_apply_to_the_before_document() -> None:
    before: jsonb.JsonValue = {"a": [1, 2, 3], "b": {"c": "x"}}
    diffs = (
        jsonb.JsonDiff(jsonb.DIFF_REPLACE, "$.b.c", "y"),
        jsonb.JsonDiff(jsonb.DIFF_INSERT, "$.a[1]", 9),
        jsonb.JsonDiff(jsonb.DIFF_REMOVE, "$.a[0]"),
        jsonb.JsonDiff(jsonb.DIFF_INSERT, '$."new key"', None),
    )
    assert jsonb.apply_diffs(before, diffs) == {"a": [9, 2, 3], "b": {"c": "y"}, "new key": None}


def test_json_too_deep_is_refused() -> None:
    doc: object = 1
    for _ in range(120):
        doc = [doc]
    with pytest.raises(FormatError, match="deeper"):
        jsonb.parse(encode_json(doc))


# Each text is what MySQL 9.7.4 printed for the double, asked as
#   SELECT CAST(JSON_ARRAY(CAST('<repr of the double>' AS DOUBLE)) AS CHAR)
# and each parses back to the same double. The binlog carries the double as 8 bytes after
# JSONB_DOUBLE; the test builds exactly those bytes.
MYSQL_97_JSON_DOUBLES = [
    (0.0, "0.0"),
    (-0.0, "-0.0"),
    (1.0, "1.0"),
    (2.0, "2.0"),
    (-2.0, "-2.0"),
    (100.0, "100.0"),
    (123456789012345.0, "123456789012345.0"),  # 15 digits, integral: plain, ".0" appended
    (100000000000000.0, "100000000000000.0"),  # 1e14: the largest power of ten written plain
    (999999999999999.0, "999999999999999.0"),
    (1000000000000000.0, "1e15"),  # integral and 16 digits before the point: exponent form
    (-1000000000000000.0, "-1e15"),
    (2500000000000000.0, "2.5e15"),
    (9999999999999998.0, "9.999999999999998e15"),
    (9007199254740994.0, "9.007199254740994e15"),  # 2**53 + 2
    (1e16, "1e16"),
    (1e17, "1e17"),
    (1e22, "1e22"),
    (1e23, "1e23"),
    (1.2345678901234567e19, "1.2345678901234567e19"),
    (1e100, "1e100"),
    (1234567890123456.8, "1234567890123456.8"),  # 17 digits with a fraction: plain past 1e15
    (-1234567890123456.8, "-1234567890123456.8"),
    (123456789012345.67, "123456789012345.67"),
    (123456789012345.6, "123456789012345.6"),  # 16 digits
    (999999999999999.9, "999999999999999.9"),
    (0.1, "0.1"),
    (0.30000000000000004, "0.30000000000000004"),  # 17 digits
    (1 / 3, "0.3333333333333333"),  # 16 digits
    (4.35, "4.35"),
    (-0.5, "-0.5"),
    (0.000123, "0.000123"),
    (1e-5, "0.00001"),
    (1e-7, "0.0000001"),
    (1e-14, "0.00000000000001"),
    (1e-15, "0.000000000000001"),  # the smallest power of ten written plain
    (-1e-15, "-0.000000000000001"),
    (1.5e-15, "0.0000000000000015"),
    (1.2345678901234567e-14, "0.000000000000012345678901234567"),
    (9.999999999999999e-16, "9.999999999999999e-16"),  # just below 1e-15: exponent form
    (1e-16, "1e-16"),
    (1.5e-16, "1.5e-16"),
    (5.551115123125783e-17, "5.551115123125783e-17"),  # 0.1 + 0.2 - 0.3
    (1e-100, "1e-100"),
    (-1.5e-300, "-1.5e-300"),
    (2.2250738585072014e-308, "2.2250738585072014e-308"),  # smallest normal
    (5e-324, "5e-324"),  # smallest subnormal
    (-5e-324, "-5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e308"),  # largest double
    (-1.7976931348623157e308, "-1.7976931348623157e308"),
]


@pytest.mark.parametrize(("value", "text"), MYSQL_97_JSON_DOUBLES, ids=[t for _, t in MYSQL_97_JSON_DOUBLES])
def test_json_doubles_print_as_mysql_does(value: float, text: str) -> None:
    raw = bytes([jsonb.JSONB_DOUBLE]) + struct.pack("<d", value)
    assert jsonb.to_text(jsonb.parse(raw)) == text


def _random_doubles(count: int, seed: int) -> list[float]:
    """Decimal exponents -320..308 with 1 to 17 digits, and raw bit patterns, either sign."""
    rng = random.Random(seed)
    values: list[float] = []
    while len(values) < count:
        if rng.random() < 0.75:
            digits = str(rng.randrange(1, 10 ** rng.randint(1, 17)))
            value = float(f"{digits[0]}.{digits[1:]}0e{rng.randint(-320, 308)}")
        else:
            value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(value):
            values.append(-value if rng.random() < 0.5 else value)
    return values


def _boundary_doubles() -> list[float]:
    """Powers of ten where the notation switches, their neighbours, the extremes, the table above."""
    edges = [10.0**k for k in range(-17, 18)] + [5e-324, 2.2250738585072014e-308, 1.7976931348623157e308]
    near = [n for e in edges for n in (e, math.nextafter(e, 0), math.nextafter(e, math.inf)) if math.isfinite(n)]
    return near + [-n for n in near] + [v for v, _ in MYSQL_97_JSON_DOUBLES]


def _mysql_json_texts(cur: Any, values: list[float]) -> list[str]:
    """The server's JSON text of each double; repr round-trips, so the server gets each exactly."""
    cells = ", ".join(["CAST(%s AS DOUBLE)"] * len(values))
    cur.execute(f"SELECT CAST(JSON_ARRAY({cells}) AS CHAR)", [repr(v) for v in values])
    row = cur.fetchone()
    assert row is not None
    texts = str(row[0])[1:-1].split(", ")
    assert [float(t) for t in texts] == values  # and each text reads back as its double
    return texts


@pytest.mark.live
@pytest.mark.servers("mysql")
def test_json_doubles_print_as_the_live_server_does() -> None:
    values = _boundary_doubles() + _random_doubles(3000, seed=20240229)
    mismatches = []
    with live.connect().cursor() as cur:
        for start in range(0, len(values), 500):
            chunk = values[start : start + 500]
            for value, text in zip(chunk, _mysql_json_texts(cur, chunk), strict=True):
                if jsonb.double_text(value) != text:
                    mismatches.append((value, text, jsonb.double_text(value)))
    assert mismatches == [], f"{len(mismatches)} of {len(values)} differ (value, mysql, sluice): {mismatches[:10]}"


def test_signedness_bitmap_counts_year_on_mariadb_only() -> None:
    # MariaDB gives YEAR a SIGNEDNESS bit (seen on 10.11); MySQL does not.
    body = _table_map_body(bytes([13, 3]), b"", b"\x01\x01\x40")  # YEAR, INT; second bit set
    assert decode_table_map(Reader(body), 8, mariadb=True).columns[1].unsigned
    assert not decode_table_map(Reader(body), 8, mariadb=False).columns[1].unsigned


def test_rows_with_no_columns_present_do_not_loop_forever() -> None:
    # Found by tests/test_fuzz.py: an all-zero column bitmap made each row zero bytes long.
    decode = build_rows_decoder(_table([_col(0, T.MYSQL_TYPE_LONG)]), RowsKind.WRITE, (), ())
    with pytest.raises(FormatError, match="empty"):
        decode(b"\x00\x00", 0, 2)


# -- typed values: equal to what the Avro path makes of the text, or NotTyped ---------------


def _agrees(typed: Callable[[bytes], object], text: Callable[[bytes], Any], convert: Callable[[Any], object],
            raw: bytes) -> bool:  # fmt: skip
    """The typed value equals convert(text), or typed declines; False when typed is wrong.
    True only when it gave a value (so callers can require that valid encodings are typed)."""
    try:
        expected: object = convert(text(raw))
    except (ValueError, ArithmeticError):
        expected = ValueError
    try:
        value = typed(raw)
    except NotTyped:
        return False
    assert expected is not ValueError and value == expected, (raw.hex(), value, expected)
    return True


def _unscaled(scale: int) -> Callable[[Decimal], int]:
    def convert(value: Decimal) -> int:
        numerator, denominator = value.as_integer_ratio()
        unscaled, rest = divmod(numerator * int(10**scale), denominator)
        if rest:
            raise ValueError("more fraction digits than the scale")  # the Avro writer refuses it
        return unscaled

    return convert


@given(decimals())
@settings(max_examples=400)
def test_typed_decimals_are_the_unscaled_texts(case: tuple[Decimal, int, int]) -> None:
    value, precision, scale = case
    raw = encode_decimal(value, precision, scale)
    assert _agrees(decimal_unscaled_decoder(precision, scale), decimal_decoder(precision, scale),
                   _unscaled(scale), raw)  # fmt: skip


@given(st.integers(1, 65).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, min(30, p)))), st.binary())
def test_typed_decimals_of_any_bytes_never_disagree(shape: tuple[int, int], noise: bytes) -> None:
    precision, scale = shape
    raw = (noise * decimal_size(precision, scale))[: decimal_size(precision, scale)].ljust(
        decimal_size(precision, scale), b"\x80"
    )
    _agrees(decimal_unscaled_decoder(precision, scale), decimal_decoder(precision, scale), _unscaled(scale), raw)


_DATETIME = converter(Column("at", "datetime", ("6",)))
_TIMESTAMP = converter(Column("ts", "timestamp", ("6",)))
_DATE = converter(Column("day", "date"))


@given(
    st.integers(1, 9999), st.integers(1, 12), st.integers(1, 28), st.integers(0, 23), st.integers(0, 59),
    st.integers(0, 59), st.integers(0, 999999), st.integers(0, 6),
)  # fmt: skip
def test_typed_datetimes_are_their_texts_micros(
    y: int, mo: int, d: int, h: int, mi: int, s: int, micros: int, fsp: int
) -> None:
    raw = encode_datetime2(y, mo, d, h, mi, s, micros // 10 ** (6 - fsp) * 10 ** (6 - fsp), fsp)
    assert _agrees(datetime2_micros_decoder(fsp), datetime2_decoder(fsp), _DATETIME, raw)


@given(st.binary(min_size=8, max_size=8), st.integers(0, 6))
def test_typed_datetimes_of_any_bytes_never_disagree(noise: bytes, fsp: int) -> None:
    raw = noise[: 5 + frac_size(fsp)]
    _agrees(datetime2_micros_decoder(fsp), datetime2_decoder(fsp), _DATETIME, raw)


@given(st.integers(0, 2**32 - 1), st.integers(0, 999999), st.integers(0, 6))
def test_typed_timestamps_are_their_texts_micros(seconds: int, micros: int, fsp: int) -> None:
    stored = micros // 10 ** (6 - fsp) * 10 ** (6 - fsp)
    raw = encode_timestamp2(seconds, stored, fsp)
    assert _agrees(timestamp2_micros_decoder(fsp), timestamp2_decoder(fsp), _TIMESTAMP, raw)
    # The zero TIMESTAMP is second 0 with no fraction; MariaDB stores 1970-01-01 00:00:00.5 as
    # second 0 with one, an instant like any other.
    assert (timestamp2_micros_decoder(fsp)(raw) is None) == (seconds == 0 and stored == 0)
    assert (timestamp2_decoder(fsp)(raw) == "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")) == (
        seconds == 0 and stored == 0
    )


@given(st.binary(min_size=3, max_size=3))
def test_typed_dates_of_any_bytes_never_disagree(raw: bytes) -> None:
    _agrees(date_days, decode_date, _DATE, raw)


def test_typed_dates_of_real_days_and_zero_dates() -> None:
    assert date_days(encode_date(1970, 1, 2)) == 1 and date_days(encode_date(1969, 12, 31)) == -1
    assert date_days(encode_date(2024, 0, 6)) is None and date_days(encode_date(0, 0, 0)) is None
    with pytest.raises(NotTyped):
        date_days(encode_date(2023, 2, 29))  # no such day: the text path names the error


def test_a_decimal_s_text_is_what_its_decimal_prints() -> None:
    """Row images hold a DECIMAL's text (values.decimal_text_decoder), which the JSON and canal paths
    print as it is: it must be format(Decimal, "f") of the Decimal decoder's value, for every
    precision and scale, on encoded values and on any bytes (groups with too many digits)."""
    rng = random.Random(3)
    for precision in range(1, 66):
        for scale in range(min(precision, 30) + 1):
            width = decimal_size(precision, scale)
            for n in range(12):
                if n % 2:
                    raw = bytes(rng.randrange(256) for _ in range(width))
                else:
                    digits = "".join(rng.choice("0123456789") for _ in range(precision))
                    whole, fraction = digits[: precision - scale] or "0", digits[precision - scale :]
                    raw = encode_decimal(Decimal(rng.choice("-+") + whole + ("." + fraction if scale else "")),
                                         precision, scale)  # fmt: skip
                text = decimal_text_decoder(precision, scale)(raw)
                assert text == format(decimal_decoder(precision, scale)(raw), "f"), (precision, scale, raw.hex())
