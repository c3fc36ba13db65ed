#!/usr/bin/env bash
# tests/integration/policy.sh - network policy end to end: an agent with
# ipam, endpoint, datapath and policy in a node namespace, three pods added
# through fibril-cni and labelled app=a/b/c through the endpoint API, TCP
# servers on ports 80 and 81 in each. A CiliumNetworkPolicy imported with
# `fibril policy import` makes pod a default-deny ingress with an allow
# from app=b on TCP 80: b connects, b on 81 and c are dropped (counted as
# drop:policy-denied), a's own connections out still get their replies
# through its deny-all ingress (conntrack); relabelling c to app=b lets it
# in; an ingressDeny overrides the allow; a policy with an L7 rule is
# refused naming the field and changes nothing; after kill -9 enforcement
# goes on and the restarted agent (policies from its state file) has the
# same map entries; deleting the policies restores connectivity. Also
# `fibril policy trace` (which rule allows, default deny), `fibril policy
# selectors` and the policy rows of `fibril endpoint get`. With hubble-lite
# loaded, the flows name the rule that decided: an allowed connection's
# policy verdict names a-from-b's ingress[0], a drop of an unselected peer
# is a default deny, a drop of the ingressDeny names a-deny-b's
# ingressDeny[0] (in GET /v1/flows and `fibril observe`), `policy trace`
# names the same rules, and the rule IDs in the map survive the restart
# (every entry names its rule but allow-localhost's host entry).
# fibril_policy_verdicts_total counts the allowed verdict, the default
# denies and the ingressDeny drop by match and action.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"

cni_prereqs ipam-api ipam-cluster-pool endpoint datapath policy hubble-lite
command -v python3 >/dev/null || skip_or_fail "python3 is not installed"
cni_modules "$WORK/mods" ipam-api ipam-cluster-pool endpoint datapath policy hubble-lite
netns_add "$NODE_NS"
start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.9.0/24 ||
	{ fail "the agent starts"; finish; }
SOCK=$WORK/fibril.sock
fib() { "$CLI" --socket "$SOCK" "$@"; }

SERVERS=()
cni_test_cleanup() {
	local p
	for p in "${SERVERS[@]}"; do kill -KILL "$p" 2>/dev/null; done
}

CONF='{"cniVersion":"1.0.0","name":"fibril","type":"fibril-cni","agent-socket":"'$SOCK'"}'
declare -A ADDR NS
for pod in a b c; do
	NS[$pod]="fpol-$$-$pod"
	netns_add "${NS[$pod]}"
	plugin ADD "$CONF" CNI_CONTAINERID="fpol$$$pod" CNI_NETNS="/var/run/netns/${NS[$pod]}" \
		CNI_IFNAME=eth0 CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=$pod"
	[ "$PRC" = 0 ] || { fail "ADD pod $pod: $(out) $(cat "$WORK/err")"; finish; }
	ADDR[$pod]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ips"][0]["address"].split("/")[0])' "$WORK/out")
	code=$(api -o "$WORK/patch.out" -w '%{http_code}' -X PATCH -H 'Content-Type: application/json' \
		-d '{"labels":["k8s:app='"$pod"'"]}' "http://x/v1/endpoint/container-id:fpol$$$pod")
	check "pod $pod is labelled app=$pod" test "$code" = 200 || cat "$WORK/patch.out"
	for port in 80 81; do
		ip netns exec "${NS[$pod]}" python3 "$top_srcdir/tests/cni/nettest.py" serve "$port" \
			>/dev/null 2>&1 &
		SERVERS+=($!)
		disown $!
	done
done
for pod in a b c; do
	wait_listening "${NS[$pod]}" 80 && wait_listening "${NS[$pod]}" 81 ||
		fail "servers listen in pod $pod"
done

# tcp FROM TO PORT : "ok" when a TCP connection gets the server's answer
# (one attempt, 1 s timeout: a policy drop shows as a timeout)
tcp() {
	ip netns exec "${NS[$1]}" python3 -c '
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1) as s:
        s.settimeout(1)
        print("ok" if s.recv(3) == b"ok\n" else "bad")
