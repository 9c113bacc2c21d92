"""The DDL parser never raises: every statement of the corpus, and mangled copies of each, read
to changes or to an Unreadable value (tests/support/ddlcorpus.py; the corpus is fetched by `make services`)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from connector.schema.ddl import Unreadable, read_ddl
from connector.schema.model import Database, Schema
from connector.schema.sqltokens import Session
from tests.support import ddlcorpus
from tests.support.ddlcorpus import read_script

SESSIONS = {"mysql": Session(False, 90704, server_charset="utf8mb4"), "mariadb": Session(True, 101119, 0, "utf8mb4")}


def mangled(sql: str, rng: random.Random) -> Iterator[str]:
    """The statement cut short, with a stretch dropped, and with a stretch repeated."""
    if len(sql) < 4:
        return
    cut = rng.randrange(1, len(sql))
    a, b = sorted(rng.sample(range(len(sql)), 2))
    yield sql[:cut]
    yield sql[:a] + sql[b:]
    yield sql[:b] + sql[a:b] + sql[b:]


def read_all(statements: list[str], session: Session, seed: int) -> int:
    rng = random.Random(seed)
    schema = Schema(databases={"test": Database("test", "utf8mb4")})
    for sql in statements:
        for text in mangled(sql, rng):
            assert isinstance(read_ddl(schema.copy(), text, "test", session), (list, Unreadable)), text
        assert isinstance(read_ddl(schema, sql, "test", session), (list, Unreadable)), sql
    return len(statements)


def test_the_grammar_file_and_its_mangled_copies_never_raise() -> None:
    statements = [sql for _, sql in read_script(ddlcorpus.GRAMMAR.read_text(encoding="utf-8"))]
    for seed, session in enumerate(SESSIONS.values()):
        assert read_all(statements, session, seed) > 50


@pytest.mark.live  # needs the corpus that `make services` fetches, not a server
@pytest.mark.no_source
@pytest.mark.parametrize("suite", ["mysql", "mariadb"])
def test_the_servers_test_suites_and_their_mangled_copies_never_raise(suite: str) -> None:
    files = ddlcorpus.files(suite)
    assert files, f"no {suite} DDL corpus under {ddlcorpus.CORPUS}: run deploy/ddl-corpus.sh (make services does)"
    read = sum(read_all([s.sql for s in statements], SESSIONS[suite], 7) for _, statements in files)
    assert read > 1000
