"""What a row message's `sql` carries of its statement: a value the configuration makes and the
flat-message builder applies (its own module: reading a configuration needs nothing else of
the builder's)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QueryText:
    """What a row message's `sql` carries of its statement (ROWS_QUERY / ANNOTATE_ROWS).

    Off by default, as Debezium's include.query: a bulk INSERT's text is its whole data again
    (1 MB for 1,000 rows of a wide table), far past a Kafka message's limit. When on, the text
    is cut to `max_bytes` on a UTF-8 boundary, with a mark saying it was cut and its size."""

    include: bool = False
    max_bytes: int = 4096

    def of(self, text: str) -> str:
        if not self.include:
            return ""
        raw = text.encode("utf-8", "surrogatepass")
        if len(raw) <= self.max_bytes:
            return text
        before, after = self.mark()
        mark = f"{before}{len(raw)}{after}"
        keep = max(0, self.max_bytes - len(mark.encode()))
        return raw[:keep].decode("utf-8", "ignore") + mark  # "ignore": a character cut in two is dropped

    def mark(self) -> tuple[str, str]:
        """What a cut text ends in, before and after the text's size in bytes (`of` writes it, and the
        compiled kernel from these parts: connector/lane.py)."""
        return " /* cut by Sluice: ", f" bytes, query_max_bytes {self.max_bytes} */"


NO_QUERIES = QueryText()  # the default: `sql` is ""
WHOLE_QUERIES = QueryText(True, 1 << 62)  # `sluice decode`: a file is read to be looked at
