"""canal's own classes and Flink's canal-json format, run on Sluice's messages (tests/canal_harness).

`read(mode, values, columns)` hands canal-json values (as Kafka holds them) to the Java harness,
built once with Maven (jars cached in ~/.m2, classes in tests/canal_harness/target), and returns
what it saw: per message for canal ("canal": FlatMessage parsed with fastjson2, as canal's Kafka
client parses flat messages), per row for Flink ("flink": CanalJsonDeserializationSchema with
the physical row type `columns`, [(name, Flink SQL type)], ignore-parse-errors off).

`canal_own(binlog, start, end, tables)` is canal's own FlatMessage of each rows event of `tables`
([(database, table, SHOW CREATE TABLE text)]) logged in `binlog` from `start` to `end`: canal's
decoder, LogEventConvert and MQMessageUtils, what canal would put on Kafka ("types" mode).
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

HARNESS = Path(__file__).parents[1] / "canal_harness"
TARGET = HARNESS / "target"


def build() -> None:
    """`mvn package` unless the classes are newer than the pom and the source (a file lock: one build)."""
    sources = [HARNESS / "pom.xml", *HARNESS.glob("src/**/*.java")]
    stamp = TARGET / "lib" / ".built"
    with open(HARNESS / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and all(s.stat().st_mtime <= stamp.stat().st_mtime for s in sources):
            return
        mvn = shutil.which("mvn")
        if mvn is None:
            raise AssertionError("mvn is not installed: deploy/services.sh installs it with Kafka (apt maven)")
        done = subprocess.run([mvn, "-B", "-q", "-f", str(HARNESS / "pom.xml"), "package"], capture_output=True,
                              text=True, timeout=900, check=False)  # fmt: skip
        if done.returncode != 0:
            output = done.stdout[-3000:] + done.stderr[-2000:]
            raise AssertionError(f"building the canal/Flink harness failed:\n{output}")
        stamp.touch()


def read(mode: str, values: list[bytes], columns: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    return _run([mode] if columns is None else [mode, json.dumps([list(c) for c in columns])],
                b"".join(v + b"\n" for v in values))  # fmt: skip


def canal_own(binlog: Path, start: int, end: int, tables: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    spec = {"file": str(binlog), "start": start, "end": end,
            "tables": [{"schema": db, "table": name, "ddl": ddl} for db, name, ddl in tables]}  # fmt: skip
    return _run(["types"], json.dumps(spec).encode())


def _run(args: list[str], stdin: bytes) -> list[dict[str, Any]]:
    build()
    mode = args[0]
    args = ["java", "-Duser.timezone=UTC", "-cp", f"{TARGET / 'classes'}:{TARGET / 'lib'}/*",
            "sluice.harness.Harness", *args]  # fmt: skip
    done = subprocess.run(args, input=stdin, capture_output=True, timeout=300, check=False)
    if done.returncode != 0:
        raise AssertionError(f"harness {mode} failed:\n{done.stderr.decode(errors='replace')[-4000:]}")
    # canal's classes log to stdout (logback's default): the harness's lines are the JSON ones.
    return [json.loads(line) for line in done.stdout.decode().splitlines() if line.startswith("{")]
