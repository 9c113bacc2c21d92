"""Issue 17: what the C code and the Python code share is written once (connector/native_spec.py).

connector/csrc/spec.h is written from the spec; a stale copy fails here. The Python side reads the
same names: the transcoder's column operations and record layouts, the rows kinds, murmur2's and
DECIMAL's tables. The compiled module is held to them by tests/test_transcode.py and tests/test_lane.py."""

from __future__ import annotations

import importlib
import subprocess
import sys

from connector import native_spec
from connector.binlog import rowplan, values
from connector.binlog.constants import RowsKind
from connector.lane import KernelPlan
from connector.native import CanalParts, KernelRun, KernelTransaction, transcoder
from connector.sink import partitioning


def test_the_c_header_is_what_the_spec_writes() -> None:
    assert native_spec.SPEC_H.read_text() == native_spec.header(), "run: python -m connector.native_spec"
    done = subprocess.run([sys.executable, "-m", "connector.native_spec", "--check"], check=False)
    assert done.returncode == 0


def test_the_python_side_reads_the_spec() -> None:
    assert native_spec.OPS["OP_UTF8"] == rowplan.OP_UTF8 and native_spec.OPS["OP_INT"] == rowplan.OP_INT
    assert rowplan.COLUMN.size == 4 * len(native_spec.RECORDS["column_t"])
    assert rowplan.WALK.size == 4 * len(native_spec.RECORDS["walk_t"])
    assert rowplan.KINDS[RowsKind.DELETE] == native_spec.KINDS["KIND_DELETE"]
    assert values.decimal_size(10, 2) == 5 and values._DIG2BYTES is native_spec.DIG2BYTES
    # Kafka's own murmur2 of b"21" is -973932308 (the Java client's test vector)
    assert partitioning.murmur2(b"21") == -973932308


def test_what_crosses_the_kernel_s_boundary_is_named_alike_on_both_sides() -> None:
    """A plan's attributes, canal-json's parts and a run's results: the names C reads and writes
    (spec.h, from BOUNDARY) are the Python classes' and the type checker's (connector/native.py)."""
    def fields(cls: type) -> tuple[str, ...]:
        return tuple(name for name in vars(cls) if not name.startswith("_"))

    assert set(native_spec.BOUNDARY["PLAN"]) <= set(KernelPlan.__dataclass_fields__)
    assert tuple(CanalParts.__dataclass_fields__) == native_spec.BOUNDARY["CANAL"]
    assert fields(KernelRun) == native_spec.BOUNDARY["RUN"]
    assert fields(KernelTransaction) == native_spec.BOUNDARY["TRANSACTION"]
    assert transcoder is not None, "the compiled module is not built (make install)"
    compiled = importlib.import_module("connector._transcode")
    assert compiled.KernelRun.__match_args__ == native_spec.BOUNDARY["RUN"]
    assert compiled.KernelTransaction.__match_args__ == native_spec.BOUNDARY["TRANSACTION"]
    run = transcoder.Kernel().run(bytearray(), 0, 0, 0, 0, 0, 1)  # not configured: every packet is Python's
    assert (run.consumed, run.reason, run.transaction.in_txn) == (0, native_spec.REASONS["STOP_CONTROL"], False)
