"""The compiled hot path (connector/_transcode.c), when it was built.

`make install` builds it. Without it (a platform with no C compiler), every rows event takes
the Python path, which is the reference the compiled one is tested against."""

from __future__ import annotations

from typing import Protocol


class Transcoder(Protocol):
    def transcode(
        self, body: bytes, program: bytes, kind: int, keys: bytes, key_prefix: bytes, first: bytes, rest: bytes,
        old_null: bytes, old_open: bytes, tail: bytes, base: int, /,
    ) -> list[tuple[bytes | None, bytes]] | None:  # fmt: skip
        """Every row as (key or None, value) Avro bytes; None: declined (connector/avro/transcode.py)."""

    def count_rows(self, body: bytes, layout: bytes, images: int, /) -> int:
        """Rows in the images, or -1 if they do not fit the layout (connector/binlog/rowcodec.walk_layout)."""

    def route(
        self, messages: list[tuple[bytes | None, bytes]], partitions: int, fixed: int, skip: int, /
    ) -> tuple[list[tuple[bytes, bytes | None, int]], list[tuple[bytes, bytes | None, int, int]]]:
        """Each message's partition, the last of each partition apart (connector/sink/partitioning.route_python)."""


def _load() -> Transcoder | None:
    try:
        from connector import _transcode  # noqa: PLC0415 - optional: a guarded import
    except ImportError:  # the build makes it; tests/test_transcode.py insists that it is there
        return None
    return _transcode


transcoder = _load()

# Said once when `sluice run` starts without it (pip installs Sluice without it where it cannot
# be compiled: the extension is optional in pyproject.toml).
NOT_BUILT = (
    "the compiled kernel (connector/_transcode.c) is not built here: every rows event takes the Python"
    " path, several times slower; `make install`, or pip install with a C compiler and Python's headers,"
    " builds it"
)
