"""MariaDB's COMPRESSED columns: TABLE_MAP types 140/141 and their compressed values."""

from __future__ import annotations

import io
import json
import zlib

import pytest

from connector.binlog.constants import ColumnType as T
from connector.binlog.constants import RowsKind
from connector.binlog.reader import Reader
from connector.binlog.rowcodec import build_rows_decoder
from connector.binlog.tablemap import decode_table_map
from connector.binlog.values import decompress_column
from connector.commands.decode import decode_files
from connector.errors import FormatError
from connector.filters import TableFilter
from connector.schema.capture import capture
from tests.support import live

# Captured from MariaDB 10.11.19 (binlog_row_metadata=FULL, column_compression_threshold=4) after
#   CREATE TABLE cz.t (id INT PRIMARY KEY, a VARCHAR(100) COMPRESSED CHARACTER SET utf8mb4, b BLOB COMPRESSED);
#   INSERT INTO cz.t VALUES (1, REPEAT('ab', 20), 'xyz'), (2, '', NULL);
# Before, the TABLE_MAP stopped the stream: "used 0 bytes but metadata_length says 3".
TABLE_MAP = bytes.fromhex("090100000000010002637a0001740003038d8c039101020601010003022d3f040702696401610162080100")
WRITE_ROWS = bytes.fromhex("09010000000001000307f801000000090089284b4c4a240a020004000078797afc020000000000")


def test_table_map_reads_compressed_types_as_what_they_compress() -> None:
    table = decode_table_map(Reader(TABLE_MAP), 8, mariadb=True)
    a, b = table.columns[1], table.columns[2]
    assert (a.type_code, a.real_type, a.meta, a.compressed) == (141, T.MYSQL_TYPE_VARCHAR, 401, True)
    assert (b.type_code, b.real_type, b.meta, b.compressed) == (140, T.MYSQL_TYPE_BLOB, 2, True)
    assert (a.collation, b.collation) == (45, 63) and table.column_names == ("id", "a", "b")


def test_rows_inflate_compressed_values() -> None:
    table = decode_table_map(Reader(TABLE_MAP), 8, mariadb=True)
    decode = build_rows_decoder(table, RowsKind.WRITE, (0, 1, 2), ())
    start = 6 + 2 + 1 + 1  # a v1 rows event: table id, flags, column count, columns-present bitmap
    body = WRITE_ROWS[start:]
    assert decode(body, 0, len(body)) == [(None, (1, "ab" * 20, b"xyz")), (None, (2, "", None))]


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b"", b""),
        (b"\x00stored as is", b"stored as is"),
        (bytes([0x89, 40]) + zlib.compress(b"ab" * 20)[2:-4], b"ab" * 20),  # raw deflate (the default)
        (bytes([0x82, 1, 0]) + zlib.compress(b"z" * 256), b"z" * 256),  # zlib-wrapped, two length bytes
    ],
)
def test_decompress_column(raw: bytes, value: bytes) -> None:
    assert decompress_column(raw) == value


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"\x10abc", "unknown method 1"),
        (b"\x84\x00", "its length field needs 4"),
        (bytes([0x89, 41]) + zlib.compress(b"ab" * 20)[2:-4], "inflates to 40 bytes, its header says 41"),
        (bytes([0x89, 40]) + b"not deflate", "does not inflate"),
    ],
)
def test_malformed_compressed_values_are_format_errors(raw: bytes, error: str) -> None:
    with pytest.raises(FormatError, match=error):
        decompress_column(raw)


@pytest.mark.live
@pytest.mark.servers("mariadb")
def test_sluice_decode_reads_compressed_columns_of_a_binlog_file() -> None:
    """`sluice decode` on a MariaDB binlog file with COMPRESSED columns (it stopped at their TABLE_MAP)."""
    conn = live.connect()
    live.fresh_database("cz", "CREATE TABLE {db}.t (id INT PRIMARY KEY, a VARCHAR(500) COMPRESSED, b TEXT COMPRESSED)")
    with live.row_metadata("FULL"), conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        file, _ = live.current_binlog(conn)
        cur.execute("INSERT INTO cz.t VALUES (1, REPEAT('ab', 200), REPEAT('é', 1000)), (2, 'x', NULL)")
        cur.execute("FLUSH BINARY LOGS")
    out = io.StringIO()
    decode_files([str(live.server().binlog_dir / file)], out)
    rows = [json.loads(line)["data"][0] for line in out.getvalue().splitlines() if '"INSERT"' in line]
    assert rows == [{"id": "1", "a": "ab" * 200, "b": "é" * 1000}, {"id": "2", "a": "x", "b": None}]


@pytest.mark.live
@pytest.mark.servers("mariadb")
def test_a_captured_table_keeps_its_compressed_columns() -> None:
    """SHOW CREATE TABLE prints COMPRESSED as `/*M!100301 COMPRESSED*/`, which runs by the server's
    version: MariaDB's handshake says "5.5.5-10.11...", and the capture read 5.5.5 and left it out
    (a MINIMAL TABLE_MAP then disagreed with the history: type 140 against a plain VARCHAR)."""
    live.fresh_database("cz2", "CREATE TABLE {db}.t (id INT PRIMARY KEY, a VARCHAR(500) COMPRESSED, b BLOB COMPRESSED)")
    table = capture(live.connect(), TableFilter.of([r"cz2\.t"], None)).tables[("cz2", "t")]
    assert [(c.name, c.compressed) for c in table.columns] == [("id", False), ("a", True), ("b", True)]
