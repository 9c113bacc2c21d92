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

from connector.errors import ConfigError
from connector.filters import TableFilter
from connector.replica.client import SourceSettings


@dataclass(frozen=True, slots=True)
class SourceSection:
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    server_id: int = 54321
    start: str = "current"  # "current", "earliest", "FILE:POS", or "gtid:SET"
    use_gtid: bool = False
    heartbeat_s: float = 5.0
    connect_timeout_s: float = 10.0
    ssl_ca: str = ""
    ssl_cert: str = ""
    ssl_key: str = ""

    def settings(self) -> SourceSettings:
        return SourceSettings(
            self.host, self.port, self.user, self.password, self.server_id, self.ssl_ca or None,
            self.ssl_cert or None, self.ssl_key or None, self.heartbeat_s, self.connect_timeout_s, self.use_gtid,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class FilterSection:
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CheckpointSection:
    """The checkpoint database (schema history now, positions with the pipeline)."""

    database: str = "sluice_meta"
    host: str = ""  # empty: the source server
    port: int = 0
    user: str = ""
    password: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class Config:
    name: str = "sluice"
    source: SourceSection = field(default_factory=SourceSection)
    filter: FilterSection = field(default_factory=FilterSection)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)

    def table_filter(self) -> TableFilter:
        return TableFilter.of(self.filter.include, self.filter.exclude, self.checkpoint.database)

    def checkpoint_settings(self) -> SourceSettings:
        src, cp = self.source, self.checkpoint
        return dataclasses.replace(
            src.settings(), host=cp.host or src.host, port=cp.port or src.port, user=cp.user or src.user,
            password=cp.password if cp.user else src.password,
        )  # fmt: skip


_START = re.compile(r"^(current|earliest|[^:\s]+:\d+|gtid:.+)$")
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


def _validate(config: Config, where: str) -> None:
    src = config.source
    checks = [
        (_NAME.match(config.name) is not None, "name", "1-128 letters, digits, '_', '.', '-'"),
        (1 <= src.port <= 65535, "source.port", "1..65535"),
        (1 <= src.server_id <= 2**32 - 1, "source.server_id", "1..4294967295, unique among the server's replicas"),
        (_START.match(src.start) is not None, "source.start", '"current", "earliest", "FILE:POS" or "gtid:SET"'),
        (0 <= src.heartbeat_s <= 4294967, "source.heartbeat_s", "0 (off) .. 4294967 seconds"),
        (src.connect_timeout_s > 0, "source.connect_timeout_s", "a positive number of seconds"),
        (re.fullmatch(r"\w{1,64}", config.checkpoint.database) is not None, "checkpoint.database", "a database name"),
    ]
    for ok, key, accepted in checks:
        if not ok:
            raise ConfigError(f"{where}: {key} = {_shown(config, key)!r} is out of range; accepted: {accepted}")
    config.table_filter()  # compiles the patterns: a bad one fails here, naming it


def _shown(config: Config, key: str) -> object:
    value: object = config
    for part in key.split("."):
        value = getattr(value, part)
    return value
