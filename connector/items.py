"""What the binlog stream hands the pipeline, in order:
  - `Changes`: the flat messages of one rows event (or one DDL statement);
  - `Commit`: the end of a transaction, with the position to resume from after it;
  - `Heartbeat`: a position between transactions (server heartbeats, binlog rotation);
  - `Burst`: the compiled kernel's run of whole transactions (connector/lane.py).
Consumers treat changes as durable only once their `Commit` arrives."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from connector.flat import FlatMessage, RowBatch
from connector.position import Position
from connector.schema.model import Table
from connector.sink.partitioning import Plain, Tail


@dataclass(frozen=True, slots=True)
class Changes:
    messages: Sequence[FlatMessage]
    file: str
    pos: int  # the position of the event the messages come from
    table: Table | None = None  # the rows' table definition at this position; None for statements
    batch: RowBatch | None = None  # a rows event's decoded rows, which `messages` renders


@dataclass(frozen=True, slots=True)
class Commit:
    position: Position  # resume here: the event after this transaction
    gtid: str | None
    rows: int  # row changes handed on in this transaction (filtered tables not counted)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    position: Position


@dataclass(frozen=True, slots=True)
class Burst:
    """What one kernel run made: messages by topic, ready for Kafka, and the last transaction end."""

    file: str
    topics: list[tuple[str, list[Plain], list[Tail], int]]  # topic, plain, tails, messages (route's shapes)
    rows: list[tuple[str, str, str, int]]  # database, table, type, count
    events: list[tuple[int, int]]  # (event type, count)
    bytes: int
    last_event: tuple[int, int] | None  # (timestamp, log_pos) of the last event read
    position: Position | None  # where the last transaction it committed ends
    transactions: int
    handed: int | None  # the last rows event handed on in a transaction it left open
    # With transaction records on, each transaction's part of the burst, in order: its GTID (None
    # without one), its first change's position, whether it committed here, messages by table.
    parts: list[tuple[str | None, int, bool, list[tuple[str, str, int]]]] = field(default_factory=list)


StreamItem = Changes | Commit | Heartbeat | Burst
