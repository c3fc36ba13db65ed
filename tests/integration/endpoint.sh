#!/usr/bin/env bash
# tests/integration/endpoint.sh - the endpoint module end to end, without a
# datapath: an agent (ipam-cluster-pool with a static node-cidr, ipam-api,
# endpoint) in a node netns, "pods" made of netns + veth. PUT (201, then
# 200 with the same ID), identities shared by equal label sets and released
# with their last endpoint, PATCH, DELETE (twice: 404), reserved identities,
# every kind of bad input (400/404 with the field named, nothing changed on
# disk, in the list or in IPAM), kill -9 and restart (same IDs, identities,
# addresses), endpoints whose veth or netns went away while the agent was
# down (removed, addresses released), the state journal (every answered
# change in endpoints.journal), the upgrade from per-endpoint state files
# (moved into the journal, every endpoint kept), corrupt state files
# (skipped, moved aside), the bus events, and the CLI (`fibril endpoint|identity`, tables
# and -o json).
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/integration/endpoint_common.sh"

STATE=$WORK/state/endpoint
# the newest journal record of endpoint ID (exit 1: none)
record() { python3 "$top_srcdir/tests/integration/endpoint_journal.py" "$STATE" "$@"; }
cli() { CRC=0; "$CLI" --socket "$WORK/fibril.sock" "$@" >"$WORK/out" 2>"$WORK/err" || CRC=$?; }
out() { cat "$WORK/out"; }

# snapshot: the state dir (names and contents), the endpoint list, IPAM
snapshot() {
	{
		(cd "$STATE" && for f in $(ls -A | sort); do echo "== $f"; cat "$f"; echo; done)
		api http://x/v1/endpoint
		api http://x/v1/identity
		api http://x/v1/ipam
	} | md5sum
}

start_node_agent || { fail "the agent starts"; finish; exit 1; }
pass "the agent starts with ipam-cluster-pool, ipam-api and endpoint in a node netns"

# ---- pods ------------------------------------------------------------------------------
make_pod a lxca$$ ; A=("$POD_NETNS" "lxca$$" "$HOST_IFINDEX" "$POD_MAC" "$HOST_MAC")
make_pod b lxcb$$ ; B=("$POD_NETNS" "lxcb$$" "$HOST_IFINDEX" "$POD_MAC" "$HOST_MAC")
make_pod c lxcc$$ ; C=("$POD_NETNS" "lxcc$$" "$HOST_IFINDEX" "$POD_MAC" "$HOST_MAC")
make_pod d lxcd$$ ; D=("$POD_NETNS" "lxcd$$" "$HOST_IFINDEX" "$POD_MAC" "$HOST_MAC")

CIDA=aaaa$$000000000000000000000000000000000000000000000000000000000000
CIDA=${CIDA:0:64}
# as fibril-cni does: the address from IPAM first, then PUT
expect "IPAM hands pod a its addresses" POST "/v1/ipam?family=both&owner=$CIDA/eth0" 201 '"owner"'
A4=$(jq_py "[a['address'] for a in j['addresses'] if a['family']=='ipv4'][0]")
A6=$(jq_py "[a['address'] for a in j['addresses'] if a['family']=='ipv6'][0]")

body "$CIDA" "${A[@]}" "$A4" "$A6" default web-1 '["k8s:app=web"]' >"$WORK/a.json"
expect "PUT creates an endpoint: 201" PUT "/v1/endpoint/container-id:$CIDA:eth0" 201 '"state":"ready"' \
	--data-binary @"$WORK/a.json"
IDA=$(jq_py "j['id']")
IDENT_WEB=$(jq_py "j['identity']")
check "the first endpoint gets ID 1" test "$IDA" = 1
check "its identity is a local one (>= 256)" test "$IDENT_WEB" -ge 256
check "the namespace label is added, labels sorted" \
	json_ok "j['labels'] == ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=default']"
