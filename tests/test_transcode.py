"""The compiled transcoder (connector/_transcode.c) against the Python path it accelerates.

On each live server rows of every column type it covers, with their edge values, the bytes it
writes equal the flat-message path's (single-object and registry framing); where a value
has no typed form it declines and Python writes the event. On mutated images it returns
exactly what the Python decoders and encoders give, or declines: never different bytes,
and never a row count the Python decoder would not read. The row walk that lets decoding
wait likewise accepts only images the Python decoders read without error. (What the module
refuses at its boundary, and the fuzzing under the sanitizers: tests/test_native_fuzz.py.)"""

from __future__ import annotations

import random
import re
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from connector.avro.encoding import MessageEncoder
from connector.avro.framing import ConfluentFraming, SingleObjectFraming
from connector.avro.registry import SchemaDirectory
from connector.binlog.constants import RowsKind
from connector.binlog.parser import DECODE_FAULTS
from connector.binlog.rowplan import walk_layout
from connector.binlog.rows import RowsDecoderCache
from connector.binlog.values import NotTyped
from connector.canal import CanalJsonEncoder
from connector.columns import ColumnRules
from connector.config import ColumnRule, SnapshotSection
from connector.flat import RowBatch
from connector.items import Changes
from connector.native import KernelRows, transcoder
from connector.schema.model import Table
from connector.startup import prepare
from connector.stream import ChangeStream, StreamOptions
from tests.support.corpus import mutate
from tests.support.live import LiveServer, connect, fresh_database, live_config, server

pytestmark = pytest.mark.live

DB = "transcode"

