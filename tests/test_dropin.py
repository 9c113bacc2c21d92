"""Issue 18's options on the in-memory twins: canal-json, tombstones, the DDL topic, transaction and
heartbeat topics, column rules, subject names (the live tests run the same against Kafka)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from connector.avro.framing import subject_name
from connector.binlog.constants import RowsKind
from connector.canal import CanalJsonEncoder, java_float_text
from connector.columns import ColumnRules
from connector.config import ColumnRule, parse_config
from connector.errors import ConfigError
from connector.extras import HeartbeatTopic, TransactionTopic
from connector.items import Commit, Heartbeat
from connector.pipeline import NO_OPTIONS, Options
from tests.support.units import Rig, changes, complete, pos, row, table


def _canal(tmp_path: Path, old: str = "changed", options: Options = NO_OPTIONS) -> Rig:
    """A rig whose pipeline writes canal's FlatMessage JSON."""
    encoder = lambda directory: CanalJsonEncoder(directory, "row", old)  # noqa: E731
    return Rig(tmp_path, encoder=encoder, options=options)


def _json(rig: Rig, topic: str) -> list[dict[str, Any]]:
    return [json.loads(m.value) for m in rig.sink.messages(topic) if m.value is not None]


@pytest.mark.parametrize(
    ("text", "java"),
    [("1.5", "1.5"), ("0.1", "0.1"), ("1e-05", "1.0E-5"), ("12345678.0", "1.2345678E7"), ("100.0", "100.0"),
     ("0.001", "0.001"), ("-2.25", "-2.25"), ("0.0", "0.0"), ("3.4028235e+38", "3.4028235E38")],
)  # fmt: skip
def test_floats_print_as_java_prints_them(text: str, java: str) -> None:
    assert java_float_text(text) == java


def test_canal_json_has_every_flatmessage_field_and_changed_columns_in_old(tmp_path: Path) -> None:
    rig = _canal(tmp_path)
    update = row("UPDATE", 1, "b", 20, old={"v": "a"})
    rig.run([changes(row("INSERT", 1, "a", 10)), changes(update), Commit(pos(30), None, 2)])
    first, update = _json(rig, "cdc.db.t")
    assert set(first) == {"id", "database", "table", "pkNames", "isDdl", "type", "es", "ts", "sql", "sqlType",
                          "mysqlType", "data", "old", "gtid"}  # fmt: skip
    assert first["data"] == [{"id": "1", "v": "a"}] and first["old"] is None
    assert first["sqlType"] == {"id": 4, "v": 12} and first["mysqlType"] == {"id": "int", "v": "varchar(10)"}
    assert update["old"] == [{"v": "a"}] and update["data"] == [{"id": "1", "v": "b"}]
    key = rig.sink.messages("cdc.db.t")[0].key
    assert key is not None and json.loads(key) == {"id": "1"}


def test_old_full_is_the_whole_before_image(tmp_path: Path) -> None:
    rig = _canal(tmp_path, old="full")
    rig.run([changes(row("UPDATE", 1, "b", 20, old={"v": "a"})), Commit(pos(30), None, 1)])
    (update,) = _json(rig, "cdc.db.t")
    assert update["old"] == [{"id": "1", "v": "a"}]


def test_unsigned_values_past_the_signed_range_take_canals_wider_sql_type(tmp_path: Path) -> None:
    encoder = CanalJsonEncoder(None)  # type: ignore[arg-type]
    t = table("CREATE TABLE t (id INT PRIMARY KEY, u TINYINT UNSIGNED, b BIGINT UNSIGNED, e ENUM('x','y'),"
              " s SET('a','b','c'), bl BLOB, tx TEXT)")  # fmt: skip
    message = row("INSERT", 1, None, 1)
    message["data"] = [{"id": "1", "u": "200", "b": "18446744073709551615", "e": "y", "s": "a,c", "bl": "\x00",
                        "tx": None}]  # fmt: skip
    doc = encoder.document([message], t)
    assert doc["data"][0]["e"] == "2" and doc["data"][0]["s"] == "5"
    # A NULL TEXT is a CLOB too (canal's LogEventConvert since issue 4652); tests/test_sqltypes.py: every type.
    assert doc["sqlType"] == {"id": 4, "u": 5, "b": 3, "e": 4, "s": -7, "bl": 2004, "tx": 2005}


