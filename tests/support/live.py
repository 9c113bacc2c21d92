"""The real servers started by `make services` (deploy/services.sh): MariaDB and MySQL.

Every test marked `live` runs once per server (tests/conftest.py parametrizes it; a
`servers("mysql")` mark narrows it). The functions here act on the server of the test that
is running, so one test body serves both. On each server the tests administer as root (no
password, over TCP from 127.0.0.1) and run the connector as the user production would: on
MySQL `sluice`, holding exactly the README's grants, with caching_sha2_password and a
password that deploy/services.sh generated (never an argument, never in the repository).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

from connector.config import Config, parse_config
from connector.position import MysqlGtidSet, Position
from connector.replica.client import SourceSettings
from connector.replica.server import master_position

ROOT = Path(__file__).resolve().parents[2]
RUN = Path(os.environ.get("SLUICE_RUN_DIR", ROOT / ".run"))
HOST = "127.0.0.1"
# Kafka and Redis as deploy/services.sh started them (its port variables give a second set).
KAFKA = f"{HOST}:{os.environ.get('SLUICE_KAFKA_PORT', '9092')}"
REDIS_URL = f"redis://{HOST}:{os.environ.get('SLUICE_REDIS_PORT', '6379')}/0"
# The schema registry deploy/services.sh started: Apicurio Registry, Confluent's REST API under this path.
REGISTRY_URL = f"http://{HOST}:{os.environ.get('SLUICE_REGISTRY_PORT', '8081')}/apis/ccompat/v7"
# The secured services (deploy/services.sh): Kafka with SASL_SSL and with mutual TLS, a Redis
# that takes only TLS and a password, a checkpoint user that must use TLS; one private CA.
KAFKA_SASL = f"{HOST}:{os.environ.get('SLUICE_KAFKA_SASL_PORT', '9094')}"
KAFKA_MTLS = f"{HOST}:{os.environ.get('SLUICE_KAFKA_MTLS_PORT', '9095')}"
REDIS_TLS_PORT = int(os.environ.get("SLUICE_REDIS_TLS_PORT", "6380"))
TLS = RUN / "tls"
KAFKA_SASL_PASSWORD_FILE = RUN / "kafka" / "sasl.password"
REDIS_TLS_PASSWORD_FILE = RUN / "redis" / "tls.password"


@dataclass(frozen=True, slots=True)
class LiveServer:
    name: str  # the test id: "mariadb" or "mysql"
    port: int
    binlog_dir: Path
    user: str = "root"  # the connector's user
    password_file: Path | None = field(default=None, repr=False)

    @property
    def mariadb(self) -> bool:
        return self.name == "mariadb"

    @property
    def password(self) -> str:
        return self.password_file.read_text().strip() if self.password_file is not None else ""

    def restart(self) -> None:
        """Stop and start the server (deploy/services.sh), as a crash and recovery would look to Sluice."""
        subprocess.run(["bash", str(ROOT / "deploy" / "services.sh"), f"restart-{self.name}"], check=True)


SERVERS = {
    "mariadb": LiveServer(
        "mariadb", int(os.environ.get("SLUICE_MARIADB_PORT", "3306")), RUN / "mariadb" / "binlog",
        user="sluice", password_file=RUN / "mariadb" / "connector.password",
    ),
    "mysql": LiveServer(
        "mysql", int(os.environ.get("SLUICE_MYSQL_PORT", "3307")), RUN / "mysql" / "binlog",
        user="sluice", password_file=RUN / "mysql" / "connector.password",
    ),
}  # fmt: skip

_active = [SERVERS["mariadb"]]  # benches and non-live code: MariaDB


def use(server: LiveServer) -> None:
    """Make `server` the one the functions below act on (the `server` fixture calls it)."""
    _active[0] = server


def server() -> LiveServer:
    return _active[0]


def connect(database: str | None = None, on: LiveServer | None = None) -> pymysql.connections.Connection:
    """An admin (root) connection to the active server (or to `on`)."""
    s = on or server()
    try:
        return pymysql.connect(
            host=HOST, port=s.port, user="root", password="", database=database, autocommit=True, charset="utf8mb4",
            ssl_disabled=True,
        )  # fmt: skip
    except pymysql.err.OperationalError as exc:  # a failure, not a skip: `make test` starts it
        raise AssertionError(f"{s.name} is not reachable on {HOST}:{s.port}; run `make services` ({exc})") from exc


def current_binlog(conn: pymysql.connections.Connection) -> tuple[str, int]:
    position = master_position(conn)
    return position.file, position.pos


def last_gtid(conn: pymysql.connections.Connection) -> str:
    """The GTID of the transaction this session committed last, as the binlog names it.

    MySQL has no @@last_gtid: the newest number of the server's own UUID in gtid_executed
    is it, as long as nobody else writes meanwhile (tests write one at a time)."""
    with conn.cursor() as cur:
        if server().mariadb:
            cur.execute("SELECT @@last_gtid")
            row = cur.fetchone()
            assert row is not None
            return str(row[0])
        cur.execute("SELECT @@server_uuid, @@global.gtid_executed")
        row = cur.fetchone()
    assert row is not None
    intervals = dict(MysqlGtidSet.parse(str(row[1])).sets)[(str(row[0]), "")]
    return f"{row[0]}:{intervals[-1][1]}"


def replica_ids() -> set[int]:
    """The server_ids of the replicas registered with the active server."""
    with connect().cursor() as cur:
        cur.execute("SHOW SLAVE HOSTS" if server().mariadb else "SHOW REPLICAS")
        return {int(r[0]) for r in cur.fetchall()}


def source_settings(server_id: int = 6001, heartbeat_s: float = 1.0, **more: object) -> SourceSettings:
    """The connector's settings for the active server, as its own user."""
    s = server()
    return SourceSettings(
        host=HOST, port=s.port, user=s.user, password=s.password, server_id=server_id, heartbeat_s=heartbeat_s,
        **more,  # type: ignore[arg-type]
    )  # fmt: skip