# (column definition, value generator) of every type the transcoder covers
COLUMNS: list[tuple[str, Any]] = [
    ("ti TINYINT", lambda r: r.choice([-128, 127, 0, -1, r.randrange(-128, 128)])),
    ("tiu TINYINT UNSIGNED", lambda r: r.choice([0, 255, r.randrange(256)])),
    ("si SMALLINT", lambda r: r.choice([-32768, 32767, r.randrange(-32768, 32768)])),
    ("siu SMALLINT UNSIGNED", lambda r: r.choice([65535, r.randrange(65536)])),
    ("mi MEDIUMINT", lambda r: r.choice([-(2**23), 2**23 - 1, r.randrange(-(2**23), 2**23)])),
    ("miu MEDIUMINT UNSIGNED", lambda r: r.choice([2**24 - 1, r.randrange(2**24)])),
    ("i INT", lambda r: r.choice([-(2**31), 2**31 - 1, r.randrange(-(2**31), 2**31)])),
    ("iu INT UNSIGNED", lambda r: r.choice([2**32 - 1, r.randrange(2**32)])),
    ("bi BIGINT", lambda r: r.choice([-(2**63), 2**63 - 1, r.randrange(-(2**63), 2**63)])),
    ("biu BIGINT UNSIGNED", lambda r: r.choice([0, 2**64 - 1, 2**63, 255, r.randrange(2**64)])),
    ("f FLOAT", lambda r: r.choice([0.0, -0.0, 1.5, -3.4e38, 1.17549e-38, 1e-45, r.uniform(-1e6, 1e6)])),
    ("d DOUBLE", lambda r: r.choice([0.0, -0.0, 1.7976931348623157e308, 5e-324, r.uniform(-1e12, 1e12)])),
    ("d1 DECIMAL(5,2)", lambda r: r.choice(["-999.99", "999.99", "0.00", "-1.28", "1.27", "-0.01"])),
    ("d2 DECIMAL(38,10)", lambda r: r.choice(["-9" * 28 + "." + "9" * 10, "1" + "0" * 27, str(r.randrange(10**20))])),
    ("d5 DECIMAL(65,30)", lambda r: r.choice(["-" + "9" * 35 + "." + "9" * 30, "1.5", "-0." + "0" * 29 + "1", "-128",
                                              f"{r.randrange(10**35)}.{r.randrange(10**30):030d}"])),
    ("d3 DECIMAL(18,0)", lambda r: str(r.randrange(-(10**18) + 1, 10**18))),
    ("d4 DECIMAL(10,9)", lambda r: r.choice(["-9.999999999", "0.000000001", "-0.000000128"])),
    ("dt DATE", lambda r: r.choice(["1000-01-01", "9999-12-31", "1970-01-01", "2000-02-29", "0000-00-00"])),
    ("dt0 DATETIME", lambda r: r.choice(["1000-01-01 00:00:00", "9999-12-31 23:59:59", "0000-00-00 00:00:00"])),
    ("dt3 DATETIME(3)", lambda r: r.choice(["2021-06-01 12:34:56.789", "1969-12-31 23:59:59.999"])),
    ("dt6 DATETIME(6)", lambda r: r.choice(["2021-06-01 12:34:56.000001", "1900-03-01 00:00:00.999999"])),
    ("ts0 TIMESTAMP NULL", lambda r: r.choice(["1970-01-01 00:00:01", "2038-01-19 03:14:07", "0000-00-00 00:00:00"])),
    ("ts1 TIMESTAMP(1) NULL", lambda r: r.choice(["2001-01-01 00:00:00.1", "2020-02-29 12:00:00.9"])),
    ("ts5 TIMESTAMP(5) NULL", lambda r: r.choice(["2001-01-01 00:00:00.12345", "2020-02-29 12:00:00.99999"])),
    ("y YEAR", lambda r: r.choice([1901, 2155, 0, 1999])),
    ("tm3 TIME(3)", lambda r: r.choice(["-838:59:59", "838:59:59", "00:00:00", "-00:00:00.001", "12:34:56.789"])),
    ("b12 BIT(12)", lambda r: r.choice([0, 1, 4095, r.randrange(4096)])),
    ("b64 BIT(64)", lambda r: r.choice([0, 2**64 - 1, 2**63, r.randrange(2**64)])),
    ("st SET('a','b','c')", lambda r: r.choice(["", "a", "a,c", "a,b,c"])),
    ("c CHAR(10)", lambda r: r.choice(["", "abc", "ünï", "😀😀", "a  "])),
    ("vc VARCHAR(300)", lambda r: r.choice(["", "x" * 300, "日本語テキスト" * 10, "\t\n'\"\\"])),
    ("tx TEXT", lambda r: r.choice(["", "y" * 5000, "Ωmega 🚀"])),
    ("ttx TINYTEXT", lambda r: r.choice(["", "tiny"])),
    ("mtx MEDIUMTEXT CHARACTER SET utf8mb3", lambda r: r.choice(["", "mb3 ü", "z" * 70000])),
    # Each code's text from the servers' table, not Python's codec: gbk stores 0xA140 and shows it
    # as "?" (Python's gbk refuses it), big5's 0xA15A is U+FFFD (Python's: U+2574), sjis's 0x815F a
    # backslash (Python's: U+FF3C).
    ("gk VARCHAR(20) CHARACTER SET gbk", lambda r: r.choice(["", "中文字符", "a·b", b"x\xa1\x40y"])),
    ("b5 VARCHAR(20) CHARACTER SET big5", lambda r: r.choice(["", "繁體中文", b"\xa1\x5a\xa1\x40"])),
    ("sj CHAR(10) CHARACTER SET sjis", lambda r: r.choice(["", "日本語", b"\x81\x5f\x82\xa0", "ｶﾀｶﾅ"])),
    ("kr TINYTEXT CHARACTER SET euckr", lambda r: r.choice(["", "한국어 텍스트", "x" * 200])),
    ("cp VARCHAR(10) CHARACTER SET cp932", lambda r: r.choice(["", "①②", "ﾃｽﾄ\\"])),
    ("g2 VARCHAR(10) CHARACTER SET gb2312", lambda r: r.choice(["", "简体", "\t\"\n"])),
    # each server's own table: JIS X 0212's three-byte codes, NEC's row 13 in eucjpms (not MySQL's
    # ascii: bytes it does not store make its events decoded at once, so they are not the transcoder's)
    ("uj VARCHAR(10) CHARACTER SET ujis", lambda r: r.choice(["", "日本語", "丂", "ｶﾅ"])),
    ("ej VARCHAR(10) CHARACTER SET eucjpms", lambda r: r.choice(["", "①②", "丂\\"])),
    # UTF-16 (both byte orders), UTF-32 and UCS-2: characters beyond the BMP but in ucs2
    ("u16 VARCHAR(10) CHARACTER SET utf16", lambda r: r.choice(["", "a😀中", "\"\\\n"])),
    ("u16le TEXT CHARACTER SET utf16le", lambda r: r.choice(["", "🚀 ok", "é" * 50])),
    ("u32 VARCHAR(10) CHARACTER SET utf32", lambda r: r.choice(["", "💾x", "\uffff"])),
    ("u2 CHAR(4) CHARACTER SET ucs2", lambda r: r.choice(["", "中文", "\ue000"])),
    ("bn BINARY(6)", lambda r: r.choice([b"", b"\x00", b"ab\x00", bytes(range(250, 256))])),
    ("vb VARBINARY(20)", lambda r: r.choice([b"", b"\x00\xff", bytes(r.randrange(256) for _ in range(20))])),
    ("bl BLOB", lambda r: r.choice([b"", bytes(range(256)) * 3])),
    ("nn VARCHAR(5) NOT NULL DEFAULT 'x'", lambda r: r.choice(["", "nn"])),
    ("dd INT DEFAULT 7", lambda r: r.randrange(100)),
    ("ge GEOMETRY", lambda r: r.choice([_point(0, 1.5, -2.25), _point(4326, 45.0, 7.5), _line(r)])),
    ("pt POINT", lambda r: _point(r.choice([0, 3857]), r.uniform(-1e6, 1e6), r.uniform(-1e6, 1e6))),
]


