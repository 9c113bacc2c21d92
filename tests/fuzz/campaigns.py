"""The fuzz runs of tests/test_native_fuzz.py, started when the session's tests are collected.

They need no services and take minutes of CPU each; the live suites before them spend most of
their time waiting on servers, Kafka and Spark. So tests/conftest.py starts the runs the session
selected as soon as it is collected, one after another in a thread, under `nice` (they take the
CPU the live tests leave), and each test waits for its run's result and judges it. The same
inputs run: libFuzzer is given a count, not a time. A run's per-input timeout is wall time, so a
niceness that starved one input for seconds would report a false hang; at 10 an input gets about
a tenth of a core against two busy ones, and the slowest input here runs in well under a second.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.build import ROOT, Build, build, compiler, environment

NICE = 10
PER_INPUT_TIMEOUT = 10  # libFuzzer's -timeout: an input that runs longer is a hang
MALLOC_LIMIT_MB = 1024  # one allocation larger than this is a finding (an input asking for GiBs)
HANG_S = 1800  # a whole run's limit: only a harness that stopped making progress meets it
# How many inputs each run executes: libFuzzer's runs of the seeds (up to its INITED line, about
# twice as many runs as seeds here), then mutated inputs. About 160-220 inputs a second here on
# the production path, 15-20 a second for whole sessions (two reads each, the connector's Python
# under atheris' instrumentation), 15,000 for the direct calls.
RUNS = {"events": 10_000, "session": 1_000, "boundary": 150_000}
# Which test judges which run.
TESTS = {
    "events": "test_sluice_run_s_path_survives_the_fuzzer[events]",
    "session": "test_sluice_run_s_path_survives_the_fuzzer[session]",
    "boundary": "test_the_module_s_boundary_survives_the_fuzzer",
}


@dataclass(frozen=True)
class Outcome:
    status: int
    report: str  # libFuzzer's output
    artifacts: list[Path]  # the inputs it wrote: a finding's reproducer
    work: Path


def fuzz(made: Build, work: Path, *args: str, limit: float, nice: int = 0) -> Outcome:
    """Run the harness on `made` (in `work`): its exit status, report and the artifacts it wrote."""
    artifacts = work / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    # No RSS limit, a limit per allocation instead: libFuzzer reads the peak RSS, which Linux
    # carries over from the parent at exec, and a full run's pytest is GiBs by this test
    # (the whole suite failed with "out-of-memory (used: 5274Mb)" before a single input ran).
    command = [*(["nice", "-n", str(nice)] if nice else []), sys.executable, "-m", "tests.fuzz.native_fuzz",
               f"--work={work / 'schemas'}", f"-artifact_prefix={artifacts}/", "-print_final_stats=1",
               "-rss_limit_mb=0", f"-malloc_limit_mb={MALLOC_LIMIT_MB}", *args]  # fmt: skip
    with subprocess.Popen(
        command, cwd=ROOT, env=environment(made), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as p:
        _running.add(p)
        try:
            report = p.communicate(timeout=limit)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            report = p.communicate()[0] + f"\n(the run did not end in {limit} s)"
        finally:
            _running.discard(p)
    return Outcome(p.returncode, report, sorted(artifacts.iterdir()), work)


def arguments(target: str, work: Path) -> list[str]:
    """The run of `target`: events and session mutate the corpus's seeds, boundary calls the
    module's functions with arguments of its own."""
    common = [f"--target={target}", f"-runs={RUNS[target]}", f"-timeout={PER_INPUT_TIMEOUT}"]
    (work / "corpus").mkdir(parents=True, exist_ok=True)
    if target == "boundary":
        return [*common, str(work / "corpus")]
    seeds = work / "seeds"
    return [*common, f"--seeds={seeds}", "-max_len=16384", str(work / "corpus"), str(seeds)]


@dataclass
class Campaigns:
    """The sanitized build, then the selected runs in order, in one background thread."""

    made: Future[Build] = field(default_factory=Future)
    runs: dict[str, Future[Outcome]] = field(default_factory=dict)
    root: Path | None = None

    def start(self, targets: list[str]) -> None:
        if not targets or compiler() is None:  # no compiler: the tests skip or fail on their own
            return
        self.root = Path(tempfile.mkdtemp(prefix="sluice-fuzz-"))
        self.runs = {t: Future() for t in targets}
        threading.Thread(target=self._work, name="fuzz campaigns", daemon=True).start()

    def _work(self) -> None:
        try:
            made = build()
        except BaseException as exc:  # the tests report it
            self.made.set_exception(exc)
            for run in self.runs.values():
                run.set_exception(exc)
            return
        self.made.set_result(made)
        assert self.root is not None
        for target, run in self.runs.items():
            work = self.root / target
            try:
                run.set_result(fuzz(made, work, *arguments(target, work), limit=HANG_S, nice=NICE))
            except BaseException as exc:
                run.set_exception(exc)

    def build(self) -> Build:
        """The sanitized build: the background one when the runs were started, else made now."""
        return self.made.result() if self.root is not None else build()

    def outcome(self, target: str, work: Path) -> Outcome:
        """`target`'s run: the background one's outcome, or run now (in `work`) when not started."""
        run = self.runs.get(target)
        if run is None:
            return fuzz(self.build(), work, *arguments(target, work), limit=HANG_S)
        return run.result()

    def stop(self) -> None:
        """Kill what still runs; remove the runs' files unless one failed (its reproducer stays)."""
        for p in list(_running):
            p.kill()
        done = [run.result() for run in self.runs.values() if run.done() and run.exception() is None]
        if self.root is not None and len(done) == len(self.runs) and all(o.status == 0 for o in done):
            shutil.rmtree(self.root, ignore_errors=True)


_running: set[subprocess.Popen[str]] = set()
CAMPAIGNS = Campaigns()


def selected(nodeids: list[str]) -> list[str]:
    """The runs whose tests are among `nodeids`, in the order of RUNS."""
    names = {n.rsplit("::", 1)[-1] for n in nodeids if n.startswith("tests/test_native_fuzz.py::")}
    return [target for target, test in TESTS.items() if test in names]
