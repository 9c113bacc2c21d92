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
from functools import lru_cache

from connector.errors import PositionError


class Cursor:
    """The binlog file a stream is reading, with one owner.

    The parser, the schema tracker and the message builder name the file in errors and in
    `source.file`; each reads it here, and a ROTATE moves it once, for all of them."""

    __slots__ = ("file",)

    def __init__(self, file: str = "") -> None:
        self.file = file

    @staticmethod
    def of(file: str | Cursor) -> Cursor:
        """The cursor given, or a cursor of its own on the file named."""
        return file if isinstance(file, Cursor) else Cursor(file)


@dataclass(frozen=True, slots=True)
class Position:
    file: str
    pos: int
    gtid_set: str = ""  # MariaDB `0-1-5,1-2-9` or MySQL `uuid:1-5`; "" when GTIDs are not tracked
    server_id: int = 0
    timestamp: int = 0  # event time, seconds
    snapshot: str = ""  # an unfinished initial snapshot's progress (connector/snapshot/state.py); "" when none
    # FILE:POS where the oldest XA transaction that is prepared but not yet decided begins: its
    # rows are not published until its XA COMMIT, so a restart reads them again from there.
    xa: str = ""

    def sort_key(self) -> tuple[str, int, int]:
        return binlog_sort_key(self.file, self.pos)

    def xa_start(self) -> Position | None:
        return position_of_text(self.xa) if self.xa else None

    def __str__(self) -> str:
        gtid = f" gtid {self.gtid_set}" if self.gtid_set else ""
        xa = f" (prepared XA from {self.xa})" if self.xa else ""
        return f"{self.file}:{self.pos}{gtid}{xa}"


# A position as users write it: FILE:POS, or gtid:SET.
POSITION_TEXT = re.compile(r"^(?:gtid:.+|[^:\s]+:\d+)$")


def position_of_text(text: str) -> Position:
    """`FILE:POS` or `gtid:SET` (the file left empty: the GTID set says where)."""
    if not POSITION_TEXT.match(text):
        raise PositionError(f"{text!r} is not FILE:POS or gtid:SET")
    if text.startswith("gtid:"):
        gtid_state(text[5:])  # refused now, not at the first dump, when it is neither form
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

    def covers(self, other: MariadbGtidState) -> bool:
        """Whether this state is at or past `other` in each of its domains."""
        mine = {d: n for d, _, n in self.domains}
        return all(mine.get(d, -1) >= n for d, _, n in other.domains)

    def contains(self, gtid: str) -> bool:
        """In a strict-mode stream, a domain's state covers every sequence number up to it."""
        domain, _, seq = parse_mariadb_gtid(gtid)
        return any(d == domain and n >= seq for d, _, n in self.domains)

    def __str__(self) -> str:
        return ",".join(f"{d}-{s}-{n}" for d, s, n in self.domains)


# -- MySQL ----------------------------------------------------------------------------


# A GTID tag (MySQL 8.3+, `SET gtid_next = 'AUTOMATIC:tag'`): letters, digits and
# underscores, at most 32, not starting with a digit; MySQL keeps them lower case.
_TAG = re.compile(r"^[a-z_][a-z0-9_]{0,31}$")
_TAGGED_FORMAT = 1  # Gtid_set::encode's format byte when any GTID carries a tag


def _sid(text: str, whole: str) -> str:
    sid = _uuid_text(text)
    if sid is None:
        raise PositionError(f"GTID set {whole!r}: {text!r} is not a server UUID")
    return sid


@lru_cache(maxsize=1024)
def _uuid_text(text: str) -> str | None:
    """A server UUID as MySQL prints it; every transaction's GTID names one of a few."""
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None


def _tag(text: str, whole: str) -> str:
    tag = text.lower()
    if not _TAG.match(tag):
        raise PositionError(f"GTID set {whole!r}: {text!r} is neither N, N-M nor a tag")
    return tag


