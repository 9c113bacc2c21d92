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

import functools
import io
import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import DataType, StructType

from connector.avro.reader import plain_dates

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


# --- Small tables' messages decoded here ------------------------------------------------
#
# Spark's from_avro costs a job per table (or a wide job per group of tables, each row null in
# every other table's columns): plans, code generation and tasks, a few hundred milliseconds a
# table whatever its rows. The small tables' message bodies come to the driver in one job and
# are decoded here by fastavro (the connector's own Avro library), resolved to the same reader
# schema Spark's would be, into the Arrow that Spark's collect makes of its decoded rows: Spark's
# own Avro-to-Spark type mapping (`spark_type`) and pyspark's Spark-to-Arrow one
# (`to_arrow_type`). tests/test_spark_live.py holds the two decoders equal over every column type.


@functools.lru_cache(maxsize=16)
def _converters(spark: SparkSession) -> tuple[Any, Any]:
    """Avro's schema parser class and spark-avro's SchemaConverters, looked up once: py4j finds
    a class by asking the JVM about each part of its dotted name, a round trip each (of 6 ms
    a table's type cost, most)."""
    jvm: Any = spark._jvm  # py4j's gateway
    return jvm.org.apache.avro.Schema.Parser, jvm.org.apache.spark.sql.avro.SchemaConverters


@functools.lru_cache(maxsize=4096)
def _spark_type(spark: SparkSession, avro: str) -> DataType:
    parser, converters = _converters(spark)
    converted = converters.toSqlType(parser().parse(avro))
    return StructType.fromJson(json.loads(converted.dataType().json()))


def spark_type(spark: SparkSession, avro: dict[str, Any]) -> StructType:
    """The Spark type spark-avro's from_avro gives a record of `avro` (its SchemaConverters):
    Spark's mapping, not a second one here."""
    found = _spark_type(spark, json.dumps(avro, sort_keys=True))
    assert isinstance(found, StructType)
    return found


@functools.lru_cache(maxsize=4096)
def _parsed(avro: str) -> Any:
    return fastavro.parse_schema(plain_dates(json.loads(avro)))


def decoded(
    bodies: Iterable[tuple[str, bytes]], writers: dict[str, dict[str, Any]], reader: dict[str, Any],
    newest: dict[str, Any],
) -> list[Any]:  # fmt: skip
    """Each (writer schema id, Avro body) as a value of `reader`, dates and times as the plain
    numbers Arrow takes for them (days, microseconds). A message of the `newest` schema (most
    of them) is read as it was written, with every envelope field: fastavro resolves a schema
    to another at two to eight times the cost, whatever the difference (its skipping of fields
    the reader leaves out costs most). A body its writer schema does not read raises
    (fastavro's error, or ValueError for bytes left over)."""
    resolved = _parsed(json.dumps(reader, sort_keys=True))
    plans = {}
    for fp, writer in writers.items():
        plans[fp] = (_parsed(json.dumps(writer, sort_keys=True)), None if writer == newest else resolved)
    out = []
    for fp, body in bodies:
        stream = io.BytesIO(body)
        writer, to = plans[fp]
        out.append(fastavro.schemaless_reader(stream, writer, to))
        if stream.tell() != len(body):
            raise ValueError(f"{len(body) - stream.tell()} bytes left over after a message of schema {fp}")
    return out


# fastavro, and the rows made of what it decodes, hold Python's lock: decoded in the driver's
# own process, a batch's small tables decode one after another on one core, while the merges
# beside them (delta-rs, in Rust) and the JVM leave the others idle. Each table's decoding
# runs in a pool of processes of their own instead (`in_a_decoder`), started from a fresh
# process (forkserver), not forked from the driver, whose JVM gateway and threads a fork would
# copy. A pool a worker of which died is started again for the next table. A decoder ignores
# Ctrl-C (the terminal sends it to the whole process group): the driver's process stops the
# job with one line. A decoder ends when the driver's process does, however it ended: it waits
# on a pipe whose writing end it holds itself, so the driver's end closing tells it nothing,
# and a driver stopped by SIGTERM or SIGKILL left its decoders and their forkserver running.

T = TypeVar("T")
DECODERS = min(4, os.cpu_count() or 1)
DRIVER_WATCH_S = 1.0  # how often a decoder looks whether the driver is still there
_pools: list[ProcessPoolExecutor] = []  # the one pool, once started
_starting = threading.Lock()


