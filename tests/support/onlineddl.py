"""pt-online-schema-change and gh-ost against the live servers (issue 36), a writer that keeps
changing the table meanwhile, and the binlog a run leaves: what the live tests of online schema
changes import (no tests here; tests/test_osc_tools_live.py shows the tooling works).

deploy/osc-tools.sh installs the tools (deploy/services.sh up runs it): Debian bookworm's
percona-toolkit 3.2.1 and gh-ost v1.1.8 built into the cache. Where each runs, measured:
  pt-osc   MariaDB 10.11 and MySQL 9.7
  gh-ost   MySQL 9.7 only (GH_OST_SERVERS). On MariaDB 10.11 it stops at its first connection,
           before writing anything: `FATAL Error 1193 (HY000): Unknown system variable
           'transaction_isolation'` (its go-sql-driver DSN sets MySQL's name of the variable,
           gh-ost go/mysql/connection.go; MariaDB 10.11 knows it only as tx_isolation).

Each tool logs in as root over TCP through its own option file, written 0600 into the run's
temporary folder (pt-osc: the DSN's F=, gh-ost: --conf), so a password is never an argument.

    with running("pt-osc", server, "db", "t", "ADD COLUMN c INT", pause_after_rows=500) as run:
        run.wait_paused()       # >= 500 rows copied; shadow table (and pt-osc's triggers) in place
        ...                     # SIGKILL the connector, restart it: the tool waits
        run.resume()
    result = run.finish()       # the tool's exit, output, binlog positions before and after

How a run pauses: pt-osc 3.2.1 has --pause-file, but its copy loop polls that file every 60 s
(NibbleIterator is never given --sleep: `$self->{sleep} = $args{sleep} || 60`), so a run is
paused with SIGSTOP right after the progress line of the chunk that reached the row count
(pt-osc then sleeps --sleep before its next chunk and holds no lock between chunks); SIGCONT
resumes it. gh-ost is throttled with its --throttle-flag-file, which stops both its row copy and
its applying of binlog events; it takes 100-400 ms to see the file, so a pausing run copies in
20-row chunks with --nice-ratio 10 until resume() sets them back, and still stops a few chunks
past the row count (the count it reached is what wait_paused returns). A postponed cut-over
(postpone_cutover=True) waits on gh-ost's --postpone-cut-over-flag-file, and in pt-osc's
before_swap_tables plugin hook (PT_OSC_PLUGIN).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pymysql

from connector.position import Position
from connector.replica.server import master_position
from tests.support.live import HOST, LiveServer, connect

Tool = Literal["pt-osc", "gh-ost"]

# deploy/osc-tools.sh's cache: SLUICE_CACHE_DIR, else $XDG_CACHE_HOME/sluice, else ~/.cache/sluice
CACHE = Path(os.environ.get("SLUICE_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
             / "sluice")  # fmt: skip
GH_OST = CACHE / "gh-ost" / "v1.1.8" / "gh-ost"  # built by deploy/osc-tools.sh
GH_OST_SERVERS = ("mysql",)  # where gh-ost runs (see above); pt-osc runs on both

# The tables each tool makes beside table T, as their sources name them. pt-osc: bin/pt-online-
# schema-change create_new_table (`_T_new`, and `__T_new`, `___T_new`... up to 10 tries when the
# name is taken) and swap_tables (`_T_old`, then more underscores, then a random [A-Z0-9]{6}_
# prefix); names over 64 characters are cut at 64 (the suffix goes first). gh-ost:
# go/base/context.go getSafeTableName, `_T_<suffix>`, T cut so the name fits 64; `_T_del` is
# first the cut-over sentry table, then the old table's name.
HELPER_TABLES: Mapping[Tool, tuple[str, ...]] = {
    "pt-osc": ("_{t}_new", "_{t}_old"),
    "gh-ost": ("_{t}_gho", "_{t}_ghc", "_{t}_del", "_{t}_ghk"),
}

PT_OSC_OPTIONS: Mapping[str, object] = {
    "recursion-method": "none",  # no replicas to look for
    "check-replication-filters": False,
    "chunk-size": 250,
    "chunk-time": 0,  # a fixed chunk size: a few thousand rows take several chunks
    "progress": "iterations,1",  # a line per chunk: what pause_after_rows counts
    # Other tests share the servers: their load must not pause or abort a run.
    "max-load": "Threads_running=1000",
    "critical-load": "Threads_running=1000",
    "print": True,  # the statements it runs, in its output
    "execute": True,
}
GH_OST_OPTIONS: Mapping[str, object] = {
    "allow-on-master": True,
    "assume-rbr": True,  # binlog_format=ROW: no replication restart (needs SUPER) to make sure
    "execute": True,
    "initially-drop-ghost-table": True,
    "initially-drop-old-table": True,
    "ok-to-drop-table": True,  # drop _T_del at the end, as most runs in production do
    "cut-over": "atomic",
    "chunk-size": 100,
    "exact-rowcount": False,
    "replica-server-id": 36036,  # its binlog reader's server_id: none of the connector tests'
    "verbose": True,
}

# pt-osc's --plugin: holds the swap while the file SLUICE_OSC_POSTPONE names exists.
PT_OSC_PLUGIN = """package pt_online_schema_change_plugin;
use strict;
use Time::HiRes ();
sub new { my ($class, %args) = @_; return bless {%args}, $class; }
sub before_swap_tables {
    my $flag = $ENV{SLUICE_OSC_POSTPONE};
    return unless $flag && -e $flag;
    print "sluice: cut-over postponed\\n";
    Time::HiRes::sleep(0.05) while -e $flag;
    print "sluice: cut-over released\\n";
}
1;
"""
PT_OSC_CHUNK = re.compile(r"^Copying `[^`]+`\.`[^`]+`:\s+\d+%")
GH_OST_COPIED = re.compile(r"^Copy: (\d+)/", re.MULTILINE)
GH_OST_CUTOVER = re.compile(r"Lock & rename duration: ([0-9.]+)(ms|s)")


class OscFailed(AssertionError):
    """A tool exited non-zero (or could not start): its exit code and the tail of its output."""

    def __init__(self, tool: Tool, returncode: int | None, output: list[str]) -> None:
        self.tool, self.returncode, self.output = tool, returncode, output
        tail = "\n".join(output[-40:])
        super().__init__(f"{tool} failed (exit {returncode}); its output ends:\n{tail}")


@dataclass(frozen=True, slots=True)
class OscResult:
    tool: Tool
    argv: tuple[str, ...]
    output: str
    elapsed_s: float
    start: Position  # the server's binlog position just before the tool started
    end: Position  # and just after it finished
    # gh-ost's own "Lock & rename duration"; for pt-osc the time between its "Swapping tables..."
    # and "Swapped original and new tables OK." lines, which frame its RENAME TABLE
    cutover_s: float | None


def flag(tool: Tool, name: str, value: object) -> list[str]:
    """One option on a tool's command line: True alone, False negated as the tool spells it, None left out."""
    if value is None:
        return []
    if value is True:
        return [f"--{name}"]
    if value is False:
        return [f"--no-{name}"] if tool == "pt-osc" else [f"--{name}=false"]
    return [f"--{name}={value}"]


