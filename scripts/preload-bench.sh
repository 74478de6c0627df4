#!/usr/bin/env bash
# Kernel against ustack under libustack_preload.so: redis-benchmark against redis-server
# and wrk against nginx, each once on ustack (over a TUN interface) and once on the kernel
# (over a veth pair), clients in one namespace, servers' CPU time read from /proc
# (docs/preload.md has the table). Root; needs redis-server, redis-benchmark, nginx, wrk
# and `cargo build --release -p ustack-preload` first. Every command is bounded in time;
# the namespaces are removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
C=uspb-c K=uspb-k VETH=uspb
# shellcheck source=scripts/preload-rig.sh
source scripts/preload-rig.sh

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