def admin_settings(server_id: int = 6001) -> SourceSettings:
    return SourceSettings(host=HOST, port=server().port, user="root", password="", server_id=server_id)


def peer_settings() -> dict[str, object]:
    """python-mysql-replication's connection settings (the differential tests' peer)."""
    return {"host": HOST, "port": server().port, "user": "root", "passwd": ""}


def admin_url() -> str:
    """The active server as a URL (root), as `sluice decode --schema-from` takes it."""
    return f"mysql://root@{HOST}:{server().port}"


def checkpoint_url(database: str = "sluice_meta") -> str:
    return f"{admin_url()}/{database}"


def live_config(include: list[str], name: str = "test", server_id: int = 6001, **source: object) -> Config:
    """A connector configuration for the active server, capturing the tables `include` matches."""
    s = server()
    return parse_config(
        {"name": name, "source": {"host": HOST, "port": s.port, "user": s.user, "password": s.password,
                                  "server_id": server_id,
                                  "heartbeat_s": 1.0, "include": include, **source},
         "kafka": {"bootstrap_servers": KAFKA}, "checkpoint": {"db_url": checkpoint_url(), "redis_url": REDIS_URL}}
    )  # fmt: skip


def services_toml(topic_prefix: str, kafka: bool = True) -> str:
    """The `[kafka]` and `[checkpoint]` sections' service addresses (the CLI tests write files);
    `kafka` False: no [kafka] section, as the commands that never use Kafka take it."""
    return (
        (f'[kafka]\nbootstrap_servers = "{KAFKA}"\ntopic_prefix = "{topic_prefix}"\n' if kafka else "")
        + f'[checkpoint]\ndb_url = "{checkpoint_url()}"\nredis_url = "{REDIS_URL}"\n'
    )


