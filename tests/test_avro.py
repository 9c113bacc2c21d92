"""Avro: schemas from table definitions, the wire framings, the schema directory, value conversions."""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest

from connector.avro.encoding import MessageEncoder
from connector.avro.framing import ConfluentFraming, SingleObjectFraming
from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory, fingerprint_of
from connector.avro.schemas import backward_compatible, key_schema, row_fields, value_schema
from connector.avro.values import converter, zero_date_key
from connector.errors import ConfigError, EncodingError, UnreadableMessageError
from connector.position import Position
from connector.schema.ddl import apply_ddl
from connector.schema.model import Column, Schema, Table, without_aliases
from tests.support.units import TYPES, table

SHOP = table(TYPES, "shop")  # the table of every type, in database `shop`


def message(data: dict[str, Any], kind: str = "INSERT", old: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "database": "shop", "table": "t", "type": kind, "isDdl": False, "pkNames": ["id"], "es": 1000, "ts": 2000,
        "sql": "INSERT ...", "gtid": "0-1-7", "data": [data], "old": [old] if old else None,
        "source": {"file": "mariadb-bin.000003", "pos": 1234, "server_id": 1, "row": 0},
    }  # fmt: skip


ROW: dict[str, Any] = {
    "id": "18446744073709551615", "i": "-2147483648", "iu": "4294967295",
    "amount": "-12345678901234567890.0123456789", "f": "0.1", "d": "-2.5", "day": "1969-12-31",
    "at": "2024-02-29 23:59:59.999999", "ts": "1970-01-01 00:00:00.001", "span": "-838:59:59.000000",
    "y": "2024", "b": "4095", "name": "héllo", "blob_": "\u0000\u00ff", "e": "y", "s": "p,q",
    "j": '{"a": 1}', "g": "0101000000000000000000f03f", "odd name-é": "5", "region": None,
}  # fmt: skip


def test_single_object_encoding_round_trip(tmp_path: Path) -> None:
    directory = SchemaDirectory(tmp_path)
    encoder = MessageEncoder(directory, SingleObjectFraming())
    key, value = encoder.row(message(ROW), SHOP, "cdc.shop.t")
    version = directory.version_of(SHOP)
    assert value[:2] == b"\xc3\x01" and value[2:10] == version.value_fingerprint
    assert key is not None and key[2:10] == version.key_fingerprint
    reader = MessageReader(SchemaDirectory(tmp_path))  # a consumer with only the directory
    schema, record = reader.read(value)
    row = record["data"][0]
    assert row["id"] == Decimal("18446744073709551615") and row["iu"] == 4294967295
    assert row["amount"] == Decimal("-12345678901234567890.0123456789")
    assert row["day"].isoformat() == "1969-12-31"
    assert row["at"].isoformat() == "2024-02-29T23:59:59.999999+00:00"
    assert row["ts"].isoformat() == "1970-01-01T00:00:00.001000+00:00"
    assert row["span"] == -(838 * 3600 + 59 * 60 + 59) * 1_000_000
    assert (row["y"], row["b"], row["blob_"], row["g"]) == (2024, 4095, b"\x00\xff", bytes.fromhex(ROW["g"]))
    assert row["odd_name__"] == 5 and row["region"] is None and row["name"] == "héllo"
    assert record["source"] == {"server_id": 1, "file": "mariadb-bin.000003", "pos": 1234, "row": 0}
    assert record["id"] == 3 << 32 | 1234
    assert reader.read(key)[1] == {"id": Decimal("18446744073709551615")}
    fields = {f["name"]: f for f in schema["fields"][10]["type"][1]["items"]["fields"]}
    assert fields["odd_name__"]["mysqlName"] == "odd name-é"
    assert fields["amount"]["mysqlType"] == "decimal(30,10)" and fields["amount"]["sqlType"] == 3
    assert fields["region"]["default"] == "eu" and fields["region"]["type"] == ["string", "null"]


def test_fingerprint_is_the_spec_crc64_little_endian() -> None:
    # Avro specification test vector: the Rabin fingerprint of "null" is 7195948357588979594.
    assert fingerprint_of("null") == (7195948357588979594).to_bytes(8, "little")


