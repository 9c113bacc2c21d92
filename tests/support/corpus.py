"""Access to ../shared/binlog-corpus and the facts its README records about each file."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from connector.binlog.constants import RowsKind
from connector.binlog.events import Event, TransactionPayloadEvent
from connector.binlog.file import iter_file_events
from connector.binlog.rows import RowsEvent

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "binlog-corpus"

# README "Notes" markings under which a file may stop with a typed error.
ALLOWED_FAILURE_MARKS = ("EDITED", "TRUNCATED", "ENCRYPTED", "OLD")


@dataclass(frozen=True)
class CorpusFile:
    path: Path
    version: str
    checksum: str
    events: str
    notes: str

    @property
    def name(self) -> str:
        return str(self.path.relative_to(CORPUS))

    @property
    def may_fail(self) -> bool:
        return any(mark in self.notes or mark in self.version for mark in ALLOWED_FAILURE_MARKS) or (
            "BAD" in self.checksum
        )

    @property
    def event_count(self) -> int | None:
        """Events the README counted by walking lengths; None where the walk stopped."""
        if "walk stopped" in self.events or not self.events.strip():
            return None
        return sum(int(n) for n in re.findall(r"[A-Z0-9_]+:(\d+)", self.events))


@cache
def corpus_files() -> tuple[CorpusFile, ...]:
    rows = []
    for line in (CORPUS / "README.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) < 10 or not cells[1].startswith("`") or "Origin" in cells[2]:
            continue
        name = cells[1].strip("`")
        path = CORPUS / name
        if path.is_file() and not name.endswith((".md", ".result", ".txt")):
            rows.append(CorpusFile(path, cells[3], cells[5], cells[6], cells[8]))
    return tuple(rows)


def events_of(name: str, **kwargs: Any) -> list[Event]:
    return list(iter_file_events(str(CORPUS / name), **kwargs))


def flatten(events: list[Event]) -> list[Event]:
    """Top-level events with the events inside TRANSACTION_PAYLOADs spliced in."""
    out: list[Event] = []
    for event in events:
        out.append(event)
        if isinstance(event.body, TransactionPayloadEvent):
            out.extend(flatten(list(event.body.events)))
    return out


def rows_events(events: list[Event]) -> list[RowsEvent]:
    return [e.body for e in flatten(events) if isinstance(e.body, RowsEvent)]


def _verbose_value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "'" + value.decode("latin-1") + "'"
    if isinstance(value, str):
        return "'" + value + "'"
    return str(value)


def _verbose_image(columns: tuple[int, ...], image: tuple[Any, ...]) -> list[str]:
    return [f"###   @{i + 1}={_verbose_value(v)}" for i, v in zip(columns, image, strict=True)]


def verbose_lines(rows: list[RowsEvent]) -> list[str]:
    """The `###` lines `mysqlbinlog --verbose` prints for these rows events."""
    lines: list[str] = []
    for event in rows:
        assert event.table is not None
        target = f"`{event.table.schema}`.`{event.table.table}`"
        for before, after in event.rows:
            if event.kind == RowsKind.WRITE:
                assert after is not None
                lines += [f"### INSERT INTO {target}", "### SET", *_verbose_image(event.present, after)]
            elif event.kind == RowsKind.DELETE:
                assert before is not None
                lines += [f"### DELETE FROM {target}", "### WHERE", *_verbose_image(event.present, before)]
            else:
                assert before is not None and after is not None
                lines += [f"### UPDATE {target}", "### WHERE", *_verbose_image(event.present, before)]
                lines += ["### SET", *_verbose_image(event.present_after, after)]
    return lines


def verbose_rows(text: str) -> list[str]:
    """The `###` lines of mysqlbinlog output, without their trailing /* type */ comments."""
    lines = [line.rstrip("\r") for line in text.splitlines() if line.startswith("###")]
    return [re.sub(r"\s*/\*.*\*/\s*$", "", line) for line in lines]


def expected_verbose_sections(result: Path) -> dict[str, list[str]]:
    """`Verbose statements from : FILE` sections of a .result file, as `###` lines."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in result.read_text().splitlines():
        if line.startswith("Verbose statements from : "):
            current = sections.setdefault(line.split(": ", 1)[1].strip(), [])
        elif current is not None and line.startswith("###"):
            current.extend(verbose_rows(line))
    return sections


def mutate(rng: random.Random, body: bytes) -> bytes:
    """An event body with a few bytes changed, cut short, a run repeated, or a bit flipped."""
    data = bytearray(body)
    how = rng.randrange(4)
    if how == 0 or not data:
        for _ in range(rng.randrange(1, 4)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
    elif how == 1:
        del data[rng.randrange(len(data)) :]
    elif how == 2:
        at = rng.randrange(len(data))
        data[at:at] = data[at : at + rng.randrange(1, 16)]
    else:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)
