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
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import DateType, NumericType, StringType, StructType, TimestampNTZType, TimestampType

from connector.avro.registry import SchemaDirectory
from connector.config import Config, load_config
from connector.schema.ddl import Unreadable, apply_ddl, read_ddl
from connector.schema.model import Schema
from connector.schema.sqltokens import Session, quote_identifier

log = logging.getLogger("sluice.spark")

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
# the defaults, 1.0 s with a 5 ms wait, 0.8 s with larger fetches besides.
FETCH = {
    "kafka.fetch.max.wait.ms": "5",
    "kafka.max.partition.fetch.bytes": str(32 << 20),
    "kafka.fetch.max.bytes": str(64 << 20),
}


def security_options(config: Config) -> dict[str, str]:
    """[kafka.security] as options of Spark's Kafka source: the Java client's properties, each as `kafka.<key>`."""
    return {f"kafka.{key}": value for key, value in config.kafka.security.java_client().items()}


def read_changes(spark: SparkSession, config: Config, statements: bool = False) -> DataFrame:
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", config.kafka.bootstrap_servers)
        .option("subscribePattern", row_topics_pattern(config.kafka.topic_prefix, statements))
        .option("startingOffsets", "earliest")
        .options(**FETCH)
        .options(**security_options(config))
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
            "partition", "offset", F.col("topic").endswith("._ddl").alias("statement"),
        )  # fmt: skip


Key = tuple[str, str]  # a source table: database, table
Writers = dict[Key, dict[str, dict[str, Any]]]  # per table, its writer schemas by id


def writers_in(framed: DataFrame, schemas: WriterSchemas) -> tuple[Writers, bool]:
    """The writer schemas of the batch's row messages, per table, and whether it holds
    statements: one pass over the batch."""
    writers: Writers = {}
    statements = False
    for row in framed.select("fp", "statement").distinct().collect():
        if row["statement"]:
            statements = True
            continue
        writer = schemas.writer(row["fp"])
        writers.setdefault((writer["sluice.database"], writer["sluice.table"]), {})[row["fp"]] = writer
    return writers, statements


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


# The envelope fields the mirror reads; of `source`, only `row`.
MIRRORED = ("id", "type", "data", "source")


