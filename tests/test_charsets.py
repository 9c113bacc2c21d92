"""Text decoded as the servers have it (connector/binlog/charsets.py), from their own tables.

Every code of every table decodes to the table's text, on both paths of a multi-byte charset
(Python's nearest codec, and the table walked); bytes no server stores, characters without a
UTF-8 form and collations with no table take the documented replacement, and the rows decoders
report the columns that took it instead of raising; the compiled TEXT8 operation gives every
byte of every single-byte charset the Python path's text; the files read back as written."""

from __future__ import annotations

import array
import functools
import random
import re
import struct
import subprocess
import sys
from importlib import resources
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.avro.binary import varint
from connector.binlog import charmaps
from connector.binlog.charmaps import Charmap, Run, block_codes, blocks_of, parse, render, runs_of
from connector.binlog.charmaps.decoding import REPLACE, MultiByte
from connector.binlog.charsets import (
    BINARY_COLLATION,
    charset_of,
    collation_id_of_charset,
    decoder,
    flavour,
    single_byte_texts,
    text_codec,
)
from connector.binlog.constants import ColumnType as T
from connector.binlog.constants import EventType, RowsKind
from connector.binlog.events import EventHeader
from connector.binlog.parser import decode_query
from connector.binlog.reader import Reader
from connector.binlog.rowplan import (
    COL_ASCII,
    COLUMN,
    KINDS,
    OP_TEXTMB,
    code_table,
    code_table_number,
    json_program,
    single_byte_table,
    walk_layout,
)
from connector.binlog.rows import RowsDecoderCache
from connector.binlog.tablemap import ColumnMeta, TableMapEvent, decode_table_map
from connector.errors import FormatError
from connector.flat import table_shape
from connector.native import transcoder
from connector.native_spec import CODE_TABLES, NUMBERS

CODE_CHILD, CODE_RANGE, CODE_RANGE_WIDTHS = NUMBERS["CODE_CHILD"], NUMBERS["CODE_RANGE"], NUMBERS["CODE_RANGE_WIDTHS"]

FILES = charmaps.shipped()
# (charset, MariaDB's table?) of every table shipped: both servers' where one file serves both.
TABLES = sorted(
    {(name.split(".")[0], mariadb) for name in FILES for mariadb in (True, False)
     if name.count(".") == 1 or name.split(".")[1] == flavour(mariadb)}
)  # fmt: skip


def _codec(charset: str, mariadb: bool) -> str:
    collation = collation_id_of_charset(charset)
    assert collation is not None
    codec = text_codec(collation, mariadb)
    assert codec is not None
    return codec


def _codes(charset: str, mariadb: bool) -> tuple[list[bytes], list[str]]:
    table = charmaps.load(charset, flavour(mariadb))
    assert table is not None
    pairs = list(table.items())
    return [code for code, _ in pairs], ["?" if text is None else text for _, text in pairs]


# -- every code of every table ----------------------------------------------------------------


@pytest.mark.parametrize(("charset", "mariadb"), TABLES, ids=[f"{c}-{flavour(m)}" for c, m in TABLES])
def test_every_code_decodes_to_its_table_text(charset: str, mariadb: bool) -> None:
    codes, texts = _codes(charset, mariadb)
    codec = _codec(charset, mariadb)
    ours = decoder(codec)
    assert ours is not None
    # All of them one after another, and a sample shuffled among ASCII: the codes in context.
    assert ours.text(b"".join(codes)) == "".join(texts)
    picked = random.Random(charset).sample(range(len(codes)), min(len(codes), 3000))
    mixed = [(codes[i], texts[i]) for i in picked] + [(b"a", "a"), (b" ", " ")] * 50
    random.Random(1).shuffle(mixed)
    assert b"".join(c for c, _ in mixed).decode(codec) == "".join(t for _, t in mixed)
    if isinstance(ours, MultiByte):  # the table walked too, not only where Python's codec gives up
        assert ours.walk(b"".join(codes), "strict") == "".join(texts)
        assert ours.walk(b"".join(c for c, _ in mixed), "strict") == "".join(t for _, t in mixed)
    if len(codes) < 30_000:
        assert [code.decode(codec) for code in codes] == texts


@pytest.mark.parametrize(("charset", "mariadb"), TABLES, ids=[f"{c}-{flavour(m)}" for c, m in TABLES])
def test_no_code_begins_another(charset: str, mariadb: bool) -> None:
    """The walk reads the one code that starts at a byte, and Python's codec is taken only where
    it reads the same units: both hold because no code is the beginning of a longer one."""
    table = charmaps.load(charset, flavour(mariadb))
    assert table is not None
    prefixes = {code[:k] for block, _ in table.blocks for code in _corners(block) for k in range(1, len(block))}
    shorter = [block for block, _ in table.blocks if len(block) < max(table.widths)]
    assert not any(charmaps.place_of(block, prefix) is not None for block in shorter for prefix in prefixes)


def _corners(block: charmaps.Block) -> list[bytes]:
    """A few codes of each first byte of a block (the prefixes that matter are its first bytes')."""
    return [bytes((first, *(values[k % len(values)] for values in block[1:]))) for first in block[0] for k in (0, -1)]


