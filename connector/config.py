"""The connector's configuration: a TOML file read into frozen, validated sections.

Every key is checked when the file is read: an unknown key, a wrong type or a value
out of range stops the start with a message naming the key and what it accepts.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from connector.errors import ConfigError, PositionError
from connector.filters import TableFilter
from connector.position import position_of_text
from connector.querytext import QueryText
from connector.replica.client import SourceSettings
from connector.secrets import CREDENTIALS, REDACT, URL_CREDENTIALS, resolve, url_password
from connector.urls import source_settings_of_url


@dataclass(frozen=True, slots=True)
class KeyColumns:
    """Columns that key a table without a primary key (`[[source.key_columns]]`): its messages'
    Kafka key and partition, `pkNames`, and its snapshot's chunks. They must be unique on the
    server (a UNIQUE index over NOT NULL columns among them), checked at start."""

    table: str = ""  # "database.table"
    columns: list[str] = field(default_factory=list)

    def name(self) -> tuple[str, str]:
        database, _, table = self.table.partition(".")
        return database, table


@dataclass(frozen=True, slots=True)
class SourceSection:
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    server_id: int = 54321
    include: list[str] = field(default_factory=list)  # regexes on "database.table"; empty: everything
    exclude: list[str] = field(default_factory=list)
    start: str = "current"  # "current", "earliest", "FILE:POS", or "gtid:SET"
    use_gtid: bool = False
    heartbeat_s: float = 5.0
    connect_timeout_s: float = 10.0
    ssl_ca: str = ""
    ssl_cert: str = ""
    ssl_key: str = ""
    # The statement's text (ROWS_QUERY / ANNOTATE_ROWS) in a row message's `sql`: off by default,
    # as Debezium's include.query; a bulk INSERT's text is megabytes. When on, cut to this many bytes.
    include_query: bool = False
    query_max_bytes: int = 4096
    # The compiled kernel takes the usual transactions with no Python per event (connector/lane.py);
    # false: every event takes the Python path, its reference (slower; the same messages).
    compiled_kernel: bool = True
    key_columns: list[KeyColumns] = field(default_factory=list)
    # A DDL statement Sluice cannot read: "stop" (rows of the tables it names stop the connector
    # until `sluice schema set` gives their definition) or "refresh" (re-read them from the server
    # at once: wrong when the stream is behind and they changed since).
    unreadable_ddl: str = "stop"
    # The helper tables of online schema change tools (gh-ost's _T_gho, pt-osc's _T_new, ...:
    # connector/schema/onlineddl.py): "skip" (tracked, never published: their rows copy the
    # table's) or "publish" (as any table the filter captures).
    online_ddl_helpers: str = "skip"

    def keys(self) -> dict[tuple[str, str], tuple[str, ...]]:
        return {entry.name(): tuple(entry.columns) for entry in self.key_columns}

    def query_text(self) -> QueryText:
        return QueryText(self.include_query, self.query_max_bytes)

    def settings(self) -> SourceSettings:
        return SourceSettings(
            host=self.host, port=self.port, user=self.user, password=self.password, server_id=self.server_id,
            ssl_ca=self.ssl_ca or None, ssl_cert=self.ssl_cert or None, ssl_key=self.ssl_key or None,
            heartbeat_s=self.heartbeat_s, connect_timeout_s=self.connect_timeout_s, use_gtid=self.use_gtid,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Route:
    """canal-style dynamic topic: tables whose `database.table` matches go to `topic`."""

    pattern: str = ""
    topic: str = ""


@dataclass(frozen=True, slots=True)
class ColumnRule:
    """Columns of the tables whose `database.table` matches `tables` (a regex, in full): Debezium's
    column.include/exclude.list and column.mask.*, canal's filter.field. Names are matched
    case-insensitively; key columns cannot be excluded."""

    tables: str = ""
    include: list[str] = field(default_factory=list)  # only these columns (empty: all)
    exclude: list[str] = field(default_factory=list)
    mask: list[str] = field(default_factory=list)  # values replaced by `mask_chars` asterisks
    mask_chars: int = 8
    hash: list[str] = field(default_factory=list)  # values replaced by hex SHA-256 of salt + value
    hash_salt: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """How Sluice's Kafka clients authenticate and encrypt (`[kafka.security]`)."""

    protocol: str = "plaintext"  # plaintext, ssl (TLS; mutual with ssl_cert/ssl_key), sasl_plaintext, sasl_ssl
    sasl_mechanism: str = ""  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)
    ssl_ca: str = ""  # the CA that signed the brokers' certificates ("": the system's)
    ssl_cert: str = ""  # a client certificate and its key: mutual TLS
    ssl_key: str = ""
    ssl_key_password: str = field(default="", repr=False)

    def librdkafka(self) -> dict[str, str]:
        """The librdkafka properties these settings stand for."""
        named = {
            "sasl.mechanism": self.sasl_mechanism, "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password, "ssl.ca.location": self.ssl_ca,
            "ssl.certificate.location": self.ssl_cert, "ssl.key.location": self.ssl_key,
            "ssl.key.password": self.ssl_key_password,
        }  # fmt: skip
        return {"security.protocol": self.protocol, **{k: v for k, v in named.items() if v}}

    def java_client(self) -> dict[str, str]:
        """The same settings as the Java client's properties (Spark's Kafka source reads with it):
        the SASL login as a JAAS line, the CA and the client's certificate and key as PEM. The
        key and the JAAS line are secrets: the Spark session redacts them (spark/jobs.py)."""
        props = {"security.protocol": self.protocol.upper()}
        if self.sasl_mechanism:
            module = "plain.PlainLoginModule" if self.sasl_mechanism == "PLAIN" else "scram.ScramLoginModule"
            props["sasl.mechanism"] = self.sasl_mechanism
            props["sasl.jaas.config"] = (
                f"org.apache.kafka.common.security.{module} required"
                f" username={_jaas_quoted(self.sasl_username)} password={_jaas_quoted(self.sasl_password)};"
            )
        if self.ssl_ca:
            props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": self.ssl_ca})
        if self.ssl_cert:
            # A PEM key store by location wants the key and the chain in one file; given inline, two files do.
            props.update({
                "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": Path(self.ssl_cert).read_text(),
                "ssl.keystore.key": Path(self.ssl_key).read_text(),
            })  # fmt: skip
            if self.ssl_key_password:
                props["ssl.key.password"] = self.ssl_key_password
        return props