def test_event_rows_hold_a_rows_events_rows_in_one_message(tmp_path: Path) -> None:
    encoder = CanalJsonEncoder(None, rows="event")  # type: ignore[arg-type]
    doc = encoder.document([row("UPDATE", 1, "a", 10, old={"v": "x"}), row("UPDATE", 2, "b", 10)], table())
    assert doc["data"] == [{"id": "1", "v": "a"}, {"id": "2", "v": "b"}]
    assert doc["old"] == [{"v": "x"}, {}]  # one entry per row, as Flink and canal's partitioner index them


def test_a_tombstone_follows_each_delete_on_its_keys_partition(tmp_path: Path) -> None:
    rig = Rig(tmp_path, options=Options(tombstones=True))
    rig.run([changes(row("INSERT", 1, "a", 10)), changes(row("DELETE", 1, "a", 20)), Commit(pos(30), None, 2)])
    messages = rig.sink.messages("cdc.db.t")
    assert [m.value is None for m in messages] == [False, False, True]
    assert len({(m.partition, m.key) for m in messages}) == 1
    assert rig.checkpointer.committed == pos(30)  # the tombstone is acknowledged like any message


def test_ddl_goes_to_one_partition_in_order(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    ddl = [{**row("INSERT", 0, None, 10 + i), "isDdl": True, "type": "CREATE", "table": f"t{i}", "sql": "CREATE",
            "data": None} for i in range(6)]  # fmt: skip
    rig.run([*(changes(m, t=None) for m in ddl), Commit(pos(30), None, 0)])
    assert len(rig.sink.topics["cdc.db._ddl"]) == 1 and "cdc.db._ddl" in rig.sink.single
    assert [m.partition for m in rig.sink.messages("cdc.db._ddl")] == [0] * 6


def test_transactions_and_heartbeats_have_their_topics(tmp_path: Path) -> None:
    rig = Rig(tmp_path, options=Options(
        transactions=TransactionTopic("cdc._transaction", clock=lambda: 1.0),
        heartbeats=HeartbeatTopic("cdc._heartbeat", "cdc", 10.0, clock=lambda: rig.now),
    ))  # fmt: skip
    first = changes({**row("INSERT", 1, "a", 10), "gtid": "u:5"})
    rig.run([first, changes({**row("INSERT", 2, "b", 11), "gtid": "u:5"}), Commit(pos(30), "u:5", 2),
             Heartbeat(pos(40))])  # fmt: skip
    begin, end = _json(rig, "cdc._transaction")
    assert begin == {"status": "BEGIN", "id": "u:5", "ts_ms": 1000, "event_count": None, "data_collections": None}
    assert end["status"] == "END" and end["event_count"] == 2
    assert end["data_collections"] == [{"data_collection": "db.t", "event_count": 2}]
    (beat,) = _json(rig, "cdc._heartbeat")  # the second end came within the interval
    assert beat["position"].startswith("bin.000001:30")
    assert rig.checkpointer.committed == pos(40)



def test_transaction_records_are_the_documented_json_byte_for_byte() -> None:
    """The records are written from parts (fast, for the kernel's bursts): the bytes are still those
    a JSON encoder writes of the documented dicts, for ids and names that need escaping too."""
    encode = json.JSONEncoder(separators=(",", ":")).encode
    topic = TransactionTopic("cdc._transaction", clock=lambda: 1_700_000_000.1239)
    cases = [("3f15a78c-e9ea-11f1-99ad-02fc00000001:7", "bin.000001", [("db", "t", 2)]),
             (None, 'odd"name\\.000002', [("é中", "😀", 1), ("db", "t", 3), ("é中", "😀", 10**12)]),
             ("0-1-9", "x", [("tab\tand\x01", "q\"", 5)])]  # fmt: skip
    for gtid, file, counts in cases:
        tid = gtid or f"{file}:44"
        begin = topic.begin(gtid, file, 44)
        assert begin == (encode({"id": tid}).encode(), encode({"status": "BEGIN", "id": tid, "ts_ms": 1_700_000_000_123,
                         "event_count": None, "data_collections": None}).encode())  # fmt: skip
        assert topic.begin("another", file, 45) is None  # inside the transaction
        collected: dict[str, int] = {}
        for database, name, n in counts:
            topic.count(database, name, n)
            collected[f"{database}.{name}"] = collected.get(f"{database}.{name}", 0) + n
        dicts = [{"data_collection": k, "event_count": v} for k, v in collected.items()]
        end = {"status": "END", "id": tid, "ts_ms": 1_700_000_000_123, "event_count": sum(collected.values()),
               "data_collections": dicts}  # fmt: skip
        assert topic.end() == (encode({"id": tid}).encode(), encode(end).encode())
        assert topic.end() is None

def test_column_rules_exclude_mask_and_hash(tmp_path: Path) -> None:
    rules = ColumnRules([ColumnRule(r"db\.t", exclude=["w"], mask=["v"], hash=["h"], hash_salt="s", mask_chars=3)])
    rig = _canal(tmp_path, options=Options(columns=rules))
    t = table("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10), w INT, h VARCHAR(10))")
    message = {**row("INSERT", 1, "secret", 10), "data": [{"id": "1", "v": "secret", "w": "7", "h": "x"}]}
    rig.run([changes(message, t=t), Commit(pos(30), None, 1)])
    (doc,) = _json(rig, "cdc.db.t")
    assert doc["data"] == [{"id": "1", "v": "***", "h": hashlib.sha256(b"sx").hexdigest()}]
    with pytest.raises(ConfigError, match="key column"):
        ColumnRules([ColumnRule(r"db\.t", exclude=["id"])]).table(t)


def test_a_rule_s_table_in_messages_of_a_rows_event_is_shaped_in_one_message() -> None:
    """`message_rows = "event"` under a [[kafka.columns]] rule: one message for the rows event (it was
    one per row), its rows as the rule shapes them and its types those of the shaped table."""
    rules = ColumnRules([ColumnRule(r"db\.t", exclude=["w"], mask=["v"], hash=["h"], hash_salt="s", mask_chars=3)])
    t = table("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10), w INT, h VARCHAR(10))")
    messages = [{**row("INSERT", i, "secret", 10), "data": [{"id": str(i), "v": "secret", "w": "7", "h": "x"}]}
                for i in (1, 2)]  # fmt: skip
    images = SimpleNamespace(present=range(4), kind=RowsKind.WRITE, raw=None)  # no bytes: the Python path
    batch = SimpleNamespace(rows=images, messages=lambda: iter(messages))
    encoder = CanalJsonEncoder(None, rows="event")  # type: ignore[arg-type]
    encoded = encoder.rows(batch, t, "cdc.db.t", rules.shaping(t))  # type: ignore[arg-type]
    assert encoded is not None and len(encoded) == 1 and encoded[0][0] is None
    doc = json.loads(encoded[0][1])
    digest = hashlib.sha256(b"sx").hexdigest()
    assert doc["data"] == [{"id": str(i), "v": "***", "h": digest} for i in (1, 2)]
    assert doc["mysqlType"] == {"id": "int", "v": "varchar(255)", "h": "varchar(255)"}
    assert doc["sqlType"] == {"id": 4, "v": 12, "h": 12}


def test_a_rows_event_of_partial_images_is_one_message_per_event() -> None:
    """`message_rows = "event"` with MINIMAL or NOBLOB images (flat.py fills each row's message from
    both images): one message for the rows event, as with whole images; per row, one each."""
    t = table("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10), w INT, h VARCHAR(10))")
    messages = [{**row("UPDATE", i, "new", 10, old={"v": "old"}), "data": [{"id": str(i), "v": "new"}]}
                for i in (1, 2, 3)]  # fmt: skip
    images = SimpleNamespace(present=range(2), kind=RowsKind.UPDATE, raw=None)  # two of the four columns
    batch = SimpleNamespace(rows=images, messages=lambda: iter(messages))
    encoded = CanalJsonEncoder(None, rows="event").rows(batch, t, "cdc.db.t")  # type: ignore[arg-type]
    assert encoded is not None and len(encoded) == 1 and encoded[0][0] is None
    doc = json.loads(encoded[0][1])
    assert doc["data"] == [{"id": str(i), "v": "new"} for i in (1, 2, 3)]
    assert doc["old"] == [{"v": "old"}] * 3
    assert CanalJsonEncoder(None, rows="row").rows(batch, t, "cdc.db.t") is None  # type: ignore[arg-type]


def test_subject_names_follow_the_strategy() -> None:
    schema = {"type": "record", "name": "orders", "namespace": "sluice.shop"}
    assert subject_name("topic", "cdc.all", "value", schema) == "cdc.all-value"
    assert subject_name("record", "cdc.all", "value", schema) == "sluice.shop.orders"
    assert subject_name("topic_record", "cdc.all", "key", schema) == "cdc.all-sluice.shop.orders"


@pytest.mark.parametrize(
    ("kafka", "message"),
    [({"value_format": "json"}, "value_format"), ({"message_rows": "event"}, "message_rows"),
     ({"old": "changed"}, "kafka.old"), ({"topic_config": {"cleanup.policy": "keep"}}, "topic_config"),
     ({"value_format": "canal-json", "message_rows": "event", "tombstones": True}, "tombstones"),
     ({"columns": [{"tables": "a", "include": ["x"], "exclude": ["y"]}]}, "include and exclude")],
)  # fmt: skip
def test_bad_options_fail_naming_the_key(kafka: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(complete({"kafka": kafka}))


def test_consume_shows_bytes_as_hex_and_json_and_tombstones_as_they_are(tmp_path: Path) -> None:
    from connector.avro.reader import MessageReader  # noqa: PLC0415
    from connector.avro.registry import SchemaDirectory  # noqa: PLC0415
    from connector.commands.consume import _decoded, _shown  # noqa: PLC0415

    reader = MessageReader(SchemaDirectory(tmp_path / "schemas"))
    assert _decoded(reader, None) == (None, None)
    assert _decoded(reader, b'{"type":"INSERT"}') == (None, {"type": "INSERT"})
    assert json.dumps({"b": b"\x00\xff"}, default=_shown) == '{"b": "0x00ff"}'


@pytest.mark.parametrize("fmt", ["avro", "canal-json"])
def test_a_keyless_snapshots_truncate_marker_is_written_only_where_the_format_has_it(tmp_path: Path, fmt: str) -> None:
    rig = _canal(tmp_path) if fmt == "canal-json" else Rig(tmp_path)
    keyless = table("CREATE TABLE t (n INT, v VARCHAR(10))")
    marker = {**row("TRUNCATE", 1, None, 10), "pkNames": None, "data": None}
    read = {**row("READ", 1, "a", 10), "pkNames": None, "data": [{"n": "1", "v": "a"}]}
    rig.pipeline.publish(marker, keyless)  # as the snapshot does before a keyless table's READs
    rig.pipeline.publish(read, keyless)
    rig.pipeline.drain()
    written = rig.sink.messages("cdc.db.t")
    if fmt == "avro":
        assert [r["type"] for r in rig.records()] == ["TRUNCATE", "READ"]
    else:  # canal has no such row type, and Flink's canal-json stops on one
        assert [json.loads(m.value or b"")["type"] for m in written] == ["INSERT"]
