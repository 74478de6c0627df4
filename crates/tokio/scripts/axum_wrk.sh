#!/bin/bash
# The axum_hello example under wrk from the kernel: axum on ustack over TUN, then the same
# axum on the kernel's sockets across a veth pair (wrk in one namespace, the server in
# another). Per run: requests/s, wrk's p50 and p99 latency, the server process's CPU
# seconds (all its threads: for ustack the loop thread too) and requests per server
# CPU-second, wrk's own CPU seconds and requests per CPU-second of both. Root.
#
#   cargo build --release -p ustack-tokio --example axum_hello
#   bash crates/tokio/scripts/axum_wrk.sh target/release/examples/axum_hello SECS CONNS WORKERS
#   LOCAL=--local bash crates/tokio/scripts/axum_wrk.sh ...   # ustack in model (b) (LocalStack)
#
# Note: over veth the kernel server's receive processing runs in softirq context, mostly
# charged to wrk's process, and over TUN the kernel's half of the work is charged to wrk
# too: compare the CPU of both processes as well as the server's.
set -u
BIN=$1; SECS=${2:-10}; CONNS=${3:-50}; W=${4:-1}
proc_cpu() { awk '{print $14+$15}' /proc/$1/stat; }
run_wrk() { # ns server-pid label
  local t0; t0=$(proc_cpu "$2")
  local out; out=$(timeout $((SECS+20)) /usr/bin/time -f "WRKCPU %U %S" ip netns exec "$1" \
    wrk -t2 -c"$CONNS" -d"${SECS}s" --latency --timeout 5s http://192.0.2.2/ 2>&1)
  local t1; t1=$(proc_cpu "$2")
  local wc req rps p50 p99 err cs
  wc=$(echo "$out" | awk '/WRKCPU/{print $2+$3}')
  req=$(echo "$out" | awk '/requests in/{print $1}')
  rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
  p50=$(echo "$out" | awk '$1=="50%"{print $2}')
  p99=$(echo "$out" | awk '$1=="99%"{print $2}')
  err=$(echo "$out" | grep -E "Socket errors|Non-2xx" | tr '\n' ' ')
  cs=$(echo "($t1-$t0)/100" | bc -l)
  if [ -z "$req" ]; then echo "$3: wrk failed: $out"; return; fi
  printf "%s: %s req/s, p50 %s, p99 %s; server CPU %.2f s: %.0f req per server CPU-s; wrk CPU %.2f s: %.0f req per (server+wrk) CPU-s %s\n" \
    "$3" "$rps" "$p50" "$p99" "$cs" "$(echo "$req/$cs" | bc -l)" "$wc" "$(echo "$req/($cs+$wc)" | bc -l)" "$err"
}
cleanup() { kill ${UP:-} ${KP:-} 2>/dev/null; ip netns del axw 2>/dev/null; ip netns del axk1 2>/dev/null; ip netns del axk2 2>/dev/null; }
trap cleanup EXIT
cleanup
# ustack over TUN
ip netns add axw
"$BIN" --link tun --netns axw --tun axw0 --addr 192.0.2.2:80 --workers "$W" ${LOCAL:-} > /tmp/axum_wrk_u.out 2>&1 &
UP=$!
for _ in $(seq 100); do grep -q tun-ready /tmp/axum_wrk_u.out && break; sleep 0.1; done
ip netns exec axw ip addr add 192.0.2.1/24 dev axw0
ip netns exec axw ip link set axw0 txqueuelen 4096 up
ip netns exec axw ip link set lo up
sleep 0.5
if [ -n "${LOCAL:-}" ]; then
  run_wrk axw $UP "ustack over TUN, model (b): one current-thread runtime"
else
  run_wrk axw $UP "ustack over TUN, model (a): $W tokio worker(s) and the loop thread"
fi
kill $UP; wait $UP 2>/dev/null; UP=
# the kernel across veth
ip netns add axk1; ip netns add axk2
ip link add axv1 netns axk1 type veth peer name axv2 netns axk2
ip netns exec axk1 ip addr add 192.0.2.1/24 dev axv1; ip netns exec axk1 ip link set axv1 up
ip netns exec axk2 ip addr add 192.0.2.2/24 dev axv2; ip netns exec axk2 ip link set axv2 up
ip netns exec axk2 "$BIN" --link kernel --addr 192.0.2.2:80 --workers "$W" > /tmp/axum_wrk_k.out 2>&1 &
KP=$!
for _ in $(seq 100); do grep -q kernel-ready /tmp/axum_wrk_k.out && break; sleep 0.1; done
sleep 0.5
run_wrk axk1 $KP "kernel sockets over veth (tokio::net, epoll), $W tokio worker(s)"
