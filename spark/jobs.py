"""PySpark jobs on Sluice's topics: an exact mirror (Delta MERGE by key) and an append-only changelog.

Both read every row topic of the connector (`{topic_prefix}.{db}.{table}`; the mirror also
`{topic_prefix}.{db}._ddl`, for statements that empty a table) with
Structured Streaming and, per micro-batch, decode each value with its writer schema (the
single-object fingerprint -> `schemas/`, or the registry id) resolved to the table's newest
schema (Spark's from_avro `avroSchema` option), so columns added by DDL appear with their
defaults and columns renamed since a message was written appear under their new names (the
newest fields' Avro aliases name their earlier names; Avro's resolution follows them).
Checkpoints make both restartable; their writes are idempotent, so a batch that runs twice
(a failure between the Delta commit and the checkpoint) changes nothing.

mirror:    one Delta table per source table at {lake_dir}/mirror/<db>/<table>. Within a batch
           the newest change per key wins (order: source file, position, row); MERGE then
           applies it only when it is newer than what the table holds (`_sluice_id`,
           `_sluice_row`), so connector duplicates and replays of the job change nothing.
           Tables without a primary key have nothing to merge by: they are in the changelog only.
           A column the source renamed is renamed in the mirror too (Delta column mapping),
           so rows the batch does not touch keep their values under the new name.
           A statement that takes a table's rows away on the source (TRUNCATE TABLE, DROP
           TABLE, DROP DATABASE, RENAME TABLE's old name, CREATE OR REPLACE TABLE) deletes the
           mirror's rows last changed before it and is remembered (table property
           `sluice.truncatedAt`), so a change from before it that a later batch brings is not
           applied, and a table created again under the name starts empty.
changelog: every change with its operation, source position, event time, after-image and
           before-image, at {lake_dir}/changelog/<db>/<table>, partitioned by event date;
           inserted only when its source position is not there yet (exactly once).

Both go table by table (`Batches`, `[spark] table_threads` side by side): a table whose write
fails is reported, counted and held back (its changes written again from their Kafka offsets at
the next batch, `Holds`), and the other tables go on. A DECIMAL wider than Spark's 38 digits
is its exact text (`decimal_text`). A table's share of a batch of at most `[spark] driver_rows`
messages is decoded and reduced in Spark as any other, then merged (or inserted) by delta-rs
in the driver (`spark.driver`): a Spark MERGE costs a second of jobs whatever its rows.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import operator
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pyarrow as pa
from confluent_kafka.schema_registry import SchemaRegistryClient
from delta.tables import DeltaTable
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import (
    ArrayType,
    DateType,
    NumericType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from connector.avro.registry import SchemaDirectory
from connector.avro.schemas import row_fields
from connector.config import Config, load_config
from connector.errors import SluiceError
from connector.metrics import serve
from connector.schema.ddl import Unreadable, apply_ddl, read_ddl
from connector.schema.model import Schema
from connector.schema.sqltokens import Session, quote_identifier
from spark import driver

log = logging.getLogger("sluice.spark")
T = TypeVar("T")

POSITION = ["_sluice_id", "_sluice_row"]  # the source position a mirror row was last changed at
TRUNCATED_AT = "sluice.truncatedAt"  # a mirror table's property: the position it was last emptied at
RANGE = "_sluice_range"  # with [spark] key_range: the mirror's partition column, leading key div the width
KEY_RANGE = "sluice.keyRange"  # a ranged mirror table's property: its width
STATS = "delta.dataSkippingStatsColumns"  # Delta's: the columns a file's statistics cover
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")


# The secrets a plan's text can hold: a JAAS password, a PEM private key.
PLAN_SECRETS = (
    r'(?i)password\s*=\s*"(?:[^"\\]|\\.)*"'
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"
)


def session(config: Config, app: str) -> SparkSession:
    """A session with Kafka, Avro and Delta, UTC, and the driver bound to loopback by default.

    Under spark-submit (its JVM is already up: pyspark finds it by PYSPARK_GATEWAY_PORT), its
    --master and --packages stand: `[spark] master` set here would override the first, and
    packages named once the JVM runs are never fetched."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark_cfg = config.spark
    builder = (
        SparkSession.builder.appName(f"sluice-{app}-{config.name}")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.databricks.delta.schema.autoMerge.enabled", "true")  # new columns from DDL
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(spark_cfg.shuffle_partitions))
        # Delta rebuilds table state with 50 tasks by default: most of a small batch's time.
        .config("spark.databricks.delta.snapshotPartitions", str(spark_cfg.shuffle_partitions))
        # The batch a MERGE reads is persisted by the job: Delta's own copy of it is a second one.
        .config("spark.databricks.delta.merge.materializeSource", "none")
        # A source's options are in its plan, which Spark logs, shows, writes to its event log
        # and puts in a failed query's error: the Kafka client's JAAS line and private key
        # (connector.config.KafkaSecurity.java_client) are redacted there.
        .config("spark.sql.redaction.options.regex", "(?i)url|jaas|keystore\\.key")
        .config("spark.sql.redaction.string.regex", PLAN_SECRETS)
        # Batches writes tables side by side, each in a pool of its own: FAIR shares the slots
        # between them (FIFO would run one table's jobs before the next one's).
        .config("spark.scheduler.mode", "FAIR")
        # A consumer per topic partition read, kept between batches: Spark keeps 100 by default,
        # and a database of 100 tables at 3 partitions a topic closed and opened 200 of them
        # every batch (the "Pool exceeds its soft max size" warning).
        .config("spark.kafka.consumer.cache.capacity", "2048")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", "false")
    )
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        builder = builder.master(spark_cfg.master).config("spark.jars.packages", ",".join(spark_cfg.packages))
    if spark_cfg.ivy_settings and Path(spark_cfg.ivy_settings).exists():
        builder = builder.config("spark.jars.ivySettings", str(Path(spark_cfg.ivy_settings).resolve()))
    for key, value in spark_cfg.conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def under(base: str, *names: str) -> str:
    """A path below `base`, which may be a URL (`s3a://bucket/lake`, `hdfs://nn:8020/x`): joined
    with "/", as pathlib would fold the URL's "//"."""
    return "/".join([base.rstrip("/"), *names])


def row_topics_pattern(prefix: str, statements: bool = False) -> str:
    """Java regex of the row topics, `{prefix}.{db}.{table}`, and with `statements` the
    statement topics `{prefix}.{db}._ddl` too."""
    escaped = prefix.replace(".", "\\.")
    return f"^{escaped}\\.[^.]+\\.[^.]+$" if statements else f"^{escaped}\\.[^.]+\\.(?!_ddl$)[^.]+$"


# How Spark's Kafka source fetches. With the Java consumer's defaults a task reading 40,000
# messages here ran 1.0 s on 0.22 s of CPU: the rest was waiting on fetches the broker holds
# for up to fetch.max.wait.ms (500). 340,000 messages in 3 partitions, local[2]: 2.0 s with
# the defaults, 1.0 s with a 5 ms wait, 0.8 s with larger fetches besides. Each partition a
# batch reads pays that wait once (500 ms: 300 partitions read in 77 s), and a consumer per
# partition, which registers its metrics with JMX unless told not to: 300 partitions of 1,000
# messages, the median of five reads, 3.7 s with a 5 ms wait and JMX, 2.9 s with 1 ms and none.
# Spark's consumers live in its pool, unnamed: nobody watches them over JMX. Nor do they push
# their metrics to the broker (KIP-714, on by default since Kafka 3.7): each new consumer named
# its every metric for it with regular expressions, 18% of a read's task CPU in a profile, and
# asked the broker for a subscription. 300 partitions of 1,000 messages, local[2], medians of
# eight reads in three pairs of runs: 1.79, 1.79, 1.85 s pushing, 1.40, 1.52, 1.70 s not.
FETCH = {
    "kafka.fetch.max.wait.ms": "1",
    "kafka.max.partition.fetch.bytes": str(32 << 20),
    "kafka.fetch.max.bytes": str(64 << 20),
    "kafka.auto.include.jmx.reporter": "false",
    "kafka.enable.metrics.push": "false",
}


def isolation_options(config: Config) -> dict[str, str]:
    """[kafka] exactly_once: only committed transactions are read (the Java consumer's default
    reads aborted records too, and open ones before they commit)."""
    return {"kafka.isolation.level": "read_committed"} if config.kafka.exactly_once else {}


def security_options(config: Config) -> dict[str, str]:
    """[kafka.security] as options of Spark's Kafka source: the Java client's properties, each as `kafka.<key>`."""
    return {f"kafka.{key}": value for key, value in config.kafka.security.java_client().items()}


