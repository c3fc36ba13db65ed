#!/usr/bin/env bash
# tests/integration/masq_config.sh - [datapath] ip-masq-agent-config (issue
# 24): the ip-masq-agent's config file, as a ConfigMap mounts it, read at
# start and whenever it changes. One node, a pod and a "world" namespace on
# the underlay (no route to the pod) with two addresses. The promise: the
# file's nonMasqueradeCIDRs reach dp_nomasq (YAML at start: the pod reaches
# one world address with its own address, the other as the node); a new
# file (JSON, swapped in as a ConfigMap update does) is applied within
# seconds, masqLinkLocal included; a bad file (a CIDR out of range, an
# unknown field, a non-boolean, not YAML at all) is refused with one line
# naming the field and changes nothing: the last good config stays in force;
# a file removed brings back the defaults.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

mn_cluster_up 1 kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes
WORLD_A=$MN_UNDERLAY_PREFIX.200
WORLD_B=$MN_UNDERLAY_PREFIX.201
mn_world_up "$WORLD_A" "$WORLD_B"

CFG=$WORK/ip-masq-agent/config
mkdir -p "$(dirname "$CFG")"
# put_cfg : stdin becomes the file in one rename, as a ConfigMap update
put_cfg() { cat >"$CFG.tmp" && mv -f "$CFG.tmp" "$CFG"; }
put_cfg <<YAML
# the ip-masq-agent's format
nonMasqueradeCIDRs:
  - $WORLD_B/32
masqLinkLocal: false
resyncInterval: 60s
YAML

mn_agent_start n1 "$WORK/mods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.207.0.0/16 \
	--set "datapath.ip-masq-agent-config=$CFG" || { fail "the agent starts with ip-masq-agent-config"; finish; }
check "the world's server is up" wait_for 10 grep -q ready "$WLOG"
mn_pod_add n1 pa || { fail "a pod on n1"; finish; }
POD=${MN_POD_IP[pa]}
NODE=${MN_IP[n1]}
in_pod() { ip netns exec "$(mn_pod_ns pa)" "$@"; }
world() { in_pod /usr/bin/python3 "$top_srcdir/tests/integration/masq_world.py" "$@"; }
nomasq() { "$CLI" -s "${MN_DIR[n1]}/fibril.sock" map dump dp_nomasq 2>&1; }
has() { nomasq | grep -q "^$1 "; }
hasnt() { ! has "$1"; }
dp_is() { local doc; doc=$(mn_api n1 http://x/v1/datapath); json_is "$doc" "$1"; }
seen_as() { # HOST ADDRESS : TCP and UDP to HOST answer "SEEN ADDRESS"
	local out
	out=$(world probe "$1" "$PORT" 2>&1)
	[[ $out == *"tcp SEEN $2"* && $out == *"udp SEEN $2"* ]] && return 0
	echo "  pa -> $1: $out (expected SEEN $2)"
	return 1
}
sent_as_pod() { # HOST : a datagram to HOST arrives from the pod's own address
	: >"$WLOG"
	world send "$1" "$PORT"
	wait_for 5 grep -q "^udp $POD " "$WLOG"
}
agent_log=${MN_DIR[n1]}/agent.log

# 1. at start, YAML
check "start (YAML): dp_nomasq holds the file's $WORLD_B/32" has "$WORLD_B/32"
check "  and link-local (masqLinkLocal: false)" has 169.254.0.0/16
check "  GET /v1/datapath names the file, one load, no error" \
	dp_is "j['ip-masq-agent-config']['loads'] == 1 and j['ip-masq-agent-config']['error'] == '' and j['ip-masq-agent-config']['non-masquerade-cidrs'] == 1"
check "start: pa reaches $WORLD_A as the node ($NODE)" seen_as "$WORLD_A" "$NODE"
check "start: pa reaches $WORLD_B (in nonMasqueradeCIDRs) with its own address $POD" sent_as_pod "$WORLD_B"

# 2. a new file, JSON, swapped in
put_cfg <<JSON
{"nonMasqueradeCIDRs": ["$WORLD_A/32"], "masqLinkLocal": true, "masqLinkLocalIPv6": false}
JSON
check "change (JSON): $WORLD_A/32 is in dp_nomasq within 5 s" wait_for 5 has "$WORLD_A/32"
check "  $WORLD_B/32 is gone" hasnt "$WORLD_B/32"
check "  link-local is masqueraded now (masqLinkLocal: true)" hasnt 169.254.0.0/16
check "  fe80::/10 stays (masqLinkLocalIPv6: false)" has fe80::/10
check "change: pa reaches $WORLD_A with its own address" sent_as_pod "$WORLD_A"
check "change: pa reaches $WORLD_B as the node" seen_as "$WORLD_B" "$NODE"

# 3. bad files: one line naming the field, nothing changes
before=$(nomasq | sort)
bad() { # WHAT EXPECTED-IN-THE-LINE : the file (stdin) refused, the line names it
	local n0 n1 lines
	n0=$(grep -c "ip-masq-agent-config $CFG: " "$agent_log" || true)
	put_cfg
	check "bad file ($1): refused with a line naming it" \
		wait_for 5 bash -c "grep -F \"ip-masq-agent-config $CFG: \" '$agent_log' | tail -n +$((n0 + 1)) | grep -qF \"$2\""
	lines=$(grep -c "ip-masq-agent-config $CFG: " "$agent_log" || true)
	check "  one line for it" test "$((lines - n0))" -eq 1
	grep -F "ip-masq-agent-config $CFG: " "$agent_log" | tail -n 1 | sed 's/^/    /' || true
	check "  dp_nomasq unchanged (the last good config stays)" test "$(nomasq | sort)" = "$before"
}
printf 'nonMasqueradeCIDRs:\n  - %s/32\n  - 10.1.2.0/33\n' "$WORLD_B" |
	bad "a prefix length of 33" "nonMasqueradeCIDRs[1]: '10.1.2.0/33': the prefix length is not 0..32"
printf '{"nonMasqueradeCIDR": ["%s/32"]}\n' "$WORLD_B" | bad "a misspelt field" "unknown field 'nonMasqueradeCIDR'"
printf 'masqLinkLocal: maybe\n' | bad "a non-boolean" "masqLinkLocal: 'maybe' is not true or false"
printf 'nonMasqueradeCIDRs: [10.0.0.0/8\n' | bad "not YAML" "not YAML or JSON"
printf 'nonMasqueradeCIDRs: 10.0.0.0/8\n' | bad "a string for the list" "nonMasqueradeCIDRs: expected a list of CIDRs"
check "  GET /v1/datapath counts the refusals and names the last" \
	dp_is "j['ip-masq-agent-config']['errors'] >= 5 and 'nonMasqueradeCIDRs' in j['ip-masq-agent-config']['error']"
check "after the bad files: pa still reaches $WORLD_A with its own address" sent_as_pod "$WORLD_A"
check "  and $WORLD_B as the node" seen_as "$WORLD_B" "$NODE"

# 4. the file removed: the defaults
rm -f "$CFG"
check "removed: $WORLD_A/32 leaves dp_nomasq within 5 s" wait_for 5 hasnt "$WORLD_A/32"
check "  link-local is back" has 169.254.0.0/16
check "removed: pa reaches $WORLD_A as the node again" seen_as "$WORLD_A" "$NODE"
finish
