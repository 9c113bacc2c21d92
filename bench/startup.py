"""Start-up of each `sluice` command: the interpreter, then the modules the command loads.

Each command is a module of connector/commands that connector/cli.py imports only when it runs
(tests/test_commands.py holds what each may not load). This times, per command, a fresh
interpreter importing the command line and that command's module, against a fresh interpreter
alone (the floor no command goes below), best of --runs (start-up is all CPU: the best run is
the one the machine least disturbed), and `sluice decode` of a one-event binlog file end to end.
The goal: decode, tail and status start within 0.25 s. No service is needed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("decode", "tail", "status", "position", "schema", "snapshot", "consume", "run")
GOAL_S = 0.25


def best_of(argv: list[str], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - started)
    return best


def tiny_binlog(folder: Path) -> Path:
    """The smallest binlog file of the corpus that decodes whole (real events, little to decode;
    the corpus also holds truncated and corrupt ones), else one of the magic bytes alone."""
    corpus = ROOT.parent / "shared" / "binlog-corpus"
    files = sorted((p for p in corpus.rglob("*") if p.is_file() and p.read_bytes()[:4] == b"\xfebin"),
                   key=lambda p: p.stat().st_size)  # fmt: skip
    for path in files:
        done = subprocess.run([sys.executable, "-m", "connector.cli", "decode", str(path)], cwd=ROOT,
                              capture_output=True, check=False)  # fmt: skip
        if done.returncode == 0 and done.stdout:
            return path
    path = folder / "empty-bin.000001"
    path.write_bytes(b"\xfebin")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    python = sys.executable
    floor = best_of([python, "-c", "pass"], args.runs)
    print(f"python alone: {floor * 1000:6.0f} ms (best of {args.runs})")
    over = []
    for command in COMMANDS:
        took = best_of([python, "-c", f"import connector.cli, connector.commands.{command}"], args.runs)
        mark = "" if command not in ("decode", "tail", "status") or took <= GOAL_S else f"  over {GOAL_S} s"
        over += [command] if mark else []
        print(f"sluice {command:9s} {took * 1000:6.0f} ms, imports {(took - floor) * 1000:5.0f} ms{mark}")
    with tempfile.TemporaryDirectory() as folder:
        binlog = tiny_binlog(Path(folder))
        took = best_of([python, "-m", "connector.cli", "decode", str(binlog)], args.runs)
    print(f"sluice decode of {binlog.name} ({binlog.stat().st_size:,} bytes) end to end: {took * 1000:.0f} ms")
    print("goal held" if not over else f"goal missed by: {', '.join(over)}")


if __name__ == "__main__":
    main()
