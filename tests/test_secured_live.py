"""The pipeline through secured services, as companies run them (deploy/services.sh makes them).

Kafka over SASL_SSL (SCRAM-SHA-512, PLAIN) and over mutual TLS, a Redis that takes only TLS
and a password, a checkpoint user that must use TLS, and the connector's least-privilege user:
every credential reaches Sluice through `${ENV}` or a `*_file` key, as a deployment hands it
over, and the replay of the topics equals SELECT *.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from connector.config import Config, load_config
from tests.live import (
    HOST,
    KAFKA_MTLS,
    KAFKA_SASL,
    KAFKA_SASL_PASSWORD_FILE,
    REDIS_TLS_PASSWORD_FILE,
    REDIS_TLS_PORT,
    TLS,
    checkpoint_user_settings,
    scram_user,
    server,
    source_toml,
)
from tests.test_pipeline_live import assert_replay_equals_source, caught_up, fresh, sluice_run, workload

pytestmark = pytest.mark.live


@dataclass(frozen=True)
class Listener:
    name: str
    bootstrap: str
    security: str  # the [kafka.security] table's keys


LISTENERS = [
    Listener("scram", KAFKA_SASL,
             'protocol = "sasl_ssl"\nsasl_mechanism = "SCRAM-SHA-512"\nsasl_username = "sluice"\n'
             f'sasl_password_file = "{KAFKA_SASL_PASSWORD_FILE}"\nssl_ca = "{TLS / "ca.pem"}"\n'),
    Listener("plain", KAFKA_SASL,
             'protocol = "sasl_ssl"\nsasl_mechanism = "PLAIN"\nsasl_username = "sluice"\n'
             'sasl_password = "${SLUICE_TEST_KAFKA_PASSWORD}"\n' f'ssl_ca = "{TLS / "ca.pem"}"\n'),
    Listener("mtls", KAFKA_MTLS,
             f'protocol = "ssl"\nssl_ca = "{TLS / "ca.pem"}"\nssl_cert = "{TLS / "client.pem"}"\n'
             f'ssl_key = "{TLS / "client-key.pem"}"\n'),
]  # fmt: skip


@pytest.fixture
def secrets_in_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The secrets as a deployment passes them: environment variables (and files, named in the
    configuration). The test process reads the same configuration, so it sets them too."""
    sasl = KAFKA_SASL_PASSWORD_FILE.read_text().strip()
    scram_user("sluice", sasl)
    _, checkpoint_password = checkpoint_user_settings()
    monkeypatch.setenv("SLUICE_TEST_KAFKA_PASSWORD", sasl)
    monkeypatch.setenv("SLUICE_TEST_REDIS_PASSWORD", REDIS_TLS_PASSWORD_FILE.read_text().strip())
    monkeypatch.setenv("SLUICE_TEST_CHECKPOINT_PASSWORD", checkpoint_password)
    monkeypatch.setenv("SLUICE_TEST_SOURCE_PASSWORD", server().password)
    yield


def secured_config(name: str, db: str, tmp: Path, listener: Listener) -> Path:
    """A configuration file whose every service is reached the secured way."""
    checkpoint_url, _ = checkpoint_user_settings()
    source = source_toml(7000 + abs(hash(name)) % 1000).replace(
        f'password = "{server().password}"', 'password = "${SLUICE_TEST_SOURCE_PASSWORD}"'
    )
    path = tmp / "sluice.toml"
    path.write_text(
        f'name = "{name}"\n' + source + f"include = ['{db}\\..*']\n"
        f'[kafka]\nbootstrap_servers = "{listener.bootstrap}"\ntopic_prefix = "{name}"\n'
        f"[kafka.security]\n{listener.security}"
        f'[checkpoint]\ndb_url = "{checkpoint_url}"\ndb_ssl_ca = "{TLS / "ca.pem"}"\n'
        f'redis_url = "rediss://:${{SLUICE_TEST_REDIS_PASSWORD}}@{HOST}:{REDIS_TLS_PORT}/0"\n'
        f'redis_ssl_ca = "{TLS / "ca.pem"}"\nflush_interval_s = 0.5\n'
        f'[avro]\nschemas_dir = "{tmp / "schemas"}"\n'
    )
    return path


@pytest.mark.usefixtures("secrets_in_env")
@pytest.mark.parametrize("listener", LISTENERS, ids=[listener.name for listener in LISTENERS])
def test_the_pipeline_runs_through_secured_kafka_redis_and_checkpoint_database(
    tmp_path: Path, listener: Listener
) -> None:
    name, db = f"sec{listener.name}{uuid.uuid4().hex[:6]}", f"secured_{listener.name}"
    fresh(db)
    path = secured_config(name, db, tmp_path, listener)
    config: Config = load_config(path)
    assert config.kafka.security.sasl_password or listener.name == "mtls"  # read from the file or the environment
    process = sluice_run(path, streaming=True)
    try:
        workload(db, 40, seed=41, pause_s=0.01, alter_at=20)
        caught_up(config)  # the TLS checkpoint user and the TLS Redis hold the position
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    log = path.with_suffix(".log").read_text()
    assert "Traceback" not in log and "authentication" not in log.lower(), log[-2000:]
    assert_replay_equals_source(config, db)
    for variable in ("SLUICE_TEST_KAFKA_PASSWORD", "SLUICE_TEST_REDIS_PASSWORD", "SLUICE_TEST_CHECKPOINT_PASSWORD"):
        assert os.environ[variable] not in log
