"""connector/identity.py: values made once per object, found again by identity."""

from __future__ import annotations

import weakref

from connector.identity import ByIdentity


def test_the_same_object_gets_what_was_made_for_it_and_an_equal_one_its_own() -> None:
    made: list[list[int]] = []

    def make(key: list[int]) -> int:
        made.append(key)
        return len(made)

    cached = ByIdentity(make)
    first, second = [1], [1]  # equal, not the same
    assert cached(first) == cached(first) == 1
    assert cached(second) == 2  # an equal object is not the one the value was made for
    assert made == [[1], [1]]


def test_two_objects_by_nesting() -> None:
    """connector/flat.py's shapes: by TABLE_MAP, then by definition (None too)."""
    calls: list[tuple[object, object]] = []

    def make(a: object, b: object | None) -> int:
        calls.append((a, b))
        return len(calls)

    cached: ByIdentity[object, ByIdentity[object | None, int]] = ByIdentity(
        lambda a: ByIdentity(lambda b: make(a, b))
    )
    a, b = object(), object()
    assert [cached(a)(b), cached(a)(None), cached(a)(b), cached(b)(b)] == [1, 2, 1, 3]


def test_it_keeps_the_key_alive_so_no_other_object_takes_its_id() -> None:
    class Table:
        pass

    cached: ByIdentity[Table, object] = ByIdentity(lambda table: object())
    table = Table()
    value = cached(table)
    alive = weakref.ref(table)
    del table
    kept = alive()
    assert kept is not None  # kept beside its value: its id cannot go to a new object
    assert cached(kept) is value


def test_past_its_bound_it_forgets_and_makes_again() -> None:
    count = [0]

    def make(value: object) -> int:
        count[0] += 1
        return count[0]

    cached = ByIdentity(make, most=3)
    objects = [object() for _ in range(4)]
    assert [cached(o) for o in objects] == [1, 2, 3, 4]  # the fourth cleared the three
    assert cached(objects[3]) == 4 and cached(objects[0]) == 5
