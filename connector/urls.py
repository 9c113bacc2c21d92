"""`mysql://user:password@host:port` URLs, as `--schema-from` takes them."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from connector.errors import ConfigError
from connector.replica.client import SourceSettings
from connector.secrets import shown_url


def source_settings_of_url(url: str) -> SourceSettings:
    """The server part of the URL (its path, a database name, is the caller's to read)."""
    parts = urlsplit(url)
    shown = repr(shown_url(url)) if parts.netloc else "(a URL not shown: it may hold a password)"
    if parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
        raise ConfigError(f"{shown} is not mysql://user:password@host:port")
    try:
        port = parts.port or 3306
    except ValueError as exc:
        raise ConfigError(f"{shown}: the port is not a number") from exc
    return SourceSettings(
        host=parts.hostname, port=port, user=unquote(parts.username or "root"), password=unquote(parts.password or "")
    )
