"""The Spark jobs' pure parts, without a JVM."""

from __future__ import annotations

import io
import re
from pathlib import Path

import fastavro
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

from connector.avro.schemas import value_schema
from connector.schema.ddl import apply_ddl
from connector.schema.model import Schema
from spark.examples.read_topic import client_options
from spark.jobs import MIRRORED, emptied_by, reading, row_topics_pattern, stats_columns, stub_schema, under


def test_lake_paths_below_a_url_keep_its_double_slash() -> None:
    assert under("s3a://bucket/lake/", "mirror", "shop", "orders") == "s3a://bucket/lake/mirror/shop/orders"
    assert under("hdfs://nn:8020/cdc", "ckpt", "mirror") == "hdfs://nn:8020/cdc/ckpt/mirror"
    assert under(".run/lake", "changelog", "shop", "orders") == ".run/lake/changelog/shop/orders"


def test_the_mirror_reads_statement_topics_and_the_changelog_only_row_topics() -> None:
    rows, both = re.compile(row_topics_pattern("cdc.a")), re.compile(row_topics_pattern("cdc.a", statements=True))
    topics = {"cdc.a.shop.orders": True, "cdc.a.shop._ddl": False, "cdc.a._heartbeat": False,
              "cdc.a._oversized": False, "cdc.ab.shop.orders": False, "cdc.a.shop.x.y": False}  # fmt: skip
    for topic, is_rows in topics.items():
        assert bool(rows.match(topic)) is is_rows, topic
        assert bool(both.match(topic)) is (is_rows or topic.endswith("._ddl")), topic


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


def test_the_mirrors_reader_schema_takes_from_a_value_only_what_the_mirror_uses() -> None:
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
