"""Reading a Sluice topic with plain Spark: no Sluice code, only schemas/ (a .avsc and index.json).

Each value is Avro single-object encoded: 2 marker bytes (C3 01), the 8-byte fingerprint of
the schema it was written with, then the Avro body. A topic holds every version its table
had, so each message is decoded with its own writer schema (the fingerprint, in hex, is the
key of schemas/index.json) and resolved to the version you read as, normally the table's
newest: columns added since get their defaults, and columns renamed since come under their
new names (the newer fields' Avro `aliases` list their earlier names). Passing one .avsc as
from_avro's schema for every message fails as soon as the table has two versions.

    spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0,\\
        org.apache.spark:spark-avro_2.13:4.0.0 read_topic.py BOOTSTRAP TOPIC schemas/db/table/vN.avsc \\
        [client.properties]

A secured Kafka's client settings (security.protocol, sasl.*, ssl.*: those of Kafka's own
command-line tools' --command-config file, one `key=value` a line) go in the optional file,
not on the command line, where every user of the machine can read them. Each is handed to
Spark's Kafka source as `kafka.<key>`. Spark writes a source's options into its plan's text,
which it logs and shows: set `spark.sql.redaction.string.regex` to a pattern of the password
(spark/jobs.py's PLAN_SECRETS is the one the Sluice jobs use).
"""

from __future__ import annotations

import json
import sys
from functools import reduce
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro


def read_topic(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    avsc: str,
    schemas_dir: str | None = None,
    options: dict[str, str] | None = None,
) -> DataFrame:
    """One row per message, in the shape of `avsc` (schemas/<db>/<table>/v<N>.avsc): the
    envelope's fields, with `data` holding the row. `schemas_dir`: where index.json is (by
    default the schemas folder `avsc` is in); `options`: more options of the Kafka source
    (a secured Kafka's `kafka.security.protocol`, `kafka.sasl.jaas.config` and the like)."""
    reader = Path(avsc).read_text()
    root = Path(schemas_dir) if schemas_dir else Path(avsc).resolve().parents[2]
    index = json.loads((root / "index.json").read_text())
    raw = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .options(**(options or {}))
        .load()
    )
    framed = raw.select(
        F.lower(F.hex(F.substring("value", 3, 8))).alias("fingerprint"),
        F.expr("substring(value, 11, length(value) - 10)").alias("body"),  # drop C3 01 + fingerprint
        "partition",
        "offset",
    )
    parts = []
    for row in framed.select("fingerprint").distinct().collect():
        writer = (root / index["fingerprints"][row["fingerprint"]]).read_text()
        decoded = from_avro("body", writer, {"avroSchema": reader}).alias("m")
        parts.append(framed.filter(F.col("fingerprint") == row["fingerprint"]).select(decoded, "partition", "offset"))
    if not parts:  # an empty topic
        parts.append(framed.select(from_avro("body", reader).alias("m"), "partition", "offset"))
    # Decoded a writer schema at a time: the union is not in the topic's order. A key's changes
    # are in one partition, in offset order: order by those (or by source) to apply them.
    return reduce(DataFrame.unionByName, parts).select("m.*", "partition", "offset")


def client_options(path: str) -> dict[str, str]:
    """A Kafka client properties file (`key=value` a line; `#` and `!` start comments) as the
    Kafka source's `kafka.<key>` options."""
    options = {}
    for text in Path(path).read_text().splitlines():
        line = text.strip()
        if line and line[0] not in "#!":
            key, _, value = line.partition("=")
            options[f"kafka.{key.strip()}"] = value.strip()
    return options


if __name__ == "__main__":
    bootstrap, topic, avsc = sys.argv[1:4]
    secured = client_options(sys.argv[4]) if len(sys.argv) > 4 else {}
    session = SparkSession.builder.appName("read-sluice-topic").getOrCreate()
    read_topic(session, bootstrap, topic, avsc, options=secured).select("type", "data", "source").show(truncate=False)
