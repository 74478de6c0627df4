#!/bin/bash
# axum_hello under http_load (hyper's HTTP/1.1 client, keep-alive, one current-thread
# runtime): axum on ustack over shm with a ustack client (model (a) and, with --local, model
# (b) on the server; the client's stack always in model (b)), then the same axum on tokio's
# own sockets with the same client over the kernel's loopback. Per run: requests/s, the
# server's CPU seconds (all its threads: in model (a) the loop thread too) and requests per
# server CPU-second, the client's CPU seconds and requests per CPU-second of both. No root.
#
#   cargo build --release -p ustack-tokio --example axum_hello --example http_load
#   bash crates/tokio/scripts/axum_shm_load.sh target/release/examples SECS CONNS WORKERS
set -u
DIR=$1; SECS=${2:-10}; CONNS=${3:-50}; W=${4:-1}
proc_cpu() { awk '{print $14+$15}' /proc/$1/stat; }
OUT=$(mktemp); SP=
cleanup() { [ -n "$SP" ] && kill "$SP" 2>/dev/null; rm -f "$OUT"; }
trap cleanup EXIT
load() { # label server-pid http_load args...
  local label=$1 pid=$2; shift 2
  local t0 t1 out cc cs req
  t0=$(proc_cpu "$pid")
  out=$(timeout $((SECS+30)) /usr/bin/time -f "CLIENTCPU %U %S" "$DIR/http_load" --conns "$CONNS" --secs "$SECS" "$@" 2>&1)
  t1=$(proc_cpu "$pid")
  cc=$(echo "$out" | awk '/CLIENTCPU/{print $2+$3}')
  req=$(echo "$out" | awk '/^requests/{print $4}')
  cs=$(echo "($t1-$t0)/100" | bc -l)
  if [ -z "$req" ]; then echo "$label: http_load failed: $out"; return; fi
  printf "%s: %s; server CPU %.2f s: %.0f req per server CPU-s; client CPU %.2f s: %.0f req per (server+client) CPU-s\n" \
    "$label" "$(echo "$out" | grep '^requests')" "$cs" "$(echo "$req/$cs" | bc -l)" "$cc" "$(echo "$req/($cs+$cc)" | bc -l)"
}
serve_shm() { # label axum_hello args...
  local label=$1; shift
  : > "$OUT"
  "$DIR/axum_hello" --link shm --addr 192.0.2.2:80 "$@" > "$OUT" 2>&1 &
  SP=$!
  for _ in $(seq 100); do grep -q shm-offer "$OUT" && break; sleep 0.1; done
  load "$label" "$SP" --link shm --offer "$(awk '/shm-offer/{print $2}' "$OUT")" --addr 192.0.2.2:80
  kill "$SP"; wait "$SP" 2>/dev/null; SP=
}
serve_shm "ustack over shm, model (a): $W tokio worker(s) and the loop thread" --workers "$W"
serve_shm "ustack over shm, model (b): one current-thread runtime" --local
: > "$OUT"
"$DIR/axum_hello" --link kernel --addr 127.0.0.1:18080 --workers "$W" > "$OUT" 2>&1 &
SP=$!
for _ in $(seq 100); do grep -q kernel-ready "$OUT" && break; sleep 0.1; done
load "kernel loopback (tokio::net, epoll), $W tokio worker(s)" "$SP" --link kernel --addr 127.0.0.1:18080
kill "$SP"; wait "$SP" 2>/dev/null; SP=