def test_update_carries_the_whole_before_image(tmp_path: Path) -> None:
    encoder = MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming())
    _, value = encoder.row(message({**ROW, "name": "new"}, "UPDATE", {"name": "old", "region": "us"}), SHOP, "t")
    record = MessageReader(SchemaDirectory(tmp_path)).read(value)[1]
    assert record["data"][0]["name"] == "new" and record["old"][0]["name"] == "old"
    assert record["old"][0]["region"] == "us" and record["old"][0]["amount"] == Decimal(ROW["amount"])


def test_confluent_framing_through_the_mock_registry(tmp_path: Path) -> None:
    framing = ConfluentFraming("mock://sluice-test")
    encoder = MessageEncoder(SchemaDirectory(tmp_path), framing)
    key, value = encoder.row(message(ROW), SHOP, "cdc.shop.t")
    assert value[:1] == b"\x00" and key is not None and key[:1] == b"\x00"
    client = framing.client
    assert client.get_latest_version("cdc.shop.t-value").schema_id == int.from_bytes(value[1:5], "big")
    record = MessageReader(SchemaDirectory(tmp_path), client).read(value)[1]
    assert record["data"][0]["amount"] == Decimal(ROW["amount"])


def test_schema_versions_index_and_compatibility(tmp_path: Path) -> None:
    directory = SchemaDirectory(tmp_path)
    v1 = directory.version_of(table("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(5))", "shop"))
    again = SchemaDirectory(tmp_path).version_of(table("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(5))", "shop"))
    v2 = directory.version_of(table("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(5), b INT DEFAULT 3)", "shop"))
    v3 = directory.version_of(table("CREATE TABLE t (id INT PRIMARY KEY, a INT NOT NULL, b INT DEFAULT 3)", "shop"))
    assert (v1.version, again.version, v2.version, v3.version) == (1, 1, 2, 3)
    index = json.loads((tmp_path / "index.json").read_text())
    entries = index["tables"]["shop.t"]
    assert [e["file"] for e in entries] == ["shop/t/v1.avsc", "shop/t/v2.avsc", "shop/t/v3.avsc"]
    assert [e.get("backward_compatible") for e in entries] == [None, True, False]
    assert "column `a` changed from string to int" in entries[2]["reasons"][0]
    assert index["fingerprints"][v2.value_fingerprint.hex()] == "shop/t/v2.avsc"
    for entry in entries:
        fastavro.parse_schema(json.loads((tmp_path / entry["file"]).read_text()))


def test_a_reader_sees_each_version_the_writer_adds(tmp_path: Path) -> None:
    """Readers keep the index they parsed until the file changes (a write replaces it): each
    version a connector adds is seen at the reader's next look, the old one kept between."""
    writer, reader = SchemaDirectory(tmp_path), SchemaDirectory(tmp_path)
    v1 = writer.version_of(table("CREATE TABLE t (id INT PRIMARY KEY)", "shop"))
    assert list(fields_by_name(reader.latest_schema("shop", "t"))) == ["id"]
    assert reader.latest_schema("shop", "t") == reader.schema_by_fingerprint(v1.value_fingerprint)
    v2 = writer.version_of(table("CREATE TABLE t (id INT PRIMARY KEY, a INT)", "shop"))
    assert list(fields_by_name(reader.latest_schema("shop", "t"))) == ["id", "a"]
    assert reader.schema_by_fingerprint(v2.value_fingerprint) == reader.latest_schema("shop", "t")
    writer.version_of(table("CREATE TABLE u (id INT PRIMARY KEY)", "shop"))
    assert reader.table_names() == [("shop", "t"), ("shop", "u")]


