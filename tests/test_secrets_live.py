"""A secret planted in every credential appears in no output of any command.

Each credential gets its own secret, handed over as a deployment hands it (an environment
variable or a file): the source user's password, the checkpoint database user's, a Redis ACL
user's, a Kafka SCRAM user's, the schema registry's basic auth. Then every command a user runs
(run with text and JSON logs and with --debug, status, position, snapshot, schema, consume,
tail, decode --schema-from) and the failures users meet (a wrong Kafka password, a mistyped
URL, a refused login, a bad position): none of their output, log lines (librdkafka's and
httpx's included), /metrics or process arguments holds any secret.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.live import (
    HOST,
    KAFKA_SASL,
    REDIS_URL,
    REGISTRY_URL,
    RUN,
    TLS,
    connect,
    scram_user,
    server,
    wait_until,
)
from tests.support.metrics import free_port, metric, scrape
from tests.support.pipelines import fresh, workload

pytestmark = pytest.mark.live

SLUICE = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "sluice")
MARK = "Pl4nted"  # every secret holds it: one search finds any of them, or a cut-off piece
KINDS = ("source", "checkpoint", "redis", "kafka", "registry")


@pytest.fixture
def secrets(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A secret per credential, and the users that take them on the services."""
    planted = {kind: f"{MARK}-{kind}-{uuid.uuid4().hex[:12]}" for kind in KINDS}
    with connect().cursor() as cur:
        cur.execute("SHOW GRANTS FOR 'sluice'@'127.0.0.1'")  # exactly the README's grants
        grants = [row[0] for row in cur.fetchall() if row[0].startswith("GRANT") and " USAGE " not in row[0]]
        quiet = "BINLOG ADMIN" if server().mariadb else "SESSION_VARIABLES_ADMIN"
        for user in ("leak_src", "leak_ck"):
            cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")
        cur.execute("CREATE USER 'leak_src'@'127.0.0.1' IDENTIFIED BY %s", (planted["source"],))
        for grant in grants:  # MySQL quotes the user with '', MariaDB with ``
            cur.execute(re.sub(r"TO [`']sluice[`']@", "TO 'leak_src'@", grant.split(" IDENTIFIED ")[0]))
        cur.execute("CREATE USER 'leak_ck'@'127.0.0.1' IDENTIFIED BY %s", (planted["checkpoint"],))
        cur.execute("GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER ON leak_meta.* TO 'leak_ck'@'127.0.0.1'")
        cur.execute(f"GRANT {quiet} ON *.* TO 'leak_ck'@'127.0.0.1'")
    store = redis.Redis.from_url(REDIS_URL)
    store.execute_command("ACL", "SETUSER", "leak", "reset", "on", f">{planted['redis']}", "~*", "&*", "+@all")  # type: ignore[no-untyped-call]
    scram_user("leak", planted["kafka"])
    (tmp_path / "kafka.secret").write_text(planted["kafka"] + "\n")
    (tmp_path / "kafka.secret").chmod(0o600)
    yield planted
    store.execute_command("ACL", "DELUSER", "leak")  # type: ignore[no-untyped-call]
    with connect().cursor() as cur:
        for user in ("leak_src", "leak_ck"):
            cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")


