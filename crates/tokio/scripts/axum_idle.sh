#!/bin/bash
# Memory per idle keep-alive connection of the axum_hello example: N kernel connections,
# each served one `GET /` and then held, against axum on ustack over TUN and against the
# same axum on the kernel's sockets across a veth pair. Prints the server's RSS growth per
# connection, and for the kernel the growth of the kernel's slab per connection (both
# ends' sockets are kernel sockets there: half of it is the server's share). Root.
#
#   cargo build --release -p ustack-tokio --example axum_hello
#   bash crates/tokio/scripts/axum_idle.sh target/release/examples/axum_hello 10000
#   LOCAL=--local bash crates/tokio/scripts/axum_idle.sh ...   # ustack in model (b)
set -eu
BIN=$1; N=${2:-10000}
HOLDER=$(dirname "$0")/../tests/support/idle_holder.py
rss() { awk '/^VmRSS:/{print $2*1024}' /proc/$1/status; }
slab() { awk '/^Slab:/{print $2*1024}' /proc/meminfo; }
hold() { # ns label server-pid
  local base_rss=$(rss $3) base_slab=$(slab)
  coproc H { timeout 180 ip netns exec $1 python3 "$HOLDER" 192.0.2.2 80 "$N" 1; }
  local line; read -r line <&"${H[0]}"
  sleep 1
  local d_rss=$(( $(rss $3) - base_rss )) d_slab=$(( $(slab) - base_slab ))
  echo "$2: $line; server RSS +$d_rss B: $(( d_rss / N )) B/conn; kernel slab +$d_slab B: $(( d_slab / N )) B/conn"
  exec {H[1]}>&-; wait $H_PID 2>/dev/null || true
}
warm() { timeout 60 ip netns exec $1 python3 "$HOLDER" 192.0.2.2 80 20 1 </dev/null >/dev/null || true; }
cleanup() { kill ${UP:-} ${KP:-} 2>/dev/null || true; ip netns del axi 2>/dev/null || true; ip netns del axk1 2>/dev/null || true; ip netns del axk2 2>/dev/null || true; }
trap cleanup EXIT
cleanup
# ustack over TUN
ip netns add axi
"$BIN" --link tun --netns axi --tun axi0 --addr 192.0.2.2:80 --workers 1 ${LOCAL:-} > /tmp/axum_idle_u.out 2>&1 &
UP=$!
for _ in $(seq 100); do grep -q tun-ready /tmp/axum_idle_u.out && break; sleep 0.1; done
ip netns exec axi ip addr add 192.0.2.1/24 dev axi0
ip netns exec axi ip link set axi0 txqueuelen 4096 up
ip netns exec axi ip link set lo up
sleep 0.5; warm axi; sleep 1
hold axi "ustack (TUN${LOCAL:+, model (b)})" $UP
kill $UP; wait $UP 2>/dev/null || true; UP=
# the kernel across veth
ip netns add axk1; ip netns add axk2
ip link add axv1 netns axk1 type veth peer name axv2 netns axk2
ip netns exec axk1 ip addr add 192.0.2.1/24 dev axv1; ip netns exec axk1 ip link set axv1 up
ip netns exec axk2 ip addr add 192.0.2.2/24 dev axv2; ip netns exec axk2 ip link set axv2 up
ip netns exec axk2 "$BIN" --link kernel --addr 192.0.2.2:80 --workers 1 > /tmp/axum_idle_k.out 2>&1 &
KP=$!
for _ in $(seq 100); do grep -q kernel-ready /tmp/axum_idle_k.out && break; sleep 0.1; done
sleep 0.5; warm axk1; sleep 1
hold axk1 "kernel (veth)" $KP
