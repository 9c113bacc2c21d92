"""The table bench/catchup.py and bench/spark.py fill on the server, with MariaDB's SEQUENCE engine."""

from __future__ import annotations

from typing import Any

from tests.live import fresh_database


def fresh_table(db: str) -> None:
    """`db` dropped and created again, with its empty table `t`."""
    fresh_database(
        db, "CREATE TABLE {db}.t (id INT PRIMARY KEY, k INT, c CHAR(60), amount DECIMAL(12,2), at DATETIME(6))"
    )


def insert(cur: Any, db: str, first: int, last: int, at: str = "NOW(6)") -> None:
    """Rows `first` to `last` of `t` in one statement; `at`: the SQL of the DATETIME column."""
    cur.execute(f"USE {db}")  # the SEQUENCE engine's seq_M_to_N tables live in the current database
    cur.execute(
        f"INSERT INTO {db}.t SELECT seq, seq % 1000, REPEAT('c', 60), seq / 100, {at} FROM seq_{first}_to_{last}"
    )
