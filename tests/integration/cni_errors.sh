#!/usr/bin/env bash
# tests/integration/cni_errors.sh - fibril-cni's errors, run the way the CNI
# spec says (CNI_* variables and the configuration on stdin) against an
# agent with ipam-cluster-pool (static node-cidr) and ipam-api only, in a
# node network namespace: VERSION; every error code (4 bad environment, 6
# undecodable, 7 invalid config naming the field, 1 incompatible version,
# 3 missing namespace, 11 agent down, 101 interface exists, 102 endpoint
# refused (no endpoint module here, so ADD fails at its last step and must
# roll back the veth and the address)); after each failed ADD no lxc link
# is left in the node, no address in IPAM, and the pod is as before. DEL
# of what was never added succeeds; DEL with the agent down is 11; a second
# interface of the same network (net1 after eth0) is 101, changing nothing;
# runtimeConfig.bandwidth.egressRate is 7 (ingressRate alone passes); STATUS
# (0, and 50 when the agent is down or the pool is full); GC of IPAM owners
# and stale host veths.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"

cni_prereqs ipam-api ipam-cluster-pool
cni_modules "$WORK/mods" ipam-api ipam-cluster-pool
netns_add "$NODE_NS"
POD="fcni-pod-$$"
netns_add "$POD"
POD_PATH=/var/run/netns/$POD
start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.7.0/28

SOCK=$WORK/fibril.sock
conf() { # conf VERSION [extra JSON members]
	printf '{"cniVersion":"%s","name":"fibril","type":"fibril-cni","agent-socket":"%s"%s}' "$1" "$SOCK" "${2:+,$2}"
}
CONF=$(conf 1.0.0)
ATT=(CNI_CONTAINERID=c-err-1 CNI_NETNS="$POD_PATH" CNI_IFNAME=eth0)

# expect_code WHAT CODE [NEEDLE] : the last run failed with CODE, its msg has NEEDLE
expect_code() {
	local what=$1 code=$2 needle=${3:-}
	if [ "$PRC" != 0 ] && [ "$PCODE" = "$code" ] && { [ -z "$needle" ] || contains "$(out)" "$needle"; } &&
		outjson "set(j) <= {'cniVersion', 'code', 'msg', 'details'} and j['msg']"; then
		pass "$what: code $code"
	else
		fail "$what: expected code $code (exit $PRC): $(out) $(cat "$WORK/err")"
	fi
}

BEFORE=$(pod_snapshot "$POD")
# assert_clean WHAT : nothing left behind by a failed ADD
assert_clean() {
	local links allocs
	links=$(node_lxc_links)
	allocs=$(ipam_allocations)
	check "$1: no lxc/tmp link left in the node" test -z "$links" || echo "  left: $links"
	check "$1: no IPAM allocation left" test -z "$allocs" || echo "  left: $allocs"
	check "$1: the pod namespace is unchanged" test "$(pod_snapshot "$POD")" = "$BEFORE"
}

# ---- VERSION -------------------------------------------------------------------
plugin VERSION ''
check "VERSION without stdin lists the supported versions" test "$PRC:$(out)" = \
	'0:{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}'
plugin VERSION '{"cniVersion":"0.4.0"}'
check "VERSION answers in the version asked for" outjson "j['cniVersion'] == '0.4.0' and '1.1.0' in j['supportedVersions']"

