"""Pure decoders of single column values from their binlog row encoding.

Each returns the value and how many bytes it used, or is a fixed-width function of a
slice whose width the row codec already knows. Layouts follow mysql-server's
`my_time.cc` (packed temporal formats) and `decimal.cc` (bin2decimal).
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from decimal import Decimal

from connector.errors import FormatError

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def decimal_size(precision: int, scale: int) -> int:
    intg = precision - scale
    return (intg // 9) * 4 + _DIG2BYTES[intg % 9] + (scale // 9) * 4 + _DIG2BYTES[scale % 9]


def decode_decimal(raw: bytes, precision: int, scale: int) -> Decimal:
    """bin2decimal: a sign-flipped, big-endian, base-10^9 packed decimal."""
    if not 0 < precision <= 65 or scale > precision or scale > 30:
        raise FormatError(f"DECIMAL({precision},{scale}) is out of range")
    negative = not raw[0] & 0x80
    mask = 0xFF if negative else 0
    data = bytes([raw[0] ^ 0x80 ^ mask]) + bytes(b ^ mask for b in raw[1:])
    intg = precision - scale
    lead = _DIG2BYTES[intg % 9]
    parts: list[str] = []
    pos = 0
    if lead:
        parts.append(str(int.from_bytes(data[0:lead], "big")))
        pos = lead
    for _ in range(intg // 9):
        parts.append("%09d" % int.from_bytes(data[pos : pos + 4], "big"))
        pos += 4
    int_text = "".join(parts).lstrip("0") or "0"
    frac = []
    for _ in range(scale // 9):
        frac.append("%09d" % int.from_bytes(data[pos : pos + 4], "big"))
        pos += 4
    tail = scale % 9
    if tail:
        frac.append("%0*d" % (tail, int.from_bytes(data[pos : pos + _DIG2BYTES[tail]], "big")))
    text = int_text + ("." + "".join(frac) if scale else "")
    return Decimal(("-" if negative else "") + text)


def frac_size(fsp: int) -> int:
    return (fsp + 1) // 2


def _frac_micros(raw: bytes, fsp: int) -> int:
    """Fractional seconds stored after a temporal value, as microseconds."""
    if fsp <= 0:
        return 0
    if fsp <= 2:
        return raw[0] * 10000
    if fsp <= 4:
        return int.from_bytes(raw[0:2], "big") * 100
    return int.from_bytes(raw[0:3], "big")


def _fraction(micros: int, fsp: int) -> str:
    if fsp <= 0:
        return ""
    return "." + ("%06d" % micros)[:fsp]


def decode_date(raw: bytes) -> str:
    v = raw[0] | raw[1] << 8 | raw[2] << 16
    return "%04d-%02d-%02d" % (v >> 9, v >> 5 & 15, v & 31)


def decode_datetime2(raw: bytes, fsp: int) -> str:
    """DATETIME2: 40-bit big-endian packed (sign, year*13+month, day, h, m, s) + fraction."""
    packed = int.from_bytes(raw[0:5], "big") - 0x8000000000
    ymd, hms = packed >> 17, packed & 0x1FFFF
    ym = ymd >> 5
    return "%04d-%02d-%02d %02d:%02d:%02d%s" % (
        ym // 13, ym % 13, ymd & 31, hms >> 12, hms >> 6 & 63, hms & 63,
        _fraction(_frac_micros(raw[5:], fsp), fsp),
    )  # fmt: skip


def decode_timestamp2(raw: bytes, fsp: int) -> str:
    seconds = int.from_bytes(raw[0:4], "big")
    return _timestamp_text(seconds, _frac_micros(raw[4:], fsp), fsp)


def decode_timestamp(raw: bytes) -> str:
    return _timestamp_text(int.from_bytes(raw[0:4], "little"), 0, 0)


def _timestamp_text(seconds: int, micros: int, fsp: int) -> str:
    if seconds == 0:
        return "0000-00-00 00:00:00" + _fraction(micros, fsp)
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + _fraction(micros, fsp)


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


_F32 = struct.Struct("<f")


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
