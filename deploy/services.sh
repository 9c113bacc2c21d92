#!/usr/bin/env bash
# Starts and stops the real services Sluice's tests and demo use, on loopback, with all
# data under the project's run folder (.run/). Idempotent: `up` on a running service is a no-op.
#
#   deploy/services.sh up      install what is missing (apt), then start everything; fetch the
#                              DDL corpus (deploy/ddl-corpus.sh) once per machine
#   deploy/services.sh down    stop everything this script started, and the Spark cluster of
#                              deploy/spark/cluster.sh if it runs
#   deploy/services.sh status  one line per service
#   deploy/services.sh restart-mariadb|restart-mysql|restart-redis|restart-kafka|restart-registry
#                                  (the tests' outage cases)
#
# Besides the plaintext services, secured ones as companies run them, all with a private CA
# made here (.run/tls/ca.pem): Kafka listeners with SASL_SSL (SCRAM-SHA-512, PLAIN) and with
# mutual TLS, a Redis that takes only TLS and a password, and on each server a checkpoint
# user that must use TLS. Every password is generated into a 0600 file under .run/ (never
# an argument): .run/kafka/sasl.password, .run/redis/tls.password,
# .run/<server>/checkpoint.password; the client certificate is .run/tls/client.pem.
#
# MariaDB 10.11 and Redis come from Debian's packages. MySQL 9.7 has no bookworm package:
# it is Debian sid's mysql-server-core, installed into a private sid root made with
# debootstrap (cached under ~/.cache/sluice, shared read-only by every run folder) and run
# straight from there through that root's own dynamic loader, so its data stays in .run/.
# The schema registry is Apicurio Registry 2.4 (its Confluent-compatible API at /apis/ccompat/v7),
# built once per machine from Maven Central by deploy/registry/pom.xml into one runnable jar
# (cached under ~/.cache/sluice/registry) and run with `java -jar`, its store an H2 file in .run/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="${SLUICE_RUN_DIR:-$ROOT/.run}"
MARIADB_PORT="${SLUICE_MARIADB_PORT:-3306}"
MARIADB_DIR="$RUN/mariadb"
MARIADB_SOCK="$MARIADB_DIR/mariadb.sock"
REDIS_PORT="${SLUICE_REDIS_PORT:-6379}"
REDIS_DIR="$RUN/redis"
KAFKA_PORT="${SLUICE_KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${SLUICE_KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_DIR="$RUN/kafka"
# Secured listeners beside the plaintext one: SASL_SSL (SCRAM-SHA-512 and PLAIN) and mutual TLS.
KAFKA_SASL_PORT="${SLUICE_KAFKA_SASL_PORT:-9094}"
KAFKA_MTLS_PORT="${SLUICE_KAFKA_MTLS_PORT:-9095}"
REDIS_TLS_PORT="${SLUICE_REDIS_TLS_PORT:-6380}"   # a second Redis: TLS only, with a password
MYSQL_PORT="${SLUICE_MYSQL_PORT:-3307}"
MYSQL_DIR="$RUN/mysql"
MYSQL_SOCK="$MYSQL_DIR/mysqld.sock"
CACHE="${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}"
SID_ROOT="$CACHE/mysql-sid-root"
REGISTRY_PORT="${SLUICE_REGISTRY_PORT:-8081}"
REGISTRY_DIR="$RUN/registry"
REGISTRY_API="http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"
SID_MIRROR="${SLUICE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

log() { printf '[services] %s\n' "$*" >&2; }

# shellcheck source=deploy/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

