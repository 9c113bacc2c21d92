"""The deployment files agree with the connector: docker-compose.yml, deploy/Dockerfile, the Kubernetes manifest.

No container engine runs here, so these tests read the files and check what can be checked:
every service the configuration names exists with the port it uses, the mounted
configuration is valid, and MySQL is started with the settings `sluice run` checks for.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from connector.config import Config, load_config, parse_config
from tests.live import ROOT

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]


def mounted_config(service: str) -> Path:
    for volume in SERVICES[service]["volumes"]:
        source, target, *_ = volume.split(":")
        if target == "/etc/sluice/sluice.toml":
            return ROOT / str(source)
    raise AssertionError(f"{service} mounts no /etc/sluice/sluice.toml")


def container_port(service: str) -> int:
    """The port a service listens on inside the compose network."""
    defaults = {"mysql": 3306, "checkpoint-db": 3306, "redis": 6379}
    if service == "kafka":
        listeners = SERVICES["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
        return int(re.search(r"PLAINTEXT://kafka:(\d+)", listeners)[1])  # type: ignore[index]
    return defaults[service]


def test_compose_config_names_real_services_and_ports() -> None:
    config = load_config(mounted_config("connector"))
    assert (config.source.host, config.source.port) in {(s, container_port(s)) for s in ("mysql",)}
    host, _, port = config.kafka.bootstrap_servers.partition(":")
    assert host in SERVICES and int(port) == container_port(host)
    redis = urlsplit(config.checkpoint.redis_url)
    assert redis.hostname in SERVICES and (redis.port or 6379) == container_port(str(redis.hostname))
    meta = config.checkpoint_settings()
    assert meta.host in SERVICES and meta.port == container_port(meta.host)
    environment = SERVICES[meta.host]["environment"]
    assert (meta.user, meta.password, config.meta_database()) == (
        environment["MARIADB_USER"], environment["MARIADB_PASSWORD"], environment["MARIADB_DATABASE"])  # fmt: skip
    mysql_env = SERVICES["mysql"]["environment"]
    assert (config.source.user, config.source.password) == (mysql_env["MYSQL_USER"], mysql_env["MYSQL_PASSWORD"])
    assert config.avro.schemas_dir in [v.split(":")[1] for v in SERVICES["connector"]["volumes"]]
    assert f"{config.metrics.port}:{config.metrics.port}" in SERVICES["connector"]["ports"]
    assert f":{config.metrics.port}/health" in " ".join(SERVICES["connector"]["healthcheck"]["test"])


def test_mysql_is_started_for_cdc_and_the_user_is_granted() -> None:
    flags = dict(f.lstrip("-").split("=", 1) for f in SERVICES["mysql"]["command"])
    assert flags["binlog-format"] == "ROW" and flags["binlog-row-image"] == "FULL"
    assert flags["binlog-row-metadata"] == "FULL" and flags["gtid-mode"] == "ON" and "log-bin" in flags
    assert SERVICES["mysql"]["image"].startswith("mysql:8.4")
    config = load_config(mounted_config("connector"))
    assert int(flags["server-id"]) != config.source.server_id
    grants = (ROOT / "deploy" / "compose" / "mysql-grants.sql").read_text()
    for privilege in ("REPLICATION SLAVE", "REPLICATION CLIENT", "SELECT"):
        assert privilege in grants
    assert f"'{config.source.user}'@" in grants


def test_services_the_connector_and_spark_job_use() -> None:
    for name in ("mysql", "kafka", "redis", "checkpoint-db", "connector", "spark-mirror"):
        assert name in SERVICES, name
    assert SERVICES["connector"]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert SERVICES["connector"]["command"][0] == "run"
    assert SERVICES["spark-mirror"]["command"][:2] == ["spark", "mirror"]
    assert load_config(mounted_config("spark-mirror")) == load_config(mounted_config("connector"))
    kafka_env = SERVICES["kafka"]["environment"]
    assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft


def test_dockerfile_targets_and_entrypoint() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    targets = re.findall(r"^FROM \S+ AS (\S+)$", dockerfile, re.MULTILINE)
    assert targets == ["connector", "spark"]
    assert {SERVICES["connector"]["build"]["target"], SERVICES["spark-mirror"]["build"]["target"]} == set(targets)
    assert 'ENTRYPOINT ["sluice"]' in dockerfile and "USER sluice" in dockerfile
    for copied in re.findall(r"^COPY (\S+)", dockerfile, re.MULTILINE):
        assert (ROOT / copied).exists(), copied


def test_kubernetes_manifest() -> None:
    documents = list(yaml.safe_load_all((ROOT / "deploy" / "k8s" / "sluice.yaml").read_text()))
    kinds = {d["kind"]: d for d in documents}
    assert set(kinds) == {"ConfigMap", "PersistentVolumeClaim", "Deployment", "Service"}
    config: Config = parse_config(tomllib.loads(kinds["ConfigMap"]["data"]["sluice.toml"]), "k8s ConfigMap")
    deployment = kinds["Deployment"]["spec"]
    # More than one replica only with the lease: one writer per connector name.
    assert deployment["replicas"] == 1 or config.ha.enabled
    container = deployment["template"]["spec"]["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["config"] == "/etc/sluice" and container["args"][-1] == "/etc/sluice/sluice.toml"
    assert mounts["schemas"] == config.avro.schemas_dir
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"]
    assert port == config.metrics.port
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
    assert kinds["Service"]["spec"]["ports"][0]["targetPort"] == "metrics"
