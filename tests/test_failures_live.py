"""Failures as a user meets them, table-driven: each ends `sluice` with one line that says where
and what (no traceback unless --debug), a distinct exit status, and nothing lost.

Each case is a configuration (or a command line) that goes wrong one way; the expectations
are the exit status, a pattern the one line must match, and, for `run`, that the saved
position did not move.
"""

from __future__ import annotations

import http.server
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from connector.checkpoint import checkpoint_stores
from connector.config import load_config
from tests.support.live import (
    HOST,
    KAFKA,
    KAFKA_SASL,
    REDIS_URL,
    ROOT,
    TLS,
    connect,
    fresh_database,
    server,
    services_toml,
    source_toml,
)

pytestmark = pytest.mark.live

SLUICE = str(ROOT / ".venv" / "bin" / "sluice")


@dataclass(frozen=True)
class Case:
    name: str
    # What to run: given a folder and a working configuration's text, the arguments after `sluice`.
    make: Callable[[Path, str], list[str]]
    status: int
    line: str  # a regex the one `sluice:` line must match


def config_file(folder: Path, text: str, name: str = "sluice.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def run_with(change: Callable[[str], str]) -> Callable[[Path, str], list[str]]:
    """`sluice run` on the working configuration, changed."""
    return lambda folder, text: ["run", "--config", str(config_file(folder, change(text)))]


def busy_port(folder: Path, text: str) -> list[str]:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    HELD.append(holder)
    port = holder.getsockname()[1]
    return ["run", "--config", str(config_file(folder, text + f"[metrics]\nport = {port}\n"))]


HELD: list[socket.socket] = []


def not_utf8(folder: Path, text: str) -> list[str]:
    path = folder / "latin1.toml"
    path.write_bytes(text.encode() + '# caf\xe9\n'.encode("latin-1"))
    return ["run", "--config", str(path)]


def unwritable_schemas(folder: Path, text: str) -> list[str]:
    blocker = folder / "not-a-directory"
    blocker.write_text("a file where the schema directory should be")
    changed = text.replace(f'"{folder / "schemas"}"', f'"{blocker}/schemas"')
    return ["run", "--config", str(config_file(folder, changed))]


def swap(old: str, new: str) -> Callable[[str], str]:
    def change(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)

    return change


def wrong_password(text: str) -> str:
    return swap(f'password = "{server().password}"', 'password = "not-the-password"')(text)


def wrong_kafka_password(text: str) -> str:
    """The SASL_SSL listener with a SCRAM user's wrong password: a refusal, not an outage to wait out."""
    security = (
        '[kafka.security]\nprotocol = "sasl_ssl"\nsasl_mechanism = "SCRAM-SHA-512"\nsasl_username = "sluice"\n'
        f'sasl_password = "not-the-password"\nssl_ca = "{TLS / "ca.pem"}"\n'
    )
    return swap(f'bootstrap_servers = "{KAFKA}"', f'bootstrap_servers = "{KAFKA_SASL}"')(text) + security


def consume_without_schemas(folder: Path, text: str) -> list[str]:
    """A single-object framed message on one of the connector's topics, read with a schema
    directory no connector wrote (the wrong volume mounted, say)."""
    name = re.search(r'topic_prefix = "([^"]+)"', text)
    assert name is not None
    topic = f"{name[1]}.failing.t"
    admin = AdminClient({"bootstrap.servers": KAFKA})  # held: its requests end with it
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": KAFKA})
    producer.produce(topic, b"\xc3\x01" + bytes(8) + b"\x02")
    assert producer.flush(30) == 0
    return ["consume", "--config", str(config_file(folder, text)), "--max", "1", "--idle-s", "10"]


class _Refusing(http.server.BaseHTTPRequestHandler):
    """A registry that refuses every request's login, as Confluent's does (401, error code 40101)."""

    def do_GET(self) -> None:
        body = b'{"error_code": 40101, "message": "Unauthorized"}'
        self.send_response(401)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


def refusing_registry(folder: Path, text: str) -> list[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    SERVERS.append(server)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    registry = f'[avro]\nschema_registry_url = "{url}"\nschema_registry_user = "sluice"\n'
    return run_with(swap("[avro]\n", registry + 'schema_registry_password = "wrong"\n'))(folder, text)


SERVERS: list[http.server.ThreadingHTTPServer] = []

CASES = [
    Case("kafka unreachable at start",
         run_with(swap(f'bootstrap_servers = "{KAFKA}"', 'bootstrap_servers = "127.0.0.1:1"\ndelivery_timeout_s = 3')),
         1, r"^sluice: SinkError: cannot .*: Kafka unreachable"),
    Case("wrong Kafka password", run_with(wrong_kafka_password), 1,
         r"^sluice: SinkError: .*Kafka refused the login \(.*SASL authentication error.*\); check \[kafka.security\]"),
    Case("metrics port in use", busy_port, 2, r"^sluice: configuration: \[metrics\] port \d+ on 127.0.0.1: "),
    Case("missing ssl_ca", run_with(swap("[source]\n", '[source]\nssl_ca = "/nonexistent/ca.pem"\n')), 2,
         r"^sluice: configuration: .*source.ssl_ca = '/nonexistent/ca.pem': no such file"),
    Case("unwritable schema directory", unwritable_schemas, 2, r"^sluice: configuration: \[avro\] schemas_dir "),
    Case("config path is a directory", lambda folder, text: ["run", "--config", str(folder)], 2,
         r"^sluice: configuration: config file .* is a directory"),
    Case("config is not UTF-8", not_utf8, 2, r"^sluice: configuration: config file .* is not UTF-8"),
    Case("empty config", lambda folder, text: ["run", "--config", str(config_file(folder, "", "empty.toml"))], 2,
         r"^sluice: configuration: .*\[source\] host, \[source\] user, \[kafka\] bootstrap_servers must be set"),
    Case("redis url without a host", run_with(swap(f'redis_url = "{REDIS_URL}"', 'redis_url = "redis:/x"')), 2,
         r"^sluice: configuration: .*checkpoint.redis_url = 'redis:/x' is out of range"),
    Case("decode of a missing file", lambda folder, text: ["decode", str(folder / "missing-bin.000001")], 1,
         r"^sluice: .*missing-bin.000001: No such file or directory"),
    Case("consume with an empty schema directory", consume_without_schemas, 1,
         r"^sluice: UnreadableMessageError: .*failing\.t\[0\]@0: \[avro\] schemas_dir .*schemas holds no index\.json"),
    Case("registry refuses the login", refusing_registry, 1,
         r"^sluice: RegistryError: schema registry http://127.0.0.1:\d+: listing subjects: HTTP 401: Unauthorized"),
    Case("registry unreachable", run_with(swap("[avro]\n", '[avro]\nschema_registry_url = "http://127.0.0.1:1"\n')), 1,
         r"^sluice: RegistryError: schema registry http://127.0.0.1:1: .*cannot reach it"),
    Case("wrong source password", run_with(wrong_password), 1,
         r"^sluice: PermissionRefusedError: cannot connect to .*Access denied.*check the user and its password"),
    Case("unknown producer property", run_with(lambda t: t + "[kafka.producer]\n\"linger.mss\" = 5\n"), 2,
         r'^sluice: configuration: .*kafka.producer: No such configuration property: "linger.mss"'),
    Case("guaranteed producer property", run_with(lambda t: t + '[kafka.producer]\nacks = "1"\n'), 2,
         r"^sluice: configuration: .*kafka.producer.acks cannot be set: .*in-sync replicas"),
]  # fmt: skip


def working_config(folder: Path, name: str, db: str) -> str:
    return (f'name = "{name}"\n' + source_toml(7700 + abs(hash(name)) % 200) + f"include = ['{db}\\..*']\n"
            + services_toml(name) + f'[avro]\nschemas_dir = "{folder / "schemas"}"\n')  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_failure_ends_with_one_line_its_status_and_nothing_lost(tmp_path: Path, case: Case) -> None:
    name, db = f"fail{uuid.uuid4().hex[:6]}", "failing"
    fresh_database(db, "CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
    text = working_config(tmp_path, name, db)
    before = checkpoint_stores(load_config(config_file(tmp_path, text, "working.toml"))).durable.get()
    began = time.monotonic()
    try:
        done = subprocess.run([SLUICE, *case.make(tmp_path, text)], capture_output=True, text=True, timeout=120,
                              check=False)  # fmt: skip
    finally:
        while HELD:
            HELD.pop().close()
        while SERVERS:
            SERVERS.pop().shutdown()
    took = time.monotonic() - began
    lines = [line for line in done.stderr.splitlines() if line.startswith("sluice:")]
    assert done.returncode == case.status, done.stderr[-3000:]
    assert len(lines) == 1 and re.search(case.line, lines[0]), done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) < 40, f"{len(done.stderr.splitlines())} lines in {took:.0f} s"
    after = checkpoint_stores(load_config(tmp_path / "working.toml")).durable.get()
    assert after == before  # nothing published, so nothing saved past it


def test_a_stop_while_kafka_is_unreachable_ends_the_run_at_once(tmp_path: Path) -> None:
    """SIGTERM while `sluice run` waits for a Kafka it cannot reach: a stop (status 0, no failure
    line), not a wait to the end of the outage allowance (300 s) nor an error. It was the
    latter: the signal handlers' stop was not the one the Kafka sink's wait read."""
    name, db = f"wait{uuid.uuid4().hex[:6]}", "failing"
    fresh_database(db, "CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
    text = working_config(tmp_path, name, db)
    text = text.replace(f'bootstrap_servers = "{KAFKA}"', 'bootstrap_servers = "127.0.0.1:1"')
    log = tmp_path / "sluice.log"
    with log.open("wb") as err:
        process = subprocess.Popen([SLUICE, "run", "--config", str(config_file(tmp_path, text))],
                                   stdout=subprocess.DEVNULL, stderr=err)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "waiting for Kafka" not in log.read_text() and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()[-2000:]
            time.sleep(0.1)
        assert "waiting for Kafka" in log.read_text()
        process.send_signal(signal.SIGTERM)
        status = process.wait(60)
    finally:
        process.kill()
    stderr = log.read_text()
    assert status == 0, stderr[-2000:]
    assert "stopped before streaming: cannot reach Kafka: stopped while Kafka was unreachable" in stderr
    assert not [line for line in stderr.splitlines() if line.startswith("sluice:")]


def test_a_refused_privilege_is_fatal_naming_the_grant(tmp_path: Path) -> None:
    """A connector user without the replication grants is told which GRANT it needs, at once
    (error 1227 used to be taken for a lost source and retried for ever)."""
    user, password = f"noprivs{uuid.uuid4().hex[:4]}", f"pw-{uuid.uuid4().hex}"
    with connect().cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'{HOST}' IDENTIFIED BY '{password}'")
        cur.execute(f"GRANT SELECT ON *.* TO '{user}'@'{HOST}'")
    try:
        text = working_config(tmp_path, f"noprivs{uuid.uuid4().hex[:4]}", "failing")
        text = text.replace(f'user = "{server().user}"', f'user = "{user}"').replace(
            f'password = "{server().password}"', f'password = "{password}"')
        began = time.monotonic()
        done = subprocess.run([SLUICE, "run", "--config", str(config_file(tmp_path, text))], capture_output=True,
                              text=True, timeout=120, check=False)  # fmt: skip
    finally:
        with connect().cursor() as cur:
            cur.execute(f"DROP USER '{user}'@'{HOST}'")
    lines = [line for line in done.stderr.splitlines() if line.startswith("sluice:")]
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-2000:]
    assert "REPLICATION" in lines[0] and ("GRANT" in lines[0] or "grant" in lines[0]), lines[0]
    assert time.monotonic() - began < 60  # not retried
