#!/usr/bin/env bash
# tests/bench/bench_cni.sh - CNI ADD and DEL latency (p50/p99) of fibril-cni
# next to the reference plugins (bridge + host-local) measured in the same
# run: 200 pods one at a time, then 200 pods 8 at a time, each through the
# libcni driver (tests/cni/driver, its `bench` mode) as a runtime would call
# them; and fibril-cni one at a time with an "mtu" in its configuration,
# which spares the GET /v1/mtu an ADD otherwise asks first. Goal (issue 15): fibril-cni's ADD p99 < 30 ms and under 0.5x the
# reference's p99, at both concurrencies. Run by hand, as root, from a build dir:
#   top_srcdir=/work/main top_builddir=$PWD bash tests/bench/bench_cni.sh
# Figures are printed, never asserted. Needs the endpoint and datapath
# modules (fibril-cni's ADD ends with the endpoint PUT).
# ENDPOINT_SO=/path/endpoint.so runs the agent with that endpoint module
# instead of the build's (an A/B of two versions on the same machine state).
# The table ends with the load average before and after and the command that
# re-runs it: on a shared machine, re-run it quiet before trusting a ratio.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"

COUNT=${COUNT:-200}
PAR=${PAR:-8}
# STATE_DIR: where the agent keeps its state (default: under $WORK, on the
# disk /tmp is on). STATE_DIR=tmpfs puts it in /dev/shm, which shows how much
# of an ADD is the agent's durable writes (IPAM: its share of a
# group-committed journal flush; endpoint: its state file, fsync + directory
# fsync).
STATE_ARGS=()
if [ "${STATE_DIR:-}" = tmpfs ]; then
	STATE_ARGS=(--set "agent.state-dir=$WORK/shm-state")
	shm_cleanup() {
		local rc=$?
		set +e # else "(exit $rc)" ends a failed run's trap before cni_cleanup
		rm -rf "/dev/shm/fibril-bench-cni-$$"
		(exit "$rc") # cni_cleanup exits with $?
		cni_cleanup
	}
	trap shm_cleanup EXIT INT TERM
	mkdir -p "/dev/shm/fibril-bench-cni-$$" && ln -s "/dev/shm/fibril-bench-cni-$$" "$WORK/shm-state"
fi
cni_prereqs ipam-api ipam-cluster-pool endpoint datapath
if [ ! -x "$CNI_REF_DIR/bridge" ] || [ ! -x "$CNI_REF_DIR/host-local" ]; then
	echo "bench: $CNI_REF_DIR/bridge and host-local are needed (containernetworking-plugins)" >&2
	exit 1
fi
build_driver || { echo "bench: cannot build the libcni driver" >&2; exit 1; }
cni_modules "$WORK/mods" ipam-api ipam-cluster-pool endpoint datapath
[ -z "${ENDPOINT_SO:-}" ] || install -m 0644 "$ENDPOINT_SO" "$WORK/mods/endpoint.so"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
netns_add "$NODE_NS"
start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.0.0/23 "${STATE_ARGS[@]}" ||
	{ echo "bench: the agent does not start" >&2; exit 1; }
PREFIX="fcni-b$$-"
for i in $(seq 0 $((COUNT - 1))); do netns_add "$PREFIX$i"; done

cat >"$WORK/fibril.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "fibril",
 "plugins": [{"type": "fibril-cni", "agent-socket": "$WORK/fibril.sock"}]}
EOF
# with an "mtu": no GET /v1/mtu before the ADD (the agent's pod MTU)
cat >"$WORK/fibril-mtu.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "fibril",
 "plugins": [{"type": "fibril-cni", "agent-socket": "$WORK/fibril.sock", "mtu": 1500}]}
EOF
cat >"$WORK/ref.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "reference",
 "plugins": [{"type": "bridge", "bridge": "fcnibr$$", "isGateway": true, "ipMasq": false,
              "ipam": {"type": "host-local", "dataDir": "$WORK/host-local",
                       "ranges": [[{"subnet": "10.250.0.0/16"}]]}}]}
EOF