# ---- 4: the environment --------------------------------------------------------
plugin "" "$CONF" "${ATT[@]}"
expect_code "no CNI_COMMAND" 4 '"details":"CNI_COMMAND"'
plugin FROB "$CONF" "${ATT[@]}"
expect_code "an unknown CNI_COMMAND" 4 "unknown CNI_COMMAND 'FROB'"
plugin ADD "$CONF" CNI_CONTAINERID=c-err-1 CNI_IFNAME=eth0
expect_code "ADD without CNI_NETNS" 4 '"msg":"CNI_NETNS is required for ADD but is not set","details":"CNI_NETNS"'
assert_clean "ADD without CNI_NETNS"
plugin ADD "$CONF" CNI_NETNS="$POD_PATH" CNI_IFNAME=eth0
expect_code "ADD without CNI_CONTAINERID" 4 '"details":"CNI_CONTAINERID"'
plugin ADD "$CONF" CNI_CONTAINERID=c-err-1 CNI_NETNS="$POD_PATH"
expect_code "ADD without CNI_IFNAME" 4 '"details":"CNI_IFNAME"'
plugin CHECK "$CONF" CNI_CONTAINERID=c-err-1 CNI_IFNAME=eth0
expect_code "CHECK without CNI_NETNS" 4 '"details":"CNI_NETNS"'
plugin ADD "$CONF" CNI_CONTAINERID=c-err-1 CNI_NETNS="$POD_PATH" CNI_IFNAME=averyveryverylongname
expect_code "a CNI_IFNAME over 15 characters" 4 "longer than 15 characters"
plugin ADD "$CONF" CNI_CONTAINERID=-bad/id CNI_NETNS="$POD_PATH" CNI_IFNAME=eth0
expect_code "an invalid CNI_CONTAINERID" 4 "must start with a letter or digit"
plugin ADD "$CONF" "${ATT[@]}" CNI_ARGS='K8S_POD_NAME=x;garbage'
expect_code "a CNI_ARGS entry that is not KEY=VALUE" 4 "CNI_ARGS: 'garbage' is not KEY=VALUE"
assert_clean "bad environment"

# ---- 6: undecodable input --------------------------------------------------------
plugin ADD '{"cniVersion": "1.0.0", "name": ' "${ATT[@]}"
expect_code "malformed JSON" 6 "cannot decode the network configuration on stdin"
plugin ADD '' "${ATT[@]}"
expect_code "empty stdin" 6 "it is empty"
plugin ADD '[1, 2]' "${ATT[@]}"
expect_code "a JSON array instead of an object" 6 "expected a JSON object"
plugin ADD "$CONF trailing" "${ATT[@]}"
expect_code "data after the JSON object" 6 "data after the JSON object"
assert_clean "undecodable input"

# ---- 1: versions ------------------------------------------------------------------
plugin ADD "$(conf 9.9.9)" "${ATT[@]}"
expect_code "an unknown cniVersion" 1 "incompatible CNI version 9.9.9"
check "  the error carries the configuration's cniVersion" outjson "j['cniVersion'] == '9.9.9'"
plugin ADD '{"cniVersions":["7.0.0","8.0.0"],"name":"fibril","type":"fibril-cni"}' "${ATT[@]}"
expect_code "cniVersions with no supported version" 1 "none of the versions in cniVersions is supported"
plugin CHECK "$(conf 0.3.1 '"prevResult":{}')" "${ATT[@]}"
expect_code "CHECK with cniVersion 0.3.1" 1 "CHECK needs cniVersion 0.4.0 or later"
plugin CHECK "{\"cniVersions\":[\"0.3.0\",\"0.3.1\",\"5.0.0\"],\"name\":\"fibril\",\"type\":\"fibril-cni\",\"agent-socket\":\"$SOCK\"}" "${ATT[@]}"
expect_code "cniVersions negotiates the highest supported (0.3.1: no CHECK)" 1 "the configuration has 0.3.1"
plugin GC "$(conf 1.0.0 '"cni.dev/valid-attachments":[]')"
expect_code "GC with cniVersion 1.0.0" 1 "GC needs cniVersion 1.1.0 or later"
plugin STATUS "$(conf 1.0.0)"
expect_code "STATUS with cniVersion 1.0.0" 1 "STATUS needs cniVersion 1.1.0 or later"
assert_clean "incompatible versions"

# ---- 7: invalid configuration, naming the field -------------------------------
for bad in 'mtu|"mtu":"1500"' 'mtu|"mtu":20' 'ipam-family|"ipam-family":"ipv5"' \
	'agent-socket|"agent-socket":"relative.sock"' 'dns.nameservers|"dns":{"nameservers":["not-an-ip"]}' \
	'dns|"dns":"8.8.8.8"' 'mtu|"ipam-family":"ipv6","mtu":1000' 'prevResult|"prevResult":[]'; do
	field=${bad%%|*}
	plugin ADD "{\"cniVersion\":\"1.0.0\",\"name\":\"fibril\",\"type\":\"fibril-cni\",${bad#*|}}" "${ATT[@]}"
	expect_code "invalid ${bad#*|}" 7 "\"details\":\"$field\""
