"""Every `live` test runs once per real server: `test_x[mariadb]`, `test_x[mysql]`.

`@pytest.mark.servers("mysql")` limits a test to the servers it names (a feature only one
of them has). The fixture `server` is the server a test runs against, and tests/support/live.py's
functions act on it; module-scoped fixtures that talk to a server ask for `live_server`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fuzz.campaigns import CAMPAIGNS, selected
from tests.support import live


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "servers(*names): run this live test only on these servers")
    config.addinivalue_line("markers", "no_source: a live test of Kafka or Redis alone: run once, on no server")


def pytest_collection_finish(session: pytest.Session) -> None:
    """The fuzz runs the session selected start now, beside the tests (tests/fuzz/campaigns.py)."""
    CAMPAIGNS.start(selected([item.nodeid for item in session.items]))


def pytest_unconfigure(config: pytest.Config) -> None:
    CAMPAIGNS.stop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("live") is None or "live_server" not in metafunc.fixturenames:
        return
    if any("live_server" in str(mark.args[0]) for mark in metafunc.definition.iter_markers("parametrize")):
        return  # the test pairs servers with its own parameters
    if metafunc.definition.get_closest_marker("no_source") is not None:
        return

    only = metafunc.definition.get_closest_marker("servers")
    names = list(only.args) if only is not None else list(live.SERVERS)
    unknown = set(names) - set(live.SERVERS)
    if unknown:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: no live server named {sorted(unknown)}")
    # Module scope: a module's tests run on one server, then on the next, and module-scoped
    # fixtures that ask for `live_server` are made once per server.
    metafunc.parametrize("live_server", names, indirect=True, scope="module")


@pytest.fixture(scope="module")
def live_server(request: pytest.FixtureRequest) -> Iterator[live.LiveServer | None]:
    name = getattr(request, "param", None)
    chosen = live.SERVERS[name] if name is not None else None
    if chosen is not None:
        live.use(chosen)
    yield chosen


@pytest.fixture(autouse=True)
def server(live_server: live.LiveServer | None) -> live.LiveServer | None:
    if live_server is not None:
        live.use(live_server)  # again for each test: another test's fixture may have chosen another
    return live_server
