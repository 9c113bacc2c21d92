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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from connector.errors import ConfigError
from connector.filters import TableFilter
from connector.flat import QueryText
from connector.position import PositionError, position_of_text
from connector.replica.client import SourceSettings
from connector.urls import source_settings_of_url


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
    # A DDL statement Sluice cannot read: "stop" (rows of the tables it names stop the connector
    # until `sluice schema set` gives their definition) or "refresh" (re-read them from the server
    # at once: wrong when the stream is behind and they changed since).
    unreadable_ddl: str = "stop"

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


@dataclass(frozen=True, slots=True)
class CheckpointSection:
    redis_url: str = "redis://127.0.0.1:6379/0"
    db_url: str = "mysql://root@127.0.0.1:3306/sluice_meta"  # also holds the schema history
    flush_interval_s: float = 3.0


@dataclass(frozen=True, slots=True)
class AvroSection:
    schemas_dir: str = "schemas"
    schema_registry_url: str = ""  # set: Confluent framing through the registry; empty: single-object encoding


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
    packages: list[str] = field(default_factory=lambda: list(SPARK_PACKAGES))
    ivy_settings: str = "deploy/spark/ivysettings.xml"  # "" for Spark's default resolution


@dataclass(frozen=True, slots=True)
class MetricsSection:
    port: int = 0  # Prometheus /metrics, /health, /ready; 0: off
    host: str = "0.0.0.0"  # noqa: S104  (a container's metrics are scraped from outside it)
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
        return TableFilter.of(self.source.include, self.source.exclude, self.meta_database())

    def meta_database(self) -> str:
        return urlsplit(self.checkpoint.db_url).path.strip("/")

    def checkpoint_settings(self) -> SourceSettings:
        return source_settings_of_url(self.checkpoint.db_url)


_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def load_config(path: str | Path) -> Config:
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    return parse_config(raw, str(path))


def parse_config(raw: dict[str, Any], where: str = "config") -> Config:
    config: Config = _section(Config, raw, where, "")
    _validate(config, where)
    return config


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
        raise ConfigError(f"{where}: {key} must be {hint.__name__}, got {type(value).__name__} {value!r}")
    return value


OVERSIZED_POLICIES = ("fail", "truncate", "dead-letter")
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
        (256 <= src.query_max_bytes <= 1 << 20, "source.query_max_bytes", "256..1048576 bytes"),
        (src.unreadable_ddl in ("stop", "refresh"), "source.unreadable_ddl", "stop, refresh"),
        (urlsplit(cp.redis_url).scheme in ("redis", "rediss", "unix", ""), "checkpoint.redis_url",
         'redis://host:port/db, or "" for no Redis'),
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
    ]  # fmt: skip
    for ok, key, accepted in checks:
        if not ok:
            raise ConfigError(f"{where}: {key} = {_shown(config, key)!r} is out of range; accepted: {accepted}")
    config.checkpoint_settings()  # the URL parses
    config.table_filter()  # compiles the patterns: a bad one fails here, naming it
    for i, route in enumerate(kafka.routes):
        if not route.pattern or not route.topic:
            raise ConfigError(f"{where}: kafka.routes[{i}] needs both pattern and topic")
        _compile_route(route.pattern, f"{where}: kafka.routes[{i}].pattern")


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
