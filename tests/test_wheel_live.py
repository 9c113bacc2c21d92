"""The wheel pip builds from this source: the compiled kernel inside it where a C compiler is;
where none is, a wheel without it that installs, streams every change (the Python path) and
says once at start that it is slower.

Each wheel is built by pip as a user's `pip install` would (isolated build, setuptools from
PyPI) from a copy of what the wheel is made of, and run from its unpacked files, not this tree:
with `python -S` (site's .pth files unread, so this tree's editable install cannot lend its
compiled module) and the dependencies from this virtualenv's site-packages."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import uuid
import zipfile
from pathlib import Path

import pytest

from connector.native import NOT_BUILT
from tests.support.live import ROOT
from tests.support.pipelines import (
    assert_replay_equals_source,
    caught_up,
    config_for,
    fresh,
    sluice_run,
    workload,
    write_config,
)

pytestmark = pytest.mark.live

PACKAGED = ("pyproject.toml", "README.md", "connector", "spark")


def build(tmp: Path, **env: str) -> Path:
    """The wheel pip makes of a copy of the sources (no build left over from this tree), unpacked."""
    source = tmp / "source"
    for name in PACKAGED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, source / name)
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(tmp / "dist"), str(source)],
        capture_output=True, text=True, env={**os.environ, **env}, timeout=600, check=False,
    )  # fmt: skip
    assert out.returncode == 0, f"pip wheel failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    (wheel,) = (tmp / "dist").glob("sluice_cdc-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp / "installed")
    return tmp / "installed"


def python_of(installed: Path) -> tuple[list[str], dict[str, str]]:
    """The command and environment of a Python that imports Sluice from the wheel's files alone."""
    path = os.pathsep.join([str(installed), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    return [sys.executable, "-S"], {**os.environ, "PYTHONPATH": path}


def kernel_files(installed: Path) -> list[str]:
    return sorted(p.name for p in (installed / "connector").glob("_transcode*.so"))


def imported(installed: Path) -> tuple[str, bool]:
    """Where `connector` is imported from with the wheel's files first on the path, and whether
    the compiled kernel loaded there."""
    python, env = python_of(installed)
    out = subprocess.run(
        [*python, "-c", "import connector, connector.native as n; print(connector.__file__); "
         "print(n.transcoder is not None)"],
        capture_output=True, text=True, env=env, cwd=installed.parent, check=True,
    )  # fmt: skip
    where, loaded = out.stdout.split()
    return where, loaded == "True"


@pytest.mark.no_source
def test_where_a_compiler_is_the_wheel_holds_the_compiled_kernel(tmp_path: Path) -> None:
    installed = build(tmp_path)
    assert kernel_files(installed), "the wheel has no connector/_transcode*.so"
    # The servers' charsets, package data (connector/binlog/charsets.py reads them): every file of this tree's.
    shipped = {p.name for p in (installed / "connector/binlog/charmaps").glob("*.txt")}
    assert shipped == {p.name for p in (ROOT / "connector/binlog/charmaps").glob("*.txt")}
    where, loaded = imported(installed)
    assert Path(where).is_relative_to(installed) and loaded


def test_without_a_compiler_the_wheel_installs_streams_and_says_so_once(tmp_path: Path) -> None:
    installed = build(tmp_path / "build", CC="/bin/false")  # the extension's compile fails
    assert kernel_files(installed) == []
    where, loaded = imported(installed)
    assert Path(where).is_relative_to(installed) and not loaded

    name, db = f"whl{uuid.uuid4().hex[:6]}", "wheel"
    fresh(db)
    config = config_for(name, db, tmp_path)
    path = tmp_path / "sluice.toml"
    write_config(config, path)
    python, env = python_of(installed)
    # Not from this tree's folder: `-m` puts the working directory first on the path.
    process = sluice_run(path, streaming=True, sluice=[*python, "-m", "connector.cli"], env=env, cwd=tmp_path)
    try:
        workload(db, 60, seed=3, alter_at=30)
        caught_up(config)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, path.with_suffix(".log").read_text(errors="replace")[-3000:]
    text = path.with_suffix(".log").read_text(errors="replace")
    assert text.count(NOT_BUILT) == 1, text[-3000:]
    assert "Traceback" not in text
    assert_replay_equals_source(config, db)