def source_toml(server_id: int, heartbeat_s: float = 1.0) -> str:
    """The `[source]` section of a config file for the active server (the CLI tests write files)."""
    s = server()
    return (
        f'[source]\nhost = "{HOST}"\nport = {s.port}\nuser = "{s.user}"\npassword = "{s.password}"\n'
        f"server_id = {server_id}\n"
        f"heartbeat_s = {heartbeat_s:g}\n"
    )


def fresh_database(name: str, *tables: str) -> None:
    """Drop and create a database, then its tables (`{db}` in each statement is the name)."""
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name}")
        cur.execute(f"CREATE DATABASE {name}")
        for ddl in tables:
            cur.execute(ddl.format(db=name))
    conn.close()


@contextlib.contextmanager
def row_metadata(value: str) -> Iterator[None]:
    """binlog_row_metadata set to `value` for a while (the FULL variant of a MINIMAL server)."""
    with connect().cursor() as cur:
        cur.execute("SELECT @@global.binlog_row_metadata")
        row = cur.fetchone()
        assert row is not None
        cur.execute("SET GLOBAL binlog_row_metadata = %s", (value,))
    try:
        yield
    finally:
        with connect().cursor() as cur:
            cur.execute("SET GLOBAL binlog_row_metadata = %s", (row[0],))


@contextlib.contextmanager
def granted(privileges: str) -> Iterator[None]:
    """The connector's user holds `privileges` on *.* for a while (an optional grant's test)."""
    s = server()
    with connect().cursor() as cur:
        cur.execute(f"GRANT {privileges} ON *.* TO '{s.user}'@'{HOST}'")
    try:
        yield
    finally:
        with connect().cursor() as cur:
            cur.execute(f"REVOKE {privileges} ON *.* FROM '{s.user}'@'{HOST}'")


def replica_listing() -> contextlib.AbstractContextManager[None]:
    """What the server_id check needs beyond the minimal grants: MariaDB lists replicas only to
    REPLICATION MASTER ADMIN (the README's optional grant); MySQL to REPLICATION SLAVE."""
    return granted("REPLICATION MASTER ADMIN") if server().mariadb else contextlib.nullcontext()


def scram_user(name: str, password: str) -> None:
    """A SCRAM-SHA-512 user of the Kafka cluster, made (or given a new password) through the
    admin API on the plaintext listener: a password handed to a tool would be an argument."""
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415  (only the secured tests need it)
    from confluent_kafka.admin._scram import (  # noqa: PLC0415  (the module that defines them)
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": KAFKA})
    upsert = UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          password.encode())  # fmt: skip
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)


def checkpoint_user_settings() -> tuple[str, str]:
    """The TLS-only checkpoint user's URL (password from the environment: SLUICE_TEST_CHECKPOINT_PASSWORD)
    and that password, for the active server."""
    password = (RUN / server().name / "checkpoint.password").read_text().strip()
    return f"mysql://sluice_meta:${{SLUICE_TEST_CHECKPOINT_PASSWORD}}@{HOST}:{server().port}/sluice_meta_tls", password


def position_now() -> Position:
    with connect() as conn:
        return master_position(conn)


def wait_until(check: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.5) -> None:
    """Poll `check` until it holds; an AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")


def numbers(n: int) -> str:
    """A FROM-clause source of rows (seq) = 1..n on the active server (n up to 10**6)."""
    if server().mariadb:
        return f"seq_1_to_{int(n)}"  # MariaDB's SEQUENCE engine
    digits = "(SELECT 0 d UNION ALL " + " UNION ALL ".join(f"SELECT {i}" for i in range(1, 10)) + ")"
    places = max(1, len(str(int(n) - 1)))
    value = " + ".join(f"{10**i} * d{i}.d" for i in range(places))
    joined = ", ".join(f"{digits} d{i}" for i in range(places))
    return f"(SELECT 1 + {value} AS seq FROM {joined} HAVING seq <= {int(n)}) AS numbers"
