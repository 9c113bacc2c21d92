"""Values made once per object, found again by the object's identity.

A TABLE_MAP, a table definition or a schema is decoded or made once and comes back, the same
object, for every event of its table: what is derived from it (a codec, a shape, a walk) is
looked up by identity, without hashing its columns each time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ByIdentity(Generic[K, V]):
    """`make(key)`, made once for the same key object. The key is kept beside its value, so it is
    not freed (and its id given to another object) while the value is here; past `most` entries
    all are forgotten at once (tables change rarely; a stream of ever new objects does not grow
    it). A value of two objects: a ByIdentity of the first whose values are ByIdentity of the
    second (connector/flat.py's shapes)."""

    __slots__ = ("_made", "make", "most")

    def __init__(self, make: Callable[[K], V], most: int = 4096) -> None:
        self.make = make
        self.most = most
        self._made: dict[int, tuple[K, V]] = {}

    def __call__(self, key: K) -> V:
        hit = self._made.get(id(key))
        if hit is not None:
            return hit[1]
        value = self.make(key)
        if len(self._made) >= self.most:
            self._made.clear()
        self._made[id(key)] = (key, value)
        return value
