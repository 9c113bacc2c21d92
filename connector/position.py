"""Binlog positions and GTID sets: what Sluice resumes from.

A `Position` is always a transaction end (or a heartbeat between transactions): the
file, the offset of the next event, the GTID state after it, the server that wrote it
and the event time. MariaDB GTIDs are `domain-server-sequence` with one sequence per
domain; MySQL GTID sets are `uuid:interval[:interval]...` per source.
"""

from __future__ import annotations

import re
import struct
import uuid
from dataclasses import dataclass

from connector.errors import SluiceError


class PositionError(SluiceError):
    """A position or GTID set that cannot be read."""


@dataclass(frozen=True, slots=True)
class Position:
    file: str
    pos: int
    gtid_set: str = ""  # MariaDB `0-1-5,1-2-9` or MySQL `uuid:1-5`; "" when GTIDs are not tracked
    server_id: int = 0
    timestamp: int = 0  # event time, seconds
    snapshot: str = ""  # an unfinished initial snapshot's progress (connector/snapshot/state.py); "" when none

    def sort_key(self) -> tuple[str, int, int]:
        return binlog_sort_key(self.file, self.pos)

    def __str__(self) -> str:
        gtid = f" gtid {self.gtid_set}" if self.gtid_set else ""
        return f"{self.file}:{self.pos}{gtid}"


# A position as users write it: FILE:POS, or gtid:SET.
POSITION_TEXT = re.compile(r"^(?:gtid:.+|[^:\s]+:\d+)$")


def position_of_text(text: str) -> Position:
    """`FILE:POS` or `gtid:SET` (the file left empty: the GTID set says where)."""
    if not POSITION_TEXT.match(text):
        raise PositionError(f"{text!r} is not FILE:POS or gtid:SET")
    if text.startswith("gtid:"):
        return Position("", 4, text[5:])
    file, _, pos = text.rpartition(":")
    return Position(file, int(pos))


def binlog_sort_key(file: str, pos: int) -> tuple[str, int, int]:
    """Binlog files sort by base name, then by their numeric extension."""
    base, _, number = file.rpartition(".")
    return (base, int(number) if number.isdigit() else -1, pos)


# -- MariaDB --------------------------------------------------------------------------

_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


def parse_mariadb_gtid(text: str) -> tuple[int, int, int]:
    m = _MARIADB_GTID.match(text.strip())
    if m is None:
        raise PositionError(f"MariaDB GTID {text!r} is not domain-server-sequence")
    return int(m[1]), int(m[2]), int(m[3])


@dataclass(frozen=True, slots=True)
class MariadbGtidState:
    """The last GTID seen in each replication domain (what `gtid_slave_pos` holds)."""

    domains: tuple[tuple[int, int, int], ...] = ()  # sorted (domain, server, sequence)

    @classmethod
    def parse(cls, text: str) -> MariadbGtidState:
        gtids = [parse_mariadb_gtid(part) for part in text.split(",") if part.strip()]
        domains = {g[0]: g for g in gtids}
        if len(domains) != len(gtids):
            raise PositionError(f"MariaDB GTID state {text!r} names a domain twice")
        return cls(tuple(sorted(domains.values())))

    def with_gtid(self, gtid: str) -> MariadbGtidState:
        new = parse_mariadb_gtid(gtid)
        kept = [g for g in self.domains if g[0] != new[0]]
        return MariadbGtidState(tuple(sorted([*kept, new])))

    def __str__(self) -> str:
        return ",".join(f"{d}-{s}-{n}" for d, s, n in self.domains)


# -- MySQL ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MysqlGtidSet:
    """uuid -> sorted, merged [start, end] intervals (inclusive), as MySQL prints them."""

    sets: tuple[tuple[str, tuple[tuple[int, int], ...]], ...] = ()

    @classmethod
    def parse(cls, text: str) -> MysqlGtidSet:
        result: dict[str, list[tuple[int, int]]] = {}
        for part in re.sub(r"\s+", "", text).split(","):
            if not part:
                continue
            sid, *ranges = part.split(":")
            try:
                key = str(uuid.UUID(sid))
            except ValueError as exc:
                raise PositionError(f"GTID set {text!r}: {sid!r} is not a server UUID") from exc
            if not ranges:
                raise PositionError(f"GTID set {text!r}: {sid} has no transaction numbers")
            for r in ranges:
                result.setdefault(key, []).append(_interval(r, text))
        return cls(tuple(sorted((k, _merge(v)) for k, v in result.items())))

    def with_gtid(self, gtid: str) -> MysqlGtidSet:
        sid, _, gno = gtid.rpartition(":")
        key = str(uuid.UUID(sid))
        merged = dict(self.sets)
        merged[key] = _merge([*merged.get(key, ()), (int(gno), int(gno))])
        return MysqlGtidSet(tuple(sorted(merged.items())))

    def encode(self) -> bytes:
        """The binary form COM_BINLOG_DUMP_GTID carries (Gtid_set::encode): intervals end-exclusive."""
        out = [struct.pack("<Q", len(self.sets))]
        for sid, intervals in self.sets:
            out.append(uuid.UUID(sid).bytes + struct.pack("<Q", len(intervals)))
            out.extend(struct.pack("<qq", start, end + 1) for start, end in intervals)
        return b"".join(out)

    def __str__(self) -> str:
        return ",".join(
            sid + "".join(f":{a}" if a == b else f":{a}-{b}" for a, b in intervals) for sid, intervals in self.sets
        )


def _interval(text: str, whole: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", text)
    if m is None:
        raise PositionError(f"GTID set {whole!r}: interval {text!r} is not N or N-M")
    start, end = int(m[1]), int(m[2] or m[1])
    if start < 1 or end < start:
        raise PositionError(f"GTID set {whole!r}: interval {text!r} is empty or starts below 1")
    return start, end


def _merge(intervals: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return tuple(merged)
