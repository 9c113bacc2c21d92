"""The DDL corpus: statements from the servers' own test suites, for replaying on live servers.

deploy/ddl-corpus.sh fetches Debian's `mysql-testsuite` (the MySQL version the sid root
runs) and `mariadb-test-data` (the MariaDB version apt installed) once per machine into
~/.cache/sluice/ddl-corpus/ (their files stay out of this repository: their licence, and
size). This module picks the DDL test files (`FILES`) and reads mysqltest scripts into the
statements a client would send: `delimiter` changes followed, mysqltest's own commands
(`--error`, `let`, `eval`, `if`/`while` blocks, `perl` and `write_file` bodies, ...) and
statements with mysqltest variables left out, and only statements about tables and
databases kept (plus the session settings DDL depends on: sql_mode, charsets, ...).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("SLUICE_CACHE_DIR", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) /
                            "sluice"))  # fmt: skip
CORPUS = CACHE / "ddl-corpus"

# Test files by suite, as globs under each package's mysql-test directory. The partition files are
# the few that hold every partition command between them (ddl_grammar.sql has each form too):
# EXCHANGE ... [WITH|WITHOUT] VALIDATION, name lists, MariaDB's CONVERT and SYSTEM_TIME partitioning.
FILES = {
    "mysql": [
        "t/alter_table.test", "t/create.test", "t/create_if_not_exists.test", "t/type_*.test",
        "t/invisible_columns.test", "t/rename.test", "t/truncate.test", "t/default.test", "t/ctype_create.test",
        "t/drop.test", "t/alter_table_partition.test", "t/comment_column.test",
        "t/partition_exchange.test", "t/partition_mgm.test", "t/partition_mgm_err.test",
        "suite/innodb/t/instant_add_column_basic.test", "suite/innodb/t/instant_ddl_*.test",
        "suite/innodb/t/instant_add_column_clear.test", "suite/gcol/t/gcol_column_def_options_innodb.test",
    ],
    "mariadb": [
        "main/alter_table.test", "main/alter_table_combinations.test", "main/alter_table_errors.test",
        "main/alter_table_trans.test", "main/alter_table_online.test", "main/alter_table_autoinc-5574.test",
        "suite/innodb/t/alter_table.test", "suite/innodb/t/instant_alter*.test", "suite/innodb/t/instant_drop.test",
        "main/column_compression.test", "suite/versioning/t/create.test", "suite/versioning/t/alter.test",
        "suite/versioning/t/partition.test", "main/partition_alter.test", "main/partition_mgm_err.test",
    ],
}  # fmt: skip
ROOTS = {"mysql": "usr/lib/mysql-test", "mariadb": "usr/share/mysql/mysql-test"}
SUITES = ("mysql", "mariadb", "grammar")
GRAMMAR = Path(__file__).resolve().parents[1] / "ddl_grammar.sql"  # Sluice's own, from the grammar references


@dataclass(frozen=True, slots=True)
class Statement:
    source: str  # "mariadb:main/alter_table.test:123": suite, file, line
    sql: str


def corpus_dir(suite: str) -> Path | None:
    """The extracted package of one suite, None when deploy/ddl-corpus.sh has not fetched it."""
    ready = sorted(CORPUS.glob(f"{suite}-*/.ready"))
    return ready[-1].parent if ready else None


def test_files(suite: str) -> list[Path]:
    if suite == "grammar":
        return [GRAMMAR]
    base = corpus_dir(suite)
    if base is None:
        return []
    root = base / ROOTS[suite]
    found: list[Path] = []
    for pattern in FILES[suite]:
        found += sorted(p for p in root.glob(pattern) if not p.name.endswith(("_debug.test", "-big.test")))
    return list(dict.fromkeys(found))


def files(suite: str) -> list[tuple[str, list[Statement]]]:
    """The suite's kept statements, grouped by file (each file is replayed on its own)."""
    grouped: dict[str, list[Statement]] = {}
    for statement in statements(suite):
        grouped.setdefault(statement.source.rsplit(":", 1)[0], []).append(statement)
    return list(grouped.items())


