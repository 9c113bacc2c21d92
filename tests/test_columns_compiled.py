"""[[kafka.columns]] tables in the compiled code (issue 33): a column the rule leaves out or masks
(native_spec.COLUMN_FLAGS' COL_DROP and COL_MASK) is read and checked as its op reads it, then
not written, or written as the mask; a hashed one (COL_HASH) is read as its canal text and
written as the hex SHA-256 of the salt and that text. tests/test_lane.py holds whole sessions of
every corpus case to the per-message path's bytes; here, the flags' own rules, and which rules
are compiled.

No services: this runs in `make unit` too.
"""

from __future__ import annotations

import hashlib
import logging
import random
import struct

import pytest

from connector.binlog.constants import RowsKind
from connector.binlog.rowplan import KINDS, OP_INT, OP_UTF8, Strings
from connector.columns import DROP, HASH, KEEP, MASK, ColumnRules
from connector.config import ColumnRule
from connector.native import transcoder
from connector.native_spec import COL_STRING_SHIFT, COLUMN_FLAGS, record
from connector.schema.ddl import apply_ddl
from connector.schema.model import Schema, Table

COLUMN = record("column_t")
SQLTYPE = record("sqltype_t")
ASCII, DROP_FLAG, MASK_FLAG = COLUMN_FLAGS["COL_ASCII"], COLUMN_FLAGS["COL_DROP"], COLUMN_FLAGS["COL_MASK"]
HASH_FLAG = COLUMN_FLAGS["COL_HASH"]
MASKED = b"\x06***"  # an Avro string: its length (3, zig-zag), its bytes


def _transcode(body: bytes, *columns: tuple[int, ...], strings: bytes = b"") -> list[tuple[bytes | None, bytes]] | None:
    assert transcoder is not None
    program = b"".join(COLUMN.pack(*c) for c in columns)
    write = KINDS[RowsKind.WRITE]
    return transcoder.transcode(body, program, write, b"", strings, b"", b"F", b"R", b"N", b"O", b"T", 0)


def _strings(*texts: bytes) -> bytes:
    strings = Strings()
    strings.add(list(texts))
    return strings.packed()


ROW = b"\x00" + struct.pack("<iii", 7, 8, 9)  # an image of three INTs, none null
INT = (OP_INT, 4, 0, 0, -1, -1)


def test_a_dropped_column_is_read_and_not_written_a_masked_one_is_its_mask() -> None:
    assert _transcode(ROW, (*INT, 0), (*INT, DROP_FLAG), (*INT, MASK_FLAG), strings=_strings(MASKED)) == [
        (None, b"F" + b"\x0e" + MASKED + b"\x00" + b"NT\x00")
    ]
    # a null stays null (its branch); a masked value gets the value branch before the mask
    nullable = (OP_INT, 4, 0, 0, 0, 1)
    image = b"\x04" + struct.pack("<ii", 7, 8)  # the third column null: its null branch, 0
    masked = (*nullable, MASK_FLAG)
    written = _transcode(image, (*nullable, 0), masked, masked, strings=_strings(MASKED))
    assert written == [(None, b"F" + b"\x02\x0e" + b"\x02" + MASKED + b"\x00" + b"\x00" + b"NT\x00")]
    # the mask is the program's string the flags name
    second = MASK_FLAG | 1 << COL_STRING_SHIFT
    assert _transcode(ROW, (*INT, 0), (*INT, 0), (*INT, second), strings=_strings(b"\x02?", MASKED)) == [
        (None, b"F" + b"\x0e\x10" + MASKED + b"\x00" + b"NT\x00")
    ]


def _digest(salt: str, text: str) -> bytes:
    """A hashed value as an Avro string: 64 hex digits (length 64, zig-zag: 0x80 0x01)."""
    return b"\x80\x01" + hashlib.sha256((salt + text).encode()).hexdigest().encode()


