"""Configuration: every bad key or value stops the start, naming the key and what it accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from connector.config import load_config, parse_config
from connector.errors import ConfigError
from tests.support.units import complete


def test_defaults_and_values(tmp_path: Path) -> None:
    path = tmp_path / "sluice.toml"
    path.write_text(
        'name = "orders"\n[source]\nhost = "db"\nuser = "cdc"\nport = 3307\nserver_id = 99\nheartbeat_s = 2\n'
        'include = ["shop\\\\..*"]\nexclude = ["shop\\\\.tmp_.*"]\n'
        '[kafka]\nbootstrap_servers = "kafka:9092"\ntopic_prefix = "cdc"\n'
        '[[kafka.routes]]\npattern = "shop\\\\.orders_.*"\ntopic = "orders"\n'
        '[checkpoint]\ndb_url = "mysql://cdc:s3cret@meta:3307/cdc_meta"\n'
    )
    config = load_config(path)
    assert (config.name, config.source.host, config.source.port, config.source.heartbeat_s) == (
        "orders",
        "db",
        3307,
        2.0,
    )
    included = config.table_filter()
    assert included("shop", "orders") and not included("shop", "tmp_x") and not included("other", "t")
    assert not included("cdc_meta", "schema_history") and not included("mysql", "user")
    assert config.kafka.routes[0].topic == "orders" and config.kafka.topic_prefix == "cdc"
    meta = config.checkpoint_settings()
    assert (meta.host, meta.port, meta.user, meta.password, config.meta_database()) == (
        "meta",
        3307,
        "cdc",
        "s3cret",
        "cdc_meta",
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"sourse": {}}, "unknown key sourse; accepted: name, source, kafka, checkpoint, avro, spark, metrics, ha"),
        ({"source": {"hots": "x"}}, "unknown key source.hots; accepted: source.host"),
        ({"source": {"port": "3306"}}, "source.port must be int, got str '3306'"),
        ({"source": {"port": 70000}}, "source.port = 70000 is out of range; accepted: 1..65535"),
        ({"source": {"server_id": 0}}, "source.server_id = 0 is out of range"),
        ({"source": {"start": "somewhere"}}, "source.start = 'somewhere' is out of range"),
        ({"source": {"start": "gtid:not-a-uuid:1-5"}}, "source.start = 'gtid:not-a-uuid:1-5' is out of range"),
        ({"source": {"start": "gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:batch_a"}}, "is out of range"),
        ({"source": {"use_gtid": 1}}, "source.use_gtid must be bool"),
        ({"source": {"include": "x"}}, "source.include must be a list of strings"),
        ({"source": {"include": ["("]}}, "[source] include: '(' is not a regular expression"),
        ({"kafka": {"compression": "brotli"}}, "kafka.compression = 'brotli' is out of range; accepted: none, gzip"),
        ({"kafka": {"routes": [{"pattern": "a"}]}}, "kafka.routes[0] needs both pattern and topic"),
        ({"kafka": {"transaction_ms": 0}}, "kafka.transaction_ms = 0 is out of range; accepted: 1..600000"),
        ({"kafka": {"transaction_max_messages": 0}}, "kafka.transaction_max_messages = 0 is out of range"),
        ({"kafka": {"producer": {"transactional.id": "x"}}}, "kafka.producer.transactional.id cannot be set: set "
         "[kafka] exactly_once"),
        ({"kafka": {"routes": [{"pattern": "a", "topic": "t", "x": 1}]}}, "unknown key kafka.routes[0].x"),
        ({"checkpoint": {"db_url": "mysql://h/"}}, "checkpoint.db_url = 'mysql://h/' is out of range"),
        ({"checkpoint": {"db_url": "postgres://h/db"}}, "is not mysql://user:password@host:port"),
        ({"checkpoint": {"flush_interval_s": 0}}, "checkpoint.flush_interval_s = 0.0 is out of range"),
        # A URL is shown with its password masked; a malformed one with a user part not at all.
        ({"checkpoint": {"redis_url": "redis:/x"}}, "checkpoint.redis_url = 'redis:/x' is out of range"),
        ({"checkpoint": {"redis_url": "ftp://:pw@h/0"}}, "checkpoint.redis_url = 'ftp://:***@h/0' is out of range"),
        ({"checkpoint": {"redis_url": "redis:pw@h"}}, "checkpoint.redis_url = (not shown: a credential)"),
        ({"avro": {"schemas": "x"}}, "unknown key avro.schemas; accepted: avro.schemas_dir, avro.schema_registry_url"),
        ({"name": "has space"}, "name = 'has space' is out of range"),
        ({"source": 3}, "[source] must be a table"),
    ],
)
def test_bad_configuration_names_the_key(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(complete(raw))
    assert message in str(info.value)


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[source\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


@pytest.mark.parametrize(
    "start",
    ["gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77:batch_a:1-3:9", "gtid:0-1-5,1-2-9", "mysql-bin.000003:4"],
)
def test_a_start_may_be_a_tagged_gtid_set_a_mariadb_state_or_a_file_position(start: str) -> None:
    assert parse_config(complete({"source": {"start": start}})).source.start == start


def test_kafka_security_as_the_java_clients_properties(tmp_path: Path) -> None:
    """What Spark's Kafka source is given: the same login, CA and client certificate as librdkafka."""
    ca = tmp_path / "ca.pem"
    ca.write_text("CA")
    plain = parse_config(complete({"kafka": {"security": {
        "protocol": "sasl_ssl", "sasl_mechanism": "PLAIN", "sasl_username": "cdc", "sasl_password": 'p"a\\ss',
        "ssl_ca": str(ca)}}})).kafka.security  # fmt: skip
    assert plain.java_client() == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required'
                            ' username="cdc" password="p\\"a\\\\ss";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca),
    }  # fmt: skip
    scram = parse_config(complete({"kafka": {"security": {
        "protocol": "sasl_plaintext", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "cdc",
        "sasl_password": "x"}}})).kafka.security  # fmt: skip
    assert scram.java_client()["sasl.jaas.config"].startswith("org.apache.kafka.common.security.scram.ScramLoginModule")
    assert scram.java_client()["security.protocol"] == "SASL_PLAINTEXT"
    (tmp_path / "c.pem").write_text("CERT")
    (tmp_path / "k.pem").write_text("KEY")
    mtls = parse_config(complete({"kafka": {"security": {
        "protocol": "ssl", "ssl_cert": str(tmp_path / "c.pem"), "ssl_key": str(tmp_path / "k.pem"),
        "ssl_key_password": "kp"}}})).kafka.security  # fmt: skip
    assert mtls.java_client() == {
        "security.protocol": "SSL", "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": "CERT",
        "ssl.keystore.key": "KEY", "ssl.key.password": "kp",
    }  # fmt: skip
    assert parse_config(complete({})).kafka.security.java_client() == {"security.protocol": "PLAINTEXT"}
