#!/usr/bin/env bash
# scripts/deb-clean-root-test.sh DEBDIR DEBDIR2 - the packages on a machine
# that has nothing (issue 25), as root:
#  1. a minimal Debian 12 root made with mmdebstrap (variant minbase) from
#     this machine's apt sources: no build dependency, no fibril library, no
#     libwebsockets plugin; cached in build/cleanroot/minbase.tar for the
#     run's later stages (deb-image-test.sh);
#  2. a local apt repository of DEBDIR (the packages deb-check built, as an
#     unprivileged user) and DEBDIR2 (the same source rebuilt with the next
#     version, in another directory);
#  3. `apt install` of the agent, the CNI plugin and a standalone node's
#     modules into the root: apt resolves everything else from Debian;
#  4. the agent started from the installed configuration (and a drop-in
#     with the node CIDR) in a network namespace of its own: READY=1 on its
#     NOTIFY_SOCKET with the installed modules, `fibril status`, a pod wired
#     up by the installed fibril-cni that reaches its gateway;
#  5. an upgrade to the rebuilt version with the admin's edit in the
#     conffile /etc/fibril/fibril.conf, non-interactively (stdin closed, as
#     unattended-upgrades runs): every package configured, the edit kept,
#     the agent starts;
#  6. a module whose drop-in the admin edited is removed (not purged): the
#     next start succeeds and warns about the leftover section;
#  7. purge of everything (and what apt installed for it): the root's file
#     list is the one before the install.
# Prints PASS/FAIL lines and the stage's times; exits 1 on any failure.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
debs1=$(cd "$1" && pwd)
debs2=$(cd "$2" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "deb-clean-root-test: run as root (chroot, network namespaces)"; exit 1; }
for tool in mmdebstrap dpkg-scanpackages ip nsenter; do
	command -v "$tool" >/dev/null || { echo "deb-clean-root-test: $tool is missing (scripts/deps.sh)"; exit 1; }
done
. "$top/tests/lib/wait.sh"

work=$top/build/cleanroot
root=$work/root
cache=$work/minbase.tar
node_ns=fclean-node-$$
pod_ns=fclean-pod-$$
bpffs=/sys/fs/bpf/fibril-cleanroot-$$
passed=0 failed=0 t0=$(date +%s)
pass() { passed=$((passed + 1)); echo "PASS: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
stage() { echo "--- $* ($(($(date +%s) - t0)) s)"; }

agent_pid="" listener_pid=""
mounts=()
cleanup() {
	set +e
	[ -n "$agent_pid" ] && kill -KILL "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
	[ -n "$listener_pid" ] && kill "$listener_pid" 2>/dev/null && wait "$listener_pid" 2>/dev/null
	local i
	for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[$i]}" 2>/dev/null; done
	ip netns del "$pod_ns" 2>/dev/null
	ip netns del "$node_ns" 2>/dev/null
	rm -rf "$bpffs"
}
trap cleanup EXIT INT TERM
bind() { mkdir -p "$2"; mount --bind "$1" "$2"; mounts+=("$2"); }
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }

# ---- 1. the minimal root ------------------------------------------------------
mkdir -p "$work"
if [ ! -f "$cache" ] || [ ! -s "$cache" ]; then
	stage "mmdebstrap --variant=minbase bookworm"
	rm -rf "$cache" "$cache.tmp"
	# this machine's apt sources (its mirror): the first file that exists
	sources=""
	for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
		[ -s "$f" ] && { sources=$f; break; }
	done
	if ! mmdebstrap --quiet --variant=minbase --mode=root --format=tar bookworm "$cache.tmp" ${sources:+"$sources"} \
		>"$work/mmdebstrap.log" 2>&1; then
		tail -20 "$work/mmdebstrap.log"
		echo "deb-clean-root-test: mmdebstrap FAILED"
		exit 1
	fi
	mv "$cache.tmp" "$cache"
fi
rm -rf "$root"
mkdir -p "$root"
tar -C "$root" -xf "$cache"
check "the minimal root has no fibril, libwebsockets or libbpf" bash -c \
	'! ls "$1"/usr/lib/*/libwebsockets* "$1"/usr/lib/*/libbpf* "$1"/usr/sbin/fibril-agent >/dev/null 2>&1' _ "$root"
stage "the minimal root is ready"

# ---- 2. the local repository ----------------------------------------------------
repo=$root/srv/fibril-repo
mkdir -p "$repo/v1" "$repo/v2"
cp "$debs1"/*.deb "$repo/v1/"
cp "$debs2"/*.deb "$repo/v2/"
rm -f "$repo"/v*/*-dbgsym_*.deb
(cd "$repo" && dpkg-scanpackages --multiversion v1 /dev/null >v1.Packages 2>/dev/null &&
	dpkg-scanpackages --multiversion v2 /dev/null >v2.Packages 2>/dev/null)