def _decoder_start(driver: int) -> None:
    """A decoder's first steps: deaf to Ctrl-C, and a thread that ends it once `driver` is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    started = started_at(driver)
    threading.Thread(target=_end_with, args=(driver, started), name="sluice-driver-watch", daemon=True).start()


def started_at(pid: int) -> bytes | None:
    """When a process started (/proc's ticks since boot), or None where it is gone, a zombie, or
    there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return None if fields[0] in (b"Z", b"X") else fields[19]


def _end_with(driver: int, started: bytes | None) -> None:
    """Exit once the driver's process is gone (its pid a zombie's, or another process's)."""
    while started_at(driver) == started if started is not None else _exists(driver):
        time.sleep(DRIVER_WATCH_S)
    os._exit(0)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: there
        pass
    return True


def in_a_decoder(work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` in a decoder process: its result, or the exception it raised there (a
    worker that died: BrokenProcessPool). `work` and its arguments are pickled: a function of a
    module, plain values."""
    with _starting:
        if not _pools:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([work.__module__])
            _pools.append(
                ProcessPoolExecutor(DECODERS, mp_context=context, initializer=_decoder_start, initargs=(os.getpid(),))
            )
        pool = _pools[0]
    try:
        return pool.submit(work, *args).result()
    except BrokenProcessPool:
        with _starting:
            if _pools and _pools[0] is pool:
                _pools.clear()
        raise


def unscaled_text(unscaled: bytes | None, scale: int) -> str | None:
    """A DECIMAL's exact text from Avro's unscaled bytes (big-endian two's complement), as MySQL
    prints it: `spark.jobs.decimal_text` in Python."""
    if unscaled is None:
        return None
    value = int.from_bytes(unscaled, "big", signed=True)
    digits = str(abs(value)).rjust(scale + 1, "0")
    whole, fraction = digits[: len(digits) - scale], digits[len(digits) - scale :]
    return ("-" if value < 0 else "") + whole + ("." + fraction if scale else "")


def as_arrow(rows: list[dict[str, Any]], schema: StructType) -> pa.Table:
    """Rows (dicts of plain values) as the Arrow table Spark's collect makes of `schema`."""
    kind = to_arrow_type(schema, timestamp_utc=True)
    return pa.Table.from_struct_array(pa.array(rows, type=kind))


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


def merger(target: Target, rows: pa.Table, on: str) -> Any:
    """delta-rs's MERGE of `rows` (alias `s`) into the table (alias `t`) brought up to date
    (Spark's commits since it was opened: properties the job set). Not streamed: then delta-rs
    reads its source twice, once to bound the table's partitions and files by the source's
    values (its "early filter": streamed, it reads every file of the table), once to merge. The
    source is a small Arrow table in memory, so reading it twice costs nothing."""
    target.table.update_incremental()
    return target.table.merge(rows, on, source_alias="s", target_alias="t", streamed_exec=False)


def merge_newest(target: Target, rows: pa.Table, keys: list[str], partition: str = "") -> dict[str, Any]:
    """The mirror's MERGE (`spark.jobs.merge`) in delta-rs: per key the batch's newest change
    (`_sluice_type`, the table's columns, the position) deleted, updated or inserted where it is
    newer than the table's row. `partition`: the table's partition column, derived from the key,
    joined on too so delta-rs reads only the partitions the batch touches."""
    on = on_columns([*keys, *([partition] if partition else [])])
    return dict(
        merger(target, rows, on)
        .when_matched_delete(f"s._sluice_type = 'DELETE' AND {NEWER}")
        .when_matched_update_all(f"s._sluice_type <> 'DELETE' AND {NEWER}", except_cols=["_sluice_type"])
        .when_not_matched_insert_all("s._sluice_type <> 'DELETE'", except_cols=["_sluice_type"])
        .execute()
    )  # fmt: skip


def insert_new(target: Target, rows: pa.Table, identity: list[str]) -> dict[str, Any]:
    """The changelog's insert (`spark.jobs.Changelog`) in delta-rs: rows whose `identity` the
    table does not hold yet. The table's partition columns (the changelog's `event_date`, a
    change's own) are joined on too: delta-rs then reads only the partitions of the batch's
    dates, not every day the changelog has kept."""
    partitions = [c for c in target.table.metadata().partition_columns if c not in identity]
    return dict(merger(target, rows, on_columns([*identity, *partitions])).when_not_matched_insert_all().execute())
