#!/usr/bin/env bash
# Fetches the servers' own DDL tests, once per machine, for tests/test_ddl_corpus_live.py:
# Debian's mysql-testsuite of the MySQL version the sid root runs (deploy/services.sh) and
# mariadb-test-data of the MariaDB version apt installed. Only their DDL test files are kept,
# under ~/.cache/sluice/ddl-corpus/{mysql,mariadb}-<version>/ (tests/support/ddlcorpus.py lists
# them); the packages' files are never part of this repository (their licence, and size).
#
#   deploy/ddl-corpus.sh          fetch what is missing (a no-op once fetched)
#   deploy/ddl-corpus.sh status   what is there
set -euo pipefail

CACHE="${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}"
DEST="$CACHE/ddl-corpus"
SID_ROOT="$CACHE/mysql-sid-root"
SID_MIRROR="${SLUICE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

log() { printf '[ddl-corpus] %s\n' "$*" >&2; }

# The test files kept from each package (tests/support/ddlcorpus.py picks among them).
MYSQL_FILES=('./usr/lib/mysql-test/t/*.test' './usr/lib/mysql-test/suite/innodb/t/instant*.test'
             './usr/lib/mysql-test/suite/gcol/t/*.test')
MARIADB_FILES=('./usr/share/mysql/mysql-test/main/*.test' './usr/share/mysql/mysql-test/suite/innodb/t/*.test'
               './usr/share/mysql/mysql-test/suite/versioning/t/*.test')

extract() {
  # $1: .deb, $2: target directory, rest: tar wildcards
  local deb="$1" target="$2"; shift 2
  mkdir -p "$target.partial"
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$target.partial" --wildcards "$@"
  rm -rf "$target"
  mv "$target.partial" "$target"
  touch "$target/.ready"
}

packages_field() {
  # $1: Packages file, $2: package, $3: version, $4: field -> the field's value
  awk -v pkg="$2" -v ver="$3" -v field="$4:" '
    /^Package: / { p = ($2 == pkg) } /^Version: / { v = ($2 == ver) }
    p && v && $1 == field { print $2; exit }' "$1"
}

mysql_corpus() {
  [ -f "$SID_ROOT/.sluice-ready" ] || { log "no MySQL sid root yet: run deploy/services.sh up first"; return 1; }
  local version; version="$(awk '$1 == "mysql-server-core" { print $2 }' "$SID_ROOT/.sluice-ready")"
  local target="$DEST/mysql-$version"
  [ -f "$target/.ready" ] && return 0
  local lists; lists="$(ls "$SID_ROOT"/var/lib/apt/lists/*_main_binary-amd64_Packages | head -1)"
  local file sum
  file="$(packages_field "$lists" mysql-testsuite "$version" Filename)"
  sum="$(packages_field "$lists" mysql-testsuite "$version" SHA256)"
  [ -n "$file" ] || { log "mysql-testsuite $version is not in the sid root's package lists"; return 1; }
  local tmp; tmp="$(mktemp -d)"
  log "fetching mysql-testsuite $version (once; about 340 MB, only its DDL tests are kept)"
  curl -fsS -o "$tmp/suite.deb" "$SID_MIRROR/$file"
  echo "$sum  $tmp/suite.deb" | sha256sum -c --quiet -
  extract "$tmp/suite.deb" "$target" "${MYSQL_FILES[@]}"
  rm -rf "$tmp"
}

mariadb_corpus() {
  local version; version="$(dpkg-query -W -f='${Version}' mariadb-server 2>/dev/null)" \
    || { log "mariadb-server is not installed: run deploy/services.sh up first"; return 1; }
  local target="$DEST/mariadb-${version#*:}"
  [ -f "$target/.ready" ] && return 0
  local tmp; tmp="$(mktemp -d)"
  chmod 755 "$tmp"  # apt's download user writes there
  log "fetching mariadb-test-data $version (once; about 20 MB)"
  (cd "$tmp" && apt-get download -qq "mariadb-test-data=$version" 2>&1 | grep -v unsandboxed >&2 || true)
  local deb; deb="$(ls "$tmp"/mariadb-test-data_*.deb 2>/dev/null | head -1)"
  [ -n "$deb" ] || { log "apt-get download mariadb-test-data=$version failed"; rm -rf "$tmp"; return 1; }
  extract "$deb" "$target" "${MARIADB_FILES[@]}"
  rm -rf "$tmp"
}

case "${1:-fetch}" in
  fetch)
    mkdir -p "$DEST"
    (
      flock 9
      mysql_corpus
      mariadb_corpus
    ) 9>"$DEST.lock"
    ;;
  status) ls -d "$DEST"/*/ 2>/dev/null || echo "nothing fetched yet" ;;
  *) echo "usage: $0 [fetch|status]" >&2; exit 2 ;;
esac