except OSError:
    print("fail")' "${ADDR[$2]}" "$3"
}
expect() { # expect FROM TO PORT ok|fail
	local got
	got=$(tcp "$1" "$2" "$3")
	check "$1 -> $2:$3 is $4" test "$got" = "$4"
}
revision() { api http://x/v1/policy | python3 -c 'import json,sys; print(json.load(sys.stdin)["revision"])'; }
# flow_policy TYPE FROM TO PORT : the "policy" of the newest flow of that type
# from pod FROM to pod TO:PORT, as "match direction kind ns/name section[index]"
# (waits up to 3 s for the datapath's events to become flows)
flow_policy() {
	await_output 3 "" _flow_policy "$@" || true
}
_flow_policy() {
	local got
	got=$(api "http://x/v1/flows?type=$1&from-pod=default/$2&to-pod=default/$3&to-port=$4" | python3 -c '
import json, sys
flows = json.load(sys.stdin)["flows"]
if not flows:
    print("none"); sys.exit()
p = flows[-1].get("policy")
if not p:
    print("no-policy"); sys.exit()
print(p["match"], p["direction"], p.get("kind", "?"), p.get("namespace", "?") + "/" + p.get("name", "?"),
      "%s[%s]" % (p.get("section", "?"), p.get("rule_index", "?")))')
	echo "$got"
	[ "$got" != none ]
}
# verdicts MATCH ACTION : fibril_policy_verdicts_total{direction="ingress",...} in /metrics
verdicts() {
	api http://x/metrics | awk -v want="fibril_policy_verdicts_total{direction=\"ingress\",match=\"$1\",action=\"$2\"}" \
		'$1 == want {print $2 + 0; found = 1} END {if (!found) print 0}'
}
denied() { fib map dump dp_metrics | sed -n 's/.*policy-denied *packets=\([0-9]*\).*/\1/p' | awk '{s += $1} END {print s + 0}'; }

# ---- no policy: everything connects -------------------------------------------------------
expect b a 80 ok
expect c a 81 ok

# ---- default-deny ingress on a, allow app=b on TCP 80 ----------------------------------------
cat >"$WORK/allow.json" <<'EOF2'
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "a-from-b"},
 "spec": {"endpointSelector": {"matchLabels": {"app": "a"}},
          "ingress": [{"fromEndpoints": [{"matchLabels": {"app": "b"}}],
                       "toPorts": [{"ports": [{"port": "80", "protocol": "TCP"}]}]}]}}
EOF2
out=$(fib policy import "$WORK/allow.json" 2>&1)
check "policy import answers the revision" contains "$out" "Revision: 1"
before=$(denied)
expect b a 80 ok
expect b a 81 fail
expect c a 80 fail
check "the drops are counted as drop:policy-denied" test "$(denied)" -gt "$before"
expect a b 80 ok  # its reply passes a's deny-all-but-b ingress
expect a c 81 ok
expect c b 80 ok  # b is not selected: open
got=$(flow_policy policy-verdict b a 80)
check "flows: b -> a:80's policy verdict names a-from-b's ingress[0] ($got)" \
	test "$got" = "allow ingress CiliumNetworkPolicy /a-from-b ingress[0]"
got=$(flow_policy drop c a 80)
check "flows: c -> a:80's drop is a default deny of a's ingress ($got)" \
	test "$got" = "default-deny ingress ? ?/? ?[?]"
got=$(flow_policy drop b a 81)
check "flows: b -> a:81's drop is a default deny too ($got)" test "$got" = "default-deny ingress ? ?/? ?[?]"
got=$(flow_policy policy-verdict c b 80)
check "flows: c -> b (no policy selects b) has no policy verdict ($got)" test "$got" = none
check "metrics: the allowed b -> a:80 is counted as an ingress rule verdict, allowed ($(verdicts rule allowed))" \
	test "$(verdicts rule allowed)" -ge 1
check "metrics: the drops of c and b:81 as ingress default-deny, denied ($(verdicts default-deny denied))" \
	test "$(verdicts default-deny denied)" -ge 2
get=$(fib policy get)
check "policy get lists the policy and a's enforcement" \
	grep -Eq 'a-from-b.*1' <<<"$get"
check "policy get: one endpoint enforces ingress at revision 1" test "$(api http://x/v1/policy | python3 -c '
import json,sys
j = json.load(sys.stdin)
print(sum(1 for e in j["endpoints"] if e["ingress"] == "enforced" and e["egress"] == "open" and e["revision"] == 1))')" = 1

# ---- trace, selectors, endpoint get ---------------------------------------------------------------
has() { grep -Eq -- "$2" <<<"$1"; }
trc=0; out=$(fib policy trace --src "${ADDR[b]}" --dst "${ADDR[a]}" --dport 80/tcp 2>&1) || trc=$?
check "policy trace: ALLOWED exits 0 ($trc)" test "$trc" = 0
ok=no
has "$out" "Final verdict: ALLOWED" && has "$out" "allowed by: CiliumNetworkPolicy a-from-b rule 0 ingress peer 0" && ok=yes
check "policy trace: b -> a:80 is allowed by a-from-b" test "$ok" = yes || echo "$out"
check "policy trace: b -> a:80 is decided by the rule the flows name" \
	has "$out" "decided by: allow CiliumNetworkPolicy a-from-b ingress\[0\] \(rule [0-9]+\)"
