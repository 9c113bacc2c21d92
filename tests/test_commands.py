"""The `sluice` commands ask only for what they use: a command loads its own modules and no
others (so it starts in a fraction of a second; bench/startup.py times them), takes a
configuration without the sections it never reads, keeps passwords out of what it prints and
out of its process's arguments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from connector import cli
from connector.config import load_config
from connector.errors import ConfigError
from connector.secrets import without_passwords

ROOT = Path(__file__).resolve().parents[1]
# What each command must not load: Kafka's client for every command that never talks to Kafka;
# decode reads files alone (no server driver, no DDL reader without --schema-from).
HEAVY = ("confluent_kafka", "fastavro", "connector.avro.encoding", "connector.avro.framing", "prometheus_client")
NOT_LOADED = {
    "decode": (*HEAVY, "redis", "pymysql", "connector.schema.ddl"),
    "tail": (*HEAVY, "redis"),
    "status": HEAVY,
    "position": HEAVY,
    "schema": (*HEAVY, "redis"),
    "snapshot": (*HEAVY, "redis"),
}


@pytest.mark.parametrize("command", sorted(NOT_LOADED))
def test_a_command_loads_only_what_it_uses(command: str) -> None:
    code = (f"import sys, connector.cli, connector.commands.{command}\n"
            f"print(','.join(m for m in {NOT_LOADED[command]!r} if m in sys.modules))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "", f"sluice {command} loads {done.stdout.strip()}"


def _config(tmp_path: Path, kafka: bool) -> Path:
    path = tmp_path / "sluice.toml"
    text = '[source]\nhost = "db"\nuser = "cdc"\n[checkpoint]\ndb_url = "mysql://cdc@meta/cdc_meta"\n'
    path.write_text(text + ('[kafka]\nbootstrap_servers = "k:9092"\n' if kafka else ""))
    return path


def test_commands_that_never_produce_take_a_configuration_without_kafka(tmp_path: Path) -> None:
    path = _config(tmp_path, kafka=False)
    assert load_config(path, kafka=False).source.host == "db"
    with pytest.raises(ConfigError, match=r"\[kafka\] bootstrap_servers must be set"):
        load_config(path)  # run, consume, spark
    assert load_config(_config(tmp_path, kafka=True)).kafka.bootstrap_servers == "k:9092"


@pytest.mark.parametrize(
    ("statement", "shown"),
    [
        ("CREATE USER 'a'@'%' IDENTIFIED BY 'p4ss'", "CREATE USER 'a'@'%' IDENTIFIED BY '***'"),
        ("create or replace user a identified by \"p4ss\"", "create or replace user a identified by '***'"),
        ("ALTER USER a IDENTIFIED WITH caching_sha2_password BY 'it''s', b IDENTIFIED BY 'x\\'y'",
         "ALTER USER a IDENTIFIED WITH caching_sha2_password BY '***', b IDENTIFIED BY '***'"),
        ("CREATE USER a IDENTIFIED WITH 'caching_sha2_password' AS '$A$005$h' COMMENT 'ops'",
         "CREATE USER a IDENTIFIED WITH 'caching_sha2_password' AS '***' COMMENT 'ops'"),
        ("CREATE USER a IDENTIFIED VIA ed25519 USING PASSWORD('p') OR mysql_native_password USING 'h'",
         "CREATE USER a IDENTIFIED VIA ed25519 USING PASSWORD('***') OR mysql_native_password USING '***'"),
        ("GRANT ALL ON *.* TO a IDENTIFIED BY PASSWORD '*94BD'", "GRANT ALL ON *.* TO a IDENTIFIED BY PASSWORD '***'"),
        ("SET PASSWORD FOR 'a'@'%' = PASSWORD('p')", "SET PASSWORD FOR 'a'@'%' = PASSWORD('***')"),
        ("/* admin */ SET PASSWORD = 'p'", "/* admin */ SET PASSWORD = '***'"),
        ("INSERT INTO notes VALUES ('IDENTIFIED BY x')", "INSERT INTO notes VALUES ('IDENTIFIED BY x')"),
        ("ALTER TABLE t ADD c INT COMMENT 'SET PASSWORD = 1'", "ALTER TABLE t ADD c INT COMMENT 'SET PASSWORD = 1'"),
    ],
)  # fmt: skip
def test_a_password_in_an_account_statement_is_never_shown(statement: str, shown: str) -> None:
    assert without_passwords(statement) == shown


def test_a_password_in_the_arguments_is_scrubbed_from_the_process(tmp_path: Path) -> None:
    """`ps` shows every user a process's arguments: --schema-from's password leaves them, with a
    warning, before anything connects (here a port nothing listens on)."""
    url = "mysql://cdc:Sc4rce-secret@127.0.0.1:1/x"
    code = ("import logging, sys\nlogging.basicConfig()\nfrom connector.commands.livetables import schema_from\n"
            "try:\n    schema_from(sys.argv[1])\nexcept Exception as exc:\n    print(type(exc).__name__)\n"
            "print(open('/proc/self/cmdline', 'rb').read().decode())")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.startswith("SourceUnavailableError")
    assert "Sc4rce-secret" not in done.stdout and "mysql://cdc:xxxxxxxxxxxxx@127.0.0.1:1/x" in done.stdout
    assert "${VARIABLE}" in done.stderr and "Sc4rce-secret" not in done.stderr
    kept = "mysql://cdc:${SLUICE_TEST_PW}@127.0.0.1:1/x"  # nothing to scrub, nothing to warn of
    done = subprocess.run([sys.executable, "-c", code, kept], capture_output=True, text=True, check=True, cwd=ROOT,
                          env={"SLUICE_TEST_PW": "Sc4rce-secret", "PATH": "/usr/bin"})  # fmt: skip
    assert "${SLUICE_TEST_PW}" in done.stdout and "WARNING" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "debug"),
    [(["--debug", "decode", "x"], True), (["decode", "--debug", "x"], True), (["decode", "x"], False),
     (["--debug", "spark", "mirror", "--config", "c"], True)],
)  # fmt: skip
def test_debug_is_taken_before_or_after_the_command(argv: list[str], debug: bool) -> None:
    parsed = cli._parser().parse_args(argv)
    assert getattr(parsed, "debug", False) == debug
