"""Every column type of both servers for the live tests: its DDL, a generator of its values, how
an INSERT writes one, and the tables and workload made of them."""

from __future__ import annotations

import datetime as dt
import ipaddress
import random
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from tests.support.live import (
    connect,
    server,
)

Gen = Callable[[random.Random], Any]


def _text(rng: random.Random, n: int) -> str:
    alphabet = "abcXYZ 019_'\"\\\n\tßéü中文字💾🚀"
    return "".join(rng.choices(alphabet, k=rng.randint(0, n)))


def _latin1(rng: random.Random, n: int) -> str:
    return "".join(rng.choices("abc XYZ éèàçñü¿", k=rng.randint(0, n)))


def _bytes(rng: random.Random, n: int) -> bytes:
    return rng.randbytes(rng.randint(0, n))


def _datetime(rng: random.Random, fsp: int) -> str:
    moment = dt.datetime(1970, 1, 2) + dt.timedelta(seconds=rng.randrange(2_000_000_000))
    micros = rng.randrange(1_000_000) // 10 ** (6 - fsp) * 10 ** (6 - fsp)
    return (moment + dt.timedelta(microseconds=micros)).isoformat(" ")


def _time(rng: random.Random, fsp: int) -> str:
    seconds = rng.randrange(-838 * 3600 + 1, 838 * 3600)
    micros = rng.randrange(10**fsp) if fsp else 0
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    frac = f".{micros:0{fsp}d}" if fsp else ""
    return f"{sign}{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}{frac}"


def _decimal(rng: random.Random, precision: int, scale: int) -> Decimal:
    digits = "".join(rng.choice("0123456789") for _ in range(precision))
    sign = rng.choice(["", "-"])
    return Decimal(
        f"{sign}{digits[: precision - scale] or '0'}.{digits[precision - scale :]}" if scale else sign + digits
    )


# name, column type, generator of a non-NULL value
COLUMNS: list[tuple[str, str, Gen]] = [
    ("c_tiny", "TINYINT", lambda r: r.randint(-128, 127)),
    ("c_utiny", "TINYINT UNSIGNED", lambda r: r.randint(0, 255)),
    ("c_small", "SMALLINT", lambda r: r.randint(-32768, 32767)),
    ("c_usmall", "SMALLINT UNSIGNED", lambda r: r.randint(0, 65535)),
    ("c_medium", "MEDIUMINT", lambda r: r.randint(-(2**23), 2**23 - 1)),
    ("c_umedium", "MEDIUMINT UNSIGNED", lambda r: r.randint(0, 2**24 - 1)),
    ("c_int", "INT", lambda r: r.randint(-(2**31), 2**31 - 1)),
    ("c_uint", "INT UNSIGNED", lambda r: r.randint(0, 2**32 - 1)),
    ("c_big", "BIGINT", lambda r: r.randint(-(2**63), 2**63 - 1)),
    ("c_ubig", "BIGINT UNSIGNED", lambda r: r.randint(0, 2**64 - 1)),
    ("c_float", "FLOAT", lambda r: r.choice([0.0, 1.5, -3.25, r.uniform(-1e6, 1e6)])),
    ("c_double", "DOUBLE", lambda r: r.uniform(-1e300, 1e300)),
    ("c_dec", "DECIMAL(10,2)", lambda r: _decimal(r, 10, 2)),
    ("c_dec65", "DECIMAL(65,30)", lambda r: _decimal(r, 65, 30)),
    ("c_dec0", "DECIMAL(18,0)", lambda r: _decimal(r, 18, 0)),
    ("c_year", "YEAR", lambda r: r.randint(1901, 2155)),
    ("c_date", "DATE", lambda r: _datetime(r, 0)[:10]),
    ("c_time", "TIME", lambda r: _time(r, 0)),
    ("c_time6", "TIME(6)", lambda r: _time(r, 6)),
    ("c_time3", "TIME(3)", lambda r: _time(r, 3)),
    ("c_dt", "DATETIME", lambda r: _datetime(r, 0)),
    ("c_dt6", "DATETIME(6)", lambda r: _datetime(r, 6)),
    ("c_dt2", "DATETIME(2)", lambda r: _datetime(r, 2)),
    ("c_ts", "TIMESTAMP NULL", lambda r: _datetime(r, 0)),  # all within 1970-2033
    ("c_ts4", "TIMESTAMP(4) NULL", lambda r: _datetime(r, 4)),
    ("c_char", "CHAR(20)", lambda r: _text(r, 20).rstrip(" ")),
    ("c_varchar", "VARCHAR(300)", lambda r: _text(r, 300)),
    ("c_latin1", "VARCHAR(40) CHARACTER SET latin1", lambda r: _latin1(r, 40)),
    ("c_binary", "BINARY(8)", lambda r: _bytes(r, 8).ljust(8, b"\0")),
    ("c_varbinary", "VARBINARY(50)", lambda r: _bytes(r, 50)),
    ("c_tinyblob", "TINYBLOB", lambda r: _bytes(r, 255)),
    ("c_blob", "BLOB", lambda r: _bytes(r, 2000)),
    ("c_mediumblob", "MEDIUMBLOB", lambda r: _bytes(r, 70000)),
    ("c_longblob", "LONGBLOB", lambda r: _bytes(r, 300)),
    ("c_tinytext", "TINYTEXT", lambda r: _text(r, 60)),
    ("c_text", "TEXT", lambda r: _text(r, 3000)),
    ("c_mediumtext", "MEDIUMTEXT", lambda r: _text(r, 100)),
    ("c_longtext", "LONGTEXT", lambda r: _text(r, 100)),
    ("c_enum", "ENUM('a','bb','ccc','ü')", lambda r: r.choice(["a", "bb", "ccc", "ü"])),
    ("c_set", "SET('x','y','z','w')", lambda r: ",".join(s for s in "xyzw" if r.random() < 0.5)),
    ("c_bit1", "BIT(1)", lambda r: r.randint(0, 1)),
    ("c_bit13", "BIT(13)", lambda r: r.randint(0, 2**13 - 1)),
    ("c_bit64", "BIT(64)", lambda r: r.randint(0, 2**64 - 1)),
    ("c_json", "JSON", lambda r: '{"k": %d, "s": "%s"}' % (r.randint(0, 99), r.choice(["x", "中", "💾"]))),
    ("c_geom", "GEOMETRY", lambda r: f"POINT({r.randint(-90, 90)} {r.randint(-90, 90)})"),
]