cp "$repo/v1.Packages" "$repo/Packages"
echo "deb [trusted=yes] file:/srv/fibril-repo ./" >"$root/etc/apt/sources.list.d/fibril.list"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
bind /dev "$root/dev"
mount -t proc proc "$root/proc" && mounts+=("$root/proc")
mount -t sysfs sysfs "$root/sys" && mounts+=("$root/sys")
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
bind /sys/fs/bpf "$root/sys/fs/bpf"
in_root apt-get update -qq >"$work/apt-update.log" 2>&1 || { cat "$work/apt-update.log"; fail "apt-get update in the root"; exit 1; }
snapshot() {
	(cd "$root" && find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./run -o -path ./tmp \
		-o -path ./var/cache -o -path ./var/log -o -path ./var/lib/apt -o -path ./var/lib/dpkg \
		-o -path ./srv -o -path ./etc/apt/sources.list.d \) -prune -o -print | sort)
	cut -d: -f1 "$root/etc/passwd" | sort | sed 's/^/user: /'
	cut -d: -f1 "$root/etc/group" | sort | sed 's/^/group: /'
}
snapshot >"$work/before"

# ---- 3. apt install ---------------------------------------------------------------
MODULES=(endpoint datapath ipam-api ipam-cluster-pool policy)
pkgs=(fibril-agent fibril-cni)
for m in "${MODULES[@]}"; do pkgs+=("fibril-module-$m"); done
stage "apt-get install ${pkgs[*]}"
ti=$(date +%s)
if in_root apt-get install -y -qq "${pkgs[@]}" </dev/null >"$work/install.log" 2>&1; then
	pass "apt-get install ${pkgs[*]} into the minimal root ($(($(date +%s) - ti)) s)"
else
	tail -30 "$work/install.log"
	fail "apt-get install ${pkgs[*]} into the minimal root"
	exit 1
fi
# installed ones only: dpkg also lists the virtual packages (fibril-ipam...)
# and the ones apt merely knows, as not installed
installed_fibril() {
	in_root dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\n' 'fibril*' 'libfibril*' 2>/dev/null |
		awk '$1 !~ /^[up]n/ { print $2, $3, $1 }'
}
installed=$(installed_fibril | awk '$1 !~ /^lib/ { print $1 }' | sort | paste -sd' ')
expected=$(printf '%s\n' "${pkgs[@]}" | sort | paste -sd' ')
check "apt installed exactly the fibril packages asked for, nothing recommended or suggested ($installed)" \
	test "$installed" = "$expected"
check "libwebsockets' libuv plugin came with libfibril1 (Depends: libwebsockets-evlib-uv)" \
	bash -c 'chroot "$1" dpkg-query -W -f "\${db:Status-Abbrev}" libwebsockets-evlib-uv | grep -q "^ii"' _ "$root"