def test_a_new_primary_key_over_the_same_columns_is_a_new_version(tmp_path: Path) -> None:
    """Found by tests/test_native_fuzz.py: the version was chosen by the value layout alone, which
    has no key, so after `DROP PRIMARY KEY, ADD PRIMARY KEY (b)` the old version and its key schema
    (of `a`) came back: the flat path raised KeyError, the rows path ValueError (zip of the key)."""
    schema = Schema()
    apply_ddl(schema, "CREATE TABLE t (a INT NOT NULL, b VARCHAR(5) NOT NULL, PRIMARY KEY (a))", "shop")
    before = schema.tables[next(iter(schema.tables))]
    apply_ddl(schema, "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (b)", "shop")
    after = schema.tables[next(iter(schema.tables))]
    directory = SchemaDirectory(tmp_path)
    v1, v2 = directory.version_of(before), directory.version_of(after)
    assert (v1.version, v2.version) == (1, 2) and v2.key is not None
    assert [f["name"] for f in v2.key["fields"]] == ["b"]
    assert SchemaDirectory(tmp_path).version_of(after).version == 2  # read again from the index
    assert SchemaDirectory(tmp_path).version_of(before).version == 1
    encoder = MessageEncoder(directory, SingleObjectFraming())
    key, _ = encoder.row({**message({"a": "1", "b": "x"}), "pkNames": ["b"]}, after, "t")
    assert key is not None and key[10:] == b"\x02x"  # the Avro string "x", after the framing


def test_a_null_in_a_not_null_column_names_the_column(tmp_path: Path) -> None:
    """Found by tests/test_native_fuzz.py (rig.all_null_row): a NULL logged for a NOT NULL column
    (bytes no server wrote, or a TABLE_MAP older than the definition) reached the generated
    encoder, whose field has no null, and came out as AttributeError ('NoneType' has no 'encode')."""
    encoder = MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming())
    with pytest.raises(EncodingError, match=r"`shop`.`t`.`amount`: a NULL, but the column is decimal\(30,10\) NOT"):
        encoder.row(message({**ROW, "amount": None}), SHOP, "t")


def test_a_null_in_a_primary_key_column_names_the_column(tmp_path: Path) -> None:
    """Found by tests/test_native_fuzz.py in CI: a TABLE_MAP whose null bitmap says a primary key
    column takes NULL (bytes no server wrote), and a NULL in it. The value's field has a null, the
    key's never does, and the generated key encoder raised TypeError ('<=' with None)."""
    keyed = table("CREATE TABLE t (id INT NOT NULL, n INT, PRIMARY KEY (id))", "shop")
    loose = replace(keyed, columns=tuple(replace(c, nullable=True) for c in keyed.columns))
    encoder = MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming())
    with pytest.raises(EncodingError, match=r"`shop`.`t`.`id`: a NULL, but the column is in the primary key"):
        encoder.row(message({"id": None, "n": "1"}), loose, "t")
    key, _ = encoder.row(message({"id": "7", "n": None}), loose, "t")
    assert key is not None and key[10:] == b"\x0e"  # 7 as an Avro int, after the framing