def test_where_python_s_codec_reads_otherwise_the_table_decides() -> None:
    sjis = _codec("sjis", False)
    assert b"\x81\x5f".decode("shift_jis") == "\uff3c" and b"\x81\x5f".decode(sjis) == "\\"
    assert b"a\x81\x5fb\x82\xa0".decode(sjis) == "a\\bあ"
    euckr = _codec("euckr", True)  # Hangul beyond KS X 1001: the server's euckr is CP949
    with pytest.raises(UnicodeDecodeError):
        b"\x81\x41".decode("euc_kr")
    assert b"\x81\x41".decode(euckr) == "갂"
    big5 = _codec("big5", False)  # ETEN's extension (CP950) ...
    assert b"\xf9\xd6".decode(big5) == "碁"
    assert b"\xa1\x5a".decode(big5) == "\ufffd"  # ... and the server's own U+FFFD, which Python reads as "╴"
    gbk = _codec("gbk", True)  # a code the server stores but shows as "?"
    assert b"\xa1\x40".decode(gbk) == "?"
    cp932 = _codec("cp932", False)  # bytes Python's cp932 reads alone and no server stores
    with pytest.raises(UnicodeDecodeError):
        b"a\x80".decode(cp932)


def test_the_fast_path_is_the_common_path() -> None:
    """Python's nearest codec reads all but a few codes as the server does: the table is walked
    for those few, and for text whose characters a server does not store."""
    for charset, mariadb in TABLES:
        ours = decoder(_codec(charset, mariadb))
        if isinstance(ours, MultiByte):
            odd = ours.odd_codes.pattern.split(b"|") if ours.odd_codes is not None else []
            assert len(odd) <= 8 and all(max(code) >= 0x80 for code in odd), (charset, odd)


MULTI_BYTE = [(c, m) for c, m in TABLES if isinstance(decoder(_codec(c, m)), MultiByte)]


@functools.cache
def _python_reads_otherwise(charset: str, mariadb: bool) -> list[bytes]:
    """Codes of up to three bytes Python's nearest codec reads as another text than the table's,
    or reads at all where the table has no code: found here by trying each, not as the decoder finds them."""
    ours = decoder(_codec(charset, mariadb))
    table = charmaps.load(charset, flavour(mariadb))
    assert isinstance(ours, MultiByte) and ours.nearest is not None and table is not None
    odd = []
    for block, runs in table.blocks:
        if len(block) <= 3:
            texts = (charmaps.text_of(run, k) for run in runs for k in range(run.count))
            odd += [code for code, text in zip(block_codes(block), texts) if _python(code, ours.nearest) not in
                    (None, "?" if text is None else text)]  # fmt: skip
    alone = [bytes([b]) for b in range(256)]
    return odd + [byte for byte in alone if _python(byte, ours.nearest) and not ours.text_at(byte, 0)]


def _python(code: bytes, codec: str) -> str | None:
    try:
        return code.decode(codec)
    except UnicodeDecodeError:
        return None


@st.composite
def _mixtures(draw: st.DrawFn) -> tuple[str, bool, bytes]:
    """A multi-byte charset's codes (those Python reads otherwise among them) with any bytes between."""
    charset, mariadb = draw(st.sampled_from(MULTI_BYTE))
    table = charmaps.load(charset, flavour(mariadb))
    assert table is not None
    blocks = [block for block, _ in table.blocks]
    pieces = st.one_of(
        st.builds(charmaps.code_at, st.sampled_from(blocks), st.integers(0, 10**7)),
        st.sampled_from(_python_reads_otherwise(charset, mariadb) or [b"a"]),
        st.binary(min_size=1, max_size=3),
    )
    return charset, mariadb, b"".join(draw(st.lists(pieces, max_size=12)))


@given(_mixtures())
@settings(max_examples=500, deadline=None)
def test_python_s_codec_and_the_walk_never_disagree(case: tuple[str, bool, bytes]) -> None:
    """Whatever the bytes, the text is the table walk's: Python's codec is taken only where it
    reads them the same; strictly each raises on the same bytes, and leniently nothing raises."""
    charset, mariadb, raw = case
    ours = decoder(_codec(charset, mariadb))
    assert isinstance(ours, MultiByte)
    try:
        walked: str | None = ours.walk(raw, "strict")
    except UnicodeDecodeError:
        walked = None
    try:
        text: str | None = ours.text(raw)
    except UnicodeDecodeError:
        text = None
    assert text == walked
    assert raw.decode(_codec(charset, mariadb), REPLACE) == ours.walk(raw, REPLACE)


# -- what no server stores ------------------------------------------------------------------

ILL_FORMED = [
    ("gbk", b"A\x80B", "A\ufffdB"),
    ("gbk", b"A\x81 B", "A\ufffd B"),  # a lead byte, then a byte no code has second
    ("sjis", b"\x81\x20\x82", "\ufffd \ufffd"),  # and a lead byte at the end
    ("euckr", b"\xff\xff", "\ufffd\ufffd"),
    ("big5", b"\xa1\x30", "\ufffd0"),
    ("ujis", b"x\x8f\xa1", "x\ufffd\ufffd"),  # three-byte code cut short
    ("gb2312", b"\xa1\xa1\xf8\xa1", "\u3000\ufffd\ufffd"),
]


@pytest.mark.parametrize(("charset", "raw", "replaced"), ILL_FORMED)
def test_bytes_no_server_stores_raise_strictly_and_take_u_fffd_each(charset: str, raw: bytes, replaced: str) -> None:
    for mariadb in (True, False):
        codec = _codec(charset, mariadb)
        with pytest.raises(UnicodeDecodeError):
            raw.decode(codec)
        assert raw.decode(codec, REPLACE) == replaced


