"""What the compiled kernel (connector/csrc/) and the Python code share, written once.

The C code includes connector/csrc/spec.h, which this module writes (`python -m
connector.native_spec`; `make install` runs it and tests/test_native_spec.py fails when the
file is stale). The Python side reads the same names from here: the column operations of a
transcode program and the record layouts it is packed in, the event types and flags the kernel
handles (MySQL's own names, from connector/binlog/constants.py), the reasons a kernel run stops,
and the tables both sides compute with (Kafka's murmur2 constants, DECIMAL's digit widths).
Nothing here is hand-kept in C.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

from connector.binlog import constants as c

# Column operations of a transcode program (connector/avro/transcode.py builds them).
OPS: dict[str, int] = {
    "OP_INT": 1,  # little-endian signed, width 1/2/3/4/8 -> zigzag varint
    "OP_UINT": 2,  # little-endian unsigned, width 1/2/3/4 -> zigzag varint
    "OP_UINT64": 3,  # BIGINT UNSIGNED -> Avro decimal(20,0) bytes
    "OP_FLOAT": 4,  # 4 bytes, as stored
    "OP_DOUBLE": 5,  # 8 bytes, as stored
    "OP_DECIMAL": 6,  # NEWDECIMAL(a, b) -> Avro decimal bytes of the unscaled value
    "OP_DATE": 7,  # 3 bytes -> days since 1970-01-01, null for zero dates
    "OP_DATETIME2": 8,  # 5 + frac bytes, fsp a -> microseconds, null for zero dates
    "OP_TIMESTAMP2": 9,  # 4 + frac bytes, fsp a -> microseconds, null for zero
    "OP_YEAR": 10,  # 1 byte -> 0 or 1900 + v
    "OP_UTF8": 11,  # length-prefixed (a bytes) strict UTF-8 -> Avro string
    "OP_BYTES": 12,  # length-prefixed (a bytes), zero-padded to b bytes -> Avro bytes
    "OP_TIME2": 13,  # 3 + frac bytes, fsp a -> signed microseconds (Avro time-micros)
    "OP_BIT": 14,  # big-endian, width 1-8 -> Avro long (BIT(1) to BIT(63))
    "OP_BIT64": 15,  # big-endian, width 8 -> Avro decimal(20,0) bytes (BIT(64))
    "OP_ENUM": 16,  # little-endian index, width 1/2 -> its label (strings a to a + b - 1), "" for 0
    "OP_SET": 17,  # little-endian bits, width 1-8 -> the labels of the bits set (strings a..), comma-joined
    "OP_TEXT8": 18,  # length-prefixed (a bytes) single-byte charset -> UTF-8 by the 256 strings from b
    "OP_JSON": 19,  # length-prefixed (a bytes) MySQL binary JSON -> its text as MySQL prints it (jsonb.c)
    "OP_TEXTMB": 20,  # length-prefixed (a bytes) multi-byte charset -> UTF-8 by code table b (CODE_TABLES)
    "OP_WIDE": 21,  # length-prefixed (a bytes) UTF-16, UTF-32 or UCS-2 text (WIDE_FORMS b) -> UTF-8
    "OP_GEOMETRY": 22,  # length-prefixed (a bytes) SRID and WKB -> Avro bytes, as they are
    "OP_VECTOR": 23,  # length-prefixed (a bytes) little-endian floats -> Avro array of float (no NaN)
}

# The Unicode charsets of more than one byte a unit, as an OP_WIDE column's b (and a WALK_WIDE walk's
# table) names them; each read as the rows decoder reads it (connector/binlog/charsets.py): Python's
# UTF-16/UTF-32 codecs, and ucs2's own (two bytes a character, a surrogate has no text).
WIDE_FORMS: dict[str, int] = {"WIDE_UTF16": 0, "WIDE_UTF16LE": 1, "WIDE_UTF32": 2, "WIDE_UCS2": 3}

# The multi-byte charsets the compiled code reads, by number (an OP_TEXTMB column's b): by name
# those whose table (connector/binlog/charmaps/) both servers share, as `charset.flavour` those whose
# tables differ or that one server lacks (one each; a column's server picks it: ColumnMeta.mariadb).
# Each is handed to the module once, the first time a column needs it (rowplan.code_table_number),
# and is shared by every program that names it. A code table: nodes of 256 native-endian uint32
# entries, node 0 the root, looked up a byte at a time: 0, no code of the charset goes on with this
# byte; CODE_CHILD | n, the code goes on in node n (n is above the node looked up in, so a look-up
# ends); CODE_RANGE, the code is one of the table's range (below); any other entry (below
# CODE_RANGE) ends the code, its text (UTF-8) the (entry & CODE_TEXT_LENGTH) bytes of the table's
# texts from (entry >> CODE_TEXT_SHIFT). A byte sequence two codes begin with resolves as the rows
# decoder's walk resolves it (connector/binlog/charmaps/decoding.py: the shorter code).
# A range: a block of codes too many for nodes (gb18030's 1,587,600 four-byte codes would take a
# node per three-byte prefix, about 160 MB), read by arithmetic: native-endian uint32s, its width
# (CODE_RANGE_WIDTHS bytes at most), then for each of CODE_RANGE_WIDTHS positions the lowest and
# highest byte there (the block: every code whose bytes are each within theirs), then runs, each
# (place, code point): the block's codes from that place on (the last byte counting fastest) are
# that code point and the next ones, up to the next run's place; CODE_RANGE_NO_TEXT for the code
# point: the server shows them as "?". A table without a range has none (b"").
CODE_TABLES: tuple[str, ...] = (
    "big5", "cp932", "euckr", "gb2312", "gbk", "sjis", "eucjpms.mariadb", "eucjpms.mysql", "ujis.mariadb", "ujis.mysql",
    "gb18030.mysql",
)  # fmt: skip

# A program's strings (ENUM and SET labels, single-byte charsets' characters), one bytes object:
# the count n (int32), n + 1 int32 offsets into what follows (string k: offsets[k] to
# offsets[k + 1]), then the strings' bytes. An empty string in a charset's table: a byte the
# charset does not map (Python's decoder raises on it).
STRINGS_HEADER = "<i"

# Records packed as little-endian int32 fields, in this order (C: one struct of int32_t each).
RECORDS: dict[str, tuple[str, ...]] = {
    "column_t": ("op", "width", "a", "b", "null_branch", "value_branch", "flags"),  # a program's column
    "key_t_": ("column", "null_branch", "value_branch"),  # a key field: the program column it copies
    # a column of a walk (rowplan.walk_layout); check: WALK_CHECKS; table: WALK_CODES's code table,
    # WALK_WIDE's form
    "walk_t": ("width", "prefix", "check", "table"),
    # canal-json's sqlType of a column (connector/sqltypes.CanalType): a value's, a NULL's, and an
    # UNSIGNED value's above its width's signed maximum (the value's where none differs; only
    # OP_UINT and OP_UINT64 have another)
    "sqltype_t": ("value", "null", "wider"),
}

# A program column's flags (column_t.flags; 0 for every op but these).
COLUMN_FLAGS: dict[str, int] = {
    # OP_TEXT8 whose charset keeps every byte 0x00-0x7F as itself (latin1 and most single-byte
    # charsets; not swe7): those bytes are copied without looking them up. The C code checks it
    # against the column's strings before it takes the program.
    "COL_ASCII": 1,
    # A column a [[kafka.columns]] rule shapes (connector/columns.py): its value is read and checked
    # as the op reads it (a value the Python path would replace declines the event), then
    # COL_DROP writes nothing of it (an excluded column), COL_MASK writes its value branch and the
    # program's string (flags >> COL_STRING_SHIFT: the mask, Avro-encoded) instead (a masked column;
    # a null stays null). COL_HASH reads the value as its canal text (the flat message's) and writes
    # its value branch and the hex SHA-256 of the program's string (the salt, UTF-8) and that text
    # (a hashed column; a null stays null). canal-json's programs (connector/canal.py) read them
    # alike, their mask string JSON-escaped, without branches.
    "COL_DROP": 2,
    "COL_MASK": 4,
    "COL_HASH": 8,
}
COL_STRING_SHIFT = 8

# What a walk checks of a length-prefixed value's bytes (walk_t.check), beside their length: that
# the Python decoding cannot fail on them after the walk took them (rowplan.walk_layout).
WALK_CHECKS: dict[str, int] = {
    "WALK_BYTES": 0,  # nothing: any bytes
    "WALK_UTF8": 1,  # strict UTF-8
    "WALK_JSON": 2,  # MySQL binary JSON the compiled printer takes (jsonb.c: jsonb_ok)
    "WALK_CODES": 3,  # codes of code table `table` (CODE_TABLES), one after another
    "WALK_WIDE": 4,  # characters of WIDE_FORMS's `table`, one after another
    "WALK_FLOATS": 5,  # whole 4-byte floats (VECTOR: values.decode_vector refuses a part of one)
}

# A rows event's operation, as the transcoder and the kernel number it.
KINDS: dict[str, int] = {"KIND_WRITE": 0, "KIND_UPDATE": 1, "KIND_DELETE": 2}

# Why a kernel run returned (connector/lane.py).
REASONS: dict[str, int] = {
    "STOP_NEED_BYTES": 0,  # the buffer ends inside a packet (or is empty): read more
    "STOP_CONTROL": 1,  # the next packet is Python's: anything the kernel does not handle exactly
    "STOP_FULL": 2,  # enough messages for one hand-off to Kafka: come back
    "STOP_UNTAUGHT": 3,  # the next packet is a BEGIN, TABLE_MAP (or a payload holding one) not taught yet
}

# What crosses the kernel's boundary, by name. kernel.c reads a plan's attributes by these names
# (connector/lane.KernelPlan, canal-json's connector/native.CanalParts) and hands its results
# back as struct sequences with these fields (connector/native.KernelRun, KernelTransaction), so no
# side counts positions in a tuple.
BOUNDARY: dict[str, tuple[str, ...]] = {
    # a table's plan: the transcode program, key fields and strings; the framing; the envelope's
    # heads for INSERT, UPDATE, DELETE; `data`'s opening, `old` null or its opening; then routing
    "PLAN": ("columns", "keys", "strings", "value_prefix", "key_prefix", "heads", "data_open", "old_null",
             "old_open", "partitions", "fixed", "key_skip", "kinds", "limit", "canal"),
    # canal-json's parts of a plan: names, sqlTypes, whether `old` is whole, whether a rows event is one
    # message, the table's message parts
    "CANAL": ("names", "types", "full_old", "per_event", "database", "mysql", "pk", "table", "kinds"),
    # what a run made (Kernel.run's doc says each)
    "RUN": ("consumed", "reason", "sequence", "topics", "counts", "bytes", "commits", "commit", "gtids",
            "last_event", "transaction", "parts"),
    # the open transaction (Kernel.release, and a run's `transaction`)
    "TRANSACTION": ("in_txn", "began", "gtid", "rows", "start", "handed", "sql"),
}  # fmt: skip

# Event types the kernel handles; every other type is Python's.
EVENTS: tuple[str, ...] = (
    "QUERY_EVENT", "XID_EVENT", "TABLE_MAP_EVENT", "ROWS_QUERY_LOG_EVENT",
    "WRITE_ROWS_EVENT_V1", "UPDATE_ROWS_EVENT_V1", "DELETE_ROWS_EVENT_V1",
    "WRITE_ROWS_EVENT", "UPDATE_ROWS_EVENT", "DELETE_ROWS_EVENT",
    "GTID_LOG_EVENT", "ANONYMOUS_GTID_LOG_EVENT", "ANNOTATE_ROWS_EVENT", "GTID_EVENT",  # GTID_EVENT: MariaDB's
    "TRANSACTION_PAYLOAD_EVENT",  # MySQL's compressed transaction: its inner events, as the parser reads them
)  # fmt: skip

# Flags and sizes, by MySQL's and MariaDB's names.
NUMBERS: dict[str, int] = {
    "LOG_EVENT_HEADER_LEN": c.LOG_EVENT_HEADER_LEN,
    "BINLOG_CHECKSUM_LEN": c.BINLOG_CHECKSUM_LEN,
    "FL_STANDALONE": c.FL_STANDALONE,
    "FL_GROUP_COMMIT_ID": c.FL_GROUP_COMMIT_ID,
    "FL_PREPARED_XA": c.FL_PREPARED_XA,
    "FL_COMPLETED_XA": c.FL_COMPLETED_XA,
    "MAX_PACKET": 0xFFFFFF,  # a payload this long continues in the next packet (replica/packets.py)
    "CRC32_RESIDUE": 0x2144DF1C,  # a CRC-32 over bytes and their own CRC (binlog/parser.verify_crc)
    "MURMUR2_SEED": 0x9747B28C,  # Kafka's murmur2 (sink/partitioning.murmur2)
    "MURMUR2_M": 0x5BD1E995,
    "OTW_PAYLOAD_HEADER_END_MARK": c.OTW_PAYLOAD_HEADER_END_MARK,  # a TRANSACTION_PAYLOAD's header fields
    "OTW_PAYLOAD_SIZE_FIELD": c.OTW_PAYLOAD_SIZE_FIELD,
    "OTW_PAYLOAD_COMPRESSION_TYPE_FIELD": c.OTW_PAYLOAD_COMPRESSION_TYPE_FIELD,
    "OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD": c.OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD,
    "PAYLOAD_COMPRESSION_ZSTD": c.PAYLOAD_COMPRESSION_ZSTD,
    "PAYLOAD_COMPRESSION_NONE": c.PAYLOAD_COMPRESSION_NONE,
    "MAX_PAYLOAD_UNCOMPRESSED": c.MAX_PAYLOAD_UNCOMPRESSED,
    "MAX_COLUMNS": c.MAX_COLUMNS,  # a rows event's column count (binlog/rows.py)
    "MAX_DECIMAL_DIGITS": 65,  # DECIMAL's widest precision (MySQL's and MariaDB's DECIMAL_MAX_PRECISION)
    "CODE_TABLE_COUNT": len(CODE_TABLES),
    "WIDE_FORM_COUNT": len(WIDE_FORMS),
    "CODE_CHILD": 0x80000000,  # a code table's entry that goes on in another node
    "CODE_TEXT_SHIFT": 4,
    "CODE_TEXT_LENGTH": 0xF,
    "CODE_RANGE": 0x40000000,  # a code table's entry: the code is one of its range's (CODE_TABLES)
    "CODE_RANGE_WIDTHS": 4,
    "CODE_RANGE_NO_TEXT": 0xFFFFFFFF,
    "COL_STRING_SHIFT": COL_STRING_SHIFT,
}

# DECIMAL: bytes of a group of 0-9 digits (decimal.cc, dig2bytes).
DIG2BYTES: tuple[int, ...] = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def record(name: str) -> struct.Struct:
    """The packing of one of RECORDS."""
    return struct.Struct(f"<{len(RECORDS[name])}i")


def header() -> str:
    """connector/csrc/spec.h."""
    lines = [
        "/* Written by connector/native_spec.py (python -m connector.native_spec): do not edit. */",
        "#ifndef SLUICE_SPEC_H",
        "#define SLUICE_SPEC_H",
        "#include <stdint.h>",
        "",
    ]
    events = {name: int(getattr(c.EventType, name)) for name in EVENTS}
    for group in (OPS, WIDE_FORMS, COLUMN_FLAGS, WALK_CHECKS, KINDS, REASONS, events):
        lines.append("enum {")
        lines.extend(f"    {name} = {value}," for name, value in group.items())
        lines.append("};")
    lines.extend(f"#define {name} {value:#x}u" for name, value in NUMBERS.items())
    for name, fields in RECORDS.items():
        lines.append(f"typedef struct {{ int32_t {', '.join(fields)}; }} {name};")
    for side, fields in BOUNDARY.items():  # each field's index, their count, and their names in order
        lines.append("enum {")
        lines.extend(f"    {side}_{field.upper()}," for field in fields)
        lines.append(f"    {side}_FIELD_COUNT")
        lines.append("};")
        quoted = ", ".join(f'"{field}"' for field in fields)
        lines.append(f"#define {side}_FIELD_NAMES {quoted}")
    lines.append(f"static const int DIG2BYTES[{len(DIG2BYTES)}] = {{{', '.join(map(str, DIG2BYTES))}}};")
    lines += ["", "#endif", ""]
    return "\n".join(lines)


SPEC_H = Path(__file__).parent / "csrc" / "spec.h"


def main() -> None:
    """Write spec.h (or, with --check, exit 1 if it is not what header() writes)."""
    text = header()
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if SPEC_H.read_text() == text else 1)
    SPEC_H.write_text(text)


if __name__ == "__main__":
    main()