check "the reply carries the attachment as given" \
	json_ok "j['ipv4'] == '$A4' and j['ipv6'] == '$A6' and j['host-ifname'] == '${A[1]}' and j['host-ifindex'] == ${A[2]} and j['mac'] == '${A[3]}' and j['host-mac'] == '${A[4]}' and j['netns'] == '${A[0]}' and j['pod-namespace'] == 'default' and j['pod-name'] == 'web-1' and j['container-id'] == '$CIDA' and j['ifname'] == 'eth0' and j['created'] > 1600000000"
check "its journal record is on disk when PUT answers" record "$IDA"
check "the record is JSON naming the endpoint" python3 -c "import json,sys; j=json.loads(sys.argv[1]); sys.exit(0 if j['id']==$IDA and j['identity']==$IDENT_WEB and j['ipv4']=='$A4' else 1)" "$(record "$IDA")"
check "no per-endpoint state file, no temp file" test -z "$(ls -A "$STATE" | grep -E '\.tmp$|\.json$' || true)"

expect "PUT again (a retried ADD) is 200 with the same ID" PUT "/v1/endpoint/container-id:$CIDA:eth0" 200 \
	"\"id\":$IDA," --data-binary @"$WORK/a.json"
check "... and the same identity" json_ok "j['identity'] == $IDENT_WEB"

# pod b: same labels, its address taken straight from the free pool by the PUT
B4=10.77.1.10
body cidb$$ "${B[@]}" "$B4" "" default web-2 '["k8s:app=web"]' >"$WORK/b.json"
expect "PUT with a free address takes it from IPAM: 201" PUT "/v1/endpoint/container-id:cidb$$:eth0" 201 \
	'"id":2,' --data-binary @"$WORK/b.json"
check "the same labels share an identity" json_ok "j['identity'] == $IDENT_WEB"
check "an endpoint with only IPv4 has no ipv6 field" json_ok "'ipv6' not in j"
expect "IPAM now lists the address under the endpoint's owner" GET /v1/ipam 200 \
	"{\"address\":\"$B4\",\"owner\":\"cidb$$/eth0\"}"

C4=10.77.1.11
body cidc$$ "${C[@]}" "$C4" "" other db-1 '["k8s:app=db","k8s:tier=backend"]' >"$WORK/c.json"
expect "a third endpoint, other labels: 201" PUT "/v1/endpoint/container-id:cidc$$:eth0" 201 '"id":3,' \
	--data-binary @"$WORK/c.json"
IDENT_DB=$(jq_py "j['identity']")
check "different labels get a different identity" test "$IDENT_DB" != "$IDENT_WEB" -a "$IDENT_DB" -ge 256
check "the namespace label follows pod-namespace" \
	json_ok "j['labels'] == ['k8s:app=db', 'k8s:io.kubernetes.pod.namespace=other', 'k8s:tier=backend']"

expect "GET /v1/identity/$IDENT_WEB counts its 2 endpoints" GET "/v1/identity/$IDENT_WEB" 200 '"endpoints":2'
expect "GET /v1/identity lists the reserved identities" GET /v1/identity 200 \
	'{"id":1,"labels":["reserved:host"],"reserved":true,"scope":"reserved","endpoints":0}'
check "every reserved identity is there, by Cilium's numbers" json_ok \
	"[(i['id'], i['labels']) for i in j['identities'] if i['reserved']] == [(1,['reserved:host']),(2,['reserved:world']),(3,['reserved:unmanaged']),(4,['reserved:health']),(5,['reserved:init']),(6,['reserved:remote-node']),(7,['reserved:kube-apiserver']),(8,['reserved:ingress']),(9,['reserved:world-ipv4']),(10,['reserved:world-ipv6'])]"
check "the local identities follow, sorted" json_ok \
	"[i['id'] for i in j['identities'] if not i['reserved']] == sorted([$IDENT_WEB, $IDENT_DB])"

