"""The compiled module (connector/_transcode.c and connector/csrc/) built with AddressSanitizer and UBSan,
beside the normal build, never in its place.

clang (deploy/toolchain.sh installs it) also instruments the C code's edges for libFuzzer
(`-fsanitize=fuzzer-no-link`), so the fuzzer is guided by the C module's coverage as well as
the Python's; the runtime it needs preloaded is atheris's asan_with_fuzzer.so (ASan's runtime,
which carries UBSan's handlers, linked with libFuzzer). With gcc alone the sanitizers work the
same, preloading gcc's libasan and libubsan, but nothing guides the fuzzer: gcc's libasan comes
first and its no-op __sanitizer_cov_* hooks take the calls atheris makes to register even the
Python code's coverage (and LLVM's runtime refuses gcc's instrumentation). So a gcc build runs
the seeds under the sanitizers and mutates blind; tests/test_native_fuzz.py insists on coverage.

`python -m tests.fuzz.build [DIR]` builds into DIR (default .run/fuzz/build) and prints the module.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The module's sources as pyproject.toml builds it, and the headers they include.
SOURCES = tuple(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["ext-modules"][0]["sources"])
HEADERS = tuple(str(p.relative_to(ROOT)) for p in sorted((ROOT / "connector" / "csrc").glob("*.h")))
DEFAULT_OUT = ROOT / ".run" / "fuzz" / "build"
MODULE = "SLUICE_FUZZ_MODULE"  # the environment variable that names the build to tests/fuzz/native_fuzz.py
OBJECTS = ROOT / ".run" / "fuzz" / "objects"  # every build's objects, kept by what they are built from

SANITIZE = (
    "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer", "-g", "-O1",
)  # fmt: skip
# pyproject.toml's warnings, so a planted bug that does not compile fails loudly, not quietly
WARNINGS = ("-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror=implicit-function-declaration")


@dataclass(frozen=True)
class Build:
    module: Path  # the built extension, named as the import system wants it (PyInit__transcode)
    compiler: str  # "clang" or "gcc"
    preload: tuple[str, ...]  # LD_PRELOAD for a process that imports it: the sanitizer runtime
    coverage: bool  # the C code's edges guide the fuzzer (clang's -fsanitize=fuzzer-no-link)


def compiler() -> str | None:
    """clang where there is one, else gcc; None: no C compiler (then nothing can be built)."""
    for name in ("clang", "gcc"):
        if shutil.which(name):
            return name
    return None


def build(out: Path = DEFAULT_OUT, plants: dict[str, str] | None = None) -> Build:
    """The sanitizer build into `out`: of the module's own files, or with `plants` (a source's path
    -> the text it is built with instead) of copies; a build whose compiler, flags and texts have
    not changed is kept. Each source's object is kept too (OBJECTS, by compiler, flags and the
    texts it is built from), so a planted build compiles only the planted file; objects not kept
    yet are compiled in parallel."""
    cc = compiler()
    if cc is None:
        raise FileNotFoundError("no C compiler (clang or gcc): deploy/toolchain.sh installs one")
    flags = [*SANITIZE, *WARNINGS, "-fPIC", f"-I{sysconfig.get_paths()['include']}"]
    if cc == "clang":
        flags.append("-fsanitize=fuzzer-no-link")
    target = out / "connector" / f"_transcode{sysconfig.get_config_var('EXT_SUFFIX')}"
    plants = plants or {}
    texts = {name: plants.get(name) or (ROOT / name).read_text() for name in (*SOURCES, *HEADERS)}
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
    stamp = hashlib.sha256("\0".join([version, *flags, *texts.values()]).encode()).hexdigest()
    made = Build(target, cc, _preload(cc), cc == "clang")
    stamp_file = out / "stamp"
    if target.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return made
    target.parent.mkdir(parents=True, exist_ok=True)
    if plants:  # the copies, so that reports name the planted file; the rest are the module's own
        for name, text in texts.items():
            (out / "src" / name).parent.mkdir(parents=True, exist_ok=True)
            (out / "src" / name).write_text(text)
    headers_planted = any(name in plants for name in HEADERS)
    jobs = []
    for name in SOURCES:
        tree = out / "src" if name in plants or headers_planted else ROOT
        key = hashlib.sha256("\0".join([version, *flags, str(tree), texts[name], *(texts[h] for h in HEADERS)])
                             .encode()).hexdigest()  # fmt: skip
        jobs.append((tree / name, OBJECTS / f"{Path(name).stem}-{key[:24]}.o"))
    OBJECTS.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(lambda job: _compile(cc, flags, *job), [job for job in jobs if not job[1].exists()]))
    subprocess.run([cc, *flags, "-shared", *(str(obj) for _, obj in jobs), "-o", str(target)], check=True,
                   capture_output=True, text=True)  # fmt: skip
    stamp_file.write_text(stamp)
    return made


def _compile(cc: str, flags: list[str], source: Path, obj: Path) -> None:
    """One object, written whole or not at all (a kept object is never half of one)."""
    partial = obj.with_suffix(f".{os.getpid()}.tmp")
    subprocess.run([cc, *flags, "-c", str(source), "-o", str(partial)], check=True, capture_output=True, text=True)
    partial.rename(obj)


def _preload(cc: str) -> tuple[str, ...]:
    if cc == "clang":
        return (str(atheris_dir() / "asan_with_fuzzer.so"),)
    names = ("libasan.so", "libubsan.so")
    found = [subprocess.run([cc, f"-print-file-name={n}"], capture_output=True, text=True, check=True) for n in names]
    return tuple(done.stdout.strip() for done in found)


def atheris_dir() -> Path:
    """Where atheris keeps its sanitizer runtimes (found without importing it: that loads libFuzzer)."""
    spec = importlib.util.find_spec("atheris")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("atheris is not installed: pip install -e '.[dev]'")
    return Path(spec.origin).parent.parent


def environment(made: Build) -> dict[str, str]:
    """The environment a process running the sanitizer build needs, MODULE naming the build."""
    return {
        **os.environ,
        MODULE: str(made.module),
        "LD_PRELOAD": ":".join(made.preload),
        # CPython keeps objects alive until exit by design: leaks are not findings here.
        "ASAN_OPTIONS": "detect_leaks=0",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        # Every object from malloc, not pymalloc's arenas, so ASan sees a read past a bytes object.
        "PYTHONMALLOC": "malloc",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT).module)
