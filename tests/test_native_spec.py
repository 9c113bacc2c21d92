"""Issue 17: what the C code and the Python code share is written once (connector/native_spec.py).

connector/csrc/spec.h is written from the spec; a stale copy fails here. The Python side reads the
same names: the transcoder's column operations and record layouts, the rows kinds, murmur2's and
DECIMAL's tables. The compiled module is held to them by tests/test_transcode.py and tests/test_lane.py."""

from __future__ import annotations

import subprocess
import sys

from connector import native_spec
from connector.binlog import rowplan, values
from connector.binlog.constants import RowsKind
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
