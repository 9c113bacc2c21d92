"""What a QUERY event's text says of transactions: the one reading of BEGIN, COMMIT, ROLLBACK,
savepoints and XA that the assembler, the flat-message builder and the kernel's lane share.

The servers write these texts themselves (sql/log_event.cc, sql/xa.cc; MariaDB's log_event_server.cc):
`BEGIN`, `COMMIT` and `ROLLBACK` bare; `XA START|END|COMMIT|ROLLBACK <xid>`; `SAVEPOINT` and
`ROLLBACK TO` with a name. Any other text that begins as transaction control (`COMMIT WORK`, `XA
PREPARE`, `RELEASE SAVEPOINT`) is control within a transaction: never a statement to publish.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Txn(enum.Enum):
    BEGIN = "BEGIN"  # a transaction opens (BEGIN, XA START)
    END = "END"  # the open transaction ends (COMMIT, ROLLBACK)
    DECIDED = "DECIDED"  # a prepared XA transaction is committed or rolled back
    INSIDE = "INSIDE"  # within a transaction: SAVEPOINT, ROLLBACK TO, XA END and the like


@dataclass(frozen=True, slots=True)
class Control:
    txn: Txn
    xa: bool = False  # XA START, END or a decision
    commit: bool = False  # DECIDED: XA COMMIT (else XA ROLLBACK)
    xid: str = ""  # DECIDED: the xid's text as logged


BEGIN = Control(Txn.BEGIN)
_END = Control(Txn.END)
_CONTROL = re.compile(r"\s*(?:BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE\s+SAVEPOINT|XA\s)", re.IGNORECASE)
_XA_DECISION = re.compile(r"XA\s+(COMMIT|ROLLBACK)\s+(.*?)\s*;?\s*$", re.IGNORECASE | re.DOTALL)


def control(sql: str) -> Control | None:
    """The query's meaning for transactions; None for a statement (DDL and the like)."""
    if sql == "BEGIN":  # every transaction's: before any other look
        return BEGIN
    if _CONTROL.match(sql) is None:
        return None
    text = sql.strip()
    upper = text[:16].upper()
    if upper == "BEGIN":
        return BEGIN
    if upper in ("COMMIT", "ROLLBACK"):
        return _END
    if not upper.startswith("XA "):
        return Control(Txn.INSIDE)
    if upper.startswith("XA START"):
        return Control(Txn.BEGIN, xa=True)
    if (decision := _XA_DECISION.match(text)) is not None:
        return Control(Txn.DECIDED, xa=True, commit=decision[1].upper() == "COMMIT", xid=decision[2])
    return Control(Txn.INSIDE, xa=True)
