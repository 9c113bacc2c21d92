"""Text on the live servers: what the stream decodes is what the server converts it to.

For each charset the running server has, every code of its table (connector/binlog/charmaps/:
those the server shows as "?" among them) is written into a column of that charset, a few
thousand codes a row, and the stream (ChangeStream, the connector's own path, typed images as
the Avro path reads them) decodes each value to exactly the server's CONVERT(v USING utf8mb4).
The Unicode charsets' edges (surrogates, the last code point, past it) are written one by one,
where the server takes them: what it converts to UTF-8 arrives as it is, what has no UTF-8 form
arrives with U+FFFD, warned of once and counted. And the tables are checked against the server:
a sample of each charset's codes and of codes it refuses, stored as the generator stores them."""

from __future__ import annotations

import io
import json
import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import pymysql
import pytest

from connector.binlog import charmaps
from connector.binlog.charsets import charset_of, collation_id_of_charset, flavour, text_codec
from connector.binlog.rows import RowsEvent
from connector.commands.decode import decode_files
from connector.filters import TableFilter
from connector.items import Changes, Commit
from connector.position import Position
from connector.replica.server import master_position
from connector.schema.history import MemoryHistoryStore, rebuild
from connector.schema.tracker import SchemaTracker
from connector.snapshot.reader import ServerChunks
from connector.startup import prepare
from connector.stream import Backoff, ChangeStream, StreamOptions
from tests.support import live
from tests.support.live import LiveServer, connect, fresh_database, live_config

pytestmark = pytest.mark.live

