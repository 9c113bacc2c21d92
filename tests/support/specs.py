"""Maxwell-style spec files: SQL statements, each followed by the flat messages it must produce.

Format (tests/specs/*.spec):
    -- comment
    INSERT INTO t VALUES (1, 'a');                  statements end with `;` at a line end
    -> {"type": "INSERT", "table": "t", "data": {"id": "1", "name": "a"}}

Each `->` line is one expected message, in stream order; its keys are compared with the
message's (`data` and `old` with the message's single row). A statement with no `->`
after it must produce nothing. Statements run in a fresh database `spec` (the default
database of the session), after the connector captured the schema.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPEC_DIR = Path(__file__).parents[1] / "specs"


@dataclass
class SpecStep:
    sql: str
    expected: list[dict[str, Any]] = field(default_factory=list)
    line: int = 0


def parse_spec(path: Path) -> list[SpecStep]:
    steps: list[SpecStep] = []
    pending: list[str] = []
    start = 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if not stripped or (stripped.startswith("--") and not pending):
            continue
        if stripped.startswith("->"):
            if not steps:
                raise AssertionError(f"{path.name}:{number}: an expectation before any statement")
            steps[-1].expected.append(json.loads(stripped[2:]))
            continue
        if not pending:
            start = number
        pending.append(line)
        if stripped.endswith(";"):
            steps.append(SpecStep("\n".join(pending).rstrip().rstrip(";"), line=start))
            pending = []
    if pending:
        raise AssertionError(f"{path.name}:{start}: statement without a closing ';'")
    return steps


def spec_files() -> list[Path]:
    return sorted(SPEC_DIR.glob("*.spec"))


_SERVERS = re.compile(r"^--\s*servers:\s*(.+)$", re.MULTILINE)


def spec_servers(path: Path, every: list[str]) -> list[str]:
    """The servers a spec file is for: a `-- servers: mariadb` line names them; else all."""
    m = _SERVERS.search(path.read_text(encoding="utf-8"))
    return [s.strip() for s in m[1].split(",")] if m else every


_REPEAT = re.compile(r"^@REPEAT\((.*),(\d+)\)$", re.DOTALL)


def _expand(value: Any) -> Any:
    """`"@REPEAT(text,n)"` stands for the text n times, as SQL's REPEAT() made it."""
    if isinstance(value, str) and (m := _REPEAT.match(value)):
        return m[1] * int(m[2])
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    return value


def differences(expected: dict[str, Any], message: dict[str, Any]) -> list[str]:
    """Expected keys whose values the message does not have."""
    problems = []
    for key, want in _expand(expected).items():
        got = message.get(key)
        if key in ("data", "old") and isinstance(got, list):
            got = got[0] if len(got) == 1 else got
        if isinstance(want, dict) and isinstance(got, dict) and key == "data" and set(want) < set(got):
            got = {k: got[k] for k in want}  # a subset of the columns was given
        if got != want:
            problems.append(f"{key}: expected {want!r}, got {got!r}")
    return problems
