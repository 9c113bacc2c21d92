"""TIMESTAMP literals of DDL as the instants the server stored.

A TIMESTAMP column's DEFAULT is an instant: the server reads the literal in the time_zone of
the session that ran the statement (Field_timestampf::store converts it with the session's
Time_zone, sql/field.cc, on both servers) and SHOW CREATE TABLE prints it back in the reading
session's zone. The QUERY event logs that zone (Q_TIME_ZONE_CODE) whenever the statement used
it. The schema history keeps every TIMESTAMP DEFAULT in UTC, the zone rows are decoded in
(connector/binlog/values.py), so its Avro default is the instant the server holds: the
capture reads SHOW CREATE TABLE in a `+00:00` session, and DDL from the binlog is converted
from its session's zone here.

Fixed offsets (`+09:00`) are converted here. `SYSTEM` and named zones (`Asia/Seoul`) follow
the server's own rules, asked of it through a `ZoneConverter` (CONVERT_TZ); without one (a
binlog read with no server), a named zone is read from the system's tz database and `SYSTEM`
is taken for UTC, with a warning.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

log = logging.getLogger("sluice.schema")

# (literal, zone) -> the literal in UTC as the server converts it; None when it cannot.
ZoneConverter = Callable[[str, str], str | None]

_OFFSET = re.compile(r"^([+-])(\d{1,2}):(\d{2})$")
# What the servers take as a DATETIME literal, in its delimited and its packed forms.
_DELIMITED = re.compile(r"^(\d{4})\D(\d{1,2})\D(\d{1,2})(?:[ T]+(\d{1,2})\D(\d{1,2})\D(\d{1,2})(?:\.(\d{1,6}))?)?$")
_PACKED = re.compile(r"^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(?:\.(\d{1,6}))?$")
_UTC_ZONES = frozenset({"+00:00", "-00:00", "+0:00", "-0:00"})


def timestamp_in_utc(literal: str, zone: str | None, convert: ZoneConverter | None = None) -> str:
    """A TIMESTAMP literal read in `zone` (None: already UTC) as `YYYY-MM-DD HH:MM:SS[.f]` in UTC.
    A literal that names no instant (the zero date, one with a zero part, a form not known here)
    is kept as it is."""
    parsed = _parse(literal.strip())
    if zone is None or zone in _UTC_ZONES or parsed is None:
        return literal
    moment, fraction = parsed
    offset = _OFFSET.match(zone)
    if offset is not None:
        sign = -1 if offset.group(1) == "-" else 1
        shift = timedelta(hours=int(offset.group(2)), minutes=int(offset.group(3)))
        return _text(moment - sign * shift, fraction)
    if convert is not None:
        converted = convert(_text(moment, ""), zone)
        if converted is not None:
            return converted[:19] + fraction
    return _text(_local(moment, zone), fraction)


def _parse(literal: str) -> tuple[datetime, str] | None:
    found = _DELIMITED.match(literal) or _PACKED.match(literal)
    if found is None:
        return None
    year, month, day, hour, minute, second = (int(p) if p else 0 for p in found.groups()[:6])
    try:
        moment = datetime(year, month, day, hour, minute, second)
    except ValueError:
        return None  # a zero date, or a zero part: no instant
    digits = found.group(7)
    return moment, "." + digits if digits else ""


def _local(moment: datetime, zone: str) -> datetime:
    """`moment` read in a named zone (or SYSTEM) without the server: the system's tz database."""
    name = "UTC" if zone.upper() == "SYSTEM" else zone
    if zone.upper() == "SYSTEM":
        log.warning("a TIMESTAMP DEFAULT was written in the server's SYSTEM time zone, which is unknown "
                    "without the server: read as UTC")  # fmt: skip
    try:
        info = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        log.warning("time zone %r of a TIMESTAMP DEFAULT is unknown here: its literal is read as UTC", zone)
        return moment
    return moment.replace(tzinfo=info).astimezone(ZoneInfo("UTC")).replace(tzinfo=None)


def _text(moment: datetime, fraction: str) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S") + fraction