DB = "charsets_live"
UNICODE = ("utf8mb3", "utf8mb4", "ucs2", "utf16", "utf16le", "utf32")
CODES_A_ROW = 50_000
# The edges of each Unicode charset: what a server may store and what no server should.
EDGES: dict[str, list[bytes]] = {
    "utf8mb3": [b"\xed\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xef\xbf\xbf", b"\xf0\x90\x80\x80"],
    "utf8mb4": [b"\xed\xa0\x80", b"\xed\xaf\xbf\xed\xbf\xbf", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xc0\x80"],
    "ucs2": [b"\xd8\x00", b"\xdf\xff", b"\xd8\x00\xdc\x00", b"\xff\xfe", b"\xff\xff"],
    "utf16": [b"\xd8\x00", b"\xd8\x00\xdc\x00", b"\xdb\xff\xdf\xff", b"\xdc\x00\xd8\x00", b"\xff\xff"],
    "utf16le": [b"\x00\xd8", b"\x00\xd8\x00\xdc", b"\xff\xdb\xff\xdf", b"\xff\xff"],
    "utf32": [b"\x00\x00\xd8\x00", b"\x00\x00\xdf\xff", b"\x00\x10\xff\xff", b"\x00\x11\x00\x00", b"\xff\xff\xff\xff"],
}


@dataclass
class Streamed:
    server: LiveServer
    tables: list[str]  # the charsets written whole
    history: MemoryHistoryStore  # the schema as the stream's tracker recorded it
    start: Position  # the binlog range the rows were written in (one file)
    end: Position
    values: dict[tuple[str, int], object] = field(default_factory=dict)  # (table, id) -> decoded value
    converted: dict[tuple[str, int], bytes | None] = field(default_factory=dict)  # the server's CONVERT
    replaced: dict[str, int] = field(default_factory=dict)  # table -> values counted as replaced
    warnings: list[str] = field(default_factory=list)


class _Lines(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


def _charsets(cur: pymysql.cursors.Cursor) -> list[str]:
    cur.execute("SELECT CHARACTER_SET_NAME FROM information_schema.CHARACTER_SETS")
    return sorted(str(r[0]) for r in cur.fetchall() if r[0] not in (*UNICODE, "binary"))


def _table(charset: str, mariadb: bool) -> charmaps.Charmap:
    table = charmaps.load(charset, flavour(mariadb))
    assert table is not None, charset
    return table


def _chunks(table: charmaps.Charmap) -> Iterator[bytes]:
    """Every code of the table, one after another, up to CODES_A_ROW of them at a time."""
    for block, _ in table.blocks:
        codes, width = charmaps.block_bytes(block), len(block)
        for at in range(0, len(codes), CODES_A_ROW * width):
            yield codes[at : at + CODES_A_ROW * width]


def _write(cur: pymysql.cursors.Cursor, charsets: list[str], mariadb: bool) -> list[tuple[str, int]]:
    """Every code of each charset, a row at a time; the Unicode edges one a row where the server
    takes them (strict: it refuses the others). The rows written."""
    written = []
    for charset in charsets:
        for row, chunk in enumerate(_chunks(_table(charset, mariadb))):
            cur.execute(f"INSERT INTO t_{charset} VALUES (%s, %s)", (row, chunk))
            written.append((f"t_{charset}", row))
    for charset, edges in EDGES.items():
        for row, value in enumerate(edges):
            try:
                cur.execute(f"INSERT INTO t_{charset} VALUES (%s, %s)", (row, value))
            except pymysql.err.MySQLError as exc:
                assert exc.args[0] == 1366, exc  # Incorrect string value: not stored, never in a binlog
            else:
                written.append((f"t_{charset}", row))
    return written


@pytest.fixture(scope="module", params=["MINIMAL", "FULL"])
def streamed(live_server: LiveServer, request: pytest.FixtureRequest) -> Iterator[Streamed]:
    """The rows written at binlog_row_metadata=MINIMAL (charsets from the schema history) and
    FULL (each column's collation in the TABLE_MAP), read back by the stream."""
    conn = connect()
    with conn.cursor() as cur:
        charsets = _charsets(cur)
    ddl = [f"CREATE TABLE {{db}}.t_{c} (id INT PRIMARY KEY, v MEDIUMTEXT CHARACTER SET {c})" for c in charsets]
    ddl += [f"CREATE TABLE {{db}}.t_{c} (id INT PRIMARY KEY, v VARCHAR(8) CHARACTER SET {c})" for c in UNICODE]
    fresh_database(DB, *ddl)
    with connect().cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")  # the rows in one file of their own, for `sluice decode`
    config = live_config([rf"{DB}\..*"], name="charsets_live")
    history = MemoryHistoryStore()
    prepared = prepare(config, history)
    conn = connect(DB)
    with conn.cursor() as cur, live.row_metadata(str(request.param)):
        cur.execute("SET SESSION sql_mode = 'STRICT_ALL_TABLES'")
        written = _write(cur, charsets, live_server.mariadb)
    end = master_position(conn)
    assert end.file == prepared.start.file
    out = Streamed(live_server, charsets, history, prepared.start, end)
    with conn.cursor() as cur:
        for table in sorted({t for t, _ in written}):
            cur.execute(f"SELECT id, CAST(CONVERT(v USING utf8mb4) AS BINARY) FROM {table}")
            out.converted.update({(table, int(i)): None if v is None else bytes(v) for i, v in cur.fetchall()})

    def replaced(db: str, table: str, column: str, count: int) -> None:
        out.replaced[table] = out.replaced.get(table, 0) + count

    # typed rows as `sluice run` reads them: the typed images decoded first
    stream = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(),
                          Backoff(first_s=0.05, max_s=1.0, attempts=200),
                          options=StreamOptions(typed_rows=True, on_text_replaced=replaced))  # fmt: skip
    handler = _Lines(out.warnings)
    logging.getLogger("sluice.stream").addHandler(handler)
    try:
        for item in stream.items(prepared.start, blocking=False):
            if isinstance(item, Changes) and item.batch is not None:
                _take(out, item.batch.rows)
            if isinstance(item, Commit) and item.position.sort_key() >= end.sort_key():
                break
    finally:
        logging.getLogger("sluice.stream").removeHandler(handler)
    assert sorted(out.values) == sorted(written)
    yield out


def _take(out: Streamed, rows: RowsEvent) -> None:
    assert rows.table is not None
    for _, after in rows.rows:
        assert after is not None
        out.values[(rows.table.table, after[0])] = after[1]


def test_every_code_streams_as_the_server_converts_it(streamed: Streamed) -> None:
    for charset in streamed.tables:
        rows = sorted(k for k in streamed.values if k[0] == f"t_{charset}")
        assert rows, charset
        for key in rows:
            expected = streamed.converted[key]
            assert expected is not None
            assert streamed.values[key] == expected.decode("utf-8"), (charset, key)
    assert not set(streamed.replaced) & {f"t_{c}" for c in streamed.tables}  # all exact: nothing replaced


def test_unicode_edges_stream_as_the_server_has_them(streamed: Streamed) -> None:
    """What the server stores and converts to UTF-8 arrives as that text; what it stores with no
    UTF-8 form (a surrogate: the server's CONVERT gives its three bytes, or NULL) with U+FFFD,
    each such column warned of once and every value counted."""
    stored: dict[str, list[bytes]] = {}
    replaced: dict[str, int] = {}
    for (table, row), value in sorted(streamed.values.items()):
        charset = table[2:]
        if charset not in EDGES:
            continue
        stored.setdefault(charset, []).append(EDGES[charset][row])
        text = _utf8(streamed.converted[(table, row)])
        if text is not None:
            assert value == text, (table, row)
        else:  # a surrogate: the server's CONVERT gives its three bytes (MariaDB) or NULL (MySQL)
            assert isinstance(value, str) and "\ufffd" in value, (table, row, value)
            replaced[table] = replaced.get(table, 0) + 1
    assert streamed.replaced == replaced
    for table in replaced:
        assert sum(f"{DB}.{table}.v:" in line for line in streamed.warnings) == 1, streamed.warnings
    # What each server takes, as found (deploy/charmaps.py's docstring, schemas/README.md).
    surrogates = {b"\xed\xa0\x80", b"\x00\x00\xd8\x00"}
    assert bool(surrogates & set(stored["utf8mb4"] + stored["utf32"])) == streamed.server.mariadb
    assert b"\xd8\x00" in stored["ucs2"] and b"\xd8\x00" not in stored["utf16"]  # both servers' ucs2 does
    assert b"\x00\x11\x00\x00" not in stored["utf32"] and b"\xf4\x90\x80\x80" not in stored["utf8mb4"]


def _utf8(converted: bytes | None) -> str | None:
    """The server's CONVERT(.. USING utf8mb4) as text; None where it is none (NULL, or not UTF-8)."""
    try:
        return None if converted is None else converted.decode("utf-8")
    except UnicodeDecodeError:
        return None


def test_every_collation_id_of_the_server_is_known() -> None:
    with connect().cursor() as cur:
        cur.execute("SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS WHERE ID IS NOT NULL")
        rows = cur.fetchall()
    assert rows and {int(i): charset_of(int(i)) for i, _ in rows} == {int(i): str(c) for i, c in rows}


def _sample(charset: str, mariadb: bool, rng: random.Random) -> tuple[dict[bytes, str], list[bytes]]:
    """Codes of the table (each block's first and last, and a few hundred more) with the text
    Sluice decodes them to (its table's: tests/test_charsets.py), and codes it does not hold."""
    table = _table(charset, mariadb)
    codec = text_codec(collation_id_of_charset(charset) or 0, mariadb)
    assert codec is not None
    picked: dict[bytes, str] = {}
    for block, _ in table.blocks:
        size = charmaps.block_size(block)
        for place in {0, size - 1, *(rng.randrange(size) for _ in range(400 // len(table.blocks)))}:
            code = charmaps.code_at(block, place)
            picked[code] = code.decode(codec)
    foreign = []
    for candidate in [bytes([b]) for b in range(256)] + [rng.randbytes(2) for _ in range(600)]:
        try:
            candidate.decode(codec)
        except UnicodeDecodeError:
            foreign.append(candidate)
    return picked, foreign[:300]


def test_the_tables_are_the_running_server_s(live_server: LiveServer) -> None:
    """A sample of each charset, stored as deploy/charmaps.py stores its candidates (INSERT IGNORE,
    which keeps a value whole exactly when strict mode takes it: checked on a refused code)."""
    rng = random.Random(37)
    conn = connect()
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")  # a sample's scratch table: nothing to stream
        cur.execute("SET SESSION sql_mode = 'STRICT_ALL_TABLES'")
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
        cur.execute(f"USE {DB}")
        for charset in _charsets(cur):
            picked, foreign = _sample(charset, live_server.mariadb, rng)
            cur.execute("DROP TABLE IF EXISTS sample")
            cur.execute(f"CREATE TABLE sample (code VARBINARY(8) NOT NULL, v VARCHAR(8) CHARACTER SET {charset})")
            values = ",".join(["(%s, %s)"] * (len(picked) + len(foreign)))
            cur.execute(f"INSERT IGNORE INTO sample VALUES {values}", [c for x in [*picked, *foreign] for c in (x, x)])
            cur.execute("SELECT code, CAST(CONVERT(v USING utf8mb4) AS BINARY) FROM sample "
                        "WHERE CAST(v AS BINARY) = code")  # fmt: skip
            kept = {bytes(code): bytes(text).decode("utf-8") for code, text in cur.fetchall()}
            assert kept == picked, charset
            if foreign:  # refused (1366 Incorrect string value; MySQL's ascii: 1406 Data too long)
                with pytest.raises(pymysql.err.MySQLError) as refused:
                    cur.execute("INSERT INTO sample VALUES (%s, %s)", (foreign[0], foreign[0]))
                assert refused.value.args[0] in (1366, 1406), refused.value
        cur.execute("DROP TABLE IF EXISTS sample")


def test_sluice_decode_prints_every_code_as_the_server_converts_it(streamed: Streamed) -> None:
    """The same rows through `sluice decode` (flat messages, the text canal-json carries; the
    compiled renderer where it takes a column), its columns named from the history: every value
    the server's CONVERT, U+FFFD where the stream replaced one."""
    tracker = SchemaTracker(MemoryHistoryStore(), TableFilter.of([rf"{DB}\..*"], None))
    tracker.schema = rebuild(streamed.history.load(), streamed.start)
    tracker.seeded_at = streamed.start
    out = io.StringIO()
    decode_files([str(streamed.server.binlog_dir / streamed.start.file)], out, streamed.start.pos, streamed.end.pos,
                 tracker)  # fmt: skip
    printed = {}
    for line in out.getvalue().split("\n")[:-1]:  # not splitlines(): U+2028 and the like are text
        message = json.loads(line)
        if message["type"] == "INSERT" and message["database"] == DB:
            for row in message["data"]:
                printed[(message["table"], int(row["id"]))] = row["v"]
    assert sorted(printed) == sorted(streamed.values)
    for key, text in printed.items():
        assert text == streamed.values[key], key


def test_the_snapshot_reads_every_code_as_the_stream_decodes_it(streamed: Streamed) -> None:
    """The same rows read as a snapshot reads them (ServerChunks: a text column's stored bytes,
    decoded by the server's table): the stream's text, value for value, U+FFFD where the stream
    replaced one, said once a column and counted; no read stops on a value."""
    schema = rebuild(streamed.history.load(), streamed.end)
    chunks = ServerChunks(live.source_settings())
    counted: dict[str, int] = {}
    chunks.on_text_replaced = lambda db, table, column, count: counted.update({table: counted.get(table, 0) + count})
    read: dict[tuple[str, int], object] = {}
    try:
        chunks.open(streamed.end)
        for (database, name), table in sorted(schema.tables.items()):
            if database == DB:
                for data, _ in chunks.rows(table, None, None):
                    read[(name, int(str(data["id"])))] = data["v"]
    finally:
        chunks.close()
    assert read == streamed.values
    assert counted == streamed.replaced
