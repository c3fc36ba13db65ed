#!/usr/bin/env bash
# scripts/deb-install-test.sh DEBDIR SRCDIR - the Debian packages installed
# for real on this machine with dpkg (as root; run by scripts/deb-check.sh
# after it built them into DEBDIR, from the unpacked source SRCDIR):
#  1. libfibril1, fibril-agent, fibril-cni installed with dpkg -i (the
#     agent starts with no module), then two module packages; the agent runs the installed unit's ExecStart
#     command line as it is, under the unit's capability bounding set, with
#     a NOTIFY_SOCKET this script listens on (systemd is not PID 1 here, so
#     this script does what the unit asks of systemd: RuntimeDirectory and
#     StateDirectory); it reports READY=1 with exactly the installed modules;
#  2. another module package installed: loaded at the next start;
#  3. a module another one requires cannot be removed alone (dpkg refuses;
#     apt names the dependents it would remove with it);
#  4. a module package removed: the next start runs without it, cleanly;
#     purged: its conffile and state folder go;
#  5. the vendor module (sdk/examples/vendor-ipam with its own debian/) built
#     with dpkg-buildpackage against the installed libfibril-dev, installed
#     beside ipam-cluster-pool: the postinst names the ambiguity, a drop-in
#     chooses it, --list-modules lists it, --graph resolves ipam-api to it,
#     the agent starts it; its Provides: fibril-ipam lets the in-tree IPAM
#     mode be removed while ipam-api stays;
#  6. purge of everything leaves the machine as it was: the same files under
#     /etc, /usr, /var/lib, /run/fibril, the same users and groups.
# The machine is left as found even on failure: the EXIT trap stops the
# agent and purges every package this script installed. It refuses to run
# when a fibril package is installed already (it could not put it back);
# an /etc/fibril, /var/lib/fibril or /run/fibril found here is moved aside
# for the test and put back at the end, and so is a `make install` under
# /usr/local (scripts/run.sh's): its libfibril.so.1 and fibril-sdk.pc come
# first in ld.so's and pkg-config's search and would shadow the packages'.
set -euo pipefail
debs=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "deb-install-test: run as root (dpkg -i)"; exit 1; }
work=$(mktemp -d /tmp/fibril-deb-install.XXXXXX)
chmod 0755 "$work"
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "PASS: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
installed_fibril() {
	dpkg-query -W -f '${Package} ${db:Status-Abbrev}\n' 'fibril*' 'libfibril*' 2>/dev/null |
		awk '$2 !~ /^un/ { print $1 }'
}

if [ -n "$(installed_fibril)" ]; then
	echo "deb-install-test: fibril is installed already here ($(installed_fibril | paste -sd' ')); not touching it"
	rm -rf "$work"
	exit 1
fi

agent_pid="" listener_pid=""
# leftovers of something else (a hand-run agent): set aside, put back at the end
saved=()
for d in /etc/fibril /var/lib/fibril /run/fibril; do
	if [ -e "$d" ]; then
		mkdir -p "$work/saved$(dirname "$d")"
		mv "$d" "$work/saved$d"
		saved+=("$d")
		echo "deb-install-test: $d exists: set aside until the end"
	fi
done
while IFS= read -r d; do
	mkdir -p "$work/saved$(dirname "$d")"
	mv "$d" "$work/saved$d"
	saved+=("$d")
	echo "deb-install-test: $d (a make install) shadows the packages: set aside until the end"
