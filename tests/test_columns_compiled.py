"""[[kafka.columns]] tables in the compiled code (issue 33): a column the rule leaves out or masks
(native_spec.COLUMN_FLAGS' COL_DROP and COL_MASK) is read and checked as its op reads it, then
not written, or written as the mask. tests/test_lane.py holds whole sessions of every corpus case
to the per-message path's bytes; here, the flags' own rules, and which rules are compiled.

No services: this runs in `make unit` too.
"""

from __future__ import annotations

import struct

import pytest

from connector.binlog.constants import RowsKind
from connector.binlog.rowplan import KINDS, OP_INT, OP_UTF8, Strings
from connector.columns import DROP, KEEP, MASK, ColumnRules
from connector.config import ColumnRule
from connector.native import transcoder
from connector.native_spec import COL_STRING_SHIFT, COLUMN_FLAGS, record
from connector.schema.ddl import apply_ddl
from connector.schema.model import Schema, Table

COLUMN = record("column_t")
ASCII, DROP_FLAG, MASK_FLAG = COLUMN_FLAGS["COL_ASCII"], COLUMN_FLAGS["COL_DROP"], COLUMN_FLAGS["COL_MASK"]
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


def test_a_shaped_column_s_value_is_still_checked() -> None:
    """Text that is not UTF-8 declines the event though the column is left out or masked: the
    Python path decodes it, replaces it and says so."""
    text = (OP_UTF8, 0, 1, 0, -1, -1)
    for flags in (DROP_FLAG, MASK_FLAG):
        assert _transcode(b"\x00\x02ok", (*text, flags), strings=_strings(MASKED)) is not None
        assert _transcode(b"\x00\x02\xff\xfe", (*text, flags), strings=_strings(MASKED)) is None


@pytest.mark.parametrize(
    "flags",
    [DROP_FLAG | MASK_FLAG, MASK_FLAG | 2 << COL_STRING_SHIFT, 1 << COL_STRING_SHIFT, -1, 8, ASCII],
    ids=["drop and mask", "a mask past the strings", "a string without a mask", "negative", "no such flag",
         "ascii on an INT"],
)  # fmt: skip
def test_flags_that_do_not_hold_are_refused(flags: int) -> None:
    with pytest.raises(ValueError, match="malformed"):
        _transcode(ROW, (*INT, 0), (*INT, 0), (*INT, flags), strings=_strings(MASKED, MASKED))


def test_canal_json_s_renderer_takes_no_shaped_column() -> None:
    """canal-json output is the Python path's: its renderer refuses the flags."""
    assert transcoder is not None
    for flags in (0, DROP_FLAG, MASK_FLAG):
        program = COLUMN.pack(*INT, 0) + COLUMN.pack(*INT, flags)
        names = (b'"a":', b'"b":')
        if flags == 0:
            assert transcoder.render_json(ROW[:9], program, KINDS[RowsKind.WRITE], _strings(MASKED), names)
            continue
        with pytest.raises(ValueError, match="malformed"):
            transcoder.render_json(ROW[:9], program, KINDS[RowsKind.WRITE], _strings(MASKED), names)


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
        (ColumnRule(r"db\.t", exclude=["w"], mask=["v"], hash=["h"]), None),  # a hash: its text's digest
        (ColumnRule(r"db\.t", exclude=["h"], hash=["h"]), (KEEP, KEEP, KEEP, DROP)),  # hashing what is left out
        (ColumnRule(r"db\.t", mask=["ID"]), None),  # a masked key column
        (ColumnRule(r"db\.other", mask=["v"]), None),  # no rule for the table
    ],
)  # fmt: skip
def test_which_rules_the_compiled_code_writes(rule: ColumnRule, treatment: tuple[int, ...] | None) -> None:
    shaping = ColumnRules.of([rule]).shaping(TABLE)
    assert (shaping.treatment if shaping is not None else None) == treatment
    if shaping is not None:
        kept = [c.name for c, t in zip(TABLE.columns, treatment or ()) if t != DROP]
        assert [c.name for c in shaping.table.columns] == kept
        assert shaping.mask == "*" * rule.mask_chars
