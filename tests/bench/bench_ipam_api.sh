#!/bin/bash
# tests/bench/bench_ipam_api.sh - IPAM figures (printed, never asserted):
#   1. POST /v1/ipam allocations per second and p50/p99 latency over the
#      agent's socket (ipam-cluster-pool behind ipam-api, one keep-alive
#      connection, tests/bench/bench_ipam.c), side by side in the same run
#      with Debian's reference CNI IPAM plugin host-local doing the same
#      number of allocations the way a runtime calls it (one process per
#      CNI ADD, the network config on stdin); goal >= 40x host-local (issue
#      15: group-committed state, one fdatasync per batch off the loop).
#      Then both again with CLIENTS (8 and 32) at a time: fibril with that
#      many keep-alive connections, one request each at a time (so a batch
#      of the journal answers several), host-local with that many processes
#      at a time (it serialises on its dataDir's file lock; the run checks
#      that it handed out one address file per allocation). And the disk's
#      floor for one-at-a-time durable writes: a 64-byte append + fdatasync
#      on the state dir's filesystem, one next to each of fibril's
#      one-at-a-time requests so both see the same seconds of a shared disk
#      ("fsync floor: N per second"); one request at a time, fibril cannot
#      beat it, so the sequential ratio's ceiling is floor / host-local's rate.
#   2. node CIDR claim time through etcd, p50/p99 over CLAIMS fresh agents
#      (each a new node name and state dir, against a /9 pool of /24s, with
#      the earlier nodes' claims still held), as ipam-cluster-pool logs it:
#      "node CIDR X claimed in N ms" (lease grant + range get + transaction).
# Needs root, top_srcdir and top_builddir (as `make bench` sets), the built
# modules, etcd for part 2 and /usr/lib/cni/host-local for the comparison.
# IPAM_BENCH_COUNT (1000), IPAM_BENCH_CLIENTS ("8 32") and IPAM_BENCH_CLAIMS
# (100; 0 skips part 2) change the sizes.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail

# shellcheck source=../lib/common.sh
. "$top_srcdir/tests/lib/common.sh" # $WORK, cleanup trap
BPFFS_DIR="/sys/fs/bpf/fibril-bench-ipam-$$"
COUNT=${IPAM_BENCH_COUNT:-1000}
CLAIMS=${IPAM_BENCH_CLAIMS:-100}
CLIENTS=${IPAM_BENCH_CLIENTS:-8 32}
HOST_LOCAL=${HOST_LOCAL:-/usr/lib/cni/host-local}
SHM=""
bench_cleanup() {
	local rc=$?
	set +e
	[ -n "$SHM" ] && rm -rf "$SHM"
	(exit "$rc") # common.sh's cleanup exits with $?
	cleanup
}
trap bench_cleanup EXIT INT TERM

say() { printf '%s\n' "$*"; }
die() { say "bench_ipam_api: $*" >&2; exit 1; }
is_elf() { [ -f "$1" ] && [ "$(head -c 4 "$1" | tr -d '\177')" = ELF ]; }
field() { local name=$1; shift; printf '%s\n' "$*" | tr ' ' '\n' | sed -n "s/^$name=//p" | head -n 1; }
us_ms() { awk -v u="$1" 'BEGIN { printf "%.3f", u / 1000 }'; }

[ "$(id -u)" = 0 ] || die "run as root (the agent loads only root-owned modules)"
for so in ipam-cluster-pool ipam-api kvstore-etcd; do
	[ -f "$top_builddir/.libs/$so.so" ] || die "$so is not built"
done
smods=$WORK/mods-static # node-cidr, no kvstore
kmods=$WORK/mods-kv
for d in "$smods" "$kmods"; do
	mkdir -p "$d"
	chmod 0755 "$d"
	for so in ipam-cluster-pool ipam-api; do install -m 0644 "$top_builddir/.libs/$so.so" "$d/"; done
done
install -m 0644 "$top_builddir/.libs/kvstore-etcd.so" "$kmods/"
BENCH=$WORK/bench_ipam
$CC -std=gnu11 -O2 -pthread -D_GNU_SOURCE -Wall -Wextra -Wformat=2 -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -Werror -o "$BENCH" "$top_srcdir/tests/bench/bench_ipam.c" ||
	die "cannot build tests/bench/bench_ipam.c"
# The real agent binary, not libtool's wrapper (a shell start per run).
export LD_LIBRARY_PATH="$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
AGENT_BIN=""
for f in "$top_builddir/fibril-agent" "$top_builddir/.libs/lt-fibril-agent" "$top_builddir/.libs/fibril-agent"; do
	if is_elf "$f"; then AGENT_BIN=$f; break; fi
