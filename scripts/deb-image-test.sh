#!/usr/bin/env bash
# scripts/deb-image-test.sh DEBDIR - the container image built from the
# packages, as root (issue 25). No registry is reachable here, so the base
# image is the minimal Debian 12 root deb-clean-root-test.sh made with
# mmdebstrap (build/cleanroot/minbase.tar), committed with buildah as a
# local image; then deploy/Containerfile itself is built with buildah
# (chroot isolation, the packages of DEBDIR as the context, a standalone
# module set), and from the image's root filesystem the agent starts
# (READY=1 in a network namespace of its own) and the image's fibril-cni
# wires a pod up. buildah's storage lives under build/image and is removed
# at the end (vfs: no overlay mounts to leave behind).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
debs=$(cd "$1" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "deb-image-test: run as root (buildah, chroot, network namespaces)"; exit 1; }
command -v buildah >/dev/null || { echo "deb-image-test: buildah is missing (scripts/deps.sh)"; exit 1; }
. "$top/tests/lib/wait.sh"

work=$top/build/image
base_tar=$top/build/cleanroot/minbase.tar
[ -s "$base_tar" ] || { echo "deb-image-test: no $base_tar (deb-clean-root-test.sh makes it)"; exit 1; }
node_ns=fimage-node-$$
pod_ns=fimage-pod-$$
bpffs=/sys/fs/bpf/fibril-image-$$
MODULES="ipam-cluster-pool ipam-api endpoint datapath"
passed=0 failed=0 t0=$(date +%s)
pass() { passed=$((passed + 1)); echo "PASS: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
B() { buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"; }

agent_pid="" ctr="" mnt=""
mounts=()
cleanup() {
	set +e
	[ -n "$agent_pid" ] && kill -KILL "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
	local i
	for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[$i]}" 2>/dev/null; done
	ip netns del "$pod_ns" 2>/dev/null
	ip netns del "$node_ns" 2>/dev/null
	rm -rf "$bpffs"
	B rm --all >/dev/null 2>&1
	B rmi --all --force >/dev/null 2>&1
	rm -rf "$work/storage" "$work/run" "$work/context"
}
trap cleanup EXIT INT TERM
rm -rf "$work"
mkdir -p "$work/context"

# ---- the base image: the minimal root --------------------------------------
tb=$(date +%s)
ctr=$(B from scratch)
mnt=$(B mount "$ctr")
tar -C "$mnt" -xf "$base_tar"
B umount "$ctr" >/dev/null
B commit -q "$ctr" localhost/fibril-base:bookworm >/dev/null
B rm "$ctr" >/dev/null
ctr=""
check "the base image from the minimal root ($(($(date +%s) - tb)) s)" B inspect localhost/fibril-base:bookworm

# ---- deploy/Containerfile ---------------------------------------------------------
cp "$debs"/*.deb "$work/context/"
rm -f "$work/context"/*-dbgsym_*.deb
tb=$(date +%s)
if B bud --isolation chroot --pull-never --build-arg BASE=localhost/fibril-base:bookworm \
	--build-arg MODULES="$MODULES" -f "$top/deploy/Containerfile" -t localhost/fibril:test "$work/context" \
	>"$work/bud.log" 2>&1; then
	pass "buildah bud -f deploy/Containerfile (modules: $MODULES; $(($(date +%s) - tb)) s)"
else
	tail -30 "$work/bud.log"
	fail "buildah bud -f deploy/Containerfile"
	echo "deb-image-test: $passed passed, $failed failed"
	exit 1
fi
size=$(B images --format '{{.Size}}' localhost/fibril:test 2>/dev/null || echo "?")
echo "  image size: $size"
entry=$(B inspect --format '{{.OCIv1.Config.Entrypoint}}' localhost/fibril:test)
check "the image's entrypoint is the agent ($entry)" grep -q '/usr/sbin/fibril-agent' <<<"$entry"

# ---- the agent and the plugin from the image's root filesystem ---------------------
ctr=$(B from --pull-never localhost/fibril:test)
mnt=$(B mount "$ctr")
check "the image holds the agent, the CLI and fibril-cni" \
	test -x "$mnt/usr/sbin/fibril-agent" -a -x "$mnt/usr/bin/fibril" -a -x "$mnt/usr/lib/cni/fibril-cni"
mount -t proc proc "$mnt/proc" && mounts+=("$mnt/proc")
mkdir -p "$mnt/dev" "$mnt/sys" && mount --bind /dev "$mnt/dev" && mounts+=("$mnt/dev")
mount -t sysfs sysfs "$mnt/sys" && mounts+=("$mnt/sys")
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
mount --bind /sys/fs/bpf "$mnt/sys/fs/bpf" && mounts+=("$mnt/sys/fs/bpf")
mkdir -p "$mnt/run/fibril" "$mnt/var/lib/fibril" "$mnt/etc/fibril/fibril.conf.d"
printf '[agent]\nbpffs-dir = %s\n[ipam-cluster-pool]\nnode-cidr = 10.244.13.0/24\n' "$bpffs" \
	>"$mnt/etc/fibril/fibril.conf.d/90-test.conf"
ip netns add "$node_ns"
ip -n "$node_ns" link set lo up
tr=$(date +%s%N)
nsenter --net="/run/netns/$node_ns" chroot "$mnt" env -i PATH=/usr/sbin:/usr/bin \
	/usr/sbin/fibril-agent --config /etc/fibril/fibril.conf >"$work/agent.log" 2>&1 &
agent_pid=$!
healthy() { nsenter --net="/run/netns/$node_ns" chroot "$mnt" fibril status >/dev/null 2>&1; }
if wait_alive "$agent_pid" 60 healthy; then
	pass "the image's agent starts and answers fibril status ($((($(date +%s%N) - tr) / 1000000)) ms)"
else
	tail -20 "$work/agent.log"
	fail "the image's agent starts and answers fibril status"
fi
ip netns add "$pod_ns"
touch "$mnt/run/pod-netns"
mount --bind "/run/netns/$pod_ns" "$mnt/run/pod-netns" && mounts+=("$mnt/run/pod-netns")
conf='{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"/run/fibril/fibril.sock"}'
cni() {
	printf '%s' "$conf" | nsenter --net="/run/netns/$node_ns" chroot "$mnt" env -i CNI_COMMAND="$1" \
		CNI_CONTAINERID=image$$ CNI_NETNS=/run/pod-netns CNI_IFNAME=eth0 CNI_PATH=/usr/lib/cni \
		CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=image" /usr/lib/cni/fibril-cni
}
out=$(cni ADD 2>&1) && rc=0 || rc=$?
check "the image's fibril-cni wires a pod up (exit $rc)" test "$rc" -eq 0
check "the pod reaches its gateway 10.244.13.1" ip netns exec "$pod_ns" ping -c1 -W2 10.244.13.1
out=$(cni DEL 2>&1) && rc=0 || rc=$?
check "CNI DEL (exit $rc)" test "$rc" -eq 0
kill -TERM "$agent_pid"
rc=0
wait "$agent_pid" || rc=$?
agent_pid=""
check "the image's agent stops cleanly (exit $rc)" test "$rc" -eq 0

echo "deb-image-test: $(($(date +%s) - t0)) s"
echo "deb-image-test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