def read_changes(spark: SparkSession, config: Config, statements: bool = False) -> DataFrame:
    limit = {"maxOffsetsPerTrigger": str(config.spark.max_offsets)} if config.spark.max_offsets else {}
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", config.kafka.bootstrap_servers)
        .option("subscribePattern", row_topics_pattern(config.kafka.topic_prefix, statements))
        .option("startingOffsets", "earliest")
        .options(**FETCH)
        .options(**isolation_options(config))
        .options(**security_options(config))
        .options(**limit)
        .load()
    )


class WriterSchemas:
    """Where a value's writer schema comes from: its single-object fingerprint (bytes 3-10,
    looked up in `schemas/`) or, with a registry, its Confluent schema id (bytes 2-5)."""

    def __init__(self, directory: SchemaDirectory, registry: Any = None) -> None:
        self.directory = directory
        self.registry = registry
        self.id_start, self.id_length = (2, 4) if registry is not None else (3, 8)

    def writer(self, schema_id: str) -> dict[str, Any]:
        if self.registry is None:
            return self.directory.schema_by_fingerprint(bytes.fromhex(schema_id))
        schema: dict[str, Any] = json.loads(self.registry.get_schema(int(schema_id, 16)).schema_str)
        return schema

    def frame(self, batch: DataFrame) -> DataFrame:
        """The writer schema's id (hex) and the Avro body of each message, with its place in the
        topic and whether it is a statement (a `_ddl` topic's)."""
        header = self.id_start + self.id_length - 1
        return batch.select(
            F.hex(F.substring("value", self.id_start, self.id_length)).alias("fp"),
            F.expr(f"substring(value, {header + 1}, length(value) - {header})").alias("body"),
            "topic", "partition", "offset", F.col("topic").endswith("._ddl").alias("statement"),
        )  # fmt: skip


FRAMED = "fp STRING, body BINARY, topic STRING, partition INT, offset BIGINT, statement BOOLEAN"  # WriterSchemas.frame


Key = tuple[str, str]  # a source table: database, table
Writers = dict[Key, dict[str, dict[str, Any]]]  # per table, its writer schemas by id


@dataclass(frozen=True, slots=True)
class Contents:
    """What a batch holds: per table its writer schemas and its row messages, and whether it
    holds statements."""

    writers: Writers
    rows: dict[Key, int]
    sizes: dict[Key, int]  # the bytes of its row messages' bodies
    statements: bool


def writers_in(framed: DataFrame, schemas: WriterSchemas) -> Contents:
    """The writer schemas of the batch's row messages, their count and bytes, per table, and
    whether it holds statements: one pass over the batch."""
    writers: Writers = {}
    rows: dict[Key, int] = {}
    sizes: dict[Key, int] = {}
    statements = False
    counted = framed.groupBy("fp", "statement").agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("size"))
    for row in counted.collect():
        if row["statement"]:
            statements = True
            continue
        writer = schemas.writer(row["fp"])
        table = (writer["sluice.database"], writer["sluice.table"])
        writers.setdefault(table, {})[row["fp"]] = writer
        rows[table] = rows.get(table, 0) + row["n"]
        sizes[table] = sizes.get(table, 0) + (row["size"] or 0)
    return Contents(writers, rows, sizes, statements)


# canal's types of the statements that can take a table's rows away (QUERY: DROP DATABASE).
_EMPTYING = ("TRUNCATE", "ERASE", "RENAME", "CREATE", "QUERY")


def emptied(framed: DataFrame, directory: SchemaDirectory) -> dict[Key, int]:
    """Per table, the position (`id`) of the batch's last statement that took its rows away."""
    ddl = from_avro(F.col("body"), json.dumps(directory.ddl()[0]), {"mode": "FAILFAST"})
    statements = framed.filter("statement").select(ddl.alias("d")).filter(F.col("d.type").isin(*_EMPTYING))
    rows = statements.select("d.id", "d.type", "d.database", "d.table", "d.sql").orderBy("id").collect()
    if not rows:
        return {}
    known = stub_schema(directory.table_names())
    out: dict[Key, int] = {}
    for row in rows:  # in order: each statement read against the tables the ones before it left
        for key in emptied_by(known, row["type"], row["database"], row["table"], row["sql"]):
            out[key] = row["id"]
    return out


def stub_schema(tables: list[Key]) -> Schema:
    """A schema with the named tables (one column each): enough to read which ones a statement drops."""
    schema = Schema()
    for database, table in tables:
        apply_ddl(schema, f"CREATE TABLE {quote_identifier(database)}.{quote_identifier(table)} (`_` INT)", database)
    return schema


def emptied_by(known: Schema, kind: str, database: str, table: str, sql: str) -> list[Key]:
    """The tables whose rows a statement took away, read with the connector's own DDL reader
    against `known` (which it then updates): TRUNCATE TABLE; every table of a DROP TABLE and of a
    DROP DATABASE; the old name of a RENAME; a table CREATE OR REPLACE made again. A statement
    the reader cannot read counts for the table its message names if it is a TRUNCATE or DROP."""
    before = set(known.tables)
    for session in (Session(), Session(mariadb=True)):
        changes = read_ddl(known, sql, database, session)
        if not isinstance(changes, Unreadable):
            break
    else:
        named = (database, table)
        return [named] if kind in ("TRUNCATE", "ERASE") and named in before else []
    gone = []
    for change in changes:
        key = (change.database, change.table)
        if change.table and (change.definition is None or (kind in ("TRUNCATE", "CREATE") and key in before)):
            gone.append(key)
    return gone


# The envelope fields each job reads (`reading`): not `sql`, `pkNames` and the like, which a
# statement's text can make the larger part of a message.
MIRRORED = ("id", "type", "data", "source.row")
LOGGED = ("id", "type", "es", "gtid", "data", "old", "source")


