"""A table's small share of a batch written in the driver by delta-rs (`deltalake`, Delta in Rust).

Spark's Delta MERGE is about ten Spark jobs with planning between them: a second or more on the
driver whatever the rows (spark/README.md: many tables). delta-rs merges a few thousand rows
into the same table in tens of milliseconds, in the driver's process, through the same Delta
log: Spark reads what it commits, and it writes tables Spark made (their column mapping, table
features, statistics columns and partitions). The jobs still decode and reduce each table's
messages in Spark; only the small result comes to the driver, as Arrow.

delta-rs writes a table only as it is: a column new to the table, a type that changed, or a
feature it does not write leave the table to Spark (`writable`), whose MERGE evolves the schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

# The writer features of the tables Spark makes here (a timestamp without zone brings table
# features; column mapping comes with a rename or a drop) that delta-rs writes. A table with
# any other (deletion vectors, type widening, row tracking, ...) is written by Spark.
WRITES = frozenset(
    {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "columnMapping",
     "timestampNtz"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Target:
    """A Delta table as delta-rs opened it, with its schema as Spark's type."""

    table: DeltaTable
    schema: StructType

    @property
    def columns(self) -> list[str]:
        return self.schema.fieldNames()

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.table.metadata().configuration)


def open_target(path: str) -> Target | None:
    """The Delta table at `path` if delta-rs may write it (`writable`); None if there is none,
    or something delta-rs cannot open (Spark's write says what), or a table it may not write,
    or it is not on a local filesystem (`s3a://`, `hdfs://`: Hadoop's filesystems, configured
    for Spark; delta-rs has its own clients and S3 locking, not set up here)."""
    scheme = urlsplit(path).scheme
    if scheme not in ("", "file"):
        return None
    try:
        table = DeltaTable(path)
    except DeltaError:
        return None
    target = Target(table, StructType.fromJson(json.loads(table.schema().to_json())))
    return target if writable(target) else None


def writable(target: Target) -> bool:
    """Whether delta-rs writes the table as Spark would: protocol features it writes, no change
    data feed to keep (its files are Spark's business), and no column name holding a backtick
    (delta-rs quotes names with backticks in the statements it builds)."""
    protocol = target.table.protocol()
    features = set(protocol.writer_features or ())
    if protocol.min_writer_version > 7 or not features <= WRITES:
        return False
    if target.properties.get("delta.enableChangeDataFeed", "false").lower() == "true":
        return False
    return not any("`" in name for name in target.columns)


def fits(target: Target, source: StructType, own: tuple[str, ...] = ()) -> bool:
    """Whether every column of `source` (but `own`, the job's columns the table does not keep)
    is the table's with the same type: then the rows go in as they are, with no schema change."""
    types = {field.name: field.dataType.simpleString() for field in target.schema.fields}
    return all(types.get(f.name) == f.dataType.simpleString() for f in source.fields if f.name not in own)


def arrow_of(frame: DataFrame) -> pa.Table:
    """A frame's rows in the driver as Arrow, as the JVM made them. Not `DataFrame.toArrow`: it
    casts the batches to the schema once more, and that cast refuses a null struct with a NOT
    NULL field (the changelog's `before` of an INSERT: its key column is NOT NULL), whose child
    holds a null in the struct's null slot, as Arrow allows."""
    batches = frame._collect_as_arrow(empty_list_if_zero_records=False)  # type: ignore[operator]  # not in the stubs
    return pa.Table.from_batches(batches)


def last_per(rows: pa.Table, keys: list[str], then: tuple[str, ...] = ()) -> pa.Table:
    """Per distinct `keys`, the row last in the order of `then` (the mirror: per key the newest
    change, by source position and row, as `spark.jobs.newest_per_key` computes it in Spark;
    the changelog: one row per change). A sort and one pass over neighbours, in Arrow."""
    if rows.num_rows <= 1:
        return rows
    rows = rows.sort_by([(column, "ascending") for column in (*keys, *then)])
    count = rows.num_rows
    ends: Any = None  # row i ends its key's run: its key differs from row i + 1's
    for key in keys:
        column = rows.column(key)
        differs = pc.not_equal(column.slice(0, count - 1), column.slice(1))
        ends = differs if ends is None else pc.or_(ends, differs)
    last = pa.chunked_array([*ends.chunks, pa.array([True])], pa.bool_())
    return rows.filter(last)


def quoted(name: str) -> str:
    """A column name as delta-rs's SQL reads it (DataFusion's: double quotes, case kept)."""
    return '"' + name.replace('"', '""') + '"'


def on_columns(columns: list[str]) -> str:
    return " AND ".join(f"t.{quoted(c)} = s.{quoted(c)}" for c in columns)


# A source change applies where it is newer than the row's position in the table.
NEWER = "(s._sluice_id > t._sluice_id OR (s._sluice_id = t._sluice_id AND s._sluice_row > t._sluice_row))"


def merge_newest(target: Target, rows: pa.Table, keys: list[str], partition: str = "") -> dict[str, Any]:
    """The mirror's MERGE (`spark.jobs.merge`) in delta-rs: per key the batch's newest change
    (`_sluice_type`, the table's columns, the position) deleted, updated or inserted where it is
    newer than the table's row. `partition`: the table's partition column, derived from the key,
    joined on too so delta-rs reads only the partitions the batch touches."""
    target.table.update_incremental()  # Spark's commits since it was opened (properties set)
    on = on_columns([*keys, *([partition] if partition else [])])
    return dict(
        target.table.merge(rows, on, source_alias="s", target_alias="t")
        .when_matched_delete(f"s._sluice_type = 'DELETE' AND {NEWER}")
        .when_matched_update_all(f"s._sluice_type <> 'DELETE' AND {NEWER}", except_cols=["_sluice_type"])
        .when_not_matched_insert_all("s._sluice_type <> 'DELETE'", except_cols=["_sluice_type"])
        .execute()
    )  # fmt: skip


def insert_new(target: Target, rows: pa.Table, identity: list[str]) -> dict[str, Any]:
    """The changelog's insert (`spark.jobs.Changelog`) in delta-rs: rows whose `identity` the
    table does not hold yet."""
    target.table.update_incremental()
    merger = target.table.merge(rows, on_columns(identity), source_alias="s", target_alias="t")
    return dict(merger.when_not_matched_insert_all().execute())