def _point(srid: int, x: float, y: float) -> bytes:
    """A POINT as the server stores it: its SRID, then WKB (little-endian, type 1)."""
    return struct.pack("<IBIdd", srid, 1, 1, x, y)


def _line(rng: random.Random) -> bytes:
    points = [(rng.uniform(-90, 90), rng.uniform(-90, 90)) for _ in range(rng.randrange(2, 40))]
    return struct.pack("<IBII", 0, 1, 2, len(points)) + b"".join(struct.pack("<dd", *p) for p in points)


_FLOATS = [(1.5, -0.0, 3.4e38, 1e-45), (0.1, -2.5, 7.0, 1.17549435e-38), (1.0, 2.0, 3.0, 4.0)]  # VECTORs'

# MySQL's alone (MariaDB has no gb18030 and no VECTOR): gb18030's two-byte codes, four-byte ones in
# the BMP and beyond it (the code table's range), and one the server stores and shows as "?"
# (0x8431A530); a VECTOR.
MYSQL_COLUMNS: list[tuple[str, Any]] = [
    ("g18 VARCHAR(10) CHARACTER SET gb18030", lambda r: r.choice(["", "中文", "€\u0080", "😀x", b"\x84\x31\xa5\x30"])),
    ("g18t TEXT CHARACTER SET gb18030", lambda r: r.choice(["", "\U0010ffff" * 20, "ÿ\"\n" * 30])),
    # a VECTOR holds up to its dimensions (no NaN or infinity: the server refuses them), denormals and -0.0 too
    ("vec VECTOR(4)", lambda r: struct.pack("<4f", *r.choice(_FLOATS))[: 4 * r.randrange(1, 5)]),
]


# MariaDB's alone: its fixed-size binary types, published as their stored bytes.
MARIADB_COLUMNS: list[tuple[str, Any]] = [
    ("uu UUID", lambda r: r.choice(["00000000-0000-0000-0000-000000000000", "123e4567-e89b-12d3-a456-426614174000"])),
    ("i4 INET4", lambda r: r.choice(["0.0.0.0", "192.168.1.254", "255.255.255.255"])),
    ("i6 INET6", lambda r: r.choice(["::", "::1", "fe80::1", "2001:db8::ff00:42:8329", "::ffff:1.2.3.4"])),
]