def reading(schema: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """`schema` with only the envelope's `fields` (a dotted name, `source.row`: of that record,
    only those of its fields): Avro's resolution skips the rest of each value without making
    Spark values of them."""
    kept = []
    for field in schema["fields"]:
        inner = [name.partition(".")[2] for name in fields if name.partition(".")[0] == field["name"]]
        if inner and all(inner):  # of a record, the named fields only
            record = field["type"]
            kept.append({**field, "type": {**record, "fields": [f for f in record["fields"] if f["name"] in inner]}})
        elif inner:
            kept.append(field)
    return {**schema, "fields": kept}


# Spark's DecimalType holds at most 38 digits (DecimalType.MAX_PRECISION); MySQL's and MariaDB's
# DECIMAL up to 65 (DECIMAL_MAX_PRECISION), with up to 30 after the point in MySQL and 38 in
# MariaDB (DECIMAL_MAX_SCALE: MySQL's include/my_decimal.h, MariaDB's include/decimal.h).
# spark-avro fails on a reader field it cannot make a DecimalType of
# (DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION), and with it the table's whole batch.
SPARK_DECIMAL_DIGITS = 38


def spark_holds(precision: int, scale: int) -> bool:
    """Whether Spark's DecimalType holds a DECIMAL(precision, scale) exactly."""
    return 0 <= scale <= precision <= SPARK_DECIMAL_DIGITS


def _decimal_in(kind: Any) -> dict[str, Any] | None:
    """The Avro decimal type of a field's type (a nullable field's non-null branch), if it is one."""
    for branch in kind if isinstance(kind, list) else [kind]:
        if isinstance(branch, dict) and branch.get("logicalType") == "decimal":
            return branch
    return None


def wide_decimals(schema: dict[str, Any]) -> dict[str, int]:
    """The row fields of a value schema whose DECIMAL Spark cannot hold, with their scales."""
    wide = {}
    for field in row_fields(schema):
        decimal = _decimal_in(field["type"])
        if decimal is not None and not spark_holds(int(decimal["precision"]), int(decimal.get("scale", 0))):
            wide[field["name"]] = int(decimal.get("scale", 0))
    return wide


def as_bytes(schema: dict[str, Any], wide: dict[str, int]) -> dict[str, Any]:
    """`schema` with the `wide` decimal fields plain `bytes`: a reader schema spark-avro takes
    (Avro resolves a decimal's bytes to bytes; a field's default, bytes already, still fits).
    `old`'s rows name the same record, so both images change."""
    if not wide:
        return schema

    def plain(kind: Any) -> Any:
        if isinstance(kind, list):
            return [plain(branch) for branch in kind]
        return "bytes" if _decimal_in(kind) is not None else kind

    row = [{**f, "type": plain(f["type"])} if f["name"] in wide else f for f in row_fields(schema)]

    def read(field: dict[str, Any]) -> dict[str, Any]:
        if field["name"] != "data":
            return field
        array = field["type"][1]
        return {**field, "type": ["null", {**array, "items": {**array["items"], "fields": row}}]}

    return {**schema, "fields": [read(field) for field in schema["fields"]]}


# The text of a DECIMAL from Avro's unscaled bytes (big-endian two's complement) in Spark SQL
# alone: no Python on the executors, and deterministic (a `reflect` call into Java's BigInteger
# is not, and Spark refuses it in the newest-per-key aggregation). The magnitude, at most 224
# bits (two's complement of 65 digits needs 217), is two 112-bit halves, each exact in a
# DECIMAL(38,0): value = high * 2^112 + low. With high = a * 10^17 + b and 2^112 = P1 * 10^17
# + P0, the value's three 17-digit groups (the top one up to 34) are sums of products of those
# (schoolbook multiplication), each below 10^34. A handful of operations, so a small expression:
# a plan holds a copy of a subexpression wherever it is used (Spark computes it once), and a
# first version, a chain of carries over 9-digit groups, grew a table's plan to megabytes and
# the driver out of memory.
_DECIMAL = "decimal(38,0)"
_HEX_DIGITS = 56  # 224 bits
_GROUP = 10**17
_P1, _P0 = divmod(2**112, _GROUP)


def _number(value: int) -> Column:
    return F.lit(value).cast(_DECIMAL)


def _half(bits: Column, at: int) -> Column:
    """The 28 hex digits of `bits` from `at` (1-based) as a number: `conv` reads 64 bits at most."""
    high = F.conv(F.substring(bits, at, 14), 16, 10).cast(_DECIMAL)
    return high * _number(2**56) + F.conv(F.substring(bits, at + 14, 14), 16, 10).cast(_DECIMAL)


def _digits(hexed: Column, negative: Column) -> tuple[Column, Column]:
    """The magnitude's 68 decimal digits (leading zeros) as its high 34 and its low 34. A
    negative value's magnitude is its bits inverted, plus one (added to the low half)."""
    inverted = F.when(negative, F.translate(hexed, "0123456789ABCDEF", "FEDCBA9876543210")).otherwise(hexed)
    bits = F.substring(F.concat(F.lit("0" * _HEX_DIGITS), inverted), -_HEX_DIGITS, _HEX_DIGITS)
    high, low = _half(bits, 1), _half(bits, 29) + F.when(negative, 1).otherwise(0)
    a, b = F.call_function("div", high, _number(_GROUP)), high % _number(_GROUP)
    s0 = b * _number(_P0) + low  # < 10^17 * P0 + 2^112 < 10^34
    s1 = a * _number(_P0) + b * _number(_P1) + F.call_function("div", s0, _number(_GROUP))
    s2 = a * _number(_P1) + F.call_function("div", s1, _number(_GROUP))
    low_groups = [F.lpad((group % _number(_GROUP)).cast("string"), 17, "0") for group in (s1, s0)]
    return F.lpad(s2.cast("string"), 34, "0"), F.concat(*low_groups)


def decimal_text(unscaled: Column, scale: int) -> Column:
    """The exact text of a DECIMAL of `scale` (at most 68) from its unscaled value's bytes, as
    MySQL prints it (strings/decimal.cc, decimal2string): `-` when negative, the integer digits
    (at least one, no leading zeros), then with a scale `.` and exactly `scale` digits. NULL
    stays NULL."""
    hexed = F.hex(unscaled)
    negative = F.substring(hexed, 1, 1) >= F.lit("8")
    whole, fraction = _split(*_digits(hexed, negative), scale)
    text = F.regexp_replace(whole, F.lit("^0+(?=.)"), F.lit(""))  # one digit at least
    if scale:
        text = F.concat(text, F.lit("."), fraction)
    return F.concat(F.when(negative, F.lit("-")).otherwise(F.lit("")), text)


def _split(high: Column, low: Column, scale: int) -> tuple[Column, Column]:
    """68 digits (their high and low 34) as the first 68 - `scale` and the last `scale`."""
    if scale <= 34:
        return F.concat(high, F.substring(low, 1, 34 - scale)), F.substring(low, 35 - scale, scale)
    return F.substring(high, 1, 68 - scale), F.concat(F.substring(high, 69 - scale, scale - 34), low)


def with_text(message: Column, reader: dict[str, Any], wide: dict[str, int]) -> Column:
    """A decoded message (of `reader`) with its `wide` decimals (bytes) as their text, in the row
    of each image (`data`, `old`: one-row arrays, or null). Built once, field by field, and with
    no condition around the text: Spark computes an expression shared by several uses once only
    where it always evaluates it (so a CASE around the text would compute its parts again)."""
    names = [field["name"] for field in row_fields(reader)]
    envelope = []
    for field in reader["fields"]:
        value = message[field["name"]]
        if field["name"] in ("data", "old"):
            row = value.getItem(0)
            texts = [(decimal_text(row[n], wide[n]) if n in wide else row[n]).alias(n) for n in names]
            # One row, or null where there is none: array_size is null for a null array.
            value = F.slice(F.array(F.struct(*texts)), 1, F.array_size(value))
        envelope.append(value.alias(field["name"]))
    return F.struct(*envelope)


def decode(
    framed: DataFrame, schemas: WriterSchemas, writers: Writers, fields: tuple[str, ...] = ()
) -> dict[tuple[str, str], DataFrame]:
    """Per source table, the batch's messages as rows of the table's newest value schema (with
    `fields`, only those envelope fields), a DECIMAL Spark cannot hold as its exact text.

    Each table's messages are decoded in one projection that picks the writer schema by
    fingerprint (every branch resolves to the table's newest schema, so they share one type)."""
    out = {}
    for key, by_fp in writers.items():
        message, reader, wide = decoder(schemas.directory, key, by_fp, fields)
        rows = framed.filter(~F.col("statement") & F.col("fp").isin(list(by_fp)))
        decoded = rows.select(message.alias("m"), "partition", "offset")
        if wide:  # over the decoded column: the text's expression names it many times
            decoded = decoded.select(with_text(F.col("m"), reader, wide).alias("m"), "partition", "offset")
        out[key] = decoded
    return out


def reader_of(directory: SchemaDirectory, table: Key, fields: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, int]]:
    """The schema a table's messages are read as (its newest, with `fields` only those envelope
    fields, its wide decimals as bytes) and its wide decimals."""
    newest = directory.latest_schema(*table)
    wide = wide_decimals(newest)
    return as_bytes(reading(newest, fields) if fields else newest, wide), wide


def decoder(
    directory: SchemaDirectory, table: Key, by_fp: dict[str, dict[str, Any]], fields: tuple[str, ...]
) -> tuple[Column, dict[str, Any], dict[str, int]]:
    """A table's message decoded (a value of its newest schema, with `fields` only those envelope
    fields) from the writer schema its fingerprint names; the reader schema; its wide decimals."""
    reader, wide = reader_of(directory, table, fields)
    options = {"mode": "FAILFAST", "avroSchema": json.dumps(reader)}
    branches = [(F.col("fp") == fp, from_avro(F.col("body"), json.dumps(w), options)) for fp, w in by_fp.items()]
    message = branches[0][1]
    if len(branches) > 1:
        message = F.when(*branches[0])
        for condition, value in branches[1:]:
            message = message.when(condition, value)
    return message, reader, wide


def row_names(directory: SchemaDirectory, table: Key) -> list[str]:
    """The names of a table's columns in its newest value schema."""
    return [field["name"] for field in row_fields(directory.latest_schema(*table))]


def mirror_row(message: Column, names: list[str]) -> Column:
    """A decoded message as the mirror's row: the row's columns (`names`), then `_sluice_type`
    and the position."""
    row = message["data"].getItem(0)
    return F.struct(
        *[row[name].alias(name) for name in names],
        message["type"].alias("_sluice_type"), message["id"].alias("_sluice_id"),
        message["source"]["row"].alias("_sluice_row"),
    )  # fmt: skip


def changelog_entry(message: Column) -> Column:
    """A decoded message as the changelog's entry: its operation, source position, event time,
    after-image and before-image."""
    is_delete, data, event = message["type"] == "DELETE", message["data"].getItem(0), F.timestamp_millis(message["es"])
    source = message["source"]
    return F.struct(
        message["type"].alias("op"),
        source["file"].alias("source_file"), source["pos"].alias("source_pos"), source["row"].alias("source_row"),
        source["server_id"].alias("source_server_id"), message["id"].alias("sluice_id"),
        message["gtid"].alias("gtid"), event.alias("event_time"), F.to_date(event).alias("event_date"),
        F.when(is_delete, F.lit(None)).otherwise(data).alias("after"),
        F.when(is_delete, data).otherwise(message["old"].getItem(0)).alias("before"),
        F.current_timestamp().alias("ingested_at"),
    )  # fmt: skip


# The two row shapes again, for messages decoded in the driver (`spark.driver.decoded`): Python
# values and their Spark type, as Spark makes them from the same message; each beside the Column
# it repeats, and tests/test_spark_live.py holds both equal (values and Arrow types).
Shaped = tuple[list[dict[str, Any]], StructType]
Shape = Callable[[list[dict[str, Any]], StructType], Shaped]  # a message's row, for the mirror or the changelog


