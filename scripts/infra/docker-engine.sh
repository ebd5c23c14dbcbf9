#!/usr/bin/env bash
# The project's own Docker engine (Debian's docker.io), used to build the image without any registry.
#
#   scripts/infra/docker-engine.sh start    start it (idempotent; a running engine gets a fresh TTL)
#   scripts/infra/docker-engine.sh stop     stop it (idempotent)
#   scripts/infra/docker-engine.sh status   exit 0 and say so if it answers, exit 1 otherwise
#   scripts/infra/docker-engine.sh env      print DOCKER_HOST=unix://... (for `export $(... env)`)
#
# It is a private daemon, separate from any system Docker or the cluster's containerd:
#   socket      $ICEBERGSYNC_DOCKER_RUN/docker.sock (default /run/icebergsync-docker/docker.sock)
#   exec root   $ICEBERGSYNC_DOCKER_RUN/exec (its own managed containerd lives under it)
#   data root   $ICEBERGSYNC_CACHE/docker/data (images and build cache survive restarts)
# with --iptables=false --bridge=none: it never touches the host's firewall or routes, and
# containers get either the host network (builds: --network=host) or none (--network=none).
# Lifetime: a watchdog stops it ICEBERGSYNC_DOCKER_TTL seconds (default 10800) after the last
# `start`, so a forgotten engine does not outlive the test run by long.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

SELF="$REPO_ROOT/scripts/infra/docker-engine.sh"
RUN_DIR="${ICEBERGSYNC_DOCKER_RUN:-/run/icebergsync-docker}"
SOCKET="$RUN_DIR/docker.sock"
PIDFILE="$RUN_DIR/dockerd.pid"
DEADLINE_FILE="$RUN_DIR/deadline"
WATCHDOG_PIDFILE="$RUN_DIR/watchdog.pid"
LOGFILE="$RUN_DIR/dockerd.log"
DATA_ROOT="$ICEBERGSYNC_CACHE/docker/data"
TTL="${ICEBERGSYNC_DOCKER_TTL:-10800}"
export DOCKER_HOST="unix://$SOCKET"

running_pid() { # the daemon's pid if it is alive
  [[ -f "$PIDFILE" ]] || return 1
  local pid; pid="$(cat "$PIDFILE")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

ensure_installed() {
  command -v dockerd >/dev/null && command -v docker >/dev/null && return 0
  log "installing Debian's docker.io (dockerd, containerd, runc)"
  apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends docker.io >&2
}

start_watchdog() { # (re)arm the TTL: the watchdog stops the engine once the deadline has passed
  echo $(( $(date +%s) + TTL )) >"$DEADLINE_FILE"
  if [[ -f "$WATCHDOG_PIDFILE" ]] && kill -0 "$(cat "$WATCHDOG_PIDFILE")" 2>/dev/null; then
    return 0
  fi
  nohup setsid bash -c '
    while sleep 30; do
      [[ -f "$1" ]] || exit 0
      (( $(date +%s) < $(cat "$1") )) && continue
      exec bash "$2" stop
    done' watchdog "$DEADLINE_FILE" "$SELF" >/dev/null 2>&1 </dev/null 7>&- 9>&- &
  echo $! >"$WATCHDOG_PIDFILE"
}

do_start() {
  ensure_installed
  mkdir -p "$RUN_DIR" "$DATA_ROOT"
  if running_pid >/dev/null && answers; then
    start_watchdog
    return 0
  fi
  rm -f "$SOCKET"
  log "starting the project's Docker engine ($SOCKET, data in $DATA_ROOT, TTL ${TTL}s)"
  nohup setsid dockerd \
    --host "unix://$SOCKET" \
    --pidfile "$PIDFILE" \
    --exec-root "$RUN_DIR/exec" \
    --data-root "$DATA_ROOT" \
    --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false --bridge=none \
    >>"$LOGFILE" 2>&1 </dev/null 9>&- &
  local pid=$! tries
  for tries in $(seq 1 120); do
    answers && { start_watchdog; return 0; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  log "the Docker engine did not come up; last lines of $LOGFILE:"
  tail -20 "$LOGFILE" >&2
  return 1
}

do_stop() {
  local pid tries
  if pid="$(running_pid)"; then
    log "stopping the project's Docker engine (pid $pid)"
    kill "$pid"
    for tries in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -f "$DEADLINE_FILE" "$PIDFILE" "$SOCKET"
  if [[ -f "$WATCHDOG_PIDFILE" ]]; then
    pid="$(cat "$WATCHDOG_PIDFILE")"
    rm -f "$WATCHDOG_PIDFILE"
    [[ "$pid" != "$PPID" && "$pid" != "$$" ]] && kill "$pid" 2>/dev/null || true
  fi
}

do_status() {
  if running_pid >/dev/null && answers; then
    echo "running: $DOCKER_HOST (server $(docker version --format '{{.Server.Version}}'), data $DATA_ROOT)"
  else
    echo "stopped"
    return 1
  fi
}

case "${1:-}" in
  start|stop)
    mkdir -p "$RUN_DIR"
    exec 9>"$RUN_DIR.lock"
    flock 9
    "do_$1" ;;
  status) do_status ;;
  env) echo "DOCKER_HOST=$DOCKER_HOST" ;;
  *) sed -n '2,16p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
