# Sourced by the e2e scripts (e2e/cluster, e2e/peers): where the local control plane keeps its
# state, its loopback ports, and the helpers that start, find and stop its processes, by the pid
# each start recorded, checked against /proc/<pid>/exe. Set `script` to the caller's name first.

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache="${TRAINSET_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainset-e2e}"
state="${TRAINSET_E2E_STATE:-$cache/state}"
pki="$state/pki"
logs="$state/logs"
pids="$state/pids"
kubeconfig="$state/admin.kubeconfig"

# Loopback ports (e2e/ports); override the base with TRAINSET_E2E_PORT_BASE to run two clusters
# side by side.
base="${TRAINSET_E2E_PORT_BASE:-26000}"
# shellcheck source=e2e/ports.sh
. "$here/ports.sh"

# The control plane's own processes, in start order.
components=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubelet-logs external-metrics jobset kueue)

log() { printf '%s %s: %s\n' "$(date -u +%H:%M:%S)" "$script" "$*" >&2; }
die() { log "error: $*"; exit 1; }

pid_of() { cat "$pids/$1.pid" 2>/dev/null || true; }
# A pid counts only while it still runs the component's binary (the name before any `@`, or the
# path in `<name>.exe` for a script's interpreter), so a stale pid file never leads to signalling
# an unrelated process that reused the number.
is_running() {
  local pid exe want
  pid=$(pid_of "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  exe=${exe% (deleted)}
  if [ -f "$pids/$1.exe" ]; then
    want=$(cat "$pids/$1.exe")
    [ "$exe" = "$want" ]
  else
    [[ "$exe" == */"${1%%@*}" ]]
  fi
}

# wait_for <seconds> <description> <command...>: polls the command every half second.
wait_for() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.5
  done
  log "$what is ready"
}

kubectl_() { "$bin/kubectl" --kubeconfig "$kubeconfig" --request-timeout=20s "$@"; }

# start <name> <command...>: runs the command in its own session, logging to logs/<name>.log.
start() {
  local name=$1
  shift
  if is_running "$name"; then return 0; fi
  setsid "$@" >"$logs/$name.log" 2>&1 </dev/null &
  echo $! >"$pids/$name.pid"
}

# Fails with the component's last log lines when it died while we waited for it.
must_run() {
  is_running "$1" && return 0
  tail -n 30 "$logs/$1.log" >&2 || true
  die "$1 exited; its log is $logs/$1.log"
}

crd_established() {
  [ "$(kubectl_ get crd "$1" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}')" = True ]
}

everything_up() {
  for c in "${components[@]}"; do is_running "$c" || return 1; done
  [ -f "$kubeconfig" ] && kubectl_ get --raw /readyz >/dev/null 2>&1
}

stop_one() {
  local c=$1 pid
  pid=$(pid_of "$c")
  if [ -n "$pid" ] && is_running "$c"; then
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 15))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pids/$c.pid" "$pids/$c.exe"
}

# Processes others started and registered here (trainset of e2e/demo and the e2e tests, and the
# install tests' `podman run`, which passes the SIGTERM on to its container).
stop_extras() {
  local f
  [ -d "$pids" ] || return 0
  for f in "$pids"/trainset@*.pid "$pids"/podman@*.pid; do
    [ -e "$f" ] || continue
    stop_one "$(basename "$f" .pid)"
  done
}