def test_zero_dates_in_a_key_are_distinct_keys_below_every_real_date(tmp_path: Path) -> None:
    """Found by tests/test_native_fuzz.py in CI: a TIMESTAMP in a primary key holding a zero date
    (legal without NO_ZERO_DATE; legacy tables have them). Its value is null; its key field has
    none, and the generated key encoder raised TypeError, which stopped the run."""
    keyed = table("CREATE TABLE t (d DATE NOT NULL, at DATETIME(6) NOT NULL, n INT, PRIMARY KEY (d, at))", "shop")
    encoder = MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming())
    # plain numbers: fastavro's date and timestamp types end at 0001-01-01 (Java's and Spark's do not)
    schema = json.loads(json.dumps(key_schema(keyed)).replace('"logicalType"', '"plainType"'))
    keys: dict[tuple[str, str], Any] = {}
    for d, at in [("0000-00-00", "0000-00-00 00:00:00"), ("2024-00-15", "0000-00-00 00:00:00"),
                  ("2024-01-00", "0000-00-00 00:00:00.000001"), ("0000-00-00", "2024-02-00 23:59:59"),
                  ("0001-01-01", "0001-01-01 00:00:00"), ("1970-01-01", "1970-01-01 00:00:00")]:  # fmt: skip
        key, value = encoder.row(message({"d": d, "at": at, "n": "1"}), keyed, "t")
        assert key is not None
        keys[(d, at)] = fastavro.schemaless_reader(io.BytesIO(key[10:]), schema, None)
        record: Any = fastavro.schemaless_reader(io.BytesIO(value[10:]), value_schema(keyed, 1), None)
        data = record["data"][0]
        assert (data["d"] is None) == (d[5:7] == "00" or d[8:] == "00")  # the value's zero date is null
    assert len({(k["d"], k["at"]) for k in keys.values()}) == len(keys)  # distinct zero dates: distinct keys
    first = (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days
    assert keys[("0001-01-01", "0001-01-01 00:00:00")]["d"] == first
    assert keys[("1970-01-01", "1970-01-01 00:00:00")]["d"] == 0
    assert all(k["d"] < first for (d, _), k in keys.items() if "-00" in d)
    assert all(k["at"] < first * 86_400_000_000 for (_, at), k in keys.items() if "-00" in at)
    # Sluice's own reader (sluice consume, the oversize report) gives such a key as its numbers
    key, _ = encoder.row(message({"d": "0000-00-00", "at": "1970-01-02 00:00:00", "n": None}), keyed, "t")
    assert key is not None and MessageReader(encoder.directory).read(key)[1] == {"d": -719_163, "at": 86_400_000_000}


def test_zero_date_key_numbers() -> None:
    assert zero_date_key("0000-00-00", "date") == -719_163
    assert zero_date_key("0000-00-01", "date") == -719_164
    assert zero_date_key("0000-01-00", "date") == -719_163 - 32
    day = 86_400_000_000
    assert zero_date_key("0000-00-00 00:00:01.5", "timestamp") == -719_163 * day + 1_500_000
    assert zero_date_key("9999-12-00 23:59:59.999999", "datetime") > -(2**63)


def test_old_rows_read_with_a_newer_schema_get_the_new_columns_default(tmp_path: Path) -> None:
    old, new = (
        table("CREATE TABLE t (id INT PRIMARY KEY)", "shop"),
        table("CREATE TABLE t (id INT PRIMARY KEY, r VARCHAR(3) NOT NULL DEFAULT 'eu', n INT)", "shop"),
    )
    assert backward_compatible(old, new).backward
    encoder = MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming())
    _, value = encoder.row({**message({"id": "1"}), "pkNames": ["id"]}, old, "t")
    record: Any = fastavro.schemaless_reader(io.BytesIO(value[10:]), value_schema(old, 1), value_schema(new, 2))
    assert record["data"][0] == {"id": 1, "r": "eu", "n": None}


def test_values_that_do_not_fit_name_the_column(tmp_path: Path) -> None:
    encoder = MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming())
    with pytest.raises(EncodingError, match=r"`shop`.`t`.`i`: 'abc' does not fit int"):
        encoder.row(message({**ROW, "i": "abc"}), SHOP, "t")
    with pytest.raises(UnreadableMessageError):
        MessageReader(SchemaDirectory(tmp_path)).read(b"\xc3\x01" + bytes(8) + b"\x00")


def test_zero_dates_are_null(tmp_path: Path) -> None:
    encoder = MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming())
    _, value = encoder.row(message({**ROW, "day": "0000-00-00", "at": "0000-00-00 00:00:00"}), SHOP, "t")
    row = MessageReader(SchemaDirectory(tmp_path)).read(value)[1]["data"][0]
    assert row["day"] is None and row["at"] is None


@pytest.mark.parametrize(
    "text",
    ["2024-05-06 07:08:09.123456", "2024-05-06 07:08:09", "2024-05-06 07:08:09.1", "1000-01-01 00:00:00.001",
     "9999-12-31 23:59:59.999999", "1969-12-31 23:59:59.5", "2024-05-06"],
)  # fmt: skip
def test_datetime_texts_become_epoch_micros(text: str) -> None:
    moment = dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    expected = (moment - epoch) // dt.timedelta(microseconds=1)
    assert converter(SHOP.columns[7])(text) == expected  # `at DATETIME(6)`


def test_zero_datetimes_have_no_epoch_micros() -> None:
    assert converter(SHOP.columns[7])("0000-00-00 00:00:00") is None
    assert converter(SHOP.columns[7])("2024-00-06 07:08:09") is None