# refs
expect "GET by ID" GET "/v1/endpoint/$IDA" 200 "\"container-id\":\"$CIDA\""
expect "GET by container-id:CID:IFNAME" GET "/v1/endpoint/container-id:cidb$$:eth0" 200 '"id":2,'
expect "GET by container-id:CID (one endpoint)" GET "/v1/endpoint/container-id:cidc$$" 200 '"id":3,'
expect "GET /v1/endpoint lists them sorted by ID" GET /v1/endpoint 200 '"endpoints"'
check "... ids 1, 2, 3" json_ok "[e['id'] for e in j['endpoints']] == [1, 2, 3]"

# PATCH
expect "PATCH labels: 200" PATCH /v1/endpoint/2 200 '"state":"ready"' --data-binary '{"labels":["k8s:app=cache"]}'
IDENT_CACHE=$(jq_py "j['identity']")
check "PATCH gives a new identity for the new label set" \
	test "$IDENT_CACHE" != "$IDENT_WEB" -a "$IDENT_CACHE" != "$IDENT_DB"
check "PATCH keeps the namespace label" \
	json_ok "j['labels'] == ['k8s:app=cache', 'k8s:io.kubernetes.pod.namespace=default']"
check "the journal has the new identity when PATCH answers" grep -q "\"identity\":$IDENT_CACHE" <(record 2)
expect "PATCH back to app=web: the shared identity again" PATCH /v1/endpoint/2 200 "\"identity\":$IDENT_WEB," \
	--data-binary '{"labels":["k8s:app=web"]}'
expect "the identity of the last endpoint that left it is released" GET "/v1/identity/$IDENT_CACHE" 404 \
	"identity $IDENT_CACHE not found"
expect "PATCH with no labels gives the init identity" PATCH /v1/endpoint/container-id:cidc$$:eth0 200 \
	'"identity":' --data-binary '{"labels":[]}'
check "... labels: only the namespace one, a local identity" \
	json_ok "j['labels'] == ['k8s:io.kubernetes.pod.namespace=other'] and j['identity'] >= 256"
expect "PATCH back" PATCH /v1/endpoint/3 200 "\"identity\":" --data-binary '{"labels":["k8s:app=db","k8s:tier=backend"]}'
check "a released number is not reused at once" json_ok "j['identity'] not in ($IDENT_DB, $IDENT_CACHE)"
IDENT_DB=$(jq_py "j['identity']")
# Cilium's default label filter: per-pod and per-rollout labels do not count
expect "PATCH adding pod-template-hash and a topology.kubernetes.io label: the same identity (they do not count)" PATCH /v1/endpoint/2 200 \
	"\"identity\":$IDENT_WEB," --data-binary \
	'{"labels":["k8s:app=web","k8s:pod-template-hash=5d8f7c9b","k8s:topology.kubernetes.io/zone=z1"]}'
check "... and the endpoint's labels leave them out" json_ok \
	"j['labels'] == ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=default']"
expect "... the identity's labels are the ones that count" GET "/v1/identity/$IDENT_WEB" 200 \
	'"labels":["k8s:app=web","k8s:io.kubernetes.pod.namespace=default"],'
expect "an app.kubernetes.io label counts: another identity" PATCH /v1/endpoint/2 200 '"identity":' \
	--data-binary '{"labels":["k8s:app=web","k8s:app.kubernetes.io/part-of=shop"]}'
check "... not the web one" json_ok "j['identity'] != $IDENT_WEB and j['identity'] >= 256"
expect "PATCH back to app=web" PATCH /v1/endpoint/2 200 "\"identity\":$IDENT_WEB," --data-binary '{"labels":["k8s:app=web"]}'