def option_file(workdir: Path) -> Path:
    """The tools' login: root over TCP, password (none here) in a file only its owner reads."""
    path = workdir / "client.cnf"
    path.write_text("[client]\nuser=root\npassword=\n")
    path.chmod(0o600)
    return path


def pt_osc_argv(server: LiveServer, database: str, table: str, alter: str, workdir: Path,
                options: Mapping[str, object], postpone: bool) -> list[str]:  # fmt: skip
    exe = shutil.which("pt-online-schema-change")
    if exe is None:
        raise AssertionError("pt-online-schema-change is not installed; run deploy/osc-tools.sh")
    if postpone:
        (workdir / "plugin.pm").write_text(PT_OSC_PLUGIN)
        options = {"plugin": workdir / "plugin.pm", **options}
    flags = [f for name, value in options.items() for f in flag("pt-osc", name, value)]
    dsn = f"h={HOST},P={server.port},D={database},t={table},F={option_file(workdir)}"
    return [exe, f"--alter={alter}", *flags, dsn]


def gh_ost_argv(server: LiveServer, database: str, table: str, alter: str, workdir: Path,
                options: Mapping[str, object], postpone: bool) -> list[str]:  # fmt: skip
    if not GH_OST.is_file():
        raise AssertionError(f"{GH_OST} is missing; run deploy/osc-tools.sh")
    places = {
        "serve-socket-file": workdir / "gh-ost.sock",
        # its default, /tmp/gh-ost.throttle, would throttle every gh-ost on the machine
        "throttle-additional-flag-file": workdir / "throttle-all",
        "throttle-flag-file": workdir / "throttle",  # how a run pauses (pause_after_rows)
        "postpone-cut-over-flag-file": workdir / "postpone" if postpone else None,
    }
    flags = [f for name, value in {**places, **options}.items() for f in flag("gh-ost", name, value)]
    return [str(GH_OST), f"--host={HOST}", f"--port={server.port}", f"--conf={option_file(workdir)}",
            f"--database={database}", f"--table={table}", f"--alter={alter}", *flags]  # fmt: skip