trc=0; out=$(fib policy trace --src "${ADDR[c]}" --dst "${ADDR[a]}" --dport 80/tcp 2>&1) || trc=$?
check "policy trace: DENIED exits 1, so scripts can branch ($trc)" test "$trc" = 1
trc=0; fib -o json policy trace --src "${ADDR[c]}" --dst "${ADDR[a]}" --dport 80/tcp >/dev/null 2>&1 || trc=$?
check "policy trace -o json: DENIED exits 1 too ($trc)" test "$trc" = 1
check "policy trace: c -> a:80 is denied (selected, no rule allows it)" \
	grep -q "no rule allows it (default deny)" <<<"$out"
check "policy trace: c -> a:80 is decided by the default deny" \
	grep -q "decided by: default deny" <<<"$out"
out=$(fib policy trace --src "${ADDR[a]}" --dst 198.51.100.1 --dport 53/udp 2>&1)
check "policy trace: a -> outside is allowed (a's egress is open)" \
	grep -q "Final verdict: ALLOWED" <<<"$out"
rc=0; out=$(fib policy trace --src nowhere/none --dst "${ADDR[a]}" --dport 80/tcp 2>&1) || rc=$?
check "policy trace: an unknown end is refused in one line" \
	test "$rc" = 1 -a "$(grep -c "src: 'nowhere/none' is no local endpoint" <<<"$out")" = 1
out=$(fib policy selectors 2>&1)
check "policy selectors: app=b with b's identity, used by a-from-b" \
	grep -Eq "^app=b +[0-9]+ +CiliumNetworkPolicy a-from-b" <<<"$out" || echo "$out"
out=$(fib endpoint get "container-id:fpol$$a" 2>&1)
ok=no
has "$out" "POLICY-INGRESS +enforced" && has "$out" "POLICY-EGRESS +open" &&
	has "$out" "POLICY-REVISION +1 \(repository: 1\)" && ok=yes
check "endpoint get: a enforces ingress at revision 1" test "$ok" = yes || echo "$out"

# ---- relabel c to app=b: it is let in ------------------------------------------------------------
# stats: "endpoint_resolutions recomputes incremental_updates" (the selector cache's figures)
stats() { api http://x/v1/policy | python3 -c '
import json,sys
s = json.load(sys.stdin)["stats"]
print(s["endpoint_resolutions"], s["recomputes"], s["incremental_updates"])'; }
read -r res0 full0 inc0 <<<"$(stats)"
api -o /dev/null -X PATCH -H 'Content-Type: application/json' -d '{"labels":["k8s:app=b"]}' \
	"http://x/v1/endpoint/container-id:fpol$$c"
expect c a 80 ok
read -r res1 full1 inc1 <<<"$(stats)"
# c takes b's identity (same labels): the selector app=b gains no identity, so
# only c itself is resolved again (a's entries allow that identity already)
check "relabelling c resolves only c again, incrementally (resolutions $res0 -> $res1)" \
	test "$((res1 - res0))" = 1 -a "$full1" = "$full0" -a "$inc1" -gt "$inc0"

# ---- a deny overrides the allow --------------------------------------------------------------------
cat >"$WORK/deny.json" <<'EOF2'
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "a-deny-b"},
 "spec": {"endpointSelector": {"matchLabels": {"app": "a"}},
          "ingressDeny": [{"fromEndpoints": [{"matchExpressions": [{"key": "app", "operator": "In", "values": ["b"]}]}],
                           "toPorts": [{"ports": [{"port": "80", "endPort": 81, "protocol": "TCP"}]}]}]}}
EOF2
fib policy import "$WORK/deny.json" >/dev/null
expect b a 80 fail
check "the revision went to 2" test "$(revision)" = 2
got=$(flow_policy drop b a 80)
check "metrics: the ingressDeny drop is counted as deny-rule, denied ($(verdicts deny-rule denied))" \
	test "$(verdicts deny-rule denied)" -ge 1
check "flows: b -> a:80's drop names the ingressDeny rule of a-deny-b ($got)" \
	test "$got" = "deny ingress CiliumNetworkPolicy /a-deny-b ingressDeny[0]"