# ---- bad input: 400/404, one line naming the field, nothing changed ---------------------
BEFORE=$(snapshot)
bad() { # WHAT STATUS NEEDLE METHOD PATH JSON-BODY
	local what=$1 status=$2 needle=$3 method=$4 path=$5 data=$6
	if [ -n "$data" ]; then
		expect "$what" "$method" "$path" "$status" "$needle" --data-binary "$data"
	else
		expect "$what" "$method" "$path" "$status" "$needle"
	fi
	check "... one line, status and error fields" json_ok "j['code'] == $status and '\\n' not in j['error']"
}
D4=10.77.1.20
mk() { body cidd$$ "${D[@]}" "$@"; }
good=$(mk "$D4" "" default web-4 '["k8s:app=web"]')
del_field() { python3 -c "import json,sys; b=json.loads(sys.argv[1]); del b[sys.argv[2]]; print(json.dumps(b))" "$good" "$1"; }
set_field() { python3 -c "import json,sys; b=json.loads(sys.argv[1]); b[sys.argv[2]]=json.loads(sys.argv[3]); print(json.dumps(b))" "$good" "$1" "$2"; }
P=/v1/endpoint/container-id:cidd$$:eth0
for f in container-id ifname netns host-ifname host-ifindex mac host-mac; do
	bad "missing $f: 400" 400 "\"error\":\"$f: missing (required)\"" PUT "$P" "$(del_field "$f")"
done
bad "bad MAC: 400" 400 "mac: 'zz:bb:cc:dd:ee:ff' is not a MAC address" PUT "$P" "$(set_field mac '"zz:bb:cc:dd:ee:ff"')"
bad "short host MAC: 400" 400 "host-mac: 'aa:bb:cc:dd:ee' is not a MAC address" PUT "$P" "$(set_field host-mac '"aa:bb:cc:dd:ee"')"
bad "bad IPv4 address: 400" 400 "ipv4: '10.77.1.300' is not an IPv4 address" PUT "$P" "$(set_field ipv4 '"10.77.1.300"')"
bad "IPv6 in the ipv4 field: 400" 400 "ipv4: 'fd00:77::9' is not an IPv4 address" PUT "$P" "$(set_field ipv4 '"fd00:77::9"')"
bad "a prefix instead of an address: 400" 400 "ipv4: '10.77.1.20/32' is a prefix" PUT "$P" "$(set_field ipv4 '"10.77.1.20/32"')"
bad "bad IPv6 address: 400" 400 "ipv6: 'fd00::zz' is not an IPv6 address" PUT "$P" "$(set_field ipv6 '"fd00::zz"')"
bad "no address at all: 400" 400 "ipv4, ipv6: at least one address is required" PUT "$P" "$(del_field ipv4)"
bad "host-ifindex of the wrong type: 400" 400 "host-ifindex: expected an integer" PUT "$P" "$(set_field host-ifindex '"12"')"
bad "host-ifindex that does not exist: 400" 400 "host-ifindex: no interface with index 99999 in the agent's network namespace" \
	PUT "$P" "$(set_field host-ifindex 99999)"
bad "host-ifindex whose name is not host-ifname: 400" 400 "host-ifindex: interface 1 is lo, not host-ifname ${D[1]}" \
	PUT "$P" "$(set_field host-ifindex 1)"
bad "host-ifindex of another endpoint: 400" 400 "host-ifindex: interface ${A[2]} (${A[1]}) belongs to endpoint 1" \
	PUT "$P" "$(set_field host-ifindex "${A[2]}" | python3 -c "import json,sys; b=json.load(sys.stdin); b['host-ifname']='${A[1]}'; print(json.dumps(b))")"
bad "netns that does not exist: 400" 400 "netns: /run/netns/fibep-$$-nosuch: No such file or directory" \
	PUT "$P" "$(set_field netns "\"/run/netns/fibep-$$-nosuch\"")"
bad "netns that is not a namespace: 400" 400 "netns: $WORK is not a network namespace" PUT "$P" "$(set_field netns "\"$WORK\"")"
bad "relative netns: 400" 400 "netns: 'netns/x' is not an absolute path" PUT "$P" "$(set_field netns '"netns/x"')"
bad "ifname longer than 15: 400" 400 "ifname: 'eth0123456789abc' is not an interface name" \
	PUT "$P" "$(set_field ifname '"eth0123456789abc"')"