ARGV: Mapping[Tool, Callable[..., list[str]]] = {"pt-osc": pt_osc_argv, "gh-ost": gh_ost_argv}
DEFAULTS: Mapping[Tool, Mapping[str, object]] = {"pt-osc": PT_OSC_OPTIONS, "gh-ost": GH_OST_OPTIONS}


def position_of(server: LiveServer) -> Position:
    with connect(on=server) as conn:
        return master_position(conn)


class OscRun:
    """One run of a tool in the background; `running` starts it and makes sure it ends."""

    def __init__(self, tool: Tool, server: LiveServer, argv: list[str], workdir: Path, *, chunk_rows: int,
                 pause_after_rows: int | None, postpone: bool, after_pause: list[str]) -> None:  # fmt: skip
        self.tool, self.server, self.argv, self.workdir = tool, server, argv, workdir
        self.result: OscResult | None = None
        self.paused_rows: int | None = None  # rows copied when the pause took hold
        self._chunk_rows, self._pause_after, self._postpone = chunk_rows, pause_after_rows, postpone
        self._after_pause = after_pause  # gh-ost socket commands that undo the slow-down of a pause
        self._chunks = 0
        self._lines: list[str] = []
        self._times: list[float] = []  # when each line came
        self._changed = threading.Condition()
        self._stopped = False  # pt-osc held by SIGSTOP
        self._pause_missed: str | None = None
        if postpone:
            (workdir / "postpone").touch()
        if tool == "gh-ost" and pause_after_rows is not None:
            (workdir / "throttle").touch()  # until it serves its socket: then the watch begins
        self.start = position_of(server)
        self._began = time.monotonic()
        env = {**os.environ, "SLUICE_OSC_POSTPONE": str(workdir / "postpone")}
        self._proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, bufsize=1)  # fmt: skip
        self._threads = [threading.Thread(target=self._read, daemon=True)]
        if tool == "gh-ost" and pause_after_rows is not None:
            self._threads.append(threading.Thread(target=self._throttle_at, args=(pause_after_rows,), daemon=True))
        for thread in self._threads:
            thread.start()

    @property
    def output(self) -> list[str]:
        with self._changed:
            return list(self._lines)

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            with self._changed:
                self._lines.append(line.rstrip("\n"))
                self._times.append(time.monotonic())
                if self.tool == "pt-osc" and PT_OSC_CHUNK.match(line):
                    self._count_chunk()
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _count_chunk(self) -> None:
        # Called in the reader as the chunk's progress line arrives: pt-osc is then in its
        # --sleep before the next chunk, so the stop lands between two chunks.
        self._chunks += 1
        copied = self._chunks * self._chunk_rows
        if self._pause_after is not None and self.paused_rows is None and copied >= self._pause_after:
            self._proc.send_signal(signal.SIGSTOP)
            self._stopped = True
            self.paused_rows = copied

    def ask(self, command: str) -> str:
        """One command to gh-ost's socket (status, throttle, no-throttle, unpostpone...): its answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(self.workdir / "gh-ost.sock"))
            sock.sendall(command.encode() + b"\n")
            return b"".join(iter(lambda: sock.recv(65536), b"")).decode()

    def _status(self) -> str:
        try:
            return self.ask("sup")  # its one status line (it prints it to its output too)
        except OSError:  # not serving yet, or gone
            return ""

    def _throttle_at(self, rows: int) -> None:
        # gh-ost looks at its throttle flag file every 100 ms: it copies a few chunks more than
        # asked for, and started unthrottled it would copy a small table before the first look.
        throttle = self.workdir / "throttle"
        while self._proc.poll() is None and not self._status():
            time.sleep(0.02)
        throttle.unlink()
        while self._proc.poll() is None:
            status = self._status()
            copied = GH_OST_COPIED.search(status)
            if "postponing cut-over" in status or "Done" in status:
                self._pause_missed = f"gh-ost copied the whole table before {rows} rows: {status.strip()}"
                break
            if copied is not None and int(copied.group(1)) >= rows:
                throttle.touch()
                while self._proc.poll() is None and not re.search("throttled|postponing|Done", self._status()):
                    time.sleep(0.02)
                time.sleep(0.2)  # a chunk in flight when the throttle came lands
                final = GH_OST_COPIED.search(self._status()) or copied
                with self._changed:
                    self.paused_rows = int(final.group(1))
                    self._changed.notify_all()
                return
            time.sleep(0.02)
        with self._changed:
            self._pause_missed = self._pause_missed or "gh-ost ended before its pause"
            self._changed.notify_all()

    def _wait(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not done():
                if self._proc.poll() is not None and not done():
                    self._changed.wait(0.2)  # the reader's last lines
                    if done():
                        return
                    raise OscFailed(self.tool, self._proc.returncode, [*self._lines, f"(it ended before {what})"])
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.tool}: timed out waiting for {what}; output ends:\n"
                                         + "\n".join(self._lines[-20:]))  # fmt: skip
                self._changed.wait(0.05)

    def wait_paused(self, timeout_s: float = 60) -> int:
        """Until the tool sits in the middle of its copy (pause_after_rows): the rows it had copied."""
        assert self._pause_after is not None, "started without pause_after_rows"
        self._wait(lambda: self.paused_rows is not None or self._pause_missed is not None, timeout_s,
                   f"{self._pause_after} rows copied")  # fmt: skip
        assert self.paused_rows is not None, self._pause_missed
        return self.paused_rows

    def resume(self) -> None:
        """Let a paused copy go on."""
        if self._stopped:
            self._proc.send_signal(signal.SIGCONT)
            self._stopped = False
        elif self.tool == "gh-ost" and self.paused_rows is not None and self._proc.poll() is None:
            (self.workdir / "throttle").unlink(missing_ok=True)
            for command in self._after_pause:
                with contextlib.suppress(OSError):
                    self.ask(command)

    def wait_postponed(self, timeout_s: float = 60) -> None:
        """Until the tool has copied everything and waits to cut over (postpone_cutover)."""
        assert self._postpone, "started without postpone_cutover"
        if self.tool == "pt-osc":
            self._wait(lambda: "sluice: cut-over postponed" in self._lines, timeout_s, "its postponed cut-over")
            return
        deadline = time.monotonic() + timeout_s
        while "State: postponing cut-over" not in self._status():
            if self._proc.poll() is not None:
                raise OscFailed(self.tool, self._proc.returncode, [*self.output, "(it ended before its cut-over)"])
            if time.monotonic() > deadline:
                raise AssertionError(f"gh-ost: timed out waiting for its postponed cut-over:\n{self._status()}")
            time.sleep(0.05)

    def cut_over(self) -> None:
        """Let a postponed cut-over happen."""
        postpone = self.workdir / "postpone"
        if postpone.exists():
            postpone.unlink()
            if self.tool == "gh-ost" and self._proc.poll() is None:
                with contextlib.suppress(OSError):
                    self.ask("unpostpone")  # at once, not at its next look at the file

    def finish(self, timeout_s: float = 180) -> OscResult:
        """Let the tool go on to its end: its result, or OscFailed with its output."""
        if self.result is not None:
            return self.result
        self.resume()
        self.cut_over()
        try:
            returncode = self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            tail = "\n".join(self.output[-20:])
            raise AssertionError(f"{self.tool} did not finish in {timeout_s} s:\n{tail}") from None
        for thread in self._threads:
            thread.join(10)
        shutil.rmtree(self.workdir, ignore_errors=True)
        if returncode != 0:
            raise OscFailed(self.tool, returncode, self.output)
        self.result = OscResult(self.tool, tuple(self.argv), "\n".join(self.output), time.monotonic() - self._began,
                                self.start, position_of(self.server), self._cutover_s())  # fmt: skip
        return self.result

    def _cutover_s(self) -> float | None:
        if self.tool == "gh-ost":
            said = GH_OST_CUTOVER.search("\n".join(self._lines))
            return None if said is None else float(said.group(1)) / (1000 if said.group(2) == "ms" else 1)
        lines = list(zip(self._lines, self._times, strict=True))
        began = [t for line, t in lines if line.endswith("Swapping tables...")]
        ended = [t for line, t in lines if line.endswith("Swapped original and new tables OK.")]
        return ended[0] - began[0] if began and ended else None

    def kill(self) -> None:
        """End the tool at once (SIGKILL), leaving whatever it made behind."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start(tool: Tool, server: LiveServer, database: str, table: str, alter: str, options: Mapping[str, object], *,
          pause_after_rows: int | None = None, postpone_cutover: bool = False) -> OscRun:  # fmt: skip
    """`tool` altering `database`.`table`, started in the background. `options` (chunk_size=50,
    print=None...) replace the defaults of PT_OSC_OPTIONS or GH_OST_OPTIONS."""
    given = {name.replace("_", "-"): value for name, value in options.items()}
    chosen = {**DEFAULTS[tool], **given}
    if tool == "pt-osc" and not server.mariadb:
        # pt-osc 3.2.1 sizes its chunks from EXPLAIN's `rows` column. Under explain_format=TREE
        # (someone SET GLOBAL it on the shared MySQL 9.7, seen while writing this) it reads 0 and
        # copies the whole table in one INSERT ... SELECT ("Copying approximately 0 rows").
        chosen.setdefault("set-vars", "explain_format=TRADITIONAL")
    if tool == "pt-osc" and pause_after_rows is not None:
        chosen.setdefault("sleep", 0.05)  # the window between chunks that the SIGSTOP lands in
    after_pause = []
    if tool == "gh-ost" and pause_after_rows is not None:
        # It copies ~10,000 rows a second here and takes 100-400 ms to see its throttle file:
        # slowed down (and set back by resume()) it stopped 20-420 rows past 500 (5 runs).
        for name, slow in (("nice-ratio", 10), ("chunk-size", 20)):
            if name not in given:
                after_pause.append(f"{name}={chosen.get(name, 0)}")
                chosen[name] = slow
    workdir = Path(tempfile.mkdtemp(prefix=f"sluice-{tool}-"))
    try:
        argv = ARGV[tool](server, database, table, alter, workdir, chosen, postpone_cutover)
        return OscRun(tool, server, argv, workdir, chunk_rows=int(str(chosen.get("chunk-size", 1000))),
                      pause_after_rows=pause_after_rows, postpone=postpone_cutover,
                      after_pause=after_pause)  # fmt: skip
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


