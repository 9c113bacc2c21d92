"""Helpers of the unit tests: tables made from DDL, row messages, the pipeline on its in-memory
twins (`Rig`), a corpus file's stream items, a configuration's required keys."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from connector.assembler import TransactionAssembler
from connector.avro.encoding import MessageEncoder
from connector.avro.framing import SingleObjectFraming
from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.binlog.file import iter_file_events
from connector.binlog.parser import BinlogParser
from connector.checkpoint import Checkpointer
from connector.filters import TableFilter
from connector.items import Changes, StreamItem
from connector.metrics import Metrics
from connector.oversize import OversizePolicy
from connector.pipeline import NO_OPTIONS, Options, Pipeline
from connector.position import Position
from connector.querytext import NO_QUERIES, QueryText
from connector.schema.ddl import apply_ddl
from connector.schema.history import MemoryHistoryStore
from connector.schema.model import Schema, Table
from connector.schema.tracker import SchemaTracker
from connector.sink.partitioning import TopicRouter
from connector.steps import Encoder
from tests.support.corpus import CORPUS
from tests.support.twins import ManualClock, MemoryCheckpointStore, MemorySink

# A table with a column of (nearly) every type, for the Avro tests
TYPES = """CREATE TABLE t (
  id BIGINT UNSIGNED PRIMARY KEY, i INT, iu INT UNSIGNED, amount DECIMAL(30,10) NOT NULL, f FLOAT, d DOUBLE,
  day DATE, at DATETIME(6), ts TIMESTAMP(3) NULL, span TIME(6), y YEAR, b BIT(12), name VARCHAR(20),
  blob_ BLOB, e ENUM('x','y'), s SET('p','q'), j JSON, g POINT, `odd name-é` INT, region VARCHAR(5) DEFAULT 'eu'
)"""


def pos(n: int) -> Position:
    return Position("bin.000001", n, "", 1, 1700000000 + n)


def table(sql: str = "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))", db: str = "db") -> Table:
    """The table `sql` creates in `db`, as replayed DDL makes it."""
    schema = Schema()
    apply_ddl(schema, sql, db)
    return next(iter(schema.tables.values()))


def row(kind: str, id_: int, v: str | None, at: int, old: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "database": "db", "table": "t", "type": kind, "isDdl": False, "pkNames": ["id"], "es": 1, "ts": 2,
        "sql": "", "gtid": None, "data": [{"id": str(id_), "v": v}], "old": [old] if old else None,
        "source": {"file": "bin.000001", "pos": at, "server_id": 1, "row": 0},
    }  # fmt: skip


def changes(*messages: dict[str, Any], t: Table | None = None) -> Changes:
    return Changes(tuple(messages), "bin.000001", messages[0]["source"]["pos"], t or table())


def _avro(directory: SchemaDirectory) -> MessageEncoder:
    return MessageEncoder(directory, SingleObjectFraming())


class Rig:
    def __init__(
        self, tmp: Path, max_in_flight: int = 1000, oversized: str = "fail", sink: MemorySink | None = None,
        encoder: Callable[[SchemaDirectory], Encoder] | None = None, options: Options = NO_OPTIONS,
        metrics: Metrics | None = None,
    ) -> None:  # fmt: skip
        self.sleeps: list[float] = []
        self.on_sleep: Any = self.sleeps.append  # what the pipeline's waits do: tests may replace it
        self.clock = _RigClock(self)  # the one clock of the pipeline, its checkpointer and its sink
        self.sink = sink or MemorySink()
        self.sink.clock = self.clock
        self.stop = threading.Event()
        self.fast, self.durable = MemoryCheckpointStore("redis"), MemoryCheckpointStore("database")
        self.checkpointer = Checkpointer(self.fast, self.durable, 3.0, clock=self.clock)
        self.directory = SchemaDirectory(tmp / "schemas")
        self.pipeline = Pipeline(
            (encoder or _avro)(self.directory), self.sink, TopicRouter("cdc", []),
            self.checkpointer, max_in_flight, self.stop, delivery_timeout_s=300, clock=self.clock,
            oversize=OversizePolicy(oversized, MessageReader(self.directory), "cdc"), options=options,
            metrics=metrics,
        )  # fmt: skip

    @property
    def now(self) -> float:
        """The clock's time: tests move it."""
        return self.clock.at

    @now.setter
    def now(self, at: float) -> None:
        self.clock.at = at

    def run(self, items: list[StreamItem]) -> None:
        self.pipeline.run(items)

    def run_in_time(self, items: list[StreamItem], step_s: float = 0.01) -> None:
        """As `run`, with the clock moving between items (Kafka is polled by time as well as by count)."""

        def moving() -> Iterator[StreamItem]:
            for item in items:
                yield item
                self.now += step_s

        self.pipeline.run(moving())

    def records(self, topic: str = "cdc.db.t") -> list[dict[str, Any]]:
        reader = MessageReader(self.directory)
        return [reader.read(m.value)[1] for m in self.sink.messages(topic) if m.value is not None]


class _RigClock(ManualClock):
    """A wait moves the rig's clock on and goes to its `on_sleep`, looked up at each wait (a
    test sets it after the rig is built)."""

    def __init__(self, rig: Rig) -> None:
        super().__init__()
        self.rig = rig

    def sleep(self, seconds: float) -> None:
        self.at += seconds
        self.rig.on_sleep(seconds)


def assemble(name: str, included: TableFilter | None = None, query: QueryText = NO_QUERIES) -> list[StreamItem]:
    path = CORPUS / name
    included = included or TableFilter.of(None, None)
    tracker = SchemaTracker(MemoryHistoryStore(), included)
    assembler = TransactionAssembler(Position(path.name, 4), tracker, included, mariadb=False, query=query)
    parser = BinlogParser(path.name)
    parser.table_hook = lambda table, pos: table if included(table.schema, table.table) else None
    return [item for event in iter_file_events(str(path), parser=parser) for item in assembler.feed(event)]


REQUIRED = {"source": {"host": "db", "user": "cdc"}, "kafka": {"bootstrap_servers": "kafka:9092"}}


def complete(raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` with the keys every configuration must set, where it does not set them itself."""
    out: dict[str, Any] = {**raw}
    for section, keys in REQUIRED.items():
        if isinstance(out.get(section, {}), dict):
            out[section] = {**keys, **out.get(section, {})}
    return out
