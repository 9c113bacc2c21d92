"""A table whose columns are renamed while rows are written, phase by phase (the renames live
test and the Spark mirror's)."""

from __future__ import annotations

from tests.support.live import connect

RENAMED_TABLE = (
    "CREATE TABLE {db}.people (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, score INT NOT NULL, note TEXT)"
)


# Each statement starts a schema version; the rows of each phase are written with it.
RENAMES = [
    "ALTER TABLE people RENAME COLUMN name TO full_name",
    "ALTER TABLE people CHANGE COLUMN full_name display VARCHAR(40) NOT NULL, RENAME COLUMN id TO pid",
]


PHASE_ROWS = 40  # per phase


def write_phase(db: str, phase: int) -> None:
    """New rows (`n<id>`, a name that never changes), and updates of rows of every phase so far
    (their messages carry before images of the current version)."""
    with connect(db).cursor() as cur:
        first = phase * PHASE_ROWS + 1
        cur.executemany("INSERT INTO people VALUES (%s, %s, %s, NULL)",
                        [(i, f"n{i}", i % 5) for i in range(first, first + PHASE_ROWS)])  # fmt: skip
        cur.execute("UPDATE people SET note = %s WHERE score = %s", (f"phase {phase}", phase))


def names_on_server(db: str) -> dict[int, str]:
    with connect(db).cursor() as cur:
        cur.execute("SELECT pid, display FROM people")
        return {int(pid): str(display) for pid, display in cur.fetchall()}