done < <(find /usr/local -name '*fibril*' -prune -print 2>/dev/null)
ldconfig
cleanup() {
	local rc=$?
	set +e
	[ -n "$agent_pid" ] && kill -KILL "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
	[ -n "$listener_pid" ] && kill "$listener_pid" 2>/dev/null && wait "$listener_pid" 2>/dev/null
	local left
	left=$(installed_fibril)
	if [ -n "$left" ]; then
		echo "deb-install-test: purging what is left: $(echo $left)"
		dpkg --purge --force-depends $left >"$work/cleanup-purge.log" 2>&1 || cat "$work/cleanup-purge.log"
	fi
	rm -rf /etc/fibril /var/lib/fibril /run/fibril
	local d
	for d in "${saved[@]}"; do mkdir -p "$(dirname "$d")" && mv "$work/saved$d" "$d"; done
	ldconfig
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT INT TERM

# what the machine holds before: file names (the content of /etc's user
# databases too); dpkg's and apt's own databases and logs are left out
snapshot() {
	{
		find /etc /usr /var/lib /opt -xdev \( -path /var/lib/dpkg -o -path /var/lib/apt \
			-o -path /var/lib/ucf -o -path /etc/ld.so.cache \) -prune -o -print 2>/dev/null
		find /run/fibril /run/systemd 2>/dev/null || true
		md5sum /etc/passwd /etc/group /etc/shadow /etc/gshadow 2>/dev/null
	} | sort
}
snapshot >"$work/before"

deb() { local p; for p in "$@"; do ls "$debs/${p}"_*.deb; done; }
unit=/lib/systemd/system/fibril-agent.service

# ---- the agent under the unit's command line --------------------------------
# A datagram socket as systemd's: the listener writes each message as a line
# "SECONDS MESSAGE" (monotonic clock) until STOPPING=1.
notify_sock=$work/notify.sock
start_listener() {
	rm -f "$notify_sock" "$work/notify.log" "$work/notify.ready"
	python3 - "$notify_sock" "$work/notify.log" "$work/notify.ready" <<'PY' &
import socket, sys, time
path, out, ready = sys.argv[1:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(60)
open(ready, "w").close()
with open(out, "w", buffering=1) as f:
    while True:
        try:
            msg = s.recv(4096).decode()
        except socket.timeout:
            break
        f.write("%.6f %s\n" % (time.monotonic(), msg.replace("\n", " ")))
        if "STOPPING=1" in msg.split("\n"):
            break
PY
	listener_pid=$!
	for _ in $(seq 1 100); do [ -e "$work/notify.ready" ] && return 0; sleep 0.05; done
	echo "notify listener did not start"
	return 1
}

# start_agent LOG: ExecStart as the installed unit has it, with what the
# unit asks systemd for: RuntimeDirectory/StateDirectory, UMask, the
# capability bounding set, NOTIFY_SOCKET. Waits for READY=1 (20 s).
start_agent() {
	local log=$1 cmd caps
	cmd=$(sed -n 's/^ExecStart=//p' "$unit")
	caps=$(sed -n 's/^CapabilityBoundingSet=//p' "$unit" | tr 'A-Z ' 'a-z\n' | sed -n 's/^cap_/+/p' | paste -sd,)
	mkdir -p /run/fibril /var/lib/fibril
	chmod 0755 /run/fibril /var/lib/fibril
	start_listener
	python3 -c 'import time; print(time.monotonic())' >"$work/t_exec"
	(umask 0022; exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin NOTIFY_SOCKET="$notify_sock" \
		setpriv --bounding-set=-all,"$caps" --inh-caps=-all -- $cmd) >"$log" 2>&1 &
	agent_pid=$!
	echo "  started: $cmd (bounding set $caps)"
	for _ in $(seq 1 400); do
		grep -q 'READY=1' "$work/notify.log" 2>/dev/null && return 0
		kill -0 "$agent_pid" 2>/dev/null || break
		sleep 0.05
	done
	echo "  no READY=1; agent log:"
	sed 's/^/    /' "$log"
	return 1
}
stop_agent() {
	local rc=0
	kill -TERM "$agent_pid"
	wait "$agent_pid" || rc=$?
	agent_pid=""
	wait "$listener_pid" 2>/dev/null || true
	listener_pid=""
	return $rc
}
api() { curl -sS --max-time 10 --unix-socket /run/fibril/fibril.sock "http://localhost$1"; }
running_modules() { api /v1/status | python3 -c 'import json,sys; print(" ".join(sorted(m["name"] for m in json.load(sys.stdin)["modules"] if m["state"] == "running")))'; }

# start_and_expect WHAT "MODULES..." [WARNING] : one run of the agent from
# the unit; WARNING (a fixed string) is the one warning the run may log
start_and_expect() {
	local what=$1 want=$2 allowed=${3:-} log=$work/agent.$((++runs)).log got
	if ! start_agent "$log"; then
		fail "$what: the agent did not get ready"
		return
	fi
	got=$(running_modules)
	check "$what: READY=1 with the installed modules running ($got)" test "$got" = "$want"
	check "$what: the agent stops cleanly (exit 0, STOPPING=1)" stop_agent
	grep -q 'STOPPING=1' "$work/notify.log" || fail "$what: no STOPPING=1"
	if [ -n "$allowed" ]; then
		check "$what: the agent's log warns: $allowed" grep -qF -- "$allowed" "$log"
	fi
	check "$what: no other error or warning in the agent's log" bash -c \
		'grep -E " (error|warn) " "$1" | { if [ -n "$2" ]; then grep -vF -- "$2"; else cat; fi; } | { ! grep -q .; }' \
		_ "$log" "$allowed"
}
runs=0

# ---- 1. the agent and two modules -------------------------------------------
t0=$(date +%s)
check "dpkg -i libfibril1 fibril-agent fibril-cni" dpkg -i $(deb libfibril1 fibril-agent fibril-cni)
check "the unit is enabled by its postinst (multi-user.target.wants)" \
	test -L /etc/systemd/system/multi-user.target.wants/fibril-agent.service
if command -v systemd-analyze >/dev/null; then
	check "systemd-analyze verify on the installed unit" systemd-analyze verify "$unit"
fi
start_and_expect "the agent alone (no module package)" ""
check "dpkg -i fibril-module-ipam-cluster-pool fibril-module-ipam-api" \
	dpkg -i $(deb fibril-module-ipam-cluster-pool fibril-module-ipam-api)
check "/etc/fibril/fibril.conf.d holds the modules' commented defaults" \
	test -f /etc/fibril/fibril.conf.d/50-ipam-cluster-pool.conf -a -f /etc/fibril/fibril.conf.d/50-ipam-api.conf
# the admin's local choice: a static node CIDR (no kvstore on this node)
printf '[ipam-cluster-pool]\nnode-cidr = 10.244.7.0/24\n' >/etc/fibril/fibril.conf.d/90-local.conf
start_and_expect "agent + ipam-cluster-pool + ipam-api" "ipam-api ipam-cluster-pool"
ready_ms=$(awk -v t0="$(cat "$work/t_exec")" '/READY=1/ { printf "%.1f", ($1 - t0) * 1000; exit }' "$work/notify.log")
# (the figure: the first start with modules, under the unit's command line)

# ---- 2. a module package added ----------------------------------------------
check "dpkg -i fibril-module-endpoint fibril-module-hubble-lite" \
	dpkg -i $(deb fibril-module-endpoint fibril-module-hubble-lite)
start_and_expect "endpoint and hubble-lite added" "endpoint hubble-lite ipam-api ipam-cluster-pool"
check "the endpoint module keeps its state in /var/lib/fibril/endpoint" test -d /var/lib/fibril/endpoint

# ---- 3. a required module cannot be removed alone ---------------------------
out=$(dpkg -r fibril-module-ipam-cluster-pool 2>&1) && rc=0 || rc=$?
echo "$out" | sed 's/^/  dpkg: /'
check "dpkg -r of the ipam provider is refused: ipam-api and endpoint depend on it" bash -c '
	[ "$1" -ne 0 ] && grep -q "dependency problems" <<<"$2" && grep -q "fibril-module-ipam-api depends on" <<<"$2" &&
	[ -f /usr/lib/*/fibril/modules/ipam-cluster-pool.so ]' _ "$rc" "$out"
out=$(apt-get -s remove fibril-module-ipam-cluster-pool 2>&1) || true
echo "$out" | grep -E '^(The following|  |Remv)' | sed 's/^/  apt: /'
check "apt would remove the dependents with it (endpoint, ipam-api)" bash -c '
	grep -q "^Remv fibril-module-endpoint" <<<"$1" && grep -q "^Remv fibril-module-ipam-api" <<<"$1" &&
	! grep -q "^Remv fibril-module-hubble-lite" <<<"$1"' _ "$out"

# ---- 4. a module removed, then purged ---------------------------------------
check "dpkg -r fibril-module-hubble-lite" dpkg -r fibril-module-hubble-lite
check "its module file is gone, its conffile stays until purge" bash -c '
	! ls /usr/lib/*/fibril/modules/hubble-lite.so 2>/dev/null && [ -f /etc/fibril/fibril.conf.d/50-hubble-lite.conf ]'
start_and_expect "hubble-lite removed" "endpoint ipam-api ipam-cluster-pool"
mkdir -p /var/lib/fibril/hubble-lite # as if it had kept state
check "dpkg --purge fibril-module-hubble-lite: its conffile and state folder go" bash -c '
	dpkg --purge fibril-module-hubble-lite >/dev/null && [ ! -e /etc/fibril/fibril.conf.d/50-hubble-lite.conf ] &&
	[ ! -e /var/lib/fibril/hubble-lite ] && [ -d /var/lib/fibril/endpoint ]'

# ---- 5. the vendor module, packaged out of tree -----------------------------
check "dpkg -i libfibril-dev" dpkg -i $(deb libfibril-dev)
vsrc=$work/fibril-module-vendor-ipam-1.0.0
cp -a "$src/sdk/examples/vendor-ipam" "$vsrc"
if (cd "$vsrc" && rm -f ./*.so && DEB_BUILD_OPTIONS="noautodbgsym" dpkg-buildpackage -b -uc -us) >"$work/vendor-build.log" 2>&1; then
	pass "the vendor module builds with dpkg-buildpackage against the installed libfibril-dev"
else
	tail -30 "$work/vendor-build.log"
	fail "the vendor module builds with dpkg-buildpackage against the installed libfibril-dev"
fi
vdeb=$(ls "$work"/fibril-module-vendor-ipam_*.deb 2>/dev/null || true)
if [ -n "$vdeb" ]; then
	echo "  $(basename "$vdeb"): $(stat -c %s "$vdeb") bytes"
	if command -v lintian >/dev/null; then
		lintian --tag-display-limit 0 --suppress-tags initial-upload-closes-no-bugs "$vdeb" 2>&1 |
			{ grep -v 'running with root privileges' || true; } | sed 's/^/  lintian: /' | tee "$work/vendor-lintian.log"
		check "lintian: no error on the vendor package" bash -c '! grep -q " E: " "$1"' _ "$work/vendor-lintian.log"
	fi
	echo "  $(basename "$vdeb"): Depends: $(dpkg-deb -f "$vdeb" Depends)"
	check "its Depends carry libfibril1 (>= ...) from libfibril1's symbols file" \
		bash -c 'dpkg-deb -f "$1" Depends | grep -q "libfibril1 (>= "' _ "$vdeb"
	out=$(dpkg -i "$vdeb" 2>&1) && rc=0 || rc=$?
	echo "$out" | grep -i fibril | sed 's/^/  dpkg: /'
	check "dpkg -i the vendor package beside ipam-cluster-pool: its postinst names the ambiguity" \
		bash -c '[ "$1" -eq 0 ] && grep -q "ambiguous capability .ipam." <<<"$2"' _ "$rc" "$out"
	printf 'web-0/eth0 10.0.9.10\nweb-1/eth0 10.0.9.11\n' >/etc/fibril/vendor-ipam.table
	printf '[providers]\nipam = vendor-ipam\n[vendor-ipam]\ntable = /etc/fibril/vendor-ipam.table\ncidr = 10.0.9.0/24\n' \
		>/etc/fibril/fibril.conf.d/91-vendor.conf
	out=$(fibril-agent --config /etc/fibril/fibril.conf --list-modules 2>&1) || true
	check "fibril-agent --list-modules lists vendor-ipam as an ipam provider" grep -q '^vendor-ipam provides=ipam' <<<"$out"
	out=$(fibril-agent --config /etc/fibril/fibril.conf --graph 2>&1) || true
	echo "$out" | sed 's/^/  graph: /'
	check "fibril-agent --graph resolves ipam-api to vendor-ipam" bash -c '
		grep -q "vendor-ipam" <<<"$1" && grep -q "ipam-api .*after .*vendor-ipam" <<<"$1" &&
		! grep -q "^ *[0-9]*\. ipam-cluster-pool" <<<"$1"' _ "$out"
	start_and_expect "vendor-ipam chosen" "endpoint ipam-api vendor-ipam"
	# the vendor package provides the virtual package fibril-ipam, which
	# satisfies the Depends of ipam-api and endpoint: the in-tree IPAM mode
	# can go, and the vendor's is then the only one
	check "the vendor package Provides fibril-ipam" bash -c 'dpkg-deb -f "$1" Provides | grep -qw fibril-ipam' _ "$vdeb"
	out=$(dpkg -r fibril-module-ipam-cluster-pool 2>&1) && rc=0 || rc=$?
	check "dpkg -r fibril-module-ipam-cluster-pool: the vendor's fibril-ipam keeps ipam-api and endpoint installed ($(tail -1 <<<"$out"))" \
		bash -c '[ "$1" -eq 0 ] && [ "$(dpkg-query -W -f "\${db:Status-Abbrev}" fibril-module-ipam-api)" = "ii " ]' _ "$rc"
	# the admin's 90-local.conf still configures the removed module: its
	# section is ignored with a warning (Debian's removed-not-purged state)
	start_and_expect "vendor-ipam alone" "endpoint ipam-api vendor-ipam" \
		"90-local.conf:1: unknown section [ipam-cluster-pool]; no loaded module has this section, its settings are ignored"
	out=$(dpkg -r fibril-module-vendor-ipam 2>&1) && rc=0 || rc=$?
	check "dpkg -r fibril-module-vendor-ipam is refused while it is the only fibril-ipam (ipam-api needs one)" test "$rc" -ne 0
	check "dpkg -i fibril-module-ipam-cluster-pool again" dpkg -i $(deb fibril-module-ipam-cluster-pool)
	check "dpkg -r fibril-module-vendor-ipam" dpkg -r fibril-module-vendor-ipam
fi

# ---- 6. purge everything ----------------------------------------------------
pkgs=$(installed_fibril)
out=$(dpkg --purge $pkgs 2>&1) && rc=0 || rc=$?
echo "$out" | grep -v '^(Reading' | sed 's/^/  dpkg: /' | head -30
check "dpkg --purge of every fibril package ($(echo $pkgs))" test "$rc" -eq 0
check "no fibril package is left in dpkg's database" test -z "$(installed_fibril)"
snapshot >"$work/after"
check "purge leaves nothing behind (files under /etc /usr /var/lib /opt /run/fibril, users, groups)" \
	diff -u "$work/before" "$work/after"

echo "deb-install-test: $(($(date +%s) - t0)) s; exec to READY=1 of the first start (2 modules): ${ready_ms:-?} ms"
echo "deb-install-test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