def _workload(rng: random.Random) -> None:
    conn = connect(DB)
    columns = COLUMNS + (MARIADB_COLUMNS if server().mariadb else MYSQL_COLUMNS)
    names = [definition.split()[0] for definition, _ in columns]
    insert = f"INSERT INTO cov (id, {', '.join(names)}) VALUES (%s{', %s' * len(names)})"
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero dates
        cur.execute(f"CREATE TABLE cov (id INT PRIMARY KEY, {', '.join(d for d, _ in columns)})")
        cur.execute("CREATE TABLE cov_pair (a INT, b VARCHAR(5), v DOUBLE, PRIMARY KEY (b, a))")
        cur.execute("CREATE TABLE cov_keyless (a INT, b VARCHAR(10))")
        for start in range(0, 80, 8):
            cur.execute("BEGIN")
            cur.executemany(insert, [
                [key] + [None if rng.random() < 0.15 and not d.startswith("nn") else g(rng) for d, g in columns]
                for key in range(start, start + 8)
            ])  # fmt: skip
            cur.execute("COMMIT")
        cur.executemany("INSERT INTO cov_pair VALUES (%s, %s, %s)", [(i, f"k{i % 3}", i / 7) for i in range(12)])
        keyless = [(i % 4, rng.choice(["x", None])) for i in range(20)]
        cur.executemany("INSERT INTO cov_keyless VALUES (%s, %s)", keyless)
        for key in rng.sample(range(80), 30):
            definition, gen = rng.choice(columns)
            cur.execute(f"UPDATE cov SET {definition.split()[0]} = %s WHERE id = %s", (gen(rng), key))
        cur.execute("UPDATE cov SET i = i DIV 2 WHERE id < 30")  # one event, many rows
        cur.execute("UPDATE cov SET id = id + 1000 WHERE id = 79")  # a key change: Python's DELETE + INSERT
        cur.execute("UPDATE cov_pair SET v = v * 2 WHERE a < 6")
        cur.execute("UPDATE cov_keyless SET b = 'y' WHERE a = 1")
        cur.execute("DELETE FROM cov WHERE id % 5 = 0")
        cur.execute("DELETE FROM cov_pair WHERE a > 9")
        cur.execute("DELETE FROM cov_keyless WHERE a = 2")
    conn.close()


def test_compiled_module_is_built() -> None:
    # `make install` builds it; without it everything still works, only slower, and this
    # suite would prove nothing about the compiled path.
    assert transcoder is not None


@pytest.fixture(scope="module")
def captured(live_server: LiveServer) -> list[tuple[RowBatch, Table]]:

    fresh_database(DB)
    config = replace(live_config([rf"{DB}\..*"]), snapshot=SnapshotSection(mode="never"))
    prepared = prepare(config)
    _workload(random.Random(5))
    stream = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(),
                          options=StreamOptions(typed_rows=True))  # fmt: skip
    out = []
    for item in stream.items(prepared.start, blocking=False):
        if isinstance(item, Changes) and item.batch is not None:
            assert item.table is not None
            out.append((item.batch, item.table))
    return out


@pytest.mark.parametrize("registry", [False, True], ids=["single-object", "registry"])
def test_compiled_bytes_equal_the_flat_message_path(
    captured: list[tuple[RowBatch, Table]], tmp_path: Path, registry: bool
) -> None:
    framing = ConfluentFraming(f"mock://transcode-{tmp_path.name}") if registry else SingleObjectFraming()
    encoder = MessageEncoder(SchemaDirectory(tmp_path), framing)
    compiled: dict[str, int] = {}
    declined = []
    for batch, table in captured:
        # Decoding waits, and the transcoder reads the bytes, where rowplan describes every column:
        # every column here (MariaDB logs UUID, INET4 and INET6 as BINARY(n))
        assert batch.rows.raw, table.name
        topic = f"cdc.{DB}.{table.name}"
        fast = encoder.compiled(batch, table, topic)
        expected = [encoder.row(m, table, topic) for m in batch.messages()]
        if fast is None:
            declined.append((table.name, batch.rows.kind.name, len(expected)))
            assert encoder.rows(batch, table, topic) in (None, expected)  # Python's, or a key change split
            continue
        assert fast == expected, (table.name, batch.rows.kind, batch.source)
        key = f"{table.name} {batch.rows.kind.name}"
        compiled[key] = compiled.get(key, 0) + len(fast)
    for name in ("cov", "cov_pair", "cov_keyless"):
        for kind in ("WRITE", "UPDATE", "DELETE"):
            assert compiled.get(f"{name} {kind}"), f"{name} {kind}: {compiled}"
    assert compiled["cov WRITE"] == 80 and compiled["cov DELETE"] == 16
    # Declined: the key change alone (every column type of both servers is compiled). Values
    # with no typed form are declined too: test_mutated_images_give_python_s_bytes_or_nothing.
    assert declined == [("cov", "UPDATE", 1)]