def _first(images: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    return images[0] if images else None  # getItem(0): null for a null or empty array


def mirror_values(messages: list[dict[str, Any]], envelope: StructType, names: list[str], cut: int) -> Shaped:
    """`mirror_row` of each message newer than `cut` (the table's last emptying)."""
    row_type = envelope["data"].dataType.elementType  # type: ignore[attr-defined]
    schema = StructType([
        *[StructField(name, row_type[name].dataType) for name in names], StructField("_sluice_type", StringType()),
        StructField("_sluice_id", envelope["id"].dataType),
        StructField("_sluice_row", envelope["source"].dataType["row"].dataType),  # type: ignore[index]
    ])  # fmt: skip
    rows = []
    for message in messages:
        if message["id"] > cut:
            row = _first(message["data"]) or {}
            rows.append({**{name: row.get(name) for name in names}, "_sluice_type": message["type"],
                         "_sluice_id": message["id"], "_sluice_row": message["source"]["row"]})  # fmt: skip
    return rows, schema


DAY_MS = 86_400_000


def changelog_values(messages: list[dict[str, Any]], envelope: StructType) -> Shaped:
    """`changelog_entry` of each message (its times in Arrow's numbers: microseconds, days; UTC,
    the session's zone)."""
    row_type, source = envelope["data"].dataType.elementType, envelope["source"].dataType  # type: ignore[attr-defined]
    schema = StructType([
        StructField("op", StringType()), *[StructField(f"source_{n}", source[n].dataType) for n in  # type: ignore[index]
                                           ("file", "pos", "row", "server_id")],
        StructField("sluice_id", envelope["id"].dataType), StructField("gtid", envelope["gtid"].dataType),
        StructField("event_time", TimestampType()), StructField("event_date", DateType()),
        StructField("after", row_type), StructField("before", row_type),
        StructField("ingested_at", TimestampType(), nullable=False),
    ])  # fmt: skip
    now = int(time.time() * 1_000_000)
    entries = []
    for message in messages:
        deleted, data, source_of = message["type"] == "DELETE", _first(message["data"]), message["source"]
        entries.append({
            "op": message["type"], **{f"source_{n}": source_of[n] for n in ("file", "pos", "row", "server_id")},
            "sluice_id": message["id"], "gtid": message["gtid"], "event_time": message["es"] * 1000,
            "event_date": message["es"] // DAY_MS, "after": None if deleted else data,
            "before": data if deleted else _first(message["old"]), "ingested_at": now,
        })  # fmt: skip
    return entries, schema


def fields_of(frame: DataFrame, column: Column) -> DataFrame:
    """`frame` with `column` (a struct) as its columns."""
    return frame.select(column.alias("_struct")).select("_struct.*")


def column_mapping(spark: SparkSession, path: str) -> None:
    """Delta column mapping by name (readers and writers of Delta 1.2 and later), which renaming
    and dropping a column need; turned on the first time one is."""
    if properties_of(spark, path).get("delta.columnMapping.mode") != "name":
        spark.sql(
            f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name',"
            " 'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')"
        )


def follow_drops(spark: SparkSession, path: str, fields: list[dict[str, Any]], have: list[str]) -> bool:
    """Drop the mirror's columns (`have`) the table's newest schema no longer has (a DROP
    COLUMN, or a table renamed onto the mirrored name that lacks them): else the mirror kept
    them, with the old rows' values, where SELECT * has none. Sluice's own columns stay.
    Whether it dropped any."""
    wanted = {field["name"] for field in fields}
    gone = [c for c in have if c not in wanted and not c.startswith("_sluice")]
    if not gone:
        return False
    column_mapping(spark, path)
    spark.sql(f"ALTER TABLE delta.`{path}` DROP COLUMNS ({', '.join(f'`{c}`' for c in gone)})")
    log.info("mirror %s: column(s) %s dropped, as in the source", path, ", ".join(gone))
    return True


def follow_renames(spark: SparkSession, path: str, fields: list[dict[str, Any]], have: list[str]) -> list[str]:
    """Rename the mirror's columns (`have`) the source renamed: a newest field the table lacks
    whose alias (an earlier name, newest first) it has. Without it, rows no change touches after
    the rename would show the column as NULL. A rename needs Delta column mapping by name
    (readers and writers of Delta 1.2 and later); it is turned on at the first rename. Run
    again after a failure, it finds the new names there and does nothing. The columns after."""
    renames = []
    for field in fields:
        old = next((a for a in field.get("aliases", ()) if a in have), None)
        if field["name"] not in have and old is not None:
            renames.append((old, field["name"]))
    if not renames:
        return have
    column_mapping(spark, path)
    for old, new in renames:
        spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN `{old}` TO `{new}`")
        log.info("mirror %s: column %s renamed to %s, as in the source", path, old, new)
    names = dict(renames)
    return [names.get(column, column) for column in have]


def properties_of(spark: SparkSession, path: str) -> dict[str, str]:
    """A Delta table's properties, from its log's metadata (DESCRIBE DETAIL runs jobs over its files)."""
    return {row["key"]: row["value"] for row in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}


def newest_per_key(rows: DataFrame, keys: list[str]) -> DataFrame:
    """Per key, the batch's newest change (source position, then row) of the mirror's rows
    (`mirror_row`): one aggregation, no sort of the batch."""
    newest = F.max_by(F.struct(*[rows[c] for c in rows.columns]), F.struct(*POSITION)).alias("_newest")
    by_key = rows.groupBy(*[rows[k].alias(f"_key{i}") for i, k in enumerate(keys)])
    return by_key.agg(newest).select("_newest.*")


def ranged(latest: DataFrame, key: str, width: int) -> DataFrame:
    """`latest` with its rows' key range: the leading key column divided by `width`."""
    return latest.withColumn(RANGE, F.expr(f"`{key}` div {width}"))


def key_bounds(latest: DataFrame, key: str) -> str:
    """The batch's leading key values as a condition on the target: Delta reads and rewrites
    only the files whose statistics overlap it (with ranges, those of the ranges it touches)."""
    low, high = latest.agg(F.min(key), F.max(key)).collect()[0]
    return "" if low is None else f" AND t.`{key}` BETWEEN {int(low)} AND {int(high)}"


def width_for(latest: DataFrame, key: str, key_range: int) -> int:
    """A new mirror table's key range width: [spark] key_range if its leading key is an integer."""
    return key_range if latest.schema[key].dataType.simpleString() in _INTEGRAL else 0


# The types Delta keeps file statistics for (not binary, boolean or nested ones).
_WITH_STATS = (NumericType, StringType, DateType, TimestampType, TimestampNTZType)


def stats_columns(schema: StructType, keys: list[str]) -> str:
    """A mirror table's file statistics: its key and the position `empty` deletes by. A MERGE
    spreads rows over files by key hash, so other columns' bounds skip no file, while every
    rewrite computes them: a fifth of a MERGE's time on a table of five other columns. A key
    column Delta keeps no statistics for (BINARY(16) UUIDs, BOOLEAN) is left out: naming it
    fails the write."""
    types = {field.name: field.dataType for field in schema.fields}
    kept = [k for k in keys if isinstance(types.get(k), _WITH_STATS)]
    return ",".join(quote_identifier(column) for column in [*kept, "_sluice_id"])


def statistics_on_key(
    spark: SparkSession, path: str, schema: StructType, keys: list[str], properties: dict[str, str]
) -> None:
    """A mirror table made before it kept statistics on its key only (`stats_columns`) is moved
    to them; one whose statistics columns somebody set is left as it is."""
    if STATS not in properties:
        value = stats_columns(schema, keys).replace("\\", "\\\\").replace("'", "\\'")
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{STATS}' = '{value}')")


def create(spark: SparkSession, path: str, latest: DataFrame, keys: list[str], width: int) -> None:
    """A new mirror table of the batch's newest non-deleted rows; with a width, partitioned by key range."""
    rows = latest.filter("_sluice_type <> 'DELETE'").drop("_sluice_type")
    stats = stats_columns(rows.schema, keys)
    writer = (ranged(rows, keys[0], width) if width else rows).write.format("delta").option(STATS, stats)
    if not width:
        writer.save(path)
        return
    writer.partitionBy(RANGE).save(path)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{KEY_RANGE}' = '{width}')")


def merge(target: DeltaTable, latest: DataFrame, keys: list[str], bounds: str = "") -> None:
    """Apply each key's newest change where it is newer than the row's position in the table."""
    columns = [c for c in latest.columns if c != "_sluice_type"]
    on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys) + bounds  # a primary key's columns are never NULL
    newer = "(s._sluice_id > t._sluice_id OR (s._sluice_id = t._sluice_id AND s._sluice_row > t._sluice_row))"
    values: dict[str, str | Column] = {f"`{c}`": f"s.`{c}`" for c in columns}
    (
        target.alias("t").merge(latest.alias("s"), on)
        .whenMatchedDelete(f"s._sluice_type = 'DELETE' AND {newer}")
        .whenMatchedUpdate(f"s._sluice_type <> 'DELETE' AND {newer}", values)
        .whenNotMatchedInsert("s._sluice_type <> 'DELETE'", values)
        .execute()
    )  # fmt: skip