def test_ascii_is_each_server_s() -> None:
    """MariaDB's ascii stores 0x80-0xff and shows them as "?"; MySQL's stores none of them."""
    assert b"a\x80".decode(_codec("ascii", True)) == "a?"
    assert b"a\x80".decode(_codec("ascii", False), REPLACE) == "a\ufffd"
    assert single_byte_texts(collation_id_of_charset("ascii") or 0) is None  # so no compiled table


UNICODE_CASES = [
    # (charset, MariaDB?, bytes, strict text or None where it raises, text with REPLACE)
    ("utf8mb4", True, b"a\xed\xa0\x80b", None, "a\ufffdb"),  # a surrogate MariaDB stores: one U+FFFD
    ("utf8mb3", True, b"\xed\xbf\xbf", None, "\ufffd"),
    ("utf8mb4", False, b"\xf0\x9f\x92\xbe", "💾", "💾"),
    ("utf8mb4", False, b"\xc0\x80", None, "\ufffd\ufffd"),  # overlong: Python's U+FFFD per maximal subpart
    ("ucs2", False, b"\x00A\xd8\x00\xdc\x00", None, "A\ufffd\ufffd"),  # both servers store these: unpaired
    ("ucs2", True, b"\xff\xff\x00a", "\uffffa", "\uffffa"),
    ("ucs2", True, b"\x00a\x00", None, "a\ufffd"),
    ("utf16", False, b"\xd8\x00\xdc\x00", "\U00010000", "\U00010000"),
    ("utf16", False, b"\xd8\x00\x00a", None, "\ufffda"),
    ("utf16le", False, b"\x00\xd8\x00\xdc", "\U00010000", "\U00010000"),
    ("utf32", True, b"\x00\x00\xd8\x00\x00\x00\x00a", None, "\ufffda"),  # MariaDB stores surrogates
    ("utf32", False, b"\x00\x10\xff\xff\x00\x11\x00\x00", None, "\U0010ffff\ufffd"),
]


@pytest.mark.parametrize(("charset", "mariadb", "raw", "strict", "lenient"), UNICODE_CASES)
def test_unicode_charsets(charset: str, mariadb: bool, raw: bytes, strict: str | None, lenient: str) -> None:
    codec = _codec(charset, mariadb)
    if strict is None:
        with pytest.raises(UnicodeDecodeError):
            raw.decode(codec)
    else:
        assert raw.decode(codec) == strict
    assert raw.decode(codec, REPLACE) == lenient


def test_every_charset_of_a_known_collation_id_has_its_table() -> None:
    for collation in range(4096):
        for mariadb in (True, False):
            codec = text_codec(collation, mariadb)
            if charset_of(collation) is not None and collation != BINARY_COLLATION:
                assert codec not in (None, text_codec(2000, mariadb)), collation
                assert codec is not None and (decoder(codec) is not None or codec.startswith("utf-"))


def test_a_collation_with_no_table_is_read_as_utf8_and_never_exact() -> None:
    codec = text_codec(2000, False)  # an id no server had when the tables were made
    assert codec is not None and text_codec(BINARY_COLLATION, False) is None
    assert b"".decode(codec) == ""
    with pytest.raises(UnicodeDecodeError):
        b"abc".decode(codec)
    assert b"ab\xffc".decode(codec, REPLACE) == "ab\ufffdc"


# -- the rows decoders ----------------------------------------------------------------------


def _varchar(index: int, collation: int | None, mariadb: bool = False) -> ColumnMeta:
    return ColumnMeta(index, T.MYSQL_TYPE_VARCHAR, T.MYSQL_TYPE_VARCHAR, 100, True, collation=collation,
                      mariadb=mariadb)  # fmt: skip


def _image(*values: bytes) -> bytes:
    return b"\x00" + b"".join(bytes([len(v)]) + v for v in values)


def test_rows_decoders_replace_and_report_instead_of_raising() -> None:
    columns = (_varchar(0, 45), _varchar(1, collation_id_of_charset("gbk")), _varchar(2, 2000),
               _varchar(3, collation_id_of_charset("sjis")))  # fmt: skip
    table = TableMapEvent(1, 0, "db", "t", columns, raw=b"t", mariadb=True)
    good = _image("é".encode(), "中".encode("gbk"), b"", b"\x81\x5f")
    bad = _image(b"\xed\xa0\x80", b"\x80", b"x", b"\x81\x5f")
    cache, shape = RowsDecoderCache(), (table, RowsKind.WRITE, (0, 1, 2, 3), (), False)
    assert cache.decode(good, *shape) == ([(None, ("é", "中", "", "\\"))], ())
    with pytest.raises(UnicodeDecodeError):
        cache.get(*shape)(good + bad, 0, len(good + bad))
    rows, replaced = cache.decode(good + bad + bad, *shape)
    assert rows[1] == rows[2] == (None, ("\ufffd", "\ufffd", "x", "\\"))
    assert sorted(replaced) == [0, 0, 1, 1, 2, 2]  # each value that took it: its column