bad "a ref with an ifname longer than 15: 400" 400 "ref 'container-id:cidd$$:eth0123456789abc': 'eth0123456789abc' is not an interface name" \
	PUT "/v1/endpoint/container-id:cidd$$:eth0123456789abc" "$good"
bad "host-ifname with a slash: 400" 400 "host-ifname: 'lxc/1' is not an interface name" PUT "$P" "$(set_field host-ifname '"lxc/1"')"
bad "container ID with a bad character: 400" 400 "container-id: 'cid\$x' is not a container ID" \
	PUT "$P" "$(set_field container-id '"cid$x"')"
long=$(printf 'a%.0s' $(seq 1 128))
bad "container ID of 128 bytes: 400" 400 "container-id: '" PUT "$P" "$(set_field container-id "\"$long\"")"
bad "label without source: 400" 400 "labels: 'app=web' is not source:key[=value]" PUT "$P" "$(set_field labels '["app=web"]')"
bad "labels not an array: 400" 400 "labels: expected an array of strings" PUT "$P" "$(set_field labels '"k8s:a=b"')"
bad "namespace label against pod-namespace: 400" 400 "contradicts pod-namespace 'default'" \
	PUT "$P" "$(set_field labels '["k8s:io.kubernetes.pod.namespace=kube-system"]')"
bad "pod namespace not a DNS label: 400" 400 "pod-namespace: 'Default' is not a namespace name" PUT "$P" "$(set_field pod-namespace '"Default"')"
bad "malformed JSON: 400" 400 "malformed JSON" PUT "$P" '{"container-id": '
bad "a body that is not an object: 400" 400 "body: expected a JSON object" PUT "$P" '[1,2]'
bad "ref and body disagree: 400" 400 "does not match the body's container-id cidd$$ and ifname eth0" \
	PUT "/v1/endpoint/container-id:other:eth0" "$good"
bad "PUT by numeric ID: 400" 400 "PUT needs container-id:<container id>:<ifname>" PUT /v1/endpoint/4 "$good"
bad "PUT without ifname in the ref: 400" 400 "PUT needs container-id" PUT /v1/endpoint/container-id:cidd$$ "$good"
# IPAM says no
api -s -X POST "http://x/v1/ipam/10.77.1.30?owner=somebody/eth0" >/dev/null
BEFORE=$(snapshot) # the allocation above is part of the "before"
bad "address held by another owner: 400" 400 "ipv4: address 10.77.1.30 is held in IPAM by owner somebody/eth0, not cidd$$/eth0" \
	PUT "$P" "$(set_field ipv4 '"10.77.1.30"')"
bad "address of another endpoint: 400" 400 "ipv4: address $A4 is held in IPAM by owner $CIDA/eth0" \
	PUT "$P" "$(set_field ipv4 "\"$A4\"")"
bad "address outside the pool: 400" 400 "ipv4: address 10.99.0.5 is outside the IPAM pool" \
	PUT "$P" "$(set_field ipv4 '"10.99.0.5"')"
bad "a free ipv4 with an ipv6 outside the pool: 400, the ipv4 given back" 400 \
	"ipv6: address fd00:99::5 is outside the IPAM pool" PUT "$P" "$(set_field ipv6 '"fd00:99::5"')"
bad "the gateway address: 400" 400 "ipv4: address 10.77.0.1 is outside the IPAM pool (or its network, gateway" \
	PUT "$P" "$(set_field ipv4 '"10.77.0.1"')"