def test_a_hashed_column_is_the_sha256_of_the_salt_and_its_canal_text() -> None:
    salt = "s\u00e4lt"
    strings = _strings(salt.encode())
    assert _transcode(ROW, (*INT, 0), (*INT, HASH_FLAG), (*INT, 0), strings=strings) == [
        (None, b"F" + b"\x0e" + _digest(salt, "8") + b"\x12" + b"\x00" + b"NT\x00")
    ]
    # text is hashed as the flat message holds it: JSON's escapes undone, every byte's character
    text = (OP_UTF8, 0, 1, 0, 0, 1)
    for value in (
        "plain",
        'quote " back \\ slash',
        "new\nline\ttab\x01\x1f\x7f",
        "\u00e9\u4e2d\U0001f600",
        "",
        "x" * 200,
    ):
        raw = value.encode()
        image = b"\x00" + bytes([len(raw)]) + raw
        assert _transcode(image, (*text, HASH_FLAG), strings=strings) == [
            (None, b"F\x02" + _digest(salt, value) + b"\x00NT\x00")
        ]
    assert _transcode(b"\x01", (*text, HASH_FLAG), strings=strings) == [(None, b"F\x00\x00NT\x00")]  # a null stays null
    # a salt long enough that salt and text cross SHA-256's 64-byte blocks in every way
    for length in (0, 1, 55, 56, 63, 64, 65, 119, 120, 128):
        long_salt = "k" * length
        assert _transcode(ROW, (*INT, HASH_FLAG), (*INT, 0), (*INT, 0), strings=_strings(long_salt.encode())) == [
            (None, b"F" + _digest(long_salt, "7") + b"\x10\x12" + b"\x00" + b"NT\x00")
        ]


def test_sha256_is_hashlib_s_both_ways() -> None:
    """The digest with the CPU's SHA extensions and without, for a salt and a text of lengths around
    SHA-256's 64-byte blocks and its padding's 56-byte edge."""
    assert transcoder is not None
    rng = random.Random(256)
    for salt_length in (0, 1, 55, 56, 63, 64, 65, 130):
        for length in range(0, 260):
            salt, text = rng.randbytes(salt_length), rng.randbytes(length)
            want = hashlib.sha256(salt + text).hexdigest()
            assert transcoder.sha256(salt, text) == transcoder.sha256(salt, text, True) == want, (salt_length, length)


def test_a_shaped_column_s_value_is_still_checked() -> None:
    """Text that is not UTF-8 declines the event though the column is left out, masked or hashed:
    the Python path decodes it, replaces it and says so."""
    text = (OP_UTF8, 0, 1, 0, -1, -1)
    for flags in (DROP_FLAG, MASK_FLAG, HASH_FLAG):
        assert _transcode(b"\x00\x02ok", (*text, flags), strings=_strings(MASKED)) is not None
        assert _transcode(b"\x00\x02\xff\xfe", (*text, flags), strings=_strings(MASKED)) is None


@pytest.mark.parametrize(
    "flags",
    [DROP_FLAG | MASK_FLAG, MASK_FLAG | HASH_FLAG, DROP_FLAG | HASH_FLAG, MASK_FLAG | 2 << COL_STRING_SHIFT,
     HASH_FLAG | 2 << COL_STRING_SHIFT, 1 << COL_STRING_SHIFT, -1, 16, ASCII],
    ids=["drop and mask", "mask and hash", "drop and hash", "a mask past the strings", "a salt past the strings",
         "a string without a mask or salt", "negative", "no such flag", "ascii on an INT"],
)  # fmt: skip
def test_flags_that_do_not_hold_are_refused(flags: int) -> None:
    with pytest.raises(ValueError, match="malformed"):
        _transcode(ROW, (*INT, 0), (*INT, 0), (*INT, flags), strings=_strings(MASKED, MASKED))


