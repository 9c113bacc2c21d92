"""Mutation fuzzing of the parser with real events from the corpus.

Every mutant must either decode or raise BinlogDecodeError: never another exception,
never a hang. Checksums are not verified, so mutants reach the body decoders instead of
stopping at the CRC; the event length field is patched to the mutant's size for the same reason.
"""

from __future__ import annotations

import random
import struct
import time

import pytest

from connector.binlog.file import iter_file_events
from connector.binlog.parser import BinlogParser
from connector.errors import BinlogDecodeError
from tests.support.corpus import CORPUS

FILES = [
    "article-hexdumps/mysql-bin.000005",
    "rust_mysql_common/json.binlog.000001",
    "rust_mysql_common/json-opaque.binlog",
    "rust_mysql_common/mysql-enum-string-set.000001",
    "rust_mysql_common/mariadb-bin.000001",
    "rust_mysql_common/vector.binlog",
    "rust_mysql_common/binlog_transaction_with_GTID_TAG.000001",
    "rust_mysql_common/transaction_compression.000001",
    "mysql-binlog-connector-java/mysql-bin.checksum-crc32",
    "mariadb-server/mysql-test/std_data/mdev35643_mysql_80_binlog.000001",
    "mysql-cdc-rs/5.7_14_user_var_log.bin",
    "rust_mysql_common/binlog-invisible-columns.000001",
]


def _raw_events(name: str) -> list[tuple[int, bytes]]:
    data = (CORPUS / name).read_bytes()
    return [(e.pos, data[e.pos : e.pos + e.header.event_length]) for e in iter_file_events(str(CORPUS / name))]


def _with_length(raw: bytes) -> bytes:
    return raw[:9] + struct.pack("<I", len(raw)) + raw[13:] if len(raw) >= 13 else raw


def _mutants(raw: bytes, rng: random.Random, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        op = rng.randrange(4)
        data = bytearray(raw)
        if op == 0:  # flip bytes in the body
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(19, len(data)) if len(data) > 19 else rng.randrange(len(data))
                data[i] ^= 1 << rng.randrange(8)
        elif op == 1:  # truncate
            del data[rng.randrange(1, len(data)) :]
        elif op == 2:  # extend
            data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        else:  # overwrite a run with 0xff (large lengths and counts)
            i = rng.randrange(len(data))
            data[i : i + rng.randint(1, 8)] = b"\xff" * 8
        out.append(_with_length(bytes(data)) if op != 0 else bytes(data))
    return out


@pytest.mark.parametrize("name", FILES)
def test_mutated_events_decode_or_raise_the_typed_error(name: str) -> None:
    rng = random.Random(name)
    parser = BinlogParser(name, verify_checksum=False)
    outcomes = {"decoded": 0, "typed error": 0}
    started = time.monotonic()
    for pos, raw in _raw_events(name):
        for mutant in _mutants(raw, rng, 40):
            try:
                parser.decode(mutant, pos)
                outcomes["decoded"] += 1
            except BinlogDecodeError as exc:
                assert exc.pos == pos and exc.file == name
                outcomes["typed error"] += 1
        parser.decode(raw, pos)  # the original restores table maps and format state
    assert outcomes["typed error"] > 0
    assert time.monotonic() - started < 120, "fuzzing one file should not take minutes (a hang?)"


def test_random_bytes_after_a_real_format_description() -> None:
    name = "article-hexdumps/mysql-bin.000005"
    (fde_pos, fde), *_ = _raw_events(name)
    rng = random.Random(1)
    parser = BinlogParser(name, verify_checksum=False)
    parser.decode(fde, fde_pos)
    for _ in range(3000):
        body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 80)))
        header = struct.pack("<IBIIIH", 0, rng.randrange(256), 1, 19 + len(body), 0, rng.randrange(1 << 16))
        try:
            parser.decode(header + body, 1000)
        except BinlogDecodeError as exc:
            assert exc.pos == 1000