done
plugin ADD '{"cniVersion":"1.0.0","type":"fibril-cni"}' "${ATT[@]}"
expect_code "no name" 7 '"msg":"invalid network configuration: name: is required","details":"name"'
plugin ADD '{"cniVersion":"1.0.0","name":"bad name!","type":"fibril-cni"}' "${ATT[@]}"
expect_code "an invalid name" 7 '"details":"name"'
plugin ADD '{"name":"fibril","type":"fibril-cni"}' "${ATT[@]}"
expect_code "no cniVersion" 7 '"details":"cniVersion"'
plugin CHECK "$CONF" "${ATT[@]}"
expect_code "CHECK without prevResult" 7 '"details":"prevResult"'
plugin GC "$(conf 1.1.0)"
expect_code "GC without cni.dev/valid-attachments" 7 '"details":"cni.dev/valid-attachments"'
assert_clean "invalid configuration"

# ---- 3: the namespace is not there ---------------------------------------------
plugin ADD "$CONF" CNI_CONTAINERID=c-err-1 CNI_NETNS=/var/run/netns/fcni-none-$$ CNI_IFNAME=eth0
expect_code "ADD into a namespace that does not exist" 3 "cannot open the network namespace"
assert_clean "missing namespace"

# ---- 101: the interface already exists in the pod ---------------------------
ip -n "$POD" link add eth0 type veth peer name eth0peer
BEFORE=$(pod_snapshot "$POD")
plugin ADD "$CONF" "${ATT[@]}"
expect_code "CNI_IFNAME already in the pod" 101 "interface eth0 already exists in the network namespace $POD_PATH"
assert_clean "CNI_IFNAME already in the pod"
ip -n "$POD" link del eth0
BEFORE=$(pod_snapshot "$POD")