def environment(planted: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update({f"SLUICE_LEAK_{kind.upper()}": secret for kind, secret in planted.items() if kind != "kafka"})
    return env


def config_text(name: str, tmp: Path, metrics_port: int, log_format: str = "text") -> str:
    port = server().port
    return (
        f'name = "{name}"\n'
        f'[source]\nhost = "{HOST}"\nport = {port}\nuser = "leak_src"\npassword = "${{SLUICE_LEAK_SOURCE}}"\n'
        f"server_id = {7000 + abs(hash(name)) % 1000}\nheartbeat_s = 1\ninclude = ['leaky\\..*']\n"
        f'[kafka]\nbootstrap_servers = "{KAFKA_SASL}"\ntopic_prefix = "{name}"\n'
        f'[kafka.security]\nprotocol = "sasl_ssl"\nsasl_mechanism = "SCRAM-SHA-512"\nsasl_username = "leak"\n'
        f'sasl_password_file = "{tmp / "kafka.secret"}"\nssl_ca = "{TLS / "ca.pem"}"\n'
        f'[checkpoint]\ndb_url = "mysql://leak_ck:${{SLUICE_LEAK_CHECKPOINT}}@{HOST}:{port}/leak_meta"\n'
        f'redis_url = "redis://leak:${{SLUICE_LEAK_REDIS}}@{REDIS_URL.removeprefix("redis://")}"\n'
        "flush_interval_s = 0.5\n"
        f'[avro]\nschemas_dir = "{tmp / "schemas"}"\nschema_registry_url = "{REGISTRY_URL}"\n'
        'schema_registry_user = "leak"\nschema_registry_password = "${SLUICE_LEAK_REGISTRY}"\n'
        f'[metrics]\nport = {metrics_port}\nlog_format = "{log_format}"\n'
    )


class Outputs:
    """Every output gathered, by where it came from."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.seen: dict[str, str] = {}

    def command(self, label: str, *args: str, timeout: float = 120, status: int | None = 0) -> str:
        done = subprocess.run([SLUICE, *args], capture_output=True, text=True, env=self.env, timeout=timeout,
                              check=False)  # fmt: skip
        self.seen[label] = done.stdout + done.stderr
        assert status is None or done.returncode == status, f"{label}: {done.returncode}\n{done.stderr[-2000:]}"
        return self.seen[label]

    def leaks(self, planted: dict[str, str]) -> list[str]:
        basic = base64.b64encode(f"leak:{planted['registry']}".encode()).decode()  # an Authorization header
        pieces = [MARK, basic, *planted.values(), *(s[-12:] for s in planted.values())]
        return [f"{label}: {piece}" for label, text in self.seen.items() for piece in pieces if piece in text]


def running(outputs: Outputs, label: str, args: list[str], log: Path, until: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as err:
        process = subprocess.Popen([SLUICE, *args], stdout=err, stderr=err, env=outputs.env)
    wait_until(lambda: until in log.read_text(errors="replace"), 90, f"{label}: {until!r}", every_s=0.2)
    outputs.seen[f"{label} arguments"] = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode(errors="replace")
    return process


def stopped(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()


def test_a_secret_planted_in_every_credential_is_never_shown(tmp_path: Path, secrets: dict[str, str]) -> None:
    name, db = f"leak{uuid.uuid4().hex[:6]}", "leaky"
    fresh(db)
    metrics_port = free_port()
    config = tmp_path / "sluice.toml"
    config.write_text(config_text(name, tmp_path, metrics_port))
    outputs = Outputs(environment(secrets))
    log = tmp_path / "run.log"
    outputs.command("position show (before any start)", "position", "show", "--config", str(config))

    process = running(outputs, "run", ["run", "--config", str(config)], log, "streaming from")
    try:
        workload(db, 15, seed=81, pause_s=0.01)

        def published() -> bool:
            text = scrape(metrics_port, "/metrics")[1]
            return "sluice_rows_total{" in text and metric(text, "sluice_binlog_lag_bytes") == 0

        wait_until(published, 90, "the workload's rows in /metrics", every_s=0.5)
        outputs.command("status", "status", "--config", str(config))
        outputs.seen["/metrics"] = scrape(metrics_port, "/metrics")[1]
        outputs.command("snapshot request", "snapshot", "--config", str(config), "--tables", f"{db}.order_lines")
        outputs.command("schema show", "schema", "show", "--config", str(config))
        time.sleep(2)
    finally:
        stopped(process)
    outputs.seen["run log"] = log.read_text(errors="replace")

    json_config = tmp_path / "json.toml"
    json_config.write_text(config_text(name, tmp_path, free_port(), log_format="json"))
    json_log = tmp_path / "json.log"
    process = running(outputs, "run --debug, JSON", ["run", "--debug", "--config", str(json_config)], json_log,
                      "streaming from")  # fmt: skip
    try:
        workload(db, 5, seed=82, pause_s=0.01)
        time.sleep(3)
    finally:
        stopped(process)
    outputs.seen["JSON log"] = json_log.read_text(errors="replace")
    lines = [json.loads(line) for line in outputs.seen["JSON log"].splitlines() if line.startswith("{")]
    assert len(lines) > 3, outputs.seen["JSON log"][-2000:]  # --debug: every logger's lines, as JSON

    outputs.command("position show", "position", "show", "--config", str(config))
    outputs.command("status (stopped)", "status", "--config", str(config))
    outputs.command("consume", "consume", "--config", str(config), "--max", "20", "--idle-s", "10")
    tail_log = tmp_path / "tail.log"
    with tail_log.open("ab") as out:
        process = subprocess.Popen([SLUICE, "tail", "--config", str(config), "--start", "current"], stdout=out,
                                   stderr=out, env=outputs.env)  # fmt: skip
    try:
        time.sleep(3)  # connected
        outputs.seen["tail arguments"] = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode(errors="replace")
        workload(db, 3, seed=83, pause_s=0.01)
        wait_until(lambda: '"database"' in tail_log.read_text(errors="replace"), 60, "tail's JSON lines")
    finally:
        stopped(process)
    outputs.seen["tail output"] = tail_log.read_text(errors="replace")
    binlogs = sorted((RUN / server().name / "binlog").glob("*.[0-9]*"))
    schema_from = f"mysql://leak_src:${{SLUICE_LEAK_SOURCE}}@{HOST}:{server().port}"
    decoded = outputs.command("decode --schema-from", "decode", "--schema-from", schema_from, str(binlogs[-1]),
                              status=None)  # fmt: skip
    assert '"database"' in decoded

    # The failures users meet, each with a secret in reach of its message.
    wrong = tmp_path / "wrong.toml"
    base = config_text(name, tmp_path, free_port())
    failures = {
        "a wrong Kafka password": base.replace(str(tmp_path / "kafka.secret"), str(tmp_path / "other.secret")),
        "a mistyped Redis port": base.replace(REDIS_URL.removeprefix("redis://").split("/")[0], f"{HOST}:99999"),
        "a checkpoint URL of another scheme": base.replace('db_url = "mysql://', 'db_url = "postgres://'),
        "a refused source login": base.replace('user = "leak_src"', 'user = "leak_ck"'),
        "a refused checkpoint login": base.replace("${SLUICE_LEAK_CHECKPOINT}", "${SLUICE_LEAK_REDIS}"),
    }
    (tmp_path / "other.secret").write_text(f"{MARK}-wrong-kafka-password\n")
    for label, text in failures.items():
        wrong.write_text(text)
        outputs.command(label, "run", "--config", str(wrong), status=None, timeout=180)
        assert outputs.seen[label].strip(), label
    outputs.command("a position the server lacks", "position", "set", "mysql-bin.999999:4", "--config", str(config),
                    status=None)  # fmt: skip

    assert len(outputs.seen) >= 20
    assert outputs.leaks(secrets) == []
