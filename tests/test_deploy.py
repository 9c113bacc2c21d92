"""The deployment files agree with the connector: docker-compose.yml, deploy/Dockerfile, the
Kubernetes manifest, the README's words about them, and deploy/sluice.example.toml.

No container engine runs here, so these tests read the files and check what can be checked:
every service the configuration names exists with the port it uses, the mounted
configuration is valid, MySQL is started with the settings `sluice run` checks for, no
password is written where it would be committed, and the example configuration names
every key the configuration classes accept.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from connector.config import Config, load_config, parse_config
from connector.secrets import CREDENTIALS, URL_CREDENTIALS, url_password
from tests.support.live import ROOT

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
DATA_SERVICES = ("mysql", "checkpoint-db", "redis", "kafka")  # reached on the compose network only


# --- docker-compose.yml -------------------------------------------------------------------


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


def env_files(service: str) -> list[str]:
    files = SERVICES[service].get("env_file", [])
    return [files] if isinstance(files, str) else list(files)


def env_file_values(path: str) -> dict[str, str]:
    """An env file's variables, read from its committed example (the real file is the user's)."""
    lines = (ROOT / f"{path}.example").read_text().splitlines()
    pairs = [line.split("=", 1) for line in lines if line.strip() and not line.startswith("#")]
    return {name: value for name, value in pairs}


def service_env(service: str) -> dict[str, str]:
    """What a service's container is given: its env files, then its `environment:`."""
    env: dict[str, str] = {}
    for path in env_files(service):
        env.update(env_file_values(path))
    env.update(SERVICES[service].get("environment") or {})
    return env


@pytest.fixture
def compose_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The connector container's environment, which its sluice.toml's ${VARIABLES} come from."""
    env = service_env("connector")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def test_compose_config_names_real_services_and_ports(compose_env: dict[str, str]) -> None:
    config = load_config(mounted_config("connector"))
    assert (config.source.host, config.source.port) in {(s, container_port(s)) for s in ("mysql",)}
    host, _, port = config.kafka.bootstrap_servers.partition(":")
    assert host in SERVICES and int(port) == container_port(host)
    redis = urlsplit(config.checkpoint.redis_url)
    assert redis.hostname in SERVICES and (redis.port or 6379) == container_port(str(redis.hostname))
    meta = config.checkpoint_settings()
    assert meta.host in SERVICES and meta.port == container_port(meta.host)
    assert config.avro.schemas_dir in [v.split(":")[1] for v in SERVICES["connector"]["volumes"]]
    assert config.metrics.host == "0.0.0.0"  # the published port reaches the container's address
    assert f"127.0.0.1:{config.metrics.port}:{config.metrics.port}" in SERVICES["connector"]["ports"]
    assert f":{config.metrics.port}/health" in " ".join(SERVICES["connector"]["healthcheck"]["test"])


def test_the_connector_logs_in_with_the_users_the_servers_create(compose_env: dict[str, str]) -> None:
    config = load_config(mounted_config("connector"))
    meta = config.checkpoint_settings()
    env = service_env(meta.host)
    assert (meta.user, meta.password, config.meta_database()) == (
        env["MARIADB_USER"], env["MARIADB_PASSWORD"], env["MARIADB_DATABASE"])  # fmt: skip
    mysql_env = service_env("mysql")
    assert (config.source.user, config.source.password) == (mysql_env["MYSQL_USER"], mysql_env["MYSQL_PASSWORD"])
    # Redis takes its password as configuration on stdin, from the variable the connector's URL uses.
    assert url_password(config.checkpoint.redis_url) == service_env("redis")["REDIS_PASSWORD"]
    assert "requirepass $$REDIS_PASSWORD" in " ".join(SERVICES["redis"]["command"])


def test_mysql_is_started_for_cdc_and_the_user_is_granted(compose_env: dict[str, str]) -> None:
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


def test_services_the_connector_and_spark_job_use(compose_env: dict[str, str]) -> None:
    for name in ("mysql", "kafka", "redis", "checkpoint-db", "connector", "spark-mirror"):
        assert name in SERVICES, name
    assert SERVICES["connector"]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert SERVICES["connector"]["command"][0] == "run"
    assert SERVICES["spark-mirror"]["command"][:2] == ["spark", "mirror"]
    assert load_config(mounted_config("spark-mirror")) == load_config(mounted_config("connector"))
    assert env_files("spark-mirror") == env_files("connector")  # the same ${VARIABLES}
    kafka_env = SERVICES["kafka"]["environment"]
    assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft


def strings(node: object) -> Iterator[str]:
    """Every string in a parsed YAML document, keys included."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from strings(key)
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)


