"""The Spark jobs on the real broker: the mirror equals the source, twice; the changelog has each change once."""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from connector.avro.encoding import MessageEncoder
from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory, fingerprint_of
from connector.config import Config
from connector.runner import Connector
from spark.driver import arrow_of
from spark.examples.read_topic import read_topic
from spark.jobs import (
    KEY_RANGE,
    LOGGED,
    MIRRORED,
    RANGE,
    STATS,
    TRUNCATED_AT,
    Holds,
    Shape,
    TablesHeldBack,
    WriterSchemas,
    changelog_entry,
    changelog_values,
    decode,
    fields_of,
    in_driver,
    mirror_row,
    mirror_values,
    properties_of,
    row_names,
    row_topics_pattern,
    run,
    session,
    under,
    writers_in,
)
from tests.support import onlineddl
from tests.support.live import KAFKA, ROOT, connect, fresh_database, server
from tests.support.pipelines import TABLES, fresh, workload
from tests.support.renames import PHASE_ROWS, RENAMED_TABLE, RENAMES, names_on_server, write_phase
from tests.support.replay import comparable, set_columns, source_rows
from tests.support.spark import (
    assert_changelog_has_each_change_once,
    assert_mirror_equals_source,
    feed_with_a_crash,
    lake_config,
    mirror_rows,
    python_value,
    write_spark_config,
)

pytestmark = pytest.mark.live


@pytest.fixture(autouse=True)
def utc() -> None:
    """The process in UTC: Spark gives naive timestamps in its zone, compared here as UTC (mirror_rows)."""
    os.environ["TZ"] = "UTC"
    time.tzset()


def changelog_rows(spark: Any, path: str, keys: list[str]) -> list[dict[str, Any]]:
    """The table the changelog's entries make, applied in source order: per key its newest
    image, none where that is a DELETE."""
    rows: dict[tuple[Any, ...], dict[str, Any] | None] = {}
    entries = spark.read.format("delta").load(path).collect()
    for entry in sorted(entries, key=lambda e: (e["sluice_id"], e["source_row"])):
        image = (entry["before"] if entry["op"] == "DELETE" else entry["after"]).asDict()
        rows[tuple(python_value(image[k]) for k in keys)] = None if entry["op"] == "DELETE" else image
    return [{k: python_value(v) for k, v in row.items()} for row in rows.values() if row is not None]


def test_mirror_and_changelog(tmp_path: Path) -> None:
    config, db = lake_config(tmp_path)
    fresh(db)
    feed_with_a_crash(config, db, tmp_path)

    run(config, "mirror", once=True)
    spark = session(config, "test")
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    assert_mirror_equals_source(spark, config, db, reader)
    versions = {
        table: DeltaTable.forPath(spark, str(Path(config.spark.lake_dir) / "mirror" / db / table))
        .history(1).collect()[0]["version"]
        for table in ("orders", "order_lines")
    }  # fmt: skip
    amounts = [r["amount"] for r in mirror_rows(spark, str(Path(config.spark.lake_dir) / "mirror" / db / "orders"))]
    assert amounts and all(isinstance(a, Decimal) and a.as_tuple().exponent == -2 for a in amounts)  # exact
    assert (
        "region" in spark.read.format("delta").load(str(Path(config.spark.lake_dir) / "mirror" / db / "orders")).columns
    )

    for table, stats in (("orders", ["id"]), ("order_lines", ["order_id", "line"])):
        assert statistics_of(str(Path(config.spark.lake_dir) / "mirror" / db / table)) == {*stats, "_sluice_id"}, table

    run(config, "mirror", once=True)  # again: nothing new, nothing changes
    for table, version in versions.items():
        path = str(Path(config.spark.lake_dir) / "mirror" / db / table)
        assert DeltaTable.forPath(spark, path).history(1).collect()[0]["version"] == version

    config_path = tmp_path / "spark.toml"
    write_spark_config(config, config_path)
    cli = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "sluice"), "spark", "changelog", "--config", str(config_path), "--once"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr[-2000:]
    replay = assert_changelog_has_each_change_once(spark, config, db, reader)

    # A plain Spark user: strip the framing, from_avro with a .avsc from schemas/ (spark/examples).
    avsc = str(Path(config.avro.schemas_dir) / db / "order_lines" / "v1.avsc")
    frame = read_topic(spark, KAFKA, f"{config.kafka.topic_prefix}.{db}.order_lines", avsc)
    plain = {(r["source"]["file"], r["source"]["pos"], r["source"]["row"], r["type"]) for r in frame.collect()}
    assert plain == {m for m in replay.seen if replay.table_of[m] == "order_lines"}

    # Restarted on new data: the checkpoint resumes where it stopped, the mirror catches up. A
    # table made before the mirror chose its statistics columns is given them; one whose columns
    # somebody chose keeps theirs.
    orders, lines = (str(Path(config.spark.lake_dir) / "mirror" / db / t) for t in ("orders", "order_lines"))
    spark.sql(f"ALTER TABLE delta.`{orders}` UNSET TBLPROPERTIES ('{STATS}')")
    spark.sql(f"ALTER TABLE delta.`{lines}` SET TBLPROPERTIES ('{STATS}' = 'qty')")
    workload(db, 20, seed=13, pause_s=0)
    stream_and_mirror(spark, config, db, reader)
    assert properties_of(spark, orders)[STATS] == "`id`,`_sluice_id`"
    assert statistics_of(orders) == {"id", "_sluice_id"}
    assert properties_of(spark, lines)[STATS] == "qty"
    assert statistics_of(lines) == {"qty"}