def _jaas_quoted(value: str) -> str:
    """A JAAS option value: in double quotes, with backslashes and quotes escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True, slots=True)
class KafkaSection:
    bootstrap_servers: str = "127.0.0.1:9092"
    topic_prefix: str = "sluice"
    partitions: int = 3  # for topics Sluice creates
    replication_factor: int = 1
    routes: list[Route] = field(default_factory=list)
    linger_ms: int = 20
    compression: str = "lz4"
    max_in_flight_messages: int = 100_000  # beyond this the reader pauses until Kafka acknowledges
    delivery_timeout_s: float = 300.0  # Kafka acknowledging nothing this long while messages wait: the connector stops
    # The largest message: topics Sluice creates get it as max.message.bytes, the producer's
    # message.max.bytes follows it; an existing topic's own max.message.bytes is its limit.
    max_message_bytes: int = 8 * 1024 * 1024
    oversized: str = "fail"  # a message over its topic's limit: "fail", "truncate" or "dead-letter"
    value_format: str = "avro"  # "avro" or "canal-json" (canal's FlatMessage; keys are JSON then)
    message_rows: str = "row"  # canal-json: "row" (one message per row) or "event" (a rows event's rows)
    # An UPDATE's `old`: "changed" (canal: the changed columns) or "full" (the whole before image);
    # "": the format's own (canal-json: changed; Avro: full, its `old` is the typed before image)
    old: str = ""
    tombstones: bool = False  # a null-valued message under a DELETE's key after it (log compaction)
    topic_config: dict[str, str] = field(default_factory=dict)  # row topics Sluice creates: any topic property
    heartbeat_interval_s: float = 0.0  # > 0: a message on {prefix}._heartbeat at most this often; 0: off
    transaction_topic: bool = False  # BEGIN/END with per-table event counts on {prefix}._transaction
    # Kafka transactions (README, "Exactly once"): every message and the position it leads to
    # committed together, the position of record on {prefix}._positions; readers read_committed.
    exactly_once: bool = False
    transaction_ms: int = 250  # a Kafka transaction commits at the first binlog transaction end after this long
    transaction_max_messages: int = 50_000  # ... or once it holds this many messages
    columns: list[ColumnRule] = field(default_factory=list)  # per-table column include/exclude/mask/hash
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    # librdkafka properties passed through to the producer and the admin client as they are
    # (checked by librdkafka at start); the ones Sluice's guarantees rest on are refused.
    producer: dict[str, str] = field(default_factory=dict)
    admin: dict[str, str] = field(default_factory=dict)

    def client_config(self) -> dict[str, str]:
        """What every Kafka client of this connector needs to reach the brokers."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.security.librdkafka()}