# refs
bad "GET an unknown ID: 404" 404 "endpoint 999 not found" GET /v1/endpoint/999 ""
bad "GET an ID out of range: 400" 400 "ref '70000': endpoint IDs are 1..65535" GET /v1/endpoint/70000 ""
bad "GET a ref that is neither: 400" 400 "ref 'web-1': expected an endpoint ID (1..65535) or container-id:" GET /v1/endpoint/web-1 ""
bad "GET an unknown container: 404" 404 "no endpoint for container-id nosuch" GET /v1/endpoint/container-id:nosuch ""
bad "GET a bad container ID: 400" 400 "is not a container ID" GET "/v1/endpoint/container-id:-x" ""
bad "PATCH an unknown ID: 404" 404 "endpoint 999 not found" PATCH /v1/endpoint/999 '{"labels":[]}'
bad "PATCH another field: 400" 400 "ipv4: unknown field (PATCH changes only labels)" PATCH /v1/endpoint/1 '{"ipv4":"10.77.1.1"}'
bad "PATCH a bad label: 400" 400 "labels: ':x' is not source:key[=value]" PATCH /v1/endpoint/1 '{"labels":[":x"]}'
bad "PATCH without labels: 400" 400 "labels: missing" PATCH /v1/endpoint/1 '{}'
bad "DELETE an unknown ref: 404" 404 "no endpoint for container-id nosuch ifname eth0" DELETE /v1/endpoint/container-id:nosuch:eth0 ""
bad "identity that is not a number: 400" 400 "identity 'web': expected a number" GET /v1/identity/web ""
bad "unknown identity: 404" 404 "identity 4242 not found" GET /v1/identity/4242 ""
check "after all the bad requests: state dir, endpoints, identities and IPAM unchanged" test "$(snapshot)" = "$BEFORE"
api -s -X DELETE "http://x/v1/ipam/10.77.1.30" >/dev/null

# ---- the CLI ---------------------------------------------------------------------------
cli endpoint list
check "fibril endpoint list: a table with a header" contains "$(out)" "ID  STATE  IDENTITY  IPV4"
check "... a row per endpoint" test "$(grep -c ' ready ' "$WORK/out")" = 3
check "... the pod and the short container ID" contains "$(out)" "default/web-1  ${CIDA:0:12}  eth0"
cli -o json endpoint list
check "fibril -o json endpoint list is the agent's JSON" python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if [e['id'] for e in j['endpoints']]==[1,2,3] else 1)" "$WORK/out"
cli endpoint get "container-id:$CIDA:eth0"
check "fibril endpoint get container-id:CID:IFNAME: field table" \
	contains "$(out)" "LABELS        k8s:app=web,k8s:io.kubernetes.pod.namespace=default"
check "... with the full container ID" contains "$(out)" "CONTAINER-ID  $CIDA"
cli -o json endpoint get 3
check "fibril -o json endpoint get 3" python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j['id']==3 and j['ipv4']=='$C4' else 1)" "$WORK/out"
cli endpoint get 999
check "fibril endpoint get 999: exit 1 with the agent's error" \
	test "$CRC" = 1 -a "$(cat "$WORK/err")" = "fibril: endpoint 999 not found (HTTP 404)" || cat "$WORK/err"
cli endpoint
check "fibril endpoint (no subcommand): usage error, exit 2" test "$CRC" = 2
cli identity list
check "fibril identity list: reserved and local identities" \
	contains "$(out)" "1    reserved  0          reserved:host"
check "... the shared identity with its endpoint count" grep -Eq "^$IDENT_WEB +local +2 +k8s:app=web,k8s:io.kubernetes.pod.namespace=default" "$WORK/out"
cli identity get "$IDENT_DB"
check "fibril identity get: field table" contains "$(out)" "LABELS     k8s:app=db,k8s:io.kubernetes.pod.namespace=other,k8s:tier=backend"
cli -o json identity get 4
check "fibril -o json identity get 4" python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j=={'id':4,'labels':['reserved:health'],'reserved':True,'scope':'reserved','endpoints':0} else 1)" "$WORK/out"
cli identity get nope
check "fibril identity get nope: exit 1, the agent's error" test "$CRC" = 1