def reading(schema: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """`schema` with only the envelope's `fields` (of `source`, only `row`): Avro's resolution
    skips the rest of each value without making Spark values of them."""
    kept = [field for field in schema["fields"] if field["name"] in fields]
    for i, field in enumerate(kept):
        if field["name"] == "source":
            record = field["type"]
            kept[i] = {**field, "type": {**record, "fields": [f for f in record["fields"] if f["name"] == "row"]}}
    return {**schema, "fields": kept}


def decode(
    framed: DataFrame, schemas: WriterSchemas, writers: Writers, fields: tuple[str, ...] = ()
) -> dict[tuple[str, str], DataFrame]:
    """Per source table, the batch's messages as rows of the table's newest value schema (with
    `fields`, only those envelope fields).

    Each table's messages are decoded in one projection that picks the writer schema by
    fingerprint (every branch resolves to the table's newest schema, so they share one type)."""
    directory = schemas.directory
    out = {}
    for key, by_fp in writers.items():
        newest = directory.latest_schema(*key)
        options = {"mode": "FAILFAST", "avroSchema": json.dumps(reading(newest, fields) if fields else newest)}
        branches = [(F.col("fp") == fp, from_avro(F.col("body"), json.dumps(w), options)) for fp, w in by_fp.items()]
        message = branches[0][1]
        if len(branches) > 1:
            message = F.when(*branches[0])
            for condition, value in branches[1:]:
                message = message.when(condition, value)
        rows = framed.filter(~F.col("statement") & F.col("fp").isin(list(by_fp)))
        out[key] = rows.select(message.alias("m"), "partition", "offset")
    return out


def changes_of(messages: DataFrame, full: bool = True) -> DataFrame:
    """One row per change: the envelope's position and type, and the row's columns; `full`:
    also its before-image, source, event time and GTID."""
    rest = [
        F.col("m.old").getItem(0).alias("_old"),
        F.col("m.source").alias("_source"),
        F.col("m.es").alias("_es"),
        F.col("m.gtid").alias("_gtid"),
    ]
    return messages.select(
        F.col("m.type").alias("_sluice_type"),
        F.col("m.id").alias("_sluice_id"),
        F.col("m.source.row").alias("_sluice_row"),
        F.col("m.data").getItem(0).alias("_data"),
        *(rest if full else []),
    )


def row_fields(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The fields of a value schema's row record (its `data` items)."""
    data = next(f for f in schema["fields"] if f["name"] == "data")
    fields: list[dict[str, Any]] = data["type"][1]["items"]["fields"]
    return fields


def follow_renames(spark: SparkSession, path: str, fields: list[dict[str, Any]]) -> None:
    """Rename the mirror's columns the source renamed: a newest field the table lacks whose
    alias (an earlier name, newest first) it has. Without it, rows no change touches after
    the rename would show the column as NULL. A rename needs Delta column mapping by name
    (readers and writers of Delta 1.2 and later); it is turned on at the first rename. Run
    again after a failure, it finds the new names there and does nothing."""
    if not any(field.get("aliases") for field in fields):
        return  # no column of the table was ever renamed
    have = set(spark.read.format("delta").load(path).columns)
    renames = []
    for field in fields:
        old = next((a for a in field.get("aliases", ()) if a in have), None)
        if field["name"] not in have and old is not None:
            renames.append((old, field["name"]))
    if not renames:
        return
    target = f"delta.`{path}`"
    if properties_of(spark, path).get("delta.columnMapping.mode") != "name":
        spark.sql(
            f"ALTER TABLE {target} SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name',"
            " 'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')"
        )
    for old, new in renames:
        spark.sql(f"ALTER TABLE {target} RENAME COLUMN `{old}` TO `{new}`")
        log.info("mirror %s: column %s renamed to %s, as in the source", path, old, new)


def properties_of(spark: SparkSession, path: str) -> dict[str, str]:
    """A Delta table's properties, from its log's metadata (DESCRIBE DETAIL runs jobs over its files)."""
    return {row["key"]: row["value"] for row in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}


def newest_per_key(changes: DataFrame, keys: list[str]) -> DataFrame:
    """Per key, the batch's newest change (source position, then row) as the row's columns,
    `_sluice_type` and the position: one aggregation, no sort of the batch."""
    columns = [f.name for f in changes.schema["_data"].dataType.fields]  # type: ignore[attr-defined]
    row = F.struct(*[F.col(f"_data.{c}").alias(c) for c in columns], "_sluice_type", *POSITION)
    newest = F.max_by(row, F.struct(*POSITION)).alias("_newest")
    by_key = changes.groupBy(*[F.col(f"_data.{k}").alias(f"_key{i}") for i, k in enumerate(keys)])
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
    the columns no pass reads), then handed to `each`."""

    def apply(batch: DataFrame, batch_id: int) -> None:
        framed = schemas.frame(batch).persist()
        try:
            each(framed, batch_id)
        finally:
            framed.unpersist()

    return apply


def mirror_batch(spark: SparkSession, config: Config, schemas: WriterSchemas) -> Callable[[DataFrame, int], None]:
    directory = schemas.directory
    cuts: dict[str, int] = {}  # per mirror table, the position it was last emptied at (-1: never)
    widths: dict[str, int] = {}  # per mirror table, its key range width (0: not partitioned by range)

    def cut_of(path: str, keys: list[str]) -> int:
        """The position a mirror table was last emptied at, read once per run with its width
        (and its statistics columns set, if they never were)."""
        if path not in cuts:
            properties, table = properties_of(spark, path), spark.read.format("delta").load(path)
            statistics_on_key(spark, path, table.schema, keys, properties)
            cuts[path] = int(properties.get(TRUNCATED_AT, -1))
            # RANGE is only ever the partition column; a crash before the property: the config's.
            ranges = RANGE in table.columns
            widths[path] = int(properties.get(KEY_RANGE, config.spark.key_range)) if ranges else 0
        return cuts[path]

    def empty(database: str, table: str, at: int, batch_id: int) -> None:
        """Rows last changed before the statement at `at` deleted; `at` kept with the table."""
        path = under(config.spark.lake_dir, "mirror", database, table)
        if not DeltaTable.isDeltaTable(spark, path) or at <= cut_of(path, directory.key_columns(database, table)):
            return  # nothing mirrored yet, or applied already (a batch run again)
        DeltaTable.forPath(spark, path).delete(F.col("_sluice_id") < at)
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{TRUNCATED_AT}' = '{at}')")
        cuts[path] = at
        log.info("batch %d: %s.%s emptied on the source (truncated, dropped or renamed): its mirror too",
                 batch_id, database, table)  # fmt: skip

    def merge_all(framed: DataFrame, batch_id: int) -> None:
        writers, statements = writers_in(framed, schemas)
        truncated = emptied(framed, directory) if statements else {}
        for (database, table), at in truncated.items():
            empty(database, table, at, batch_id)
        for (database, table), messages in decode(framed, schemas, writers, MIRRORED).items():
            keys = directory.key_columns(database, table)
            if not keys:
                continue  # no primary key: nothing to merge by (the changelog has these tables)
            path = under(config.spark.lake_dir, "mirror", database, table)
            exists = DeltaTable.isDeltaTable(spark, path)
            changes = changes_of(messages, full=False)
            cut = cut_of(path, keys) if exists else truncated.get((database, table), -1)
            if cut >= 0:  # changes from before the table was last emptied: their rows are gone
                changes = changes.filter(F.col("_sluice_id") > cut)
            latest = newest_per_key(changes, keys)
            if not exists:
                # A new table holds nothing to merge with: its rows are the batch's newest
                # non-deleted ones. Run again (a crash before the checkpoint), it merges.
                create(spark, path, latest, keys, width_for(latest, keys[0], config.spark.key_range))
                log.info("batch %d: created the mirror of %s.%s", batch_id, database, table)
                continue
            follow_renames(spark, path, row_fields(directory.latest_schema(database, table)))
            width = widths[path]  # read with its cut
            if width:
                latest = ranged(latest, keys[0], width)
            latest.persist()  # MERGE reads its source once per pass: aggregate the batch once
            try:
                bounds = key_bounds(latest, keys[0]) if width else ""
                merge(DeltaTable.forPath(spark, path), latest, keys, bounds)
            finally:
                latest.unpersist()
            log.info("batch %d: merged %s.%s", batch_id, database, table)

    return framed_once(schemas, merge_all)


def changelog_batch(spark: SparkSession, config: Config, schemas: WriterSchemas) -> Callable[[DataFrame, int], None]:
    def append_all(framed: DataFrame, batch_id: int) -> None:
        writers, _ = writers_in(framed, schemas)
        for (database, table), messages in decode(framed, schemas, writers).items():
            changes = changes_of(messages)
            is_delete = F.col("_sluice_type") == "DELETE"
            entries = changes.select(
                F.col("_sluice_type").alias("op"),
                F.col("_source.file").alias("source_file"), F.col("_source.pos").alias("source_pos"),
                F.col("_source.row").alias("source_row"), F.col("_source.server_id").alias("source_server_id"),
                F.col("_sluice_id").alias("sluice_id"), F.col("_gtid").alias("gtid"),
                F.timestamp_millis(F.col("_es")).alias("event_time"),
                F.to_date(F.timestamp_millis(F.col("_es"))).alias("event_date"),
                F.when(is_delete, F.lit(None)).otherwise(F.col("_data")).alias("after"),
                F.when(is_delete, F.col("_data")).otherwise(F.col("_old")).alias("before"),
                F.current_timestamp().alias("ingested_at"),
            ).dropDuplicates(["sluice_id", "source_row", "op"])  # fmt: skip
            path = under(config.spark.lake_dir, "changelog", database, table)
            if not DeltaTable.isDeltaTable(spark, path):  # nothing there yet to be exactly-once against
                entries.write.format("delta").partitionBy("event_date").save(path)
                log.info("batch %d: created the changelog of %s.%s", batch_id, database, table)
                continue
            on = "t.sluice_id = s.sluice_id AND t.source_row = s.source_row AND t.op = s.op"
            (
                DeltaTable.forPath(spark, path).alias("t").merge(entries.alias("s"), on)
                .whenNotMatchedInsertAll().execute()
            )  # fmt: skip
            log.info("batch %d: appended changes of %s.%s", batch_id, database, table)

    return framed_once(schemas, append_all)


JOBS: dict[str, Callable[[SparkSession, Config, WriterSchemas], Callable[[DataFrame, int], None]]] = {
    "mirror": mirror_batch,
    "changelog": changelog_batch,
}


def run(config: Config, job: str, once: bool, registry: Any = None) -> None:
    """Start a job; with `once`, process what is in the topics now and stop (Trigger.AvailableNow).

    `registry`: a schema registry client for Confluent-framed topics; by default one for
    `[avro] schema_registry_url` when it is set."""
    spark = session(config, job)
    if registry is None and config.avro.schema_registry_url:
        registry = SchemaRegistryClient.new_client({"url": config.avro.schema_registry_url})
    schemas = WriterSchemas(SchemaDirectory(config.avro.schemas_dir), registry)
    changes = read_changes(spark, config, statements=job == "mirror")  # the mirror applies TRUNCATE, DROP
    writer = (
        changes.writeStream.foreachBatch(JOBS[job](spark, config, schemas))
        .option("checkpointLocation", under(config.spark.checkpoint_dir, config.name, job))
    )  # fmt: skip
    trigger: dict[str, Any] = (
        {"availableNow": True} if once else {"processingTime": f"{config.spark.trigger_s} seconds"}
    )
    query = writer.trigger(**trigger).start()
    query.awaitTermination()


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