# ---- an ADD killed half-way and retried without a DEL converges -------------------
# lxc<hash> the way fibril-cni names the host end (FNV-1a 64 of CID/IFNAME, folded)
host_end() { python3 -c 'import sys
h = 0xcbf29ce484222325
for c in (sys.argv[1] + "/" + sys.argv[2]).encode():
    h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
print("lxc%012x" % ((h ^ (h >> 48)) & 0xffffffffffff))' "$1" "$2"; }
# the state an ADD killed after the rename leaves: the pair, eth0 in the pod
ip -n "$NODE_NS" link add "$(host_end c-err-1 eth0)" type veth peer name eth0 netns "$POD"
plugin ADD "$CONF" "${ATT[@]}"
check "a retried ADD removes its own leftover veth (eth0 in the pod): not 101 ($PCODE)" \
	test "$PCODE" = 102 # refused at the last step: no endpoint module here
assert_clean "a retried ADD over its own leftover"
# an eth0 that is not ours (its peer is not our lxc<hash>) is still refused
ip -n "$POD" link add eth0 type veth peer name notours
BEFORE=$(pod_snapshot "$POD")
plugin ADD "$CONF" "${ATT[@]}"
expect_code "an eth0 that is not the plugin's own is left alone" 101 "interface eth0 already exists"
ip -n "$POD" link del eth0
BEFORE=$(pod_snapshot "$POD")
# real kill points: ADD killed after 0..45 ms, retried at once without a DEL
conv=0
for ms in 0 5 10 15 20 25 30 35 40 45; do
	printf '%s' "$CONF" | ip netns exec "$NODE_NS" env -i PATH="$PATH" CNI_COMMAND=ADD \
		CNI_CONTAINERID=c-err-1 CNI_NETNS="$POD_PATH" CNI_IFNAME=eth0 "$CNI_PLUGIN" \
		>/dev/null 2>&1 &
	kpid=$!
	sleep "0.0$(printf '%02d' "$ms")" # sleep: the kill point, ms after the ADD started
	kill -KILL "$kpid" 2>/dev/null || true
	wait "$kpid" 2>/dev/null || true
	plugin ADD "$CONF" "${ATT[@]}"
	[ "$PCODE" = 102 ] && conv=$((conv + 1)) || echo "  kill after $ms ms: the retry gave $PCODE: $(out)"
	# what a killed ADD took from IPAM is released by the retry's rollback
done
check "ADD killed at 10 points, each retried without a DEL: no 101 ($conv/10 reached the last step)" test "$conv" = 10
assert_clean "ADDs killed and retried"

# ---- 101: a second interface of the same network in one pod is refused -----------
# eth0 attached the way fibril-cni does it (host end lxc<hash(c-err-1/eth0)>)
EH=$(host_end c-err-1 eth0)
ip -n "$NODE_NS" link add "$EH" type veth peer name eth0 netns "$POD"
BEFORE=$(pod_snapshot "$POD")
LINKS_BEFORE=$(node_lxc_links)
NET1=(CNI_CONTAINERID=c-err-1 CNI_NETNS="$POD_PATH" CNI_IFNAME=net1)
plugin ADD "$CONF" "${NET1[@]}"
expect_code "net1 after eth0 of the same network" 101 \
	"container c-err-1 already has an interface of network fibril (eth0); a second interface of the same network is not supported"
check "net1 refused: no IPAM allocation" test -z "$(ipam_allocations)"
check "net1 refused: no extra link in the node" test "$(node_lxc_links)" = "$LINKS_BEFORE"
check "net1 refused: the pod namespace is unchanged" test "$(pod_snapshot "$POD")" = "$BEFORE"
plugin DEL "$CONF" "${NET1[@]}"
check "DEL of the refused net1 succeeds" test "$PRC:$(out)" = "0:"
check "eth0's veth pair is intact after net1's ADD and DEL" \
	test -n "$(ip -n "$NODE_NS" -o link show "$EH" 2>/dev/null)" -a -n "$(ip -n "$POD" -o link show eth0 2>/dev/null)"
plugin ADD "$CONF" CNI_CONTAINERID=c-err-2 CNI_NETNS="$POD_PATH" CNI_IFNAME=net1
check "another container's net1 in that netns is not refused as a second interface ($PCODE)" \
	test "$PCODE" = 102 # refused at the last step: no endpoint module here
ip -n "$NODE_NS" link del "$EH"
BEFORE=$(pod_snapshot "$POD")
assert_clean "a second interface refused"

# ---- 7: runtimeConfig.bandwidth.egressRate (the datapath owns the clsact) ------
plugin ADD "$(conf 1.0.0 '"capabilities":{"bandwidth":true},"runtimeConfig":{"bandwidth":{"egressRate":1000000,"egressBurst":100000}}')" "${ATT[@]}"
expect_code "ADD with runtimeConfig.bandwidth.egressRate" 7 '"details":"runtimeConfig.bandwidth.egressRate"'
check "  the message names egressRate and says why" contains "$(out)" "does not support an egress rate limit"
assert_clean "egressRate refused"
plugin DEL "$(conf 1.0.0 '"runtimeConfig":{"bandwidth":{"egressRate":1000000}}')" "${ATT[@]}"
check "DEL with runtimeConfig.bandwidth.egressRate succeeds" test "$PRC" = 0
for bw in '"ingressRate":1000000,"ingressBurst":100000' '"ingressRate":1000000,"egressRate":0'; do
	plugin ADD "$(conf 1.0.0 "\"runtimeConfig\":{\"bandwidth\":{$bw}}")" "${ATT[@]}"
	check "ADD with runtimeConfig.bandwidth {$bw} passes the plugin's checks ($PCODE)" test "$PCODE" = 102
	assert_clean "bandwidth {$bw}"
done

# ---- 102: the endpoint PUT is refused (no endpoint module): full rollback ----
for v in 0.3.1 1.0.0 1.1.0; do
	plugin ADD "$(conf "$v" '"mtu":1400')" "${ATT[@]}" CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1"
	expect_code "ADD ($v) whose endpoint the agent refuses" 102 "the agent refused the endpoint c-err-1/eth0"
	assert_clean "ADD ($v) refused at the last step"
done

