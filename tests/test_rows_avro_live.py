"""The rows path on the live servers: Avro encoded straight from decoded row images (text or
typed) is byte for byte what the flat-message path writes, for every column type, operation
and table shape."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from connector.avro.encoding import ConfluentFraming, MessageEncoder, SingleObjectFraming
from connector.avro.registry import SchemaDirectory
from connector.binlog.constants import RowsKind
from connector.config import SnapshotSection
from connector.startup import prepare
from connector.stream import Changes, ChangeStream
from tests.live import connect, fresh_database, live_config
from tests.test_snapshot_live import create_typed_tables, typed_columns, typed_placeholder

pytestmark = pytest.mark.live

DB = "rowsavro"


def _workload(rng: random.Random) -> None:
    conn = connect(DB)
    with conn.cursor() as cur:
        insert = create_typed_tables(cur)
        cur.execute("CREATE TABLE pair (a INT, b CHAR(3), v DOUBLE, PRIMARY KEY (b, a))")
        cur.execute("CREATE TABLE defaults (id BIGINT UNSIGNED PRIMARY KEY, x INT NULL DEFAULT 5, "
                    "y VARCHAR(5) NOT NULL DEFAULT 'a', z DATETIME NULL DEFAULT '2020-01-01 00:00:00', "
                    "d DECIMAL(6,3) DEFAULT 1.5)")  # fmt: skip
        for start in range(0, 60, 6):  # transactions of several rows events
            cur.execute("BEGIN")
            for key in range(start, start + 6):
                cur.execute(insert, [key] + [None if rng.random() < 0.15 else g(rng) for _, _, g in typed_columns()])
            cur.execute("COMMIT")
        cur.executemany("INSERT INTO keyless VALUES (%s, %s)", [(i % 4, rng.choice(["x", None])) for i in range(20)])
        cur.executemany("INSERT INTO pair VALUES (%s, %s, %s)", [(i, "k" + str(i % 3), i / 7) for i in range(12)])
        cur.executemany("INSERT INTO defaults (id) VALUES (%s)", [(2**64 - 1 - i,) for i in range(5)])
        cur.execute("SET SESSION sql_mode = ''")  # a zero datetime (MySQL's default mode refuses it)
        cur.execute("INSERT INTO defaults VALUES (1, NULL, 'zz', '0000-00-00 00:00:00', -0.001)")
        # zero dates in a key (legacy tables have them): null in the value, a key number each
        cur.execute("CREATE TABLE zeros (d DATE, at DATETIME(3), n INT, PRIMARY KEY (d, at))")
        cur.execute("INSERT INTO zeros VALUES ('0000-00-00', '0000-00-00 00:00:00', 1), "
                    "('2024-00-15', '0000-00-00 00:00:00', 2), ('2024-01-00', '2024-02-00 10:00:00.5', 3)")  # fmt: skip

        for key in rng.sample(range(60), 25):
            name, _, gen = rng.choice(typed_columns())
            value = None if rng.random() < 0.2 else gen(rng)
            cur.execute(f"UPDATE t SET {name} = {typed_placeholder(name)} WHERE id = %s", (value, key))
        cur.execute("UPDATE t SET c_int = c_int DIV 2 WHERE id < 20")  # one event, many rows
        cur.execute("UPDATE t SET id = id + 1000 WHERE id = 7")  # a key change
        cur.execute("UPDATE pair SET v = v * 2 WHERE a < 6")
        cur.execute("UPDATE pair SET a = a + 100 WHERE a = 3")  # a composite key change
        cur.execute("UPDATE keyless SET b = 'y' WHERE a = 1")
        cur.execute("UPDATE defaults SET x = x + 1, z = NULL")
        cur.execute("DELETE FROM t WHERE id % 5 = 0")
        cur.execute("DELETE FROM keyless WHERE a = 2")
        cur.execute("DELETE FROM pair WHERE a > 100")
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute("UPDATE t SET c_tiny = 1 WHERE id = 1")  # an after image of one column
        cur.execute("DELETE FROM t WHERE id = 2")  # a before image of the key only
    conn.close()


@pytest.mark.parametrize(
    ("typed", "registry"),
    [(False, False), (True, False), (True, True)],
    ids=["text images", "typed images", "typed images, registry framing"],
)
def test_rows_encode_as_their_flat_messages_do(tmp_path: Path, typed: bool, registry: bool) -> None:
    fresh_database(DB)
    config = replace(live_config([rf"{DB}\..*"]), snapshot=SnapshotSection(mode="never"))
    prepared = prepare(config)
    _workload(random.Random(11))
    # Registry framing: the message path goes through confluent-kafka's AvroSerializer and
    # the mock registry; the rows path must register and frame exactly as it does.
    framing = ConfluentFraming(f"mock://rows-{tmp_path.name}") if registry else SingleObjectFraming()
    encoder = MessageEncoder(SchemaDirectory(tmp_path), framing)
    stream = ChangeStream(config.source.settings(), prepared.tracker, config.table_filter())
    stream.typed_rows = typed
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
        topic = f"cdc.{DB}.{item.table.name}"
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
