"""A bounds-checked cursor over an event body.

Every read checks that the bytes exist; a short read raises `FormatError` naming the
field, so one field's mistake never shifts the next field silently.
"""

from __future__ import annotations

import struct

from connector.errors import FormatError

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class Reader:
    """Sequential reader over `data[pos:end]`."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise FormatError(f"{what}: needs {n} bytes at offset {self.pos}, {self.end - self.pos} left")

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        start = self.pos
        self.pos = start + n
        return self.data[start : self.pos]

    def rest(self) -> bytes:
        start = self.pos
        self.pos = self.end
        return self.data[start : self.end]

    def u8(self, what: str) -> int:
        self.need(1, what)
        value = self.data[self.pos]
        self.pos += 1
        return value

    def u16(self, what: str) -> int:
        self.need(2, what)
        (value,) = _U16.unpack_from(self.data, self.pos)
        self.pos += 2
        return int(value)

    def u32(self, what: str) -> int:
        self.need(4, what)
        (value,) = _U32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def u64(self, what: str) -> int:
        self.need(8, what)
        (value,) = _U64.unpack_from(self.data, self.pos)
        self.pos += 8
        return int(value)

    def uint(self, n: int, what: str) -> int:
        """Little-endian unsigned integer of `n` bytes."""
        return int.from_bytes(self.take(n, what), "little")

    def packed(self, what: str) -> int:
        """Length-encoded integer (net_field_length): 1, 3, 4 or 9 bytes."""
        first = self.u8(what)
        if first < 251:
            return first
        if first == 252:
            return self.uint(2, what)
        if first == 253:
            return self.uint(3, what)
        if first == 254:
            return self.uint(8, what)
        raise FormatError(f"{what}: 0x{first:02x} does not start a length-encoded integer")

    def packed_bytes(self, what: str) -> bytes:
        return self.take(self.packed(what), what)

    def count(self, what: str, item_size: int = 1) -> int:
        """A packed element count, refused if the elements cannot fit in what is left."""
        n = self.packed(what)
        if n * item_size > self.remaining():
            raise FormatError(f"{what}: count {n} cannot fit in {self.remaining()} bytes")
        return n

    def varlen(self, what: str) -> int:
        """mysql::serialization variable-length unsigned integer.

        The count of trailing one bits in the first byte says how many bytes follow
        (libs/mysql/serialization/variable_length_integers.h).
        """
        first = self.u8(what)
        if first == 0xFF:
            return self.uint(8, what)
        extra = 0
        while first >> extra & 1:
            extra += 1
        raw = first | self.uint(extra, what) << 8 if extra else first
        return raw >> (extra + 1)

    def varlen_signed(self, what: str) -> int:
        raw = self.varlen(what)
        return -(raw >> 1) - 1 if raw & 1 else raw >> 1

    def cstring(self, n: int, what: str) -> bytes:
        """`n` bytes followed by a NUL terminator: a name (database, table, catalog), which no
        server lets hold a NUL (identifiers exclude U+0000), nor could a file system path."""
        value = self.take(n, what)
        if self.u8(what + " terminator") != 0:
            raise FormatError(f"{what}: missing NUL terminator")
        if b"\x00" in value:
            raise FormatError(f"{what}: a NUL byte at {value.index(0)} of its {n}")
        return value
