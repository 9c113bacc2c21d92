"""Reading a Sluice topic with plain Spark: no Sluice code, only a .avsc from schemas/.

Each value is Avro single-object encoded: 2 marker bytes (C3 01), the 8-byte schema
fingerprint, then the Avro body. Strip the first 10 bytes and hand the body to from_avro
with the writer schema. (With several schema versions in one topic, pick the .avsc by the
fingerprint: bytes 3-10, the key of schemas/index.json in hex.)

    spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0,\\
        org.apache.spark:spark-avro_2.13:4.0.0 read_topic.py BOOTSTRAP TOPIC schemas/db/table/v1.avsc
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro


def read_topic(spark: SparkSession, bootstrap: str, topic: str, avsc: str) -> DataFrame:
    """One row per message: the envelope's fields, with `data` holding the row."""
    raw = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    body = F.expr("substring(value, 11, length(value) - 10)")  # drop C3 01 + fingerprint
    return raw.select(from_avro(body, Path(avsc).read_text()).alias("m")).select("m.*")


if __name__ == "__main__":
    bootstrap, topic, avsc = sys.argv[1:4]
    session = SparkSession.builder.appName("read-sluice-topic").getOrCreate()
    read_topic(session, bootstrap, topic, avsc).select("type", "data", "source").show(truncate=False)
