"""connector/control.py: the one reading of transaction-control texts, as the servers log them."""

from __future__ import annotations

import pytest

from connector.control import BEGIN, Control, Txn, control

# (the query's text as a QUERY event carries it, what it means); None: a statement.
CASES = [
    ("BEGIN", BEGIN),
    ("  begin ", BEGIN),
    ("COMMIT", Control(Txn.END)),
    ("ROLLBACK", Control(Txn.END)),
    ("XA START X'7831',X'',1", Control(Txn.BEGIN, xa=True)),
    ("XA END X'7831',X'',1", Control(Txn.INSIDE, xa=True)),
    ("XA COMMIT X'7831',X'',1", Control(Txn.DECIDED, xa=True, commit=True, xid="X'7831',X'',1")),
    ("xa rollback 'x1' ;", Control(Txn.DECIDED, xa=True, commit=False, xid="'x1'")),
    ("XA COMMIT X'7831',X'',1 ONE PHASE", Control(Txn.DECIDED, xa=True, commit=True, xid="X'7831',X'',1 ONE PHASE")),
    ("SAVEPOINT `s1`", Control(Txn.INSIDE)),
    ("ROLLBACK TO `s1`", Control(Txn.INSIDE)),
    ("RELEASE SAVEPOINT s1", Control(Txn.INSIDE)),
    ("COMMIT WORK", Control(Txn.INSIDE)),  # not as the servers log an end: never published either
    ("XA\tEND 'x'", Control(Txn.INSIDE)),  # XA and a tab: control, but not read as XA's
    ("CREATE TABLE t (id INT)", None),
    ("BEGINNING", Control(Txn.INSIDE)),  # the prefix is control's, as flat.py read it: no statement begins so
    ("INSERT INTO t VALUES (1)", None),
    ("/* comment */ COMMIT", None),
    ("", None),
]


@pytest.mark.parametrize(("sql", "meaning"), CASES)
def test_each_text_means_what_all_three_readers_act_on(sql: str, meaning: Control | None) -> None:
    assert control(sql) == meaning


def test_a_bare_begin_is_the_one_value_the_lane_compares_by_identity() -> None:
    """The lane teaches the kernel a BEGIN's shape where `control(text) is BEGIN`: an XA START must not."""
    assert control("BEGIN") is BEGIN and control(" Begin") is BEGIN
    assert control("XA START 'x'") is not BEGIN
