"""The Spark jobs' pure parts, without a JVM."""

from __future__ import annotations

import re

from spark.jobs import row_topics_pattern, under


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
