"""What the binlog stream hands the pipeline, in order:
  - `Changes`: the flat messages of one rows event (or one DDL statement);
  - `Commit`: the end of a transaction, with the position to resume from after it;
  - `Heartbeat`: a position between transactions (server heartbeats, binlog rotation);
  - `Burst`: the compiled kernel's run of whole transactions (connector/lane.py).
Consumers treat changes as durable only once their `Commit` arrives."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from connector.flat import FlatMessage, RowBatch
from connector.lane import Burst
from connector.position import Position
from connector.schema.model import Table


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


StreamItem = Changes | Commit | Heartbeat | Burst  # Burst: the compiled kernel's (connector/lane.py)
