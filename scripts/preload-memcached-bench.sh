#!/usr/bin/env bash
# Kernel against ustack under libustack_preload.so for memcached: memcslap (libmemcached-
# tools) sets, then gets, 4 threads x N keys, once against memcached on ustack (over a TUN
# interface) and once against memcached on the kernel (over a veth pair), the client in
# one namespace; the server's CPU time read from /proc (docs/preload.md has the table).
# Root; needs memcached, memcslap and `cargo build --release -p ustack-preload` first.
# Every command is bounded in time; the namespaces are removed on exit. N: $1 (20000).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
C=uspm-c K=uspm-k VETH=uspm
# shellcheck source=scripts/preload-rig.sh
source scripts/preload-rig.sh

for side in ustack kernel; do
    host=192.0.2.2; [ "$side" = kernel ] && host=10.9.0.2
    $side timeout 300 memcached -u root -l 0.0.0.0 -p 11211 -t 1 -U 0 -m 256 &
    pid=$!; pids+=("$pid"); sleep 1.5
    srv=$(server_of "$pid")
    for t in set get; do
        t0=$(ticks "$srv"); s0=$(date +%s.%N)
        ip netns exec "$C" timeout 120 memcslap --servers="$host:11211" --test=$t \
            --concurrency=4 --execute-number="$N" | grep -E "^Time to (set|get) "
        t1=$(ticks "$srv"); s1=$(date +%s.%N)
        ops=$((4 * N)); [ "$t" = get ] && ops=$((5 * N)) # a get run loads N keys first
        cpu=$(( (t1 - t0) * 1000 / hz ))
        awk -v side="$side" -v t="$t" -v ops="$ops" -v cpu="$cpu" -v s0="$s0" -v s1="$s1" 'BEGIN {
            printf "memcached %s %s: %d requests in %.2f s (%.0f/s), server CPU %d ms (%.0f requests per CPU-second)\n",
                side, t, ops, s1 - s0, ops / (s1 - s0), cpu, (cpu > 0 ? ops * 1000 / cpu : 0) }'
    done
    kill "$srv" "$pid" 2>/dev/null || true; sleep 1
done