def test_a_column_rule_s_rows_are_compiled_to_the_per_message_path_s_bytes(
    captured: list[tuple[RowBatch, Table]], tmp_path: Path
) -> None:
    """[[kafka.columns]] (issue 33): each table with a rule that leaves out every third column
    but the key's, masks every third after it and hashes the rest (SHA-256 of a salt and the
    value's canal text: every column type's text); and with a rule that hashes its first key
    column and masks its second (messages keyed by the digest and the mask). The compiled
    transcoder's messages are those of the per-message path (`row` of each message as the rule
    shapes it); declined only where the rule-less path declines."""
    encoder = MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming())
    compiled, keyed, declined = 0, 0, []
    for batch, table in captured:
        for ruling in _rules_of(table):
            rules = ColumnRules([ruling])
            shaping, shaped = rules.shaping(table), rules.table(table)
            assert shaping is not None and shaped is not None
            topic = f"cdc.{DB}.{table.name}"
            fast = encoder.rows(batch, table, topic, shaping)
            if fast is None:
                declined.append((table.name, batch.rows.kind.name, len(batch.rows.rows)))
                continue
            messages = [rules.message(m, table) for m in batch.messages()]
            assert fast == [encoder.row(m, shaped, topic) for m in messages], table.name
            compiled += len(fast)
            keyed += len(fast) if ruling.mask_chars == 1 else 0
    # the key change is declined with its key hashed too: its digest changes as well
    assert set(declined) == {("cov", "UPDATE", 1)}, declined
    assert compiled > 200 and keyed > 100, (compiled, keyed)


def test_the_kernel_is_given_each_table_s_program_or_why_not(captured: list[tuple[RowBatch, Table]],
                                                              tmp_path: Path) -> None:  # fmt: skip
    """Each encoder gives the compiled kernel a table's program, or, in the same walk of its columns,
    the reason its rows take the Python path (the log line says it): here a rule that hashes a
    GEOMETRY column, whose text (the digest's input) is not compiled."""
    encoders = (MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming()),
                CanalJsonEncoder(None, "row", "changed"))  # type: ignore[arg-type]  # fmt: skip
    batch, table = next((b, t) for b, t in captured if t.name == "cov")
    assert batch.rows.table is not None
    hashing = ColumnRules([ColumnRule(re.escape(f"{DB}.cov"), hash=["ge"], hash_salt="s")]).shaping(table)
    for encoder in encoders:
        rows = encoder.kernel_rows(batch.rows.table, table, f"cdc.{DB}.cov")
        assert isinstance(rows, KernelRows) and rows.columns, encoder
        why = encoder.kernel_rows(batch.rows.table, table, f"cdc.{DB}.cov", hashing)
        assert why == "column `ge` (geometry) is hashed, and the text its digest is of is not compiled", why


def _rules_of(table: Table) -> list[ColumnRule]:
    """A rule that leaves out every third column but the key's, masks every third after it and hashes
    the rest; and, for a table with a key, one that hashes its first key column and masks its second
    (mask_chars 1: the rule that shapes the key)."""
    keys = {k.lower() for k in table.primary_key}
    # VECTORs masked, not hashed: the text a digest is of (VECTOR_TO_STRING's) is not compiled
    vectors = [c.name for c in table.columns if c.data_type == "vector"]
    others = [c.name for c in table.columns if c.name.lower() not in keys and c.name not in vectors]
    rule = ColumnRule(re.escape(f"{DB}.{table.name}"), exclude=others[::3], mask=others[1::3] + vectors,
                      mask_chars=5, hash=others[2::3], hash_salt="pepper-ü")  # fmt: skip
    key_rule = ColumnRule(re.escape(f"{DB}.{table.name}"), hash=list(table.primary_key[:1]),
                          mask=list(table.primary_key[1:2]), mask_chars=1, hash_salt="k")  # fmt: skip
    return [rule, key_rule] if keys else [rule]


@pytest.mark.parametrize("old", ["changed", "full"])
def test_canal_json_messages_are_compiled_to_the_per_message_path_s_bytes(
    captured: list[tuple[RowBatch, Table]], old: str
) -> None:
    """canal-json (issue 33): the compiled messages (canal's texts: Java's floats, ENUM indexes, SET
    masks, a GEOMETRY's bytes, a VECTOR's floats from their six-digit text; each row's sqlType,
    wider for large UNSIGNED values; `old` changed or whole) and keys are the per-message path's,
    byte for byte. Declined: the key change."""
    encoder = CanalJsonEncoder(None, "row", old)  # type: ignore[arg-type]
    compiled: dict[str, int] = {}
    declined = set()
    for batch, table in captured:
        topic = f"cdc.{DB}.{table.name}"
        fast = encoder.compiled(batch, table)
        if fast is None:
            declined.add((table.name, batch.rows.kind.name))
            continue
        assert fast == [encoder.row(m, table, topic) for m in batch.messages()], (table.name, batch.source)
        key = f"{table.name} {batch.rows.kind.name}"
        compiled[key] = compiled.get(key, 0) + len(fast)
    for name in ("cov", "cov_pair", "cov_keyless"):
        for kind in ("WRITE", "UPDATE", "DELETE"):
            assert compiled.get(f"{name} {kind}"), f"{name} {kind}: {compiled}"
    assert declined == {("cov", "UPDATE")}, declined


