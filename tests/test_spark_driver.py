"""spark/driver.py: the mirror's MERGE and the changelog's insert in delta-rs, on real Delta
tables in a temporary folder, and small tables' messages decoded in the driver (no JVM:
tests/test_spark_live.py has Spark read what delta-rs writes, and decode what the driver does)."""

from __future__ import annotations

import functools
import io
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from connector.avro.reader import plain_time
from connector.avro.schemas import value_schema
from connector.schema.ddl import apply_ddl
from connector.schema.model import Schema
from spark.driver import (
    Target,
    as_arrow,
    decoded,
    fits,
    in_a_decoder,
    insert_new,
    last_per,
    merge_newest,
    open_target,
    started_at,
    unscaled_text,
    writable,
)
from spark.jobs import LOGGED, MIRRORED, changelog_values, mirror_values, reading, shaped_rows

# Column names the SQL delta-rs reads must keep as they are: case, a space, a keyword.
KEY, TEXT, WORD = "Id", "Mixed Case", "select"


def mirror(path: Path, rows: list[tuple[int, str, int, int, int]], **options: Any) -> Target:
    """A mirror table of (key, text, word, position id, position row) rows."""
    write_deltalake(str(path), changes(rows, types=None), **options)
    target = open_target(str(path))
    assert target is not None
    return target


def changes(rows: list[tuple[Any, ...]], types: list[str] | None = None) -> pa.Table:
    """Rows as the mirror keeps them, with `types` (`_sluice_type`) as a batch's newest changes are."""
    columns: dict[str, list[Any]] = {
        KEY: [r[0] for r in rows], TEXT: [r[1] for r in rows], WORD: [r[2] for r in rows],
        "_sluice_id": [r[3] for r in rows], "_sluice_row": [r[4] for r in rows],
    }  # fmt: skip
    if types is not None:
        columns["_sluice_type"] = types
    return pa.table(columns)


def contents(path: Path) -> dict[int, tuple[str, int, int, int]]:
    table = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return {r[KEY]: (r[TEXT], r[WORD], r["_sluice_id"], r["_sluice_row"]) for r in table}


def test_a_change_applies_only_over_an_older_one(tmp_path: Path) -> None:
    held = [(1, "a", 1, 100, 0), (2, "b", 2, 100, 0), (3, "c", 3, 100, 5), (4, "d", 4, 100, 0)]
    target = mirror(tmp_path / "t", held)
    batch = changes(
        [
            (1, "a2", 10, 200, 0),  # newer: updated
            (2, "b0", 20, 50, 0),  # older (a replay): not applied
            (3, "c", 3, 100, 6),  # the same event, a later row: deleted
            (4, "d0", 4, 100, 0),  # the very position the table holds: not applied again
            (5, "e", 5, 200, 1),  # new: inserted
            (6, "f", 6, 200, 2),  # deleted before the table ever had it: not inserted
        ],
        types=["UPDATE", "UPDATE", "DELETE", "DELETE", "INSERT", "DELETE"],
    )
    metrics = merge_newest(target, batch, [KEY])
    assert contents(tmp_path / "t") == {
        1: ("a2", 10, 200, 0), 2: ("b", 2, 100, 0), 4: ("d", 4, 100, 0), 5: ("e", 5, 200, 1),
    }  # fmt: skip
    assert (metrics["num_target_rows_updated"], metrics["num_target_rows_deleted"]) == (1, 1)
    assert metrics["num_target_rows_inserted"] == 1
    again = open_target(str(tmp_path / "t"))  # the same batch again (a crash before the checkpoint)
    assert again is not None
    merge_newest(again, batch, [KEY])
    assert len(contents(tmp_path / "t")) == 4 and contents(tmp_path / "t")[1] == ("a2", 10, 200, 0)


