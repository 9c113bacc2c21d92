"""The metrics endpoint during a workload, against what the workload did."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from connector.config import ColumnRule, MetricsSection
from connector.logs import JsonLogFormatter
from connector.runner import Connector
from tests.support.live import connect, server, wait_until
from tests.support.metrics import free_port, metric, scrape, scrape_or_none
from tests.support.pipelines import config_for, fresh

pytestmark = pytest.mark.live








def test_metrics_follow_the_workload(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sluice")
    db = "metered"
    fresh(db)
    with connect(db).cursor() as cur:  # a GEOMETRY column, hashed by a rule: its table takes the Python path
        cur.execute("CREATE TABLE notes (id INT PRIMARY KEY, doc GEOMETRY)")
    port = free_port()
    config = config_for(f"metrics{uuid.uuid4().hex[:6]}", db, tmp_path)
    config = replace(config, metrics=MetricsSection(port=port, host="127.0.0.1", progress_s=1.0),
                     kafka=replace(config.kafka, columns=[ColumnRule(rf"{db}\.notes", hash=["doc"])]))  # fmt: skip
    Connector(config).run(blocking=False)  # first start: capture
    connector = Connector(config)
    runner = threading.Thread(target=connector.run, daemon=True)
    runner.start()
    try:
        wait_until(lambda: scrape_or_none(port) is not None, 30, "the metrics endpoint", every_s=0.2)
        with connect(db).cursor() as cur:
            cur.executemany("INSERT INTO order_lines VALUES (%s, 1, 'x', 1)", [(i,) for i in range(50)])
            cur.execute("UPDATE order_lines SET qty = 2 WHERE order_id < 20")
            cur.execute("DELETE FROM order_lines WHERE order_id >= 40")
            cur.executemany("INSERT INTO notes VALUES (%s, ST_GeomFromText('POINT(1 2)'))", [(i,) for i in range(7)])

        def all_counted() -> bool:  # the last statement of each table: notes' rows come after the DELETEs
            text = scrape(port, "/metrics")[1]
            deletes = metric(text, "sluice_rows_total", database=db, table="order_lines", type="DELETE")
            return deletes >= 10 and metric(text, "sluice_rows_total", database=db, table="notes", type="INSERT") >= 7

        wait_until(all_counted, 30, "the DELETEs and notes' INSERTs in sluice_rows_total", every_s=0.3)
        _, text = scrape(port, "/metrics")
        assert metric(text, "sluice_rows_total", database=db, table="order_lines", type="INSERT") == 50
        assert metric(text, "sluice_rows_total", database=db, table="order_lines", type="UPDATE") == 20
        assert metric(text, "sluice_rows_total", database=db, table="order_lines", type="DELETE") == 10
        written = "WRITE_ROWS_EVENT_V1" if server().mariadb else "WRITE_ROWS_EVENT"  # MySQL logs v2
        assert metric(text, "sluice_events_total", type=written) >= 1

        assert metric(text, "sluice_bytes_read_total") > 0
        # Each row by the path that encoded it; the table on the Python path said why, once.
        path_rows = {(table, path): metric(text, "sluice_path_rows_total", database=db, path=path, table=table)
                     for table in ("order_lines", "notes") for path in ("kernel", "python")}  # fmt: skip
        assert path_rows[("notes", "python")] == 7 and path_rows[("notes", "kernel")] == 0, path_rows
        assert path_rows[("order_lines", "kernel")] + path_rows[("order_lines", "python")] == 80, path_rows
        assert path_rows[("order_lines", "kernel")] > 0, path_rows  # the compiled kernel's table
        slow = [r.getMessage() for r in caplog.records if "take the Python path" in r.getMessage()]
        assert slow == [f"rows of `{db}`.`notes` take the Python path, slower than the compiled kernel: a "
                        "[[kafka.columns]] rule shapes its messages: column `doc` (geometry) is hashed, and the "
                        "text its digest is of is not compiled"], slow  # fmt: skip

        # A session that logs its row changes as statements: not publishable, so warned and counted.
        with connect(db).cursor() as cur:
            cur.execute("SET SESSION binlog_format = 'STATEMENT'")
            cur.execute("INSERT INTO order_lines VALUES (1000, 1, 'x', 1)")
            cur.execute("UPDATE order_lines SET qty = 3 WHERE order_id = 1000")

        def statements_counted() -> bool:
            text = scrape(port, "/metrics")[1]
            return metric(text, "sluice_statement_logged_changes_total", database=db, table="order_lines") >= 2

        wait_until(statements_counted, 30, "sluice_statement_logged_changes_total", every_s=0.3)
        warned = [r.getMessage() for r in caplog.records if "logged a row change as its statement" in r.getMessage()]
        assert len(warned) == 1 and warned[0].startswith(f"{db}.order_lines: "), warned
        _, text = scrape(port, "/metrics")
        assert metric(text, "sluice_rows_total", database=db, table="order_lines", type="INSERT") == 50
        time.sleep(2.5)  # a sample of lag and checkpoint age
        _, text = scrape(port, "/metrics")
        assert metric(text, "sluice_binlog_lag_bytes") == 0
        assert 0 <= metric(text, "sluice_checkpoint_age_seconds", store="redis") < 30
        assert metric(text, "sluice_inflight_messages") == 0
        assert 'sluice_paused_seconds_total{reason="kafka"} 0.0' in text.splitlines()  # shown, no pause
        assert scrape(port, "/health") == (200, "ok\n")
        assert scrape(port, "/ready") == (200, "ready\n")
        connector.stop.set()
        runner.join(60)
        assert not connector.metrics.ready()  # stopped: not ready
    finally:
        connector.stop.set()
        runner.join(60)




def test_json_log_lines() -> None:
    record = logging.LogRecord("sluice", logging.WARNING, __file__, 1, "lag %d s", (5,), None)
    line = json.loads(JsonLogFormatter().format(record))
    assert (line["level"], line["logger"], line["message"]) == ("WARNING", "sluice", "lag 5 s")
    assert line["time"].endswith("Z")