# ---- 11: the agent is down -------------------------------------------------------
DOWN=$(printf '{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"%s"}' "$WORK/down.sock")
plugin ADD "$DOWN" "${ATT[@]}"
expect_code "ADD with the agent down" 11 "the agent is not reachable at $WORK/down.sock"
assert_clean "ADD with the agent down"
plugin DEL "$DOWN" "${ATT[@]}"
expect_code "DEL with the agent down (the runtime retries)" 11 "not reachable"
plugin STATUS "$(printf '{"cniVersion":"1.1.0","name":"fibril","type":"fibril-cni","agent-socket":"%s"}' "$WORK/down.sock")"
expect_code "STATUS with the agent down" 50 "not reachable"

# ---- 11: an agent that closes the connection without answering (died mid-request) --
python3 - "$WORK/closing.sock" >"$WORK/closing.out" 2>&1 <<'EOF' &
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(16); print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.recv(65536)   # the request, then hang up without a word
    c.close()
EOF
CLOSER_PID=$!
wait_alive "$CLOSER_PID" 5 test -S "$WORK/closing.sock" || true
CLOSING=$(printf '{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"%s"}' "$WORK/closing.sock")
plugin ADD "$CLOSING" "${ATT[@]}"
expect_code "ADD: the agent hangs up without answering (try again later)" 11 "closed the connection without answering"
assert_clean "ADD to an agent that hangs up"
plugin DEL "$CLOSING" "${ATT[@]}"
expect_code "DEL: the agent hangs up without answering" 11 "closed the connection without answering"
kill "$CLOSER_PID" 2>/dev/null || true

# ---- 3: CNI_NETNS is a regular file ---------------------------------------------
: >"$WORK/not-a-netns"
plugin ADD "$CONF" CNI_CONTAINERID=c-err-1 CNI_NETNS="$WORK/not-a-netns" CNI_IFNAME=eth0
expect_code "ADD with CNI_NETNS a regular file" 3 "$WORK/not-a-netns is not a network namespace"
assert_clean "CNI_NETNS a regular file"
plugin DEL "$CONF" CNI_CONTAINERID=c-err-1 CNI_NETNS="$WORK/not-a-netns" CNI_IFNAME=eth0
check "DEL with CNI_NETNS a regular file succeeds" test "$PRC" = 0

# ---- errors found before the configuration is parsed carry its cniVersion ------
plugin ADD "$(conf 0.4.0)" CNI_NETNS="$POD_PATH" CNI_IFNAME=eth0
expect_code "ADD without CNI_CONTAINERID (config 0.4.0)" 4 '"details":"CNI_CONTAINERID"'
check "  the error carries the configuration's cniVersion 0.4.0" outjson "j['cniVersion'] == '0.4.0'"
plugin FROB "$(conf 0.3.1)" "${ATT[@]}"
check "an unknown CNI_COMMAND: the error carries cniVersion 0.3.1" outjson "j['cniVersion'] == '0.3.1' and j['code'] == 4"

# ---- container IDs: one limit with the endpoint module (127 bytes) ----------------
long_id() { python3 -c 'import sys; print(("c" + "0123456789abcdef" * 20)[:int(sys.argv[1])])' "$1"; }
plugin ADD "$CONF" CNI_CONTAINERID="$(long_id 128)" CNI_NETNS="$POD_PATH" CNI_IFNAME=eth0
expect_code "ADD with a 128-character container ID" 4 "CNI_CONTAINERID is 128 characters long, at most 127 are supported"
assert_clean "a container ID past the limit"
plugin ADD "$CONF" CNI_CONTAINERID="$(long_id 127)" CNI_NETNS="$POD_PATH" CNI_IFNAME=eth0
check "ADD with a 127-character container ID passes the plugin's checks (refused later: no endpoint module)" \
	test "$PCODE" = 102
assert_clean "a container ID at the limit, refused by the agent"
for n in 128 200 300; do
	plugin DEL "$CONF" CNI_CONTAINERID="$(long_id "$n")" CNI_NETNS="$POD_PATH" CNI_IFNAME=eth0
	check "DEL with a $n-character container ID succeeds" test "$PRC:$(out)" = "0:"