out=$(fib observe --from-pod default/b --to-pod default/a --type drop 2>&1)
check "observe: the drop's summary names the denying rule" \
	grep -Eq "policy: deny \(ingress\) by CiliumNetworkPolicy a-deny-b ingressDeny\[0\] \(rule [0-9]+\)" <<<"$out" ||
	echo "$out" | tail -3
out=$(fib observe -o table --from-pod default/c --to-pod default/a --type drop 2>&1)
check "observe -o table: the default deny is named as such" \
	grep -q "policy: default deny (ingress: no rule allows it)" <<<"$out" || echo "$out" | tail -3
out=$(fib policy trace --src "${ADDR[b]}" --dst "${ADDR[a]}" --dport 80/tcp 2>&1) || true
check "policy trace: b -> a:80 is decided by the ingressDeny rule the flow names" \
	has "$out" "decided by: deny CiliumNetworkPolicy a-deny-b ingressDeny\[0\] \(rule [0-9]+\)" || echo "$out"
read -r res2 full2 inc2 <<<"$(stats)"
check "a policy selecting a resolves only a again (resolutions $res1 -> $res2, full recomputes $full1 -> $full2)" \
	test "$((res2 - res1))" = 1 -a "$full2" = "$full1" -a "$((inc2 - inc1))" = 1
check "every endpoint reports the new revision" test "$(api http://x/v1/policy | python3 -c '
import json,sys
print(sum(1 for e in json.load(sys.stdin)["endpoints"] if e["revision"] != 2))')" = 0
out=$(fib policy selectors 2>&1)
check "policy selectors: one cache entry app=b (matchLabels and In [b]) for both policies, with the one identity of b and c" \
	test "$(api http://x/v1/policy/selectors | python3 -c '
import json,sys
s = [x for x in json.load(sys.stdin)["selectors"] if x["selector"] == "app=b"]
print(len(s), len(s[0]["identities"]) if s else -1, sorted(s[0]["users"]) if s else [])')" = "1 1 ['CiliumNetworkPolicy a-deny-b', 'CiliumNetworkPolicy a-from-b']" || echo "$out"

# ---- an L7 rule is refused, naming the field; nothing changes --------------------------------------
cat >"$WORK/l7.json" <<'EOF2'
{"metadata": {"name": "l7"},
 "spec": {"endpointSelector": {},
          "ingress": [{"toPorts": [{"ports": [{"port": "80", "protocol": "TCP"}],
                                    "rules": {"http": [{"method": "GET"}]}}]}]}}
EOF2
rc=0
out=$(fib policy import "$WORK/l7.json" 2>&1) || rc=$?
check "an L7 rule is refused with the field's path" \
	test "$rc" = 1 -a -n "$(grep -F "policy 'l7': spec.ingress[0].toPorts[0]: field 'rules' is not supported" <<<"$out")" ||
	echo "  got: $out"
check "the refused policy changed nothing" test "$(revision)" = 2
expect c b 81 ok

# ---- kill -9: enforcement goes on; a restart restores the same entries -------------------------------
entries() { fib map dump dp_policy | sed -n 's/^\(endpoint=.*[^ ]\)  *\(allow\|deny\) hits=.*/\1 \2/p' | sort; }
rule_entries() { fib map dump dp_policy | sed -n 's/^\(endpoint=.*[^ ]\)  *\(allow\|deny\) hits=[0-9]* \(rule=[0-9]*\)$/\1 \2 \3/p' | sort; }
before_entries=$(entries)
before_rules=$(rule_entries)
check "the map holds the policies' entries" test -n "$before_entries"
check "every entry names its rule (no rule=0), but allow-localhost's (the host, any port)" \
	test -n "$before_rules" -a "$(grep -v 'ingress identity=1 any allow rule=0$' <<<"$before_rules" |
		grep -c 'rule=0$')" = 0
check "a's enforced ingress has the allow-localhost entry (the node's traffic, rule 0)" \
	grep -q '^endpoint=[0-9]* ingress identity=1 any allow rule=0$' <<<"$before_rules"
