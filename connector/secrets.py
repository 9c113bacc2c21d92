"""Credentials in the configuration: where they may come from, and never where they go.

Every credential key (`CREDENTIALS`) takes its value as written, from `${NAME}` (an
environment variable, substituted in place; inside a URL's user part, percent-encoded), or
from a file named by the same key with `_file` (its contents less a trailing newline: how
Kubernetes and Docker hand secrets over). A missing variable or file is a configuration
error that names the key and the variable or file, never a value.

What those keys hold, and the password of every URL, is registered with `REDACT`, the one
redaction function every log line (librdkafka's and httpx's included), error, status and
position output goes through.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from connector.errors import ConfigError

# (section, key) of every credential; the URL ones may carry a password in their user part.
URL_CREDENTIALS = frozenset({("checkpoint", "db_url"), ("checkpoint", "redis_url"), ("avro", "schema_registry_url")})
CREDENTIALS = URL_CREDENTIALS | frozenset({
    ("source", "password"), ("avro", "schema_registry_password"), ("kafka.security", "sasl_password"),
    ("kafka.security", "ssl_key_password"),
})  # fmt: skip

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# scheme://user:password@ -> scheme://user:***@ (any URL, registered or not)
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]*:)[^\s/@]+@")
_MASK = "***"
_SHORTEST = 4  # shorter values are not replaced in free text (they would mangle every line)


def resolve(raw: dict[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The raw TOML with every credential's `${NAME}` and `_file` form read."""
    env = os.environ if environ is None else environ
    out = dict(raw)
    for section, key in sorted(CREDENTIALS):
        table = _table(out, section)
        if table is None:
            continue
        value = _value_of(table, section, key, env)
        if value is not None:
            table[key] = value
            REDACT.add(value if (section, key) not in URL_CREDENTIALS else url_password(value))
    return out


def _table(raw: dict[str, Any], section: str) -> dict[str, Any] | None:
    """The (copied, so the caller's dict is untouched) table at a dotted section path."""
    parent = raw
    for part in section.split("."):
        child = parent.get(part)
        if not isinstance(child, dict):
            return None
        child = parent[part] = dict(child)
        parent = child
    return parent


def _value_of(table: dict[str, Any], section: str, key: str, env: Mapping[str, str]) -> str | None:
    name = f"{section}.{key}"
    from_file = table.pop(f"{key}_file", None)
    if from_file is not None:
        if key in table:
            raise ConfigError(f"{name} and {name}_file are both set; keep one")
        if not isinstance(from_file, str):
            raise ConfigError(f"{name}_file must be a file name")
        try:
            return Path(from_file).read_text(encoding="utf-8").removesuffix("\n").removesuffix("\r")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{name}_file: cannot read {from_file} ({type(exc).__name__})") from exc
    value = table.get(key)
    if not isinstance(value, str) or "${" not in value:
        return value if isinstance(value, str) else None
    return _substituted(value, name, (section, key) in URL_CREDENTIALS, env)


def _substituted(value: str, name: str, url: bool, env: Mapping[str, str]) -> str:
    whole = _PLACEHOLDER.fullmatch(value) is not None

    def variable(match: re.Match[str]) -> str:
        found = env.get(match[1])
        if found is None:
            raise ConfigError(f"{name}: the environment variable {match[1]} is not set")
        return quote(found, safe="") if url and not whole else found

    return _PLACEHOLDER.sub(variable, value)


def expanded_url(url: str, name: str, environ: Mapping[str, str] | None = None) -> str:
    """A URL given on the command line with `${NAME}` placeholders (quoted against the shell):
    the secret stays out of the process's arguments; registered with REDACT."""
    value = _substituted(url, name, True, os.environ if environ is None else environ) if "${" in url else url
    REDACT.add(url_password(value))
    return value


def scrub_argument(text: str) -> bool:
    """Overwrite `text` wherever it stands in this process's arguments (/proc/self/cmdline, what
    `ps` and /proc show every user), as the mysql client does with a -p password; False where
    it could not (not Linux, no such text). The arguments' memory is the process's own: it is
    written through /proc/self/mem, each byte of `text` becoming an `x`."""
    secret = text.encode()
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48 and 49 (proc(5))
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            arguments = mem.read(end - start)
            if not secret or secret not in arguments:
                return False
            mem.seek(start)
            mem.write(arguments.replace(secret, b"x" * len(secret)))
    except (OSError, IndexError, ValueError):
        return False
    return True


# Account statements, and the literals in them that are passwords (or their hashes): MariaDB
# logs `CREATE USER u IDENTIFIED BY 'secret'` as it was written (MySQL logs a hash, AS '...').
_ACCOUNT_STATEMENT = re.compile(
    r"^\s*(?:/\*.*?\*/\s*)*(?:CREATE\s+(?:OR\s+REPLACE\s+)?USER|ALTER\s+USER|GRANT|SET\s+PASSWORD)\b",
    re.IGNORECASE | re.DOTALL,
)
_LITERAL = r"(?:'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\")"
# In them, a literal after BY, AS or USING (IDENTIFIED [WITH|VIA plugin] BY|AS|USING ..., MariaDB's
# ... OR plugin USING ...), inside PASSWORD(...), or after SET PASSWORD's `=`.
_PASSWORD_LITERAL = re.compile(
    rf"(\b(?:BY|AS|USING)\s+(?:PASSWORD\s*\(?\s*)?|\bPASSWORD\s*\(\s*|=\s*(?:PASSWORD\s*\(\s*)?)({_LITERAL})",
    re.IGNORECASE,
)


def without_passwords(sql: str) -> str:
    """An account statement with each password literal (or hash) written as '***': the text the
    binlog holds of CREATE USER, ALTER USER, GRANT and SET PASSWORD, as Sluice shows and publishes
    it. Other statements are returned as they are."""
    if not _ACCOUNT_STATEMENT.match(sql):
        return sql
    return _PASSWORD_LITERAL.sub(lambda m: m.group(1) + "'***'", sql)


def url_password(url: str) -> str:
    """The password in a URL's user part (decoded), or "" ."""
    try:
        return unquote(urlsplit(url).password or "")
    except ValueError:
        return ""


def shown_url(url: str) -> str:
    """A URL as logs and status show it: its password left out."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


class Redactor:
    """Replaces every registered secret, and any URL's password, with ***."""

    def __init__(self) -> None:
        self._secrets: set[str] = set()
        self._ordered: list[str] = []

    def add(self, *values: str) -> None:
        for value in values:
            if len(value) < _SHORTEST:
                continue
            self._secrets.update((value, quote(value, safe=""), quote(value)))
        self._ordered = sorted(self._secrets, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        text = _USERINFO.sub(rf"\1{_MASK}@", text)
        for secret in self._ordered:
            if secret in text:
                text = text.replace(secret, _MASK)
        return text


REDACT = Redactor()


class RedactingFormatter(logging.Formatter):
    """Another formatter's lines, exceptions included, through REDACT."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return REDACT(self.inner.format(record))