done
[ -n "$AGENT_BIN" ] || die "no fibril-agent binary under $top_builddir"

# agent MODDIR NAME STATEDIR [args...] : background agent with its own socket; waits for it
agent() {
	local mods=$1 name=$2 state=$3 i
	shift 3
	rm -f "$WORK/$name.sock"
	"$AGENT_BIN" --set "agent.module-dir=$mods" --set "agent.socket=$WORK/$name.sock" \
		--set "agent.state-dir=$state" --set "agent.run-dir=$WORK/run-$name" \
		--set "agent.bpffs-dir=$BPFFS_DIR/$name" --set "agent.node-name=$name" "$@" \
		>"$WORK/$name.log" 2>&1 &
	AGENT_PID=$!
	for i in $(seq 1 2000); do
		[ -S "$WORK/$name.sock" ] && return 0
		kill -0 "$AGENT_PID" 2>/dev/null || break
		sleep 0.01 # sleep: the poll interval of a wait with a deadline
	done
	tail -n 5 "$WORK/$name.log" >&2
	return 1
}
agent_stop() {
	kill -TERM "$AGENT_PID"
	wait "$AGENT_PID" || true
	AGENT_PID=""
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
say "== fibril IPAM benchmarks ($(nproc) cores, $(uname -sr), ${cpu:-unknown cpu}) =="
say ""

# ---- 1. allocations --------------------------------------------------------------------
# alloc_run NAME STATEDIR CLIENTS [FLOORDIR] : COUNT allocations from a /16
# node CIDR by CLIENTS connections (agent at its default log level: ipam-api
# logs each allocation); with FLOORDIR, a floor write next to each request
# (its line in $WORK/NAME.out)
alloc_run() {
	agent "$smods" "$1" "$2" --set ipam-cluster-pool.node-cidr=10.77.0.0/16 || die "the agent did not start"
	"$BENCH" alloc "$WORK/$1.sock" "$COUNT" bench "$3" ${4:+"$4"} >"$WORK/$1.out" || die "POST /v1/ipam failed"
	# the journal's flushes, less the 20 one-at-a-time warm-up requests' own
	local flushes
	flushes=$(curl -s --max-time 5 --unix-socket "$WORK/$1.sock" http://agent/metrics |
		sed -n 's/^fibril_journal_flushes_total{result="ok"} //p')
	agent_stop
	printf '%s flushes=%s\n' "$(grep '^alloc ' "$WORK/$1.out")" "$(( ${flushes:-20} - 20 ))"
}
# hl_run CLIENTS : COUNT host-local ADDs, CLIENTS at a time, in a fresh dataDir;
# every allocation must have its own address file
hl_run() {
	local dir="$WORK/host-local-$1" out files
	# host-local reads the "ipam" object of the network config, as from a main plugin
	printf '{"cniVersion":"1.0.0","name":"bench","type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.0.0/16"}]],"dataDir":"%s"}}\n' \
		"$dir" >"$WORK/host-local-$1.json"
	out=$("$BENCH" cni "$HOST_LOCAL" "$COUNT" "$WORK/host-local-$1.json" "$1") || die "host-local failed"
	files=$(find "$dir/bench" -name '10.77.*' | wc -l)
	[ "$files" = "$COUNT" ] || die "host-local, $1 at a time: $files address files for $COUNT allocations"
	printf '%s\n' "$out"
}
row() { # row LABEL CLIENTS LINE
	local f per=""
	f=$(field flushes "$3")
	[ -n "$f" ] && [ "$f" -gt 0 ] && per=$(awk -v n="$COUNT" -v f="$f" 'BEGIN { printf "%.1f", n / f }')
	printf '   %-48s %7s %9.0f %9s %9s %9s\n' "$1" "$2" "$(field per_s "$3")" "$(us_ms "$(field p50_us "$3")")" \
		"$(us_ms "$(field p99_us "$3")")" "${per:--}"
}
ratio() { awk -v a="$(field per_s "$1")" -v b="$(field per_s "$2")" 'BEGIN { printf "%.1f", a / b }'; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
fs=$(df -PT "$WORK" | awk 'NR == 2 { print $2 }')
# the floor is measured in the same seconds as the one-at-a-time run, one
# floor write next to each request (the disk is shared: its speed moves with
# other work from one second to the next), on the state dir's filesystem
declare -A disk hl
disk[1]=$(alloc_run alloc-disk-1 "$WORK/state-disk-1" 1 "$WORK") || die "allocation run failed"
floor=$(grep '^floor ' "$WORK/alloc-disk-1.out") || die "the fsync floor failed"
for c in $CLIENTS; do
	disk[$c]=$(alloc_run "alloc-disk-$c" "$WORK/state-disk-$c" "$c") || die "allocation run failed"
done
tmpfs=""
if [ -d /dev/shm ] && SHM=$(mktemp -d /dev/shm/fibril-bench-ipam.XXXXXX 2>/dev/null); then
	tmpfs=$(alloc_run alloc-tmpfs "$SHM/state" 1) || die "allocation run failed"
fi
if [ -x "$HOST_LOCAL" ]; then
	for c in 1 $CLIENTS; do hl[$c]=$(hl_run "$c"); done
fi
say "1. IPv4 allocations, $COUNT each, from a /16 (10.77.0.0/16); load average $load_before before,"
say "   $(cut -d' ' -f1-3 /proc/loadavg) after"
printf '   %-48s %7s %9s %9s %9s %9s\n' "method" "clients" "alloc/s" "p50 ms" "p99 ms" "/flush"
for c in 1 $CLIENTS; do
	row "fibril POST /v1/ipam, state on $fs (durable)" "$c" "${disk[$c]}"
	[ -n "${hl[$c]:-}" ] && row "host-local, one process per ADD, dataDir on $fs" "$c" "${hl[$c]}"
done
[ -n "$tmpfs" ] && row "fibril POST /v1/ipam, state on tmpfs" 1 "$tmpfs"
row "fsync floor: 64-byte append + fdatasync" 1 "$floor"
say "   fsync floor: $(field per_s "$floor" | cut -d. -f1) per second (on $fs; one floor write next to each"
say "   of fibril's one-at-a-time requests, before and after in turn, each rate from its own time)"
if [ -n "${hl[1]:-}" ]; then
	for c in 1 $CLIENTS; do
		r=$(ratio "${disk[$c]}" "${hl[$c]}")
		say "   ratio fibril/host-local, $c at a time: ${r}x (goal >= 40x: $(awk -v r="$r" \
			'BEGIN { print (r >= 40 ? "met" : "NOT met") }'))"
	done
	say "   ceiling of the one-at-a-time ratio (fsync floor / host-local): $(ratio "$floor" "${hl[1]}")x"
	[ -n "$tmpfs" ] && say "   with fibril's state on tmpfs, one at a time: $(ratio "$tmpfs" "${hl[1]}")x"
else
	say "   host-local: $HOST_LOCAL not found (package containernetworking-plugins): no comparison"
fi
say "   (each fibril answer waits until its allocation is on disk: a journal record, one write +"
say "    fdatasync per batch on the worker pool; one request at a time, one flush each, so the"
say "    floor bounds it; with N clients a batch holds the requests that came during the"
say "    previous flush (/flush: allocations per journal flush, from the agent's"
say "    fibril_journal_flushes_total); host-local writes its files without fsync)"
say ""

# ---- 2. node CIDR claims through etcd --------------------------------------------------------
say "2. node CIDR claim through etcd, $CLAIMS fresh agents, pool 10.128.0.0/9 of /24s"
if [ "$CLAIMS" = 0 ]; then
	say "   skipped: IPAM_BENCH_CLAIMS=0"
	exit 0
fi
if ! command -v etcd >/dev/null || [ ! -f "$top_srcdir/tests/lib/etcd.sh" ]; then
	say "   skipped: etcd or tests/lib/etcd.sh missing"
	exit 0
fi
# shellcheck source=../lib/etcd.sh
. "$top_srcdir/tests/lib/etcd.sh"
etcd_start bench >/dev/null || die "etcd did not start"
: >"$WORK/claims"
for i in $(seq 1 "$CLAIMS"); do
	name=$(printf 'claim-%03d' "$i")
	agent "$kmods" "$name" "$WORK/claim-state/$name" --set "kvstore-etcd.endpoints=$ETCD_ENDPOINT" \
		--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.128.0.0/9 ||
		die "agent $name did not start"
	agent_stop
	sed -n 's/.*node CIDR [^ ]* claimed in \([0-9.]*\) ms.*/\1/p' "$WORK/$name.log" >>"$WORK/claims"
	rm -f "$WORK/$name.log"
done
held=$(etcdctl_run get --prefix /fibril/ipam/cluster-pool/4/ --keys-only | grep -c . || true)
sort -g "$WORK/claims" | awk -v held="$held" '{ v[NR] = $1; s += $1 } END {
	if (!NR) { print "   no claim times found in the logs"; exit }
	p50 = v[int(NR * 0.50 + 0.999)]; p99 = v[int(NR * 0.99 + 0.999)]
	printf "   claims %d: p50 %.3f ms, p99 %.3f ms, mean %.3f ms, max %.3f ms (%d claims held in etcd at the end)\n",
		NR, p50, p99, s / NR, v[NR], held }'
say "   (from start to the claim's transaction answered: lease grant, range get of every claim, txn)"
etcd_stop
