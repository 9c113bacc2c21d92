def transcode(
    body: bytes,
    program: bytes,
    kind: int,
    keys: bytes,
    key_prefix: bytes,
    first: bytes,
    rest: bytes,
    old_null: bytes,
    old_open: bytes,
    tail: bytes,
    base: int,
    /,
) -> list[tuple[bytes | None, bytes]] | None: ...
def count_rows(body: bytes, layout: bytes, images: int, /) -> int: ...
def route(
    messages: list[tuple[bytes | None, bytes]], partitions: int, fixed: int, skip: int, /
) -> tuple[list[tuple[bytes, bytes | None, int]], list[tuple[bytes, bytes | None, int, int]]]: ...
