"""The pipeline through secured services, as companies run them (deploy/services.sh makes them).

Kafka over SASL_SSL (SCRAM-SHA-512, PLAIN) and over mutual TLS, a Redis that takes only TLS
and a password, a checkpoint user that must use TLS, and the connector's least-privilege user:
every credential reaches Sluice through `${ENV}` or a `*_file` key, as a deployment hands it
over, and the replay of the topics equals SELECT *.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from connector.avro.reader import MessageReader
from connector.avro.registry import SchemaDirectory
from connector.config import Config, SparkSection, load_config
from connector.runner import Connector
from spark.examples.read_topic import read_topic
from spark.jobs import read_changes, run, security_options, session
from tests.support.live import (
    HOST,
    KAFKA,
    KAFKA_MTLS,
    KAFKA_SASL,
    KAFKA_SASL_PASSWORD_FILE,
    REDIS_TLS_PASSWORD_FILE,
    REDIS_TLS_PORT,
    ROOT,
    TLS,
    checkpoint_user_settings,
    scram_user,
    server,
    source_toml,
)
from tests.support.pipelines import assert_replay_equals_source, caught_up, fresh, sluice_run, workload
from tests.support.replay import comparable, set_columns, source_rows
from tests.support.spark import mirror_rows

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


@pytest.mark.usefixtures("secrets_in_env")
@pytest.mark.parametrize("listener", LISTENERS, ids=[listener.name for listener in LISTENERS])
def test_the_spark_mirror_reads_through_secured_kafka_and_shows_no_secret(
    tmp_path: Path, listener: Listener, capfd: pytest.CaptureFixture[str]
) -> None:
    """`sluice spark mirror` reads the topics the way the connector wrote them (SASL_SSL, mutual
    TLS): the mirror equals SELECT *, and neither the password nor the client's private key is in
    the query's plan (which Spark logs, shows and writes to its event log) or the process's output."""
    os.environ["TZ"] = "UTC"
    time.tzset()
    name, db = f"secspark{listener.name}{uuid.uuid4().hex[:6]}", f"secured_spark_{listener.name}"
    fresh(db)
    config = load_config(secured_config(name, db, tmp_path, listener))
    ivy = str(ROOT / "deploy" / "spark" / "ivysettings.xml")
    config = replace(config, spark=SparkSection(master="local[2]", lake_dir=str(tmp_path / "lake"),
                                                checkpoint_dir=str(tmp_path / "checkpoints"), shuffle_partitions=2,
                                                ivy_settings=ivy))  # fmt: skip
    Connector(config).run(blocking=False)  # first start: capture, position saved
    workload(db, 30, seed=51)
    Connector(config).run(blocking=False)
    run(config, "mirror", once=True)
    spark = session(config, "test")
    reader = MessageReader(SchemaDirectory(config.avro.schemas_dir))
    for table in ("orders", "order_lines"):
        path = str(Path(config.spark.lake_dir) / "mirror" / db / table)
        sets = set_columns(reader, db, table)
        assert comparable(mirror_rows(spark, path), sets) == comparable(source_rows(db, table, reader), sets)
    # The README's recipe for plain Spark, given the same client settings as options.
    topic = f"{config.kafka.topic_prefix}.{db}.order_lines"
    avsc = str(Path(config.avro.schemas_dir) / db / "order_lines" / "v1.avsc")
    through = read_topic(spark, listener.bootstrap, topic, avsc, options=security_options(config))
    plain = read_topic(spark, KAFKA, topic, avsc)  # the same broker's plaintext listener

    def changes(frame: Any) -> set[tuple[str, int, int, str]]:
        return {(r["source"]["file"], r["source"]["pos"], r["source"]["row"], r["type"]) for r in frame.collect()}

    assert changes(through) == changes(plain) and len(changes(plain)) > 0
    plan = read_changes(spark, config)._jdf.queryExecution().toString()
    secrets = [line for line in (TLS / "client-key.pem").read_text().splitlines() if "-----" not in line][:3]
    secrets += [KAFKA_SASL_PASSWORD_FILE.read_text().strip()]
    shown = "kafka.ssl.keystore.key" if listener.name == "mtls" else "kafka.sasl.jaas.config"
    assert shown in plan  # the option is in the plan: its value is what must not be
    output = capfd.readouterr()
    for secret in secrets:
        assert secret not in plan and secret not in output.out + output.err