def test_bit64_is_a_decimal_so_values_past_2_63_stay_valid_avro(tmp_path: Path) -> None:
    """A `long` cannot hold BIT(64)'s 2^64 - 1 (Java readers refuse the longer varint)."""
    bits = table("CREATE TABLE t (id INT PRIMARY KEY, b64 BIT(64), b63 BIT(63), b BIT)", "shop")
    schema = value_schema(bits, 1)
    types = {f["name"]: f["type"] for f in schema["fields"][10]["type"][1]["items"]["fields"]}
    assert types["b64"] == ["null", {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0}]
    assert types["b63"] == ["null", "long"] and types["b"] == ["null", "long"]
    encoder = MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming())
    row = {"id": "1", "b64": str(2**64 - 1), "b63": str(2**63 - 1), "b": "1"}
    _, value = encoder.row({**message(row), "pkNames": ["id"]}, bits, "t")
    record = MessageReader(SchemaDirectory(tmp_path)).read(value)[1]
    assert record["data"][0]["b64"] == Decimal(2**64 - 1) and record["data"][0]["b63"] == 2**63 - 1


def versions(*statements: str, db: str = "shop") -> list[Table]:
    """The table after each statement (the schema history's definitions, with earlier names)."""
    schema, out = Schema(), []
    for sql in statements:
        apply_ddl(schema, sql, db)
        out.append(next(iter(schema.tables.values())))
    return out


def fields_by_name(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in row_fields(schema)}


RENAMES = (
    "CREATE TABLE t (id INT PRIMARY KEY, `first name` VARCHAR(20) NOT NULL, n INT)",
    "ALTER TABLE t RENAME COLUMN `first name` TO full_name",
    "ALTER TABLE t CHANGE full_name display VARCHAR(60) NOT NULL, RENAME COLUMN id TO pid",
)


def test_renamed_fields_carry_their_earlier_names_as_aliases() -> None:
    v1, _, v3 = versions(*RENAMES)
    fields = fields_by_name(value_schema(v3, 3))
    assert fields["display"]["aliases"] == ["full_name", "first_name"]  # Avro names, as field names are made
    assert fields["pid"]["aliases"] == ["id"] and "aliases" not in fields["n"]
    key = key_schema(v3)
    assert key is not None and key["fields"][0]["name"] == "pid" and key["fields"][0]["aliases"] == ["id"]
    # Aliases are not in the parsing canonical form: the fingerprint is the layout's.
    assert fingerprint_of(value_schema(v3, 3)) == fingerprint_of(value_schema(without_aliases(v3), 3))
    assert backward_compatible(v1, v3).backward  # NOT NULL without default, yet read by alias
    assert not backward_compatible(v1, without_aliases(v3)).backward
    # An alias that is another field's name now (or two fields' alias) would mix columns: left out.
    clash = Table("shop", "t", (Column("a", "int", aliases=("b", "x-y")), Column("b", "int"),
                                Column("c", "int", aliases=("x_y", "z"))))  # fmt: skip
    assert [f.get("aliases") for f in fields_by_name(value_schema(clash, 1)).values()] == [None, None, ["z"]]


def test_the_directory_carries_aliases_forward_and_records_renames(tmp_path: Path) -> None:
    v1, v2 = versions(*RENAMES[:2])
    directory = SchemaDirectory(tmp_path)
    assert [directory.version_of(t).version for t in (v1, v2)] == [1, 2]
    assert directory.version_of(without_aliases(v2)).version == 2  # re-read from the server: no new version
    # A rename after a re-read: the history knows one earlier name, the directory the rest.
    after_refresh = versions("CREATE TABLE t (id INT PRIMARY KEY, full_name VARCHAR(20) NOT NULL, n INT)",
                             RENAMES[2])[1]  # fmt: skip
    assert [c.aliases for c in after_refresh.columns] == [("id",), ("full_name",), ()]
    v3 = directory.version_of(after_refresh)
    assert fields_by_name(v3.value)["display"]["aliases"] == ["full_name", "first_name"]
    back = versions(*RENAMES, "ALTER TABLE t CHANGE display `first name` VARCHAR(20) NOT NULL, RENAME COLUMN pid TO id")
    v4 = directory.version_of(back[3])  # v1's layout, but readers must find v2's and v3's data: a new version
    assert v4.version == 4 and fields_by_name(v4.value)["first_name"]["aliases"] == ["display", "full_name"]
    assert v4.value_fingerprint == directory.version_of(v1).value_fingerprint
    assert SchemaDirectory(tmp_path).version_of(v1).version == 4  # v1's layout, newest aliases
    index = json.loads((tmp_path / "index.json").read_text())
    entries = index["tables"]["shop.t"]
    assert [e["renamed"] for e in entries] == [{}, {"full_name": "first name"}, {"display": "full_name", "pid": "id"},
                                               {"first name": "display", "id": "pid"}]  # fmt: skip
    assert index["fingerprints"][v4.value_fingerprint.hex()] == "shop/t/v4.avsc"  # the newest aliases
    assert directory.latest_schema("shop", "t") == v4.value
    assert directory.schema_by_fingerprint(v4.value_fingerprint) == v4.value