@contextlib.contextmanager
def running(tool: Tool, server: LiveServer, database: str, table: str, alter: str, *,
            pause_after_rows: int | None = None, postpone_cutover: bool = False,
            **options: object) -> Iterator[OscRun]:  # fmt: skip
    """`start`, then at the end of the block the tool is let go on to its end (finish: raises
    OscFailed if it failed); on an error in the block it is killed."""
    run = start(tool, server, database, table, alter, options,
                pause_after_rows=pause_after_rows, postpone_cutover=postpone_cutover)  # fmt: skip
    try:
        yield run
    except BaseException:
        run.kill()
        raise
    run.finish()


def to_end(run: OscRun) -> OscResult:
    try:
        return run.finish()
    finally:
        run.kill()  # a no-op unless finish did not get the tool to end


def pt_osc(server: LiveServer, database: str, table: str, alter: str, **options: object) -> OscResult:
    """pt-online-schema-change `alter` on `database`.`table`, to its end."""
    return to_end(start("pt-osc", server, database, table, alter, options))


def gh_ost(server: LiveServer, database: str, table: str, alter: str, **options: object) -> OscResult:
    """gh-ost `alter` on `database`.`table` (MySQL only: GH_OST_SERVERS), to its end."""
    return to_end(start("gh-ost", server, database, table, alter, options))


