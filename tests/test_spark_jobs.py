"""The Spark jobs' pure parts, without a JVM (the DECIMAL text in a local Spark of its own)."""

from __future__ import annotations

import functools
import io
import json
import os
import random
import re
import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import fastavro
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from connector.avro.schemas import row_fields, value_schema
from connector.config import parse_config
from connector.schema.ddl import apply_ddl
from connector.schema.model import Schema
from spark.examples.read_topic import client_options
from spark.jobs import (
    DECODED_IN_DRIVER,
    DECODED_IN_DRIVER_BYTES,
    FETCHED_IN_DRIVER_BYTES,
    LOGGED,
    MIRRORED,
    WRITTEN_IN_DRIVER_BYTES,
    Chosen,
    Hold,
    Outcome,
    Part,
    Tally,
    as_bytes,
    emptied_by,
    error_line,
    fetchable,
    held_also,
    hold_rows,
    holds_of,
    isolation_options,
    reading,
    reread_options,
    row_topics_pattern,
    side_by_side,
    spark_holds,
    stats_columns,
    stub_schema,
    summary,
    under,
    wide_decimals,
)
from tests.support.units import complete

ROOT = Path(__file__).resolve().parents[1]


def test_lake_paths_below_a_url_keep_its_double_slash() -> None:
    assert under("s3a://bucket/lake/", "mirror", "shop", "orders") == "s3a://bucket/lake/mirror/shop/orders"
    assert under("hdfs://nn:8020/cdc", "ckpt", "mirror") == "hdfs://nn:8020/cdc/ckpt/mirror"
    assert under(".run/lake", "changelog", "shop", "orders") == ".run/lake/changelog/shop/orders"


def test_the_mirror_reads_statement_topics_and_the_changelog_only_row_topics() -> None:
    rows, both = re.compile(row_topics_pattern("cdc.a")), re.compile(row_topics_pattern("cdc.a", statements=True))
    topics = {"cdc.a.shop.orders": True, "cdc.a.shop._ddl": False, "cdc.a._heartbeat": False,
              "cdc.a._oversized": False, "cdc.a._positions": False, "cdc.ab.shop.orders": False,
              "cdc.a.shop.x.y": False}  # fmt: skip
    for topic, is_rows in topics.items():
        assert bool(rows.match(topic)) is is_rows, topic
        assert bool(both.match(topic)) is (is_rows or topic.endswith("._ddl")), topic


def test_with_exactly_once_the_jobs_read_committed_transactions_only() -> None:
    """The Java consumer reads uncommitted records by default: aborted ones, and open ones early."""
    assert isolation_options(parse_config(complete({}))) == {}
    once = parse_config(complete({"kafka": {"exactly_once": True}}))
    assert isolation_options(once) == {"kafka.isolation.level": "read_committed"}


def test_the_statements_that_take_a_tables_rows_away() -> None:
    known = stub_schema([("shop", "a"), ("shop", "b"), ("shop", "c"), ("other", "x"), ("other", "y")])
    # Read in order against what the statements before left: a table dropped is no longer there.
    cases = [
        ("ERASE", "shop", "a", "DROP TABLE a, `b`", [("shop", "a"), ("shop", "b")]),  # the message names a only
        ("ERASE", "shop", "a", "DROP TABLE IF EXISTS a", []),  # gone already
        ("CREATE", "shop", "a", "CREATE TABLE a (id INT PRIMARY KEY)", []),  # new: nothing to take
        ("CREATE", "shop", "a", "CREATE OR REPLACE TABLE a (id INT PRIMARY KEY)", [("shop", "a")]),
        ("CREATE", "shop", "a", "CREATE TABLE IF NOT EXISTS a (v INT)", []),
        ("TRUNCATE", "shop", "c", "TRUNCATE TABLE c", [("shop", "c")]),
        ("ALTER", "shop", "c", "ALTER TABLE c ADD COLUMN v INT", []),
        ("RENAME", "shop", "d", "RENAME TABLE c TO d", [("shop", "c")]),
        ("QUERY", "other", "", "DROP DATABASE other", [("other", "x"), ("other", "y")]),
        ("QUERY", "shop", "", "CREATE VIEW v AS SELECT 1", []),
        ("ERASE", "shop", "d", "DROP TABLE d /* a comment */ ; garbage that does not parse (", [("shop", "d")]),
        ("TRUNCATE", "shop", "zz", "TRUNCATE zz", []),  # never had a schema: no mirror to empty
    ]
    for kind, database, table, sql, gone in cases:
        assert emptied_by(known, kind, database, table, sql) == gone, sql


