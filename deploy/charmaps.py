"""Write connector/binlog/charmaps/: each charset as live servers store and convert it.

    python deploy/charmaps.py --port 3306 --port 3307 --out connector/binlog/charmaps

For every character set the server has but the Unicode ones (whose text is their code point:
tests/test_charsets_live.py probes their edges), it stores candidate codes into a column of the
charset, through the check every value from a binary string meets there (MySQL's sql/field.cc
field_well_formed_copy_nchars, MariaDB's sql/sql_string.cc String_copier::well_formed_copy:
strict sql_mode refuses a value it stops in, INSERT IGNORE keeps what came before, so a code is
kept whole exactly when the server stores it) and reads back, for each code kept,
`CONVERT(v USING utf8mb4)`. The candidates:
  - every byte;
  - every two bytes whose first is no one-byte code;
  - for charsets of three-byte characters (ujis, eucjpms: EUC, whose multi-byte characters are
    of bytes 0x80-0xff), every three bytes of 80-ff whose first starts no shorter code;
  - for gb18030, its four-byte form (81-fe 30-39 81-fe 30-39, ten codes a row), and each code
    one byte past an edge of it.
Each is one INSERT ... SELECT from a table of the 256 bytes and one SELECT: MariaDB 10.11's
charsets take about 15 s, MySQL 9.7's about 30 s (gb18030's 1.6 million codes half of it).

Nothing is written to the binlog (sql_log_bin = 0), and the scratch database is dropped. With
two servers, a charset both have alike is one file, `<charset>.txt`; where they differ, and
with one server, `<charset>.<flavour>.txt`.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pymysql
from pymysql.cursors import Cursor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connector.binlog.charmaps import Charmap, block_codes, blocks_of, render, runs_of

UNICODE = frozenset({"utf8mb3", "utf8mb4", "ucs2", "utf16", "utf16le", "utf32", "binary"})
DB = "sluice_charmaps"
# gb18030's four-byte form (GB 18030-2005; MySQL's strings/ctype-gb18030.cc: is_mb_odd, is_mb_even_4).
GB18030_FOUR = ((0x81, 0xFE), (0x30, 0x39), (0x81, 0xFE), (0x30, 0x39))

Codes = dict[bytes, str | None]  # every code stored -> its text (None: the server shows "?")


@dataclass(frozen=True, slots=True)
class Server:
    flavour: str  # "mariadb" or "mysql"
    version: str
    port: int
    charsets: dict[str, int]  # name -> its longest character's bytes


def connect(host: str, port: int, user: str, password: str) -> pymysql.connections.Connection:
    conn = pymysql.connect(host=host, port=port, user=user, password=password, autocommit=True, charset="utf8mb4")
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")  # scratch tables: nothing for replicas or CDC
        cur.execute("SET SESSION sql_mode = 'STRICT_ALL_TABLES'")
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"USE {DB}")
        cur.execute("CREATE TABLE byte (n INT PRIMARY KEY)")
        cur.execute("INSERT INTO byte VALUES " + ",".join(f"({n})" for n in range(256)))  # noqa: S608
    return conn


def server_of(conn: pymysql.connections.Connection, port: int) -> Server:
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        version = str(cur.fetchone()[0])  # type: ignore[index]
        cur.execute("SELECT CHARACTER_SET_NAME, MAXLEN FROM information_schema.CHARACTER_SETS")
        charsets = {str(name): int(maxlen) for name, maxlen in cur.fetchall()}
    flavour = "mariadb" if "mariadb" in version.lower() else "mysql"
    return Server(flavour, version.split("-", maxsplit=1)[0], port, charsets)


def stored(cur: Cursor, charset: str, select: str) -> Codes:
    """Each value of `select` (a column `code`) stored into a column of the charset: those kept
    whole, each with the text the server converts it to."""
    cur.execute("DROP TABLE IF EXISTS probe")
    cur.execute(f"CREATE TABLE probe (code VARBINARY(64) NOT NULL, v VARCHAR(64) CHARACTER SET {charset})")
    cur.execute(f"INSERT IGNORE INTO probe SELECT code, code FROM ({select}) AS candidates")  # noqa: S608
    cur.execute("SELECT code, CAST(CONVERT(v USING utf8mb4) AS BINARY) FROM probe WHERE CAST(v AS BINARY) = code")
    out: Codes = {}
    for code, text in cur.fetchall():
        converted = bytes(text).decode("utf-8")
        out[bytes(code)] = None if converted == "?" and code != b"?" else converted
    return out


def _bytes(*aliases: str) -> str:
    return "CONCAT(" + ", ".join(f"CHAR({a}.n)" for a in aliases) + ")"


def _from(width: int) -> str:
    """A FROM clause of the byte table once for each byte of a code: a, b, c, d."""
    return "FROM " + ", ".join(f"byte {a}" for a in "abcd"[:width])


def probe(conn: pymysql.connections.Connection, charset: str, maxlen: int) -> Codes:
    with conn.cursor() as cur:
        codes = stored(cur, charset, f"SELECT {_bytes('a')} AS code {_from(1)}")
        singles = [b for b in range(256) if bytes((b,)) in codes]
        leads = ",".join(str(b) for b in range(256) if b not in singles)
        if not leads:
            return codes
        codes |= stored(cur, charset, f"SELECT {_bytes('a', 'b')} AS code {_from(2)} WHERE a.n IN ({leads})")
        if maxlen == 3:
            codes |= _three(cur, charset, codes)
        if charset == "gb18030":
            codes |= _four(cur, charset)
    return codes


def _three(cur: Cursor, charset: str, shorter: Codes) -> Codes:
    starts = {code[0] for code in shorter}
    leads = ",".join(str(b) for b in range(0x80, 256) if b not in starts)
    where = f"a.n IN ({leads}) AND b.n >= 128 AND c.n >= 128"
    return stored(cur, charset, f"SELECT {_bytes('a', 'b', 'c')} AS code {_from(3)} WHERE {where}")


def _four(cur: Cursor, charset: str) -> Codes:
    """gb18030's four-byte form ten codes a row (its last byte's ten values, kept whole or not
    at all: a row not kept is then stored code by code), and each code one byte past an edge
    of the form, the other bytes at an edge of theirs."""
    near = []
    for i, (lo, hi) in enumerate(GB18030_FOUR):
        for edge in (lo - 1, hi + 1):
            where = [f"{a}.n IN ({r[0]}, {r[1]})" if j != i else f"{a}.n = {edge}"
                     for j, (a, r) in enumerate(zip("abcd", GB18030_FOUR))]  # fmt: skip
            near.append(f"SELECT {_bytes('a', 'b', 'c', 'd')} AS code {_from(4)} WHERE {' AND '.join(where)}")
    codes = stored(cur, charset, " UNION ALL ".join(near))
    (a_lo, a_hi), (b_lo, b_hi), (c_lo, c_hi), (d_lo, d_hi) = GB18030_FOUR
    tens = ", ".join(f"CHAR(a.n), CHAR(b.n), CHAR(c.n), CHAR({d})" for d in range(d_lo, d_hi + 1))
    space = f"a.n BETWEEN {a_lo} AND {a_hi} AND b.n BETWEEN {b_lo} AND {b_hi} AND c.n BETWEEN {c_lo} AND {c_hi}"
    rows = stored(cur, charset, f"SELECT CONCAT({tens}) AS code {_from(3)} WHERE {space}")
    alone = [row[k : k + 4] for row, text in rows.items() if text is None or len(text) != len(row) // 4
             for k in range(0, len(row), 4)]  # fmt: skip
    for row, text in rows.items():
        if text is not None and len(text) == len(row) // 4:
            codes.update({row[4 * k : 4 * k + 4]: None if char == "?" else char for k, char in enumerate(text)})
    kept = {row[:3] for row in rows}
    for prefix in itertools.product(range(a_lo, a_hi + 1), range(b_lo, b_hi + 1), range(c_lo, c_hi + 1)):
        if bytes(prefix) not in kept:
            alone += [bytes((*prefix, d)) for d in range(d_lo, d_hi + 1)]
    if alone:
        codes |= stored(cur, charset, " UNION ALL ".join(f"SELECT X'{code.hex()}' AS code" for code in alone))
    return codes


def charmap_of(charset: str, codes: Codes) -> Charmap:
    blocks = []
    for width in sorted({len(code) for code in codes}):
        for block in blocks_of({code for code in codes if len(code) == width}):
            blocks.append((block, runs_of([(code, codes[code]) for code in block_codes(block)])))
    blocks.sort(key=lambda pair: bytes(values[0] for values in pair[0]))
    return Charmap(charset, tuple(blocks))


def header(charset: str, servers: list[Server], command: str) -> str:
    made = " and ".join(f"{'MariaDB' if s.flavour == 'mariadb' else 'MySQL'} {s.version} (port {s.port})"
                        for s in servers)  # fmt: skip
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    return (
        f"{charset}: every code a {charset} column stores (strict sql_mode) and its CONVERT(.. USING utf8mb4),\n"
        f"as {made} gave them on {when}.\nMade by: {command}\n"
        "The format: connector/binlog/charmaps/__init__.py. Made, not edited: run the command again."
    )


Made = dict[str, dict[str, tuple[Server, Charmap]]]  # charset -> flavour -> (server, its charmap)


def write(out: Path, made: Made, command: str, alone: bool) -> None:
    """The files of each charset: one where every server agrees, one per flavour where not."""
    out.mkdir(parents=True, exist_ok=True)
    for charset, by_flavour in sorted(made.items()):
        maps = list(by_flavour.values())
        if not alone:
            for stale in out.glob(f"{charset}.*txt"):
                stale.unlink()
        if not alone and len(maps) > 1 and all(m.blocks == maps[0][1].blocks for _, m in maps):
            (out / f"{charset}.txt").write_text(render(maps[0][1], header(charset, [s for s, _ in maps], command)))
            continue
        for flavour, (server, charmap) in by_flavour.items():
            (out / f"{charset}.{flavour}.txt").write_text(render(charmap, header(charset, [server], command)))


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n", maxsplit=1)[0])
    args.add_argument("--host", default="127.0.0.1")
    args.add_argument("--port", type=int, action="append", required=True, help="a server's port (repeatable)")
    args.add_argument("--user", default="root")
    args.add_argument("--password-file", type=Path, help="the user's password, in a file (default: none)")
    args.add_argument("--out", type=Path, required=True, help="the directory the files go to")
    args.add_argument("--charset", action="append", help="only this charset (repeatable)")
    opts = args.parse_args(argv)
    password = opts.password_file.read_text().strip() if opts.password_file else ""
    command = "python deploy/charmaps.py " + " ".join(f"--port {p}" for p in opts.port) + f" --out {opts.out}"
    made: Made = {}
    for port in opts.port:
        conn = connect(opts.host, port, opts.user, password)
        try:
            server = server_of(conn, port)
            for charset, maxlen in sorted(server.charsets.items()):
                if charset in UNICODE or (opts.charset and charset not in opts.charset):
                    continue
                started = time.monotonic()
                codes = probe(conn, charset, maxlen)
                made.setdefault(charset, {})[server.flavour] = (server, charmap_of(charset, codes))
                print(f"{server.flavour} {charset}: {len(codes)} codes in {time.monotonic() - started:.1f} s")
        finally:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {DB}")
            conn.close()
    write(opts.out, made, command, alone=len(opts.port) == 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
