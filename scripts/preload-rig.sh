# Sourced by the preload benchmarks (scripts/preload-bench.sh, preload-memcached-bench.sh):
# namespace $C with tun0 (the kernel's end 192.0.2.1; ustack is 192.0.2.2 under `ustack
# ...`) and a veth pair to namespace $K (10.9.0.1 in $C, 10.9.0.2 in $K, where `kernel
# ...` runs a server); both removed on exit, with the jobs in `pids` and $DIR. Set C, K
# and VETH (the veth names' stem) first.
LIB=$PWD/target/release/libustack_preload.so
[ -f "$LIB" ] || { echo "build it first: cargo build --release -p ustack-preload" >&2; exit 1; }
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
ip link add "${VETH}0" netns "$C" type veth peer name "${VETH}1" netns "$K"
ip netns exec "$C" ip addr add 10.9.0.1/24 dev "${VETH}0"
ip netns exec "$C" ip link set "${VETH}0" up
ip netns exec "$K" ip addr add 10.9.0.2/24 dev "${VETH}1"
ip netns exec "$K" ip link set "${VETH}1" up
ip netns exec "$K" ip link set lo up
ustack() { env LD_PRELOAD="$LIB" USTACK_TUN=tun0 USTACK_NETNS="$C" USTACK_ADDR=192.0.2.2/24 "$@"; }
kernel() { ip netns exec "$K" "$@"; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime + stime
# The server under a background job: the job's shell -> timeout -> the server.
server_of() { pgrep -P "$(pgrep -P "$1" | head -n 1)" | head -n 1; }
hz=$(getconf CLK_TCK)