def statements(suite: str) -> Iterator[Statement]:
    """Every kept statement of the suite's files, file by file, in order."""
    base = corpus_dir(suite)
    for path in test_files(suite):
        name = f"{suite}:{path.name if base is None else path.relative_to(base / ROOTS[suite])}"
        for line, sql in read_script(path.read_text(encoding="utf-8", errors="replace")):
            if kept(sql):
                yield Statement(f"{name}:{line}", sql)


# mysqltest's commands (client/mysqltest.cc, command_names): a chunk starting with one is no SQL.
_COMMANDS = frozenset(
    """connection query echo sleep real_sleep inc dec source disconnect let echo expr while end save_master_pos
    sync_with_master sync_slave_with_master error send reap dirty_close replace_result replace_column ping eval
    enable_query_log disable_query_log enable_result_log disable_result_log enable_connect_log disable_connect_log
    wait_for_slave_to_stop enable_warnings disable_warnings enable_info disable_info enable_session_track_info
    disable_session_track_info enable_metadata disable_metadata enable_async_client disable_async_client exec
    execw exec_in_background delimiter disable_abort_on_error enable_abort_on_error vertical_results
    horizontal_results query_vertical query_horizontal sorted_result partially_sorted_result lowercase_result
    start_timer end_timer character_set disable_ps_protocol enable_ps_protocol disable_view_protocol
    enable_view_protocol disable_reconnect enable_reconnect if disable_parsing enable_parsing replace_regex
    remove_file file_exists write_file copy_file perl die exit skip chmod append_file cat_file diff_files
    send_quit change_user mkdir rmdir list_files list_files_write_file list_files_append_file send_shutdown
    shutdown_server result_format move_file remove_files_wildcard copy_files_wildcard send_eval output
    reset_connection query_attributes assert let_by_copy connect force-rmdir force-cpdir
    disable_testcase enable_testcase disable_cursor_protocol enable_cursor_protocol disable_service_connection
    enable_service_connection replace_numeric_round skip_if_hypergraph""".split()  # noqa: SIM905
)
_BODY_COMMANDS = ("perl", "write_file", "append_file")  # followed by a body up to a terminator line
_DDL = re.compile(
    r"^(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?(?:TABLE|DATABASE|SCHEMA|SEQUENCE)\b"
    r"|CREATE\s+(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX\b"
    r"|ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\b|ALTER\s+(?:DATABASE|SCHEMA)\b"
    r"|DROP\s+(?:TEMPORARY\s+)?(?:TABLES?|DATABASE|SCHEMA|INDEX|SEQUENCE)\b"
    r"|RENAME\s+TABLES?\b|TRUNCATE\b|USE\b)",
    re.IGNORECASE,
)
# Session settings DDL reads (the server logs sql_mode and the charsets with each statement).
_SETTINGS = re.compile(
    r"^SET\s+(?:SESSION\s+|@@SESSION\.|LOCAL\s+|@@LOCAL\.)?(?:sql_mode|NAMES|CHARACTER\s+SET|character_set_\w+|"
    r"collation_\w+|default_storage_engine|storage_engine|explicit_defaults_for_timestamp|"
    r"system_versioning_alter_history|column_compression_\w+|foreign_key_checks|innodb_strict_mode|"
    r"sql_generate_invisible_primary_key|default_collation_for_utf8mb4|alter_algorithm|old_mode)\b",
    re.IGNORECASE,
)
# What a replay must not touch: the servers' own schemas, files on the server's disk.
_AVOID = re.compile(
    r"\b(?:mysql|information_schema|performance_schema|sys)\s*\.|\bDATA\s+DIRECTORY\b|\bINDEX\s+DIRECTORY\b"
    r"|\bTABLESPACE\b|\bUSE\s+(?:mysql|sys|information_schema|performance_schema)\b|\bDATABASE\s+(?:IF\s+\w+\s+)?"
    r"(?:mysql|sys|information_schema|performance_schema)\b|\bENGINE\s*=\s*(?:MERGE|MRG_MyISAM|FEDERATED)\b",
    re.IGNORECASE,
)


