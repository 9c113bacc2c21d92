"""The compiled Avro encoder against fastavro, byte for byte, on Sluice's own schemas."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.avro.binary import compile_schema, varint
from connector.avro.schemas import ddl_schema, value_schema
from connector.errors import AvroWriteError
from tests.support.units import TYPES, table

SCHEMA = value_schema(table(TYPES, "shop"), 1)
ROW_FIELDS = SCHEMA["fields"][10]["type"][1]["items"]["fields"]


def values_of(avro_type: Any) -> st.SearchStrategy[Any]:
    if isinstance(avro_type, list):
        other = next(t for t in avro_type if t != "null")
        return st.none() | values_of(other)
    if isinstance(avro_type, dict):
        if avro_type.get("logicalType") == "decimal":
            p, s = avro_type["precision"], avro_type["scale"]
            return st.integers(-(10**p) + 1, 10**p - 1).map(lambda n: Decimal(n).scaleb(-s))
        if avro_type["type"] == "array":
            return st.lists(values_of(avro_type["items"]), max_size=3)
        return values_of(avro_type["type"])
    return {
        "int": st.integers(-(2**31), 2**31 - 1), "long": st.integers(-(2**63), 2**63 - 1),
        "float": st.floats(width=32, allow_nan=False), "double": st.floats(allow_nan=False),
        "string": st.text(max_size=20), "bytes": st.binary(max_size=20), "boolean": st.booleans(),
    }[avro_type]  # fmt: skip


rows = st.fixed_dictionaries({f["name"]: values_of(f["type"]) for f in ROW_FIELDS})


def fastavro_bytes(schema: Any, record: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


@settings(max_examples=300, deadline=None)
@given(data=rows, old=st.none() | rows, kind=st.sampled_from(["INSERT", "UPDATE", "DELETE"]),
       gtid=st.none() | st.text(max_size=10), pos=st.integers(0, 2**40))  # fmt: skip
def test_same_bytes_as_fastavro(data: dict[str, Any], old: dict[str, Any] | None, kind: str, gtid: str | None,
                                pos: int) -> None:  # fmt: skip
    record = {
        "id": pos, "database": "shop", "table": "t", "type": kind, "isDdl": False, "pkNames": ["id"], "es": pos,
        "ts": -pos, "sql": "", "gtid": gtid, "data": [data], "old": None if old is None else [old],
        "source": {"server_id": 1, "file": "f", "pos": pos, "row": 3},
    }  # fmt: skip
    assert compile_schema(SCHEMA)(record) == fastavro_bytes(SCHEMA, record)


def test_ddl_schema_and_varints() -> None:
    source = {"server_id": 1, "file": "f", "pos": 9, "row": 0}
    record = {"id": 1, "database": "d", "table": "", "type": "ALTER", "isDdl": True, "es": 5, "ts": 6,
              "sql": "ALTER TABLE t ADD c INT", "gtid": None, "source": source}  # fmt: skip
    assert compile_schema(ddl_schema())(record) == fastavro_bytes(ddl_schema(), record)
    assert [varint(n) for n in (0, -1, 1, 63, -64, 64, 2**63 - 1)] == [
        b"\x00",
        b"\x01",
        b"\x02",
        b"\x7e",
        b"\x7f",
        b"\x80\x01",
        b"\xfe" + b"\xff" * 8 + b"\x01",
    ]


def test_varints_of_every_length_equal_fastavros() -> None:
    edges = {sign * (2**k + d) for k in range(63) for d in (-1, 0, 1) for sign in (1, -1)} | {2**63 - 1, -(2**63)}
    for n in sorted(edges):
        assert varint(n) == fastavro_bytes("long", n), n
    for outside in (2**63, -(2**63) - 1, 2**64 - 1):  # no Avro long: refused, not written longer
        with pytest.raises(AvroWriteError):
            varint(outside)


def test_decimals_with_more_digits_than_the_scale_are_refused() -> None:
    schema = {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}
    assert compile_schema(schema)(Decimal("-1.5")) == fastavro_bytes(schema, Decimal("-1.50"))
    with pytest.raises(AvroWriteError):
        compile_schema(schema)(Decimal("1.234"))