def framed_once(schemas: WriterSchemas, each: Callable[[DataFrame, int], None]) -> Callable[[DataFrame, int], None]:
    """A foreachBatch function: the batch framed and persisted (read from Kafka once, without
    the columns no pass reads), then handed to `each`.

    The batch comes in one Spark partition per Kafka partition: a connector's topics at 3
    partitions each, a database of 100 tables is 300 of them, and every pass over the batch
    (each table's decode reads it) ran 300 tasks, most of them empty: per table, whatever its
    rows. Persisted in as many partitions as the cluster has cores, a pass is that many tasks."""

    def apply(batch: DataFrame, batch_id: int) -> None:
        cores = batch.sparkSession.sparkContext.defaultParallelism
        framed = schemas.frame(batch).coalesce(cores).persist()
        try:
            each(framed, batch_id)
        finally:
            framed.unpersist()

    return apply


@dataclass(frozen=True, slots=True)
class Part:
    """One table's share of a batch: the messages to read it from, its writer schemas by id,
    and (the mirror) the position of the batch's last statement that took its rows away."""

    frame: DataFrame
    writers: dict[str, dict[str, Any]]
    emptied_at: int | None
    rows: int = 0  # its row messages
    size: int = 0  # their bodies' bytes

    def small(self, config: Config) -> bool:
        """Whether its rows are few and small enough to be written in the driver (`spark.driver`)."""
        return 0 < self.rows <= config.spark.driver_rows and self.size <= WRITTEN_IN_DRIVER_BYTES

    def tiny(self, config: Config) -> bool:
        """Whether its rows are few and small enough to be decoded in the driver too (`collect_in_driver`)."""
        return self.small(config) and self.rows <= DECODED_IN_DRIVER and self.size <= DECODED_IN_DRIVER_BYTES


# A table's messages decoded in the driver at most. fastavro reads 70-100k messages a second on
# a core (`driver.in_a_decoder`: as many processes as cores, up to 4); a Spark job decodes on
# every core but costs a few hundred milliseconds whatever its rows. 10 tables of 10,000
# changes (bench/spark.py --tables 10, local[2], medians of 3): the mirror 2.4 s decoded in the
# driver, 1.8 s by a Spark job a table; the changelog 2.3 s and 2.5 s. 100 tables of 1,000:
# 9.6-10.5 s decoded in the driver, 14.3 s in Spark (16 tables a job; measured before decoding
# moved to the decoder processes, which took it to 5.3 s).
DECODED_IN_DRIVER = 2_000

# What a batch brings to the driver's memory at most, in message bytes (a row can be 20 MiB:
# `driver_rows` of them would not fit): a table's rows written there (they come as Arrow, about
# their messages' size), a table's messages decoded there (their Python values take several
# times their bytes), and all the tables' messages decoded there at once (`collect_in_driver`
# fetches them in one job; the tables past it are decoded by Spark). The driver's JVM and
# Python share its memory: 1 GiB of heap by default.
WRITTEN_IN_DRIVER_BYTES = 64 << 20
DECODED_IN_DRIVER_BYTES = 16 << 20
FETCHED_IN_DRIVER_BYTES = 256 << 20


def parts_of(framed: DataFrame, schemas: WriterSchemas, statements: bool) -> dict[Key, Part]:
    """Each table's part of a framed batch; with `statements`, the tables its statements emptied too."""
    contents = writers_in(framed, schemas)
    cuts = emptied(framed, schemas.directory) if statements and contents.statements else {}
    return {
        key: Part(framed, contents.writers.get(key, {}), cuts.get(key), contents.rows.get(key, 0),
                  contents.sizes.get(key, 0))
        for key in contents.writers.keys() | cuts.keys()
    }


@dataclass(frozen=True, slots=True)
class Chosen:
    """A small table to decode in the driver: its writer schemas, its Delta table as delta-rs
    opened it, and its rows of the decoded messages (`mirror_values`, `changelog_values`)."""

    writers: dict[str, dict[str, Any]]
    target: driver.Target
    shape: Shape
    size: int  # its messages' bytes


@dataclass(frozen=True, slots=True)
class Collected:
    """A table's rows in the driver, their Spark type (which `driver.fits` compares), and its
    Delta table as delta-rs opened it."""

    rows: pa.Table
    schema: StructType
    target: driver.Target


@dataclass(frozen=True, slots=True)
class Fetched:
    """A small table's message bodies in the driver (`collect_in_driver`), decoded by its own
    write (`rows`), in a decoder process (`driver.in_a_decoder`): while it decodes, the thread
    that then merges them waits without Python's lock, and other tables' decoding and merges
    (delta-rs, in Rust) run."""

    table: Key
    chosen: Chosen
    bodies: list[tuple[str, bytes]]

    @property
    def target(self) -> driver.Target:
        return self.chosen.target

    def rows(self, spark: SparkSession, directory: SchemaDirectory, fields: tuple[str, ...]) -> Collected | None:
        """Its rows (`in_driver`), or None when its messages do not decode here: its write
        decodes them in Spark then, where a failure is its own."""
        one = self.chosen
        try:
            rows, schema = in_driver(spark, directory, self.table, one.writers, one.shape, self.bodies, fields)
        except Exception as exc:  # fastavro's errors have no common base
            log.info("%s.%s: not decoded in the driver, by Spark instead: %s", *self.table, error_line(exc))
            return None
        return Collected(rows, schema, one.target)


def fetchable(chosen: dict[Key, Chosen], budget: int = FETCHED_IN_DRIVER_BYTES) -> dict[Key, Chosen]:
    """Of the chosen tables, the most whose messages fit in `budget` bytes together: the
    smallest first."""
    kept: dict[Key, Chosen] = {}
    for table, one in sorted(chosen.items(), key=lambda item: item[1].size):
        if one.size > budget:
            break
        kept[table], budget = one, budget - one.size
    return kept


def collect_in_driver(framed: DataFrame, chosen: dict[Key, Chosen]) -> dict[Key, Fetched]:
    """The chosen tables' message bodies brought to the driver in one Spark job, to be decoded
    there (`Fetched.rows`), as many tables as fit in its budget (`fetchable`; the others'
    writes decode them in Spark). A Spark decode costs a job a table (or a group's wide rows,
    null in the other tables' columns): plans, code and tasks, a few hundred milliseconds a
    table whatever its rows."""
    chosen = fetchable(chosen)
    tables = {fp: table for table, one in chosen.items() for fp in one.writers}
    if not tables:
        return {}
    wanted = framed.filter(~F.col("statement") & F.col("fp").isin(list(tables))).select("fp", "body")
    bodies = driver.arrow_of(wanted)
    messages: dict[Key, list[tuple[str, bytes]]] = {}
    for fp, body in zip(bodies.column("fp").to_pylist(), bodies.column("body").to_pylist(), strict=True):
        messages.setdefault(tables[fp], []).append((fp, body))
    return {table: Fetched(table, chosen[table], mine) for table, mine in messages.items()}


def in_driver(
    spark: SparkSession, directory: SchemaDirectory, table: Key, writers: dict[str, dict[str, Any]], shape: Shape,
    bodies: list[tuple[str, bytes]], fields: tuple[str, ...],
) -> tuple[pa.Table, StructType]:  # fmt: skip
    """A table's messages (of `writers`, by id) decoded in the driver as Spark would (`decoder`,
    `with_text`), shaped into the job's rows (`shape`): Arrow, and its Spark type. The schemas
    and the Spark type are found here; the decoding runs in a decoder process (`shaped_rows`)."""
    reader, wide = reader_of(directory, table, fields)
    # fastavro makes a Decimal of a writer's decimal whatever the reader's type: a wide one is
    # read as the bytes Spark reads it as (as_bytes), made text as `with_text` makes it.
    plain = {fp: as_bytes(w, wide) for fp, w in writers.items()}
    newest = as_bytes(directory.latest_schema(*table), wide)
    envelope = driver.spark_type(spark, reader)
    if wide:
        envelope = texts_type(envelope, wide)
    return driver.in_a_decoder(shaped_rows, bodies, plain, reader, newest, wide, envelope, shape)


def shaped_rows(
    bodies: list[tuple[str, bytes]], writers: dict[str, dict[str, Any]], reader: dict[str, Any],
    newest: dict[str, Any], wide: dict[str, int], envelope: StructType, shape: Shape,
) -> tuple[pa.Table, StructType]:  # fmt: skip
    """`in_driver`'s decoding (`driver.decoded`), the wide decimals made text and the rows
    shaped: what holds Python's lock, in a process of its own."""
    messages = driver.decoded(bodies, writers, reader, newest)
    if wide:
        images = [image[0] for m in messages for image in (m.get("data"), m.get("old")) if image]
        for row in images:
            for name, scale in wide.items():
                row[name] = driver.unscaled_text(row[name], scale)
    rows, schema = shape(messages, envelope)
    return driver.as_arrow(rows, schema), schema