GEOMETRY = {"c_geom"}


BITS = {"c_bit1", "c_bit13", "c_bit64"}


BINARY_COLUMNS = {"c_binary", "c_varbinary", "c_tinyblob", "c_blob", "c_mediumblob", "c_longblob"}


def placeholder(name: str) -> str:
    if name in GEOMETRY:
        return "ST_GeomFromText(%s)"
    if name in BITS:
        return "CAST(%s AS UNSIGNED)"
    return "%s"


def one_statement(cur: Any, insert: str, rows: list[list[Any]]) -> str:
    """`insert` (INSERT ... VALUES (placeholders)) for all `rows` as one statement. pymysql's
    executemany sends a statement a row once a placeholder is inside a function call (as
    `placeholder` writes them) and cuts its own multi-row INSERTs at 1 MB."""
    head, values = insert.split(" VALUES ", 1)
    return f"{head} VALUES " + ", ".join(cur.mogrify(values, row) for row in rows)


# Each server's own types, on top of every type the differential test writes.
BOTH: list[tuple[str, str, Any]] = [
    ("c_point", "POINT", lambda r: f"POINT({r.uniform(-90, 90)} {r.uniform(-90, 90)})"),
    ("c_fsmall", "FLOAT", lambda r: r.choice([0.1, 1e-7, 3.4e38, -2.5, r.uniform(-1, 1)])),
]


MARIADB_ONLY: list[tuple[str, str, Any]] = [
    ("c_uuid", "UUID", lambda r: str(uuid.UUID(int=r.getrandbits(128), version=r.choice([1, 4])))),
    ("c_inet6", "INET6", lambda r: str(ipaddress.IPv6Address(r.getrandbits(128)))),
    ("c_inet4", "INET4", lambda r: str(ipaddress.IPv4Address(r.getrandbits(32)))),
]


MYSQL_ONLY: list[tuple[str, str, Any]] = [
    ("c_vector", "VECTOR(3)", lambda r: "[" + ",".join(str(r.uniform(-1e3, 1e3)) for _ in range(3)) + "]"),
    ("c_srid", "POINT SRID 4326", lambda r: f"POINT({r.uniform(-90, 90)} {r.uniform(-180, 180)})"),
]


def typed_columns() -> list[tuple[str, str, Any]]:
    return COLUMNS + BOTH + (MARIADB_ONLY if server().mariadb else MYSQL_ONLY)