@dataclass(frozen=True, slots=True)
class CheckpointSection:
    redis_url: str = field(default="redis://127.0.0.1:6379/0", repr=False)  # rediss://: TLS
    db_url: str = field(default="mysql://root@127.0.0.1:3306/sluice_meta", repr=False)  # also the schema history
    flush_interval_s: float = 3.0
    redis_ssl_ca: str = ""  # rediss://: the CA that signed Redis's certificate ("": the system's)
    db_ssl_ca: str = ""  # set: the checkpoint database over TLS, verified against this CA
    db_ssl_cert: str = ""  # a client certificate and key for it
    db_ssl_key: str = ""


@dataclass(frozen=True, slots=True)
class AvroSection:
    schemas_dir: str = "schemas"
    schema_registry_url: str = field(default="", repr=False)  # set: Confluent framing through the registry
    schema_registry_user: str = ""  # HTTP basic auth
    schema_registry_password: str = field(default="", repr=False)
    schema_registry_ca: str = ""  # https: the CA that signed the registry's certificate

    def registry_config(self) -> dict[str, str]:
        """confluent-kafka's SchemaRegistryClient settings."""
        conf = {"url": self.schema_registry_url}
        if self.schema_registry_user:
            conf["basic.auth.user.info"] = f"{self.schema_registry_user}:{self.schema_registry_password}"
        if self.schema_registry_ca:
            conf["ssl.ca.location"] = self.schema_registry_ca
        return conf
    subject_name_strategy: str = "topic"  # registry subjects: "topic", "record" or "topic_record"


SPARK_PACKAGES = [
    "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0",
    "org.apache.spark:spark-avro_2.13:4.0.0",
    "io.delta:delta-spark_2.13:4.0.0",
]


@dataclass(frozen=True, slots=True)
class SparkSection:
    """The downstream jobs (`sluice spark mirror|changelog`)."""

    master: str = "local[*]"
    lake_dir: str = ".run/lake"  # Delta tables: mirror/<db>/<table>, changelog/<db>/<table>
    checkpoint_dir: str = ".run/spark-checkpoints"  # Structured Streaming state, one folder per job
    trigger_s: float = 10.0  # micro-batch interval when not --once
    shuffle_partitions: int = 4
    # > 0: a new mirror table whose leading key column is an integer is partitioned by that key
    # divided by this (Iceberg's truncate), so a MERGE rewrites the ranges its batch touches, not
    # the table. 0: unpartitioned (each MERGE may rewrite every file).
    key_range: int = 0
    # Tables of a batch written at once (each its MERGE or append, in its own FAIR scheduler
    # pool), so one table's small jobs overlap another's (spark/README.md: many tables).
    table_threads: int = 8
    # A table whose share of a batch is at most this many messages is decoded in the driver
    # (fastavro) and merged (or appended) there by delta-rs, without Spark's jobs per table
    # (spark/README.md: many tables); more, or a change Delta's Spark writer must make (a new
    # table, a new column), go through Spark. 0: always Spark.
    driver_rows: int = 20_000
    # > 0: a micro-batch reads at most this many messages (the Kafka source's
    # maxOffsetsPerTrigger), so a catch-up comes in batches of this size. 0: all there is.
    max_offsets: int = 0
    metrics_port: int = 0  # the job's Prometheus /metrics (on [metrics] host); 0: off
    packages: list[str] = field(default_factory=lambda: list(SPARK_PACKAGES))
    ivy_settings: str = "deploy/spark/ivysettings.xml"  # "" for Spark's default resolution
    conf: dict[str, str] = field(default_factory=dict)  # any Spark or Delta setting, applied last


