"""Reading binlog files: the magic number, event framing, and where a file ends early."""

from __future__ import annotations

import gzip
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager

from connector.binlog import constants as c
from connector.binlog.events import Event
from connector.binlog.parser import BinlogParser, parse_header
from connector.errors import BinlogDecodeError, TruncatedBinlogError, UnsupportedBinlogError


@contextmanager
def _open_bytes(path: str) -> Iterator[bytes | mmap.mmap]:
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            yield fh.read()
        return
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            yield b""
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            yield mapped


def iter_file_events(
    path: str,
    start_position: int | None = None,
    stop_position: int | None = None,
    parser: BinlogParser | None = None,
) -> Iterator[Event]:
    """Decode a binlog file's events in order.

    The FORMAT_DESCRIPTION at offset 4 is always read, even when starting later, since
    every other event needs it. Events that start at or after `stop_position` are not read.
    """
    name = os.path.basename(path)
    parser = parser or BinlogParser(name)
    with _open_bytes(path) as data:
        size = len(data)
        _check_magic(bytes(data[0:4]), name)
        pos = 4
        first = True
        while pos < size and (stop_position is None or pos < stop_position):
            length = _event_length(data, pos, size, name)
            raw = bytes(data[pos : pos + length])
            if first:
                _check_first(raw, pos, name)
            event = parser.decode(raw, pos)
            if first and start_position is not None and start_position > pos + length:
                pos = start_position
            else:
                pos += length
            first = False
            yield event


# MySQL 8.0.14+ encrypted binlogs start with this magic and a 512-byte key header.
_ENCRYPTED_MAGIC = b"\xfdbin"
_FIRST_EVENT_TYPES = (c.EventType.FORMAT_DESCRIPTION_EVENT, c.EventType.START_EVENT_V3)


def _check_magic(magic: bytes, name: str) -> None:
    if magic == c.BINLOG_MAGIC:
        return
    if magic == _ENCRYPTED_MAGIC:
        raise UnsupportedBinlogError(
            "encrypted binlog file (magic fd62696e, binlog_encryption=ON) is not supported; "
            "read it through the server's replication protocol instead", file=name, pos=0,
        )  # fmt: skip
    raise UnsupportedBinlogError(f"not a binlog file: first bytes {magic.hex()} are not fe62696e", file=name, pos=0)


def _check_first(raw: bytes, pos: int, name: str) -> None:
    code = raw[4]
    if code not in _FIRST_EVENT_TYPES:
        raise BinlogDecodeError(
            f"a binlog file starts with a FORMAT_DESCRIPTION_EVENT, found type {code}",
            file=name, pos=pos, event_type=c.event_type_name(code), raw=raw,
        )  # fmt: skip


def _event_length(data: bytes | mmap.mmap, pos: int, size: int, name: str) -> int:
    if pos + c.LOG_EVENT_HEADER_LEN > size:
        raise TruncatedBinlogError(
            f"file ends at byte {size}, inside the header of the event starting at {pos}", file=name, pos=pos
        )
    header = parse_header(bytes(data[pos : pos + c.LOG_EVENT_HEADER_LEN]))
    if header.event_length < c.LOG_EVENT_HEADER_LEN:
        raise BinlogDecodeError(
            f"event length {header.event_length} is shorter than a header", file=name, pos=pos,
            event_type=c.event_type_name(header.type_code), raw=bytes(data[pos : pos + c.LOG_EVENT_HEADER_LEN]),
        )  # fmt: skip
    if pos + header.event_length > size:
        raise TruncatedBinlogError(
            f"file ends at byte {size}, inside a {header.event_length}-byte event starting at {pos}",
            file=name, pos=pos, event_type=c.event_type_name(header.type_code),
        )  # fmt: skip
    return header.event_length
