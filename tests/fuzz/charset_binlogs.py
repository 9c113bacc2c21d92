"""Binlog files of text in every compiled charset, for the fuzzer's production-path cases.

The shared corpus (../shared/binlog-corpus) holds other projects' files, whose text columns are
utf8 or latin1; the code tables and wide forms the compiled code reads (gbk, big5, sjis, euckr,
ujis, eucjpms, gb18030, utf16, utf16le, utf32, ucs2, single-byte tables) were reached only by the
boundary target's direct calls. These files, one a server, are what the project's own servers
write for a table of such columns: its CREATE TABLE, rows in one statement and alone, an UPDATE
and a DELETE, as the test servers log them (their binlog_row_metadata; MINIMAL on MySQL 9.7).
tests/fuzz/rig.py reads them beside the corpus.

Made, not edited (against `make services`' servers):
    python -m tests.fuzz.charset_binlogs
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.live import SERVERS, connect, current_binlog, use

OUT = Path(__file__).parent / "binlogs"
DB = "fuzzcharsets"
# (column, values): characters of every width of each charset, the codes its table shows as "?"
# or reads otherwise than Python's codec, JSON escapes.
COLUMNS: list[tuple[str, list[object]]] = [
    ("gk VARCHAR(12) CHARACTER SET gbk", ["中文字符", b"x\xa1\x40y", '"\\\n']),
    ("b5 VARCHAR(12) CHARACTER SET big5", ["繁體中文", b"\xa1\x5a\xa1\x40", ""]),
    ("sj VARCHAR(12) CHARACTER SET sjis", ["日本語", b"\x81\x5f\x82\xa0", "ｶﾀｶﾅ"]),
    ("kr VARCHAR(12) CHARACTER SET euckr", ["한국어", "x", None]),
    ("uj VARCHAR(12) CHARACTER SET ujis", ["日本語", "丂", "ｶﾅ"]),
    ("ej VARCHAR(12) CHARACTER SET eucjpms", ["①②", "丂\\", ""]),
    ("u16 VARCHAR(12) CHARACTER SET utf16", ["a😀中", "\ue000", ""]),
    ("u16le VARCHAR(12) CHARACTER SET utf16le", ["🚀 ok", "é", None]),
    ("u32 VARCHAR(12) CHARACTER SET utf32", ["💾x", "\uffff", ""]),
    ("u2 CHAR(4) CHARACTER SET ucs2", ["中文", "\ue000", ""]),
    ("l1 VARCHAR(12) CHARACTER SET latin1", ["café", "ÿ", ""]),
    ("w1 VARCHAR(12) CHARACTER SET cp1251", ["Дом", "мир", None]),
]
MYSQL_COLUMNS: list[tuple[str, list[object]]] = [  # MariaDB has no gb18030
    ("g18 VARCHAR(12) CHARACTER SET gb18030", ["中文", "€\u0080😀", b"\x84\x31\xa5\x30"]),
]


def write(name: str) -> Path:
    """One server's file: the table made and written in a binlog file of its own, copied to OUT."""
    server = SERVERS[name]
    use(server)
    columns = COLUMNS + ([] if server.mariadb else MYSQL_COLUMNS)
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute("FLUSH BINARY LOGS")
        file, _ = current_binlog(conn)
        cur.execute(f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, {', '.join(c for c, _ in columns)})")
        insert = f"INSERT INTO {DB}.t VALUES (%s{', %s' * len(columns)})"
        rows = [(k, *(values[(k + i) % len(values)] for i, (_, values) in enumerate(columns))) for k in range(6)]
        cur.executemany(insert, rows[:3])  # one statement of three rows
        for row in rows[3:]:
            cur.execute(insert, row)
        cur.execute(f"UPDATE {DB}.t SET {columns[0][0].split()[0]} = 'x' WHERE id < 2")
        cur.execute(f"DELETE FROM {DB}.t WHERE id = 5")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute(f"DROP DATABASE {DB}")
    conn.close()
    OUT.mkdir(exist_ok=True)
    target = OUT / f"charsets-{name}.bin"
    shutil.copyfile(server.binlog_dir / file, target)
    return target


if __name__ == "__main__":
    for name in SERVERS:
        print(write(name))