@dataclass(frozen=True, slots=True)
class MetricsSection:
    port: int = 0  # Prometheus /metrics, /health, /ready; 0: off
    host: str = "127.0.0.1"  # where they listen: loopback unless asked (a container sets 0.0.0.0)
    progress_s: float = 5.0  # a progress line this often while catching up
    log_format: str = "text"  # "text" or "json"


@dataclass(frozen=True, slots=True)
class HaSection:
    """Several instances of one connector name: one streams, the others wait (Redis lease)."""

    enabled: bool = False
    lease_s: float = 10.0  # a standby takes over at most this long after the leader dies


@dataclass(frozen=True, slots=True)
class SnapshotSection:
    """Rows that existed before the binlog: read in primary-key chunks, published as READ."""

    mode: str = "initial"  # "initial": on the first start, every captured table; "never"
    chunk_size: int = 5000  # rows per chunk (one short consistent read each)


@dataclass(frozen=True, slots=True)
class Config:
    name: str = "sluice"
    source: SourceSection = field(default_factory=SourceSection)
    kafka: KafkaSection = field(default_factory=KafkaSection)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)
    avro: AvroSection = field(default_factory=AvroSection)
    spark: SparkSection = field(default_factory=SparkSection)
    metrics: MetricsSection = field(default_factory=MetricsSection)
    ha: HaSection = field(default_factory=HaSection)
    snapshot: SnapshotSection = field(default_factory=SnapshotSection)

    def table_filter(self) -> TableFilter:
        return TableFilter.of(self.source.include, self.source.exclude, self.meta_database(),
                              skip_helpers=self.source.online_ddl_helpers == "skip")

    def meta_database(self) -> str:
        return urlsplit(self.checkpoint.db_url).path.strip("/")

    def checkpoint_settings(self) -> SourceSettings:
        cp = self.checkpoint
        return replace(source_settings_of_url(cp.db_url), ssl_ca=cp.db_ssl_ca or None,
                       ssl_cert=cp.db_ssl_cert or None, ssl_key=cp.db_ssl_key or None)  # fmt: skip


_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def load_config(path: str | Path, kafka: bool = True) -> Config:
    """The configuration in a TOML file; `kafka` False: a command that never talks to Kafka (tail,
    status, position, snapshot, schema) does not ask for [kafka] bootstrap_servers."""
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"config file {path} is a directory") from exc
    except PermissionError as exc:
        raise ConfigError(f"config file {path} cannot be read (permission denied)") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.start})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    return parse_config(raw, str(path), kafka)


# What a configuration may not leave to the defaults: where the source and Kafka are, and who
# Sluice is on the source (an empty file used to start as root@127.0.0.1).
REQUIRED = (("source", "host"), ("source", "user"), ("kafka", "bootstrap_servers"))


def parse_config(raw: dict[str, Any], where: str = "config", kafka: bool = True) -> Config:
    config: Config = _section(Config, resolve(raw), where, "")
    missing = [f"[{s}] {k}" for s, k in REQUIRED if k not in raw.get(s, {}) and (kafka or s != "kafka")]
    if missing:
        raise ConfigError(f"{where}: {', '.join(missing)} must be set")
    _validate(config, where)
    _register_secrets(config)
    return config


def _register_secrets(config: Config) -> None:
    """Every credential's value (and URL passwords) for REDACT, also ones written in the file."""
    cp, avro, security = config.checkpoint, config.avro, config.kafka.security
    REDACT.add(config.source.password, avro.schema_registry_password, security.sasl_password,
               security.ssl_key_password, url_password(cp.db_url), url_password(cp.redis_url),
               url_password(avro.schema_registry_url))  # fmt: skip