def test_codes_python_refuses_but_the_server_stores_are_exact_not_replaced() -> None:
    """gbk's rows decoder calls Python's gbk inline (its text, where it has one, is the server's);
    a code Python refuses and the server shows as "?" is read from the table: not a replacement."""
    gbk = collation_id_of_charset("gbk")
    table = TableMapEvent(1, 0, "db", "t", (_varchar(0, gbk), _varchar(1, gbk)), raw=b"t", mariadb=False)
    cache, shape = RowsDecoderCache(), (table, RowsKind.WRITE, (0, 1), (), False)
    assert "decode('gbk')" in (cache.get(*shape).__doc__ or "")
    body = _image("中".encode("gbk"), b"a\xa1\x40") + _image(b"\x80", b"b")
    rows, replaced = cache.decode(body, *shape)
    assert rows == [(None, ("中", "a?")), (None, ("\ufffd", "b"))] and replaced == (0,)


def test_mysql_and_mariadb_tables_each_decode_their_own_rows() -> None:
    """ujis 0x8ea0: MySQL stores it (and shows it as "??"); MariaDB stores no such code."""
    for mariadb, expected, replaced in ((False, "??", ()), (True, "\ufffd\ufffd", (0,))):
        table = TableMapEvent(1, 0, "db", "t", (_varchar(0, collation_id_of_charset("ujis")),), raw=b"t",
                              mariadb=mariadb)  # fmt: skip
        rows, got = RowsDecoderCache().decode(_image(b"\x8e\xa0"), table, RowsKind.WRITE, (0,), (), False)
        assert rows == [(None, (expected,))] and got == replaced


def _single_byte_collations() -> list[tuple[str, int]]:
    out = []
    for charset, mariadb in TABLES:
        collation = collation_id_of_charset(charset)
        if not mariadb and collation is not None and single_byte_texts(collation) is not None:
            out.append((charset, collation))
    return out


@pytest.mark.parametrize(("charset", "collation"), _single_byte_collations())
def test_compiled_text8_is_the_python_path_for_every_byte(charset: str, collation: int) -> None:
    assert transcoder is not None
    texts = single_byte_texts(collation)
    assert texts is not None and None not in texts  # every single-byte charset both share stores every byte
    columns = (_varchar(0, collation),)
    program = json_program(columns)
    assert program is not None and single_byte_table(collation) is not None
    # Bytes alone, an ASCII run (copied at once where the table keeps ASCII), ASCII beside the rest.
    body = b"".join(_image(bytes([byte])) for byte in range(256)) + _image(bytes(range(100)))
    body += _image(bytes(range(0x60, 0x100)))
    keeps_ascii = all(texts[b] == chr(b) for b in range(0x80))
    assert COLUMN.unpack(program.columns)[-1] == (COL_ASCII if keeps_ascii else 0)
    for mariadb in (True, False):
        table = TableMapEvent(1, 0, "db", "t", columns, raw=b"t", mariadb=mariadb)
        rows, replaced = RowsDecoderCache().decode(body, table, RowsKind.WRITE, (0,), (), False)
        shape = table_shape(table)
        expected = [shape.whole_json(after or ()) for _, after in rows]
        names = tuple(f'"{name}":'.encode() for name in shape.names)
        assert transcoder.render_json(body, program.columns, KINDS[RowsKind.WRITE], program.strings, names) == expected
        assert replaced == ()
        # The Avro transcoder's (rowimage.c): each row's value is the prefix, the field (an Avro
        # string), `old`'s null, the tail and the row's number.
        avro = [(None, b"P" + _avro_string(after[0]) + b"\x00NT" + varint(i)) for i, (_, after) in enumerate(rows)]  # type: ignore[index]
        kind = KINDS[RowsKind.WRITE]
        assert transcoder.transcode(body, program.columns, kind, b"", program.strings, b"", b"P", b"P", b"N", b"O",
                                    b"T", 0) == avro  # fmt: skip


@pytest.mark.parametrize("mariadb", [True, False], ids=["mariadb", "mysql"])
def test_compiled_ascii_is_each_server_s(mariadb: bool) -> None:
    """ascii, whose tables differ, compiled by the column's server: MariaDB's every byte (0x80-0xff
    as "?"); MySQL's the bytes below 0x80, and an event with any other declined (the Python path
    replaces it and says so)."""
    ascii_collation = collation_id_of_charset("ascii")
    assert ascii_collation is not None
    columns = (_varchar(0, ascii_collation, mariadb),)
    assert (walk_layout(columns) is not None) == mariadb  # a walk where every byte is a character
    stored = b"".join(_image(bytes([byte])) for byte in range(256 if mariadb else 128)) + _image(bytes(range(100)))
    expected, fields, replaced = _python_rows(stored, columns, mariadb)
    assert not replaced and _compiled(stored, columns) == (expected, [(None, field) for field in fields])
    if mariadb:
        assert expected[200] == '{"@1":"?"}'
    else:
        unstored = stored + _image(b"a\x80")
        assert _python_rows(unstored, columns, mariadb)[2] and _compiled(unstored, columns) == (None, None)


def _compiled(body: bytes, columns: tuple[ColumnMeta, ...]) -> tuple[Any, Any]:
    """The compiled renderer's and transcoder's rows of a WRITE event's images (None: declined)."""
    assert transcoder is not None
    program = json_program(columns)
    assert program is not None
    names = tuple(f'"@{i + 1}":'.encode() for i in range(len(columns)))  # as table_shape names them (no names known)
    kind = KINDS[RowsKind.WRITE]
    rendered = transcoder.render_json(body, program.columns, kind, program.strings, names)
    avro = transcoder.transcode(body, program.columns, kind, b"", program.strings, *(b"",) * 6, 0)
    return rendered, avro