def typed_placeholder(name: str) -> str:
    special = {"c_point": "ST_GeomFromText(%s)", "c_srid": "ST_GeomFromText(%s, 4326)", "c_vector": "TO_VECTOR(%s)"}
    return special.get(name) or placeholder(name)


def create_typed_tables(cur: Any) -> str:
    """`t` (a key and every typed column) and `keyless`, in UTC; returns the INSERT of one `t` row."""
    cur.execute("SET time_zone = '+00:00'")
    columns = ", ".join(f"{n} {k}" for n, k, _ in typed_columns())
    cur.execute(f"CREATE TABLE t (id INT PRIMARY KEY, {columns}) CHARACTER SET utf8mb4")
    cur.execute("CREATE TABLE keyless (a INT, b VARCHAR(10))")
    names = ["id"] + [n for n, _, _ in typed_columns()]
    return f"INSERT INTO t ({', '.join(names)}) VALUES (%s, {', '.join(typed_placeholder(n) for n in names[1:])})"


TYPED_DB = "rowsavro"


def typed_workload(rng: random.Random) -> None:
    conn = connect(TYPED_DB)
    with conn.cursor() as cur:
        insert = create_typed_tables(cur)
        cur.execute("CREATE TABLE pair (a INT, b CHAR(3), v DOUBLE, PRIMARY KEY (b, a))")
        cur.execute("CREATE TABLE defaults (id BIGINT UNSIGNED PRIMARY KEY, x INT NULL DEFAULT 5, "
                    "y VARCHAR(5) NOT NULL DEFAULT 'a', z DATETIME NULL DEFAULT '2020-01-01 00:00:00', "
                    "d DECIMAL(6,3) DEFAULT 1.5)")  # fmt: skip
        for start in range(0, 60, 6):  # transactions of several rows events
            cur.execute("BEGIN")
            for key in range(start, start + 6):
                cur.execute(insert, [key] + [None if rng.random() < 0.15 else g(rng) for _, _, g in typed_columns()])
            cur.execute("COMMIT")
        cur.executemany("INSERT INTO keyless VALUES (%s, %s)", [(i % 4, rng.choice(["x", None])) for i in range(20)])
        cur.executemany("INSERT INTO pair VALUES (%s, %s, %s)", [(i, "k" + str(i % 3), i / 7) for i in range(12)])
        cur.executemany("INSERT INTO defaults (id) VALUES (%s)", [(2**64 - 1 - i,) for i in range(5)])
        cur.execute("SET SESSION sql_mode = ''")  # a zero datetime (MySQL's default mode refuses it)
        cur.execute("INSERT INTO defaults VALUES (1, NULL, 'zz', '0000-00-00 00:00:00', -0.001)")
        # zero dates in a key (legacy tables have them): null in the value, a key number each
        cur.execute("CREATE TABLE zeros (d DATE, at DATETIME(3), n INT, PRIMARY KEY (d, at))")
        cur.execute("INSERT INTO zeros VALUES ('0000-00-00', '0000-00-00 00:00:00', 1), "
                    "('2024-00-15', '0000-00-00 00:00:00', 2), ('2024-01-00', '2024-02-00 10:00:00.5', 3)")  # fmt: skip

        for key in rng.sample(range(60), 25):
            name, _, gen = rng.choice(typed_columns())
            value = None if rng.random() < 0.2 else gen(rng)
            cur.execute(f"UPDATE t SET {name} = {typed_placeholder(name)} WHERE id = %s", (value, key))
        cur.execute("UPDATE t SET c_int = c_int DIV 2 WHERE id < 20")  # one event, many rows
        cur.execute("UPDATE t SET id = id + 1000 WHERE id = 7")  # a key change
        cur.execute("UPDATE pair SET v = v * 2 WHERE a < 6")
        cur.execute("UPDATE pair SET a = a + 100 WHERE a = 3")  # a composite key change
        cur.execute("UPDATE keyless SET b = 'y' WHERE a = 1")
        cur.execute("UPDATE defaults SET x = x + 1, z = NULL")
        cur.execute("DELETE FROM t WHERE id % 5 = 0")
        cur.execute("DELETE FROM keyless WHERE a = 2")
        cur.execute("DELETE FROM pair WHERE a > 100")
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute("UPDATE t SET c_tiny = 1 WHERE id = 1")  # an after image of one column
        cur.execute("DELETE FROM t WHERE id = 2")  # a before image of the key only
    conn.close()