def test_compose_file_holds_no_password() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    for path in {p for name in SERVICES for p in env_files(name)}:
        for variable, value in env_file_values(path).items():
            assert value not in text, f"{variable}'s value is written in docker-compose.yml"
    for name, service in SERVICES.items():
        for variable in service.get("environment") or {}:
            assert not re.search(r"PASSWORD|SECRET|TOKEN", variable), f"{name}: {variable} in environment:"
    for line in strings(COMPOSE):
        # A password on a command line: mysqladmin -pX, --password=X, redis-server --requirepass X.
        assert not re.search(r"(^|\s)-p\S|--password|--requirepass", line), line


def test_compose_passwords_come_from_git_ignored_env_files() -> None:
    ignored = [p for p in (ROOT / ".gitignore").read_text().splitlines() if p and not p.startswith(("#", "!"))]
    with_passwords = ("mysql", "checkpoint-db", "redis", "connector", "spark-mirror")
    for name in with_passwords:
        assert env_files(name), f"{name} has no env_file"
    for path in {p for name in with_passwords for p in env_files(name)}:
        assert any(fnmatch(path, pattern) for pattern in ignored), f"{path} is not git-ignored"
        assert not any(fnmatch(f"{path}.example", pattern) for pattern in ignored), f"{path}.example is ignored"
        for variable, value in env_file_values(path).items():
            assert value.startswith("change-me"), f"{path}.example: {variable} is not a placeholder"
    # The connector is not given the servers' root passwords.
    assert not [v for v in service_env("connector") if "ROOT" in v]


def test_no_database_port_is_published() -> None:
    for name in DATA_SERVICES:
        assert "ports" not in SERVICES[name], f"{name} publishes a port"
    for name, service in SERVICES.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond the host's loopback"


def credentials(raw: dict[str, Any]) -> dict[str, str]:
    """The credential keys a raw TOML configuration sets, dotted, with their values as written."""
    found = {}
    for section, key in CREDENTIALS:
        table: Any = raw
        for part in section.split("."):
            table = table.get(part, {}) if isinstance(table, dict) else {}
        if isinstance(table, dict) and key in table:
            found[f"{section}.{key}"] = table[key]
    return found


def assert_only_placeholders(raw: dict[str, Any], where: str) -> set[str]:
    """Every credential of `raw` is a ${VARIABLE} (a URL's password part): the variables named."""
    found = credentials(raw)
    assert {"source.password", "checkpoint.db_url", "checkpoint.redis_url"} <= set(found), where
    for dotted, value in found.items():
        section, _, key = dotted.rpartition(".")
        secret = urlsplit(value).password if (section, key) in URL_CREDENTIALS else value
        assert secret is not None and PLACEHOLDER.fullmatch(secret), f"{where}: {dotted} = {value!r}"
    return {name for value in found.values() for name in PLACEHOLDER.findall(value)}


def test_compose_config_takes_every_credential_from_the_connectors_env_file() -> None:
    raw = tomllib.loads(mounted_config("connector").read_text())
    variables = assert_only_placeholders(raw, "deploy/compose/sluice.toml")
    assert variables <= set(service_env("connector")), variables - set(service_env("connector"))


# --- deploy/Dockerfile --------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    base: str
    instructions: list[tuple[str, str]]  # (INSTRUCTION, its arguments), continuation lines joined

    def args(self, instruction: str) -> list[str]:
        return [args for name, args in self.instructions if name == instruction]