def test_the_jobs_reader_schemas_take_from_a_value_only_what_each_job_uses() -> None:
    schema = Schema()
    apply_ddl(schema, "CREATE TABLE shop.t (id INT PRIMARY KEY, note VARCHAR(20))", "shop")
    written = value_schema(schema.tables[("shop", "t")], 1)
    value = {"id": 7 << 32 | 4, "database": "shop", "table": "t", "type": "UPDATE", "isDdl": False, "pkNames": ["id"],
             "es": 1, "ts": 2, "sql": "", "gtid": "0-1-9", "data": [{"id": 1, "note": "new"}],
             "old": [{"id": 1, "note": "old"}],
             "source": {"server_id": 1, "file": "b.000007", "pos": 4, "row": 3}}  # fmt: skip
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(written), value)
    out.seek(0)
    mirrored = fastavro.parse_schema(reading(written, MIRRORED))
    read = fastavro.schemaless_reader(out, fastavro.parse_schema(written), mirrored)
    assert read == {"id": 7 << 32 | 4, "type": "UPDATE", "data": [{"id": 1, "note": "new"}], "source": {"row": 3}}
    out.seek(0)  # the changelog's: the whole source, not the statement, names or times it does not keep
    logged = fastavro.parse_schema(reading(written, LOGGED))
    read = fastavro.schemaless_reader(out, fastavro.parse_schema(written), logged)
    assert read == {"id": 7 << 32 | 4, "type": "UPDATE", "es": 1, "gtid": "0-1-9", "data": [{"id": 1, "note": "new"}],
                    "old": [{"id": 1, "note": "old"}],
                    "source": {"server_id": 1, "file": "b.000007", "pos": 4, "row": 3}}  # fmt: skip
    assert written["fields"][-1]["type"]["fields"][3]["name"] == "row"  # the full schema is not changed
    assert len(written["fields"][-1]["type"]["fields"]) == 4


def test_a_mirror_tables_statistics_cover_its_key_and_position_quoted() -> None:
    schema = StructType([StructField(name, kind) for name, kind in (
        ("id", IntegerType()), ("order`id", LongType()), ("line", StringType()), ("uuid", BinaryType()),
        ("flag", BooleanType()), ("amount", DecimalType(12, 2)), ("at", TimestampType()), ("_sluice_id", LongType()),
    )])  # fmt: skip
    assert stats_columns(schema, ["id"]) == "`id`,`_sluice_id`"
    assert stats_columns(schema, ["order`id", "line"]) == "`order``id`,`line`,`_sluice_id`"
    assert stats_columns(schema, ["amount", "at"]) == "`amount`,`at`,`_sluice_id`"
    # Delta refuses statistics on these types; a key column the table lacks (renamed since) has none.
    assert stats_columns(schema, ["uuid", "flag", "renamed"]) == "`_sluice_id`"


def test_the_topic_recipe_reads_a_kafka_client_properties_file(tmp_path: Path) -> None:
    properties = tmp_path / "client.properties"
    properties.write_text(
        "# a comment\n! another\n\nsecurity.protocol = SASL_SSL\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required"
        ' username="u" password="a=b";\n'
    )
    assert client_options(str(properties)) == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u"'
        ' password="a=b";',
    }


