#!/usr/bin/env bash
# nginx holding N idle HTTP keep-alive connections (default 10000; issue 17), once under
# libustack_preload.so (over a TUN interface) and once on the kernel (over a veth pair):
# the server process's resident memory before and while they are held, per connection,
# and the kernel's TCP socket slab (`TCP` in /proc/slabinfo: client and server sockets
# both, which a kernel server's sockets add to). The clients (tests/py/idle_clients.py)
# run in a namespace, send `GET /` on every connection, hold them idle, then ask again on
# every one (all must answer). Root; nginx, python3, and
# `cargo build --release -p ustack-preload` first. Every command is bounded in time; the
# namespaces are removed on exit. docs/preload.md has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000}
LIB=${USTACK_PRELOAD_LIB:-$PWD/target/release/libustack_preload.so}
PY=$PWD/crates/preload/tests/py/idle_clients.py
[ -f "$LIB" ] || { echo "build it first: cargo build --release -p ustack-preload" >&2; exit 1; }
C=uspi-c K=uspi-k
DIR=$(mktemp -d)
chmod 755 "$DIR"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    ip netns del "$C" 2>/dev/null || true
    ip netns del "$K" 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"
ip netns add "$C"
ip netns add "$K"
ip netns exec "$C" ip link set lo up
ip netns exec "$C" ip tuntap add tun0 mode tun multi_queue
ip netns exec "$C" ip addr add 192.0.2.1/24 dev tun0
ip netns exec "$C" ip link set tun0 up
ip link add uspi0 netns "$C" type veth peer name uspi1 netns "$K"
ip netns exec "$C" ip addr add 10.9.0.1/24 dev uspi0
ip netns exec "$C" ip link set uspi0 up
ip netns exec "$K" ip addr add 10.9.0.2/24 dev uspi1
ip netns exec "$K" ip link set uspi1 up
ip netns exec "$K" ip link set lo up
ustack() { env LD_PRELOAD="$LIB" USTACK_TUN=tun0 USTACK_NETNS="$C" USTACK_ADDR=192.0.2.2/24 "$@"; }
kernel() { ip netns exec "$K" "$@"; }
server_of() { pgrep -P "$(pgrep -P "$1" | head -n 1)" | head -n 1; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
tcp_slab_kib() { awk '$1 == "TCP" {print int($2 * $4 / 1024)}' /proc/slabinfo; }

mkdir -p "$DIR/html"
printf 'hello\n' > "$DIR/html/index.html"
chmod -R a+rX "$DIR"
cat > "$DIR/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1; error_log stderr notice;
worker_rlimit_nofile $((N + 4096));
pid $DIR/nginx.pid;
events { worker_connections $((N + 1024)); use epoll; }
http { access_log off; keepalive_timeout 600s; keepalive_requests 1000000;
  client_body_temp_path $DIR/b; proxy_temp_path $DIR/p; fastcgi_temp_path $DIR/f;
  uwsgi_temp_path $DIR/u; scgi_temp_path $DIR/s;
  server { listen 8080; root $DIR/html; } }
CONF

for side in ustack kernel; do
    host=192.0.2.2; [ "$side" = kernel ] && host=10.9.0.2
    $side timeout 600 nginx -c "$DIR/nginx.conf" -p "$DIR" > "$DIR/nginx-$side.log" 2>&1 &
    pid=$!; pids+=("$pid")
    for _ in $(seq 100); do
        ip netns exec "$C" curl -sS --max-time 2 "http://$host:8080/" > /dev/null 2>&1 && break
        sleep 0.2
    done
    srv=$(server_of "$pid")
    sleep 1
    r0=$(rss_kib "$srv"); s0=$(tcp_slab_kib)
    coproc CLIENTS { ip netns exec "$C" timeout 500 python3 "$PY" "$host" 8080 "$N"; }
    read -r -t 400 held <&"${CLIENTS[0]}"
    sleep 2
    r1=$(rss_kib "$srv"); s1=$(tcp_slab_kib)
    echo >&"${CLIENTS[1]}"
    read -r -t 200 answered <&"${CLIENTS[0]}" || answered="(none)"
    wait "$CLIENTS_PID" || true
    echo "$side: $held, then $answered; nginx RSS ${r0} KiB -> ${r1} KiB:" \
        "$(( (r1 - r0) * 1024 / N )) bytes per connection;" \
        "kernel TCP slab +$(( s1 - s0 )) KiB ($(( (s1 - s0) * 1024 / N )) bytes per connection, both ends' sockets)"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    sleep 1
done
