#!/usr/bin/env bash
# Kernel against ustack under libustack_preload.so: redis-benchmark against redis-server
# and wrk against nginx, each once on ustack (over a TUN interface) and once on the kernel
# (over a veth pair), clients in one namespace, servers' CPU time read from /proc
# (docs/preload.md has the table). Root; needs redis-server, redis-benchmark, nginx, wrk
# and `cargo build --release -p ustack-preload` first. Every command is bounded in time;
# the namespaces are removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
LIB=$PWD/target/release/libustack_preload.so
[ -f "$LIB" ] || { echo "build it first: cargo build --release -p ustack-preload" >&2; exit 1; }
C=uspb-c K=uspb-k
DIR=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    ip netns del "$C" 2>/dev/null || true
    ip netns del "$K" 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT
ip netns add "$C"
ip netns add "$K"
ip netns exec "$C" ip tuntap add tun0 mode tun multi_queue
ip netns exec "$C" ip addr add 192.0.2.1/24 dev tun0
ip netns exec "$C" ip link set tun0 up
ip link add uspb0 netns "$C" type veth peer name uspb1 netns "$K"
ip netns exec "$C" ip addr add 10.9.0.1/24 dev uspb0
ip netns exec "$C" ip link set uspb0 up
ip netns exec "$K" ip addr add 10.9.0.2/24 dev uspb1
ip netns exec "$K" ip link set uspb1 up
ip netns exec "$K" ip link set lo up
ustack() { env LD_PRELOAD="$LIB" USTACK_TUN=tun0 USTACK_NETNS="$C" USTACK_ADDR=192.0.2.2/24 "$@"; }
kernel() { ip netns exec "$K" "$@"; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime + stime
# The server under a background job: the job's shell -> timeout -> the server.
server_of() { pgrep -P "$(pgrep -P "$1" | head -n 1)" | head -n 1; }
hz=$(getconf CLK_TCK)

mkdir -p "$DIR/html"
printf 'hello\n' > "$DIR/html/index.html"
cat > "$DIR/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1; error_log stderr notice;
pid $DIR/nginx.pid;
events { worker_connections 4096; use epoll; }
http { access_log off; sendfile on; keepalive_requests 1000000;
  client_body_temp_path $DIR/b; proxy_temp_path $DIR/p; fastcgi_temp_path $DIR/f;
  uwsgi_temp_path $DIR/u; scgi_temp_path $DIR/s;
  server { listen 8080; root $DIR/html; } }
CONF

for side in ustack kernel; do
    host=192.0.2.2; [ "$side" = kernel ] && host=10.9.0.2
    $side timeout 300 redis-server --port 6379 --bind 0.0.0.0 --save "" --appendonly no \
        --protected-mode no --daemonize no --dir "$DIR" > "$DIR/redis-$side.log" 2>&1 &
    pid=$!; pids+=("$pid"); sleep 1.5
    srv=$(server_of "$pid")
    for p in 1 16; do
        t0=$(ticks "$srv")
        out=$(ip netns exec "$C" timeout 120 redis-benchmark -h "$host" -t set,get -n 200000 -c 50 -P "$p" --csv)
        t1=$(ticks "$srv")
        echo "redis $side -P $p: server CPU $(( (t1 - t0) * 1000 / hz )) ms"
        echo "$out"
    done
    kill "$srv" "$pid" 2>/dev/null || true; sleep 1
    $side timeout 120 nginx -c "$DIR/nginx.conf" -p "$DIR" > "$DIR/nginx-$side.log" 2>&1 &
    pid=$!; pids+=("$pid"); sleep 1.5
    srv=$(server_of "$pid")
    t0=$(ticks "$srv")
    ip netns exec "$C" timeout 60 wrk -t1 -c50 -d10s --latency "http://$host:8080/"
    t1=$(ticks "$srv")
    echo "nginx $side: server CPU $(( (t1 - t0) * 1000 / hz )) ms"
    kill "$srv" "$pid" 2>/dev/null || true; sleep 1
done