def test_spark_holds_a_decimal_of_38_digits_at_most() -> None:
    assert spark_holds(38, 38) and spark_holds(20, 0) and spark_holds(10, 2)
    assert not spark_holds(39, 0) and not spark_holds(65, 30) and not spark_holds(2, 3)


def test_a_wide_decimal_is_read_as_its_unscaled_bytes_in_both_images() -> None:
    schema = Schema()
    apply_ddl(schema, "CREATE TABLE shop.w (id DECIMAL(65,30) PRIMARY KEY, n DECIMAL(40,0) NULL,"
                      " amount DECIMAL(10,2) NOT NULL, bits BIT(64) NULL)", "shop")  # fmt: skip
    written = value_schema(schema.tables[("shop", "w")], 1)
    wide = wide_decimals(written)
    assert wide == {"id": 30, "n": 0}  # BIT(64) is a decimal(20,0), which Spark holds
    row = {"id": Decimal("-0.000000000000000000000000000001"), "n": Decimal(10**39), "amount": Decimal("1.50"),
           "bits": Decimal(2**64 - 1)}  # fmt: skip
    value = {"id": 1, "database": "shop", "table": "w", "type": "UPDATE", "isDdl": False, "pkNames": ["id"],
             "es": 1, "ts": 2, "sql": "", "gtid": None, "data": [row], "old": [{**row, "n": None}],
             "source": {"server_id": 1, "file": "b.000001", "pos": 4, "row": 0}}  # fmt: skip
    encoded = io.BytesIO()
    fastavro.schemaless_writer(encoded, fastavro.parse_schema(written), value)
    for reader in (as_bytes(reading(written, LOGGED), wide), as_bytes(reading(written, MIRRORED), wide)):
        types = {f["name"]: f["type"] for f in row_fields(reader)}
        assert types["id"] == "bytes" and types["n"] == ["null", "bytes"]  # `old` names the same row record
        assert types["amount"] == {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
        encoded.seek(0)  # Avro resolves the writer's decimals to the reader's bytes
        read: Any = fastavro.schemaless_reader(encoded, fastavro.parse_schema(written), fastavro.parse_schema(reader))
        assert read["data"][0]["amount"] == Decimal("1.50")
    assert wide_decimals(written) == wide  # the writer schema is not changed


def mysql_text(unscaled: int, scale: int) -> str:
    """A DECIMAL's text as MySQL prints it: the digits of its unscaled value, `scale` of them after the point."""
    return format(Decimal(f"{unscaled}E-{scale}"), "f")


def unscaled_bytes(value: int) -> bytes:
    """Avro's decimal bytes as the connector writes them: the shortest big-endian two's complement."""
    return value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)


# What spark.jobs.decimal_text makes of each (hex bytes, scale): run in a local Spark of its own,
# in a process of its own (a JVM started in this one would be the one the live tests' session,
# which needs the Kafka, Avro and Delta packages, finds already running without them).
_IN_SPARK = """
import json, sys
from pyspark.sql import SparkSession, functions as F
from spark.jobs import decimal_text
cases = json.load(sys.stdin)
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
texts = {}
for scale in sorted({s for _, s in cases}):
    rows = [(i, None if h is None else bytes.fromhex(h)) for i, (h, s) in enumerate(cases) if s == scale]
    frame = spark.createDataFrame(rows, "i INT, b BINARY")
    texts.update({r.i: r.t for r in frame.select("i", decimal_text(F.col("b"), scale).alias("t")).collect()})
print(json.dumps([texts[i] for i in range(len(cases))]))
"""


