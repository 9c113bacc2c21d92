"""Schema facts that must be the server's exactly: TIMESTAMP DEFAULTs as instants, whatever zone
the statement's session ran in (connector/schema/zones.py), and ENUM/SET labels where SHOW CREATE
TABLE printed '?' for characters outside the BMP (connector/schema/labels.py). The live side is
tests/test_exact_values_live.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from connector.binlog.constants import ColumnType as T
from connector.binlog.tablemap import ColumnMeta, TableMapEvent
from connector.filters import TableFilter
from connector.position import Position
from connector.schema.ddl import read_ddl
from connector.schema.history import MemoryHistoryStore
from connector.schema.labels import ambiguous, repaired, with_labels
from connector.schema.model import Column, Schema, Table
from connector.schema.sqltokens import Session
from connector.schema.tracker import SchemaTracker
from connector.schema.types import as_printed
from connector.schema.zones import timestamp_in_utc


@pytest.mark.parametrize(
    ("literal", "zone", "utc"),
    [
        ("2020-06-01 12:00:00", "+09:00", "2020-06-01 03:00:00"),
        ("2020-06-01 02:00:00.25", "+09:00", "2020-05-31 17:00:00.25"),
        ("2020-06-01 12:00:00", "-05:30", "2020-06-01 17:30:00"),
        ("2020-06-01 12:00:00", "+00:00", "2020-06-01 12:00:00"),
        ("2020-06-01 12:00:00", None, "2020-06-01 12:00:00"),
        ("20200601120000", "+01:00", "2020-06-01 11:00:00"),
        ("2020-6-1 9:05:00", "+1:00", "2020-06-01 08:05:00"),
        ("0000-00-00 00:00:00", "+09:00", "0000-00-00 00:00:00"),  # no instant: kept
        ("2020-00-10 00:00:00", "+09:00", "2020-00-10 00:00:00"),
        ("2020-06-01 12:00:00", "Europe/Berlin", "2020-06-01 10:00:00"),  # the tz database, summer time
        ("2020-01-01 12:00:00", "Europe/Berlin", "2020-01-01 11:00:00"),
    ],
)
def test_a_timestamp_literal_is_read_in_its_sessions_zone(literal: str, zone: str | None, utc: str) -> None:
    assert timestamp_in_utc(literal, zone) == utc


def test_named_and_system_zones_are_the_servers_to_convert() -> None:
    asked: list[tuple[str, str]] = []

    def server(literal: str, zone: str) -> str:
        asked.append((literal, zone))
        return "2020-06-01 04:00:00"

    assert timestamp_in_utc("2020-06-01 12:00:00.5", "SYSTEM", server) == "2020-06-01 04:00:00.5"
    assert timestamp_in_utc("2020-06-01 12:00:00", "Asia/Shanghai", server) == "2020-06-01 04:00:00"
    assert timestamp_in_utc("2020-06-01 12:00:00", "+08:00", server) == "2020-06-01 04:00:00"
    assert asked == [("2020-06-01 12:00:00", "SYSTEM"), ("2020-06-01 12:00:00", "Asia/Shanghai")]


def _defaults(sql: str, zone: str | None, schema: Schema | None = None) -> dict[str, str | None]:
    schema = schema or Schema()
    result = read_ddl(schema, sql, "d", Session(time_zone=zone))
    assert isinstance(result, list), result
    table = next(iter(schema.tables.values()))
    return {c.name: c.default for c in table.columns}


def test_ddl_keeps_timestamp_defaults_in_utc_and_datetimes_as_written() -> None:
    sql = ("CREATE TABLE t (id INT PRIMARY KEY, ts TIMESTAMP NULL DEFAULT '2020-06-01 12:00:00', "
           "dt DATETIME DEFAULT '2020-06-01 12:00:00', t3 TIMESTAMP(3) NOT NULL DEFAULT '2020-06-01 00:30:00.125')")
    assert _defaults(sql, "+09:00") == {"id": None, "ts": "2020-06-01 03:00:00", "dt": "2020-06-01 12:00:00",
                                        "t3": "2020-05-31 15:30:00.125"}  # fmt: skip
    assert _defaults(sql, None)["ts"] == "2020-06-01 12:00:00"


def test_alter_set_default_of_a_timestamp_is_read_in_the_sessions_zone() -> None:
    schema = Schema()
    read_ddl(schema, "CREATE TABLE t (id INT PRIMARY KEY, ts TIMESTAMP NULL, dt DATETIME)", "d")
    sql = "ALTER TABLE t ALTER COLUMN ts SET DEFAULT '2020-06-01 12:00:00', ALTER COLUMN dt SET DEFAULT '2020-06-01'"
    assert _defaults(sql, "+02:00", schema) == {"id": None, "ts": "2020-06-01 10:00:00", "dt": "2020-06-01"}
    add = "ALTER TABLE t ADD COLUMN t2 TIMESTAMP NULL DEFAULT '2020-06-01 12:00:00'"
    assert _defaults(add, "-01:00", schema)["t2"] == "2020-06-01 13:00:00"


# -- ENUM/SET labels ---------------------------------------------------------------------------

START = Position("bin.000001", 4)
_PRINTED = Column("e", "enum", ("a?", "b", "c?"), charset="utf8mb4", default="a?")
_SET = Column("s", "set", ("x", "?y"), charset="utf8mb4", default="x,?y")


def _meta(index: int, enum: tuple[str, ...] | None = None, sets: tuple[str, ...] | None = None) -> ColumnMeta:
    kind = T.MYSQL_TYPE_ENUM if enum is not None else T.MYSQL_TYPE_SET if sets is not None else T.MYSQL_TYPE_LONG
    return ColumnMeta(index, T.MYSQL_TYPE_STRING, kind, 0, True, enum_values=enum, set_values=sets)


def _table(*columns: Column) -> Table:
    return Table("d", "t", (Column("id", "int", nullable=False), *columns), ("id",), "utf8mb4")


def _map(*columns: ColumnMeta) -> TableMapEvent:
    return TableMapEvent(1, 0, "d", "t", (_meta(0), *columns), (0,), (), True, b"map")


def test_a_question_mark_is_ambiguous_only_where_the_charset_has_characters_beyond_the_bmp() -> None:
    assert ambiguous(_PRINTED) and ambiguous(_SET)
    assert not ambiguous(replace(_PRINTED, charset="utf8mb3"))
    assert not ambiguous(replace(_PRINTED, charset="latin1"))
    assert not ambiguous(replace(_PRINTED, params=("a", "b")))
    assert as_printed("a😀b\u00e9") == "a?b\u00e9"


def test_exact_labels_carry_a_default_naming_the_printed_ones() -> None:
    assert with_labels(_PRINTED, ("a😀", "b", "c?")).default == "a😀"
    assert with_labels(_SET, ("x", "😀y")).default == "x,😀y"


def test_a_full_table_map_repairs_printed_labels_and_nothing_else() -> None:
    table = _table(_PRINTED, _SET)
    exact = repaired(table, _map(_meta(1, enum=("a😀", "b", "c?")), _meta(2, sets=("x", "😀y"))))
    assert exact is not None
    assert [c.params for c in exact.columns[1:]] == [("a😀", "b", "c?"), ("x", "😀y")]
    assert exact.columns[1].default == "a😀"
    # The TABLE_MAP's labels are not what SHOW CREATE TABLE would print of them: not the same labels
    assert repaired(table, _map(_meta(1, enum=("a😀", "b", "d😀")), _meta(2, sets=("x", "?y")))) is None
    assert repaired(table, _map(_meta(1), _meta(2))) is None  # MINIMAL: no labels logged
    assert repaired(_table(replace(_PRINTED, params=("a", "b"))), _map(_meta(1, enum=("a", "b")))) is None


def test_the_tracker_takes_and_records_labels_a_table_map_gives() -> None:
    store = MemoryHistoryStore()
    tracker = SchemaTracker(store, TableFilter.of(None, None), source="bin.000001")
    schema = Schema()
    schema.put(_table(_PRINTED))
    tracker.seed(schema, START)
    named = tracker.table_hook(_map(_meta(1, enum=("a😀", "b", "c?"))), 500)
    assert named is not None and named.columns[1].enum_values == ("a😀", "b", "c?")
    assert tracker.schema.tables[("d", "t")].columns[1].params == ("a😀", "b", "c?")
    labels = [r for r in store.load() if r.kind == "labels"]
    assert len(labels) == 1 and labels[0].position.pos == 500
    # A restart from before the TABLE_MAP replays it: the same record is not written twice
    again = SchemaTracker(store, TableFilter.of(None, None), source="bin.000001")
    assert again.restore(START)
    again.table_hook(_map(_meta(1, enum=("a😀", "b", "c?"))), 500)
    assert len([r for r in store.load() if r.kind == "labels"]) == 1