def dockerfile_stages() -> dict[str, Stage]:
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    lines = [ln for ln in re.sub(r"\\\n", " ", text).splitlines() if ln.strip() and not ln.startswith("#")]
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line in lines:
        instruction, _, args = line.strip().partition(" ")
        if instruction == "FROM":
            base, _, name = args.partition(" AS ")
            current = stages[name] = Stage(base, [])
        elif current is not None:
            current.instructions.append((instruction, args))
    return stages


def lineage(stages: dict[str, Stage], name: str) -> list[str]:
    """A stage, the stage it is built FROM, and so on, down to an image."""
    chain = [name]
    while chain[-1] in stages:
        chain.append(stages[chain[-1]].base)
    return chain


BUILDERS = ("builder", "spark-builder")
RUNTIMES = ("connector", "spark")
COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|cc|build-essential|libc6-dev|python3?-dev)\b")
USER_ID = 10001


def test_dockerfile_targets_and_entrypoint() -> None:
    stages = dockerfile_stages()
    assert list(stages) == ["builder", "spark-builder", "connector", "spark"]
    assert {SERVICES["connector"]["build"]["target"], SERVICES["spark-mirror"]["build"]["target"]} == set(RUNTIMES)
    assert stages["connector"].args("ENTRYPOINT") == ['["sluice"]']
    for stage in stages.values():
        for copied in stage.args("COPY"):
            assert (ROOT / copied.split()[0]).exists(), copied


def test_dockerfile_builds_wheels_and_the_runtime_installs_only_them() -> None:
    stages = dockerfile_stages()
    builder = " ".join(stages["builder"].args("RUN"))
    assert COMPILERS.search(builder), "the builder installs no C compiler"
    assert "pip wheel --wheel-dir /wheels ." in builder
    assert {"pyproject.toml", "connector"} <= {c.split()[0] for c in stages["builder"].args("COPY")}
    # The wheel is built for the runtime's Python: the same image under both.
    assert lineage(stages, "builder")[-1] == lineage(stages, "connector")[-1]
    for name in RUNTIMES:
        assert not set(lineage(stages, name)) & set(BUILDERS), f"{name} is built FROM a builder"
        for run in stages[name].args("RUN"):
            assert not COMPILERS.search(run), f"{name} installs a compiler: {run}"
            if "pip install" in run:
                assert "--no-index --find-links /wheels" in run, run
                mount = re.search(r"--mount=type=bind,from=(\S+),source=/wheels,target=/wheels", run)
                assert mount is not None and mount[1] in BUILDERS, run
        assert not [c for c in stages[name].args("COPY") if c.split()[0] in ("connector", "spark", ".")]
    assert any("pip install" in run for run in stages["connector"].args("RUN"))


def test_dockerfile_runs_as_a_user_that_is_not_root() -> None:
    stages = dockerfile_stages()
    created = " ".join(stages["connector"].args("RUN"))
    assert f"useradd --system --uid {USER_ID} --gid {USER_ID}" in created
    assert f"install -d -o {USER_ID} -g {USER_ID} /var/lib/sluice/schemas" in created  # a volume's owner
    for name in RUNTIMES:
        users = [u for stage in reversed(lineage(stages, name)[:-1]) for u in stages[stage].args("USER")]
        assert users and users[-1] == f"{USER_ID}:{USER_ID}", f"{name} runs as {users[-1:]}"


# --- deploy/k8s/sluice.yaml ---------------------------------------------------------------


def manifest() -> dict[str, dict[str, Any]]:
    documents = list(yaml.safe_load_all((ROOT / "deploy" / "k8s" / "sluice.yaml").read_text()))
    return {d["kind"]: d for d in documents}