# The table the writer changes: an ALTER that keeps id, k and v writable (ADD COLUMN with a
# default, a new index...) leaves it working across the cut-over.
TABLE = "CREATE TABLE {db}.{table} (id BIGINT NOT NULL PRIMARY KEY, k INT NOT NULL, v VARCHAR(64) NOT NULL)"
Rows = dict[int, tuple[int, str]]  # id -> (k, v)


def seed_table(server: LiveServer, database: str, table: str, count: int) -> Rows:
    """TABLE with rows 1..count: the rows it holds."""
    rows = {i: (i % 97, f"seed {i}") for i in range(1, count + 1)}
    with connect(database, on=server) as conn, conn.cursor() as cur:
        cur.execute(TABLE.format(db=database, table=table))
        cur.executemany(f"INSERT INTO {table} (id, k, v) VALUES (%s, %s, %s)", [(i, *kv) for i, kv in rows.items()])
        # pt-osc sizes its copy from the optimizer's estimate, 0 for a freshly filled table on
        # MySQL 9.7: it then copies the whole table in one chunk ("Copying approximately 0 rows").
        cur.execute(f"ANALYZE TABLE {table}")
        cur.fetchall()
    return rows


def table_rows(server: LiveServer, database: str, table: str) -> Rows:
    with connect(database, on=server) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id, k, v FROM {table}")
        return {int(i): (int(k), str(v)) for i, k, v in cur.fetchall()}


