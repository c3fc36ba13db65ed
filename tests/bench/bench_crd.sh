#!/usr/bin/env bash
# tests/bench/bench_crd.sh - CRD mode's identity figures (run by
# tests/bench/run.sh, or by hand as root with top_srcdir and top_builddir
# set): one agent with [endpoint] identity-allocation = crd against the test
# API server (tests/k8s/apiserver.py, in a namespace of its own), NEWIDS
# endpoints of new label sets added one after the other:
#   - identity allocation for a new label set, p50/p99 of the times the
#     agent logs ("identity N allocated ... (cluster-wide, in X ms)": from
#     the request to the identity held), beside the same create sent
#     straight to the server by a keep-alive client (the floor a write costs);
#     goal p50/p99 < 5 ms;
#   - API requests per new label set (the server's request count), beside
#     the one a create costs.
# The kvstore mode's figure is bench_cluster.sh's part 2 (etcd).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"

NEWIDS=${NEWIDS:-100}
[ "$(id -u)" = 0 ] || { echo "bench_crd: run as root" >&2; exit 1; }
mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
for m in k8s ipam-cluster-pool endpoint; do
	install -m 0644 "$top_builddir/.libs/$m.so" "$mods/$m.so" || exit 1
done
PODNS=crdb-$$
ip netns add "$PODNS"
ip -n "$PODNS" link set lo up
trap 'rc=$?; set +e; ip netns del "$PODNS" 2>/dev/null; cleanup "$rc"' EXIT INT TERM
K8S_NETNS=$PODNS
k8s_start --bookmark-interval 1 >/dev/null || exit 1
d=$WORK/n1
mkdir -p "$d" "$BPFFS_DIR"
ip netns exec "$PODNS" "$AGENT" --set "agent.module-dir=$mods" --set "agent.socket=$d/fibril.sock" \
	--set "agent.state-dir=$d/state" --set "agent.run-dir=$d/run" --set "agent.bpffs-dir=$BPFFS_DIR" \
	--set agent.node-name=n1 --set "k8s.kubeconfig=$K8S_KUBECONFIG" --set k8s.node-name=n1 \
	--set ipam-cluster-pool.node-cidr=10.89.0.0/20 --set endpoint.identity-allocation=crd \
	>"$d/agent.log" 2>&1 &
wait_alive $! 30 test -S "$d/fibril.sock" || { tail "$d/agent.log"; exit 1; }
# pct P < numbers -> the P-th percentile
pct() { sort -g | awk -v p="$1" '{ v[NR] = $1 } END { i = int(NR * p / 100 + 0.5); if (i < 1) i = 1; if (i > NR) i = NR; printf "%.2f", v[i] }'; }
requests() { k8s_ctl stats | python3 -c 'import json, sys; print(json.load(sys.stdin)["requests"])'; }

before=$(requests)
for i in $(seq 1 "$NEWIDS"); do
	cid=$(printf 'b%063d' "$i")
	ip -n "$PODNS" link add "b$i" type veth peer name "q$i"
	ifindex=$(ip netns exec "$PODNS" cat "/sys/class/net/b$i/ifindex")
	curl -sS --max-time 15 --unix-socket "$d/fibril.sock" -o /dev/null -X PUT \
		-H 'Content-Type: application/json' "http://x/v1/endpoint/container-id:$cid:eth0" \
		--data-binary "{\"container-id\":\"$cid\",\"ifname\":\"eth0\",\"netns\":\"/run/netns/$PODNS\",
\"host-ifname\":\"b$i\",\"host-ifindex\":$ifindex,\"mac\":\"02:00:00:00:00:01\",\"host-mac\":\"02:00:00:00:00:02\",
\"ipv4\":\"10.89.$((i / 200)).$((10 + i % 200))\",\"pod-namespace\":\"default\",\"pod-name\":\"p$i\",
\"labels\":[\"k8s:app=bench$i\"]}"
done
after=$(requests)
sed -n 's/.*identity [0-9]* allocated for labels k8s:app=bench[0-9]*,.* (cluster-wide, in \([0-9.]*\) ms).*/\1/p' \
	"$d/agent.log" >"$WORK/alloc"
got=$(wc -l <"$WORK/alloc")
# the floor: the same create straight to the server, one keep-alive connection
ip netns exec "$PODNS" python3 - "$K8S_PORT" "$K8S_TOKEN" "$K8S_CA" "$NEWIDS" >"$WORK/direct" <<'PY'
import http.client, json, ssl, sys, time
port, token, ca, n = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
c = http.client.HTTPSConnection("127.0.0.1", port, context=ssl.create_default_context(cafile=ca))
for i in range(n):
    body = json.dumps({"apiVersion": "cilium.io/v2", "kind": "CiliumIdentity",
                       "metadata": {"name": str(100000 + i)}, "security-labels": {"k8s:app": f"d{i}"}})
    t = time.monotonic()
    c.request("POST", "/apis/cilium.io/v2/ciliumidentities", body,
              {"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    print("%.3f" % ((time.monotonic() - t) * 1000))
PY
echo "CRD mode: identity allocation for a new label set ($got of $NEWIDS allocations logged; one agent, test API server; loaded machine)"
printf '   %-52s %10s %10s\n' "" "p50 ms" "p99 ms"
p99=$(pct 99 <"$WORK/alloc")
printf '   %-52s %10s %10s\n' "PUT of new labels -> identity held (agent's log)" "$(pct 50 <"$WORK/alloc")" "$p99"
printf '   %-52s %10s %10s\n' "reference: the create straight to the server" "$(pct 50 <"$WORK/direct")" "$(pct 99 <"$WORK/direct")"
printf '   goal p99 < 5 ms: %s\n' "$(awk -v v="$p99" 'BEGIN { print (v < 5 ? "met" : "NOT met") }')"
printf '   API requests per new label set: %s (reference: 1, the create; the agent'"'"'s watch is included)\n' \
	"$(awk -v a="$after" -v b="$before" -v n="$NEWIDS" 'BEGIN { printf "%.2f", (a - b) / n }')"
