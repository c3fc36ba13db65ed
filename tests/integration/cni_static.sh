#!/usr/bin/env bash
# tests/integration/cni_static.sh - the fibril-cni the DaemonSet copies onto
# nodes runs on a node that has nothing (issue 25): the binary has no
# program interpreter and no shared library; in an empty root (a chroot
# holding the plugin alone, not even a libc) it answers VERSION and wires a
# pod up (ADD) through the agent's socket and the pod's namespace bound into
# that root (and the kernel's /proc), then takes it down (DEL).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"

cni_prereqs ipam-api ipam-cluster-pool endpoint datapath
if ! grep -q '^fibril_cni_LDFLAGS = -all-static' "$top_builddir/Makefile"; then
	# the sanitizer runtimes do not link statically: that tree builds a
	# dynamic plugin on purpose, and the gcc and clang suites run this test
	if [ -n "${SAN_CFLAGS:-}" ]; then
		echo "SKIP: a sanitizer build links fibril-cni dynamically (the gcc suite checks the static one)"
		exit 77
	fi
	fail "fibril-cni is linked statically (configured with --disable-static-cni?)"
	finish
fi

hdr=$(readelf -lW "$CNI_PLUGIN" 2>&1)
check "fibril-cni has no program interpreter (statically linked)" bash -c '! grep -q "INTERP" <<<"$1"' _ "$hdr"
check "fibril-cni needs no shared library" bash -c '! readelf -dW "$1" 2>/dev/null | grep -q NEEDED' _ "$CNI_PLUGIN"

root=$WORK/emptyroot
mkdir -p "$root/run/netns"
cp "$CNI_PLUGIN" "$root/fibril-cni"
out=$(printf '%s' '{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni"}' |
	env -i CNI_COMMAND=VERSION /usr/sbin/chroot "$root" /fibril-cni 2>&1) && rc=0 || rc=$?
check "VERSION in an empty root (exit $rc: $out)" bash -c '[ "$1" = 0 ] && grep -q supportedVersions <<<"$2"' _ "$rc" "$out"

# an ADD from the empty root: the agent's socket, the pod's namespace and
# the kernel's /proc (which a plugin reads on every node: its own network
# namespace) are the only things in it
cni_modules "$WORK/mods" ipam-api ipam-cluster-pool endpoint datapath
netns_add "$NODE_NS"
start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.11.0/24 ||
	{ fail "the agent starts"; finish; }
# a hard link to the socket's inode: connect() through it reaches the agent
ln "$WORK/fibril.sock" "$root/run/fibril.sock"
pod=fstat-p$$
netns_add "$pod"
# the same path inside the root as outside: the agent (outside) opens it too
touch "$root/run/netns/$pod"
mount --bind "/run/netns/$pod" "$root/run/netns/$pod"
mkdir -p "$root/proc"
mount -t proc proc "$root/proc"
cni_test_cleanup() { umount "$root/run/netns/$pod" "$root/proc" 2>/dev/null; }
conf='{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"/run/fibril.sock"}'
run_in_root() {
	printf '%s' "$conf" | ip netns exec "$NODE_NS" env -i CNI_COMMAND="$1" CNI_CONTAINERID=static$$ \
		CNI_NETNS=/run/netns/$pod CNI_IFNAME=eth0 CNI_PATH=/ CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=static" \
		/usr/sbin/chroot "$root" /fibril-cni >"$WORK/out" 2>"$WORK/err"
}
run_in_root ADD && rc=0 || rc=$?
check "ADD from an empty root (exit $rc: $(cat "$WORK/out" "$WORK/err"))" test "$rc" = 0
addr=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ips"][0]["address"].split("/")[0])' "$WORK/out" 2>/dev/null)
check "the pod has its address ($addr)" bash -c 'ip -n "$1" -4 addr show eth0 | grep -q "inet $2/"' _ "$pod" "$addr"
check "the pod reaches its node's gateway" ip netns exec "$pod" ping -c1 -W2 10.244.11.1
run_in_root DEL && rc=0 || rc=$?
check "DEL from an empty root (exit $rc)" test "$rc" = 0
check "the pod's interface is gone" bash -c '! ip -n "$1" link show eth0 2>/dev/null' _ "$pod"
finish