def table_columns(server: LiveServer, database: str, table: str) -> list[str]:
    with connect(database, on=server) as conn, conn.cursor() as cur:
        cur.execute(f"SHOW COLUMNS FROM {table}")
        return [str(row[0]) for row in cur.fetchall()]


# Errors after which the writer runs its transaction again: what a table swapped under an
# application's feet can raise. Most of a cut-over is a wait on the table's metadata lock instead.
RETRIED = {
    1205: "lock wait timeout",  # a copy chunk's LOCK IN SHARE MODE, a trigger's write
    1213: "deadlock",
    1412: "table definition changed",  # a snapshot older than the swapped-in table
    1146: "table does not exist",  # between the two RENAMEs of a non-atomic swap
}


@dataclass(frozen=True, slots=True)
class WriterReport:
    transactions: int
    inserted: int
    updated: int
    deleted: int
    retried: dict[int, int]  # error code (RETRIED) -> transactions run again
    longest_s: float  # the longest a transaction took, retries included: a cut-over's stall
    rows: Rows  # what the table holds when the writer is done, as far as its own writes go


class Writer:
    """Inserts, updates and deletes on a TABLE-shaped table from its own thread and connection,
    `rate` transactions a second of 1 to 3 statements each, the same ones for the same `seed`;
    keeps the rows it expects (seeded with `rows`) and reports them with what it did."""

    def __init__(self, server: LiveServer, database: str, table: str, rows: Rows, *,
                 rate: float = 20.0, seed: int = 36) -> None:  # fmt: skip
        self.server, self.database, self.table, self.rate = server, database, table, rate
        self._rows = dict(rows)
        self._rng = random.Random(seed)
        self._next_id = max(rows, default=0) + 1
        self._counts: Counter[str] = Counter()
        self._retried: Counter[int] = Counter()
        self._longest = 0.0
        self._halt = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"writer-{table}", daemon=True)

    def __enter__(self) -> Writer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join(30)

    def start(self) -> Writer:
        self._thread.start()
        return self

    def stop(self) -> WriterReport:
        """Stop after the transaction in flight; raises what stopped the writer, if anything did."""
        self._halt.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the writer did not stop"
        if self._error is not None:
            raise AssertionError(f"the writer failed: {self._error!r}") from self._error
        return WriterReport(self._counts["transactions"], self._counts["insert"], self._counts["update"],
                            self._counts["delete"], dict(self._retried), self._longest, dict(self._rows))  # fmt: skip

    def _run(self) -> None:
        try:
            with connect(self.database, on=self.server) as conn:
                conn.autocommit(False)
                began = time.monotonic()
                while not self._halt.is_set():
                    self._commit(conn, self._plan())
                    self._counts["transactions"] += 1
                    self._halt.wait(max(0.0, began + self._counts["transactions"] / self.rate - time.monotonic()))
        except BaseException as exc:  # handed to stop(), which raises it
            self._error = exc

    def _plan(self) -> list[tuple[str, tuple[object, ...]]]:
        """The next transaction's statements, applied to the expected rows (it is retried until it commits)."""
        return [self._statement() for _ in range(self._rng.choice((1, 1, 2, 3)))]

    def _statement(self) -> tuple[str, tuple[object, ...]]:
        kind = self._rng.choices(("insert", "update", "delete"), (5, 3, 2))[0] if self._rows else "insert"
        self._counts[kind] += 1
        k, v = self._rng.randrange(1000), f"w{self._counts['transactions']}-{kind}"
        if kind == "insert":
            key, self._next_id = self._next_id, self._next_id + 1
            self._rows[key] = (k, v)
            return f"INSERT INTO {self.table} (id, k, v) VALUES (%s, %s, %s)", (key, k, v)
        key = self._rng.choice(list(self._rows))
        if kind == "update":
            self._rows[key] = (k, v)
            return f"UPDATE {self.table} SET k = %s, v = %s WHERE id = %s", (k, v, key)
        del self._rows[key]
        return f"DELETE FROM {self.table} WHERE id = %s", (key,)

    def _commit(self, conn: pymysql.connections.Connection, statements: list[tuple[str, tuple[object, ...]]]) -> None:
        began = time.monotonic()
        for _ in range(100):
            try:
                with conn.cursor() as cur:
                    for sql, args in statements:
                        cur.execute(sql, args)
                conn.commit()
                self._longest = max(self._longest, time.monotonic() - began)
                return
            except pymysql.err.MySQLError as exc:
                code = exc.args[0] if exc.args else None
                if code not in RETRIED:
                    raise
                conn.rollback()
                self._retried[code] += 1
                time.sleep(0.05)
        raise AssertionError(f"a transaction failed 100 times; last codes {dict(self._retried)}")


