"""The Spark jobs' pure parts, without a JVM."""

from __future__ import annotations

import re

from spark.jobs import emptied_by, row_topics_pattern, stub_schema, under


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