def test_a_wide_decimal_becomes_the_text_mysql_prints() -> None:
    edges = [0, 1, -1, 5, -5, 10**65 - 1, -(10**65 - 1), 10**64, -(10**64), 10**30, -(10**30), 10**29, 10**35 - 1]
    for bits in (27, 28, 55, 56, 63, 64, 111, 112, 140, 196, 216, 223):  # around the 28-bit pieces, 9-digit groups
        edges += [2**bits - 1, 2**bits, -(2**bits), -(2**bits) + 1] if bits < 223 else [2**bits - 1, -(2**bits)]
    edges += [10**9 - 1, 10**9, -(10**9), 10**18, 10**27 - 1, 10**63 + 1]
    rng = random.Random(37)
    edges += [rng.randint(-(10 ** rng.randint(1, 65)), 10 ** rng.randint(1, 65)) for _ in range(200)]
    edges = [v for v in edges if len(str(abs(v))) <= 65]  # what a DECIMAL(65) holds (MariaDB: scale up to 38)
    cases: list[tuple[bytes | None, int, str | None]] = [
        (unscaled_bytes(v), scale, mysql_text(v, scale)) for v in edges for scale in (30, 0, 10, 34, 35, 38)
    ]
    cases += [(None, 30, None), (b"", 30, mysql_text(0, 30)), (b"", 0, "0")]  # null stays null; no bytes: zero
    cases += [(b"\x00\x00\x05", 1, "0.5"), (b"\xff\xff\xfb", 1, "-0.5")]  # sign-extended past the shortest
    got = json.loads(subprocess.run(
        [sys.executable, "-c", _IN_SPARK], input=json.dumps([[None if b is None else b.hex(), s] for b, s, _ in cases]),
        capture_output=True, text=True, check=True, cwd=ROOT, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    ).stdout.splitlines()[-1])  # fmt: skip
    wrong = [(b, s, want, text) for (b, s, want), text in zip(cases, got, strict=True) if text != want]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ, e.g. {wrong[:3]}"
    assert mysql_text(1, 30) == "0.000000000000000000000000000001" and mysql_text(-5, 30).startswith("-0.0000")


def test_a_held_table_keeps_the_earliest_offset_of_each_partition() -> None:
    first = held_also(None, {("p.shop.t", 0): 40, ("p.shop._ddl", 0): 7}, 3, "AnalysisException: no")
    later = held_also(first, {("p.shop.t", 0): 90, ("p.shop.t", 2): 12}, 5, "AnalysisException: still no")
    assert later == Hold({("p.shop.t", 0): 40, ("p.shop._ddl", 0): 7, ("p.shop.t", 2): 12}, 3,
                         "AnalysisException: still no")  # fmt: skip
    holds = {("shop", "t"): later, ("shop", "u"): Hold({("p.shop.u", 1): 0}, 4, "x")}
    assert holds_of(hold_rows(holds)) == holds
    assert len(hold_rows(holds)) == 4 and hold_rows({}) == []
    options = reread_options(later.offsets)
    assert json.loads(options["assign"]) == {"p.shop._ddl": [0], "p.shop.t": [0, 2]}
    assert json.loads(options["startingOffsets"]) == {"p.shop._ddl": {"0": 7}, "p.shop.t": {"0": 40, "2": 12}}
    assert options["endingOffsets"] == "latest"


class _JavaError(Exception):
    """Like py4j's Py4JJavaError: its text is about the call, its `java_exception` says what."""

    def __init__(self, text: str) -> None:
        super().__init__("An error occurred while calling o81.execute.\n: trace")
        self.java_exception = _Java(text)


class _Java:
    def __init__(self, text: str) -> None:
        self.text = text

    def toString(self) -> str:  # the JVM's name
        return self.text


def test_a_tables_failure_is_one_line() -> None:
    assert error_line(ValueError("\n  first line\nsecond\n\tat x")) == "ValueError: first line"
    java = _JavaError("org.apache.spark.sql.delta.DeltaAnalysisException: [DELTA_X] not a Delta table\n\tat a.b")
    exception = "org.apache.spark.sql.delta.DeltaAnalysisException: [DELTA_X] not a Delta table"
    assert error_line(java) == f"_JavaError: {exception}"
    assert len(error_line(ValueError("x" * 1000))) == 400
    held = {("shop", "t"): Hold({("p.shop.t", 0): 1}, 2, "E: no")}
    tally = Tally("mirror")
    tally.batches = 3
    for ok in (True, True, False, True, True, True):
        tally.table(("shop", "t"), ok)
    assert summary("mirror", tally, held) == (
        "mirror: 3 batches, 5 table writes, 1 failed; held back: shop.t since batch 2 (E: no)"
    )
    assert summary("changelog", Tally("changelog"), {}) == "changelog: 0 batches, 0 table writes, 0 failed"


