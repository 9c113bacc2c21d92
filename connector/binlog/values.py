"""Pure decoders of single column values from their binlog row encoding.

Each returns the value and how many bytes it used, or is a fixed-width function of a
slice whose width the row codec already knows. Layouts follow mysql-server's
`my_time.cc` (packed temporal formats) and `decimal.cc` (bin2decimal).
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Callable
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from connector.errors import FormatError
from connector.native_spec import DIG2BYTES

_DIG2BYTES = DIG2BYTES  # the compiled transcoder's too (connector/csrc/spec.h)


def decimal_size(precision: int, scale: int) -> int:
    intg = precision - scale
    return (intg // 9) * 4 + _DIG2BYTES[intg % 9] + (scale // 9) * 4 + _DIG2BYTES[scale % 9]


# A DECIMAL column holds at most 65 digits; a DECIMAL an expression yields (inside a JSON
# document, as an opaque value) up to DECIMAL_MAX_POSSIBLE_PRECISION, 81 (include/decimal.h).
# Its scale is at most 30 on MySQL (DECIMAL_MAX_SCALE), 38 on MariaDB (its include/decimal.h).
COLUMN_MAX_PRECISION = 65
EXPRESSION_MAX_PRECISION = 81
MAX_SCALE = 38


def decode_decimal(raw: bytes, precision: int, scale: int, max_precision: int = COLUMN_MAX_PRECISION) -> Decimal:
    """bin2decimal: a sign-flipped, big-endian, base-10^9 packed decimal."""
    return decimal_decoder(precision, scale, max_precision)(raw)


@functools.cache
def decimal_decoder(
    precision: int, scale: int, max_precision: int = COLUMN_MAX_PRECISION
) -> Callable[[bytes], Decimal]:
    """A decoder specialised for one DECIMAL(precision, scale): one int.from_bytes, then shifts.

    The stored form (decimal.cc, decimal2bin) is big-endian groups of 9 digits in 4 bytes,
    with a shorter leading group of the integer part and a shorter trailing group of the
    fraction; the sign bit is flipped and negative numbers have every bit inverted. Read
    as one integer, each group is a fixed shift and mask, so the text is one `%` format.
    """
    return _decimal_compiled(precision, scale, max_precision, "_dec")


@functools.cache
def decimal_text_decoder(precision: int, scale: int) -> Callable[[bytes], str]:
    """`decimal_decoder`'s text, as `format(value, "f")` prints its Decimal: the row images' value
    (rendered as it is: flat._decimal), which the Avro path reads as a Decimal (avro/values)."""
    return _decimal_compiled(precision, scale, COLUMN_MAX_PRECISION, "")


def _decimal_compiled(precision: int, scale: int, max_precision: int, wrap: str) -> Callable[[bytes], Any]:
    if not 0 < precision <= max_precision or scale > precision or scale > MAX_SCALE:
        raise FormatError(f"DECIMAL({precision},{scale}) is out of range")
    intg = precision - scale
    sign_bit, groups = _decimal_groups(intg, scale)
    fields = [f"x >> {shift} & {mask}" for shift, mask, _ in groups]
    int_groups = (intg % 9 > 0) + intg // 9
    int_fmt = "".join("%d" if k == 0 and intg % 9 else "%09d" for k in range(int_groups))
    frac_fmt = "%09d" * (scale // 9) + ("%0" + str(scale % 9) + "d" if scale % 9 else "")
    head = (
        "def decode(raw):\n"
        "    x = _ifb(raw, 'big')\n"
        f"    if x & {sign_bit}:\n"
        f"        x ^= {sign_bit}; sign = ''\n"
        "    else:\n"
        f"        x ^= {(sign_bit << 1) - 1 ^ sign_bit}; sign = '-'\n"
    )
    if wrap:  # the Decimal of the groups' text
        text_fmt = "%s" + (int_fmt or "0") + ("." + frac_fmt if scale else "")
        source = head + f"    return {wrap}({text_fmt!r} % (sign, {', '.join(fields)}))\n"
    else:  # the text format(that Decimal, "f") prints: no leading zeros (a full first group has some)
        digits = f"({int_fmt!r} % ({', '.join(fields[:int_groups])},)).lstrip('0') or '0'" if int_groups else "'0'"
        fraction = f" + ({'.' + frac_fmt!r} % ({', '.join(fields[int_groups:])},))" if scale else ""
        source = head + f"    return sign + ({digits}){fraction}\n"
    namespace: dict[str, Any] = {"_ifb": int.from_bytes, "_dec": Decimal}
    exec(compile(source, f"<DECIMAL({precision},{scale}) decoder>", "exec"), namespace)  # noqa: S102
    decode: Callable[[bytes], Any] = namespace["decode"]
    return decode


def _decimal_groups(intg: int, scale: int) -> tuple[int, list[tuple[int, int, int]]]:
    """The sign bit of the stored form read as one integer, and the (shift, mask, digits) of each
    of its groups, most significant first."""
    sizes = [(_DIG2BYTES[intg % 9], intg % 9)] if intg % 9 else []
    sizes += [(4, 9)] * (intg // 9 + scale // 9)
    if scale % 9:
        sizes.append((_DIG2BYTES[scale % 9], scale % 9))
    shift = 8 * sum(nbytes for nbytes, _ in sizes)
    sign_bit, groups = 1 << (shift - 1), []
    for nbytes, digits in sizes:
        shift -= 8 * nbytes
        groups.append((shift, (1 << 8 * nbytes) - 1, digits))
    return sign_bit, groups


def frac_size(fsp: int) -> int:
    return (fsp + 1) // 2


def _fraction(micros: int, fsp: int) -> str:
    if fsp <= 0:
        return ""
    return "." + ("%06d" % micros)[:fsp]


def decode_date(raw: bytes) -> str:
    v = raw[0] | raw[1] << 8 | raw[2] << 16
    return "%04d-%02d-%02d" % (v >> 9, v >> 5 & 15, v & 31)


def decode_datetime2(raw: bytes, fsp: int) -> str:
    return datetime2_decoder(fsp)(raw)


def _fraction_layout(fsp: int) -> tuple[int, int, int, str]:
    """The stored fraction's bits, their mask, the divisor that drops an odd fsp's extra digit (odd
    fsp are stored with one more, zero, digit), and the fraction's text format."""
    frac_bits = 8 * frac_size(fsp)
    mask = (1 << frac_bits) - 1
    if fsp <= 0:
        return frac_bits, mask, 1, ""
    return frac_bits, mask, 10 if fsp % 2 else 1, ".%0" + str(fsp) + "d"


