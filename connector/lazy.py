"""A sequence made the first time it is read, whose length is known before."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar, overload

T = TypeVar("T")


class Lazy(Sequence[T]):
    """`make()` runs once, on the first read of an item; `len()` never runs it.

    Rows events use it for their text images when the Avro path reads typed ones, and
    stream items for flat messages the Avro path never renders."""

    __slots__ = ("_count", "_items", "_make")

    def __init__(self, make: Callable[[], tuple[T, ...]], count: int) -> None:
        self._make: Callable[[], tuple[T, ...]] | None = make
        self._count = count
        self._items: tuple[T, ...] = ()

    def _made(self) -> tuple[T, ...]:
        if self._make is not None:
            self._items, self._make = self._make(), None
        return self._items

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        return self._made()[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self._made())