@dataclass(frozen=True, slots=True)
class BinlogEvent:
    file: str
    pos: int
    end_pos: int
    type: str
    info: str  # SHOW BINLOG EVENTS' Info column


@dataclass(frozen=True, slots=True)
class BinlogTransaction:
    gtid: str
    statements: tuple[str, ...]  # its Query events, less BEGIN/COMMIT, `use db; ` and MySQL's /* xid=N */
    # db.table of its Table_map events, in order. A trigger's table is mapped even when the
    # trigger wrote no row (pt-osc's DELETE IGNORE of a row it has not copied yet).
    tables: tuple[str, ...]


def binlog_events(server: LiveServer, start: Position, end: Position) -> list[BinlogEvent]:
    """The events from `start` to `end` (SHOW BINLOG EVENTS, across rotations)."""
    with connect(on=server) as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [str(row[0]) for row in cur.fetchall()]
        events = []
        for name in files[files.index(start.file) : files.index(end.file) + 1]:
            cur.execute("SHOW BINLOG EVENTS IN %s FROM %s", (name, start.pos if name == start.file else 4))
            for _, pos, kind, _, end_pos, info in cur.fetchall():
                if name == end.file and int(pos) >= end.pos:
                    break
                events.append(BinlogEvent(name, int(pos), int(end_pos), str(kind), str(info)))
    return events


GTID = re.compile(r"GTID_NEXT= '([^']+)'|GTID (\S+)")  # MySQL's Gtid event, MariaDB's
STATEMENT = re.compile(r"^(?:use `[^`]*`; )?(.*?)(?: /\* xid=\d+ \*/)?$", re.DOTALL)
MAPPED = re.compile(r"\(([^()]+)\)$")  # Table_map: "table_id: 42 (db.t)"


def transactions(events: list[BinlogEvent]) -> list[BinlogTransaction]:
    """The events grouped by GTID: each transaction's statements and the tables it maps."""
    found: list[tuple[str, list[str], list[str]]] = []
    for event in events:
        gtid = GTID.search(event.info) if event.type == "Gtid" else None
        if gtid is not None:
            found.append((gtid.group(1) or gtid.group(2), [], []))
        elif found and event.type == "Query" and event.info not in ("BEGIN", "COMMIT"):
            found[-1][1].append(STATEMENT.match(event.info).group(1))  # type: ignore[union-attr]
        elif found and event.type == "Table_map" and (mapped := MAPPED.search(event.info)) is not None:
            found[-1][2].extend([mapped.group(1)] if mapped.group(1) not in found[-1][2] else [])
    return [BinlogTransaction(gtid, tuple(statements), tuple(tables)) for gtid, statements, tables in found]
