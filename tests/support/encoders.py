"""Encoders of binlog value formats, written independently of the decoder, for round trips."""

from __future__ import annotations

import struct
from decimal import Decimal, localcontext

DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def encode_decimal(value: Decimal, precision: int, scale: int) -> bytes:
    """decimal2bin: base-10^9 groups, big-endian, sign bit flipped, negatives inverted."""
    with localcontext() as ctx:
        ctx.prec = 100  # the default 28 digits cannot hold DECIMAL(65,30)
        sign, digits, exponent = value.quantize(Decimal(1).scaleb(-scale)).as_tuple()
    text = "".join(map(str, digits)).rjust(scale + 1, "0")
    assert isinstance(exponent, int)
    int_text, frac_text = text[: len(text) - scale], text[len(text) - scale :] if scale else ""
    intg = precision - scale
    int_text = int_text.rjust(intg, "0")[-intg:] if intg else ""
    out = bytearray()
    lead = intg % 9
    if lead:
        out += int(int_text[:lead]).to_bytes(DIG2BYTES[lead], "big")
    for i in range(lead, intg, 9):
        out += int(int_text[i : i + 9]).to_bytes(4, "big")
    for i in range(0, scale - scale % 9, 9):
        out += int(frac_text[i : i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac_text[scale - scale % 9 :]).to_bytes(DIG2BYTES[scale % 9], "big")
    out[0] ^= 0x80
    if sign:
        out = bytearray(b ^ 0xFF for b in out)
    return bytes(out)


def _frac_bytes(micros: int, fsp: int) -> bytes:
    if fsp == 0:
        return b""
    if fsp <= 2:
        return bytes([micros // 10000])
    if fsp <= 4:
        return (micros // 100).to_bytes(2, "big")
    return micros.to_bytes(3, "big")


def encode_datetime2(y: int, mo: int, d: int, h: int, mi: int, s: int, micros: int, fsp: int) -> bytes:
    ymd = ((y * 13 + mo) << 5) | d
    hms = (h << 12) | (mi << 6) | s
    packed = ((ymd << 17) | hms) + 0x8000000000
    return packed.to_bytes(5, "big") + _frac_bytes(micros, fsp)


def encode_timestamp2(seconds: int, micros: int, fsp: int) -> bytes:
    return seconds.to_bytes(4, "big") + _frac_bytes(micros, fsp)


def _c_div(a: int, b: int) -> int:
    """C's integer division, which truncates toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def encode_time2(negative: bool, h: int, mi: int, s: int, micros: int, fsp: int) -> bytes:
    """TIME2 as my_time_packed_to_binary writes it (C shifts floor, C remainders truncate)."""
    packed = (((h << 12) | (mi << 6) | s) << 24) + micros
    if negative:
        packed = -packed
    if fsp >= 5:
        return (packed + 0x800000000000).to_bytes(6, "big")
    head = ((packed >> 24) + 0x800000).to_bytes(3, "big")
    frac = packed - _c_div(packed, 1 << 24) * (1 << 24)
    if fsp == 0:
        return head
    if fsp <= 2:
        return head + bytes([_c_div(frac, 10000) & 0xFF])
    return head + (_c_div(frac, 100) & 0xFFFF).to_bytes(2, "big")


def encode_date(y: int, mo: int, d: int) -> bytes:
    return ((y << 9) | (mo << 5) | d).to_bytes(3, "little")


# -- binary JSON -------------------------------------------------------------------------


def _varlen(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def encode_json(value: object, large: bool = False) -> bytes:
    """A document: type byte + value."""
    kind, body = _json_value(value, large)
    return bytes([kind]) + body


def _json_value(value: object, large: bool) -> tuple[int, bytes]:
    if value is None:
        return 0x04, b"\x00"
    if value is True:
        return 0x04, b"\x01"
    if value is False:
        return 0x04, b"\x02"
    if isinstance(value, int):
        if -(2**15) <= value < 2**15:
            return 0x05, struct.pack("<h", value)
        if -(2**31) <= value < 2**31:
            return 0x07, struct.pack("<i", value)
        if -(2**63) <= value < 2**63:
            return 0x09, struct.pack("<q", value)
        return 0x0A, struct.pack("<Q", value)
    if isinstance(value, float):
        return 0x0B, struct.pack("<d", value)
    if isinstance(value, str):
        raw = value.encode()
        return 0x0C, _varlen(len(raw)) + raw
    if isinstance(value, dict):
        ordered = sorted(value.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode()))
        return _container([(str(k), v) for k, v in ordered], True, large)
    if isinstance(value, list):
        return _container([(None, v) for v in value], False, large)
    raise TypeError(value)


def _inline(kind: int, large: bool) -> bool:
    return kind in (0x04, 0x05, 0x06) or (large and kind in (0x07, 0x08))


def _container(items: list[tuple[str | None, object]], is_object: bool, large: bool) -> tuple[int, bytes]:
    width = 4 if large else 2
    count = len(items)
    header = 2 * width
    key_entries = count * (width + 2) if is_object else 0
    value_entries = count * (1 + width)
    keys = b"".join(k.encode() for k, _ in items if k is not None)
    offset = header + key_entries + value_entries
    key_part = bytearray()
    for k, _ in items:
        if k is not None:
            key_part += offset.to_bytes(width, "little") + len(k.encode()).to_bytes(2, "little")
            offset += len(k.encode())
    value_part, data = bytearray(), bytearray()
    for _, v in items:
        kind, body = _json_value(v, large)
        if _inline(kind, large):
            value_part += bytes([kind]) + body.ljust(width, b"\0")
        else:
            value_part += bytes([kind]) + (offset + len(data)).to_bytes(width, "little")
            data += body
    total = header + len(key_part) + len(value_part) + len(keys) + len(data)
    body = count.to_bytes(width, "little") + total.to_bytes(width, "little") + key_part + value_part + keys + data
    kind = (0x01 if large else 0x00) if is_object else (0x03 if large else 0x02)
    return kind, bytes(body)