# run NAME CONFLIST PARALLEL : "add p50 p99 del p50 p99" in ms
run() {
	ip netns exec "$NODE_NS" "$DRIVER" -conflist "$2" -path "$CNI_PLUGIN_DIR:$CNI_REF_DIR" \
		-cache "$WORK/cache-$1" -netns-prefix "/var/run/netns/$PREFIX" -count "$COUNT" \
		-parallel "$3" -id-prefix "$1" bench >"$WORK/$1.lat" 2>"$WORK/$1.err" ||
		{ echo "bench: $1 failed: $(tail -3 "$WORK/$1.err")" >&2; return 1; }
	python3 - "$WORK/$1.lat" <<'EOF'
import sys
lat = {"add": [], "del": []}
for line in open(sys.argv[1]):
    op, ms = line.split()
    lat[op].append(float(ms))
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]
print("%.2f %.2f %.2f %.2f" % (pct(lat["add"], 50), pct(lat["add"], 99), pct(lat["del"], 50), pct(lat["del"], 99)))
EOF
}

declare -A R
# Interleaved, so both plugins see the same machine state.
R[fib1]=$(run fibseq "$WORK/fibril.conflist" 1)
R[ref1]=$(run refseq "$WORK/ref.conflist" 1)
R[fibm]=$(run fibmtu "$WORK/fibril-mtu.conflist" 1)
R[fibp]=$(run fibpar "$WORK/fibril.conflist" "$PAR")
R[refp]=$(run refpar "$WORK/ref.conflist" "$PAR")

echo "== CNI ADD/DEL latency, $COUNT pods, libcni 1.1.2 driver ($(nproc) cores, $(uname -r), state on" \
	"$(if [ -n "${STATE_ARGS[*]:-}" ]; then echo tmpfs; else df -T "$WORK" | awk 'NR == 2 { print $2 }'; fi))${ENDPOINT_SO:+, endpoint module $ENDPOINT_SO} =="
printf '%-34s %10s %10s %10s %10s\n' "plugin / concurrency" "ADD p50" "ADD p99" "DEL p50" "DEL p99"
row() { # row LABEL "a50 a99 d50 d99"
	# shellcheck disable=SC2086
	set -- "$1" $2
	printf '%-34s %7s ms %7s ms %7s ms %7s ms\n' "$1" "$2" "$3" "$4" "$5"
}
row "fibril-cni, 1 at a time" "${R[fib1]}"
row "bridge+host-local, 1 at a time" "${R[ref1]}"
row "fibril-cni, mtu set (no GET /v1/mtu)" "${R[fibm]}"
row "fibril-cni, $PAR at a time" "${R[fibp]}"
row "bridge+host-local, $PAR at a time" "${R[refp]}"
goal() { awk -v f="$1" -v r="$2" 'BEGIN { print ((f < 30 && f < 0.5 * r) ? "met" : "NOT met") }'; }
read -r _ f99 _ _ <<<"${R[fib1]}"
read -r _ r99 _ _ <<<"${R[ref1]}"
read -r _ fp99 _ _ <<<"${R[fibp]}"
read -r _ rp99 _ _ <<<"${R[refp]}"
echo "goal ADD p99 < 30 ms and < 0.5x the reference: 1 at a time $f99 vs $r99 ms: $(goal "$f99" "$r99");" \
	"$PAR at a time $fp99 vs $rp99 ms: $(goal "$fp99" "$rp99")"
echo "load average (1/5/15 min) before: $LOAD_BEFORE, after: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores" \
	"(above ~0.5 per core the percentiles measure the neighbours too)"
echo "re-run: cd $top_builddir && top_srcdir=$top_srcdir top_builddir=$top_builddir COUNT=$COUNT PAR=$PAR" \
	"${STATE_DIR:+STATE_DIR=$STATE_DIR }${ENDPOINT_SO:+ENDPOINT_SO=$ENDPOINT_SO }bash $top_srcdir/tests/bench/bench_cni.sh"
ip -n "$NODE_NS" link del "fcnibr$$" 2>/dev/null || true