def _python_rows(body: bytes, columns: tuple[ColumnMeta, ...], mariadb: bool) -> tuple[list[str], list[bytes], bool]:
    """The Python path's `data` objects and Avro fields of the same images, and whether it replaced any."""
    table = TableMapEvent(1, 0, "db", "t", columns, raw=b"t", mariadb=mariadb)
    rows, replaced = RowsDecoderCache().decode(body, table, RowsKind.WRITE, tuple(range(len(columns))), (), False)
    shape = table_shape(table)
    # each row's Avro value with no envelope around its fields: the fields, the array's end, its number
    fields = [b"".join(map(_avro_string, after or ())) + b"\x00" + varint(i) for i, (_, after) in enumerate(rows)]
    return [shape.whole_json(after or ()) for _, after in rows], fields, bool(replaced)


def _code_table_name(charset: str, mariadb: bool) -> str | None:
    """The CODE_TABLES entry a column of the charset on that server reads by, if any."""
    return next((n for n in (f"{charset}.{flavour(mariadb)}", charset) if n in CODE_TABLES), None)


COMPILED_MULTI_BYTE = [(charset, mariadb) for charset, mariadb in MULTI_BYTE if _code_table_name(charset, mariadb)]


def test_every_multi_byte_table_is_compiled() -> None:
    """Every multi-byte table is compiled, each server's where theirs differ; gb18030's four-byte
    codes as a range (MariaDB has no gb18030)."""
    assert COMPILED_MULTI_BYTE == MULTI_BYTE and ("gb18030", False) in MULTI_BYTE
    assert _code_table_name("ujis", True) == "ujis.mariadb" and _code_table_name("ujis", False) == "ujis.mysql"
    assert _code_table_name("gb18030", False) == "gb18030.mysql" and code_table_number("gb18030", True) is None
    ranges = {name: (code_table(name) or (b"", b"", b""))[2] for name in CODE_TABLES}
    assert [name for name, range_ in ranges.items() if range_] == ["gb18030.mysql"]


@pytest.mark.parametrize(("charset", "mariadb"), COMPILED_MULTI_BYTE,
                         ids=[f"{c}-{flavour(m)}" for c, m in COMPILED_MULTI_BYTE])  # fmt: skip
def test_compiled_multi_byte_text_is_the_python_path_for_every_code(charset: str, mariadb: bool) -> None:
    """Every code the server stores, each alone (of gb18030's 1.6 million four-byte codes: each
    run's first and last, and 20,000 more), then all of them in runs (a value holds 255 bytes
    here), beside ASCII, the JSON escapes and the codes whose text is "?": the compiled code table's
    text is the rows decoder's, in canal's JSON and in Avro."""
    collation, name = collation_id_of_charset(charset), _code_table_name(charset, mariadb)
    assert collation is not None and name is not None
    assert code_table_number(charset, mariadb) == CODE_TABLES.index(name)
    columns = (_varchar(0, collation, mariadb), _varchar(1, collation, mariadb))
    codes, _ = _codes(charset, mariadb)
    alone = _alone(charset, mariadb, codes)
    values = [*alone, b'a"\\\n\x01z', b""]
    joined = b"".join(codes)
    values += [joined[at : at + 240] for at in range(0, len(joined), 240)]  # (those cut inside a code: left out)
    values = [v for v in values if _python(v, _codec(charset, mariadb)) is not None]
    assert len(values) > len(alone)
    body = b"".join(_image(values[i], values[(i * 7) % len(values)]) for i in range(len(values)))
    expected, fields, replaced = _python_rows(body, columns, mariadb)
    rendered, avro = _compiled(body, columns)
    assert not replaced and rendered == expected
    assert avro == [(None, field) for field in fields]


def _alone(charset: str, mariadb: bool, codes: list[bytes]) -> list[bytes]:
    """The codes to try one a value: all of them, but in a block of more than 100,000 (gb18030's
    four-byte codes) each run's first and last and 20,000 seeded others."""
    table = charmaps.load(charset, flavour(mariadb))
    assert table is not None
    picked, at = [], 0
    for _, runs in table.blocks:
        size = sum(run.count for run in runs)
        if size <= 100_000:
            picked += codes[at : at + size]
        else:
            place = at
            for run in runs:
                picked += [codes[place], codes[place + run.count - 1]]
                place += run.count
            picked += [codes[i] for i in random.Random(charset).sample(range(at, at + size), 20_000)]
        at += size
    return picked


@given(_mixtures())
@settings(max_examples=300, deadline=None)
def test_compiled_multi_byte_text_declines_exactly_what_the_decoder_refuses(case: tuple[str, bool, bytes]) -> None:
    """Any bytes: the compiled text is the decoder's where it reads them strictly; where it raises
    (and the Python path replaces, and says so), the compiled code declines the event."""
    charset, mariadb, raw = case
    collation = collation_id_of_charset(charset)
    assert collation is not None
    columns = (_varchar(0, collation, mariadb),)
    if _code_table_name(charset, mariadb) is None:
        assert json_program(columns) is None  # Python's path, whole
        return
    body = _image(raw[:255])
    expected, fields, replaced = _python_rows(body, columns, mariadb)
    rendered, avro = _compiled(body, columns)
    if replaced:
        assert rendered is None and avro is None
    else:
        assert rendered == expected and avro == [(None, field) for field in fields]


# The Unicode charsets of wider units (OP_WIDE), as Python's codecs write them; ucs2 holds the BMP only.
WIDE_CODECS = {"utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be", "ucs2": "utf-16-be"}
WIDE_CASES = [(charset, mariadb) for charset in WIDE_CODECS for mariadb in (True, False)]