def texts_type(envelope: StructType, wide: dict[str, int]) -> StructType:
    """The Spark type `with_text` gives a decoded message: in each image's row, the `wide`
    decimals as text, every column nullable (the row is read from a one-row array)."""

    def image(field: StructField) -> StructField:
        if field.name not in ("data", "old"):
            return field
        row = field.dataType.elementType  # type: ignore[attr-defined]
        columns = [StructField(f.name, StringType() if f.name in wide else f.dataType) for f in row.fields]
        return StructField(field.name, ArrayType(StructType(columns), containsNull=False))

    return StructType([image(field) for field in envelope.fields])


class TableJob(Protocol):
    """What a job does with one table's part of a batch (`write`), and what it drops of what it
    keeps about a table after a failure, to read it afresh (`forget`)."""

    statements: bool  # whether it reads the statement topics (`_ddl`)

    def prepare(self, framed: DataFrame, parts: dict[Key, Part]) -> None:
        """Before the batch's tables are written: what it does for many at once."""

    def write(self, table: Key, part: Part, batch_id: int) -> None: ...

    def forget(self, table: Key) -> None: ...


class Mirror:
    """The mirror's work on a table: statements that emptied it applied, then its newest change
    per key merged (or, for a table the lake does not hold yet, written)."""

    statements = True  # TRUNCATE, DROP and the like empty the mirror's tables

    def __init__(self, spark: SparkSession, config: Config, schemas: WriterSchemas) -> None:
        self.spark, self.config, self.schemas = spark, config, schemas
        self.cuts: dict[str, int] = {}  # per mirror table, the position it was last emptied at (-1: never)
        self.widths: dict[str, int] = {}  # per mirror table, its key range width (0: not partitioned by range)
        self.ready: dict[Key, Fetched] = {}  # the batch's small tables' messages, in the driver (`prepare`)

    def prepare(self, framed: DataFrame, parts: dict[Key, Part]) -> None:
        """The messages of the batch's small tables that delta-rs can merge into as they are,
        brought to the driver (`collect_in_driver`) to be decoded there, not in a Spark job
        each. Not those a statement of the batch emptied (their position to merge after
        moves), nor tables partitioned by key range, new ones, or ones left to Spark
        (`driver.open_target`)."""
        chosen: dict[Key, Chosen] = {}
        for table, part in parts.items():
            keys = self.schemas.directory.key_columns(*table)
            if not (part.tiny(self.config) and part.writers and keys) or part.emptied_at is not None:
                continue
            path = self.path(table)
            target = driver.open_target(path)
            try:
                cut = self.cut_of(path, keys, target) if target is not None else -1
            except Exception:  # its write meets it again: a table's failure is its own (`one_table`)
                log.debug("%s.%s: its mirror's properties not read", *table, exc_info=True)
                continue
            if target is None or self.widths[path]:
                continue
            names = row_names(self.schemas.directory, table)
            shape = functools.partial(mirror_values, names=names, cut=cut)
            chosen[table] = Chosen(part.writers, target, shape, part.size)
        self.ready = collect_in_driver(framed, chosen)

    def path(self, table: Key) -> str:
        return under(self.config.spark.lake_dir, "mirror", *table)

    def cut_of(self, path: str, keys: list[str], target: driver.Target | None = None) -> int:
        """The position a mirror table was last emptied at, read once per run with its width
        (and its statistics columns set, if they never were); from `target` if delta-rs opened it."""
        if path not in self.cuts:
            if target is not None:
                properties, schema = target.properties, target.schema
            else:
                properties, schema = properties_of(self.spark, path), self.spark.read.format("delta").load(path).schema
            statistics_on_key(self.spark, path, schema, keys, properties)
            self.cuts[path] = int(properties.get(TRUNCATED_AT, -1))
            # RANGE is only ever the partition column; a crash before the property: the config's.
            ranges = RANGE in schema.fieldNames()
            self.widths[path] = int(properties.get(KEY_RANGE, self.config.spark.key_range)) if ranges else 0
        return self.cuts[path]

    def forget(self, table: Key) -> None:
        self.cuts.pop(self.path(table), None)
        self.widths.pop(self.path(table), None)

    def empty(self, table: Key, at: int, batch_id: int) -> None:
        """Rows last changed before the statement at `at` deleted; `at` kept with the table."""
        path = self.path(table)
        keys = self.schemas.directory.key_columns(*table)
        if not DeltaTable.isDeltaTable(self.spark, path) or at <= self.cut_of(path, keys):
            return  # nothing mirrored yet, or applied already (a batch run again)
        DeltaTable.forPath(self.spark, path).delete(F.col("_sluice_id") < at)
        self.spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{TRUNCATED_AT}' = '{at}')")
        self.cuts[path] = at
        log.info("%s: %s.%s emptied on the source (truncated, dropped or renamed): its mirror too",
                 during(batch_id), *table)  # fmt: skip

    def write(self, table: Key, part: Part, batch_id: int) -> None:
        if part.emptied_at is not None:
            self.empty(table, part.emptied_at, batch_id)
        keys = self.schemas.directory.key_columns(*table)
        if not part.writers or not keys:
            return  # no rows; or no primary key: nothing to merge by (the changelog has these tables)
        path = self.path(table)
        fetched = self.ready.pop(table, None)  # with its target: prepared tables are not emptied here
        target = fetched.target if fetched else driver.open_target(path) if part.small(self.config) else None
        if target is None and not DeltaTable.isDeltaTable(self.spark, path):
            # A new table holds nothing to merge with: its rows are the batch's newest
            # non-deleted ones. Run again (a crash before the checkpoint), it merges.
            latest = newest_per_key(self.rows(table, part, -1 if part.emptied_at is None else part.emptied_at), keys)
            create(self.spark, path, latest, keys, width_for(latest, keys[0], self.config.spark.key_range))
            log.info("%s: created the mirror of %s.%s", during(batch_id), *table)
            return
        cut = self.cut_of(path, keys, target)
        fields = row_fields(self.schemas.directory.latest_schema(*table))
        have = target.columns if target is not None else self.spark.read.format("delta").load(path).columns
        renamed = follow_renames(self.spark, path, fields, have)
        if follow_drops(self.spark, path, fields, renamed) or renamed != have:
            target = None  # its schema changed under delta-rs's snapshot: Spark merges this batch
        ready = fetched.rows(self.spark, self.schemas.directory, MIRRORED) if fetched and target else None
        if target is not None and ready is not None and driver.fits(target, ready.schema, ("_sluice_type",)):
            how = self.merge_in_driver(target, ready.rows, keys, 0)
        else:
            how = self.merge_into(path, self.rows(table, part, cut), keys, target)
        log.info("%s: merged %s.%s (%s)", during(batch_id), *table, how)

    def rows(self, table: Key, part: Part, cut: int) -> DataFrame:
        """The part's changes as the mirror's rows (`mirror_row`), after the position the table
        was last emptied at."""
        messages = decode(part.frame, self.schemas, {table: part.writers}, MIRRORED)[table]
        names = row_names(self.schemas.directory, table)
        rows = fields_of(messages, mirror_row(F.col("m"), names))
        return rows.filter(F.col("_sluice_id") > cut) if cut >= 0 else rows  # before it: the rows are gone

    def merge_in_driver(self, target: driver.Target, rows: pa.Table, keys: list[str], width: int) -> str:
        newest = driver.last_per(rows, keys, tuple(POSITION))
        if newest.num_rows:
            driver.merge_newest(target, newest, keys, RANGE if width else "")
        return f"delta-rs, {newest.num_rows} keys"

    def merge_into(self, path: str, rows: DataFrame, keys: list[str], target: driver.Target | None) -> str:
        """Per key the newest of `rows`, merged by delta-rs in the driver when the table has
        every column as it is (`driver.fits`: the rows come to the driver in a Spark job and are
        reduced there), else by Spark (whose MERGE adds new columns). Which one did it."""
        width = self.widths[path]  # read with its cut
        if width:
            rows = ranged(rows, keys[0], width)
        if target is not None and driver.fits(target, rows.schema, ("_sluice_type",)):
            return self.merge_in_driver(target, driver.arrow_of(rows), keys, width)
        latest = newest_per_key(rows, keys)
        latest.persist()  # MERGE reads its source once per pass: aggregate the batch once
        try:
            bounds = key_bounds(latest, keys[0]) if width else ""
            merge(DeltaTable.forPath(self.spark, path), latest, keys, bounds)
        finally:
            latest.unpersist()
        return "Spark"


IDENTITY = ("sluice_id", "source_row", "op")  # a changelog entry's: inserted once