def test_no_alias_where_a_version_had_both_names(tmp_path: Path) -> None:
    """DROP b, RENAME a TO b: v1 data has an `a` and a `b`; aliasing `b` to `a` would read v1's `a` as `b`
    and find `b` twice. The rename is in the index, not in aliases."""
    tables = versions("CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT)", "ALTER TABLE t DROP COLUMN b",
                      "ALTER TABLE t RENAME COLUMN a TO b")  # fmt: skip
    directory = SchemaDirectory(tmp_path)
    found = [directory.version_of(t) for t in tables]
    assert [v.version for v in found] == [1, 2, 3] and "aliases" not in fields_by_name(found[2].value)["b"]
    assert json.loads((tmp_path / "index.json").read_text())["tables"]["shop.t"][2]["renamed"] == {"b": "a"}
    assert directory.version_of(tables[2]).version == 3 and SchemaDirectory(tmp_path).version_of(tables[2]).version == 3


@pytest.mark.parametrize("framing", ["single-object", "registry"])
def test_messages_from_before_each_rename_read_with_the_newest_schema(tmp_path: Path, framing: str) -> None:
    v1, v2, v3 = versions(*RENAMES)
    encoder = MessageEncoder(SchemaDirectory(tmp_path), ConfluentFraming("mock://renames") if framing == "registry"
                             else SingleObjectFraming())  # fmt: skip
    written = [
        encoder.row({**message({"id": "1", "first name": "ann", "n": "5"}), "pkNames": ["id"]}, v1, "cdc.shop.t"),
        encoder.row({**message({"id": "2", "full_name": "bö", "n": None}, "UPDATE",
                               {"id": "2", "full_name": "bo", "n": None}), "pkNames": ["id"]}, v2, "cdc.shop.t"),
        encoder.row({**message({"pid": "3", "display": "çé", "n": "1"}), "pkNames": ["pid"]}, v3, "cdc.shop.t"),
    ]  # fmt: skip
    reader = MessageReader(SchemaDirectory(tmp_path), getattr(encoder.framing, "client", None))
    newest = reader.latest("shop", "t")
    assert newest["sluice.version"] == 3
    rows = []
    for _, value in written:
        schema, record = reader.read_newest(value)
        assert schema == newest and record == reader.read(value, newest)[1]
        rows += record["data"] + (record["old"] or [])
    assert rows == [{"pid": 1, "display": "ann", "n": 5}, {"pid": 2, "display": "bö", "n": None},
                    {"pid": 2, "display": "bo", "n": None}, {"pid": 3, "display": "çé", "n": 1}]  # fmt: skip
    newest_key = json.loads((tmp_path / "shop" / "t" / "v3.key.avsc").read_text())
    assert [reader.read(key, newest_key)[1] for key, _ in written if key is not None] == [{"pid": 1}, {"pid": 2},
                                                                                          {"pid": 3}]  # fmt: skip


