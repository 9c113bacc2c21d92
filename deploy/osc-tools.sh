#!/usr/bin/env bash
# Installs the online schema change tools that big shops run instead of ALTER TABLE, for the
# live tests of issue 36 (tests/support/onlineddl.py drives them against the servers of services.sh):
#   pt-online-schema-change  Debian's percona-toolkit (3.2.1 on bookworm), with the Perl DBI and
#                            DBD::mysql it needs (the package depends on them)
#   gh-ost                   v1.1.8, built once per machine from its Go module (v1.1.6 stops on
#                            MySQL 9.7: SHOW SLAVE STATUS is gone) into
#                            ~/.cache/sluice/gh-ost/v1.1.8/gh-ost; Go's module, build and path
#                            caches under ~/.cache/sluice/go, so nothing lands outside the cache
#
#   deploy/osc-tools.sh          install what is missing (a no-op once installed)
#   deploy/osc-tools.sh status   where each tool is
#
# SLUICE_CACHE_DIR moves the cache (a fresh one builds gh-ost again).
set -euo pipefail

CACHE="${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}"
GHOST_VERSION=v1.1.8
GHOST_MODULE=github.com/github/gh-ost
GHOST="$CACHE/gh-ost/$GHOST_VERSION/gh-ost"
GO_HOME="$CACHE/go"

log() { printf '[osc-tools] %s\n' "$*" >&2; }

# shellcheck source=deploy/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

pt_osc_ready() {
  command -v pt-online-schema-change >/dev/null && perl -MDBI -MDBD::mysql -e 1 2>/dev/null
}

pt_osc() {
  pt_osc_ready && return 0
  apt_install percona-toolkit
  pt_osc_ready || { log "pt-online-schema-change or Perl's DBD::mysql is still missing after apt"; return 1; }
  log "pt-online-schema-change $(pt-online-schema-change --version | awk '{print $2}') installed"
}

go_env() {
  # The environment of every go command here: all of Go's state under the cache. -modcacherw
  # leaves the module cache removable with rm -rf; -mod=mod because a module's zip keeps only
  # vendor/modules.txt, not the vendored sources gh-ost's go.mod would otherwise select.
  env GOPATH="$GO_HOME" GOMODCACHE="$GO_HOME/pkg/mod" GOCACHE="$GO_HOME/cache" \
    GOFLAGS="-mod=mod -modcacherw -buildvcs=false" GOTOOLCHAIN=local "$@"
}

gh_ost_build() {
  command -v go >/dev/null || { log "no go command: gh-ost is built from its Go module"; return 1; }
  local json dir commit build_log="$CACHE/gh-ost/$GHOST_VERSION.log"
  log "building gh-ost $GHOST_VERSION from its Go module (once per machine, a few minutes)"
  mkdir -p "$(dirname "$GHOST")"
  json="$(cd / && go_env go mod download -json "$GHOST_MODULE@$GHOST_VERSION" 2>"$build_log")" \
    || { log "go mod download $GHOST_MODULE@$GHOST_VERSION failed: $json"; cat "$build_log" >&2; return 1; }
  dir="$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$json")"
  commit="$(sed -n 's/^\t\t"Hash": "\(.*\)",$/\1/p' <<<"$json")"
  [ -d "$dir" ] || { log "go mod download gave no source directory: $json"; return 1; }
  # The version and commit gh-ost's own build.sh stamps in, so `gh-ost --version` tells.
  (cd "$dir" && go_env go build -o "$GHOST.partial" \
     -ldflags "-X main.AppVersion=${GHOST_VERSION#v} -X main.GitCommit=${commit:-unknown}" ./go/cmd/gh-ost >>"$build_log" 2>&1) \
    || { log "go build of gh-ost failed; see $build_log"; tail -20 "$build_log" >&2; rm -f "$GHOST.partial"; return 1; }
  mv "$GHOST.partial" "$GHOST"
  rm -rf "$GO_HOME/cache" "$build_log"  # the build cache (~200 MB) serves no second build; the modules stay
  log "gh-ost $("$GHOST" --version | head -1) at $GHOST"
}

gh_ost() {
  [ -x "$GHOST" ] && return 0
  mkdir -p "$CACHE"
  (
    flock 9
    [ -x "$GHOST" ] || gh_ost_build
  ) 9>"$CACHE/gh-ost.lock"
}

case "${1:-install}" in
  install) pt_osc; gh_ost ;;
  status)
    if pt_osc_ready; then echo "pt-online-schema-change: $(command -v pt-online-schema-change)"
    else echo "pt-online-schema-change: missing"; fi
    if [ -x "$GHOST" ]; then echo "gh-ost: $GHOST"; else echo "gh-ost: missing"; fi ;;
  *) echo "usage: $0 [install|status]" >&2; exit 2 ;;
esac
