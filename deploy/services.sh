#!/usr/bin/env bash
# Starts and stops the real services Sluice's tests and demo use, on loopback, with all
# data under the project's run folder (.run/). Idempotent: `up` on a running service is a no-op.
#
#   deploy/services.sh up      install what is missing (apt), then start everything
#   deploy/services.sh down    stop everything this script started
#   deploy/services.sh status  one line per service
#   deploy/services.sh restart-mariadb
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="${SLUICE_RUN_DIR:-$ROOT/.run}"
MARIADB_PORT="${SLUICE_MARIADB_PORT:-3306}"
MARIADB_DIR="$RUN/mariadb"
MARIADB_SOCK="$MARIADB_DIR/mariadb.sock"

log() { printf '[services] %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
  # $@: packages; installs only the missing ones.
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]} from apt"
  as_root apt-get update -qq
  # policy-rc.d keeps Debian from starting the system-wide default instances.
  as_root sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d'
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

mariadb_conf() {
  cat >"$MARIADB_DIR/my.cnf" <<EOF
[mariadbd]
datadir=$MARIADB_DIR/data
socket=$MARIADB_SOCK
pid-file=$MARIADB_DIR/mariadbd.pid
log-error=$MARIADB_DIR/error.log
bind-address=127.0.0.1
port=$MARIADB_PORT
user=$(id -un)
skip-name-resolve
server-id=1
log-bin=$MARIADB_DIR/binlog/mariadb-bin
binlog_format=ROW
binlog_row_image=FULL
binlog_row_metadata=FULL
binlog_annotate_row_events=ON
binlog_checksum=CRC32
gtid_strict_mode=ON
log_slave_updates=ON
max_allowed_packet=1G
innodb_buffer_pool_size=256M
innodb_log_file_size=256M
innodb_flush_log_at_trx_commit=2
sync_binlog=0
character-set-server=utf8mb4
collation-server=utf8mb4_general_ci
ssl-ca=$RUN/tls/ca.pem
ssl-cert=$RUN/tls/server.pem
ssl-key=$RUN/tls/server-key.pem
EOF
}

tls_certs() {
  # A private CA and a server certificate for 127.0.0.1, so TLS connections can be verified.
  local dir="$RUN/tls"
  [ -f "$dir/server.pem" ] && return 0
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=sluice-test-ca" \
    -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$dir/server-key.pem" -out "$dir/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$dir/san.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" -CAcreateserial \
    -days 3650 -extfile "$dir/san.ext" -out "$dir/server.pem" 2>/dev/null
  chmod 644 "$dir"/*.pem
}

mariadb_up() {
  if mariadb_alive; then log "mariadb already up on 127.0.0.1:$MARIADB_PORT"; return 0; fi
  apt_install mariadb-server mariadb-client openssl
  mkdir -p "$MARIADB_DIR/binlog"
  tls_certs
  mariadb_conf
  if [ ! -d "$MARIADB_DIR/data/mysql" ]; then
    log "initialising mariadb data dir"
    mariadb-install-db --defaults-file="$MARIADB_DIR/my.cnf" --auth-root-authentication-method=normal \
      --skip-test-db >"$MARIADB_DIR/install.log" 2>&1
  fi
  (setsid mariadbd --defaults-file="$MARIADB_DIR/my.cnf" >/dev/null 2>&1 &)
  for _ in $(seq 1 60); do
    if mariadb_alive; then break; fi
    sleep 0.5
  done
  mariadb_alive || { log "mariadb did not start; see $MARIADB_DIR/error.log"; tail -20 "$MARIADB_DIR/error.log" >&2; exit 1; }
  # root over TCP from 127.0.0.1 with no password, as the README promises.
  mariadb --socket="$MARIADB_SOCK" -uroot -e "
    CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
    GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
    FLUSH PRIVILEGES;"
  log "mariadb up on 127.0.0.1:$MARIADB_PORT (binlogs in $MARIADB_DIR/binlog)"
}

mariadb_alive() {
  [ -S "$MARIADB_SOCK" ] && command -v mariadb-admin >/dev/null \
    && mariadb-admin --socket="$MARIADB_SOCK" -uroot ping >/dev/null 2>&1
}

mariadb_down() {
  if [ -f "$MARIADB_DIR/mariadbd.pid" ]; then
    local pid; pid="$(cat "$MARIADB_DIR/mariadbd.pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    log "mariadb stopped"
  fi
}

case "${1:-up}" in
  up) mariadb_up ;;
  down) mariadb_down ;;
  restart-mariadb) mariadb_down; mariadb_up ;;  # the tests' "server restarts" case
  status)
    if mariadb_alive; then echo "mariadb: up 127.0.0.1:$MARIADB_PORT"; else echo "mariadb: down"; fi ;;
  *) echo "usage: $0 up|down|status|restart-mariadb" >&2; exit 2 ;;
esac
