"""The Python path's text decoding: rows of a gbk and of a sjis column, against Python's codec.

Builds rows events' images in memory (an INT key and a VARCHAR(200) of 10-60 characters in the
charset, some ASCII) and times the Python path's compiled rows decoder over them
(connector/binlog/rowcodec.py), against Python's own codec of that name decoding the same
values one by one in the same run (what the rows decoder called before the servers' tables).
Prints CPU microseconds per row for each (the fastest of the rounds), and the decoder's cost as a
multiple of the codec's.

    .venv/bin/python bench/charsets.py [--rows 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connector.binlog.constants import ColumnType as T
from connector.binlog.constants import RowsKind
from connector.binlog.rowcodec import build_rows_decoder
from connector.binlog.tablemap import ColumnMeta, TableMapEvent

# charset -> (a collation id of it, Python's codec of that name)
CHARSETS = {"gbk": (28, "gbk"), "sjis": (13, "shift_jis")}
# Characters every one of the charsets has: kana, common kanji, full-width forms, ASCII.
ALPHABET = "日本語中文字漢字東京北京上海のテキストですアイウエオかきくけこ一二三四五六七八九十年月日ＡＢＣ abcXYZ0123"


def values(codec: str, rows: int, rng: random.Random) -> list[bytes]:
    return [("".join(rng.choice(ALPHABET) for _ in range(rng.randint(10, 60)))).encode(codec) for _ in range(rows)]


def body(texts: list[bytes]) -> bytes:
    """WRITE rows images of (INT, VARCHAR(200)): a null bitmap, the INT, a 2-byte length, the text."""
    out = bytearray()
    for key, text in enumerate(texts):
        out += b"\x00" + key.to_bytes(4, "little") + len(text).to_bytes(2, "little") + text
    return bytes(out)


def table(collation: int, mariadb: bool) -> TableMapEvent:
    columns = (
        ColumnMeta(0, T.MYSQL_TYPE_LONG, T.MYSQL_TYPE_LONG, 0, False),
        ColumnMeta(1, T.MYSQL_TYPE_VARCHAR, T.MYSQL_TYPE_VARCHAR, 800, False, collation=collation),
    )
    return TableMapEvent(1, 0, "bench", "t", columns, raw=b"bench", mariadb=mariadb)


def timed(work: Callable[[], object]) -> float:
    """CPU seconds of `work` (this machine is shared: time other processes take is not ours)."""
    started = time.process_time()
    work()
    return time.process_time() - started


def measure(collation: int, codec: str, rows: int, rounds: int, rng: random.Random) -> tuple[float, float, float]:
    """The fastest round's microseconds per row of the rows decoder and of the codec, and their ratio."""
    texts = values(codec, rows, rng)
    images = body(texts)
    decoder = build_rows_decoder(table(collation, False), RowsKind.WRITE, (0, 1), ())
    assert [after[1] for _, after in decoder(images, 0, len(images))] == [t.decode(codec) for t in texts]  # type: ignore[index]
    ours, peer = [], []
    for _ in range(rounds):  # in turn: this machine's speed drifts within a minute
        ours.append(timed(lambda: decoder(images, 0, len(images))) / rows * 1e6)
        peer.append(timed(lambda: [t.decode(codec) for t in texts]) / rows * 1e6)
    return min(ours), min(peer), min(ours) / min(peer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    rng = random.Random(7)
    for charset, (collation, codec) in CHARSETS.items():
        ours, peer, ratio = measure(collation, codec, args.rows, args.rounds, rng)
        print(f"{charset:5s} rows decoder {ours:6.2f} us/row   Python's {codec} alone {peer:6.2f} us/value   "
              f"decoder / codec x{ratio:.2f} (fastest of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
