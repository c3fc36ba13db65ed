#!/usr/bin/env bash
# tests/integration/metrics_doc.sh - docs/API.md names every metric family
# the agent exports (issue 26): an agent with every module that runs
# without an outside service (ipam-cluster-pool, ipam-api, endpoint,
# datapath, policy, hubble-lite, lb) in a node namespace is
# scraped, and each family of its /metrics (its "# TYPE" lines) must be
# named in API.md (or be one of its documented wildcards, fibril_health_*);
# then every metric name registered in the sources (k8s and kvstore-etcd
# nodes and health too, which need a kvstore or Kubernetes) that ends in
# a unit suffix must be named there as well. Also the
# process_* families Prometheus users expect are there with sane values.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"

MODS=(ipam-cluster-pool ipam-api endpoint datapath policy hubble-lite lb)
cni_prereqs "${MODS[@]}"
cni_modules "$WORK/mods" "${MODS[@]}"
find_cgroup2
CG="$CG2/fibril-metrics-doc-$$"
mkdir "$CG"
md_cleanup() {
	local rc=$?
	set +e
	if [ -n "$AGENT_PID" ]; then kill -KILL "$AGENT_PID" 2>/dev/null; wait "$AGENT_PID" 2>/dev/null; AGENT_PID=""; fi
	rmdir "$CG" 2>/dev/null
	[ -n "$CG2_MOUNTED" ] && umount "$CG2_MOUNTED"
	(exit "$rc")
	cni_cleanup
}
trap md_cleanup EXIT INT TERM
netns_add "$NODE_NS"
start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.41.0/24 \
	--set "lb.cgroup=$CG" ||
	{ fail "the agent starts with ${MODS[*]}"; finish; }
pass "the agent starts with ${MODS[*]}"

api -o "$WORK/metrics" http://x/metrics || { fail "GET /metrics answers"; finish; }

# documented DOCFILE : the family names API.md gives (backquoted, any
# labels cut), one a line; wildcards end in '*'
documented() {
	grep -oE '`(fibril|process)_[a-z0-9_*]+' "$top_srcdir/docs/API.md" | tr -d '`' | sort -u
}
documented >"$WORK/doc"
# is_documented NAME : NAME is in the list, or matches one of its wildcards
is_documented() {
	local w
	grep -qx -- "$1" "$WORK/doc" && return 0
	while read -r w; do
		case $w in *'*') [[ $1 == ${w%'*'}* ]] && return 0 ;; esac
	done <"$WORK/doc"
	return 1
}

mapfile -t live < <(awk '$1 == "#" && $2 == "TYPE" {print $3}' "$WORK/metrics" | sort -u)
check "the scrape has families from the host and the modules (${#live[@]})" test "${#live[@]}" -gt 40
missing=()
for f in "${live[@]}"; do is_documented "$f" || missing+=("$f"); done
check "every exported family is named in docs/API.md (missing: ${missing[*]:-none})" test "${#missing[@]}" = 0

# every metric name the sources register with a unit suffix (the modules
# this agent did not load included)
mapfile -t registered < <(grep -rhoE '"(fibril|process)_[a-z0-9_]+(_total|_seconds|_bytes|_entries|_addresses|_fds)"' \
	"$top_srcdir/host" "$top_srcdir/lib" "$top_srcdir/modules" --include='*.c' | tr -d '"' | sort -u)
check "the sources register metric names (${#registered[@]})" test "${#registered[@]}" -gt 40
missing=()
for f in "${registered[@]}"; do is_documented "$f" || missing+=("$f"); done
check "every metric name in the sources is named in docs/API.md (missing: ${missing[*]:-none})" \
	test "${#missing[@]}" = 0

# the process families, with values that make sense
value() { awk -v n="$1" '$1 == n {print $2}' "$WORK/metrics"; }
for f in process_cpu_seconds_total process_resident_memory_bytes process_virtual_memory_bytes \
	process_open_fds process_max_fds process_start_time_seconds; do
	check "$f is exported" test -n "$(value "$f")"
done
rss_kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$AGENT_PID/status")
check "process_resident_memory_bytes is the agent's RSS (within 50%: $(value process_resident_memory_bytes) vs ${rss_kb} kB)" \
	python3 -c 'import sys; a = float(sys.argv[1]); b = float(sys.argv[2]) * 1024; sys.exit(0 if 0.5 * b < a < 1.5 * b else 1)' \
	"$(value process_resident_memory_bytes)" "$rss_kb"
nfd=$(ls "/proc/$AGENT_PID/fd" | wc -l)
check "process_open_fds is about the agent's open descriptors ($(value process_open_fds) vs $nfd)" \
	python3 -c 'import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) <= 8 else 1)' \
	"$(value process_open_fds)" "$nfd"
started=$(date -d "$(ps -o lstart= -p "$AGENT_PID")" +%s)
check "process_start_time_seconds is when the agent started ($(value process_start_time_seconds) vs $started)" \
	python3 -c 'import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) <= 2 else 1)' \
	"$(value process_start_time_seconds)" "$started"
check "process_cpu_seconds_total is above 0 and below the agent's wall time" \
	python3 -c 'import sys, time; c = float(sys.argv[1]); sys.exit(0 if 0 < c < time.time() - float(sys.argv[2]) + 1 else 1)' \
	"$(value process_cpu_seconds_total)" "$started"
check "process_max_fds is the agent's RLIMIT_NOFILE" \
	python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) == float(sys.argv[2]) else 1)' \
	"$(value process_max_fds)" "$(awk '/^Max open files/ {print $4}' "/proc/$AGENT_PID/limits")"
check "fibril_policy_verdicts_total is exported (datapath loaded)" \
	grep -q '^# TYPE fibril_policy_verdicts_total counter$' "$WORK/metrics"

finish