def statistics_of(path: str) -> set[str]:
    """The columns the statistics of a Delta table's newest added file cover (from its log;
    Spark lists them in the table's order, delta-rs in its own)."""
    stats: set[str] = set()
    for entry in sorted(Path(path, "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            added = json.loads(line).get("add")
            if added and added.get("stats"):
                stats = set(json.loads(added["stats"])["minValues"])
    return stats


def test_mirror_reads_confluent_framed_topics(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The mirror of Confluent-framed topics (a registry's ids) equals SELECT *, read in batches of
    at most 40 messages (`[spark] max_offsets`)."""
    config, db = lake_config(tmp_path, "lakereg")
    config = replace(config, avro=replace(config.avro, schema_registry_url="mock://sluice-spark"),
                     spark=replace(config.spark, max_offsets=40))  # fmt: skip
    fresh(db)
    first = Connector(config)
    first.run(blocking=False)  # first start: capture, and the keyless table's snapshot marker
    workload(db, 30, seed=21, alter_at=15)
    connector = Connector(config)
    # A mock:// registry lives in its client: both runs write through the first one's, as two
    # runs against one real registry would.
    assert isinstance(connector.encoder, MessageEncoder) and isinstance(first.encoder, MessageEncoder)
    connector.encoder.framing = first.encoder.framing
    connector.run(blocking=False)
    registry = connector.encoder.framing.client  # type: ignore[attr-defined]  # the in-process mock registry
    with caplog.at_level(logging.INFO, logger="sluice.spark"):
        run(config, "mirror", once=True, registry=registry)
    batches = {r.getMessage().split(":")[0] for r in caplog.records if ": merged " in r.getMessage()}
    assert len(batches) >= 3, batches  # a few hundred messages, 40 a batch
    spark = session(config, "test")
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir), registry)
    for table in ("orders", "order_lines"):
        path = str(Path(config.spark.lake_dir) / "mirror" / db / table)
        sets = set_columns(reader, db, table)
        assert comparable(mirror_rows(spark, path), sets) == comparable(source_rows(db, table, reader), sets)


def test_mirror_follows_renamed_columns(tmp_path: Path) -> None:
    """Rows mirrored before RENAME COLUMN and CHANGE COLUMN keep their values under the new names;
    a mirror built afterwards from all messages (every version resolved to the newest by Avro's
    aliases, in Java) and the plain-Spark example agree with SELECT."""
    config, db = lake_config(tmp_path, "lakeren")
    fresh_database(db, RENAMED_TABLE)
    Connector(config).run(blocking=False)  # first start: capture
    write_phase(db, 0)
    Connector(config).run(blocking=False)
    run(config, "mirror", once=True)  # the mirror has `id` and `name`
    for phase, statement in enumerate(RENAMES, 1):
        with connect(db).cursor() as cur:
            cur.execute(statement)
        write_phase(db, phase)
    Connector(config).run(blocking=False)
    run(config, "mirror", once=True)  # renames the mirror's columns, then merges the new changes
    spark = session(config, "test")
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    want = comparable(source_rows(db, "people", reader), set())
    assert len(want) == PHASE_ROWS * 3
    for lake in ("lake", "scratch"):
        if lake == "scratch":  # all messages at once, from v1 on
            spark_dirs = replace(config.spark, lake_dir=str(tmp_path / lake), checkpoint_dir=str(tmp_path / "cp2"))
            run(replace(config, spark=spark_dirs), "mirror", once=True)
        path = str(tmp_path / lake / "mirror" / db / "people")
        assert comparable(mirror_rows(spark, path), set()) == want, f"{lake}: mirror differs from SELECT *"

    names = names_on_server(db)
    avsc = str(Path(config.avro.schemas_dir) / db / "people" / "v3.avsc")
    frame = read_topic(spark, KAFKA, f"{config.kafka.topic_prefix}.{db}.people", avsc)
    images = [image for r in frame.collect() for image in [*r["data"], *(r["old"] or [])]]
    assert len(images) > PHASE_ROWS * 3 and all(image["display"] == names[image["pid"]] for image in images)


# DECIMALs Spark cannot hold (over 38 digits) as a key and as columns, beside the widest it
# holds; their mirror and changelog have MySQL's text of them. MariaDB allows 38 digits after the
# point (MySQL 30): `m` and `n` have them there.
WIDE = ("CREATE TABLE {{db}}.wide (k DECIMAL(65,30) PRIMARY KEY, w DECIMAL(65,30) NULL, z DECIMAL(65,0) NULL,"
        " m DECIMAL(39,{m}) NULL, n DECIMAL(38,{m}) NULL)")  # fmt: skip
WIDE_TEXT = ("k", "w", "z", "m")
NINES = "9" * 35 + "." + "9" * 30


def wide_table() -> tuple[str, list[tuple[str | None, ...]]]:
    """The wide table's definition and rows on this server."""
    m = 38 if server().mariadb else 30
    rows: list[tuple[str | None, ...]] = [
        ("0", None, "0", None, "0"),
        (NINES, "-" + NINES, "9" * 65, "-9." + "9" * m, "0." + "9" * m),
        ("-0.000000000000000000000000000001", "0.000000000000000000000000000001", "-" + "9" * 65,
         "0." + "0" * (m - 1) + "1", "-0.5"),
        ("-1", "12345.678", "-1", "1", None),
        ("18446744073709551616.5", "-0.1", "340282366920938463463374607431768211456", "-0.00000001", "0.00000001"),
    ]  # fmt: skip
    return WIDE.format(m=m), rows


# Every other type, in the same batch as the wide DECIMALs.
TYPES = (
    "CREATE TABLE {db}.types (id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT,"
    " i INT, iu INT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED, f FLOAT, d DOUBLE, dc DECIMAL(10,2), y YEAR, dt DATE,"
    " t TIME(6), dtm DATETIME(6), ts TIMESTAMP(6) NULL, c CHAR(10), vc VARCHAR(50) CHARACTER SET utf8mb4,"
    " bin BINARY(4), vb VARBINARY(20), bl BLOB, tx TEXT, e ENUM('a','b'), st SET('x','y'), b1 BIT(1), b64 BIT(64),"
    " j JSON, g GEOMETRY)"
)
TYPES_ROWS = [
    "(1, -128, 255, -32768, -8388608, -2147483648, 4294967295, -9223372036854775808, 18446744073709551615, 1.5,"
    " -2.25e300, -12345678.90, 1901, '1000-01-01', '-838:59:59.000000', '1000-01-01 00:00:00.000000',"
    " '1970-01-01 00:00:01.000000', 'a', 'ü中💾', x'00010203', x'', x'ff00', 'text', 'a', 'x,y', b'1',"
    " b'1111111111111111111111111111111111111111111111111111111111111111', '{\"k\": [1, \"x\"]}',"
    " ST_GeomFromText('POINT(1 2)'))",
    "(2, 127, 0, 32767, 8388607, 2147483647, 0, 9223372036854775807, 0, -0.5, 0, 99999999.99, 2155, '9999-12-31',"
    " '838:59:59.000000', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', '', '', x'ffffffff', x'00',"
    " x'', '', 'b', '', b'0', b'0', 'null', ST_GeomFromText('LINESTRING(0 0, 1 1)'))",
    "(3" + ", NULL" * 28 + ")",
]
# A table whose mirror and changelog paths hold something else: its writes fail, the others' do not.
BLOCKED = "CREATE TABLE {db}.blocked (id INT PRIMARY KEY, v INT)"


def text_rows(rows: dict[Any, dict[str, Any]] | list[dict[str, Any]], columns: tuple[str, ...]) -> list[dict[str, Any]]:
    """SELECT * rows with `columns` (DECIMALs Spark cannot hold) as their plain text, which is the
    text the server sent (pymysql's Decimal keeps its digits)."""
    return [{k: format(v, "f") if k in columns and v is not None else v for k, v in row.items()}
            for row in (rows.values() if isinstance(rows, dict) else rows)]  # fmt: skip


def server_texts(db: str, column: str) -> set[str]:
    """A wide DECIMAL column's values as the server prints them."""
    with connect(db).cursor() as cur:
        cur.execute(f"SELECT CAST({column} AS CHAR) FROM wide WHERE {column} IS NOT NULL")
        return {row[0] for row in cur.fetchall()}


def assert_decoded_in_the_driver_as_by_spark(spark: Any, config: Config, db: str, tables: tuple[str, ...]) -> None:
    """Every message of `tables` in the topics, decoded by Spark's from_avro and by fastavro in the
    driver (`spark.jobs.in_driver`), as the mirror's rows and the changelog's entries: the same
    Arrow, values and types (but the changelog's ingestion time, the clock's)."""
    raw = spark.read.format("kafka").option("kafka.bootstrap.servers", config.kafka.bootstrap_servers).option(
        "subscribePattern", row_topics_pattern(config.kafka.topic_prefix)).load()  # fmt: skip
    schemas = WriterSchemas(SchemaDirectory(config.avro.schemas_dir))
    framed = schemas.frame(raw).persist()
    writers = writers_in(framed, schemas).writers
    for table in ((db, name) for name in tables):
        names = row_names(schemas.directory, table)
        bodies = [(r["fp"], r["body"]) for r in framed.filter(F.col("fp").isin(list(writers[table]))).collect()]
        shapes: dict[tuple[str, ...], tuple[Any, Shape, list[str]]] = {
            MIRRORED: (mirror_row(F.col("m"), names), functools.partial(mirror_values, names=names, cut=-1),
                       ["_sluice_id", "_sluice_row"]),
            LOGGED: (changelog_entry(F.col("m")), changelog_values, ["sluice_id", "source_row"]),
        }  # fmt: skip
        for fields, (row, shape, position) in shapes.items():
            by_spark = fields_of(decode(framed, schemas, {table: writers[table]}, fields)[table], row)
            want = arrow_of(by_spark).drop_columns(["ingested_at"] if fields == LOGGED else [])
            got, schema = in_driver(spark, schemas.directory, table, writers[table], shape, bodies, fields)
            got = got.drop_columns(["ingested_at"] if fields == LOGGED else [])
            assert schema == by_spark.schema, f"{table} {fields}: {schema.simpleString()}"
            assert got.schema == want.schema, f"{table} {fields}: {got.schema} != {want.schema}"
            order = [(column, "ascending") for column in position]
            assert got.sort_by(order).to_pylist() == want.sort_by(order).to_pylist(), f"{table} {fields}"
            assert got.num_rows == len(bodies) > 0
    framed.unpersist()


def test_a_mirror_keyed_by_uuids_and_wide_decimals_beside_every_type_and_a_failing_table(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A table keyed by BINARY(16) UUIDs: Delta keeps no file statistics for binary columns (naming
    one fails a table's first write), so the mirror keeps them on its position alone. A table keyed
    by a DECIMAL(65,30) (wider ones than Spark's 38 digits mirrored as MySQL's text of them), one of
    every other type, and one whose mirror and changelog paths hold something that is not a Delta
    table (a file): its writes fail, reported and held back, the others are written (mirror and changelog
    equal SELECT *); once the paths are free, the held table's changes (from the first batch on)
    are written at the next run. Each after the batch that creates its mirror and after one that
    merges into it."""
    config, db = lake_config(tmp_path, "lakewide")
    wide, wide_rows = wide_table()
    fresh_database(db, "CREATE TABLE {db}.u (id BINARY(16) PRIMARY KEY, v INT)", wide, TYPES, BLOCKED)
    Connector(config).run(blocking=False)  # first start: capture
    keys = [uuid.uuid4().bytes for _ in range(50)]
    with connect(db).cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.executemany("INSERT INTO u VALUES (%s, %s)", [(key, i) for i, key in enumerate(keys)])
        cur.executemany("INSERT INTO wide VALUES (%s, %s, %s, %s, %s)", wide_rows)
        cur.execute("INSERT INTO types VALUES " + ", ".join(TYPES_ROWS))
        cur.executemany("INSERT INTO blocked VALUES (%s, %s)", [(i, i) for i in range(10)])
    Connector(config).run(blocking=False)
    lake = Path(config.spark.lake_dir)
    for job in ("mirror", "changelog"):  # a file where the failing table's Delta tables go
        (lake / job / db).mkdir(parents=True)
        (lake / job / db / "blocked").write_text("someone else's\n")
    spark = session(config, "test")
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))

    def assert_equal_to_source(tables: tuple[str, ...]) -> None:
        for table in tables:
            want = comparable(text_rows(source_rows(db, table, reader), WIDE_TEXT), set_columns(reader, db, table))
            mirror = comparable(mirror_rows(spark, str(lake / "mirror" / db / table)), set_columns(reader, db, table))
            keys = SchemaDirectory(config.avro.schemas_dir).key_columns(db, table)
            logged = changelog_rows(spark, str(lake / "changelog" / db / table), keys)
            assert mirror == want, f"mirror of {table}: {len(mirror)} rows, SELECT * {len(want)}"
            assert comparable(logged, set_columns(reader, db, table)) == want, f"changelog of {table}"

    for job in ("mirror", "changelog"):
        with caplog.at_level(logging.INFO, logger="sluice.spark"), pytest.raises(TablesHeldBack, match=f"{db}.blocked"):
            run(config, job, once=True)
        failed = [r.getMessage() for r in caplog.records if "not written" in r.getMessage()]
        assert len(failed) == 1 and f"batch 0: {job} of {db}.blocked not written" in failed[0], failed
        assert "DELTA_CANNOT_CREATE_LOG_PATH" in failed[0] and "\n" not in failed[0] and "Traceback" not in failed[0]
        assert any(f"{job}: " in r.getMessage() and f"held back: {db}.blocked since batch 0" in r.getMessage()
                   for r in caplog.records)  # the run's summary  # fmt: skip
        caplog.clear()
    assert_equal_to_source(("u", "wide", "types"))
    assert server_texts(db, "k") == {r["k"] for r in mirror_rows(spark, str(lake / "mirror" / db / "wide"))}
    assert not DeltaTable.isDeltaTable(spark, str(lake / "mirror" / db / "blocked"))

    for job in ("mirror", "changelog"):
        (lake / job / db / "blocked").unlink()  # the paths free: the held changes are written
    with connect(db).cursor() as cur:
        cur.executemany("UPDATE u SET v = v + 100 WHERE id = %s", [(key,) for key in keys[:10]])
        cur.executemany("DELETE FROM u WHERE id = %s", [(key,) for key in keys[10:20]])
        cur.execute("UPDATE wide SET w = -w, z = -z, m = -m WHERE k <> 0")
        cur.execute("UPDATE wide SET k = -k WHERE k = -1")  # a key change: DELETE and INSERT
        cur.execute("DELETE FROM wide WHERE k = 0")
        cur.execute("INSERT INTO wide VALUES (%s, NULL, NULL, NULL, NULL)", ("-" + NINES,))
        cur.execute("UPDATE types SET i = i DIV 2, vc = CONCAT(vc, '!'), j = JSON_ARRAY(id) WHERE id < 3")
        cur.execute("UPDATE blocked SET v = v * 10 WHERE id < 5")
        cur.execute("DELETE FROM blocked WHERE id = 9")
    Connector(config).run(blocking=False)
    for job in ("mirror", "changelog"):
        with caplog.at_level(logging.INFO, logger="sluice.spark"):
            run(config, job, once=True)
        # Written when the job starts (as with no new message), re-read from its first batch's offsets.
        assert any(f"at start: {job} of {db}.blocked written again, with its changes held back since batch 0"
                   in r.getMessage() for r in caplog.records)  # fmt: skip
        caplog.clear()
        assert Holds(spark, under(config.spark.checkpoint_dir, config.name, f"{job}-held")).held == {}
    assert_equal_to_source(("u", "wide", "types", "blocked"))
    assert server_texts(db, "w") == {r["w"] for r in mirror_rows(spark, str(lake / "mirror" / db / "wide"))} - {None}
    assert_changelog_has_each_change_once(spark, config, db, reader, ("u", "wide", "types", "blocked"))

    assert_decoded_in_the_driver_as_by_spark(spark, config, db, ("u", "wide", "types", "blocked"))

    path = str(lake / "mirror" / db / "u")
    assert len(mirror_rows(spark, path)) == 40
    assert properties_of(spark, path)[STATS] == "`_sluice_id`" and statistics_of(path) == {"_sluice_id"}
    for table in ("u", "wide", "types"):
        newest = DeltaTable.forPath(spark, str(lake / "mirror" / db / table)).history(1).collect()[0]
        assert newest["operation"] == "MERGE", table


@pytest.mark.servers("mariadb")  # the bytes are made here; the source only feeds the tables
def test_a_message_that_does_not_decode_holds_its_table_back_and_the_others_are_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A message of a small table whose body no Avro reads (its writer schema's header, then
    bytes cut short): the driver's decoder refuses it and leaves the table to Spark, whose decode
    fails it, so that table is held back with one line; the batch's other table is written by
    delta-rs as ever. Both jobs, on the batch after the one that made their tables."""
    config, db = lake_config(tmp_path, "lakecorrupt")
    fresh_database(db, *(f"CREATE TABLE {{db}}.{t} (id INT PRIMARY KEY, v INT)" for t in ("a", "b")))
    Connector(config).run(blocking=False)  # first start: capture
    with connect(db).cursor() as cur:
        for table in ("a", "b"):
            cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", [(i, i) for i in range(20)])
    Connector(config).run(blocking=False)
    for job in ("mirror", "changelog"):
        run(config, job, once=True)  # the tables made (by Spark)
    with connect(db).cursor() as cur:
        for table in ("a", "b"):
            cur.execute(f"UPDATE {table} SET v = v + 100 WHERE id < 10")
    Connector(config).run(blocking=False)
    header = b"\xc3\x01" + fingerprint_of(SchemaDirectory(config.avro.schemas_dir).latest_schema(db, "a"))
    producer = Producer({"bootstrap.servers": KAFKA})
    producer.produce(f"{config.kafka.topic_prefix}.{db}.a", key=b"k", value=header + b"\x02", partition=0)
    assert producer.flush(30) == 0
    spark = session(config, "test")
    for job in ("mirror", "changelog"):
        with caplog.at_level(logging.INFO, logger="sluice.spark"), pytest.raises(TablesHeldBack, match=f"{db}.a$"):
            run(config, job, once=True)
        said = [r.getMessage() for r in caplog.records]
        assert f"{db}.a: not decoded in the driver, by Spark instead" in "\n".join(said), said
        failed = [line for line in said if "not written" in line]
        assert len(failed) == 1 and f"batch 1: {job} of {db}.a not written" in failed[0], failed
        written = "merged" if job == "mirror" else "appended changes of"
        assert any(f"batch 1: {written} {db}.b (delta-rs" in line for line in said), said
        caplog.clear()
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    sets, lake = set_columns(reader, db, "b"), tmp_path / "lake"
    want = comparable(source_rows(db, "b", reader), sets)
    assert comparable(mirror_rows(spark, str(lake / "mirror" / db / "b")), sets) == want
    assert comparable(changelog_rows(spark, str(lake / "changelog" / db / "b"), ["id"]), sets) == want
    held = {row["v"] for row in mirror_rows(spark, str(lake / "mirror" / db / "a"))}
    assert held == set(range(20))  # the first batch's rows: nothing of the held one


def test_the_readme_recipe_reads_a_topic_across_add_and_drop_column(tmp_path: Path) -> None:
    """spark/README.md's plain-Spark recipe (spark/examples/read_topic.py), the newest .avsc as
    the reader: rows written before an ADD COLUMN get its DEFAULT, rows written before a DROP
    COLUMN lose the column, and replaying the messages by key gives SELECT *."""
    config, db = lake_config(tmp_path, "lakeaddrop")
    fresh_database(db, "CREATE TABLE {db}.items (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, qty INT NOT NULL)")
    Connector(config).run(blocking=False)  # first start: capture
    with connect(db).cursor() as cur:
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s)", [(i, f"n{i}", i) for i in range(1, 21)])
        cur.execute("ALTER TABLE items ADD COLUMN color VARCHAR(10) NOT NULL DEFAULT 'red'")
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s, 'blue')", [(i, f"n{i}", i) for i in range(21, 41)])
        cur.execute("ALTER TABLE items DROP COLUMN qty")
        cur.executemany("INSERT INTO items VALUES (%s, %s, 'green')", [(i, f"n{i}") for i in range(41, 61)])
        cur.execute("UPDATE items SET name = CONCAT(name, '!') WHERE id % 7 = 0")
        cur.execute("DELETE FROM items WHERE id % 9 = 0")
        cur.execute("SELECT id, name, color FROM items")
        want = {row[0]: {"id": row[0], "name": row[1], "color": row[2]} for row in cur.fetchall()}
    Connector(config).run(blocking=False)
    avsc = Path(config.avro.schemas_dir) / db / "items" / "v3.avsc"
    assert not (avsc.parent / "v4.avsc").exists()  # v1, ADD COLUMN v2, DROP COLUMN v3: the newest
    frame = read_topic(session(config, "test"), KAFKA, f"{config.kafka.topic_prefix}.{db}.items", str(avsc))
    mirror: dict[int, dict[str, Any]] = {}
    # One key's messages are in one partition, in offset order (the recipe decodes a writer schema
    # at a time, so its rows come grouped by version: order them).
    for message in sorted(frame.collect(), key=lambda m: (m["partition"], m["offset"])):
        row = message["data"][0].asDict()
        assert set(row) == {"id", "name", "color"}
        if message["type"] == "DELETE":
            mirror.pop(row["id"], None)
        else:
            mirror[row["id"]] = row
    assert len(want) == 54 and mirror == want
    assert {row["color"] for row in mirror.values() if row["id"] <= 20} == {"red"}  # the ADD's DEFAULT


def a_mirrored_workload(tmp: Path, db_name: str, seed: int) -> tuple[Config, str, Any, MessageReader]:
    """A fresh database with a workload, streamed by the connector and mirrored once (checked)."""
    config, db = lake_config(tmp, db_name)
    fresh(db)
    Connector(config).run(blocking=False)  # first start: capture
    workload(db, 30, seed=seed)
    spark = session(config, "test")
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    stream_and_mirror(spark, config, db, reader)
    return config, db, spark, reader


def stream_and_mirror(spark: Any, config: Config, db: str, reader: MessageReader) -> None:
    """What the source did since, through the connector and a `--once` mirror: equal to SELECT *."""
    Connector(config).run(blocking=False)
    run(config, "mirror", once=True)
    assert_mirror_equals_source(spark, config, db, reader)


def keys_come_back(spark: Any, config: Config, db: str, reader: MessageReader, empty: list[str], seed: int) -> None:
    """`empty` (statements that take `orders`' rows away), two of its keys inserted again and a
    workload, then mirrored: equal to SELECT *, the keys there again."""
    with connect(db).cursor() as cur:
        cur.execute("SELECT id FROM orders ORDER BY id LIMIT 2")
        reused = [row[0] for row in cur.fetchall()]
        assert len(reused) == 2
        for statement in empty:
            cur.execute(statement)
        for key in reused:
            cur.execute("INSERT INTO orders (id, customer, amount, created) VALUES (%s, 'again', 1.50, NOW(6))", (key,))
    workload(db, 10, seed=seed)
    stream_and_mirror(spark, config, db, reader)
    orders = str(Path(config.spark.lake_dir) / "mirror" / db / "orders")
    assert {r["id"] for r in mirror_rows(spark, orders)} >= set(reused)


def test_the_mirror_empties_a_table_truncated_on_the_source(tmp_path: Path) -> None:
    """TRUNCATE TABLE after the mirror holds a table's rows, and inside one batch (changes before
    and after it): the mirror equals SELECT * each time, keys inserted again after the TRUNCATE
    included; a batch run again (its checkpoint lost) changes nothing."""
    config, db, spark, reader = a_mirrored_workload(tmp_path, "laketrunc", 21)

    keys_come_back(spark, config, db, reader, ["TRUNCATE TABLE orders"], seed=22)  # between two batches

    workload(db, 10, seed=23)  # within one batch: changes, the TRUNCATE, more changes
    with connect(db).cursor() as cur:
        cur.execute("TRUNCATE TABLE order_lines")
    workload(db, 10, seed=24)
    stream_and_mirror(spark, config, db, reader)
    lines = str(Path(config.spark.lake_dir) / "mirror" / db / "order_lines")
    properties = DeltaTable.forPath(spark, lines).detail().collect()[0]["properties"]
    assert int(properties[TRUNCATED_AT]) > 0

    # Every batch again from the start (its checkpoint lost): the truncates are applied already.
    shutil.rmtree(config.spark.checkpoint_dir)
    run(config, "mirror", once=True)
    assert_mirror_equals_source(spark, config, db, reader)


def test_the_mirror_empties_tables_dropped_on_the_source_and_made_again(tmp_path: Path) -> None:
    """DROP TABLE of two tables (its message names the first only) and both created again under
    their names, between two batches and inside one: the mirror equals SELECT * each time (the
    old rows gone, the new ones there); a batch run again (its checkpoint lost) changes nothing."""
    config, db, spark, reader = a_mirrored_workload(tmp_path, "lakedrop", 31)

    definitions = {"orders": TABLES[0].format(db=db), "order_lines": TABLES[1].format(db=db)}
    again = ["DROP TABLE order_lines, orders", definitions["orders"], definitions["order_lines"]]
    keys_come_back(spark, config, db, reader, again, seed=32)  # between two batches

    workload(db, 10, seed=33)  # within one batch: changes, the DROP and CREATE, more changes
    with connect(db).cursor() as cur:
        cur.execute("DROP TABLE order_lines")
        cur.execute(definitions["order_lines"])
    workload(db, 10, seed=34)
    stream_and_mirror(spark, config, db, reader)

    shutil.rmtree(config.spark.checkpoint_dir)  # every batch again: the drops are applied already
    run(config, "mirror", once=True)
    assert_mirror_equals_source(spark, config, db, reader)


@pytest.mark.parametrize("driver_rows", [0, 20_000], ids=["spark-merge", "delta-rs"])
def test_a_mirror_by_key_range_rewrites_only_the_ranges_a_batch_touches(tmp_path: Path, driver_rows: int) -> None:
    """[spark] key_range: a new mirror table with an integer leading key is partitioned by key div
    the width, and a batch whose changes fall in one range rewrites that range's files alone;
    a text key stays unpartitioned. Both equal SELECT * after each batch. The second batch is
    merged by Spark's MERGE, or by delta-rs in the driver (`[spark] driver_rows`)."""
    config, db = lake_config(tmp_path, "lakerange")
    config = replace(config, spark=replace(config.spark, key_range=100, driver_rows=driver_rows))
    fresh_database(db, "CREATE TABLE {db}.n (id BIGINT PRIMARY KEY, v INT)",
                   "CREATE TABLE {db}.s (k VARCHAR(10) PRIMARY KEY, v INT)")  # fmt: skip
    Connector(config).run(blocking=False)  # first start: capture
    with connect(db).cursor() as cur:
        cur.executemany("INSERT INTO n VALUES (%s, %s)", [(i, i) for i in range(400)])  # ranges 0 to 3
        cur.executemany("INSERT INTO s VALUES (%s, %s)", [(f"k{i}", i) for i in range(50)])
    Connector(config).run(blocking=False)
    run(config, "mirror", once=True)
    spark = session(config, "test")
    lake = Path(config.spark.lake_dir) / "mirror" / db

    def files_by_range() -> dict[int, set[str]]:
        frame = spark.read.format("delta").load(str(lake / "n")).select(RANGE, F.input_file_name().alias("f"))
        out: dict[int, set[str]] = {}
        for row in frame.distinct().collect():
            out.setdefault(row[RANGE], set()).add(row["f"])
        return out

    def assert_equal_to_source() -> None:
        for table, key in (("n", "id"), ("s", "k")):
            with connect(db).cursor() as cur:
                cur.execute(f"SELECT {key}, v FROM {table}")
                want = sorted(cur.fetchall())
            got = sorted((r[key], r["v"]) for r in mirror_rows(spark, str(lake / table)))
            assert got == want, f"mirror of {table}: {len(got)} rows, SELECT * {len(want)}"

    assert_equal_to_source()
    numbers, texts = (DeltaTable.forPath(spark, str(lake / t)).detail().collect()[0] for t in ("n", "s"))
    assert numbers["partitionColumns"] == [RANGE] and numbers["properties"][KEY_RANGE] == "100"
    assert texts["partitionColumns"] == [] and KEY_RANGE not in texts["properties"]
    before = files_by_range()
    assert sorted(before) == [0, 1, 2, 3]

    with connect(db).cursor() as cur:  # range 1 changed; range 10 new
        cur.execute("UPDATE n SET v = v + 1000 WHERE id BETWEEN 100 AND 199 AND id % 2 = 0")
        cur.execute("DELETE FROM n WHERE id = 150")
        cur.executemany("INSERT INTO n VALUES (%s, %s)", [(i, i) for i in range(1000, 1010)])
        cur.execute("UPDATE s SET v = v + 1 WHERE k = 'k7'")
    Connector(config).run(blocking=False)
    run(config, "mirror", once=True)
    assert_equal_to_source()
    after = files_by_range()
    assert sorted(after) == [0, 1, 2, 3, 10]
    assert all(after[r] == before[r] for r in (0, 2, 3))  # untouched ranges: the same files
    assert not after[1] & before[1]  # range 1's files rewritten
    merged = DeltaTable.forPath(spark, str(lake / "n")).history(1).collect()[0]
    assert merged["operation"] == "MERGE"
    assert ("delta-rs" in merged["engineInfo"]) == (driver_rows > 0), merged["engineInfo"]
    removed = "numTargetFilesRemoved" if driver_rows == 0 else "num_target_files_removed"  # delta-rs's name
    assert int(merged["operationMetrics"][removed]) == len(before[1])


def test_the_mirror_follows_a_tool_s_cut_over_and_a_rename_onto_a_mirrored_name(tmp_path: Path) -> None:
    """An online schema change's cut-over (gh-ost on MySQL, pt-online-schema-change on MariaDB)
    that adds a column, one that changes a type (the table is read again), and a RENAME of
    another table onto the mirrored name, each under a writer: after each, the mirror of `t`
    equals SELECT * (issue 36: a swap took the table's rows away before)."""
    config, db = lake_config(tmp_path, "lakeosc")
    on = server()
    fresh_database(db)
    onlineddl.seed_table(on, db, "t", 400)
    onlineddl.seed_table(on, db, "staged", 50)
    Connector(config).run(blocking=False)  # first start: capture, the initial snapshot
    spark = session(config, "test")
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    add: onlineddl.Tool = "gh-ost" if on.name in onlineddl.GH_OST_SERVERS else "pt-osc"
    for step in ("add", "modify", "rename"):
        with onlineddl.Writer(on, db, "t", onlineddl.table_rows(on, db, "t"), rate=20):
            if step == "add":
                onlineddl.to_end(onlineddl.start(add, on, db, "t", "ADD COLUMN c INT NOT NULL DEFAULT 7", {}))
            elif step == "modify":
                onlineddl.pt_osc(on, db, "t", "MODIFY COLUMN v VARCHAR(128) NOT NULL")
            else:
                with connect(db).cursor() as cur:
                    cur.execute("RENAME TABLE t TO t_before, staged TO t")
            time.sleep(0.5)
        Connector(config).run(blocking=False)
        run(config, "mirror", once=True)
        path = str(Path(config.spark.lake_dir) / "mirror" / db / "t")
        got = comparable(mirror_rows(spark, path), set())
        want = comparable(source_rows(db, "t", reader), set())
        assert got == want, f"after the {step}: the mirror of {db}.t differs from SELECT * ({len(got)} vs {len(want)})"