class Changelog:
    """The changelog's work on a table: its changes inserted where their source positions are not yet."""

    statements = False

    def __init__(self, spark: SparkSession, config: Config, schemas: WriterSchemas) -> None:
        self.spark, self.config, self.schemas = spark, config, schemas
        self.ready: dict[Key, Fetched] = {}

    def path(self, table: Key) -> str:
        return under(self.config.spark.lake_dir, "changelog", *table)

    def forget(self, table: Key) -> None:
        pass  # it keeps nothing about a table between batches

    def prepare(self, framed: DataFrame, parts: dict[Key, Part]) -> None:
        """The messages of the batch's small tables delta-rs can insert into, brought to the
        driver to be decoded there (`collect_in_driver`)."""
        chosen = {}
        for table, part in parts.items():
            target = driver.open_target(self.path(table)) if part.tiny(self.config) and part.writers else None
            if target is not None:
                chosen[table] = Chosen(part.writers, target, changelog_values, part.size)
        self.ready = collect_in_driver(framed, chosen)

    def entries(self, table: Key, part: Part) -> DataFrame:
        decoded = decode(part.frame, self.schemas, {table: part.writers}, LOGGED)[table]
        return fields_of(decoded, changelog_entry(F.col("m")))

    def write(self, table: Key, part: Part, batch_id: int) -> None:
        if not part.writers:
            return
        path = self.path(table)
        fetched = self.ready.pop(table, None)
        target = fetched.target if fetched else driver.open_target(path) if part.small(self.config) else None
        ready = fetched.rows(self.spark, self.schemas.directory, LOGGED) if fetched else None
        if target is not None and ready is None:
            entries = self.entries(table, part)
            if driver.fits(target, entries.schema):  # else Spark's MERGE, which adds new columns
                ready = Collected(driver.arrow_of(entries), entries.schema, target)
        if target is not None and ready is not None and driver.fits(target, ready.schema):
            rows = driver.last_per(ready.rows, list(IDENTITY))  # each change once
            if rows.num_rows:
                driver.insert_new(target, rows, list(IDENTITY))
            log.info("%s: appended changes of %s.%s (delta-rs, %d)", during(batch_id), *table, rows.num_rows)
            return
        entries = self.entries(table, part).dropDuplicates(list(IDENTITY))
        if target is None and not DeltaTable.isDeltaTable(self.spark, path):
            # nothing there yet to be exactly-once against
            entries.write.format("delta").partitionBy("event_date").save(path)
            log.info("%s: created the changelog of %s.%s", during(batch_id), *table)
            return
        on = " AND ".join(f"t.{c} = s.{c}" for c in IDENTITY)
        (
            DeltaTable.forPath(self.spark, path).alias("t").merge(entries.alias("s"), on)
            .whenNotMatchedInsertAll().execute()
        )  # fmt: skip
        log.info("%s: appended changes of %s.%s (Spark)", during(batch_id), *table)


JOBS: dict[str, Callable[[SparkSession, Config, WriterSchemas], TableJob]] = {
    "mirror": Mirror,
    "changelog": Changelog,
}


# --- One table's failure is its own -------------------------------------------------------
#
# A table whose write fails in a batch (its MERGE, its append, the decoding of its messages:
# anything) is held back: the job says so in one line and goes on with the other tables, and
# the batch's offsets are committed. The held table's changes are not skipped: the first offset
# of its messages in each topic partition of the batch is kept (`Holds`), and at every later
# batch the table is written from there again, its held partitions read anew from Kafka up to
# their ends (the rest of the batch as it is), until a write succeeds. What that re-reads twice
# changes nothing: the mirror applies a change only over an older one and the changelog inserts
# a source position only once, and a partition (where a key's changes all are) is read from the
# held offset on, in order, so no older change lands after a newer one.

Offsets = dict[tuple[str, int], int]  # per topic partition, the first offset to read again
START = -1  # the batch id of the held tables' writes when a job starts (`Batches.retry`)


def during(batch_id: int) -> str:
    """Where a log line's table work happened: in a batch, or when the job started."""
    return "at start" if batch_id == START else f"batch {batch_id}"


@dataclass(frozen=True, slots=True)
class Hold:
    """A table whose changes are to be written again: from which offsets, since which batch, why."""

    offsets: Offsets
    since: int
    error: str


def held_also(hold: Hold | None, offsets: Offsets, batch_id: int, error: str) -> Hold:
    """`hold` (or a new one) covering `offsets` too: per partition the earlier offset."""
    if hold is None:
        return Hold(dict(offsets), batch_id, error)
    joined = dict(hold.offsets)
    for place, offset in offsets.items():
        joined[place] = min(offset, joined.get(place, offset))
    return Hold(joined, hold.since, error)


def reread_options(offsets: Offsets) -> dict[str, str]:
    """Options of Spark's Kafka source (a batch read) for the held partitions, from their held
    offsets to their ends."""
    starts: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        starts.setdefault(topic, {})[str(partition)] = offset
    assign = {topic: [int(p) for p in by_partition] for topic, by_partition in starts.items()}
    return {"assign": json.dumps(assign), "startingOffsets": json.dumps(starts), "endingOffsets": "latest"}


HOLD_COLUMNS = "database STRING, table STRING, topic STRING, partition INT, offset BIGINT, since BIGINT, error STRING"
HoldRow = tuple[str, str, str, int, int, int, str]


def hold_rows(holds: dict[Key, Hold]) -> list[HoldRow]:
    """The holds as the rows of their Delta table: one per table and partition."""
    return [
        (*table, topic, partition, offset, hold.since, hold.error)
        for table, hold in sorted(holds.items())
        for (topic, partition), offset in sorted(hold.offsets.items())
    ]


def holds_of(rows: list[HoldRow]) -> dict[Key, Hold]:
    holds: dict[Key, Hold] = {}
    for database, table, topic, partition, offset, since, error in rows:
        hold = holds.get((database, table))
        offsets = {**(hold.offsets if hold else {}), (topic, partition): offset}
        holds[(database, table)] = Hold(offsets, since, error)
    return holds


class Holds:
    """The held tables of a job, kept as a Delta table beside its streaming checkpoint
    (`{checkpoint_dir}/<name>/<job>-held`, one row per table and partition), read when the job
    starts and written before a batch's offsets are committed, so a crash in between runs the
    batch again over the same holds."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark, self.path = spark, path
        self.held: dict[Key, Hold] = {}
        if DeltaTable.isDeltaTable(spark, path):
            rows = spark.read.format("delta").load(path).collect()
            self.held = holds_of([tuple(row) for row in rows])
        self.saved = dict(self.held)

    def save(self) -> None:
        if self.held != self.saved:
            frame = self.spark.createDataFrame(hold_rows(self.held), HOLD_COLUMNS)
            frame.write.format("delta").mode("overwrite").save(self.path)
            self.saved = dict(self.held)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One table's work in a batch: written (`error` empty), or why not (the error's first line)."""

    table: Key
    error: str = ""


def error_line(exc: BaseException, limit: int = 400) -> str:
    """An exception as one line: its type and its message's first line (a Py4J error's is the
    JVM exception's, not "An error occurred while calling ...")."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    line = f"{type(exc).__name__}: {first}"
    return line if len(line) <= limit else line[: limit - 3] + "..."


def one_table(table: Key, batch_id: int, work: Callable[[], None]) -> Outcome:
    """Run one table's work of a batch. Whatever it raises is the table's alone: returned, not
    raised, so the other tables go on (each call stands alone: tables can run side by side)."""
    try:
        work()
    except Exception as exc:  # the one place a table's failure is contained; see Holds
        log.debug("%s: %s.%s failed", during(batch_id), *table, exc_info=True)  # the traceback, with --debug
        return Outcome(table, error_line(exc))
    return Outcome(table)


class Tally:
    """A run's counts: its summary line, and Prometheus's with `[spark] metrics_port`
    (`connector.metrics.serve`: /metrics; /health and /ready answer while the job runs)."""

    def __init__(self, job: str) -> None:
        self.batches = self.written = self.failed = 0
        self.registry = r = CollectorRegistry()
        self.writes = Counter("sluice_spark_table_writes", "Table writes of the job's batches, by outcome "
                              "(failed: held back)", ["job", "database", "table", "outcome"], registry=r)  # fmt: skip
        self.held = Gauge("sluice_spark_tables_held", "Tables whose changes are held back", ["job"], registry=r)
        self.seconds = Gauge("sluice_spark_batch_seconds", "The last batch's seconds", ["job"], registry=r)
        self.tables = Gauge("sluice_spark_batch_tables", "The tables the last batch wrote", ["job"], registry=r)
        self.job = job

    def table(self, table: Key, ok: bool) -> None:
        if ok:
            self.written += 1
        else:
            self.failed += 1
        self.writes.labels(self.job, *table, "written" if ok else "failed").inc()

    def batch(self, seconds: float, tables: int, held: int) -> None:
        self.seconds.labels(self.job).set(seconds)
        self.tables.labels(self.job).set(tables)
        self.held.labels(self.job).set(held)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def healthy(self, stall_s: float) -> bool:
        return True  # the process answers: Spark's own retries and the job's exit say the rest

    def ready(self) -> bool:
        return True


def summary(job: str, tally: Tally, holds: dict[Key, Hold]) -> str:
    held = "; ".join(f"{d}.{t} since batch {h.since} ({h.error})" for (d, t), h in sorted(holds.items()))
    return (f"{job}: {tally.batches} batches, {tally.written} table writes, {tally.failed} failed"
            + (f"; held back: {held}" if held else ""))  # fmt: skip


def side_by_side(context: Any, threads: int, tables: list[Key], works: list[Callable[[], None]],
                 batch_id: int) -> list[Outcome]:  # fmt: skip
    """Each table's work through `one_table`, `threads` at once (`in_pools`); the outcomes in
    the tables' order."""
    each = [functools.partial(one_table, table, batch_id, work) for table, work in zip(tables, works, strict=True)]
    return in_pools(context, threads, each)