def test_a_partitioned_mirror_rewrites_only_the_partitions_a_batch_touches(tmp_path: Path) -> None:
    rows = [(i, f"v{i}", i, 100, 0) for i in range(40)]
    table = changes(rows).append_column("_sluice_range", pa.array([i // 10 for i in range(40)], pa.int64()))
    write_deltalake(str(tmp_path / "t"), table, partition_by=["_sluice_range"])
    target = open_target(str(tmp_path / "t"))
    assert target is not None
    # A commit after it was opened (the job sets a table property through Spark): merged over it.
    DeltaTable(str(tmp_path / "t")).alter.set_table_properties({"sluice.truncatedAt": "5"}, raise_if_not_exists=False)
    batch = changes([(12, "x", 0, 200, 0), (15, "y", 0, 200, 1)], types=["UPDATE", "DELETE"])
    batch = batch.append_column("_sluice_range", pa.array([1, 1], pa.int64()))
    metrics = merge_newest(target, batch, [KEY], "_sluice_range")
    assert metrics["num_target_files_removed"] == 1  # range 1's file; ranges 0, 2 and 3 untouched
    assert metrics["num_target_files_scanned"] == 1  # and not read
    assert contents(tmp_path / "t")[12] == ("x", 0, 200, 0) and 15 not in contents(tmp_path / "t")
    assert len(contents(tmp_path / "t")) == 39
    assert DeltaTable(str(tmp_path / "t")).metadata().configuration["sluice.truncatedAt"] == "5"


def test_the_changelog_inserts_a_position_once_reading_only_the_batch_s_days(tmp_path: Path) -> None:
    def entries(ids: list[int]) -> pa.Table:
        days = pa.array([i % 3 for i in ids], pa.int32()).cast(pa.date32())  # a change's day is its own
        return pa.table({"sluice_id": ids, "source_row": [0] * len(ids), "op": ["INSERT"] * len(ids), "v": ids,
                         "event_date": days})  # fmt: skip

    write_deltalake(str(tmp_path / "c"), entries([1, 2, 3, 4, 5, 6]), partition_by=["event_date"])
    target = open_target(str(tmp_path / "c"))
    assert target is not None
    metrics = insert_new(target, entries([3, 6, 9, 12]), ["sluice_id", "source_row", "op"])  # all of day 0
    ids = sorted(r["sluice_id"] for r in DeltaTable(str(tmp_path / "c")).to_pyarrow_table().to_pylist())
    assert ids == [1, 2, 3, 4, 5, 6, 9, 12]
    assert metrics["num_target_files_scanned"] == 1 and metrics["num_target_files_skipped_during_scan"] == 2


def test_a_batch_with_a_column_new_to_the_table_or_a_changed_type_is_left_to_spark(tmp_path: Path) -> None:
    target = mirror(tmp_path / "t", [(1, "a", 1, 100, 0)])
    own = ("_sluice_type",)
    same = StructType([StructField(c, t) for c, t in ((KEY, LongType()), (TEXT, StringType()), (own[0], StringType()))])
    assert fits(target, same, own)
    assert not fits(target, same, ())  # the job's own column is not the table's
    assert not fits(target, StructType([*same.fields, StructField("added", IntegerType())]), own)
    assert not fits(target, StructType([StructField(KEY, DecimalType(20, 0))]), own)  # BIGINT UNSIGNED's widening


def test_tables_delta_rs_would_not_write_as_spark_does_are_left_to_spark(tmp_path: Path) -> None:
    assert open_target(str(tmp_path / "nothing")) is None
    (tmp_path / "file").write_text("someone else's\n")
    assert open_target(str(tmp_path / "file")) is None  # Spark's write says what is wrong
    assert open_target(str(tmp_path)) is None  # a folder without a Delta log
    assert open_target("s3a://bucket/lake/mirror/shop/t") is None  # Hadoop's: Spark writes it
    write_deltalake(str(tmp_path / "plain"), changes([(1, "a", 1, 1, 0)]))
    assert open_target(f"file://{tmp_path / 'plain'}") is not None and open_target(str(tmp_path / "plain")) is not None
    vectors = tmp_path / "dv"
    write_deltalake(str(vectors), changes([(1, "a", 1, 1, 0)]), configuration={"delta.enableDeletionVectors": "true"})
    assert open_target(str(vectors)) is None
    feed = tmp_path / "cdf"
    write_deltalake(str(feed), changes([(1, "a", 1, 1, 0)]), configuration={"delta.enableChangeDataFeed": "true"})
    assert open_target(str(feed)) is None
    quoted = tmp_path / "q"
    write_deltalake(str(quoted), pa.table({"a`b": [1]}))
    table = DeltaTable(str(quoted))
    assert not writable(Target(table, StructType([StructField("a`b", LongType())])))
    assert writable(Target(table, StructType([StructField("ab", LongType())])))


def test_the_newest_change_per_key_is_the_one_spark_would_keep() -> None:
    """`last_per` against the rule `spark.jobs.newest_per_key` applies (per key, the greatest
    position, then row), over composite keys of text and bytes, in random orders."""
    rng = random.Random(38)
    for _ in range(200):
        rows = [
            {"a": rng.choice(["x", "y", "X"]), "b": rng.choice([b"\x00", b"\x00\x00", b""]), "v": i,
             "_sluice_id": rng.randint(1, 4), "_sluice_row": rng.randint(0, 3)}
            for i in range(rng.randint(0, 30))
        ]  # fmt: skip
        want: dict[tuple[Any, Any], dict[str, Any]] = {}
        for row in rows:
            held = want.get((row["a"], row["b"]))
            if held is None or (row["_sluice_id"], row["_sluice_row"]) > (held["_sluice_id"], held["_sluice_row"]):
                want[(row["a"], row["b"])] = row
        schema = pa.schema([("a", pa.string()), ("b", pa.binary()), ("v", pa.int64()),
                            ("_sluice_id", pa.int64()), ("_sluice_row", pa.int32())])  # fmt: skip
        got = last_per(pa.Table.from_pylist(rows, schema), ["a", "b"], ("_sluice_id", "_sluice_row")).to_pylist()
        assert len(got) == len(want)
        for row in got:  # ties (the same key and position: a replayed duplicate) are the same change
            held = want[(row["a"], row["b"])]
            assert (row["_sluice_id"], row["_sluice_row"]) == (held["_sluice_id"], held["_sluice_row"])
    changes = pa.table({"sluice_id": [5, 5, 6], "source_row": [0, 0, 0], "op": ["INSERT"] * 3, "v": [1, 1, 2]})
    assert last_per(changes, ["sluice_id", "source_row", "op"]).num_rows == 2  # one row per change


# --- Small tables' messages decoded in the driver (spark.jobs.in_driver) --------------------
# tests/test_spark_live.py holds the whole path equal to Spark's from_avro over every column type.


def encoded(schema: dict[str, Any], value: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def message(row: dict[str, Any], kind: str = "INSERT", at: int = 1, old: dict[str, Any] | None = None,
            es: int = 1_700_000_000_123) -> dict[str, Any]:  # fmt: skip
    return {"id": at, "database": "shop", "table": "t", "type": kind, "isDdl": False, "pkNames": ["id"], "es": es,
            "ts": 2, "sql": "", "gtid": None, "data": [row], "old": None if old is None else [old],
            "source": {"server_id": 1, "file": "b.000001", "pos": 4, "row": at % 7}}  # fmt: skip


def test_messages_of_an_older_schema_are_read_as_the_newest_and_bad_bodies_raise() -> None:
    schema = Schema()
    apply_ddl(schema, "CREATE TABLE shop.t (id INT PRIMARY KEY, at DATETIME(6), d DATE, tm TIME)", "shop")
    older = value_schema(schema.tables[("shop", "t")], 1)
    apply_ddl(schema, "ALTER TABLE shop.t ADD COLUMN n INT NOT NULL DEFAULT 7", "shop")
    newest = value_schema(schema.tables[("shop", "t")], 2)
    row = {"id": 1, "at": datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC), "d": date(1000, 1, 1),
           "tm": -3_020_399_000_000}  # fmt: skip
    body = encoded(plain_time(older), message(row))
    reader = reading(newest, LOGGED)
    [got] = decoded([("a1", body)], {"a1": older}, reader, newest)
    assert got["data"] == [{"id": 1, "at": 1709251199999999, "d": -354285, "tm": -3_020_399_000_000, "n": 7}]
    assert "sql" not in got and got["source"]["row"] == 1  # what the job reads, as numbers Arrow takes
    [as_written] = decoded([("b2", encoded(plain_time(newest), message({**row, "n": 3})))], {"b2": newest}, reader,
                           newest)  # fmt: skip
    assert as_written["data"][0] == {**got["data"][0], "n": 3} and as_written["sql"] == ""  # the newest: as written
    with pytest.raises(ValueError, match="2 bytes left over"):
        decoded([("a1", body + b"\x00\x00")], {"a1": older}, reader, newest)
    with pytest.raises(EOFError):
        decoded([("a1", body[:-3])], {"a1": older}, reader, newest)


def test_a_wide_decimal_is_the_text_mysql_prints() -> None:
    rng = random.Random(41)
    values = [0, 1, -1, 10**65 - 1, -(10**65 - 1), 2**63, -(2**63)]
    values += [rng.randint(-(10 ** rng.randint(1, 65)), 10 ** rng.randint(1, 65)) for _ in range(300)]
    for value in values:
        unscaled = value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)
        for scale in (0, 1, 30, 38):
            assert unscaled_text(unscaled, scale) == format(Decimal(f"{value}E-{scale}"), "f"), (value, scale)
    assert unscaled_text(b"", 2) == "0.00" and unscaled_text(None, 2) is None
    assert unscaled_text(b"\xff\xff\xfb", 1) == "-0.5"  # sign-extended past the shortest


ENVELOPE = StructType([
    StructField("id", LongType()), StructField("type", StringType()), StructField("es", LongType()),
    StructField("gtid", StringType()),
    StructField("data", ArrayType(StructType([StructField("id", IntegerType(), False),
                                              StructField("v", StringType())]), False)),
    StructField("source", StructType([StructField("server_id", LongType(), False),
                                      StructField("file", StringType(), False), StructField("pos", LongType(), False),
                                      StructField("row", IntegerType(), False)])),
])  # fmt: skip
ENVELOPE.add(StructField("old", ENVELOPE["data"].dataType))


def test_the_mirror_s_rows_skip_what_an_emptying_took_and_the_changelog_keeps_both_images() -> None:
    messages = [message({"id": 1, "v": "a"}, at=10), message({"id": 1, "v": "b"}, "UPDATE", 20, {"id": 1, "v": "a"}),
                message({"id": 1, "v": "b"}, "DELETE", 30, es=-1)]  # fmt: skip
    rows, schema = mirror_values(messages, ENVELOPE, ["id", "v"], cut=10)
    assert rows == [{"id": 1, "v": "b", "_sluice_type": "UPDATE", "_sluice_id": 20, "_sluice_row": 6},
                    {"id": 1, "v": "b", "_sluice_type": "DELETE", "_sluice_id": 30, "_sluice_row": 2}]  # fmt: skip
    assert schema.simpleString() == "struct<id:int,v:string,_sluice_type:string,_sluice_id:bigint,_sluice_row:int>"
    entries, schema = changelog_values(messages, ENVELOPE)
    arrow = as_arrow(entries, schema)
    got = arrow.drop_columns(["ingested_at", "source_file", "source_server_id"]).to_pylist()
    assert [(e["op"], e["after"], e["before"]) for e in got] == [
        ("INSERT", {"id": 1, "v": "a"}, None), ("UPDATE", {"id": 1, "v": "b"}, {"id": 1, "v": "a"}),
        ("DELETE", None, {"id": 1, "v": "b"}),
    ]  # fmt: skip
    assert got[0]["event_time"] == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert got[0]["event_date"] == date(2023, 11, 14) and got[2]["event_date"] == date(1969, 12, 31)  # floors
    assert arrow.schema.field("after").type.field("id").nullable is False  # as Spark's collect gives it
    assert arrow.schema.field("ingested_at").type == pa.timestamp("us", tz="UTC")


def where_run(value: int) -> tuple[int, int]:
    return os.getpid(), value


def dies() -> None:
    os._exit(3)  # as a worker the kernel killed (out of memory, say)


def test_a_table_s_rows_are_decoded_in_a_process_of_its_own_and_a_worker_s_death_is_that_table_s_failure() -> None:
    schema = Schema()
    apply_ddl(schema, "CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(10))", "shop")
    newest = value_schema(schema.tables[("shop", "t")], 1)
    bodies = [("a1", encoded(plain_time(newest), message({"id": i % 3, "v": f"v{i}"}, at=i))) for i in range(50)]
    work: tuple[Any, ...] = (bodies, {"a1": newest}, reading(newest, MIRRORED), newest, {}, ENVELOPE,
                             functools.partial(mirror_values, names=["id", "v"], cut=40))  # fmt: skip
    rows, kind = in_a_decoder(shaped_rows, *work)
    assert (rows, kind) == shaped_rows(*work)  # what the driver's own process makes of them
    assert rows.column("_sluice_id").to_pylist() == list(range(41, 50))
    there, value = in_a_decoder(where_run, 7)
    assert there != os.getpid() and value == 7
    with pytest.raises(ValueError, match="bytes left over"):
        in_a_decoder(shaped_rows, [("a1", bodies[0][1] + b"\x00")], *work[1:])
    with pytest.raises(BrokenProcessPool):
        in_a_decoder(dies)
    again, _ = in_a_decoder(where_run, 8)  # the next table's: a pool started again
    assert again not in (there, os.getpid())


STOPPED_BY_CTRL_C = """
import os, signal, time
from spark.driver import in_a_decoder, unscaled_text
print(in_a_decoder(unscaled_text, b"\\x01", 1), flush=True)
try:
    os.killpg(0, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    time.sleep(5)
except KeyboardInterrupt:
    print("stopped", flush=True)
"""


def test_ctrl_c_stops_the_driver_without_a_traceback_from_its_decoders() -> None:
    done = subprocess.run([sys.executable, "-c", STOPPED_BY_CTRL_C], check=True, capture_output=True, text=True,
                          timeout=60, start_new_session=True, cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    assert done.stdout.split() == ["0.1", "stopped"], done.stderr
    assert done.stderr == ""  # before, each decoder printed KeyboardInterrupt's traceback


KILLED = """
import os, time
from spark.driver import in_a_decoder
print(in_a_decoder(os.getpid), in_a_decoder(os.getppid), flush=True)  # a decoder and its forkserver
time.sleep(120)
"""


def gone(pid: int) -> bool:
    return started_at(pid) is None  # no process, or a zombie


def test_a_driver_killed_takes_its_decoders_and_their_forkserver_with_it() -> None:
    driver = subprocess.Popen([sys.executable, "-c", KILLED], stdout=subprocess.PIPE, text=True,
                              start_new_session=True, cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    try:
        decoder, forkserver = (int(pid) for pid in driver.stdout.readline().split())  # type: ignore[union-attr]
        assert not gone(decoder) and not gone(forkserver)
    finally:
        driver.kill()  # as SIGTERM's default, no clean-up runs
        driver.wait(30)
    deadline = time.monotonic() + 30
    while not (gone(decoder) and gone(forkserver)) and time.monotonic() < deadline:
        time.sleep(0.2)
    outlived = [pid for pid in (forkserver, decoder) if not gone(pid)]
    if outlived:  # not left running: the forkserver's children (every decoder), then itself
        subprocess.run(["pkill", "-KILL", "-P", str(forkserver)], check=False)
        os.kill(forkserver, signal.SIGKILL)
    assert not outlived, f"{outlived} outlived the driver (forkserver {forkserver}, a decoder {decoder})"  # as before
