#!/usr/bin/env bash
# A production-shaped Concord on loopback: a 3-member etcd cluster, three
# Concord replicas and HAProxy in front, health-checking /readyz.
#
#   deploy/local/cluster.sh up      build, start everything, wait until ready
#   deploy/local/cluster.sh down    stop everything and delete its data
#   deploy/local/cluster.sh status  what runs, and whether each replica is ready
#
# Ports (BASE, default 17000): etcd clients BASE+1..3, etcd peers BASE+11..13,
# replicas BASE+21..23, HAProxy BASE+80, HAProxy stats BASE+81.
# State lives in deploy/local/.run (git-ignored).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
run=$here/.run
BASE=${BASE:-17000}

etcd_client() { echo $((BASE + $1)); }
etcd_peer() { echo $((BASE + 10 + $1)); }
replica_port() { echo $((BASE + 20 + $1)); }
lb_port=$((BASE + 80))
stats_port=$((BASE + 81))

say() { printf '%s\n' "$*"; }
die() { printf 'cluster.sh: %s\n' "$*" >&2; exit 1; }

# wait_for URL WHAT SECONDS: poll until URL answers 200.
wait_for() {
  local url=$1 what=$2 seconds=$3
  for ((i = 0; i < seconds * 10; i++)); do
    if curl -fsS -o /dev/null --max-time 1 "$url" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  die "$what did not become ready at $url within ${seconds}s (logs: $run/logs)"
}

start() { # start NAME CMD...: run in the background, log and pid under .run
  local name=$1; shift
  "$@" >"$run/logs/$name.log" 2>&1 &
  echo $! >"$run/pids/$name.pid"
}

up() {
  command -v haproxy >/dev/null || die "HAProxy is needed: apt-get install -y haproxy"
  [ -d "$run" ] && die "already up (or left over): run '$0 down' first"
  for p in $(etcd_client 1) $(etcd_client 2) $(etcd_client 3) $(etcd_peer 1) $(etcd_peer 2) $(etcd_peer 3) \
    $(replica_port 1) $(replica_port 2) $(replica_port 3) $lb_port $stats_port; do
    if (echo >/dev/tcp/127.0.0.1/$p) 2>/dev/null; then die "port $p is taken; pick other ports with BASE=<n> $0 up"; fi
  done
  mkdir -p "$run/bin" "$run/logs" "$run/pids" "$run/data"
  say "building etcd and concord..."
  (cd "$root" && go build -o "$run/bin/etcd" ./deploy/etcd && go build -o "$run/bin/concord" ./cmd/concord)

  local cluster="" endpoints=""
  for i in 1 2 3; do
    cluster+="${cluster:+,}etcd$i=http://127.0.0.1:$(etcd_peer $i)"
    endpoints+="${endpoints:+,}http://127.0.0.1:$(etcd_client $i)"
  done
  for i in 1 2 3; do
    start "etcd$i" "$run/bin/etcd" --name "etcd$i" --data-dir "$run/data/etcd$i" \
      --listen-client-urls "http://127.0.0.1:$(etcd_client $i)" --advertise-client-urls "http://127.0.0.1:$(etcd_client $i)" \
      --listen-peer-urls "http://127.0.0.1:$(etcd_peer $i)" --initial-advertise-peer-urls "http://127.0.0.1:$(etcd_peer $i)" \
      --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token concord-local
  done
  for i in 1 2 3; do wait_for "http://127.0.0.1:$(etcd_client $i)/health" "etcd$i" 60; done
  say "etcd cluster up: $endpoints"

  # Plain HTTP on loopback, open to anyone who reaches it (--insecure-serving
  # --anonymous-auth --authorization-mode AlwaysAllow): HAProxy checks /readyz
  # over HTTP and the kubeconfig below has no credential. CONCORD_FLAGS come
  # last and may override them (docs/security.md). Every replica signs and
  # verifies ServiceAccount tokens with the same key.
  openssl genrsa -out "$run/data/service-account.key" 2048 2>/dev/null || die "openssl genrsa failed: is openssl installed?"
  for i in 1 2 3; do
    start "concord$i" "$run/bin/concord" --etcd-servers "$endpoints" --bind-address 127.0.0.1 --port "$(replica_port $i)" \
      --shutdown-delay-duration 2s --insecure-serving --anonymous-auth --authorization-mode AlwaysAllow \
      --service-account-signing-key-file "$run/data/service-account.key" ${CONCORD_FLAGS:-}
  done
  for i in 1 2 3; do wait_for "http://127.0.0.1:$(replica_port $i)/readyz" "concord$i" 60; done
  say "concord replicas up on ports $(replica_port 1), $(replica_port 2), $(replica_port 3)"

  sed -e "s/@LB_PORT@/$lb_port/" -e "s/@STATS_PORT@/$stats_port/" \
    -e "s/@R1@/$(replica_port 1)/" -e "s/@R2@/$(replica_port 2)/" -e "s/@R3@/$(replica_port 3)/" \
    "$here/haproxy.cfg.in" >"$run/haproxy.cfg"
  haproxy -c -q -f "$run/haproxy.cfg" || die "HAProxy rejected $run/haproxy.cfg"
  start haproxy haproxy -db -f "$run/haproxy.cfg"
  wait_for "http://127.0.0.1:$lb_port/readyz" "HAProxy" 30

  cat >"$run/kubeconfig.yaml" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: concord-local
  cluster:
    server: http://127.0.0.1:$lb_port
users:
- name: concord-local
contexts:
- name: concord-local
  context: {cluster: concord-local, user: concord-local, namespace: default}
current-context: concord-local
KUBECONFIG
  say "ready: http://127.0.0.1:$lb_port (HAProxy stats: http://127.0.0.1:$stats_port/)"
  say "  export KUBECONFIG=$run/kubeconfig.yaml"
}

down() {
  [ -d "$run/pids" ] || { say "nothing is running"; rm -rf "$run"; return 0; }
  # Load balancer first, then the replicas (they drain), then etcd.
  for name in haproxy concord1 concord2 concord3 etcd1 etcd2 etcd3; do
    local f=$run/pids/$name.pid
    [ -f "$f" ] || continue
    local pid; pid=$(cat "$f")
    kill -TERM "$pid" 2>/dev/null || continue
    for ((i = 0; i < 300; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { say "$name did not stop in 30s; killing it"; kill -KILL "$pid" 2>/dev/null || true; }
  done
  rm -rf "$run"
  say "stopped; deleted $run"
}

status() {
  [ -d "$run/pids" ] || { say "not running"; return 0; }
  for name in etcd1 etcd2 etcd3 concord1 concord2 concord3 haproxy; do
    local pid; pid=$(cat "$run/pids/$name.pid" 2>/dev/null || echo)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then state=running; else state=stopped; fi
    say "$name: $state${pid:+ (pid $pid)}"
  done
  for i in 1 2 3; do
    say "concord$i /readyz: $(curl -s --max-time 2 "http://127.0.0.1:$(replica_port $i)/readyz" || echo unreachable)"
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) die "usage: $0 up|down|status" ;;
esac