# ---- DELETE -----------------------------------------------------------------------------
body cidd$$ "${D[@]}" "$D4" "" default web-4 '["k8s:app=web"]' >"$WORK/d.json"
expect "a fourth endpoint (to delete)" PUT "$P" 201 '"id":4,' --data-binary @"$WORK/d.json"
expect "DELETE: 200 naming the ID" DELETE /v1/endpoint/container-id:cidd$$:eth0 200 '{"deleted":4}'
check "its record is deleted when DELETE answers" test "$(record 4 || echo gone)" = gone
expect "its address went back to IPAM" GET /v1/ipam 200 '"allocations"'
check "... $D4 is no longer allocated" json_ok "'$D4' not in [a['address'] for a in j['allocations']]"
expect "DELETE again: 404" DELETE /v1/endpoint/container-id:cidd$$:eth0 404 "no endpoint for container-id cidd$$ ifname eth0"
expect "the freed ID is the next one handed out" PUT "$P" 201 '"id":4,' --data-binary @"$WORK/d.json"
expect "DELETE by ID" DELETE /v1/endpoint/4 200 '{"deleted":4}'

# ---- the bus ----------------------------------------------------------------------------
expect "GET /v1/bus" GET /v1/bus 200 '"topics"'
check "endpoint.created published once per creation (5)" \
	json_ok "[t['published'] for t in j['topics'] if t['name']=='endpoint.created'] == [5]"
check "endpoint.deleted published twice" \
	json_ok "[t['published'] for t in j['topics'] if t['name']=='endpoint.deleted'] == [2]"
check "endpoint.updated published for the re-PUT and the 6 PATCHes that changed labels (7)" \
	json_ok "[t['published'] for t in j['topics'] if t['name']=='endpoint.updated'] == [7]"

# labels with characters JSON must escape survive the API and the state file
expect "PATCH a label holding quotes and a backslash" PATCH /v1/endpoint/1 200 '"id":1,' \
	--data-binary '{"labels":["k8s:app=web","k8s:note=say \"hi\" \\ ok"]}'
check "... it comes back as given" json_ok "j['labels'] == ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=default', 'k8s:note=say \"hi\" \\\\ ok']"
check "... and the journal record is still JSON with it" grep -qF 'say \"hi\" \\ ok' <(record 1)

# ---- kill -9 and restart ------------------------------------------------------------------
api http://x/v1/endpoint >"$WORK/before.json"
api http://x/v1/identity >"$WORK/ident-before.json"
stop_agent KILL || true
start_node_agent || fail "the agent restarts after kill -9"
api http://x/v1/endpoint >"$WORK/after.json"
check "after kill -9: the same endpoints, IDs, identities, addresses, labels" \
	python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if a==b and len(a['endpoints'])==3 else 1)" "$WORK/before.json" "$WORK/after.json"
api http://x/v1/identity >"$WORK/ident-after.json"
check "... and the same identities with the same counts" cmp -s "$WORK/ident-before.json" "$WORK/ident-after.json"
check "the restore is logged with its time" grep -Eq "restored 3 endpoints in [0-9.]+ ms \(0 removed\)" <(last_log)
expect "their addresses are still held by their owners" GET /v1/ipam 200 "{\"address\":\"$A4\",\"owner\":\"$CIDA/eth0\"}"
body cide$$ "${D[@]}" "10.77.1.40" "" default web-5 '["k8s:app=new"]' >"$WORK/e.json"
# ---- the upgrade: per-endpoint state files (before the journal) move into it --------------------
stop_agent KILL || true
python3 - "$STATE" <<'PY'
import json, os, subprocess, sys
d = sys.argv[1]
live = json.loads(subprocess.check_output([sys.executable, os.environ["top_srcdir"] + "/tests/integration/endpoint_journal.py", d]))
for i, rec in live.items():
    with open(os.path.join(d, i + ".json"), "w") as f:
        f.write(json.dumps(rec, separators=(",", ":")) + "\n")
for f in ("endpoints.journal", "endpoints.snap"):
    if os.path.exists(os.path.join(d, f)):
        os.unlink(os.path.join(d, f))
