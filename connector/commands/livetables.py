"""`sluice decode --schema-from`: a live server's tables, to name the columns of offline files."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from connector.filters import TableFilter
from connector.replica.client import open_connection
from connector.schema.history import MemoryHistoryStore
from connector.schema.tracker import SchemaTracker
from connector.secrets import expanded_url, scrub_argument
from connector.startup import consistent_capture
from connector.urls import source_settings_of_url

log = logging.getLogger("sluice")


def schema_from(url: str) -> SchemaTracker:
    """A tracker holding a live server's current tables (for naming columns of offline files).
    A password written into the URL is taken out of the process's arguments, with a warning."""
    written = _written_password(url)
    if written:
        scrub_argument(written)
        log.warning("--schema-from: the password was given in the command line, where `ps` shows it to every "
                    "user until it was scrubbed; write it as ${VARIABLE} (in single quotes) instead")  # fmt: skip
    included = TableFilter.of(None, None)
    tracker = SchemaTracker(MemoryHistoryStore(), included)
    with open_connection(source_settings_of_url(expanded_url(url, "--schema-from"))) as conn:
        tracker.schema, _ = consistent_capture(conn, included)
    return tracker


def _written_password(url: str) -> str:
    """The password as written in the URL (not a ${VARIABLE}), or ""."""
    try:
        password = urlsplit(url).password or ""
    except ValueError:
        return ""
    return "" if "${" in password else password