def kept(sql: str) -> bool:
    if "$" in _unquoted(sql) or _AVOID.search(sql):
        return False
    return bool(_DDL.match(sql) or _SETTINGS.match(sql))


def _unquoted(sql: str) -> str:
    return re.sub(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|`(?:[^`]|``)*`", "''", sql, flags=re.DOTALL)


def read_script(text: str) -> Iterator[tuple[int, str]]:
    """(line, statement) of a mysqltest script, as the client would send them."""
    reader = _Script(text.splitlines())
    yield from reader.run()


class _Script:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.delimiter = ";"
        self.i = 0

    def run(self) -> Iterator[tuple[int, str]]:
        chunk: list[str] = []
        start = 0
        while self.i < len(self.lines):
            line = self.lines[self.i]
            self.i += 1
            stripped = line.strip()
            if not chunk:
                if self._not_sql(stripped):
                    continue
                start = self.i
            chunk.append(line)
            joined = "\n".join(chunk).rstrip()
            if joined.endswith(self.delimiter):
                chunk = []
                sql = joined[: -len(self.delimiter)].strip()
                if self._command(sql):
                    continue
                if sql:
                    yield start, sql

    def _not_sql(self, stripped: str) -> bool:
        """Lines that are no part of a statement: comments, `--command` lines, blocks."""
        if not stripped or stripped.startswith("#"):
            return True
        if stripped.startswith("--"):
            self._dash_command(stripped[2:].strip())
            return True
        word = re.match(r"[A-Za-z_-]+", stripped)
        first = word[0].lower() if word else ""
        if first in ("if", "while") or stripped.startswith(("}", "{")):
            if first in ("if", "while"):
                self._skip_block(stripped)
            return True
        return False

    def _dash_command(self, command: str) -> None:
        word = command.split(None, 1)
        if not word:
            return
        name = word[0].lower()
        if name == "delimiter" and len(word) > 1:
            self.delimiter = word[1].strip()
        elif name in _BODY_COMMANDS:
            self._skip_body(command)

    def _command(self, sql: str) -> bool:
        """A mysqltest command ended by the delimiter (`let $x = 1;`, `delimiter //;`)."""
        word = re.match(r"[A-Za-z_-]+", sql)
        name = word[0].lower() if word else ""
        if name == "delimiter":
            self.delimiter = sql.split(None, 1)[1].strip() if len(sql.split(None, 1)) > 1 else ";"
            return True
        if name in _BODY_COMMANDS:
            self._skip_body(sql)
            return True
        if name in ("if", "while"):
            self._skip_block(sql)
            return True
        return name in _COMMANDS

    def _skip_body(self, command: str) -> None:
        """perl / write_file / append_file: a body up to a line holding its terminator (EOF)."""
        parts = command.rstrip(self.delimiter).split()
        terminator = parts[-1] if parts[0].lower() == "perl" and len(parts) > 1 else "EOF"
        if parts[0].lower() != "perl" and len(parts) > 2:
            terminator = parts[2]
        while self.i < len(self.lines):
            self.i += 1
            if self.lines[self.i - 1].strip() == terminator:
                return

    def _skip_block(self, first: str) -> None:
        """An if/while block: its statements depend on mysqltest variables; all of it is left out."""
        depth = first.count("{") - first.count("}")
        while depth <= 0 and self.i < len(self.lines):  # the `{` may open on a later line
            line = self.lines[self.i]
            self.i += 1
            depth += line.count("{") - line.count("}")
            if depth > 0 or line.strip().endswith(self.delimiter):
                break
        while depth > 0 and self.i < len(self.lines):
            line = self.lines[self.i]
            self.i += 1
            depth += line.count("{") - line.count("}")
