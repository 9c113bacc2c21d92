"""Issue 17: the compiled kernel (connector/lane.py) on whole dump sessions, without services.

Every corpus case of the fuzzer (tests/fuzz/session.py) read as a session twice, with the kernel
and on the Python path alone: the messages, saved positions and errors are the same, and the
kernel wrote the second transaction's rows wherever the compiled transcoder covers the table.
The fuzzer mutates these same sessions under the sanitizers (tests/test_native_fuzz.py)."""

from __future__ import annotations

import pytest

from connector.native import transcoder
from tests.fuzz import rig, session
from tests.fuzz.session import Input


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> list[rig.Case]:
    if transcoder is None:
        pytest.fail("the compiled module is not built (make install)")
    return rig.load_cases(tmp_path_factory.mktemp("lane-cases"))


def test_every_case_reads_the_same_with_the_kernel_and_without(cases: list[rig.Case]) -> None:
    taken = errors = 0
    for seed in session.seeds(cases):
        inp = session.decode(cases, seed)
        assert inp is not None
        outcome = session.check(inp)
        taken += outcome.kernel_rows > 0
        errors += outcome.error is not None
    # the kernel wrote the second transaction's rows of every case whose columns the compiled
    # transcoder covers (not pre-5.6 temporals, latin1 text, ENUM, ...: sakila's, mdev6020's)
    assert taken >= 50, (taken, len(cases))
    assert errors < len(cases) // 2, errors


def test_a_stream_cut_into_single_bytes_reads_the_same(cases: list[rig.Case]) -> None:
    """Every packet arrives a byte at a time: the kernel waits for whole packets, and takes them."""
    cut = 0
    for seed in list(session.seeds(cases))[::2]:
        inp = session.decode(cases, seed)
        assert inp is not None
        whole = session.check(inp)
        if whole.kernel_rows and cut < 4:
            bytewise = session.check(Input(inp.case, inp.table_map, inp.rows_type, inp.rows, (1,), inp.before_seed))
            assert bytewise.kernel_rows == whole.kernel_rows and bytewise.same(whole)
            cut += 1
    assert cut == 4