kill -KILL "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
expect b a 80 fail  # while the agent is down
# the map as an agent before rule IDs left it: each value's rule ID (its
# former padding, bytes 4..7) back to 0; the restarted agent adopts the map
# (same value size) and writes the rules back
zero_rules() { python3 - "$BPFFS_DIR/dp_policy" "$1" <<'PY'
import json, subprocess, sys
pin, write = sys.argv[1], sys.argv[2] == "zero"
hx = lambda v: [x[2:] if x.startswith("0x") else x for x in v]
nonzero = 0
for e in json.loads(subprocess.check_output(["bpftool", "-j", "map", "dump", "pinned", pin])):
    v = [int(x, 16) for x in e["value"]]
    nonzero += any(v[4:8])
    if write:
        v[4:8] = [0, 0, 0, 0]
        subprocess.check_call(["bpftool", "map", "update", "pinned", pin, "key", "hex"] + hx(e["key"]) +
                              ["value", "hex"] + ["%02x" % b for b in v])
print(nonzero)
PY
}
zero_rules zero >/dev/null
check "the map's entries now carry no rule ID (as an older agent's; bpftool)" test "$(zero_rules count)" = 0
start_node_agent "$WORK/mods" --set ipam-cluster-pool.node-cidr=10.244.9.0/24 ||
	{ fail "the agent restarts"; finish; }
check "after the restart: the revision is kept" test "$(revision)" = 2
check "after the restart: the same policy map entries" test "$(entries)" = "$before_entries" ||
	diff <(echo "$before_entries") <(entries)
check "after the restart: the same rule IDs in them (rewritten into the older layout's entries)" test "$(rule_entries)" = "$before_rules" ||
	diff <(echo "$before_rules") <(rule_entries)
api -o /dev/null "http://x/v1/flows" # hubble-lite is up
expect b a 80 fail
got=$(flow_policy drop b a 80)
check "after the restart: the drop still names a-deny-b's ingressDeny[0] ($got)" \
	test "$got" = "deny ingress CiliumNetworkPolicy /a-deny-b ingressDeny[0]"
expect c b 80 ok

# ---- deleting restores connectivity ---------------------------------------------------------------
fib policy delete a-deny-b >/dev/null
expect b a 80 ok
fib policy delete-all >/dev/null
expect b a 81 ok
api -o /dev/null -X PATCH -H 'Content-Type: application/json' -d '{"labels":["k8s:app=c"]}' \
	"http://x/v1/endpoint/container-id:fpol$$c"
expect c a 80 ok
check "no endpoint enforces anything after delete-all" test "$(api http://x/v1/policy | python3 -c '
import json,sys
print(sum(1 for e in json.load(sys.stdin)["endpoints"] if e["ingress"] != "open" or e["egress"] != "open"))')" = 0

# ---- IPv6 CIDRs: CIDR identities in the ipcache, trace answers by them ----------------------------
cat >"$WORK/v6.json" <<'EOF2'
{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
 "metadata": {"name": "a-to-v6"},
 "spec": {"endpointSelector": {"matchLabels": {"app": "a"}},
          "egress": [{"toCIDRSet": [{"cidr": "2001:db8:77::/48", "except": ["2001:db8:77:1::/64"]}],
                      "toPorts": [{"ports": [{"port": "443", "protocol": "TCP"}]}]}]}}
EOF2
fib policy import "$WORK/v6.json" >/dev/null
v6cidrs() { fib map dump dp_ipcache | python3 -c '
import re, sys
for l in sys.stdin:
    m = re.match(r"(2001:db8:77[:0-9a-f]*/\d+)\s+identity=(\d+)", l)
    if m and int(m.group(2)) >= 1 << 24:
        print(m.group(1))' | sort | tr '\n' ' '; }
check "IPv6 CIDRs: the prefix and its except are CIDR identities in the ipcache" \
	test "$(v6cidrs)" = "2001:db8:77:1::/64 2001:db8:77::/48 " || fib map dump dp_ipcache
out=$(fib policy trace --src "${ADDR[a]}" --dst 2001:db8:77:5::1 --dport 443/tcp 2>&1)
check "policy trace: a -> an address inside the IPv6 CIDR is allowed by a-to-v6's egress[0]" \
	has "$out" "decided by: allow CiliumNetworkPolicy a-to-v6 egress\[0\]" || echo "$out"
out=$(fib policy trace --src "${ADDR[a]}" --dst 2001:db8:77:1::1 --dport 443/tcp 2>&1) || true
check "policy trace: its except is not (default deny)" \
	has "$out" "Final verdict: DENIED" || echo "$out"
out=$(fib policy trace --src "${ADDR[a]}" --dst 2001:db8:77:5::1 --dport 80/tcp 2>&1) || true
check "policy trace: nor another port" has "$out" "decided by: default deny" || echo "$out"
fib policy delete a-to-v6 >/dev/null
check "IPv6 CIDRs: deleting the policy releases its CIDR identities" test -z "$(v6cidrs | tr -d ' ')"
check "the agent is still running" kill -0 "$AGENT_PID"
finish
