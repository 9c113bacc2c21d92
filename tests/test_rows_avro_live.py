"""The rows path on the live servers: Avro encoded straight from decoded row images (text or
typed) is byte for byte what the flat-message path writes, for every column type, operation
and table shape."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from connector.avro.encoding import MessageEncoder
from connector.avro.framing import ConfluentFraming, SingleObjectFraming
from connector.avro.registry import SchemaDirectory
from connector.binlog.constants import RowsKind
from connector.config import SnapshotSection
from connector.items import Changes
from connector.startup import prepare
from connector.stream import ChangeStream, StreamOptions
from tests.support.live import fresh_database, live_config
from tests.support.typed import TYPED_DB, typed_columns, typed_workload

pytestmark = pytest.mark.live


@pytest.mark.parametrize(
    ("typed", "registry"),
    [(False, False), (True, False), (True, True)],
    ids=["text images", "typed images", "typed images, registry framing"],
)
def test_rows_encode_as_their_flat_messages_do(tmp_path: Path, typed: bool, registry: bool) -> None:
    fresh_database(TYPED_DB)
    config = replace(live_config([rf"{TYPED_DB}\..*"]), snapshot=SnapshotSection(mode="never"))
    prepared = prepare(config)
    typed_workload(random.Random(11))
    # Registry framing: the message path goes through confluent-kafka's AvroSerializer and
    # the mock registry; the rows path must register and frame exactly as it does.
    framing = ConfluentFraming(f"mock://rows-{tmp_path.name}") if registry else SingleObjectFraming()
    encoder = MessageEncoder(SchemaDirectory(tmp_path), framing)
    stream = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter(),
                          options=StreamOptions(typed_rows=typed))  # fmt: skip
    taken: dict[str, int] = {}
    refused = []
    zero_keys = []
    for item in stream.items(prepared.start, blocking=False):
        if not isinstance(item, Changes) or item.batch is None:
            continue
        assert item.table is not None
        # Typed: DATE, DATETIME, TIMESTAMP and DECIMAL come as numbers; none here has a text
        # that would differ (NotTyped), so every event has them.
        assert (item.batch.rows.typed_images() is not None) == typed
        topic = f"cdc.{TYPED_DB}.{item.table.name}"
        encoded = encoder.rows(item.batch, item.table, topic)  # first: it registers on its own
        expected = [encoder.row(m, item.table, topic) for m in item.batch.messages()]
        if item.table.name == "zeros":
            zero_keys += [key for key, _ in expected]
        if encoded is None:
            refused.append((item.table.name, item.batch.rows.kind, len(item.batch.rows.present)))
            continue
        assert encoded == expected, (item.table.name, item.file, item.pos)
        kind = f"{item.table.name} {item.batch.rows.kind.name}"
        taken[kind] = taken.get(kind, 0) + len(encoded)
    # Every table and operation went the rows path; what did not is exactly the key changes
    # and the MINIMAL images.
    for table in ("t", "keyless", "pair", "defaults"):
        for kind in ("WRITE", "UPDATE", "DELETE"):
            if (table, kind) != ("defaults", "DELETE"):
                assert taken.get(f"{table} {kind}"), f"{table} {kind}: {taken}"
    assert taken["t WRITE"] == 60 and taken["t DELETE"] == 12
    width = len(typed_columns()) + 1
    assert sorted(refused) == sorted(
        [("t", RowsKind.UPDATE, width), ("pair", RowsKind.UPDATE, 3), ("t", RowsKind.UPDATE, 1),
         ("t", RowsKind.DELETE, 1), ("zeros", RowsKind.WRITE, 3)]
    )  # fmt: skip
    assert len(set(zero_keys)) == 3 and None not in zero_keys