def _wide_text(charset: str) -> list[str]:
    """Characters of every UTF-8 width, the JSON escapes and those around the surrogates, beyond the
    BMP but for ucs2; alone and in runs."""
    chars = ["a", '"', "\\", "\n", "\x00", "\x7f", "é", "\u2028", "中", "\ud7ff", "\ue000", "\uffff",
             "\ufeff"]  # fmt: skip
    if charset != "ucs2":
        chars += ["😀", "\U00010000", "\U0010ffff"]
    return [*chars, "".join(chars), "plain ascii", ""]


@pytest.mark.parametrize(("charset", "mariadb"), WIDE_CASES, ids=[f"{c}-{flavour(m)}" for c, m in WIDE_CASES])
def test_compiled_wide_text_is_the_python_path(charset: str, mariadb: bool) -> None:
    """UTF-16 (both byte orders), UTF-32 and UCS-2 text compiled (OP_WIDE): each character's text
    is the rows decoder's, in canal's JSON and in Avro, and a walk takes the values whole."""
    assert transcoder is not None
    collation = collation_id_of_charset(charset)
    assert collation is not None
    columns = (_varchar(0, collation, mariadb), _varchar(1, collation, mariadb))
    values = [text.encode(WIDE_CODECS[charset]) for text in _wide_text(charset)]
    body = b"".join(_image(values[i], values[-1 - i]) for i in range(len(values)))
    expected, fields, replaced = _python_rows(body, columns, mariadb)
    assert not replaced and _compiled(body, columns) == (expected, [(None, field) for field in fields])
    layout = walk_layout(columns)
    assert layout is not None and transcoder.count_rows(body, layout, 1) == len(values)


@st.composite
def _wide_mixtures(draw: st.DrawFn) -> tuple[str, bool, bytes]:
    """Characters of a wide charset, surrogates alone and in pairs of any order, units past
    U+10FFFF, half units, any bytes."""
    charset, mariadb = draw(st.sampled_from(WIDE_CASES))
    codec, unit = WIDE_CODECS[charset], 4 if charset == "utf32" else 2
    order: Literal["little", "big"] = "little" if charset == "utf16le" else "big"
    pieces = st.one_of(
        st.text(max_size=3).map(lambda t: t.encode(codec, "surrogatepass")),
        st.integers(0xD800, 0xDFFF).map(lambda n: n.to_bytes(unit, order)),
        st.integers(0x10FFFF, 0xFFFFFFFF).map(lambda n: n.to_bytes(4, "big")),
        st.binary(min_size=1, max_size=3),
    )
    return charset, mariadb, b"".join(draw(st.lists(pieces, max_size=12)))


@given(_wide_mixtures())
@settings(max_examples=400, deadline=None)
def test_compiled_wide_text_declines_exactly_what_the_decoder_refuses(case: tuple[str, bool, bytes]) -> None:
    """Any bytes in a wide charset: the compiled text is the decoder's where it reads them strictly;
    where it raises (the Python path replaces, and says so), the compiled code declines the event
    and the walk refuses it."""
    assert transcoder is not None
    charset, mariadb, raw = case
    collation = collation_id_of_charset(charset)
    assert collation is not None
    columns = (_varchar(0, collation, mariadb),)
    body = _image(raw[:255])
    expected, fields, replaced = _python_rows(body, columns, mariadb)
    rendered, avro = _compiled(body, columns)
    layout = walk_layout(columns)
    assert layout is not None
    if replaced:
        assert rendered is None and avro is None and transcoder.count_rows(body, layout, 1) < 0
    else:
        assert rendered == expected and avro == [(None, field) for field in fields]
        assert transcoder.count_rows(body, layout, 1) == 1


