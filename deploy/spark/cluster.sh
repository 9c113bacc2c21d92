#!/usr/bin/env bash
# A Spark standalone cluster on loopback, to run the Spark jobs with spark-submit as on a real
# cluster (spark/README.md, tests/test_spark_cluster_live.py): one master, one worker.
#
#   deploy/spark/cluster.sh up      start both, wait until the worker is registered (a no-op if up)
#   deploy/spark/cluster.sh down    stop both (the worker stops its executors)
#   deploy/spark/cluster.sh status  one line
#
# Master spark://127.0.0.1:7177 (web UI and JSON at http://127.0.0.1:8190/json/), worker web UI
# at 8191, 2 cores and 2 GiB. Spark comes from the pyspark package of the virtualenv
# ($SLUICE_VENV, default .venv): the pip package has bin/spark-class but not sbin/start-*.sh,
# so the daemons are started here, in the background, with their pid files, logs and the
# worker's directory (app-*/<executor>/ for each application) under .run/spark-cluster/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RUN="${SLUICE_RUN_DIR:-$ROOT/.run}"
DIR="$RUN/spark-cluster"
VENV="${SLUICE_VENV:-$ROOT/.venv}"
MASTER_PORT=7177
MASTER_UI_PORT=8190
WORKER_UI_PORT=8191
MASTER_JSON="http://127.0.0.1:$MASTER_UI_PORT/json/"
WAIT_S=180  # the JVMs start slowly on a busy 2-core machine
WORKERS="${SLUICE_SPARK_WORKERS:-1}"
CORES=$(( WORKERS > 1 ? 1 : 2 ))
WORKER_NAMES="worker"; for n in $(seq 2 "$WORKERS"); do WORKER_NAMES="$WORKER_NAMES worker-$n"; done

log() { printf '[spark-cluster] %s\n' "$*" >&2; }

alive() {  # $1: pid file
  [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

workers_registered() {  # all of them
  local alive; alive="$(curl -sf -m 2 "$MASTER_JSON" 2>/dev/null | grep -Eo '"aliveworkers" *: *[0-9]+' | grep -Eo '[0-9]+$')"
  [ "${alive:-0}" -ge "$WORKERS" ]
}

workers_alive() {
  local name; for name in $WORKER_NAMES; do alive "$DIR/$name.pid" || return 1; done
}

start() {  # $1: daemon name (its pid and log file), then spark-class's arguments
  local name="$1"; shift
  # spark-class execs java at its end: the pid written here is the daemon's. SPARK_HOME is
  # pyspark's directory: left unset, spark-class asks `python3` on PATH for it, which may
  # not be the venv's.
  (setsid bash -c 'echo $$ >"$1"; exec "${@:2}"' _ "$DIR/$name.pid" \
     env SPARK_HOME="$SPARK_HOME" SPARK_LOCAL_IP=127.0.0.1 "$VENV/bin/spark-class" "$@" \
     >"$DIR/$name.log" 2>&1 &)
}

up() {
  if alive "$DIR/master.pid" && workers_alive && workers_registered; then
    log "already up: spark://127.0.0.1:$MASTER_PORT (http://127.0.0.1:$MASTER_UI_PORT)"; return 0
  fi
  [ -x "$VENV/bin/spark-class" ] || { log "no $VENV/bin/spark-class: install pyspark into the venv (make install)"; exit 1; }
  command -v java >/dev/null || [ -n "${JAVA_HOME:-}" ] || { log "no java on PATH and no JAVA_HOME: Spark 4 needs Java 17 or 21"; exit 1; }
  SPARK_HOME="$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
  mkdir -p "$DIR/work"
  alive "$DIR/master.pid" || start master org.apache.spark.deploy.master.Master \
    --host 127.0.0.1 --port "$MASTER_PORT" --webui-port "$MASTER_UI_PORT"
  local name ui="$WORKER_UI_PORT"
  for name in $WORKER_NAMES; do
    alive "$DIR/$name.pid" || start "$name" org.apache.spark.deploy.worker.Worker "spark://127.0.0.1:$MASTER_PORT" \
      --host 127.0.0.1 --cores "$CORES" --memory 2g --webui-port "$ui" --work-dir "$DIR/work"
    ui=$((ui + 1))
  done
  for _ in $(seq 1 $((WAIT_S * 2))); do
    workers_registered && { log "up: spark://127.0.0.1:$MASTER_PORT, $WORKERS worker(s) (logs in $DIR)"; return 0; }
    alive "$DIR/master.pid" && workers_alive || break
    sleep 0.5
  done
  local failed=worker
  for name in $WORKER_NAMES; do alive "$DIR/$name.pid" || failed="$name"; done
  alive "$DIR/master.pid" || failed=master
  if alive "$DIR/$failed.pid"; then
    log "no worker registered with the master within ${WAIT_S}s; see $DIR/$failed.log"
  else
    log "the $failed exited before a worker registered; see $DIR/$failed.log"
  fi
  exit 1
}

stop() {  # $1: daemon name. SIGTERM, then wait for it to go; SIGKILL after 20 s.
  local pidfile="$DIR/$1.pid"
  [ -f "$pidfile" ] || return 0
  local pid; pid="$(cat "$pidfile")"
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 80); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
    log "$1 stopped"
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  up) up ;;
  down)
    for pidfile in "$DIR"/worker*.pid; do
      if [ -e "$pidfile" ]; then stop "$(basename "$pidfile" .pid)"; fi
    done
    stop master ;;
  status)
    if workers_registered; then echo "spark: up spark://127.0.0.1:$MASTER_PORT"; else echo "spark: down"; fi ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