mariadb_conf() {
  cat >"$MARIADB_DIR/my.cnf" <<EOF
[mariadbd]
datadir=$MARIADB_DIR/data
socket=$MARIADB_SOCK
pid-file=$MARIADB_DIR/mariadbd.pid
log-error=$MARIADB_DIR/error.log
# Its own temporary files (#sql-temptable-*) under its run folder: two bring-ups at once shared /tmp.
tmpdir=$MARIADB_DIR/tmp
bind-address=127.0.0.1
port=$MARIADB_PORT
user=$(id -un)
skip-name-resolve
server-id=1
log-bin=$MARIADB_DIR/binlog/mariadb-bin
binlog_format=ROW
binlog_row_image=FULL
# MINIMAL, production's default: column names and ENUM/SET labels come from Sluice's schema
# history alone. Tests that check FULL metadata against the history switch it for a while
# (tests/support/live.py, row_metadata("FULL")).
binlog_row_metadata=MINIMAL
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

client_cert() {
  # A client certificate signed by the private CA: Kafka's mutual-TLS listener asks for one.
  local dir="$RUN/tls"
  [ -f "$dir/client.pem" ] && return 0
  tls_certs
  openssl req -newkey rsa:2048 -nodes -subj "/CN=sluice-client" \
    -keyout "$dir/client-key.pem" -out "$dir/client.csr" 2>/dev/null
  openssl x509 -req -in "$dir/client.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" -CAcreateserial \
    -days 3650 -out "$dir/client.pem" 2>/dev/null
  chmod 644 "$dir/client.pem" "$dir/client-key.pem"
}

secret_file() {
  # $1: a file that holds a generated password (made once, readable by its owner only).
  [ -f "$1" ] || { mkdir -p "$(dirname "$1")"; (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$1"); }
}

checkpoint_user() {
  # $1: the privilege that keeps a session's writes out of the binlog on this server (the
  # checkpoint database lives on the source here); $2: the password file; the rest: the
  # server's client and its socket arguments. The checkpoint database's own user, which
  # must connect over TLS, with exactly the README's grants.
  local secret="$2"
  secret_file "$secret"
  "${@:3}" <<EOF
CREATE USER IF NOT EXISTS 'sluice_meta'@'127.0.0.1' IDENTIFIED BY '$(cat "$secret")' REQUIRE SSL;
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER ON \`sluice_meta_tls\`.* TO 'sluice_meta'@'127.0.0.1';
GRANT $1 ON *.* TO 'sluice_meta'@'127.0.0.1';
EOF
}

mariadb_up() {
  if mariadb_alive; then log "mariadb already up on 127.0.0.1:$MARIADB_PORT"; return 0; fi
  apt_install mariadb-server mariadb-client openssl
  mkdir -p "$MARIADB_DIR/binlog" "$MARIADB_DIR/tmp"
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
  # root over TCP from 127.0.0.1 with no password (the tests' own SQL), and the connector's
  # user with exactly the README's MariaDB grants and a password generated here, kept in a
  # file (never an argument).
  local secret="$MARIADB_DIR/connector.password"
  [ -f "$secret" ] || { (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$secret"); }
  mariadb --socket="$MARIADB_SOCK" -uroot <<EOF
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS 'sluice'@'127.0.0.1' IDENTIFIED BY '$(cat "$secret")';
GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'sluice'@'127.0.0.1';
FLUSH PRIVILEGES;
EOF
  checkpoint_user "BINLOG ADMIN" "$MARIADB_DIR/checkpoint.password" mariadb --socket="$MARIADB_SOCK" -uroot
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

# -- MySQL 9.7 (Debian sid's package, from a private sid root) ---------------------------

sid_root() {
  # The root is built once per machine (flock: concurrent runs wait for the first) and never
  # written again; `.sluice-ready` names what was installed.
  [ -f "$SID_ROOT/.sluice-ready" ] && return 0
  apt_install debootstrap
  mkdir -p "$CACHE"
  (
    flock 9
    [ -f "$SID_ROOT/.sluice-ready" ] && exit 0
    local tmp="$SID_ROOT.partial"
    rm -rf "$tmp"
    log "making a Debian sid root for MySQL in $SID_ROOT (debootstrap, once per machine)"
    debootstrap --variant=minbase sid "$tmp" "$SID_MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
      || { log "debootstrap failed; see $CACHE/debootstrap.log"; tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
    # The machine's clock may be past the mirror's Valid-Until; no service starts inside the root.
    echo 'Acquire::Check-Valid-Until "false";' >"$tmp/etc/apt/apt.conf.d/99novalid"
    printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d" && chmod +x "$tmp/usr/sbin/policy-rc.d"
    { chroot "$tmp" apt-get update -qq \
      && chroot "$tmp" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           mysql-server-core mysql-client-core \
      && chroot "$tmp" apt-get clean; } >"$CACHE/sid-apt.log" 2>&1 \
      || { log "installing MySQL into the sid root failed; see $CACHE/sid-apt.log"; tail -20 "$CACHE/sid-apt.log" >&2; exit 1; }
    chroot "$tmp" dpkg-query -W mysql-server-core mysql-client-core >"$tmp/.sluice-ready"
    mv "$tmp" "$SID_ROOT"
  ) 9>"$CACHE/mysql-sid-root.lock"
}

mysql_wrappers() {
  # .run/mysql/bin/<tool>: the sid root's binaries run through its own loader and libraries.
  mkdir -p "$MYSQL_DIR/bin"
  local tool
  for tool in mysqld mysql mysqladmin mysqlbinlog mysqldump; do
    local path="$SID_ROOT/usr/bin/$tool"
    [ "$tool" = mysqld ] && path="$SID_ROOT/usr/sbin/mysqld"
    cat >"$MYSQL_DIR/bin/$tool" <<EOF
#!/bin/sh
exec "$SID_ROOT/lib64/ld-linux-x86-64.so.2" \\
  --library-path "$SID_ROOT/lib/x86_64-linux-gnu:$SID_ROOT/usr/lib/x86_64-linux-gnu" "$path" "\$@"
EOF
    chmod +x "$MYSQL_DIR/bin/$tool"
  done
}

mysql_conf() {
  # Production's settings where it matters to CDC: GTIDs on, binlog_row_metadata left at its
  # default (MINIMAL), ROW/FULL (the defaults), durable commits (sync_binlog=1 and
  # innodb_flush_log_at_trx_commit=1, the defaults), caching_sha2_password, TLS.
  cat >"$MYSQL_DIR/my.cnf" <<EOF
[mysqld]
basedir=$SID_ROOT/usr
lc-messages-dir=$SID_ROOT/usr/share/mysql
character-sets-dir=$SID_ROOT/usr/share/mysql/charsets
plugin-dir=$SID_ROOT/usr/lib/mysql/plugin
datadir=$MYSQL_DIR/data
socket=$MYSQL_SOCK
pid-file=$MYSQL_DIR/mysqld.pid
log-error=$MYSQL_DIR/error.log
secure-file-priv=$MYSQL_DIR/files
tmpdir=$MYSQL_DIR/tmp
user=$(id -un)
bind-address=127.0.0.1
port=$MYSQL_PORT
mysqlx=OFF
skip-name-resolve
server-id=2
log-bin=$MYSQL_DIR/binlog/mysql-bin
gtid_mode=ON
enforce_gtid_consistency=ON
innodb_buffer_pool_size=256M
ssl-ca=$RUN/tls/ca.pem
ssl-cert=$RUN/tls/server.pem
ssl-key=$RUN/tls/server-key.pem
EOF
}

mysql_alive() {
  [ -S "$MYSQL_SOCK" ] && [ -x "$MYSQL_DIR/bin/mysqladmin" ] \
    && "$MYSQL_DIR/bin/mysqladmin" --socket="$MYSQL_SOCK" -uroot ping >/dev/null 2>&1
}

mysql_users() {
  # root over TCP from 127.0.0.1 without a password (the tests' admin, as on MariaDB), and the
  # connector's user with exactly the README's grants, caching_sha2_password (the default)
  # and a password generated here, kept in a file (never an argument).
  local secret="$MYSQL_DIR/connector.password"
  [ -f "$secret" ] || { (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$secret"); }
  "$MYSQL_DIR/bin/mysql" --socket="$MYSQL_SOCK" -uroot <<EOF
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS 'sluice'@'127.0.0.1' IDENTIFIED BY '$(cat "$secret")';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'sluice'@'127.0.0.1';
EOF
  checkpoint_user SESSION_VARIABLES_ADMIN "$MYSQL_DIR/checkpoint.password" "$MYSQL_DIR/bin/mysql" \
    --socket="$MYSQL_SOCK" -uroot
}

mysql_up() {
  if mysql_alive; then log "mysql already up on 127.0.0.1:$MYSQL_PORT"; return 0; fi
  sid_root
  mkdir -p "$MYSQL_DIR/binlog" "$MYSQL_DIR/files" "$MYSQL_DIR/tmp"
  tls_certs
  mysql_wrappers
  mysql_conf
  if [ ! -d "$MYSQL_DIR/data/mysql" ]; then
    log "initialising mysql data dir ($(cut -f2 "$SID_ROOT/.sluice-ready" | head -1))"
    rm -rf "$MYSQL_DIR/data"
    "$MYSQL_DIR/bin/mysqld" --defaults-file="$MYSQL_DIR/my.cnf" --initialize-insecure >/dev/null 2>&1 \
      || { log "mysqld --initialize failed; see $MYSQL_DIR/error.log"; tail -20 "$MYSQL_DIR/error.log" >&2; exit 1; }
  fi
  (setsid "$MYSQL_DIR/bin/mysqld" --defaults-file="$MYSQL_DIR/my.cnf" >/dev/null 2>&1 &)
  for _ in $(seq 1 120); do
    if mysql_alive; then break; fi
    sleep 0.5
  done
  mysql_alive || { log "mysql did not start; see $MYSQL_DIR/error.log"; tail -20 "$MYSQL_DIR/error.log" >&2; exit 1; }
  mysql_users
  log "mysql up on 127.0.0.1:$MYSQL_PORT (binlogs in $MYSQL_DIR/binlog)"
}

mysql_down() {
  if [ -f "$MYSQL_DIR/mysqld.pid" ]; then
    local pid; pid="$(cat "$MYSQL_DIR/mysqld.pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    log "mysql stopped"
  fi
}

# -- Redis ----------------------------------------------------------------------------

redis_alive() {
  command -v redis-cli >/dev/null && redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG
}

redis_up() {
  if redis_alive; then log "redis already up on 127.0.0.1:$REDIS_PORT"; return 0; fi
  apt_install redis-server
  mkdir -p "$REDIS_DIR"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$REDIS_DIR" --save "" --appendonly no \
    --daemonize yes --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log"
  for _ in $(seq 1 40); do redis_alive && break; sleep 0.25; done
  redis_alive || { log "redis did not start; see $REDIS_DIR/redis.log"; exit 1; }
  log "redis up on 127.0.0.1:$REDIS_PORT"
}

redis_tls_alive() {
  [ -f "$REDIS_DIR/tls.password" ] && command -v redis-cli >/dev/null \
    && REDISCLI_AUTH="$(cat "$REDIS_DIR/tls.password")" redis-cli --tls --cacert "$RUN/tls/ca.pem" \
       -h 127.0.0.1 -p "$REDIS_TLS_PORT" ping 2>/dev/null | grep -q PONG
}

redis_tls_up() {
  # TLS only (no plaintext port) and a password, from a 0600 config file, not arguments.
  if redis_tls_alive; then log "redis (TLS) already up on 127.0.0.1:$REDIS_TLS_PORT"; return 0; fi
  mkdir -p "$REDIS_DIR"
  tls_certs
  secret_file "$REDIS_DIR/tls.password"
  (umask 077; cat >"$REDIS_DIR/tls.conf" <<EOF
port 0
tls-port $REDIS_TLS_PORT
bind 127.0.0.1
tls-cert-file $RUN/tls/server.pem
tls-key-file $RUN/tls/server-key.pem
tls-ca-cert-file $RUN/tls/ca.pem
tls-auth-clients no
requirepass $(cat "$REDIS_DIR/tls.password")
dir $REDIS_DIR
dbfilename tls.rdb
save ""
appendonly no
daemonize yes
pidfile $REDIS_DIR/redis-tls.pid
logfile $REDIS_DIR/redis-tls.log
EOF
)
  redis-server "$REDIS_DIR/tls.conf"
  for _ in $(seq 1 40); do redis_tls_alive && break; sleep 0.25; done
  redis_tls_alive || { log "redis (TLS) did not start; see $REDIS_DIR/redis-tls.log"; exit 1; }
  log "redis (TLS, password) up on 127.0.0.1:$REDIS_TLS_PORT"
}

redis_down() {
  stop_pidfile "$REDIS_DIR/redis.pid" redis
}

# -- Kafka (single-node KRaft, jars from Maven Central) -----------------------------------

kafka_alive() {
  (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null && [ -f "$KAFKA_DIR/started" ]
}

kafka_lib() {
  # The broker's runtime classpath, resolved once by Maven (cached in ~/.m2) from deploy/kafka/pom.xml.
  local stamp; stamp="$(md5sum "$ROOT/deploy/kafka/pom.xml" | cut -c1-8)"
  [ -f "$KAFKA_DIR/lib/.resolved-$stamp" ] && return 0
  command -v mvn >/dev/null || apt_install maven
  log "resolving Kafka jars from Maven Central (deploy/kafka/pom.xml)"
  rm -rf "$KAFKA_DIR/lib"
  mvn -q -B -f "$ROOT/deploy/kafka/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$KAFKA_DIR/lib" >"$RUN/kafka-mvn.log" 2>&1 \
    || { log "maven failed; see $RUN/kafka-mvn.log"; tail -20 "$RUN/kafka-mvn.log" >&2; exit 1; }
  touch "$KAFKA_DIR/lib/.resolved-$stamp"
}

kafka_conf() {
  # The secured listeners' key material: the broker's certificate and key in one PEM file,
  # the private CA as the trust store (client certificates on the mutual-TLS listener). The
  # SASL password is generated here; PLAIN users are listed in this file (hence 0600), SCRAM
  # users live in the cluster's metadata (tests/support/live.py upserts the test user through the
  # admin API: a SCRAM password given to a tool would be a process argument).
  client_cert
  secret_file "$KAFKA_DIR/sasl.password"
  cat "$RUN/tls/server-key.pem" "$RUN/tls/server.pem" >"$KAFKA_DIR/broker.pem"
  chmod 600 "$KAFKA_DIR/broker.pem"
  (umask 077; cat >"$KAFKA_DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_PORT,SSL://127.0.0.1:$KAFKA_MTLS_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_PORT,SSL://127.0.0.1:$KAFKA_MTLS_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
ssl.keystore.type=PEM
ssl.keystore.location=$KAFKA_DIR/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$RUN/tls/ca.pem
listener.name.ssl.ssl.client.auth=required
sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_sluice="$(cat "$KAFKA_DIR/sasl.password")";
log.dirs=$KAFKA_DIR/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.retention.hours=24
EOF
)
  cat >"$KAFKA_DIR/log4j2.yaml" <<EOF
Configuration:
  Appenders:
    File:
      name: file
      fileName: "$KAFKA_DIR/server.log"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        ref: file
    Logger:
      - name: kafka.server.KafkaRaftServer
        level: INFO
EOF
}

kafka_java() {
  java -Xms256m -Xmx512m -cp "$KAFKA_DIR/lib/*" \
    -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.yaml" -Dkafka.logs.dir="$KAFKA_DIR" "$@"
}

kafka_up() {
  if kafka_alive; then log "kafka already up on 127.0.0.1:$KAFKA_PORT"; return 0; fi
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
  mkdir -p "$KAFKA_DIR"
  rm -f "$KAFKA_DIR/started"
  kafka_lib
  kafka_conf
  if [ ! -f "$KAFKA_DIR/data/meta.properties" ]; then
    local cluster; cluster="$(kafka_java kafka.tools.StorageTool random-uuid)"
    kafka_java kafka.tools.StorageTool format -t "$cluster" -c "$KAFKA_DIR/server.properties" >/dev/null
  fi
  (setsid bash -c 'echo $$ >"$1/kafka.pid"; exec "${@:2}"' _ "$KAFKA_DIR" \
     java -Xms256m -Xmx512m -cp "$KAFKA_DIR/lib/*" -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.yaml" \
     -Dkafka.logs.dir="$KAFKA_DIR" kafka.Kafka "$KAFKA_DIR/server.properties" \
     >"$KAFKA_DIR/stdout.log" 2>&1 &)
  for _ in $(seq 1 120); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null; then touch "$KAFKA_DIR/started"; break; fi
    sleep 0.5
  done
  kafka_alive || { log "kafka did not start; see $KAFKA_DIR/server.log"; tail -20 "$KAFKA_DIR/server.log" >&2; exit 1; }
  log "kafka up on 127.0.0.1:$KAFKA_PORT (KRaft, data in $KAFKA_DIR/data)"
}

kafka_down() {
  stop_pidfile "$KAFKA_DIR/kafka.pid" kafka
  rm -f "$KAFKA_DIR/started"
}

# -- Schema registry (Apicurio Registry 2.4, Confluent's REST API at /apis/ccompat/v7) ------

registry_jar() {
  # The runnable jar of this deploy/registry/pom.xml (built by registry_build).
  printf '%s\n' "$CACHE/registry/apicurio-registry-$(md5sum "$ROOT/deploy/registry/pom.xml" | cut -c1-8)-runner.jar"
}

registry_build() {
  # Builds the runnable jar once per pom (flock: concurrent runs wait for the first), in the
  # cache, not the work tree; ~/.m2 keeps the downloads.
  local jar; jar="$(registry_jar)"
  [ -f "$jar" ] && return 0
  command -v mvn >/dev/null || apt_install maven
  mkdir -p "$CACHE/registry"
  (
    flock 9
    [ -f "$jar" ] && exit 0
    local build="${jar%-runner.jar}.build"
    rm -rf "$build" && mkdir -p "$build"
    cp "$ROOT/deploy/registry/pom.xml" "$build/pom.xml"
    log "building the schema registry from Maven Central (deploy/registry/pom.xml, once per machine)"
    # The app's own application.properties asks its prod profile for a legacy jar: one jar here.
    mvn -q -B -f "$build/pom.xml" -DskipTests '-D%prod.quarkus.package.type=uber-jar' package \
      >"$build.log" 2>&1 \
      || { log "maven failed; see $build.log"; tail -20 "$build.log" >&2; exit 1; }
    mv "$build/target/sluice-schema-registry-1-runner.jar" "$jar.partial" && mv "$jar.partial" "$jar"
    rm -rf "$build" "$build.log"
  ) 9>"$CACHE/registry.lock"
}

registry_alive() {
  [ -f "$REGISTRY_DIR/registry.pid" ] && curl -sf -m 2 -o /dev/null "$REGISTRY_API/subjects"
}

registry_up() {
  if registry_alive; then log "schema registry already up on 127.0.0.1:$REGISTRY_PORT"; return 0; fi
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
  command -v curl >/dev/null || apt_install curl
  registry_build
  local jar; jar="$(registry_jar)"
  mkdir -p "$REGISTRY_DIR"
  # H2 in a file: schema ids outlive a restart, as the messages in Kafka that name them do.
  (setsid bash -c 'echo $$ >"$1/registry.pid"; exec "${@:2}"' _ "$REGISTRY_DIR" \
     env REGISTRY_DATASOURCE_URL="jdbc:h2:file:$REGISTRY_DIR/data/registry" \
     java -Xms64m -Xmx384m -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$REGISTRY_PORT" -jar "$jar" \
     >"$REGISTRY_DIR/registry.log" 2>&1 &)
  for _ in $(seq 1 120); do registry_alive && break; sleep 0.5; done
  registry_alive || { log "schema registry did not start; see $REGISTRY_DIR/registry.log"; tail -20 "$REGISTRY_DIR/registry.log" >&2; exit 1; }
  # Apicurio starts with no global rule (NONE); Confluent's default level is BACKWARD.
  curl -sf -m 5 -o /dev/null -X PUT -H 'Content-Type: application/vnd.schemaregistry.v1+json' \
    --data '{"compatibility": "BACKWARD"}' "$REGISTRY_API/config"
  log "schema registry up on $REGISTRY_API"
}

registry_down() {
  stop_pidfile "$REGISTRY_DIR/registry.pid" "schema registry"
}

stop_pidfile() {
  # $1: pid file, $2: name. SIGTERM, then wait for the process to go.
  [ -f "$1" ] || return 0
  local pid; pid="$(cat "$1")"
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 80); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
    log "$2 stopped"
  fi
  rm -f "$1"
}

case "${1:-up}" in
  up) mariadb_up; mysql_up; redis_up; redis_tls_up; kafka_up; registry_up
      bash "$ROOT/deploy/osc-tools.sh" || log "pt-online-schema-change or gh-ost could not be installed (tests/support/onlineddl.py)"
      # the servers' own DDL tests (tests/test_ddl_corpus_live.py), fetched once per machine
      bash "$ROOT/deploy/ddl-corpus.sh" || log "the DDL corpus could not be fetched; tests/test_ddl_corpus_live.py will fail" ;;
  down) bash "$ROOT/deploy/spark/cluster.sh" down; registry_down; kafka_down; stop_pidfile "$REDIS_DIR/redis-tls.pid" "redis (TLS)"; redis_down; mysql_down; mariadb_down ;;
  restart-mariadb) mariadb_down; mariadb_up ;;  # the tests' "server restarts" case
  restart-mysql) mysql_down; mysql_up ;;
  restart-redis) redis_down; redis_up ;;
  restart-kafka) kafka_down; kafka_up ;;
  restart-registry) registry_down; registry_up ;;
  status)
    if mariadb_alive; then echo "mariadb: up 127.0.0.1:$MARIADB_PORT"; else echo "mariadb: down"; fi
    if mysql_alive; then echo "mysql: up 127.0.0.1:$MYSQL_PORT"; else echo "mysql: down"; fi
    if redis_alive; then echo "redis: up 127.0.0.1:$REDIS_PORT"; else echo "redis: down"; fi
    if redis_tls_alive; then echo "redis (TLS): up 127.0.0.1:$REDIS_TLS_PORT"; else echo "redis (TLS): down"; fi
    if kafka_alive; then echo "kafka: up 127.0.0.1:$KAFKA_PORT"; else echo "kafka: down"; fi
    if registry_alive; then echo "registry: up $REGISTRY_API"; else echo "registry: down"; fi ;;
  *) echo "usage: $0 up|down|status|restart-mariadb|restart-mysql|restart-redis|restart-kafka|restart-registry" >&2
     exit 2 ;;
esac
