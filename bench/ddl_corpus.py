"""The DDL corpus on one live server: the figures of tests/test_ddl_corpus_live.py, printed.

    .venv/bin/python bench/ddl_corpus.py [--server mariadb|mysql] [--suite mysql|mariadb|grammar] [--full]

Replays every kept statement of the servers' own DDL tests (deploy/ddl-corpus.sh fetches them)
and of tests/ddl_grammar.sql at binlog_row_metadata=MINIMAL (FULL with --full), and prints how
many the server accepted, which Sluice could not read, which tables' tracked definitions
differed from information_schema, the stream stops, silent mismatches, and the time taken.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sequence import choose_server
from tests.support import ddlcorpus, live
from tests.support.ddlreplay import Replay, Report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", choices=ddlcorpus.SUITES, action="append", help="default: all")
    parser.add_argument("--full", action="store_true", help="binlog_row_metadata=FULL instead of MINIMAL")
    args = choose_server(parser)
    total = Report(live.server().name)
    started = time.monotonic()
    metadata = live.row_metadata("FULL") if args.full else contextlib.nullcontext()
    with metadata:
        for suite in args.suite or ddlcorpus.SUITES:
            report = Replay().run(ddlcorpus.files(suite))
            print(f"{suite:8} {report.summary()}")
            total.merge(report)
    print(f"total    {total.summary()} (wall {time.monotonic() - started:.0f} s)")
    for name in ("unreadable", "differences", "stops", "silent", "rows_missing", "rows_as_statements"):
        for line in getattr(total, name):
            print(f"  {name}: {line}")


if __name__ == "__main__":
    main()
