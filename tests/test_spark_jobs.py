"""The Spark jobs' pure parts, without a JVM."""

from __future__ import annotations

from spark.jobs import under


def test_lake_paths_below_a_url_keep_its_double_slash() -> None:
    assert under("s3a://bucket/lake/", "mirror", "shop", "orders") == "s3a://bucket/lake/mirror/shop/orders"
    assert under("hdfs://nn:8020/cdc", "ckpt", "mirror") == "hdfs://nn:8020/cdc/ckpt/mirror"
    assert under(".run/lake", "changelog", "shop", "orders") == ".run/lake/changelog/shop/orders"