def test_a_long_running_reader_sees_each_version_a_connector_adds(tmp_path: Path) -> None:
    """The reader keeps each table's newest schema between messages (`sluice consume` read the
    index once per message), and drops it when a connector writes the index again."""
    v1, v2, v3 = versions(*RENAMES)
    encoder = MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming())
    _, first = encoder.row({**message({"id": "1", "first name": "ann", "n": "5"}), "pkNames": ["id"]}, v1, "t")
    reader = MessageReader(SchemaDirectory(tmp_path))
    assert reader.read_newest(first)[1]["data"] == [{"id": 1, "first_name": "ann", "n": 5}]
    for number, version, row in ((2, v2, {"id": 1, "full_name": "ann", "n": 5}),
                                 (3, v3, {"pid": 1, "display": "ann", "n": 5})):  # fmt: skip
        SchemaDirectory(tmp_path).version_of(version)  # a connector (another process) adds the version
        schema, record = reader.read_newest(first)
        assert schema["sluice.version"] == number and record["data"] == [row]
        assert reader.latest("shop", "t") is schema  # kept, not read again, while the index stands


def test_a_value_the_newest_version_cannot_read_comes_as_written(tmp_path: Path) -> None:
    old, new = (
        table("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(5))", "shop"),
        table("CREATE TABLE t (id INT PRIMARY KEY, a INT)", "shop"),
    )
    encoder = MessageEncoder(SchemaDirectory(tmp_path), SingleObjectFraming())
    _, value = encoder.row({**message({"id": "1", "a": "x"}), "pkNames": ["id"]}, old, "t")
    encoder.row({**message({"id": "1", "a": "3"}), "pkNames": ["id"]}, new, "t")  # string -> int: not backward
    schema, record = MessageReader(SchemaDirectory(tmp_path)).read_newest(value)
    assert schema["sluice.version"] == 1 and record["data"] == [{"id": 1, "a": "x"}]


def test_registry_framing_registers_a_version_that_differs_only_in_aliases() -> None:
    # Aliases are not in Avro's canonical form: both schemas have one fingerprint, yet a registry
    # reader taking the subject's latest schema needs the one with the aliases.
    framing = ConfluentFraming(f"mock://aliases-{uuid.uuid4().hex[:6]}")
    plain = {"type": "record", "name": "t_row", "fields": [{"name": "b", "type": "long"}]}
    aliased = {"type": "record", "name": "t_row", "fields": [{"name": "b", "type": "long", "aliases": ["a"]}]}
    assert fingerprint_of(plain) == fingerprint_of(aliased)
    first = framing.prefix(plain, fingerprint_of(plain), "cdc.db.t", "value")
    second = framing.prefix(aliased, fingerprint_of(aliased), "cdc.db.t", "value")
    assert first != second
    latest = framing.client.get_latest_version("cdc.db.t-value")
    assert json.loads(latest.schema.schema_str or "{}")["fields"][0]["aliases"] == ["a"]
    assert framing.encode(aliased, fingerprint_of(aliased), "cdc.db.t", "value", {"b": 1})[:5] == second


def test_a_schema_directory_belongs_to_one_connector(tmp_path: Path) -> None:
    SchemaDirectory(tmp_path).claim("orders-eu")
    SchemaDirectory(tmp_path).claim("orders-eu")  # its own again: a restart
    with pytest.raises(ConfigError, match=r"holds connector 'orders-eu'.*give connector 'orders-us' a directory"):
        SchemaDirectory(tmp_path).claim("orders-us")


def test_the_newest_schema_is_the_table_s_current_version_not_its_last(tmp_path: Path) -> None:
    """ADD COLUMN then DROP COLUMN (or a table renamed onto the name) brings an earlier layout
    back, which takes its version again: the newest schema readers read every message in is the
    version current at the newest position a connector reached, which a replay of older
    positions (a restart) does not move back."""
    directory = SchemaDirectory(tmp_path)
    first = table("CREATE TABLE t (id INT PRIMARY KEY)", "d")
    added = table("CREATE TABLE t (id INT PRIMARY KEY, c INT)", "d")

    def fields() -> list[str]:
        return list(fields_by_name(directory.latest_schema("d", "t")))

    directory.set_current([first], Position("bin.000001", 4))
    directory.set_current([added], Position("bin.000001", 100))
    assert fields() == ["id", "c"]
    directory.set_current([first], Position("bin.000002", 50))  # the layout of v1 again
    assert fields() == ["id"] and directory.version_of(first).version == 1
    directory.set_current([added], Position("bin.000001", 100))  # a replay after a restart
    assert fields() == ["id"]
    assert SchemaDirectory(tmp_path).latest_schema("d", "t")["sluice.version"] == 1  # another reader