done

# ---- DEL of what was never added ---------------------------------------------------
plugin DEL "$CONF" "${ATT[@]}"
check "DEL of an attachment never added succeeds" test "$PRC:$(out)" = "0:"
plugin DEL "$CONF" "${ATT[@]}"
check "  and again" test "$PRC" = 0
plugin DEL "$CONF" CNI_CONTAINERID=c-err-1 CNI_IFNAME=eth0
check "DEL without CNI_NETNS succeeds" test "$PRC" = 0
plugin DEL "$CONF" CNI_CONTAINERID=c-err-1 CNI_NETNS=/var/run/netns/fcni-gone-$$ CNI_IFNAME=eth0
check "DEL with a namespace already gone succeeds" test "$PRC" = 0
plugin DEL "$(conf 0.3.0)" "${ATT[@]}"
check "DEL with cniVersion 0.3.0 succeeds" test "$PRC" = 0
assert_clean "DELs"

# ---- STATUS --------------------------------------------------------------------------
plugin STATUS "$(conf 1.1.0)"
check "STATUS with a pool that has room: 0, no output" test "$PRC:$(out)" = "0:"
for i in $(seq 1 13); do api -X POST -o /dev/null "http://x/v1/ipam?family=ipv4&owner=fill$i/eth0"; done
plugin STATUS "$(conf 1.1.0)"
expect_code "STATUS with a full pool" 50 "every IPAM pool is full: 10.244.7.0/28"
for i in $(seq 1 13); do api -X DELETE -o /dev/null "http://x/v1/ipam?owner=fill$i/eth0"; done
plugin STATUS "$(conf 1.1.0)"
check "STATUS once addresses are free again: 0" test "$PRC" = 0

# ---- GC (IPAM owners and host veths; endpoints need the endpoint module) --------
api -X POST -o /dev/null 'http://x/v1/ipam?family=ipv4&owner=gc-keep/eth0'
api -X POST -o /dev/null 'http://x/v1/ipam?family=ipv4&owner=gc-stale/eth0'
api -X POST -o /dev/null 'http://x/v1/ipam?family=ipv4&owner=not-a-cni-owner'
# A stale host veth named the way fibril-cni names them (lxc + 12 hex
# digits) goes; a link of another shape stays.
ip -n "$NODE_NS" link add lxc0123456789ab type veth peer name gcpeer0
ip -n "$NODE_NS" link add lxcfoo type veth peer name gcpeer1
plugin GC "$(conf 1.1.0 '"cni.dev/valid-attachments":[{"containerID":"gc-keep","ifname":"eth0"}]')"
check "GC succeeds" test "$PRC:$(out)" = "0:"
allocs=$(ipam_allocations | awk '{print $1}' | sort | tr '\n' ' ')
check "GC released the stale owner and kept the valid one and the non-CNI owner" \
	test "$allocs" = "gc-keep/eth0 not-a-cni-owner "
check "GC deleted the stale lxc<hash> veth" test -z "$(ip -n "$NODE_NS" -o link show lxc0123456789ab 2>/dev/null)"
check "GC left a link that is not fibril's (lxcfoo)" test -n "$(ip -n "$NODE_NS" -o link show lxcfoo 2>/dev/null)"
ip -n "$NODE_NS" link del lxcfoo
plugin GC "$(conf 1.1.0 '"cni.dev/valid-attachments":[]')"
check "GC with an empty list releases every CNI owner" test "$PRC:$(ipam_allocations | awk '{print $1}')" = "0:not-a-cni-owner"
api -X DELETE -o /dev/null 'http://x/v1/ipam?owner=not-a-cni-owner'
plugin GC "$(conf 1.1.0 '"cni.dev/valid-attachments":[{"containerID":"x"}]')"
expect_code "GC with an attachment without ifname" 7 "cni.dev/valid-attachments[0]"

# ---- the agent stopped -----------------------------------------------------------------
stop_agent TERM
plugin ADD "$CONF" "${ATT[@]}"
expect_code "ADD after the agent stopped" 11 "not reachable"
check "  leaves no link in the node" test -z "$(node_lxc_links)"

finish
