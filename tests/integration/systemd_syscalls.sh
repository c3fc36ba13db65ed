#!/usr/bin/env bash
# tests/integration/systemd_syscalls.sh - the unit's SystemCallFilter= lets
# the agent do its work (issue 25): the agent, with the modules a node runs
# (IPAM, endpoint, datapath, policy, flows, lb), is traced with strace -f
# through a start, a pod added and removed through fibril-cni, the API and
# a stop; every system call it made must be in the set the installed unit
# allows (its SystemCallFilter= lines, the groups expanded by
# systemd-analyze syscall-filter). A call outside it would fail with EPERM
# under systemd, so this test fails when the filter is too narrow (and it
# fails on a unit without a filter: nothing to check against).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"

MODS=(ipam-api ipam-cluster-pool endpoint datapath policy hubble-lite lb)
cni_prereqs "${MODS[@]}"
command -v strace >/dev/null || skip_or_fail "strace is not installed"
command -v systemd-analyze >/dev/null || skip_or_fail "systemd-analyze is not installed (systemd)"
unit=$top_builddir/systemd/fibril-agent.service
[ -f "$unit" ] || skip_or_fail "$unit is not built"

cni_modules "$WORK/mods" "${MODS[@]}"
netns_add "$NODE_NS"
mapfile -t args < <(agent_args "$WORK/mods")
rm -f "$WORK/fibril.sock"
# LeakSanitizer cannot run under ptrace (a sanitizer build's agent would
# exit 1 at its leak check): the syscalls are this test's business, leaks
# are valgrind_agent.sh's and the other tests'
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
	nsenter --net=/run/netns/"$NODE_NS" strace -f -qq -o "$WORK/strace.out" \
	"$AGENT" "${args[@]}" --set ipam-cluster-pool.node-cidr=10.244.9.0/24 >>"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
check "the agent starts under strace" wait_alive "$AGENT_PID" 60 agent_healthy

pod=fsys-p$$
netns_add "$pod"
CONF='{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"'$WORK/fibril.sock'"}'
plugin ADD "$CONF" CNI_CONTAINERID=sys$$ CNI_NETNS=/var/run/netns/$pod CNI_IFNAME=eth0 \
	CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=sys"
check "a pod is added (CNI ADD)" test "$PRC" = 0
api -sf http://x/v1/status >/dev/null
api -sf http://x/metrics >/dev/null
api -sf "http://x/v1/flows?last=5" >/dev/null || true
plugin DEL "$CONF" CNI_CONTAINERID=sys$$ CNI_NETNS=/var/run/netns/$pod CNI_IFNAME=eth0
check "the pod is deleted (CNI DEL)" test "$PRC" = 0
# the agent is strace's child: stop it, and strace ends with it
agent=$(pgrep -P "$AGENT_PID" -f fibril-agent || true)
check "the traced agent is found" test -n "$agent"
[ -n "$agent" ] && kill -TERM "$agent"
rc=0
wait "$AGENT_PID" || rc=$?
AGENT_PID=""
check "the agent stops cleanly (exit $rc)" test "$rc" -eq 0

# the set the unit allows: its SystemCallFilter= lines, groups expanded
out=$(/usr/bin/python3 - "$unit" "$WORK/strace.out" <<'PY'
import re, subprocess, sys
unit, trace = sys.argv[1:]
groups, cur = {}, None
for line in subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True,
                           text=True, check=True).stdout.splitlines():
    if line.startswith("@"):
        cur = groups.setdefault(line.split()[0], set())
    elif cur is not None and line.strip() and not line.strip().startswith("#"):
        cur.add(line.split()[0])
def expand(name, seen=()):
    if not name.startswith("@"):
        return {name}
    out = set()
    for m in groups.get(name, ()):
        if m not in seen:
            out |= expand(m, seen + (name,))
    return out
allowed, denied, filters = set(), set(), 0
for line in open(unit):
    m = re.match(r"SystemCallFilter=(~?)(.*)", line.strip())
    if not m:
        continue
    filters += 1
    names = set()
    for word in m.group(2).split():
        names |= expand(word)
    (denied if m.group(1) else allowed).update(names)
if not filters:
    print("the unit has no SystemCallFilter= line")
    sys.exit(1)
used = set()
for line in open(trace):
    m = re.match(r"\d+\s+(?:<\.\.\. )?([a-z0-9_]+)[( ]", line)
    if m and m.group(1) not in ("exited", "killed"):
        used.add(m.group(1))
outside = sorted(s for s in used if s not in allowed or s in denied)
print(f"{len(used)} distinct calls traced, {len(allowed - denied)} allowed by the unit")
if outside:
    print("outside the filter: " + " ".join(outside))
    sys.exit(1)
PY
) && rc=0 || rc=$?
echo "  $out"
check "every system call the agent made is allowed by the unit's SystemCallFilter=" test "$rc" = 0
check "the unit hides other processes' /proc entries (ProtectProc=invisible)" grep -qx 'ProtectProc=invisible' "$unit"
finish