@functools.cache
def datetime2_decoder(fsp: int) -> Callable[[bytes], str]:
    """DATETIME2: 40-bit big-endian packed (sign, year*13+month, day, h, m, s), then the fraction.

    Specialised per fsp (my_datetime_packed_from_binary): the whole value is read as one
    integer and the fraction is its low 8*frac_size(fsp) bits.
    """
    frac_bits, mask, div, frac_fmt = _fraction_layout(fsp)
    fmt = "%s %02d:%02d:%02d" + frac_fmt

    def decode(raw: bytes) -> str:
        x = int.from_bytes(raw, "big")
        packed = (x >> frac_bits) - 0x8000000000
        hms = packed & 0x1FFFF
        return fmt % (_packed_day_text(packed >> 17), hms >> 12, hms >> 6 & 63, hms & 63, (x & mask) // div)

    def decode_whole(raw: bytes) -> str:  # fsp 0: no fraction
        packed = int.from_bytes(raw, "big") - 0x8000000000
        hms = packed & 0x1FFFF
        return fmt % (_packed_day_text(packed >> 17), hms >> 12, hms >> 6 & 63, hms & 63)

    return decode if frac_bits else decode_whole


@functools.lru_cache(maxsize=4096)
def _packed_day_text(ymd: int) -> str:
    """Rows of one batch mostly share a few dates: format each once."""
    ym = ymd >> 5
    return "%04d-%02d-%02d" % (ym // 13, ym % 13, ymd & 31)


def decode_timestamp2(raw: bytes, fsp: int) -> str:
    return timestamp2_decoder(fsp)(raw)


@functools.cache
def timestamp2_decoder(fsp: int) -> Callable[[bytes], str]:
    """TIMESTAMP2: big-endian seconds since the epoch (UTC), then the fraction."""
    frac_bits, mask, div, frac_fmt = _fraction_layout(fsp)

    def decode(raw: bytes) -> str:
        x = int.from_bytes(raw, "big")
        if not frac_bits:
            return _epoch_text(x)
        # The zero TIMESTAMP is second 0 with no fraction; MariaDB stores 1970-01-01 00:00:00.5
        # as second 0 with a fraction (MySQL's range starts at second 1).
        fraction = (x & mask) // div
        return (_day_text(x >> frac_bits) if fraction else _epoch_text(x >> frac_bits)) + frac_fmt % fraction

    return decode


def decode_timestamp(raw: bytes) -> str:
    return _epoch_text(int.from_bytes(raw[0:4], "little"))


def _epoch_text(seconds: int) -> str:
    return "0000-00-00 00:00:00" if seconds == 0 else _day_text(seconds)


def _day_text(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    return "%s %02d:%02d:%02d" % (_epoch_day_text(days), rest // 3600, rest // 60 % 60, rest % 60)


@functools.lru_cache(maxsize=4096)
def _epoch_day_text(days: int) -> str:
    day = _EPOCH + timedelta(days=days)
    return "%04d-%02d-%02d" % (day.year, day.month, day.day)


_EPOCH = date(1970, 1, 1)


def decode_time2(raw: bytes, fsp: int) -> str:
    """TIME2 (my_time_packed_from_binary): negative values borrow from the fraction."""
    intpart = int.from_bytes(raw[0:3], "big") - 0x800000
    if fsp <= 0:
        packed = intpart << 24
    elif fsp <= 2:
        frac = raw[3]
        if intpart < 0 and frac:
            intpart, frac = intpart + 1, frac - 0x100
        packed = (intpart << 24) + frac * 10000
    elif fsp <= 4:
        frac = int.from_bytes(raw[3:5], "big")
        if intpart < 0 and frac:
            intpart, frac = intpart + 1, frac - 0x10000
        packed = (intpart << 24) + frac * 100
    else:
        packed = int.from_bytes(raw[0:6], "big") - 0x800000000000
    return _time_text(packed, fsp)


@functools.cache
def time2_decoder(fsp: int) -> Callable[[bytes], str]:
    return functools.partial(decode_time2, fsp=fsp)


def _time_text(packed: int, fsp: int) -> str:
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    hms, micros = packed >> 24, packed & 0xFFFFFF
    return "%s%02d:%02d:%02d%s" % (
        sign, hms >> 12 & 0x3FF, hms >> 6 & 63, hms & 63, _fraction(micros, fsp),
    )  # fmt: skip


def decode_time(raw: bytes) -> str:
    """Old TIME: a signed 24-bit little-endian HHMMSS number."""
    v = int.from_bytes(raw[0:3], "little", signed=True)
    sign = "-" if v < 0 else ""
    v = abs(v)
    return "%s%02d:%02d:%02d" % (sign, v // 10000, v // 100 % 100, v % 100)


def decode_datetime(raw: bytes) -> str:
    """Old DATETIME: a 64-bit little-endian YYYYMMDDhhmmss number."""
    v = int.from_bytes(raw[0:8], "little")
    d, t = divmod(v, 1000000)
    return "%04d-%02d-%02d %02d:%02d:%02d" % (
        d // 10000, d // 100 % 100, d % 100, t // 10000, t // 100 % 100, t % 100,
    )  # fmt: skip


def decode_year(value: int) -> int:
    return 0 if value == 0 else 1900 + value


def decode_set(mask: int, labels: tuple[str, ...] | None) -> str | int:
    if labels is None:
        return mask
    return ",".join(label for i, label in enumerate(labels) if mask >> i & 1)


def decode_enum(index: int, labels: tuple[str, ...] | None) -> str | int:
    if labels is None:
        return index
    if index == 0:
        return ""  # the error value MySQL stores for an invalid ENUM
    if index > len(labels):
        raise FormatError(f"ENUM index {index} beyond its {len(labels)} labels")
    return labels[index - 1]


# MariaDB's column compression methods by the header's high nibble (sql/field_comp.cc).
_ZLIB_METHOD = 8


def decompress_column(raw: bytes) -> bytes:
    """A MariaDB COMPRESSED column's value as stored (sql/field_comp.cc): empty, or one header
    byte then the data. Header method 0: the data follows as is. Method 8 (zlib): bits 0-2 give
    how many big-endian bytes of original length follow, bit 3 set means a raw deflate stream
    (no zlib wrapper, column_compression_zlib_wrap=OFF), then the compressed data."""
    if not raw:
        return b""
    header = raw[0]
    method = header >> 4
    if method == 0:
        return raw[1:]
    if method != _ZLIB_METHOD:
        raise FormatError(f"compressed column value with unknown method {method} (header 0x{header:02x})")
    width = header & 0x07
    if len(raw) < 1 + width:
        raise FormatError(f"compressed column value of {len(raw)} bytes: its length field needs {width}")
    length = int.from_bytes(raw[1 : 1 + width], "big")
    inflater = zlib.decompressobj(-zlib.MAX_WBITS if header & 0x08 else zlib.MAX_WBITS)
    try:
        data = inflater.decompress(raw[1 + width :], length + 1)
    except zlib.error as exc:
        raise FormatError(f"compressed column value does not inflate: {exc}") from exc
    if len(data) != length or not inflater.eof:
        raise FormatError(f"compressed column value inflates to {len(data)} bytes, its header says {length}")
    return data


def decode_vector(raw: bytes) -> tuple[float, ...]:
    if len(raw) % 4:
        raise FormatError(f"VECTOR of {len(raw)} bytes is not a whole number of floats")
    return struct.unpack("<%df" % (len(raw) // 4), raw)


def packed_datetime_text(packed: int, kind: str) -> str:
    """A MySQL packed temporal longlong (as stored inside binary JSON) as text."""
    if kind == "time":
        return _time_text(packed, 6)
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    ymdhms, micros = packed >> 24, packed & 0xFFFFFF
    ymd, hms = ymdhms >> 17, ymdhms & 0x1FFFF
    ym = ymd >> 5
    date = "%s%04d-%02d-%02d" % (sign, ym // 13, ym % 13, ymd & 31)
    if kind == "date":
        return date
    return "%s %02d:%02d:%02d.%06d" % (date, hms >> 12, hms >> 6 & 63, hms & 63, micros)


# -- typed values: what the Avro path writes, without the text ------------------------------
#
# Each equals what connector/avro/values.py makes of the text the decoder above prints, and
# raises NotTyped wherever the two could differ (a date the calendar lacks, a fraction with
# more digits than its column, a year past 9999): the caller then decodes the text.


class NotTyped(Exception):  # a signal to decode the text instead, not an error
    """This value has no typed form that equals its text's."""


_EPOCH_ORDINAL = _EPOCH.toordinal()
_POW10 = (1, 10, 100, 1000, 10_000, 100_000, 1_000_000)


@functools.lru_cache(maxsize=8192)
def _epoch_days(year: int, month: int, day: int) -> int | None:
    if not month or not day:
        return None  # a zero date, or one with a zero part: no calendar day
    if not 1 <= year <= 9999:
        raise NotTyped
    try:
        return date(year, month, day).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        raise NotTyped from None


def date_days(raw: bytes) -> int | None:
    """DATE as days since 1970-01-01; None for zero dates."""
    v = raw[0] | raw[1] << 8 | raw[2] << 16
    return _epoch_days(v >> 9, v >> 5 & 15, v & 31)


def _fraction_micros(frac: int, fsp: int) -> int:
    if frac >= _POW10[fsp]:
        raise NotTyped  # printed with more digits than the column has
    return frac * _POW10[6 - fsp]


@functools.cache
def datetime2_micros_decoder(fsp: int) -> Callable[[bytes], int | None]:
    """DATETIME2 as microseconds since 1970-01-01 (read as UTC); None for zero dates."""
    frac_bits, mask, div, _ = _fraction_layout(fsp)

    def decode(raw: bytes) -> int | None:
        x = int.from_bytes(raw, "big")
        packed = (x >> frac_bits) - 0x8000000000
        if packed < 0:
            raise NotTyped
        ymd, hms = packed >> 17, packed & 0x1FFFF
        ym = ymd >> 5
        days = _epoch_days(ym // 13, ym % 13, ymd & 31)
        if days is None:
            return None
        seconds = days * 86400 + (hms >> 12) * 3600 + (hms >> 6 & 63) * 60 + (hms & 63)
        return seconds * 1_000_000 + (_fraction_micros((x & mask) // div, fsp) if frac_bits else 0)

    return decode


@functools.cache
def timestamp2_micros_decoder(fsp: int) -> Callable[[bytes], int | None]:
    """TIMESTAMP2 as microseconds since the epoch; None for the zero timestamp."""
    frac_bits, mask, div, _ = _fraction_layout(fsp)

    def decode(raw: bytes) -> int | None:
        x = int.from_bytes(raw, "big")
        seconds = x >> frac_bits
        micros = _fraction_micros((x & mask) // div, fsp) if frac_bits else 0
        if seconds == 0 and micros == 0:  # second 0 with a fraction is an instant (MariaDB), not the zero TIMESTAMP
            return None
        return seconds * 1_000_000 + micros

    return decode


@functools.cache
def decimal_unscaled_decoder(precision: int, scale: int) -> Callable[[bytes], int]:
    """DECIMAL(precision, scale) as its unscaled integer (value x 10^scale)."""
    decimal_decoder(precision, scale)  # the same range checks
    sign_bit, stored = _decimal_groups(precision - scale, scale)
    flip = (sign_bit << 1) - 1 ^ sign_bit
    groups = [(shift, mask, 10**digits) for shift, mask, digits in stored]

    def decode(raw: bytes) -> int:
        x = int.from_bytes(raw, "big")
        negative = not x & sign_bit
        x ^= flip if negative else sign_bit
        unscaled = 0
        for shift, mask, limit in groups:
            group = x >> shift & mask
            if group >= limit:
                raise NotTyped  # a group printed with more digits than it holds
            unscaled = unscaled * limit + group
        return -unscaled if negative else unscaled

    return decode
