"""DDL from the servers' own test suites and the grammar references, replayed on each live
server at binlog_row_metadata=MINIMAL, checked against Sluice (tests/support/ddlreplay.py).

Every statement a server accepts must be read (none unreadable: the connector would stop at
that table's next row), leave every tracked table equal to what information_schema reports
(names, order, types, ENUM/SET labels, charsets, nullability, primary key, MariaDB's hidden
columns), and the row written after it must be published with the server's names and values.
The full corpus runs here (about five minutes for both servers); each run's figures are kept
in .run/ddl-corpus/ and `bench/ddl_corpus.py` prints them for one server.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from tests.support import ddlcorpus, live
from tests.support.ddlreplay import Replay, Report

pytestmark = pytest.mark.live

# Fewer statements than this means the corpus or its extraction went missing, not that all is well.
LEAST = {"mysql": 3000, "mariadb": 1500, "grammar": 50}


def replayed(suite: str, variant: str = "minimal") -> Report:
    files = ddlcorpus.files(suite)
    assert files, f"no {suite} DDL corpus under {ddlcorpus.CORPUS}: run deploy/ddl-corpus.sh (make services does)"
    report = Replay().run(files)
    out = live.RUN / "ddl-corpus"
    out.mkdir(parents=True, exist_ok=True)
    name = f"{live.server().name}-{suite}-{variant}.json"
    (out / name).write_text(json.dumps(asdict(report), indent=1, ensure_ascii=False))
    print(f"{suite} corpus ({variant}): {report.summary()}")
    return report


def assert_clean(report: Report, suite: str) -> None:
    served = sum(1 for _ in ddlcorpus.statements(suite))
    assert report.replayed >= min(LEAST[suite], served // 3), report.summary()
    assert report.unreadable == [], report.summary()
    assert report.differences == [], report.summary()
    assert report.history == [], report.summary()
    assert report.stops == [], report.summary()
    assert report.silent == [], report.summary()
    assert report.rows_missing == [], report.summary()
    assert report.rows_checked > report.replayed // 3, report.summary()


@pytest.mark.parametrize("suite", ddlcorpus.SUITES)
def test_every_statement_is_read_as_the_server_applied_it(suite: str) -> None:
    assert_clean(replayed(suite), suite)


@pytest.mark.parametrize("suite", ["grammar", "own"])
def test_full_row_metadata_names_every_column_as_the_history_does(suite: str) -> None:
    """The FULL variant: the server logs every column's name (hidden ones too) and Sluice checks
    each TABLE_MAP's names against its history; any disagreement stops the stream."""
    suite = live.server().name if suite == "own" else suite
    with live.row_metadata("FULL"):
        report = replayed(suite, "full")
    assert_clean(report, suite)
