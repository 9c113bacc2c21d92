"""The kernel's binlog checksum (connector/csrc/hashes.c) against zlib's CRC-32, which the Python
path checks events with (connector/binlog/parser.py): at every length around the folded path's
edges (64 bytes, then 16-byte blocks), at every alignment, over random and all-ones bytes, and
on whole events (their CRC over the trailing checksum gives the residue the kernel compares).
Each both ways: folded by carry-less multiply where the CPU has it, and by tables alone."""

from __future__ import annotations

import random
import zlib

import pytest

from connector.native import transcoder

pytestmark = pytest.mark.skipif(transcoder is None, reason="the compiled module is not built")


def crc32(data: bytes) -> int:
    """The kernel's CRC of `data`, the same both ways (or the ways' two answers fail the test)."""
    assert transcoder is not None
    folded, generic = transcoder.crc32(data), transcoder.crc32(data, True)
    assert folded == generic, (len(data), folded, generic)
    return folded


def test_every_length_and_alignment_gives_zlib_s_crc() -> None:
    rng = random.Random(64)
    data = rng.randbytes(4096 + 16)
    for length in [*range(0, 300), 1023, 1024, 1025, 4095, 4096]:
        for offset in range(16):
            piece = data[offset : offset + length]
            assert crc32(piece) == zlib.crc32(piece), (length, offset)


def test_uniform_and_sparse_bytes_give_zlib_s_crc() -> None:
    for byte in (0x00, 0xFF, 0x80, 0x01):
        for length in (63, 64, 65, 127, 128, 129, 8192, 8193):
            piece = bytes([byte]) * length
            assert crc32(piece) == zlib.crc32(piece), (byte, length)
    for bit in range(8 * 200):  # one bit set in a 200-byte block: each position's fold
        block = bytearray(200)
        block[bit // 8] = 1 << (bit % 8)
        assert crc32(bytes(block)) == zlib.crc32(block), bit


def test_an_event_with_its_checksum_gives_the_residue() -> None:
    rng = random.Random(5)
    for length in (19, 64, 100, 8192, 65536):
        body = rng.randbytes(length)
        event = body + zlib.crc32(body).to_bytes(4, "little")
        assert crc32(event) == zlib.crc32(event) == 0x2144DF1C
        flipped = bytearray(event)
        flipped[length // 2] ^= 0x10
        assert crc32(bytes(flipped)) != 0x2144DF1C