def in_pools(context: Any, threads: int, works: Sequence[Callable[[], T]]) -> list[T]:
    """Each work, `threads` at once, each thread's Spark jobs in a scheduler pool of its own
    (`context`: the SparkContext); the results in the works' order."""
    threads = min(threads, len(works))
    if threads <= 1:
        return [work() for work in works]
    pools = iter(range(threads))

    def pool_of_thread() -> None:
        # Local properties are the calling thread's: its jobs go to its pool.
        context.setLocalProperty("spark.scheduler.pool", f"sluice-{next(pools)}")

    with ThreadPoolExecutor(threads, thread_name_prefix="sluice-table", initializer=pool_of_thread) as pool:
        return list(pool.map(lambda work: work(), works))


class TablesHeldBack(SluiceError):
    """A `--once` run ended with tables whose changes are not written yet (held back)."""


class Batches:
    """The foreachBatch step: a batch's tables through `one_table`, up to `[spark] table_threads`
    at once (each thread its own FAIR scheduler pool, so one table's small jobs do not queue
    behind another's), the held ones read again from their held offsets, then the holds saved.

    A table's work is a chain of small Spark jobs with driver work between them (Delta log
    reads, planning, a commit): run one table after another, a batch of many small tables is
    that fixed cost times its tables while the executors idle. Side by side, the jobs of other
    tables fill the gaps. Tables never share state here: each has its own Delta table."""

    def __init__(self, spark: SparkSession, config: Config, schemas: WriterSchemas, job: TableJob, name: str) -> None:
        self.spark, self.config, self.schemas, self.job, self.name = spark, config, schemas, job, name
        self.holds = Holds(spark, under(config.spark.checkpoint_dir, config.name, f"{name}-held"))
        self.tally = Tally(name)

    def __call__(self, framed: DataFrame, batch_id: int) -> None:
        self.tables(framed, batch_id)
        self.tally.batches += 1

    def retry(self) -> None:
        """The held tables written again before the first batch, which comes only with new
        messages: a job started again once their cause is fixed writes them whatever comes."""
        if self.holds.held:
            self.tables(self.spark.createDataFrame([], FRAMED), START)

    def tables(self, framed: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        parts = parts_of(framed, self.schemas, self.job.statements)
        tables = sorted(parts.keys() | self.holds.held.keys())
        works: list[Callable[[], None]] = [functools.partial(self.write, table, framed, parts, batch_id)
                                           for table in tables]  # fmt: skip
        threads = self.config.spark.table_threads
        read = time.monotonic()
        self.job.prepare(framed, {table: part for table, part in parts.items() if table not in self.holds.held})
        prepared = time.monotonic()
        outcomes = side_by_side(self.spark.sparkContext, threads, tables, works, batch_id)
        for table, outcome in zip(tables, outcomes, strict=True):
            self.settle(outcome, parts.get(table), batch_id)
        self.holds.save()
        ended = time.monotonic()
        self.tally.batch(ended - started, len(tables), len(self.holds.held))
        log.info("%s: %d tables in %.1f s: read and counted %.1f s, small tables fetched %.1f s, written %.1f s",
                 during(batch_id), len(tables), ended - started, read - started, prepared - read, ended - prepared)

    def write(self, table: Key, framed: DataFrame, parts: dict[Key, Part], batch_id: int) -> None:
        hold = self.holds.held.get(table)
        if hold is None:
            self.job.write(table, parts[table], batch_id)
            return
        frame = self.reread(hold.offsets, framed).persist()
        try:
            part = parts_of(frame, self.schemas, self.job.statements).get(table)
            if part is not None:
                self.job.write(table, part, batch_id)
        finally:
            frame.unpersist()

    def reread(self, offsets: Offsets, framed: DataFrame) -> DataFrame:
        """The batch with the held partitions read from Kafka again, from their held offsets."""
        source = (
            self.spark.read.format("kafka")
            .option("kafka.bootstrap.servers", self.config.kafka.bootstrap_servers)
            .options(**reread_options(offsets)).options(**FETCH).options(**isolation_options(self.config))
            .options(**security_options(self.config))
            .load()
        )  # fmt: skip
        held = [(F.col("topic") == topic) & (F.col("partition") == partition) for topic, partition in offsets]
        rest = framed.filter(~functools.reduce(operator.or_, held))
        return self.schemas.frame(source).unionByName(rest)

    def settle(self, outcome: Outcome, part: Part | None, batch_id: int) -> None:
        table, hold = outcome.table, self.holds.held.get(outcome.table)
        self.tally.table(table, not outcome.error)
        if not outcome.error:
            if hold is not None:
                del self.holds.held[table]
                log.info("%s: %s of %s.%s written again, with its changes held back since batch %d",
                         during(batch_id), self.name, *table, hold.since)  # fmt: skip
            return
        self.job.forget(table)
        offsets = offsets_in(part) if part is not None else {}
        self.holds.held[table] = held_also(hold, offsets, batch_id, outcome.error)
        log.warning("%s: %s of %s.%s not written, its changes held back to be written at the next batch: %s",
                    during(batch_id), self.name, *table, outcome.error)  # fmt: skip


def offsets_in(part: Part) -> Offsets:
    """Per topic partition, the first offset of the part's messages (its statements' too)."""
    mine = F.col("fp").isin(list(part.writers)) & ~F.col("statement")
    if part.emptied_at is not None:
        mine = mine | F.col("statement")
    rows = part.frame.filter(mine).groupBy("topic", "partition").agg(F.min("offset").alias("offset")).collect()
    return {(row["topic"], row["partition"]): row["offset"] for row in rows}


def run(config: Config, job: str, once: bool, registry: Any = None) -> None:
    """Start a job; with `once`, process what is in the topics now and stop (Trigger.AvailableNow),
    raising `TablesHeldBack` if a table's changes are held back at the end.

    `registry`: a schema registry client for Confluent-framed topics; by default one for
    `[avro] schema_registry_url` when it is set."""
    spark = session(config, job)
    if registry is None and config.avro.schema_registry_url:
        registry = SchemaRegistryClient.new_client({"url": config.avro.schema_registry_url})
    schemas = WriterSchemas(SchemaDirectory(config.avro.schemas_dir), registry)
    batches = Batches(spark, config, schemas, JOBS[job](spark, config, schemas), job)
    if config.spark.metrics_port:
        serve(batches.tally, config.spark.metrics_port, 0, config.metrics.host)
    batches.retry()
    if config.kafka.exactly_once:
        log.info("%s: reading committed Kafka transactions only ([kafka] exactly_once)", job)
    changes = read_changes(spark, config, statements=batches.job.statements)
    writer = (
        changes.writeStream.foreachBatch(framed_once(schemas, batches))
        .option("checkpointLocation", under(config.spark.checkpoint_dir, config.name, job))
    )  # fmt: skip
    trigger: dict[str, Any] = (
        {"availableNow": True} if once else {"processingTime": f"{config.spark.trigger_s} seconds"}
    )
    query = writer.trigger(**trigger).start()
    try:
        query.awaitTermination()
    finally:
        held = batches.holds.held
        (log.warning if held or batches.tally.failed else log.info)("%s", summary(job, batches.tally, held))
    if once and held:
        raise TablesHeldBack(f"{job}: {len(held)} table(s) held back, to be written at the next run: "
                             + ", ".join(f"{d}.{t}" for d, t in sorted(held)))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """For spark-submit: `spark-submit --packages ... spark/jobs.py mirror|changelog CONFIG [--once]`."""
    parser = argparse.ArgumentParser(description="Sluice's Spark jobs")
    parser.add_argument("job", choices=sorted(JOBS))
    parser.add_argument("config")
    parser.add_argument("--once", action="store_true")
    args = parser.parse_args(argv)
    run(load_config(args.config), args.job, args.once)


if __name__ == "__main__":
    main()
