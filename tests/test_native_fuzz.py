"""Issue 17: the compiled module is safe on any bytes.

A coverage-guided fuzzer (atheris) takes mutated corpus TABLE_MAP + rows events through
`sluice run`'s own path (tests/fuzz/rig.py: parser with typed rows, assembler, pipeline) with
connector/_transcode.c built under AddressSanitizer and UBSan (tests/fuzz/build.py), and a
second target calls the module's functions directly with any arguments (its boundary checks).
A finding is any exception but the project's typed errors, any sanitizer report, any hang.
Planted bugs prove that the harness reports each kind, with the input that found it; the walks
that once could not move are called directly, in a child process, so a hang fails the test.

No services: this runs in `make unit` too. The three long runs start in the background as soon as
the session is collected, at a lower priority (tests/fuzz/campaigns.py), and their tests here judge
what they found.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.build import ROOT, Build, atheris_dir, build, compiler
from tests.fuzz.campaigns import CAMPAIGNS, RUNS, fuzz


@pytest.fixture(scope="module")
def sanitized() -> Build:
    """The sanitizer build; skipped only where no C compiler exists, and never on CI."""
    if compiler() is None:
        if os.environ.get("CI"):
            pytest.fail("no C compiler on CI: deploy/toolchain.sh installs clang")
        pytest.skip("no C compiler (clang or gcc): deploy/toolchain.sh installs one")
    atheris_dir()  # a dev dependency: missing, it fails (pip install -e '.[dev]')
    return CAMPAIGNS.build()


def executed(report: str, asked: int) -> int:
    """Inputs run, from libFuzzer's final stats (`#N DONE` says the same): all that were asked for,
    and at least half of them mutated ones (past the INITED line: the seeds' runs)."""
    found = re.search(r"stat::number_of_executed_units:\s+(\d+)", report)
    assert found is not None, report[-3000:]
    inited = re.search(r"#(\d+)\s+INITED", report)
    assert inited is not None, report[-3000:]
    assert int(found[1]) == asked, f"asked for {asked} inputs, ran {found[1]}:\n{report[-3000:]}"
    assert int(inited[1]) <= asked // 2, f"the seeds took {inited[1]} of {asked} runs: raise RUNS"
    return asked


@pytest.mark.parametrize("target", ["events", "session"])
def test_sluice_run_s_path_survives_the_fuzzer(sanitized: Build, tmp_path: Path, target: str) -> None:
    """events: a TABLE_MAP and rows event through the parser, assembler and pipeline; session: two
    transactions as a dump sends them, read with the compiled kernel and without (alike). The run
    started in the background when the session was collected (tests/fuzz/campaigns.py)."""
    run = CAMPAIGNS.outcome(target, tmp_path)
    assert run.status == 0 and not run.artifacts, f"finding, reproducer {run.artifacts}:\n{run.report[-6000:]}"
    cases = re.search(r"native_fuzz: (\d+) cases", run.report)
    assert cases is not None and int(cases[1]) >= 10, run.report[-3000:]
    runs = executed(run.report, RUNS[target])
    done = re.search(rf"#{runs}\s+DONE\s+(cov: \d+)?", run.report)
    assert done is not None, run.report[-3000:]
    assert done[1], "no coverage guided the fuzzer: a gcc build is blind (tests/fuzz/build.py); install clang"
    if sanitized.coverage:  # clang: the C module's own edges guide the fuzzer too
        assert re.search(r"Loaded 1 modules\s+\(\d+ inline 8-bit counters\)", run.report), run.report[:3000]
    speed = re.search(r"stat::average_exec_per_sec:\s+(\d+)", run.report)
    print(f"{target}: {runs} inputs through sluice run's path, {speed[1] if speed else '?'} a second")


def test_the_module_s_boundary_survives_the_fuzzer(sanitized: Build, tmp_path: Path) -> None:
    run = CAMPAIGNS.outcome("boundary", tmp_path)
    assert run.status == 0 and not run.artifacts, f"finding, reproducer {run.artifacts}:\n{run.report[-6000:]}"
    executed(run.report, RUNS["boundary"])


# Bugs planted in a copy of a source: (which, what is replaced, by what, the target that runs the
# seeds, what the report must say).
PLANTS = {
    # issue 17's own hang, back: a rows event against a zero-column TABLE_MAP (rig.zero_columns)
    "hang": (
        "connector/csrc/rowimage.c",
        "    if (ncols == 0)\n        return end > 0 ? -1 : 0;",
        "",
        "events",
        "ERROR: libFuzzer: timeout",
    ),
    # murmur2 reading a word past each key
    "asan": (
        "connector/csrc/hashes.c",
        "for (Py_ssize_t i = 0; i < whole; i += 4) {",
        "for (Py_ssize_t i = 0; i <= whole; i += 4) {",
        "events",
        "ERROR: AddressSanitizer: heap-buffer-overflow",
    ),
    # utf8_valid loading a word through a cast instead of memcpy: misaligned in most texts
    "ubsan": (
        "connector/csrc/rowimage.c",
        "memcpy(&w, s + i, 8);",
        "w = *(const uint64_t *)(s + i);",
        "events",
        "runtime error: load of misaligned address",
    ),
    # the kernel writing another event time than the Python path does
    "kernel": (
        "connector/csrc/kernel.c",
        "buf_long(open, (int64_t)e->timestamp * 1000)",
        "buf_long(open, (int64_t)e->timestamp * 1001)",
        "session",
        "the kernel's session differs from the Python path's",
    ),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_bug_is_reported_with_its_input(sanitized: Build, tmp_path: Path, plant: str) -> None:
    """The harness cannot pass vacuously: with a bug put back, running the seeds alone (no
    mutation) ends in that bug's report and a reproducer file, which is the input that found it."""
    name, old, new, target, says = PLANTS[plant]
    source = (ROOT / name).read_text()
    assert source.count(old) == 1, f"the planted {plant} no longer matches {name}"
    broken = build(tmp_path / "build", {name: source.replace(old, new)})
    seeds, corpus = tmp_path / "seeds", tmp_path / "corpus"
    corpus.mkdir()
    run = fuzz(
        broken, tmp_path, f"--target={target}", f"--seeds={seeds}", "--python-coverage=off", "-runs=0", "-timeout=5",
        str(corpus), str(seeds), limit=300,
    )  # fmt: skip
    assert run.status != 0 and says in run.report, run.report[-6000:]
    assert len(run.artifacts) == 1, (run.artifacts, run.report[-3000:])
    assert run.artifacts[0].name.startswith("timeout-" if plant == "hang" else "crash-")
    assert run.artifacts[0].read_bytes() in {seed.read_bytes() for seed in seeds.iterdir()}


# The cases the fix of issue 17 made the module refuse, called directly. Each ran for ever
# (with the GIL held) or read out of bounds before; in a child process, a hang fails the test.
def in_child(code: str, timeout_s: float, hung: str) -> subprocess.CompletedProcess[str]:
    """`code` run by this Python in a child (a hang fails the test with `hung`, not the run)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(hung)


WALKS = """
import struct
from connector.native import transcoder
assert transcoder is not None, "the compiled module is not built (make install)"
def program(*columns):
    return b"".join(struct.pack("<7i", *c, *([0] * (7 - len(c)))) for c in columns)
empty = (b"",) * 7  # strings, key prefix, first, rest, old null, old open, tail
def strings(*texts, count=None):
    offsets, at = [], 0
    for t in texts:
        offsets.append(at)
        at += len(t)
    offsets.append(at)
    n = len(texts) if count is None else count
    return struct.pack(f"<i{len(offsets)}i", n, *offsets) + b"".join(texts)
assert transcoder.count_rows(b"\\x00\\x01\\x02", b"", 1) == -1  # images of no columns: no bytes fit them
assert transcoder.count_rows(b"", b"", 1) == 0
assert transcoder.count_rows(b"\\x00" * 8, struct.pack("<4i", -4, 0, 0, 0), 1) == -1  # a negative width
assert transcoder.count_rows(b"\\x00" * 8, struct.pack("<4i", 0, -1, 0, 0), 1) == -1  # a negative prefix
assert transcoder.count_rows(b"\\x00" * 8, struct.pack("<4i", 0, 9, 0, 0), 1) == -1  # a 9-byte prefix
assert transcoder.count_rows(b"\\x00" * 8, struct.pack("<4i", 0, 1, 3, 99), 1) == -1  # codes of no table learnt
assert transcoder.count_rows(b"\\x00" * 8, struct.pack("<4i", 4, 0, 0, 1), 1) == -1  # a table it does not read
assert transcoder.count_rows(b"\\x00" * 10, struct.pack("<4i", 4, 0, 0, 0), 1) == 2  # two rows of an INT
for bad in (
    b"",  # no columns
    program((1, -4)),  # INT of negative width
    program((1, 0, 0, 0, -1, 0)),  # INT of no bytes (a shift by 64)
    program((4, 1, 0, 0, -1, 0)),  # FLOAT of one byte (reads four)
    program((11, 0, -1)),  # a length prefix of negative size
    program((11, 0, 9)),  # a length prefix of 9 bytes
    program((6, 1, 10, 2)),  # DECIMAL(10,2) of one byte (reads five)
    program((8, 5, 7)),  # DATETIME2 with 7 fraction digits
    program((99, 4)),  # no such op
    program((16, 1, 0, 3)),  # an ENUM of three labels, where the program has none
    program((17, 1, 0, 65)),  # a SET of 65 bits
    program((18, 0, 1, 0)),  # text in a single-byte charset, with no table of its 256 characters
    program((13, 3, 7)),  # TIME with 7 fraction digits
    program((14, 9)),  # BIT of 9 bytes
    program((20, 0, 1, 99)),  # text in a multi-byte charset, with no code table learnt as 99
):
    try:
        transcoder.transcode(b"\\x00\\x01\\x02\\x03", bad, 0, b"", *empty, 0)
    except ValueError as exc:
        assert "malformed transcode program" in str(exc), exc
    else:
        raise AssertionError(f"program {bad.hex()} was not refused")
for blob in (b"\\x01", strings(b"a", count=2), strings(b"ab", b"c")[:-1], struct.pack("<i2i", 1, 2, 1) + b"xy"):
    try:  # a count past its offsets, offsets past the bytes, or out of order
        transcoder.transcode(b"\\x00\\x01", program((16, 1, 0, 1, -1, 0)), 0, b"", blob, *empty[1:], 0)
    except ValueError as exc:
        assert "malformed transcode program" in str(exc), exc
    else:
        raise AssertionError(f"strings {blob.hex()} were not refused")
enum = program((16, 1, 0, 2, -1, 0))
assert transcoder.transcode(b"\\x00\\x02", enum, 0, b"", strings(b"a", b"bc"), *empty[1:], 0)  # label 2
assert transcoder.transcode(b"\\x00\\x03", enum, 0, b"", strings(b"a", b"bc"), *empty[1:], 0) is None  # no label 3
try:
    transcoder.transcode(b"\\x00\\x07\\x00\\x00\\x00", program((1, 4, 0, 0, -1, 0)), 0, b"", *empty, 2**63 - 1)
except ValueError as exc:
    assert "row number base" in str(exc), exc
else:
    raise AssertionError("a row number past 2^63 - 1 was not refused")
assert transcoder.transcode(b"\\x00\\x07\\x00\\x00\\x00", program((1, 4, 0, 0, -1, 0)), 0, b"", *empty, 0)
print("refused")
"""


def test_walks_that_could_not_move_are_refused_not_looped() -> None:
    """Moved from tests/test_transcode.py (live-marked as a whole, so `make unit` skipped it), and
    run in a child: before issue 17's fix, count_rows over images of no columns (a rows event
    against a zero-column TABLE_MAP, rig.zero_columns) and a program column of negative width or
    length walked for ever with the GIL held, and the test hung instead of failing. Added: a
    negative length prefix in a walk (it hung too: the old test had only a negative width, which
    was refused already), and the programs the boundary fuzzer found read past their value or
    shift by 64 (a width that is not the op's), and a row number base that overflows."""
    done = in_child(WALKS, 120, "the compiled module hung on a walk that cannot move")
    assert done.returncode == 0 and done.stdout.strip() == "refused", done.stderr


SEEDS = """
import tempfile
from pathlib import Path
from tests.fuzz import rig
cases = rig.load_cases(Path(tempfile.mkdtemp()))
print(sum(rig.run(case, *rig.pieces(case)).compiled > 0 for case in cases))
for make in (rig.zero_columns, rig.all_null_row):
    decoded = rig.decode(cases, make(cases))
    assert decoded is not None
    print(type(rig.run(*decoded).error).__name__)
"""


def test_the_seeds_reach_the_compiled_module_and_the_regressions_end_in_typed_errors() -> None:
    """On the normal build, as a run reads them: the unmutated cases that the compiled transcoder
    writes (the fuzzer starts from them), and rig.zero_columns and rig.all_null_row (also among
    the seeds, so every fuzzing run tries them on the sanitizer build)."""
    done = in_child(SEEDS, 300, "a seed or a regression input hung")
    assert done.returncode == 0, done.stderr
    compiled, *errors = done.stdout.split()
    assert int(compiled) >= 10 and errors == ["BinlogDecodeError", "EncodingError"], done.stdout
