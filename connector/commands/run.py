"""`sluice run`: the connector, binlog -> Avro -> Kafka, with checkpoints, until a signal."""

from __future__ import annotations

import argparse
import signal
import threading

from connector import logs
from connector.config import load_config
from connector.metrics import Metrics
from connector.runner import Connector, run_restarting, run_with_lease


def run_connector(config_path: str, debug: bool = False) -> None:
    config = load_config(config_path)
    logs.configure(config.metrics.log_format, debug)
    stop = threading.Event()
    # SIGHUP too: a terminal or supervisor hanging up stops the connector the same way, its
    # position saved (it used to kill it with no final flush).
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    if config.ha.enabled:
        run_with_lease(config, stop, _sole_job)
        return

    def connector(metrics: Metrics | None) -> Connector:
        # `stop` given, not set after: the Kafka sink's wait reads it
        made = Connector(config, stop=stop, metrics=metrics, serves_metrics=True)
        _sole_job(made)
        return made

    run_restarting(connector, stop)


def _sole_job(connector: Connector) -> None:
    connector.sole_job = True  # this process is the connector's: runner.tune_gc()


def main(args: argparse.Namespace) -> None:
    run_connector(args.config, args.debug)
