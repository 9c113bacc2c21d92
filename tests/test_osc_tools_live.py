"""The online schema change tools of tests/support/onlineddl.py work on the live servers: each runs one
ADD COLUMN under a writer, paused in the middle of its copy and held before its cut-over, and
the table ends with the new column and exactly the writer's rows; gh-ost still refuses MariaDB.
The live tests of issue 36 (what Sluice publishes across such a change) build on these."""

from __future__ import annotations

import time

import pytest

from tests.support import onlineddl
from tests.support.live import LiveServer, connect, fresh_database

pytestmark = pytest.mark.live

ROWS = 2000
ALTER = "ADD COLUMN c INT NOT NULL DEFAULT 7"
# The cut-over each tool writes to the binlog, with the database and table of `alter_under_writes`.
CUT_OVER = {
    "pt-osc": "RENAME TABLE `osc_tools`.`t` TO `osc_tools`.`_t_old`, `osc_tools`.`_t_new` TO `osc_tools`.`t`",
    "gh-ost": "rename /* gh-ost */ table `osc_tools`.`t` to `osc_tools`.`_t_del`, "
    "`osc_tools`.`_t_gho` to `osc_tools`.`t`",
}


def alter_under_writes(tool: onlineddl.Tool, server: LiveServer) -> None:
    fresh_database("osc_tools")
    rows = onlineddl.seed_table(server, "osc_tools", "t", ROWS)
    with onlineddl.Writer(server, "osc_tools", "t", rows, rate=30) as writer:
        with onlineddl.running(tool, server, "osc_tools", "t", ALTER,
                               pause_after_rows=500, postpone_cutover=True) as run:  # fmt: skip
            copied = run.wait_paused()
            assert 500 <= copied < ROWS, copied
            time.sleep(0.3)  # the writer goes on while the copy stands still
            run.resume()
            run.wait_postponed()
            run.cut_over()
        result = run.finish()
        time.sleep(0.3)  # and on after the cut-over, into the new table
        report = writer.stop()

    assert onlineddl.table_columns(server, "osc_tools", "t") == ["id", "k", "v", "c"]
    assert report.transactions > 20 and report.inserted and report.updated and report.deleted, report
    on_server = onlineddl.table_rows(server, "osc_tools", "t")
    assert len(on_server) == len(report.rows) == ROWS + report.inserted - report.deleted
    assert on_server == report.rows
    statements = [s for tx in onlineddl.transactions(onlineddl.binlog_events(server, result.start, result.end))
                  for s in tx.statements]  # fmt: skip
    assert CUT_OVER[tool] in statements, statements


def test_pt_osc_adds_a_column_under_writes(server: LiveServer) -> None:
    alter_under_writes("pt-osc", server)


@pytest.mark.servers(*onlineddl.GH_OST_SERVERS)
def test_gh_ost_adds_a_column_under_writes(server: LiveServer) -> None:
    alter_under_writes("gh-ost", server)


@pytest.mark.servers("mariadb")
def test_gh_ost_stops_at_once_on_mariadb(server: LiveServer) -> None:
    """gh-ost v1.1.8 sets MySQL's transaction_isolation on connecting; MariaDB 10.11 has no such
    variable. It fails before making any table (GH_OST_SERVERS leaves MariaDB out for this)."""
    fresh_database("osc_tools")
    onlineddl.seed_table(server, "osc_tools", "t", 10)
    refused = r"Error 1193 \(HY000\): Unknown system variable 'transaction_isolation'"
    with pytest.raises(onlineddl.OscFailed, match=refused):
        onlineddl.gh_ost(server, "osc_tools", "t", ALTER)
    with connect("osc_tools", on=server) as conn, conn.cursor() as cur:
        cur.execute("SHOW TABLES")
        assert [row[0] for row in cur.fetchall()] == ["t"]