# ---- 4. the agent from the installed configuration ----------------------------------
cat >"$root/etc/fibril/fibril.conf.d/90-local.conf" <<EOF
# the test's node: its own bpffs directory and node CIDR
[agent]
bpffs-dir = $bpffs
[ipam-cluster-pool]
node-cidr = 10.244.12.0/24
EOF
ip netns add "$node_ns"
ip -n "$node_ns" link set lo up
notify=$root/run/notify.sock
# start_agent LABEL : the installed agent (the unit's ExecStart: no
# argument) in the node namespace, chrooted into the root, with a
# NOTIFY_SOCKET; waits for READY=1. READY_STATUS holds the STATUS= line.
start_agent() {
	local label=$1
	rm -f "$notify" "$work/notify.log"
	mkdir -p "$root/run/fibril" "$root/var/lib/fibril"
	/usr/bin/python3 - "$notify" "$work/notify.log" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(120)
with open(sys.argv[2], "w", buffering=1) as f:
    while True:
        try:
            msg = s.recv(4096).decode()
        except socket.timeout:
            break
        f.write(msg.replace("\n", " ") + "\n")
        if "STOPPING=1" in msg:
            break
PY
	listener_pid=$!
	wait_alive "$listener_pid" 10 test -S "$notify" || true
	nsenter --net="/run/netns/$node_ns" chroot "$root" env -i PATH=/usr/sbin:/usr/bin NOTIFY_SOCKET=/run/notify.sock \
		/usr/sbin/fibril-agent >>"$work/agent.log" 2>&1 &
	agent_pid=$!
	if wait_alive "$agent_pid" 60 grep -q 'READY=1' "$work/notify.log"; then
		READY_STATUS=$(grep 'READY=1' "$work/notify.log" | head -1)
		pass "$label: READY=1 from the installed agent ($READY_STATUS)"
		return 0
	fi
	tail -20 "$work/agent.log"
	fail "$label: READY=1 from the installed agent"
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
stage "the agent from the installed configuration"
tr=$(date +%s%N)
if start_agent "first start"; then
	echo "  exec to READY=1: $((($(date +%s%N) - tr) / 1000000)) ms"
	out=$(nsenter --net="/run/netns/$node_ns" chroot "$root" fibril status 2>&1) && rc=0 || rc=$?
	check "fibril status from the root answers ($(head -3 <<<"$out" | paste -sd' '))" test "$rc" -eq 0
	ip netns add "$pod_ns"
	touch "$root/run/pod-netns"
	mount --bind "/run/netns/$pod_ns" "$root/run/pod-netns" && mounts+=("$root/run/pod-netns")
	conf='{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"/run/fibril/fibril.sock"}'
	cni() {
		printf '%s' "$conf" | nsenter --net="/run/netns/$node_ns" chroot "$root" env -i CNI_COMMAND="$1" \
			CNI_CONTAINERID=cleanroot$$ CNI_NETNS=/run/pod-netns CNI_IFNAME=eth0 CNI_PATH=/usr/lib/cni \
			CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=cleanroot" /usr/lib/cni/fibril-cni
	}
	out=$(cni ADD 2>&1) && rc=0 || rc=$?
	check "the installed fibril-cni wires a pod up (CNI ADD: exit $rc)" test "$rc" -eq 0
	check "the pod reaches its gateway 10.244.12.1" ip netns exec "$pod_ns" ping -c1 -W2 10.244.12.1
	out=$(cni DEL 2>&1) && rc=0 || rc=$?
	check "CNI DEL (exit $rc)" test "$rc" -eq 0
	check "the first agent stops cleanly" stop_agent
fi

# ---- 5. the upgrade, with the admin's edit in the conffile ---------------------------------
stage "upgrade to the rebuilt packages"
printf '\n# the admin was here\n[agent]\nlog-level = debug\n' >>"$root/etc/fibril/fibril.conf"
cp "$repo/v2.Packages" "$repo/Packages"
in_root apt-get update -qq >"$work/apt-update2.log" 2>&1 || true
v2=$(dpkg-deb -f "$(ls "$debs2"/fibril-agent_*.deb)" Version)
out=$(in_root apt-get install -y -qq "${pkgs[@]}" </dev/null 2>&1) && rc=0 || rc=$?
echo "$out" >"$work/upgrade.log"
grep -iE 'conffile|fibril.conf' "$work/upgrade.log" | head -5 | sed 's/^/  apt: /' || true
check "the non-interactive upgrade to $v2 succeeds (exit $rc)" test "$rc" -eq 0
states=$(installed_fibril)
check "every fibril package is at $v2 and configured" bash -c \
	'[ -n "$1" ] && ! awk -v v="$2" "\$2 != v || \$3 != \"ii\"" <<<"$1" | grep -q .' _ "$states" "$v2"
check "the admin's edit of /etc/fibril/fibril.conf is kept" grep -q '^log-level = debug' "$root/etc/fibril/fibril.conf"
check "no .dpkg-dist or .dpkg-new conffile was left" bash -c '! ls "$1"/etc/fibril/*.dpkg-* "$1"/etc/fibril/fibril.conf.d/*.dpkg-* 2>/dev/null | grep -q .' _ "$root"
if start_agent "after the upgrade"; then
	check "after the upgrade: the agent stops cleanly" stop_agent
fi

# ---- 6. a module removed, its edited drop-in left behind ----------------------------------
stage "remove a module whose drop-in was edited"
sed -i -e 's/^# \[policy\]$/[policy]/' "$root/etc/fibril/fibril.conf.d/50-policy.conf"
grep -q '^\[policy\]' "$root/etc/fibril/fibril.conf.d/50-policy.conf" || echo '[policy]' >>"$root/etc/fibril/fibril.conf.d/50-policy.conf"
out=$(in_root apt-get remove -y -qq fibril-module-policy </dev/null 2>&1) && rc=0 || rc=$?
check "apt-get remove fibril-module-policy (exit $rc)" test "$rc" -eq 0
check "its edited drop-in stays (removed, not purged)" test -f "$root/etc/fibril/fibril.conf.d/50-policy.conf"
: >"$work/agent.log"
if start_agent "policy removed"; then
	check "the start warns about the leftover [policy] section" grep -q '50-policy.conf.*\[policy\].*ignored' "$work/agent.log"
	check "policy removed: the agent stops cleanly" stop_agent
fi

# ---- 7. purge ------------------------------------------------------------------------------
stage "purge"
mapfile -t all < <(installed_fibril | awk '{ print $1 }')
out=$(in_root apt-get purge -y -qq --autoremove "${all[@]}" </dev/null 2>&1) && rc=0 || rc=$?
check "apt-get purge --autoremove of every fibril package (${all[*]}; exit $rc)" test "$rc" -eq 0
# what apt pulled in for them: openssl and ca-certificates recommend each
# other, which plain autoremove keeps
in_root apt-get autoremove --purge -y -qq -o APT::AutoRemove::RecommendsImportant=false \
	-o APT::AutoRemove::SuggestsImportant=false </dev/null >/dev/null 2>&1 || true
check "no fibril package is left in dpkg's database" test -z "$(installed_fibril)"
snapshot >"$work/after"
check "the root's files, users and groups are as before the install" diff -u "$work/before" "$work/after"

echo "deb-clean-root-test: $(($(date +%s) - t0)) s"
echo "deb-clean-root-test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