def _section(cls: type[Any], raw: Any, where: str, prefix: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [{prefix.rstrip('.')}] must be a table")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(prefix + k for k in unknown)}; "
            f"accepted: {', '.join(prefix + k for k in fields)}"
        )
    hints = typing.get_type_hints(cls)
    values = {name: _value(hints[name], raw[name], where, prefix + name) for name in raw}
    return cls(**values)


def _value(hint: Any, value: Any, where: str, key: str) -> Any:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _section(hint, value, where, key + ".")
    origin = typing.get_origin(hint)
    if origin is dict:
        return _mapping(value, where, key)
    if origin is list:
        (item,) = typing.get_args(hint)
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            if not isinstance(value, list):
                raise ConfigError(f"{where}: {key} must be an array of tables ([[{key}]])")
            return [_section(item, v, where, f"{key}[{i}].") for i, v in enumerate(value)]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: {key} must be a list of strings, got {value!r}")
        return list(value)
    if isinstance(hint, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        shown = "(a value not shown: a credential)" if _is_secret(key, value) else REDACT(repr(value))
        raise ConfigError(f"{where}: {key} must be {hint.__name__}, got {type(value).__name__} {shown}")
    return value


def _is_secret(key: str, value: object = None) -> bool:
    """A credential key whose value may not be shown: every one but a URL, which is shown with
    its password masked when it parses as one, and shown whole when it holds no user part at
    all (a malformed one with an '@' may hold the password anywhere)."""
    section, _, name = key.rpartition(".")
    if (section, name) not in URL_CREDENTIALS:
        return (section, name) in CREDENTIALS
    return not isinstance(value, str) or ("@" in value and not urlsplit(value).netloc)


def _mapping(value: Any, where: str, key: str) -> dict[str, str]:
    """A TOML table of scalar values, as strings (Kafka takes every topic property as text)."""
    if not isinstance(value, dict) or not all(isinstance(v, (str, int, float, bool)) for v in value.values()):
        raise ConfigError(f"{where}: {key} must be a table of strings or numbers, got {value!r}")
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


OVERSIZED_POLICIES = ("fail", "truncate", "dead-letter")
VALUE_FORMATS = ("avro", "canal-json")
SUBJECT_STRATEGIES = ("topic", "record", "topic_record")
CLEANUP_POLICIES = ("delete", "compact", "compact,delete", "delete,compact")
MIN_MESSAGE_BYTES = 64 * 1024
MAX_MESSAGE_BYTES = 1 << 30  # librdkafka's ceiling for message.max.bytes


def _is_position(text: str) -> bool:
    try:
        position_of_text(text)
    except PositionError:
        return False
    return True


def _validate(config: Config, where: str) -> None:
    src, kafka, cp = config.source, config.kafka, config.checkpoint
    checks = [
        (_NAME.match(config.name) is not None, "name", "1-128 letters, digits, '_', '.', '-'"),
        (1 <= src.port <= 65535, "source.port", "1..65535"),
        (1 <= src.server_id <= 2**32 - 1, "source.server_id", "1..4294967295, unique among the server's replicas"),
        (src.start in ("current", "earliest") or _is_position(src.start), "source.start",
         '"current", "earliest", "FILE:POS" or "gtid:SET" (MySQL uuid:1-5[:tag:1-3], MariaDB 0-1-5)'),
        (0 <= src.heartbeat_s <= 4294967, "source.heartbeat_s", "0 (off) .. 4294967 seconds"),
        (src.connect_timeout_s > 0, "source.connect_timeout_s", "a positive number of seconds"),
        (bool(kafka.bootstrap_servers.strip()), "kafka.bootstrap_servers", "host:port[,host:port...]"),
        (re.fullmatch(r"[A-Za-z0-9._-]{1,200}", kafka.topic_prefix) is not None, "kafka.topic_prefix",
         "letters, digits, '.', '_', '-'"),
        (1 <= kafka.partitions <= 100_000, "kafka.partitions", "1..100000"),
        (1 <= kafka.replication_factor <= 32, "kafka.replication_factor", "1..32"),
        (kafka.compression in ("none", "gzip", "snappy", "lz4", "zstd"), "kafka.compression",
         "none, gzip, snappy, lz4, zstd"),
        (0 <= kafka.linger_ms <= 60_000, "kafka.linger_ms", "0..60000"),
        (100 <= kafka.max_in_flight_messages <= 10_000_000, "kafka.max_in_flight_messages", "100..10000000"),
        (kafka.delivery_timeout_s > 0, "kafka.delivery_timeout_s", "a positive number of seconds"),
        (MIN_MESSAGE_BYTES <= kafka.max_message_bytes <= MAX_MESSAGE_BYTES, "kafka.max_message_bytes",
         f"{MIN_MESSAGE_BYTES}..{MAX_MESSAGE_BYTES} bytes"),
        (kafka.oversized in OVERSIZED_POLICIES, "kafka.oversized", ", ".join(OVERSIZED_POLICIES)),
        (kafka.value_format in VALUE_FORMATS, "kafka.value_format", ", ".join(VALUE_FORMATS)),
        (kafka.message_rows in ("row", "event"), "kafka.message_rows", "row, event"),
        (kafka.message_rows == "row" or kafka.value_format == "canal-json", "kafka.message_rows",
         '"event" only with value_format = "canal-json" (Avro messages hold one row)'),
        (kafka.old in ("", "changed", "full"), "kafka.old", '"", changed, full'),
        (kafka.value_format == "canal-json" or kafka.old != "changed", "kafka.old",
         '"full" or "" with Avro (its `old` is the typed before image: every column)'),
        (kafka.oversized != "truncate" or kafka.value_format == "avro", "kafka.oversized",
         'fail, dead-letter with canal-json (truncate empties typed Avro values)'),
        (not (kafka.tombstones and kafka.message_rows == "event"), "kafka.tombstones",
         'false with message_rows = "event" (such messages have no key)'),
        (kafka.topic_config.get("cleanup.policy", "delete").replace(" ", "") in CLEANUP_POLICIES,
         "kafka.topic_config", f"cleanup.policy one of {', '.join(CLEANUP_POLICIES)}"),
        (all(re.fullmatch(r"[a-z][a-z0-9.]*", k) for k in kafka.topic_config), "kafka.topic_config",
         "Kafka topic property names (lowercase, dotted: retention.ms, cleanup.policy, ...)"),
        (1 <= kafka.transaction_ms <= 600_000, "kafka.transaction_ms", "1..600000 milliseconds"),
        (1 <= kafka.transaction_max_messages <= 10_000_000, "kafka.transaction_max_messages", "1..10000000"),
        (0 <= kafka.heartbeat_interval_s <= 86400, "kafka.heartbeat_interval_s", "0 (off) .. 86400 seconds"),
        (config.avro.subject_name_strategy in SUBJECT_STRATEGIES, "avro.subject_name_strategy",
         ", ".join(SUBJECT_STRATEGIES)),
        (256 <= src.query_max_bytes <= 1 << 20, "source.query_max_bytes", "256..1048576 bytes"),
        (src.unreadable_ddl in ("stop", "refresh"), "source.unreadable_ddl", "stop, refresh"),
        (src.online_ddl_helpers in ("skip", "publish"), "source.online_ddl_helpers", "skip, publish"),
        (_redis_url_ok(cp.redis_url), "checkpoint.redis_url",
         'redis://[:password@]host:port/db, rediss:// for TLS, unix:///path, or "" for no Redis'),
        (re.fullmatch(r"\w{1,64}", config.meta_database()) is not None, "checkpoint.db_url",
         "mysql://user:password@host:port/database"),
        (0.1 <= cp.flush_interval_s <= 3600, "checkpoint.flush_interval_s", "0.1..3600 seconds"),
        (config.spark.trigger_s > 0, "spark.trigger_s", "a positive number of seconds"),
        (0 <= config.metrics.port <= 65535, "metrics.port", "0 (off) or 1..65535"),
        (config.metrics.log_format in ("text", "json"), "metrics.log_format", "text, json"),
        (config.metrics.progress_s > 0, "metrics.progress_s", "a positive number of seconds"),
        (0.5 <= config.ha.lease_s <= 3600, "ha.lease_s", "0.5..3600 seconds"),
        (not config.ha.enabled or bool(cp.redis_url), "ha.enabled", "only with [checkpoint] redis_url (the lease)"),
        (config.snapshot.mode in ("initial", "never"), "snapshot.mode", "initial, never"),
        (1 <= config.snapshot.chunk_size <= 1_000_000, "snapshot.chunk_size", "1..1000000"),
        (1 <= config.spark.shuffle_partitions <= 10_000, "spark.shuffle_partitions", "1..10000"),
        (0 <= config.spark.key_range <= 2**62, "spark.key_range", "0 (off) or a positive width of key values"),
        (1 <= config.spark.table_threads <= 256, "spark.table_threads", "1..256"),
        (config.spark.driver_rows >= 0, "spark.driver_rows", "0 (always Spark) or more"),
        (config.spark.max_offsets >= 0, "spark.max_offsets", "0 (no limit) or more"),
        (0 <= config.spark.metrics_port <= 65535, "spark.metrics_port", "0 (off) or 1..65535"),
    ]  # fmt: skip
    checks += _security_checks(config)
    for ok, key, accepted in checks:
        if not ok:
            value = _shown(config, key)
            shown = "(not shown: a credential)" if _is_secret(key, value) else repr(value)
            raise ConfigError(REDACT(f"{where}: {key} = {shown} is out of range; accepted: {accepted}"))
    _files_exist(config, where)
    _client_properties(config, where)
    config.checkpoint_settings()  # the URL parses
    config.table_filter()  # compiles the patterns: a bad one fails here, naming it
    _validate_key_columns(src.key_columns, where)
    for i, route in enumerate(kafka.routes):
        if not route.pattern or not route.topic:
            raise ConfigError(f"{where}: kafka.routes[{i}] needs both pattern and topic")
        _compile_route(route.pattern, f"{where}: kafka.routes[{i}].pattern")
    for i, rule in enumerate(kafka.columns):
        _check_rule(rule, f"{where}: kafka.columns[{i}]")


PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _security_checks(config: Config) -> list[tuple[bool, str, str]]:
    sec = config.kafka.security
    sasl = sec.protocol.startswith("sasl")
    return [
        (sec.protocol in PROTOCOLS, "kafka.security.protocol", ", ".join(PROTOCOLS)),
        (not sasl or sec.sasl_mechanism in SASL_MECHANISMS, "kafka.security.sasl_mechanism",
         ", ".join(SASL_MECHANISMS) + " (with a sasl_* protocol)"),
        (sasl or not sec.sasl_mechanism, "kafka.security.sasl_mechanism",
         '"" unless protocol is sasl_ssl or sasl_plaintext'),
        (not sasl or bool(sec.sasl_username and sec.sasl_password), "kafka.security.sasl_username",
         "a user name, with sasl_password (or sasl_password_file)"),
        (bool(sec.ssl_cert) == bool(sec.ssl_key), "kafka.security.ssl_cert",
         "set with ssl_key (mutual TLS), or neither"),
        (not config.avro.schema_registry_password or bool(config.avro.schema_registry_user),
         "avro.schema_registry_user", "a user name, with schema_registry_password"),
    ]  # fmt: skip


def _redis_url_ok(url: str) -> bool:
    if not url:
        return True
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return bool(parts.path)
    return parts.scheme in ("redis", "rediss") and bool(parts.hostname)


# Files the configuration names: missing ones stop the start with their key, not later with a traceback.
_FILES = (("source", "ssl_ca"), ("source", "ssl_cert"), ("source", "ssl_key"), ("kafka.security", "ssl_ca"),
          ("kafka.security", "ssl_cert"), ("kafka.security", "ssl_key"), ("checkpoint", "redis_ssl_ca"),
          ("checkpoint", "db_ssl_ca"), ("checkpoint", "db_ssl_cert"), ("checkpoint", "db_ssl_key"),
          ("avro", "schema_registry_ca"))  # fmt: skip


def _files_exist(config: Config, where: str) -> None:
    for section, key in _FILES:
        name = _shown(config, f"{section}.{key}")
        if isinstance(name, str) and name and not Path(name).is_file():
            raise ConfigError(f"{where}: {section}.{key} = {name!r}: no such file")


# librdkafka properties Sluice's guarantees rest on (connector/sink/kafka.py), or that have a key of their own.
_TIMEOUT = "a timed-out message is the one gap the gapless guarantee allows ([kafka] delivery_timeout_s)"
_REFUSED = {
    "enable.idempotence": "retries must neither reorder nor duplicate",
    "acks": "a message counts as written only when all in-sync replicas have it",
    "request.required.acks": "a message counts as written only when all in-sync replicas have it",
    "enable.gapless.guarantee": "a message lost for good must stop the producer, not leave a hole",
    "message.timeout.ms": _TIMEOUT,
    "delivery.timeout.ms": _TIMEOUT,
    "partitioner": "Sluice picks every partition itself (murmur2 of the key, as Java clients)",
    "max.in.flight.requests.per.connection": "above 5 idempotence cannot keep the order",
    "max.in.flight": "above 5 idempotence cannot keep the order",
    "message.max.bytes": "set [kafka] max_message_bytes (topics and the producer follow it)",
    "transactional.id": "set [kafka] exactly_once (the id is the connector's name)",
    "transaction.timeout.ms": "Sluice sizes it for the largest binlog transactions (connector/sink/kafka.py)",
    "bootstrap.servers": "set [kafka] bootstrap_servers",
    "metadata.broker.list": "set [kafka] bootstrap_servers",
    "security.protocol": "set [kafka.security] protocol",
    "sasl.password": "set [kafka.security] sasl_password (or sasl_password_file)",
    "ssl.key.password": "set [kafka.security] ssl_key_password (or ssl_key_password_file)",
}


def _client_properties(config: Config, where: str) -> None:
    """[kafka.producer] and [kafka.admin]: refused where a guarantee rests on the property, else
    checked by librdkafka itself (its own names and values)."""
    for section in ("producer", "admin"):
        props: dict[str, str] = getattr(config.kafka, section)
        for name in props:
            if name in _REFUSED:
                raise ConfigError(f"{where}: kafka.{section}.{name} cannot be set: {_REFUSED[name]}")
        if not props:
            continue
        # librdkafka judges them: only a configuration that sets some loads it.
        from connector.sink.kafka import check_client_properties  # noqa: PLC0415

        problem = check_client_properties(props, producer=section == "producer")
        if problem is not None:
            raise ConfigError(f"{where}: kafka.{section}: {problem}")


def _check_rule(rule: ColumnRule, where: str) -> None:
    if not rule.tables:
        raise ConfigError(f"{where} needs tables (a regex on database.table)")
    _compile_route(rule.tables, f"{where}.tables")
    if rule.include and rule.exclude:
        raise ConfigError(f"{where}: include and exclude together; give one of them")
    if not 1 <= rule.mask_chars <= 255:
        raise ConfigError(f"{where}: mask_chars = {rule.mask_chars} is out of range; accepted: 1..255")
    both = {c.lower() for c in rule.mask} & {c.lower() for c in rule.hash}
    if both:
        raise ConfigError(f"{where}: {', '.join(sorted(both))} both masked and hashed; choose one")


def _validate_key_columns(entries: list[KeyColumns], where: str) -> None:
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(entries):
        database, table = entry.name()
        key = f"{where}: source.key_columns[{i}]"
        if not database or not table or "." in table:
            raise ConfigError(f"{key}.table = {entry.table!r}: give it as database.table")
        if not entry.columns or len(set(c.lower() for c in entry.columns)) != len(entry.columns):
            raise ConfigError(f"{key}.columns = {entry.columns!r}: one or more distinct column names")
        if (database, table) in seen:
            raise ConfigError(f"{key}: {entry.table} is keyed twice")
        seen.add((database, table))


def _compile_route(pattern: str, where: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"{where}: {pattern!r} is not a regular expression ({exc})") from exc


def _shown(config: Config, key: str) -> object:
    value: object = config
    for part in key.split("."):
        value = getattr(value, part)
    return value
