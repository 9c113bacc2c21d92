#!/usr/bin/env bash
# What `make install` needs to build the compiled hot path (connector/_transcode.c): a C
# compiler and the headers of the Python the virtualenv is made from; and clang, with which
# tests/fuzz/build.py builds it again under AddressSanitizer and UBSan with libFuzzer's edge
# coverage for the fuzzer (tests/test_native_fuzz.py; with gcc alone the sanitizers work, but
# only the Python code's coverage guides it). Installs only what is missing, from apt.
# Without them pip would fail to build the package.
set -euo pipefail
PYTHON="${PYTHON:-python3}"

log() { printf '[toolchain] %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v clang >/dev/null 2>&1 || missing+=(clang)
include="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
if [ ! -f "$include/Python.h" ]; then
  # Debian's own Python keeps its headers in python3-dev; other builds (pyenv) ship them.
  missing+=("python3-dev")
fi
[ ${#missing[@]} -eq 0 ] && exit 0
log "installing ${missing[*]} from apt (to build connector/_transcode.c, and its sanitizer build)"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
