#!/usr/bin/env bash
# tests/security/masq_spoofed_reply.sh - the attack: a host outside the
# cluster (the "world", on the node's underlay) learns a pod's live
# masquerade mapping (the node's address and the port the flow left with)
# and sends packets at it that are not the flow's replies: UDP, TCP SYNs and
# ACKs from the flow's destination address with another source port, from
# another address with the flow's port and with another port; and sweeps
# 200 ports of the masquerade range (61000-65535) from the flow's own
# destination address and port.
# The promise: fibril_from_netdev translates back only the exact reply
# tuple of a live mapping (dp_nat's IN entry: remote address, remote port,
# node address, node port, protocol); nothing else reaches the pod, while
# the genuine reply does.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 1 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import scapy' 2>/dev/null ||
	skip_or_fail "Debian's python3-scapy is not installed"
WORLD=$MN_UNDERLAY_PREFIX.200
OTHER=$MN_UNDERLAY_PREFIX.201
mn_world_add world "$WORLD" "$OTHER"
WORLD_NS=$(mn_ns world)
PORT=$((20000 + RANDOM % 20000))
spoof_py=("/usr/bin/python3" "$top_srcdir/tests/security/masq_spoof.py")

mn_agent_start n1 "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.204.0.0/16 \
	--set nodes.retry=300ms || { fail "the agent of n1 starts"; finish; }
mn_pod_add n1 pa || { fail "pod pa"; finish; }
NODE_IP=${MN_IP[n1]}

mn_bg "$WORLD_NS" "${spoof_py[@]}" world "$WORLD" "$PORT" "$WORK/mapping"
WPID=$MN_BG_PID
# the pod sends one datagram: the world's socket must be bound first
check "the world's UDP server listens" wait_for 10 test -e "$WORK/mapping.ready"
mn_bg "$(mn_pod_ns pa)" "${spoof_py[@]}" pod "$WORLD" "$PORT" 15 "$WORK/pod.out"
PPID_POD=$MN_BG_PID
check "the pod's datagram reaches the world through masquerading" wait_for 10 test -s "$WORK/mapping"
read -r seen_addr NATPORT <"$WORK/mapping" || true
check "  seen from the node's address $NODE_IP, port ${NATPORT:-?} in 61000-65535" \
	test "$seen_addr" = "$NODE_IP" -a "${NATPORT:-0}" -ge 61000 -a "${NATPORT:-0}" -le 65535
wait "$WPID" # the genuine reply has gone out
sent=$(ip netns exec "$WORLD_NS" "${spoof_py[@]}" attack "$NODE_IP" "${NATPORT:-61000}" "$WORLD" "$PORT" \
	"$OTHER" 61000 65535 eth0 2>&1) || fail "the attack packets are sent: $sent"
echo "  sent $sent packets at the mapping ${NODE_IP}:${NATPORT:-?} and the port range"
wait "$PPID_POD" || true
out=$(cat "$WORK/pod.out" 2>/dev/null)
echo "  pod: $out"
check "the genuine reply (from $WORLD:$PORT) reached the pod" grep -q 'legit=[1-9]' <<<"$out"
check "no spoofed reply or unsolicited packet reached the pod" grep -q 'spoof=0 ' <<<"$out"
rev=$(mn_json n1 /v1/datapath "j['packets-from-netdev'].get('masquerade-reply', 0)")
check "fibril_from_netdev translated the genuine reply alone (masquerade-reply: $rev)" test "$rev" = 1
finish