@dataclass(frozen=True, slots=True)
class MysqlGtidSet:
    """(uuid, tag) -> sorted, merged [start, end] intervals (inclusive), as MySQL prints them.

    Text: `uuid:1-5:tag_a:1-3:7,uuid2:9`: a tag applies to the intervals after it (MySQL 8.3+)."""

    sets: tuple[tuple[tuple[str, str], tuple[tuple[int, int], ...]], ...] = ()

    @classmethod
    def parse(cls, text: str) -> MysqlGtidSet:
        result: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for part in re.sub(r"\s+", "", text).split(","):
            if not part:
                continue
            head, *items = part.split(":")
            sid, tag, counted = _sid(head, text), "", False
            for item in items:
                if item[:1].isdigit():
                    result.setdefault((sid, tag), []).append(_interval(item, text))
                    counted = True
                else:
                    tag, counted = _tag(item, text), False
            if not counted:
                raise PositionError(f"GTID set {text!r}: {part} has no transaction numbers")
        return cls(tuple(sorted((k, _merge(v)) for k, v in result.items())))

    @staticmethod
    def split(gtid: str) -> tuple[tuple[str, str], int]:
        """`uuid:N` or `uuid:tag:N` -> ((uuid, tag), N)."""
        parts = gtid.split(":")
        if len(parts) not in (2, 3) or not parts[-1].isdigit():
            raise PositionError(f"GTID {gtid!r} is not uuid:N or uuid:tag:N")
        tag = _tag(parts[1], gtid) if len(parts) == 3 else ""
        return (_sid(parts[0], gtid), tag), int(parts[-1])

    def with_gtid(self, gtid: str) -> MysqlGtidSet:
        key, gno = self.split(gtid)
        return self._with(key, gno, gno)

    def with_interval(self, sid: str, first: int, last: int) -> MysqlGtidSet:
        """With the untagged GTIDs sid:first to sid:last (`sid` as MySQL prints it)."""
        return self._with((sid, ""), first, last)

    def _with(self, key: tuple[str, str], first: int, last: int) -> MysqlGtidSet:
        sets = self.sets
        for n, (k, intervals) in enumerate(sets):
            if k == key:
                if intervals and intervals[-1][1] + 1 == first:  # the server's next numbers: the last interval grows
                    grown = (*intervals[:-1], (intervals[-1][0], last))
                    return MysqlGtidSet((*sets[:n], (key, grown), *sets[n + 1 :]))
                break
        return self.union(MysqlGtidSet(((key, ((first, last),)),)))

    def contains(self, gtid: str) -> bool:
        key, gno = self.split(gtid)
        return any(a <= gno <= b for a, b in dict(self.sets).get(key, ()))

    def issubset(self, other: MysqlGtidSet) -> bool:
        return self.union(other).sets == MysqlGtidSet().union(other).sets

    def union(self, other: MysqlGtidSet) -> MysqlGtidSet:
        merged = dict(self.sets)
        for key, intervals in other.sets:
            merged[key] = _merge([*merged.get(key, ()), *intervals])
        return MysqlGtidSet(tuple(sorted(merged.items())))

    def encode(self) -> bytes:
        """The binary form COM_BINLOG_DUMP_GTID carries (Gtid_set::encode): intervals end-exclusive;
        with any tag, the tagged format (format byte in the top and bottom byte, a tag per entry)."""
        tagged = any(tag for (_, tag), _ in self.sets)
        n = len(self.sets)
        head = (_TAGGED_FORMAT << 56) | (n << 8) | _TAGGED_FORMAT if tagged else n
        out = [struct.pack("<Q", head)]
        for (sid, tag), intervals in self.sets:
            out.append(uuid.UUID(sid).bytes)
            if tagged:
                out.append(varlen(len(tag)) + tag.encode("ascii"))
            out.append(struct.pack("<Q", len(intervals)))
            out.extend(struct.pack("<qq", start, end + 1) for start, end in intervals)
        return b"".join(out)

    def __str__(self) -> str:
        by_sid: dict[str, list[str]] = {}
        for (sid, tag), intervals in self.sets:
            items = by_sid.setdefault(sid, [])
            if tag:
                items.append(tag)
            items.extend(f"{a}" if a == b else f"{a}-{b}" for a, b in intervals)
        return ",".join(":".join([sid, *items]) for sid, items in by_sid.items())


def varlen(value: int) -> bytes:
    """mysql::serialization's variable-length unsigned integer (the reader's `varlen`): the
    count of trailing one bits in the first byte says how many bytes follow."""
    for extra in range(8):
        if value < 1 << (7 * (extra + 1)):
            raw = (value << (extra + 1)) | ((1 << extra) - 1)
            return raw.to_bytes(extra + 1, "little")
    return b"\xff" + value.to_bytes(8, "little")


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


def gtid_state(text: str) -> MariadbGtidState | MysqlGtidSet:
    """A GTID state as users write it: MariaDB's `domain-server-seq,...` or MySQL's set."""
    if _MARIADB_GTID.match(text.split(",", maxsplit=1)[0].strip()):
        return MariadbGtidState.parse(text)
    return MysqlGtidSet.parse(text)


def gtid_order(a: str, b: str) -> int | None:
    """How two GTID states of one source order: 1 when `a` holds all of `b` and more, -1 the other
    way, 0 when they are the same; None when neither holds the other, or they are not states of the
    same kind (then the GTIDs cannot say which is newer)."""
    try:
        first, second = gtid_state(a), gtid_state(b)
    except PositionError:
        return None
    if isinstance(first, MariadbGtidState) and isinstance(second, MariadbGtidState):
        ahead, behind = first.covers(second), second.covers(first)
    elif isinstance(first, MysqlGtidSet) and isinstance(second, MysqlGtidSet):
        ahead, behind = second.issubset(first), first.issubset(second)
    else:
        return None
    return 0 if ahead and behind else 1 if ahead else -1 if behind else None


def newer(a: Position, b: Position) -> tuple[Position, str]:
    """The newer of two saved positions, and by what: their GTID states where both carry one and
    one holds the other (binlog file names differ between servers after a failover, and a position
    in a file says nothing of another server's), else their binlog file and offset."""
    order = gtid_order(a.gtid_set, b.gtid_set) if a.gtid_set and b.gtid_set else None
    if order:
        return (a if order > 0 else b), "GTID state"
    return (a if a.sort_key() >= b.sort_key() else b), "binlog position"