def secret_refs(container: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The container's environment variables set from a Secret: name -> secretKeyRef."""
    return {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container.get("env", []) if "valueFrom" in e}


def container_of(kinds: dict[str, dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = kinds["Deployment"]["spec"]["template"]["spec"]["containers"]
    return containers[0]


@pytest.fixture
def k8s_config(monkeypatch: pytest.MonkeyPatch) -> Config:
    """The ConfigMap's configuration, with the environment the Deployment gives it from the Secret."""
    kinds = manifest()
    values = kinds["Secret"]["stringData"]
    for name, ref in secret_refs(container_of(kinds)).items():
        assert ref["key"] in values, f"{name}: the Secret has no key {ref['key']}"
        monkeypatch.setenv(name, values[ref["key"]])
    return parse_config(tomllib.loads(kinds["ConfigMap"]["data"]["sluice.toml"]), "k8s ConfigMap")


def test_kubernetes_manifest(k8s_config: Config) -> None:
    kinds = manifest()
    assert set(kinds) == {"Secret", "ConfigMap", "PersistentVolumeClaim", "Deployment", "Service"}
    deployment = kinds["Deployment"]["spec"]
    # More than one replica, or a rollout's overlap, only with the lease: one writer per connector name.
    assert deployment["replicas"] == 1 or k8s_config.ha.enabled
    assert deployment["strategy"]["type"] == "Recreate" or k8s_config.ha.enabled
    pod = deployment["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == USER_ID
    container = container_of(kinds)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["config"] == "/etc/sluice" and container["args"][-1] == "/etc/sluice/sluice.toml"
    assert mounts["schemas"] == k8s_config.avro.schemas_dir
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"]
    assert port == k8s_config.metrics.port and k8s_config.metrics.host == "0.0.0.0"
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}
    # A standby is never /ready: with one, a Deployment would never be available nor finish a rollout.
    ready = "/ready" if deployment["replicas"] == 1 else "/health"
    assert container["readinessProbe"]["httpGet"] == {"path": ready, "port": "metrics"}
    assert kinds["Service"]["spec"]["ports"][0]["targetPort"] == "metrics"


def test_kubernetes_credentials_come_from_the_secret(k8s_config: Config) -> None:
    kinds = manifest()
    secret = kinds["Secret"]
    values: dict[str, str] = secret["stringData"]
    assert values and all(v.startswith("change-me") for v in values.values())
    text = kinds["ConfigMap"]["data"]["sluice.toml"]
    variables = assert_only_placeholders(tomllib.loads(text), "k8s ConfigMap")
    assert not [v for v in values.values() if v in text]
    container = container_of(kinds)
    refs = secret_refs(container)
    assert variables <= set(refs), variables - set(refs)
    for name in variables:
        assert refs[name]["name"] == secret["metadata"]["name"] and refs[name]["key"] in values, name
    assert not [e for e in container.get("env", []) if "value" in e and e["name"] in variables]
    assert k8s_config.source.password == values[refs["SLUICE_SOURCE_PASSWORD"]["key"]]


NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4}


def readme_statements() -> list[str]:
    """The README's paragraphs and list items that say what the Kubernetes manifest runs."""
    readme = (ROOT / "README.md").read_text()
    pieces = re.split(r"\n\s*\n|\n(?=- )", readme)
    return [" ".join(p.split()) for p in pieces if "deploy/k8s/sluice.yaml" in p and "replica" in p]


def test_readme_says_what_the_manifest_runs(k8s_config: Config) -> None:
    deployment = manifest()["Deployment"]["spec"]
    strategy = deployment["strategy"]
    container = deployment["template"]["spec"]["containers"][0]
    statements = readme_statements()
    assert len(statements) >= 2, statements  # the Deploying section and the high-availability item
    for said in statements:
        counts = re.findall(r"\b(one|two|three|four|\d+) replicas?\b", said)
        assert counts and {NUMBERS.get(c) or int(c) for c in counts} == {deployment["replicas"]}, said
        assert set(re.findall(r"\b(Recreate|RollingUpdate)\b", said)) <= {strategy["type"]}, said
        assert ("[ha] enabled" in said) == k8s_config.ha.enabled, said
        for key, value in re.findall(r"\b(maxSurge|maxUnavailable) (\d+)", said):
            assert strategy["rollingUpdate"][key] == int(value), said
        for probe in re.findall(r"readiness probe is `(/\w+)`", said):
            assert container["readinessProbe"]["httpGet"]["path"] == probe, said


# --- deploy/sluice.example.toml -----------------------------------------------------------

EXAMPLE = ROOT / "deploy" / "sluice.example.toml"
# Set for `make run`'s demo rather than left at their defaults (the example says so).
DEMO_VALUES = {"name", "source.include"}
HEADER = re.compile(r"^(?:# )?\[\[?([\w.]+)\]\]?")
KEY = re.compile(r"^(?:# )?([A-Za-z_]\w*) = ")


def _dataclass(hint: Any) -> type[Any] | None:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            return item  # an array of tables: [[section.key]]
    return None


def config_keys(cls: type[Any] = Config, prefix: str = "") -> set[str]:
    """Every key the parser accepts, dotted: a section's fields under its name (as connector/config.py
    walks them: a dataclass field is a table, a list of dataclasses an array of tables)."""
    keys: set[str] = set()
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        table = _dataclass(hints[field.name])
        keys |= config_keys(table, f"{prefix}{field.name}.") if table else {prefix + field.name}
    return keys


ACCEPTED = config_keys() | {f"{section}.{key}_file" for section, key in CREDENTIALS}


def example_lines() -> dict[str, str]:
    """Each key the example names, set or commented out ("# key = "), dotted by its [section]."""
    section, found = "", {}
    for line in EXAMPLE.read_text().splitlines():
        if header := HEADER.match(line):
            section = header[1] + "."
        elif key := KEY.match(line):
            assert section + key[1] not in found, f"{section}{key[1]} twice"
            found[section + key[1]] = line
    return found


def toml_keys(raw: dict[str, Any], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for name, value in raw.items():
        if prefix + name in ACCEPTED or not isinstance(value, (dict, list)):
            keys.add(prefix + name)
        else:
            for table in value if isinstance(value, list) else [value]:
                keys |= toml_keys(table, f"{prefix}{name}.")
    return keys


def test_example_names_every_key_and_only_real_ones() -> None:
    named = set(example_lines())
    assert not ACCEPTED - named, f"missing from the example: {sorted(ACCEPTED - named)}"
    assert not named - ACCEPTED, f"not keys Sluice accepts: {sorted(named - ACCEPTED)}"
    # What TOML reads is what the lines above were read as (the header and key patterns miss nothing).
    assert toml_keys(tomllib.loads(EXAMPLE.read_text())) <= named
    assert {"source.connect_timeout_s", "metrics.host", "spark.packages", "kafka.security.sasl_password"} <= named


def test_example_keys_each_have_a_comment_and_commented_ones_parse() -> None:
    for key, line in example_lines().items():
        assert re.search(r"\s#\s", line[2:] if line.startswith("# ") else line), f"{key} has no comment"
        if line.startswith("# "):
            tomllib.loads(line[2:])  # a commented-out key is valid TOML once uncommented


def differing(config: object, default: object, prefix: str = "") -> set[str]:
    """The keys whose values differ between two configurations (sections walked, not compared)."""
    keys: set[str] = set()
    for field in dataclasses.fields(config):  # type: ignore[arg-type]
        ours, theirs = getattr(config, field.name), getattr(default, field.name)
        if dataclasses.is_dataclass(ours):
            keys |= differing(ours, theirs, f"{prefix}{field.name}.")
        elif ours != theirs:
            keys.add(prefix + field.name)
    return keys


def test_example_is_valid_and_holds_the_defaults() -> None:
    config = load_config(EXAMPLE)
    assert differing(config, Config()) == DEMO_VALUES
    lines = example_lines()
    for key in DEMO_VALUES:
        assert "(default: " in lines[key], f"{key}: the example does not give its default"


@pytest.mark.live
def test_each_server_keeps_its_files_under_its_run_folder(server: Any) -> None:
    """deploy/services.sh: data, binlogs and temporary files (#sql-temptable-*) in the server's own
    folder under .run/, so two bring-ups at once (two checkouts) share nothing in /tmp."""
    from tests.support.live import RUN, connect  # noqa: PLC0415  (the live half of a file of static checks)

    with connect().cursor() as cur:
        cur.execute("SELECT @@datadir, @@tmpdir, @@log_bin_basename")
        row = cur.fetchone()
    assert row is not None
    folder = (RUN / server.name).resolve()
    for path in row:
        assert Path(str(path)).resolve().is_relative_to(folder), (path, folder)
