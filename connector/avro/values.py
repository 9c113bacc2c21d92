"""Column values: a flat message's rendered text -> the value its Avro type wants."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from decimal import Decimal
from functools import lru_cache
from typing import Any

from connector.schema.model import CHARACTER_TYPES, GEOMETRY_TYPES, Column

Converter = Callable[[str], Any]

_INTS = frozenset({"tinyint", "smallint", "mediumint", "int", "year", "bit"})
STRING_TYPES = CHARACTER_TYPES | {"json", "long"}  # Avro strings


_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


@lru_cache(maxsize=8192)
def _days(text: str) -> int | None:
    year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
    if not month or not day:
        return None  # a zero date, or one with a zero part: no calendar day
    return date(year, month, day).toordinal() - _EPOCH_ORDINAL


def _date(text: str) -> int | None:
    return _days(text[:10])


def _seconds_micros(text: str) -> int:
    """`HH:MM:SS[.f]` (hours may exceed 23) as microseconds."""
    hours, minutes, rest = text.split(":")
    seconds, _, fraction = rest.partition(".")
    micros = int((fraction + "000000")[:6]) if fraction else 0
    return ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1_000_000 + micros


def _time(text: str) -> int:
    return -_seconds_micros(text[1:]) if text.startswith("-") else _seconds_micros(text)


def _timestamp(text: str) -> int | None:
    days = _days(text[:10])
    return None if days is None else _at(days, text)


def _at(days: int, text: str) -> int:
    """Microseconds since the epoch of `days` at the time of day `text` gives after its date."""
    if len(text) < 19 or text[13] != ":" or text[16] != ":":
        return days * 86_400_000_000 + _seconds_micros(text[11:] or "00:00:00")
    # `YYYY-MM-DD HH:MM:SS[.f]`, what the binlog decoder and the server print: sliced, not split
    seconds = int(text[11:13]) * 3600 + int(text[14:16]) * 60 + int(text[17:19])
    micros = int((text[20:] + "00000")[:6]) if len(text) > 20 else 0
    return (days * 86_400 + seconds) * 1_000_000 + micros


# Before every real day: 0001-01-01, the first Python has, is day -719,162.
_ZERO_DAYS = -719_163


def zero_date_key(text: str, data_type: str) -> int:
    """A key's number for a DATE, DATETIME or TIMESTAMP with a zero part (`0000-00-00`, `2024-00-15`,
    what a server takes without NO_ZERO_DATE / NO_ZERO_IN_DATE). The value carries it as null; a
    key field has no null, so each such date gets its own day below every real one: distinct
    zero dates stay distinct keys, and none is a real date's."""
    year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
    days = _ZERO_DAYS - (year * 13 + month) * 32 - day
    return days if data_type == "date" else _at(days, text)


def _latin1(text: str) -> bytes:
    return text.encode("latin-1")  # binary values are rendered one character per byte


def _vector(text: str) -> list[float]:
    return [float(x) for x in text.strip("[]").split(",") if x]


def bit_width(col: Column) -> int:
    return int(col.params[0]) if col.params and col.params[0].isdigit() else 1  # BIT alone is BIT(1)


def converter(col: Column) -> Converter:
    kind = col.data_type
    if kind == "bit" and bit_width(col) == 64:
        return Decimal  # a decimal(20, 0), as BIGINT UNSIGNED (connector/avro/schemas.py)
    if kind in _INTS or (kind == "bigint" and not col.unsigned):
        return int
    if kind in ("float", "double"):
        return float
    if kind in ("decimal", "bigint"):  # BIGINT UNSIGNED is a decimal(20, 0)
        return Decimal
    table: dict[str, Converter] = {"date": _date, "time": _time, "datetime": _timestamp, "timestamp": _timestamp}
    if kind in table:
        return table[kind]
    if kind == "vector":
        return _vector
    if kind in STRING_TYPES:
        return str
    if kind in GEOMETRY_TYPES:
        return bytes.fromhex
    return _latin1