def _near_misses(charset: str, mariadb: bool) -> list[bytes]:
    """Each block's first, middle and last code, with each byte in turn the one next to a byte
    that position takes (below the lowest, above the highest, either side of a gap), and cut
    short; between ASCII."""
    table = charmaps.load(charset, flavour(mariadb))
    assert table is not None
    out = []
    for block, runs in table.blocks:
        size = sum(run.count for run in runs)
        for place in (0, size // 2, size - 1):
            code = charmaps.code_at(block, place)
            for k, values in enumerate(block):
                edges = {v + d for v in values for d in (-1, 1)} - set(values)
                out += [b"a" + code[:k] + bytes([e]) + code[k + 1 :] + b"z" for e in sorted(edges) if 0 <= e <= 255]
            out += [b"a" + code[:cut] for cut in range(1, len(code))]
    return out


@pytest.mark.parametrize(("charset", "mariadb"), COMPILED_MULTI_BYTE,
                         ids=[f"{c}-{flavour(m)}" for c, m in COMPILED_MULTI_BYTE])  # fmt: skip
def test_compiled_multi_byte_text_at_the_edges_of_its_codes(charset: str, mariadb: bool) -> None:
    """Codes with a byte just outside what its position takes, and codes cut short: the compiled
    text is the rows decoder's, or the event is declined where the decoder refuses the bytes (and
    the walk refuses them too); a value a row, each its own event. The next column's length, 48,
    is 0x30, a byte a code's later positions take: a look-up that reads past its value meets it."""
    assert transcoder is not None
    collation = collation_id_of_charset(charset)
    assert collation is not None
    columns = (_varchar(0, collation, mariadb), _varchar(1, collation, mariadb))
    layout = walk_layout(columns)
    assert layout is not None
    declined = 0
    for value in _near_misses(charset, mariadb):
        body = _image(value, b"0" * 48)
        expected, fields, replaced = _python_rows(body, columns, mariadb)
        rendered, avro = _compiled(body, columns)
        if replaced:
            declined += 1
            assert (rendered, avro) == (None, None) and transcoder.count_rows(body, layout, 1) < 0, value.hex()
        else:
            assert (rendered, avro) == (expected, [(None, field) for field in fields]), value.hex()
            assert transcoder.count_rows(body, layout, 1) == 1, value.hex()
    assert declined > 0


def test_a_code_table_is_learnt_once_and_checked() -> None:
    assert transcoder is not None
    number = code_table_number("gbk")
    assert number is not None
    nodes, texts, no_range = code_table("gbk") or (b"", b"", b"")
    transcoder.learn_code_table(number, nodes, texts)  # the same again: nothing changes
    child = (CODE_CHILD | 0).to_bytes(4, sys.byteorder)  # a node that leads back to itself
    past = (1 << 4 | 2).to_bytes(4, sys.byteorder) * 256  # every byte's text 2 bytes from 1: not UTF-8
    ranged = CODE_RANGE.to_bytes(4, sys.byteorder) * 256  # every byte a code of the range
    for bad in ((number, nodes, texts[:-1]), (number, nodes[:-4], texts), (len(CODE_TABLES), nodes, texts),
                (number, child + bytes(1020), b""), (number, past, b"\xff\xff\xff"),
                (number, nodes, texts, _range(2, [(0, 0x41)])),  # gbk's own, and a range: not the one learnt
                (number, ranged, b"")):  # fmt: skip
        with pytest.raises(ValueError, match="code table"):
            transcoder.learn_code_table(*bad)
    assert no_range == b""
    column = COLUMN.pack(OP_TEXTMB, 0, 1, len(CODE_TABLES), -1, -1, 0)  # a table never learnt
    with pytest.raises(ValueError, match="malformed"):
        transcoder.render_json(_image(b"a"), column, KINDS[RowsKind.WRITE], b"", (b'"c":',))


def _range(width: int, runs: list[tuple[int, int]], spans: tuple[int, int] = (0x30, 0x39)) -> bytes:
    """A range (native_spec.CODE_TABLES) of `width` positions, each byte in `spans`."""
    words = [width, *spans * width, *(0, 0) * (CODE_RANGE_WIDTHS - width)]
    return array.array("I", words + [n for run in runs for n in run]).tobytes()


def test_a_range_is_checked_when_learnt() -> None:
    """A range is learnt only as native_spec says one is: a range that is not one never reads a
    code (a fresh module each time: a table is learnt once)."""
    no_text = NUMBERS["CODE_RANGE_NO_TEXT"]
    good = _range(2, [(0, 0x41), (50, no_text), (60, 0x10FFFF - 39)])  # 100 codes: 30-39 30-39
    bad = {
        "a width of 0": _range(0, [(0, 0x41)]),
        "a width of 5": array.array("I", [5, *(0x30, 0x39) * 5, 0, 0x41]).tobytes(),
        "a low byte above its high one": _range(2, [(0, 0x41)], (0x39, 0x30)),
        "a byte past 0xff": _range(2, [(0, 0x41)], (0x30, 0x100)),
        "no run": _range(2, []),
        "a half run": _range(2, [(0, 0x41)]) + bytes(4),
        "a first run after place 0": _range(2, [(1, 0x41)]),
        "runs out of order": _range(2, [(0, 0x41), (50, 0x61), (40, 0x71)]),
        "a run past the block": _range(2, [(0, 0x41), (100, 0x61)]),
        "a run into the surrogates": _range(2, [(0, 0xD7FF)]),
        "a run past U+10FFFF": _range(2, [(0, 0x10FFFF - 98)]),
        "bytes not of uint32s": _range(2, [(0, 0x41)])[:-1],
    }
    root = array.array("I", [0] * 512)
    root[0x30] = CODE_CHILD | 1
    for second in range(0x30, 0x3A):
        root[256 + second] = CODE_RANGE
    learn = "from connector.native import transcoder as t; import sys; t.learn_code_table(0, *eval(sys.argv[1]))"
    for why, range_ in [("good", good), *bad.items()]:
        done = subprocess.run([sys.executable, "-c", learn, repr((root.tobytes(), b"", range_))],
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert (done.returncode == 0) == (why == "good"), (why, done.stderr[-500:])
        assert why == "good" or "not a code table" in done.stderr, (why, done.stderr[-500:])


def test_a_column_that_says_it_keeps_ascii_is_refused_where_its_table_does_not() -> None:
    assert transcoder is not None
    swe7 = collation_id_of_charset("swe7")
    assert swe7 is not None
    program = json_program((_varchar(0, swe7),))
    assert program is not None and COLUMN.unpack(program.columns)[-1] == 0  # swe7 prints 0x40 as É
    *fields, _ = COLUMN.unpack(program.columns)
    claimed = COLUMN.pack(*fields, COL_ASCII)
    names = (b'"c":',)
    with pytest.raises(ValueError, match="malformed"):
        transcoder.render_json(_image(b"@"), claimed, KINDS[RowsKind.WRITE], program.strings, names)
    rendered = transcoder.render_json(_image(b"@"), program.columns, KINDS[RowsKind.WRITE], program.strings, names)
    assert rendered == ["{\"c\":\"É\"}"]  # the table's text, looked up


def _avro_string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return varint(len(raw)) + raw


def test_compiled_utf8_declines_what_python_replaces() -> None:
    """A surrogate in MariaDB's utf8mb4: the compiled code declines (strict UTF-8), and the Python
    path, which then decodes the event, replaces it and says so."""
    assert transcoder is not None
    columns = (_varchar(0, 45),)
    program = json_program(columns)
    assert program is not None
    body = _image(b"a\xed\xa0\x80")
    assert transcoder.render_json(body, program.columns, KINDS[RowsKind.WRITE], program.strings, (b'"c":',)) is None
    table = TableMapEvent(1, 0, "db", "t", columns, raw=b"t", mariadb=True)
    assert RowsDecoderCache().decode(body, table, RowsKind.WRITE, (0,), (), False) == ([(None, ("a\ufffd",))], (0,))


# -- TABLE_MAP labels, statement text -------------------------------------------------------


def test_enum_labels_decode_as_their_server_has_them() -> None:
    labels = [b"\x81\x5f", b"\x82\xa0"]  # sjis: "\\" and "あ" (Python's shift_jis: U+FF3C for the first)
    enum_values = bytes([6, 1 + sum(1 + len(v) for v in labels), len(labels)]) + b"".join(
        bytes([len(v)]) + v for v in labels
    )
    charset = bytes([10, 1, collation_id_of_charset("sjis") or 0])  # ENUM_AND_SET_DEFAULT_CHARSET
    head = (1).to_bytes(6, "little") + b"\x01\x00" + b"\x02db\x00" + b"\x01t\x00"
    body = head + b"\x01\xfe" + b"\x02\xf7\x01" + b"\x00" + enum_values + charset  # one ENUM(1 byte) column
    for mariadb in (True, False):
        table = decode_table_map(Reader(body), 8, mariadb)
        assert table.columns[0].enum_values == ("\\", "あ")


def test_statement_text_decodes_in_its_client_charset() -> None:
    sjis = collation_id_of_charset("sjis") or 0
    status = bytes([4]) + struct.pack("<HHH", sjis, sjis, 8)  # Q_CHARSET_CODE
    text = b"INSERT INTO t VALUES ('\x81\x5f', '\x80')"
    body = struct.pack("<IIBHH", 1, 0, 2, 0, len(status)) + status + b"db\x00" + text
    header = EventHeader(0, EventType.QUERY_EVENT, 1, 19 + len(body), 0, 0)
    for mariadb in (True, False):
        query = decode_query(Reader(body), header, 13, mariadb).query
        assert query == "INSERT INTO t VALUES ('\\', '\\x80')"  # a byte no code starts at: escaped


# -- the files --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FILES)
def test_each_file_says_where_it_comes_from(name: str) -> None:
    text = (resources.files(charmaps.__name__) / name).read_text(encoding="utf-8")
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert re.search(r"as (MariaDB|MySQL) \d+\.\d+\.\d+ \(port \d+\)", header), header
    assert "Made by: python deploy/charmaps.py --port" in header and "--out connector/binlog/charmaps" in header
    assert parse(name.split(".", maxsplit=1)[0], text).size() > 0


def test_a_file_reads_back_as_it_was_written() -> None:
    codes: dict[bytes, str | None] = {bytes([b]): chr(b) for b in range(0x80)}
    codes.update({bytes([lead, trail]): None if trail % 7 == 0 else chr(0x4E00 + lead * 256 + trail)
                  for lead in (0x81, 0x82) for trail in [*range(0x40, 0x7F), *range(0x80, 0xFF)]})  # fmt: skip
    codes[b"\x83\x40"] = "ab"
    blocks = []
    for width in (1, 2):
        for block in blocks_of({c for c in codes if len(c) == width}):
            blocks.append((block, runs_of([(c, codes[c]) for c in block_codes(block)])))
    table = Charmap("test", tuple(blocks))
    again = parse("test", render(table, "a test"))
    assert again == table and dict(again.items()) == codes
    assert [len(b) for b, _ in again.blocks] == [1, 2, 2]  # 0x83 takes only 0x40: a block of its own


BROKEN = [
    ("00 1 0041\n", "a run outside a block"),
    ("codes 00\n00 1\n", "a run is `code count text`"),
    ("codes\n", "a block of no bytes"),
    ("codes 00-01\n00 1 0041\n", "runs of 1 codes, not 2"),
    ("codes 00-01\n01 2 0041\n", "run at 01 is not the block's code 0"),
    ("codes 00-01\n00 2 0041+0042\n", "several code points for several codes"),
    ("codes 00-1ff\n", "past ff"),
]


@pytest.mark.parametrize(("text", "says"), BROKEN)
def test_a_broken_file_names_its_line(text: str, says: str) -> None:
    with pytest.raises(FormatError, match=rf"charmap x line \d+: .*{re.escape(says)}"):
        parse("x", text)


def test_runs_follow_the_block_order_across_its_holes() -> None:
    """gbk's second bytes skip 0x7f: a run of codes around it is one run of the block, not two."""
    block = (b"\x81", bytes([*range(0x40, 0x7F), *range(0x80, 0xFF)]))
    runs = runs_of([(code, chr(0x100 + k)) for k, code in enumerate(block_codes(block))])
    assert runs == (Run(b"\x81\x40", 190, (0x100,)),)
