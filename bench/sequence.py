"""What the benches share: the server they run against, and the table catchup.py and spark.py fill."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tests.support import live
from tests.support.live import fresh_database, numbers, services_toml, source_toml


def choose_server(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """`--server mariadb|mysql` (the services `make services` starts), made the active one."""
    parser.add_argument("--server", choices=list(live.SERVERS), default="mariadb", help="the source server")
    args = parser.parse_args()
    live.use(live.SERVERS[args.server])
    return args


TABLE = "CREATE TABLE {{db}}.{} (id INT PRIMARY KEY, k INT, c CHAR(60), amount DECIMAL(12,2), at DATETIME(6))"


def fresh_table(db: str, tables: tuple[str, ...] = ("t",)) -> None:
    """`db` dropped and created again, with its empty table `t` (or `tables`, each like it)."""
    fresh_database(db, *(TABLE.format(table) for table in tables))


def insert(cur: Any, db: str, first: int, last: int, at: str = "NOW(6)", table: str = "t") -> None:
    """Rows `first` to `last` of `table` (made as `fresh_table` makes `t`) in one statement; `at`:
    the SQL of the DATETIME column."""
    cur.execute(f"USE {db}")  # MariaDB's SEQUENCE engine's seq_M_to_N tables live in the current database
    n = f"(seq + {first - 1})"
    cur.execute(
        f"INSERT INTO {db}.{table} SELECT {n}, {n} % 1000, REPEAT('c', 60), {n} / 100, {at} "
        f"FROM {numbers(last - first + 1)}"
    )


def write_config(path: Path, name: str, server_id: int, db: str, schemas_dir: str) -> None:
    """A `sluice run` config file for the active server and the local services, capturing `db`."""
    path.write_text(
        f'name = "{name}"\n' + source_toml(server_id) + f"include = ['{db}\\..*']\n" + services_toml(name)
        + f'[avro]\nschemas_dir = "{schemas_dir}"\n'
    )  # fmt: skip