@pytest.mark.parametrize("old", ["changed", "full"])
def test_canal_json_under_a_column_rule_is_compiled_to_the_per_message_path_s_bytes(
    captured: list[tuple[RowBatch, Table]], old: str
) -> None:
    """canal-json under [[kafka.columns]] (issue 33), the Avro test's rules: the compiled messages and
    keys are the per-message path's (each message as the rule shapes it, then `row` of the shaped
    table), byte for byte; declined only where the rule-less path declines."""
    encoder = CanalJsonEncoder(None, "row", old)  # type: ignore[arg-type]
    compiled, keyed, declined = 0, 0, set()
    for batch, table in captured:
        for ruling in _rules_of(table):
            rules = ColumnRules([ruling])
            shaping, shaped = rules.shaping(table), rules.table(table)
            assert shaping is not None and shaped is not None
            fast = encoder.compiled(batch, table, shaping)
            if fast is None:
                declined.add((table.name, batch.rows.kind.name))
                continue
            topic = f"cdc.{DB}.{table.name}"
            assert fast == [encoder.row(rules.message(m, table), shaped, topic) for m in batch.messages()], table.name
            compiled += len(fast)
            keyed += len(fast) if ruling.mask_chars == 1 else 0
    assert declined == {("cov", "UPDATE")}, declined
    assert compiled > 200 and keyed > 100, (compiled, keyed)


def _decode(
    batch: RowBatch, body: bytes, cache: RowsDecoderCache
) -> tuple[tuple[Any, ...], tuple[Any, ...] | None] | None:
    """The Python decoders' text and typed images of `body` as this event's images, as the parser
    decodes them (a value Python's codec refuses read again by the server's table); None where
    they refuse the bytes (the parser would raise, naming the event) or replace text that is not
    exact (the parser would say so). `cache`: the parser's, kept across events as the parser keeps it
    (a mutant has its event's shape, so its decoder is built once, not per mutant)."""
    rows = batch.rows
    assert rows.table is not None
    args = (rows.table, rows.kind, rows.present, rows.present_after, False)
    try:
        text, replaced = cache.decode(body, *args)
        try:
            typed: tuple[Any, ...] | None = tuple(cache.decode(body, *args, True)[0])
        except NotTyped:
            typed = None
    except DECODE_FAULTS:
        return None
    return (tuple(text), typed) if not replaced else None


def test_mutated_images_give_python_s_bytes_or_nothing(captured: list[tuple[RowBatch, Table]], tmp_path: Path) -> None:
    assert transcoder is not None
    encoder = MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming())
    rng = random.Random(3)
    outcomes = {"same": 0, "declined": 0, "walk refused": 0, "walk accepted": 0}
    cache = RowsDecoderCache()
    for batch, table in captured:
        rows = batch.rows
        assert rows.table is not None
        layout = walk_layout(rows.table.columns)
        assert layout is not None
        topic = f"cdc.{DB}.{table.name}"
        for _ in range(60):
            body = mutate(rng, rows.raw)
            decoded = _decode(batch, body, cache)
            count = transcoder.count_rows(body, layout, 2 if rows.kind == RowsKind.UPDATE else 1)
            if count < 0:
                outcomes["walk refused"] += 1
            else:  # a walk that accepts promises the decoders read as many rows, without error
                assert decoded is not None and len(decoded[0]) == count, (table.name, body.hex())
                outcomes["walk accepted"] += 1
            # the mutant as the parser would hand it on: its images' bytes, its row count
            mutant = replace(batch, rows=rows._replace(raw=body, rows=decoded[0] if decoded else rows.rows))
            fast = encoder.compiled(mutant, table, topic)
            if fast is None:
                outcomes["declined"] += 1
                continue
            assert decoded is not None, (table.name, body.hex())
            eager = mutant.rows._replace(typed=decoded[1], deferred=None, raw=b"")  # the Python path's images
            python = encoder.rows(replace(mutant, rows=eager), table, topic)
            assert fast == python, (table.name, body.hex())
            outcomes["same"] += 1
    assert all(outcomes.values()), outcomes  # each outcome happened: the mutations reach every branch