def test_json_lines_refuse_a_shaped_column_canal_json_writes_it() -> None:
    """The JSON lines renderer (`sluice decode`, `tail`) has no rules: it refuses the flags. canal-json's
    messages write them: a dropped column out of `data` and `sqlType`, a masked one as its mask (the
    program's string, JSON text), a hashed one as the hex SHA-256 of the salt and its text."""
    assert transcoder is not None
    canal_names = Strings()
    canal_names.add([b'"a":', b'"b":'])
    types = SQLTYPE.pack(4, 4, 4) + SQLTYPE.pack(12, 12, 12)
    digest = hashlib.sha256("sält8".encode()).hexdigest()
    written = {0: b'"a":"7","b":"8"', DROP_FLAG: b'"a":"7"', MASK_FLAG: b'"a":"7","b":"***"',
               HASH_FLAG: f'"a":"7","b":"{digest}"'.encode()}  # fmt: skip
    codes = {0: b'"a":4,"b":12', DROP_FLAG: b'"a":4', MASK_FLAG: b'"a":4,"b":12', HASH_FLAG: b'"a":4,"b":12'}
    for flags, data in written.items():
        string = "sält".encode() if flags == HASH_FLAG else b"***"
        program = COLUMN.pack(*INT, 0) + COLUMN.pack(*INT, flags)
        names = (b'"a":', b'"b":')
        canal = transcoder.canal_json(ROW[:9], program, KINDS[RowsKind.WRITE], b"", _strings(string),
                                      canal_names.packed(), types, False, b"", b"", b"", b"")  # fmt: skip
        assert canal == [(None, b'{"data":[{' + data + b'}null{' + codes[flags] + b"}")], flags
        key = struct.pack("<3i", 1, -1, -1)
        keyed = transcoder.canal_json(ROW[:9], program, KINDS[RowsKind.WRITE], key, _strings(string),
                                      canal_names.packed(), types, False, b"", b"", b"", b"")  # fmt: skip
        # keyed by its mask or digest, as the Python path keys a row; a key left out declines the event
        assert (keyed[0][0] if keyed else None) == (None if flags == DROP_FLAG else b"{" + data[8:] + b"}")
        if flags == 0:
            assert transcoder.render_json(ROW[:9], program, KINDS[RowsKind.WRITE], _strings(string), names)
            continue
        with pytest.raises(ValueError, match="malformed"):
            transcoder.render_json(ROW[:9], program, KINDS[RowsKind.WRITE], _strings(string), names)


def _table(sql: str) -> Table:
    schema = Schema()
    apply_ddl(schema, sql, "db")
    return next(iter(schema.tables.values()))


TABLE = _table("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10), w INT, h VARCHAR(10))")


@pytest.mark.parametrize(
    ("rule", "treatment"),
    [
        (ColumnRule(r"db\.t", exclude=["w"], mask=["v"]), (KEEP, MASK, DROP, KEEP)),
        (ColumnRule(r"db\.t", include=["id", "h"]), (KEEP, DROP, DROP, KEEP)),
        (ColumnRule(r"db\.t", exclude=["w"], mask=["v"], hash=["h"]), (KEEP, MASK, DROP, HASH)),
        (ColumnRule(r"db\.t", hash=["id"]), (HASH, KEEP, KEEP, KEEP)),  # a hashed key column: keyed by its digest
        (ColumnRule(r"db\.t", exclude=["h"], hash=["h"]), (KEEP, KEEP, KEEP, DROP)),  # hashing what is left out
        (ColumnRule(r"db\.t", mask=["ID"]), (MASK, KEEP, KEEP, KEEP)),  # a masked key column: by its mask
        (ColumnRule(r"db\.other", mask=["v"]), None),  # no rule for the table
    ],
)  # fmt: skip
def test_which_rules_the_compiled_code_writes(rule: ColumnRule, treatment: tuple[int, ...] | None) -> None:
    shaping = ColumnRules([rule]).shaping(TABLE)
    assert (shaping.treatment if shaping is not None else None) == treatment
    if shaping is not None:
        kept = [c.name for c, t in zip(TABLE.columns, treatment or ()) if t != DROP]
        assert [c.name for c in shaping.table.columns] == kept
        assert shaping.mask == "*" * rule.mask_chars and shaping.salt == rule.hash_salt


def test_a_masked_key_column_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """Masking a key column keys every row by the mask: one WARN line says so, once a table; a
    hashed key column (a key per row still) says nothing."""
    table = _table("CREATE TABLE masked_keys (a INT, b INT, v INT, PRIMARY KEY (a, b))")
    with caplog.at_level(logging.WARNING, logger="sluice.columns"):
        ColumnRules([ColumnRule(r"db\.masked_keys", hash=["a", "b"])]).table(table)
        assert not caplog.records
        for _ in range(2):
            ColumnRules([ColumnRule(r"db\.masked_keys", mask=["b"])]).table(table)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "db.masked_keys: key column(s) b masked" in line and "hash them" in line
