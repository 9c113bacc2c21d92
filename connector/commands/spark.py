"""`sluice spark mirror|changelog`: a Spark job on the topics (pyspark starts a JVM)."""

from __future__ import annotations

import argparse

from connector.config import load_config
from spark.jobs import run


def main(args: argparse.Namespace) -> None:
    run(load_config(args.config), args.job, args.once)