def test_a_jobs_table_writes_and_holds_are_prometheus_metrics() -> None:
    tally = Tally("mirror")
    tally.table(("shop", "a"), True)
    tally.table(("shop", "b"), False)
    tally.table(("shop", "b"), False)
    tally.batch(1.5, 2, 1)
    text = tally.exposition().decode()
    assert 'sluice_spark_table_writes_total{database="shop",job="mirror",outcome="written",table="a"} 1.0' in text
    assert 'sluice_spark_table_writes_total{database="shop",job="mirror",outcome="failed",table="b"} 2.0' in text
    assert 'sluice_spark_tables_held{job="mirror"} 1.0' in text
    assert 'sluice_spark_batch_seconds{job="mirror"} 1.5' in text


class _Context:
    """A SparkContext's local properties, per thread as Spark keeps them."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.seen: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def setLocalProperty(self, key: str, value: str) -> None:  # Spark's name
        setattr(self.local, key, value)

    def pool(self) -> str:
        return str(getattr(self.local, "spark.scheduler.pool", ""))


def test_tables_run_side_by_side_each_thread_in_its_own_pool_outcomes_in_order() -> None:
    context = _Context()
    started = threading.Barrier(4, timeout=10)  # four tables at once, or this waits and fails
    tables = [("shop", f"t{i}") for i in range(9)]

    def work(i: int) -> None:
        if i < 4:
            started.wait()
        with context.lock:
            context.seen.append((tables[i][1], context.pool()))
        if i == 6:
            raise ValueError("no room\nmore")

    outcomes = side_by_side(context, 4, tables, [functools.partial(work, i) for i in range(9)], 7)
    assert outcomes == [Outcome(t, "ValueError: no room" if t[1] == "t6" else "") for t in tables]
    assert sorted(t for t, _ in context.seen) == [t for _, t in tables]
    assert {pool for _, pool in context.seen} == {f"sluice-{i}" for i in range(4)}
    alone = _Context()
    assert side_by_side(alone, 1, tables[:2], [lambda: None] * 2, 0) == [Outcome(t) for t in tables[:2]]


def test_what_a_batch_brings_to_the_driver_is_bounded_in_bytes_as_well_as_rows() -> None:
    config = parse_config(complete({"spark": {"driver_rows": 20_000}}))

    def part(rows: int, size: int) -> Part:
        return Part(cast(DataFrame, None), {}, None, rows, size)

    few = part(DECODED_IN_DRIVER, DECODED_IN_DRIVER_BYTES)
    assert few.small(config) and few.tiny(config)
    assert not part(DECODED_IN_DRIVER, DECODED_IN_DRIVER_BYTES + 1).tiny(config)  # 2,000 rows of 8 KiB and more
    assert part(20_000, WRITTEN_IN_DRIVER_BYTES).small(config)
    assert not part(10, WRITTEN_IN_DRIVER_BYTES + 1).small(config)  # a few rows of 20 MiB: Spark writes them
    assert not part(20_001, 1).small(config) and not part(0, 0).small(config)

    def chosen(size: int) -> Chosen:
        return Chosen({}, cast(Any, None), cast(Any, None), size)

    third = FETCHED_IN_DRIVER_BYTES // 3
    tables = {("d", "big"): chosen(third * 2), ("d", "a"): chosen(third), ("d", "b"): chosen(third - 1),
              ("d", "none"): chosen(0)}  # fmt: skip
    assert list(fetchable(tables)) == [("d", "none"), ("d", "b"), ("d", "a")]  # the smallest first, within the budget
    assert list(fetchable(tables, 0)) == [("d", "none")]