PY
check "the old layout: 3 state files, no journal" test "$(ls "$STATE" | grep -c '^[0-9]*\.json$')" = 3 -a ! -e "$STATE/endpoints.journal"
start_node_agent || fail "the agent starts on the old state files"
api http://x/v1/endpoint >"$WORK/after-upgrade.json"
check "after the upgrade: the same endpoints, IDs, identities, addresses, labels" \
	python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if a==b and len(a['endpoints'])==3 else 1)" "$WORK/before.json" "$WORK/after-upgrade.json"
check "the move is logged" grep -q "moved 3 endpoint state files into $STATE/endpoints.journal" <(last_log)
check "the state files are gone, the journal holds the 3 endpoints" \
	test "$(ls "$STATE" | grep -c '^[0-9]*\.json$')" = 0 -a "$(record --count)" = 3
stop_agent KILL || true
start_node_agent || fail "the agent restarts on the migrated journal"
api http://x/v1/endpoint >"$WORK/after-upgrade2.json"
check "... and restarts from the journal alone with the same endpoints" cmp -s "$WORK/after-upgrade.json" "$WORK/after-upgrade2.json"
expect "a new endpoint after the restart gets the lowest free ID" PUT /v1/endpoint/container-id:cide$$:eth0 201 '"id":4,' \
	--data-binary @"$WORK/e.json"
check "... and an identity number not used before the restart" \
	json_ok "j['identity'] not in ($IDENT_WEB, $IDENT_DB, $IDENT_CACHE)"

# ---- gone while the agent was down; corrupt files ----------------------------------------
stop_agent KILL || true
ip -n "$NODE" link del "${B[1]}"                 # endpoint 2: its host veth
ip netns del "fibep-$$-c"                        # endpoint 3: its netns (and veth)
echo '{"id": 9, "identity": ' >"$STATE/9.json"   # not JSON
record 1 | sed 's/"mac":"[^"]*"/"mac":"nonsense"/' | sed 's/"id":1,/"id":8,/' >"$STATE/8.json" # bad field
echo '{"half": ' >"$STATE/.5.json.tmp"           # an unfinished write
start_node_agent || fail "the agent restarts with dead endpoints and corrupt files"
expect "only the live endpoints are back" GET /v1/endpoint 200 '"endpoints"'
check "... 1 and 4" json_ok "[e['id'] for e in j['endpoints']] == [1, 4]"
check "the endpoint whose veth went is removed, saying why" \
	grep -q "endpoint 2 (cidb$$/eth0) removed at restore: its host veth ${B[1]} (ifindex ${B[2]}) is gone" <(last_log)
check "the endpoint whose netns went is removed, saying why" \
	grep -q "endpoint 3 (cidc$$/eth0) removed at restore: its netns ${C[0]} is gone" <(last_log)
check "the log counts them" grep -Eq "restored 2 endpoints in [0-9.]+ ms \(2 removed, 2 corrupt state files skipped\)" <(last_log)
check "their records are deleted" test "$(record 2 || echo gone) $(record 3 || echo gone)" = "gone gone"
expect "their addresses are released" GET /v1/ipam 200 '"allocations"'
check "... $B4 and $C4 are free, $A4 still held" \
	json_ok "sorted(a['address'] for a in j['allocations']) == sorted(['$A4', '$A6', '10.77.1.40'])"
check "their identities are gone with them" test "$(req GET "/v1/identity/$IDENT_DB")" = 404
check "the corrupt file is logged with its path" grep -q "state file $STATE/9.json is corrupt (not JSON" <(last_log)
check "... and moved aside" test -f "$STATE/9.json.corrupt" -a ! -e "$STATE/9.json"
check "a file with a bad field is corrupt too, naming the field" \
	grep -q "state file $STATE/8.json is corrupt (mac: 'nonsense' is not a MAC address" <(last_log)
check "the leftover temp file is removed" test ! -e "$STATE/.5.json.tmp"
expect "the agent is healthy" GET /v1/healthz 200 '"ok"'

stop_agent TERM
check "the agent stops cleanly" grep -q "agent stopped" <(last_log)
finish
