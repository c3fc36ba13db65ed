#!/usr/bin/env bash
# tests/integration/ipam_cluster_pool.sh - the ipam-cluster-pool module end
# to end, through ipam-api's /v1/ipam routes: config errors; node-cidr mode
# without a kvstore (allocate, claim, release, list, idempotent owners,
# exhaustion, dual stack, restore after kill -9, stale allocations after the
# node CIDR changed); then several agents on one machine (own sockets, state
# and run dirs, node names) against a real etcd on loopback: racing for node
# CIDRs, an exhausted pool and its recovery, etcd stopped and restarted,
# kill -9 and restart (same CIDR, same allocations), a restart after the
# lease expired (same CIDR from the state file); and valgrind on start/stop.
# shellcheck disable=SC2016,SC2034,SC2054 # until_ok evals its quoted condition; valgrind args
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "the agent only loads root-owned modules; run as root"
for so in ipam-cluster-pool ipam-api kvstore-etcd; do
	[ -f "$top_builddir/.libs/$so.so" ] || skip_or_fail "$so is not built (configured without it?)"
done
[ -f "$top_srcdir/tests/lib/etcd.sh" ] || skip_or_fail "tests/lib/etcd.sh is missing"
# shellcheck source=../lib/etcd.sh
. "$top_srcdir/tests/lib/etcd.sh"
etcd_require curl

smods=$WORK/mods-static # no kvstore: node-cidr mode
kmods=$WORK/mods-kv
for d in "$smods" "$kmods"; do
	mkdir -p "$d"
	chmod 0755 "$d"
	for so in ipam-cluster-pool ipam-api; do install -m 0644 "$top_builddir/.libs/$so.so" "$d/"; done
done
install -m 0644 "$top_builddir/.libs/kvstore-etcd.so" "$kmods/"

# ---- N agents ------------------------------------------------------------------------
# Each node NAME has $WORK/node-NAME/{fibril.sock,state,run,agent.log} and its
# own bpffs dir; its pid is in NODE_PID[NAME].
declare -A NODE_PID
ndir() { printf '%s' "$WORK/node-$1"; }
nsock() { printf '%s/fibril.sock' "$(ndir "$1")"; }

# node_launch NAME MODDIR [agent args...] : start it in the background
node_launch() {
	local name=$1 mods=$2 d
	shift 2
	d=$(ndir "$name")
	mkdir -p "$d"
	rm -f "$d/fibril.sock"
	echo "--- start $*" >>"$d/agent.log"
	"$AGENT" --set "agent.module-dir=$mods" --set "agent.socket=$d/fibril.sock" \
		--set "agent.state-dir=$d/state" --set "agent.run-dir=$d/run" \
		--set "agent.bpffs-dir=$BPFFS_DIR/$name" --set "agent.node-name=$name" "$@" \
		>>"$d/agent.log" 2>&1 &
	NODE_PID[$name]=$!
}

# node_wait NAME : until its socket is there (1 when it exited or 20 s passed)
node_wait() {
	local name=$1
	wait_alive "${NODE_PID[$name]}" 20 test -S "$(nsock "$name")" && return 0
	echo "node $name did not start; its log:"
	tail -n 20 "$(ndir "$name")/agent.log"
	return 1
}

node_start() { node_launch "$@" && node_wait "$1"; }

# node_stop NAME [SIGNAL] : stop it and reap it; returns its exit status
node_stop() {
	local name=$1 sig=${2:-TERM} rc=0
	[ -n "${NODE_PID[$name]:-}" ] || return 0
	kill -"$sig" "${NODE_PID[$name]}" 2>/dev/null || true
	wait "${NODE_PID[$name]}" 2>/dev/null || rc=$?
	NODE_PID[$name]=""
	return $rc
}

stop_all() {
	local n
	for n in "${!NODE_PID[@]}"; do node_stop "$n" TERM || true; done
}

# node_run NAME MODDIR [args...] : in the foreground (must exit within 20 s);
# output in $OUT, status in $RC
node_run() {
	local name=$1 mods=$2 d
	shift 2
	d=$(ndir "$name")
	mkdir -p "$d"
	RC=0
	OUT=$(timeout 20 "$AGENT" --set "agent.module-dir=$mods" --set "agent.socket=$d/fibril.sock" \
		--set "agent.state-dir=$d/state" --set "agent.run-dir=$d/run" \
		--set "agent.bpffs-dir=$BPFFS_DIR/$name" --set "agent.node-name=$name" "$@" 2>&1) || RC=$?
}

# req NAME METHOD PATH : prints the HTTP status; the body is in $WORK/body
req() {
	curl -sS --max-time 10 --unix-socket "$(nsock "$1")" -o "$WORK/body" -w '%{http_code}' \
		-X "$2" "http://x$3" 2>/dev/null || echo 000
}
body() { cat "$WORK/body"; }
# jbody EXPR : a Python expression over the last body (as d), printed
jbody() {
	python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
r = eval(sys.argv[2])
print(" ".join(map(str, r)) if isinstance(r, list) else r)' "$WORK/body" "$1" 2>/dev/null
}
# expect WHAT NAME METHOD PATH STATUS [TEXT] : status and a piece of the body
expect() {
	local what=$1 name=$2 m=$3 p=$4 want=$5 text=${6:-} got
	got=$(req "$name" "$m" "$p")
	if [ "$got" = "$want" ] && { [ -z "$text" ] || grep -qF -- "$text" "$WORK/body"; }; then
		pass "$what"
	else
		fail "$what"
		echo "  $m $p: expected $want${text:+ with '$text'}, got $got: $(body)"
	fi
}
# alloc NAME OWNER [FAMILY] : the address(es) handed out, space-separated
alloc() {
	local code
	code=$(req "$1" POST "/v1/ipam?owner=$2&family=${3:-ipv4}")
	[ "$code" = 201 ] || { echo "  alloc $2 on $1: $code $(body)" >&2; return 1; }
	jbody '[a["address"] for a in d["addresses"]]'
}
# allocations NAME : "address=owner" lines, sorted
allocations() {
	req "$1" GET /v1/ipam >/dev/null
	jbody '[a["address"] + "=" + a["owner"] for a in sorted(d["allocations"], key=lambda a: a["address"])]' | tr ' ' '\n'
}
node_cidr() { req "$1" GET /v1/ipam >/dev/null && jbody '" ".join(p["cidr"] for p in d["pools"])'; }
summary() { req "$1" GET /v1/status >/dev/null && jbody '[m["summary"] for m in d["modules"] if m["name"] == "ipam-cluster-pool"][0]'; }
healthz() { req "$1" GET /v1/healthz; }
# same WHAT ACTUAL EXPECTED : pass when equal, else show both
same() {
	if [ "$2" = "$3" ]; then pass "$1"; else fail "$1"; echo "  expected: $3"; echo "  got:      $2"; fi
}
# until_ok SECONDS 'SHELL CODE' : evaluate the code until it succeeds (wait_quiet)
until_ok() { wait_quiet "$1" eval "$2"; }

# ==== 1. config errors =========================================================================
node_run cfg "$smods"
check "no kvstore, no k8s and no node-cidr: start fails naming the ways out" contains "$OUT" \
	"module ipam-cluster-pool failed to start: no kvstore, no k8s and no node-cidr: set [ipam-cluster-pool] node-cidr, or load kvstore-etcd or k8s"
node_run cfg "$smods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.0.0.0/16 \
	--set ipam-cluster-pool.cluster-pool-ipv4-mask-size=16
check "a mask size not longer than the pool is refused" contains "$OUT" \
	"init failed: cluster-pool-ipv4-mask-size 16 must be longer than the pool's prefix /16 (10.0.0.0/16)"
node_run cfg "$smods" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.0.0.1/16
check "a CIDR with host bits is refused" contains "$OUT" \
	"[ipam-cluster-pool] cluster-pool-ipv4-cidr: '10.0.0.1/16' is not a CIDR"
node_run cfg "$smods" --set ipam-cluster-pool.cluster-pool-ipv6-cidr=fd00::/64 \
	--set ipam-cluster-pool.cluster-pool-ipv6-mask-size=80
check "a node CIDR larger than the allocator takes is refused" contains "$OUT" \
	"cluster-pool-ipv6-mask-size /80 holds 2^48 addresses; the allocator takes at most 2^24"
node_run cfg "$smods" --set ipam-cluster-pool.node-cidr=10.1.0.0/24 \
	--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.0.0.0/16
check "node-cidr outside the pool is refused" contains "$OUT" \
	"node-cidr 10.1.0.0/24 is outside cluster-pool-ipv4-cidr 10.0.0.0/16"
node_run cfg "$smods" --set ipam-cluster-pool.allocation-strategy=fastest
check "an unknown allocation strategy is refused" contains "$OUT" \
	"'fastest' is not an allocation strategy (sequential or random)"

# ==== 2. node-cidr mode, no kvstore ============================================================
S=(--set ipam-cluster-pool.node-cidr=10.10.0.0/29) # .2-.6 usable: 5 addresses
node_start st "$smods" "${S[@]}"
expect "allocate: the first address, its CIDR and gateway" st POST '/v1/ipam?owner=c1/eth0&family=ipv4' 201 \
	'{"family":"ipv4","address":"10.10.0.2","cidr":"10.10.0.0/29","gateway":"10.10.0.1"}'
expect "the same owner asking again gets the same address" st POST '/v1/ipam?owner=c1/eth0&family=ipv4' 201 \
	'"address":"10.10.0.2"'
on_disk() { python3 "$top_srcdir/tests/lib/ipam_journal.py" "$@"; } # STATE-DIR [ADDRESS]
check "the allocation is on disk, holding its owner" test "$(on_disk "$(ndir st)/state/ipam-cluster-pool" 10.10.0.2)" = c1/eth0
expect "claim a given address" st POST '/v1/ipam/10.10.0.5?owner=c2/eth0' 201 '"address":"10.10.0.5"'
expect "claiming it again for the same owner is idempotent" st POST '/v1/ipam/10.10.0.5?owner=c2/eth0' 201 '"address":"10.10.0.5"'
expect "claiming it for another owner conflicts" st POST '/v1/ipam/10.10.0.5?owner=c3/eth0' 409 'taken by owner c2/eth0'
expect "an address outside the node CIDR is refused" st POST '/v1/ipam/10.10.1.5?owner=c3/eth0' 400 'outside the pool 10.10.0.0/29'
expect "the gateway cannot be claimed" st POST '/v1/ipam/10.10.0.1?owner=c3/eth0' 400 'the gateway'
code=$(req st POST '/v1/ipam?owner=c3/eth0&family=ipv6')
check "a family the node has no CIDR for is refused ($code)" test "${code:0:1}" = 4
got=""
for o in c3 c4 c5; do got="$got $(alloc st "$o/eth0")"; done
check "sequential allocation skips the claimed address" test "$got" = " 10.10.0.3 10.10.0.4 10.10.0.6"
expect "an exhausted node CIDR says so" st POST '/v1/ipam?owner=c6/eth0&family=ipv4' 503 'pool 10.10.0.0/29 is exhausted'
check "the summary counts them" test "$(summary st)" = "5/5 allocated from 10.10.0.0/29"
check "list shows every allocation and owner" test "$(allocations st | tr '\n' ' ')" = \
	"10.10.0.2=c1/eth0 10.10.0.3=c3/eth0 10.10.0.4=c4/eth0 10.10.0.5=c2/eth0 10.10.0.6=c5/eth0 "
expect "release one address" st DELETE /v1/ipam/10.10.0.5 200 '"released":["10.10.0.5"]'
expect "releasing it again: not allocated" st DELETE /v1/ipam/10.10.0.5 404
check "the released address is gone from the disk" bash -c '! python3 "$0" "$1" "$2"' "$top_srcdir/tests/lib/ipam_journal.py" "$(ndir st)/state/ipam-cluster-pool" 10.10.0.5
expect "release by owner" st DELETE '/v1/ipam?owner=c1/eth0' 200 '"released":["10.10.0.2"]'
check "the node CIDR is recorded" grep -qx "4 10.10.0.0/29" "$(ndir st)/state/ipam-cluster-pool/node-cidr"

# kill -9 while allocations are being made: every address answered before the
# kill is restored, and none is handed out again.
node_stop st TERM
S=(--set ipam-cluster-pool.node-cidr=10.10.16.0/20) # 4093 addresses
node_start st "$smods" "${S[@]}"
before=$(allocations st)
(
	i=0
	while a=$(curl -sf --max-time 2 --unix-socket "$(nsock st)" -X POST "http://x/v1/ipam?owner=burst-$i&family=ipv4"); do
		printf '%s\n' "$a" >>"$WORK/burst"
		i=$((i + 1))
	done
) &
burst=$!
# mid-burst: once a hundred allocations are answered
answered_past() { [ "$(wc -l <"$WORK/burst" 2>/dev/null || echo 0)" -gt "$1" ]; }
wait_for 20 answered_past 100 || true
node_stop st KILL || true
wait "$burst" || true
answered=$(python3 -c 'import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(d["addresses"][0]["address"] + "=" + d["owner"])' "$WORK/burst" | sort)
node_start st "$smods" "${S[@]}"
restored=$(allocations st)
missing=$(comm -23 <(sort <<<"$answered") <(sort <<<"$restored") | head -3)
check "kill -9 mid-burst: all $(wc -l <<<"$answered") answered allocations are restored" test -n "$answered" -a -z "$missing"
[ -z "$missing" ] || echo "  missing after restart: $missing"
check "nothing else appeared (at most the one being written)" \
	test "$(comm -13 <(sort <<<"$answered") <(sort <<<"$restored") | grep -c .)" -le 1
held=$(allocations st | cut -d= -f1)
new=""
for i in 1 2 3 4 5; do new="$new $(alloc st "after-$i")"; done
dup=$(comm -12 <(sort <<<"$held") <(tr ' ' '\n' <<<"$new" | grep . | sort))
check "allocating after the restart never returns an address held" test -z "$dup"
check "the owner map is restored too (same address for the same owner)" \
	test "$(alloc st burst-0)" = "$(grep '=burst-0$' <<<"$restored" | cut -d= -f1)"
node_stop st TERM

# The node CIDR changed: the old allocations are stale, kept, and releasable.
nfiles=$(on_disk "$(ndir st)/state/ipam-cluster-pool" | grep -c .)
node_start st "$smods" --set ipam-cluster-pool.node-cidr=10.10.32.0/24
check "old allocations outside the new node CIDR are reported as stale" \
	test "$(summary st)" = "0/253 allocated from 10.10.32.0/24 ($nfiles stale outside it)"
check "stale allocations are not listed" test -z "$(allocations st)"
check "the log names a stale allocation" grep -q "is outside node CIDR 10.10.32.0/24: kept in" "$(ndir st)/agent.log"
first=$(head -n 1 <<<"$restored" | cut -d= -f1)
expect "releasing a stale address removes it" st DELETE "/v1/ipam/$first" 200 "\"released\":[\"$first\"]"
check "it is gone from the disk" bash -c '! python3 "$0" "$1" "$2"' "$top_srcdir/tests/lib/ipam_journal.py" "$(ndir st)/state/ipam-cluster-pool" "$first"
node_stop st TERM

# Dual stack.
node_start ds "$smods" --set ipam-cluster-pool.node-cidr=10.10.1.0/24,fd00:10::/120
expect "dual stack: family=both gives one address per family" ds POST '/v1/ipam?owner=d1/eth0&family=both' 201 \
	'"addresses":[{"family":"ipv4","address":"10.10.1.2","cidr":"10.10.1.0/24","gateway":"10.10.1.1"},{"family":"ipv6","address":"fd00:10::2","cidr":"fd00:10::/120","gateway":"fd00:10::1"}]'
expect "dual stack: the same owner gets the same pair" ds POST '/v1/ipam?owner=d1/eth0' 201 '"10.10.1.2"'
expect "dual stack: ipv6 alone for that owner is its IPv6 address" ds POST '/v1/ipam?owner=d1/eth0&family=ipv6' 201 '"fd00:10::2"'
expect "dual stack: an IPv6 address can be claimed" ds POST '/v1/ipam/fd00:10::ff?owner=d2/eth0' 201 '"fd00:10::ff"'
same "dual stack: the summary names both CIDRs" "$(summary ds)" \
	"1/253 allocated from 10.10.1.0/24, 2/254 from fd00:10::/120"
expect "dual stack: release by owner frees both" ds DELETE '/v1/ipam?owner=d1/eth0' 200 '"released":["10.10.1.2","fd00:10::2"]'
check "dual stack: an IPv6 allocation on disk" test "$(on_disk "$(ndir ds)/state/ipam-cluster-pool" fd00:10::ff)" = d2/eth0
node_stop ds TERM

# ==== 3. node CIDRs through etcd ===============================================================
etcd_start ipam
KV=(--set "kvstore-etcd.endpoints=$ETCD_ENDPOINT" --set kvstore-etcd.health-interval=300ms
	--set kvstore-etcd.request-timeout=1s --set kvstore-etcd.dial-timeout=500ms
	--set ipam-cluster-pool.claim-retry=300ms)
claims() { etcdctl_run get --prefix "/fibril/ipam/cluster-pool/$1/" | paste - - | sort; }

# Three agents racing for the four /25 of a /23.
R=("${KV[@]}" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.99.0.0/23
	--set ipam-cluster-pool.cluster-pool-ipv4-mask-size=25 --set ipam-cluster-pool.lease-ttl=3s)
for n in race-a race-b race-c; do node_launch "$n" "$kmods" "${R[@]}"; done
for n in race-a race-b race-c; do node_wait "$n"; done
cidrs=$(for n in race-a race-b race-c; do node_cidr "$n"; done | sort)
check "3 racing agents get 3 node CIDRs" test "$(sort -u <<<"$cidrs" | grep -c '^10\.99\.[01]\.\(0\|128\)/25$')" = 3
check "each claim in etcd holds its node's name" test "$(claims 4 | grep -c 'race-')" = 3
for n in race-a race-b race-c; do
	c=$(node_cidr "$n")
	check "$n's claim key is ${c/\//_} = $n" grep -qx "/fibril/ipam/cluster-pool/4/${c/\//_}	$n" <(claims 4)
done

# Exhaustion: two /25 in a /24 for three agents, then one leaves.
X=("${KV[@]}" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.98.0.0/24
	--set ipam-cluster-pool.cluster-pool-ipv4-mask-size=25 --set ipam-cluster-pool.lease-ttl=3s)
for n in ex-a ex-b ex-c; do node_launch "$n" "$kmods" "${X[@]}"; done
for n in ex-a ex-b ex-c; do node_wait "$n"; done
loser="" winners=()
for n in ex-a ex-b ex-c; do
	if [ -z "$(node_cidr "$n")" ]; then loser=$n; else winners+=("$n"); fi
done
check "two of three agents hold the pool's two CIDRs" test -n "$loser" -a "${#winners[@]}" = 2 -a \
	"$(node_cidr "${winners[0]}")" != "$(node_cidr "${winners[1]}")"
loser=${loser:-ex-c}
why="no free node CIDR in 10.98.0.0/24 with mask /25: all 2 are taken"
code=$(healthz "$loser")
check "the third is not ready (healthz $code) and says why" test "$code" = 503
check "healthz names the exhausted pool" contains "$(body)" "ipam-cluster-pool (degraded: $why)"
check "its status summary says why" test "$(summary "$loser")" = "$why"
expect "it allocates nothing meanwhile" "$loser" POST '/v1/ipam?owner=x/eth0' 503 'no pool yet'
gone=$(node_cidr "${winners[0]}")
node_stop "${winners[0]}" TERM
check "when a holder leaves and its lease expires, the waiting agent takes its CIDR" \
	until_ok 15 '[ "$(node_cidr "$loser")" = "$gone" ]'
check "and turns ready" test "$(healthz "$loser")" = 200
node_stop "$loser" TERM
node_stop "${winners[1]}" TERM

# etcd down: the agents report it, then recover with the same CIDRs.
before=$(for n in race-a race-b race-c; do node_cidr "$n"; done)
etcd_stop
degraded() { [ "$(healthz race-a)" = 503 ] && grep -q 'kvstore-etcd (degraded' "$WORK/body"; }
check "etcd stopped: agents turn not ready naming kvstore-etcd" until_ok 10 degraded
[ "$(healthz race-a)" = 503 ] && echo "  $(body)"
check "pod allocation goes on from the held CIDR meanwhile" until_ok 0 'alloc race-a during-outage'
etcd_restart
check "etcd back: the agents are ready again" until_ok 20 '[ "$(healthz race-a)$(healthz race-b)$(healthz race-c)" = 200200200 ]'
after=$(for n in race-a race-b race-c; do node_cidr "$n"; done)
check "and keep their node CIDRs" test "$before" = "$after"
check "the claims are still in etcd" test "$(claims 4 | grep -c 'race-')" = 3

# kill -9 and restart at once: the claim is found under the node's name.
cidr_a=$(node_cidr race-a)
for o in k1 k2 k3; do alloc race-a "$o/eth0" >/dev/null; done
held=$(allocations race-a)
node_stop race-a KILL || true
node_start race-a "$kmods" "${R[@]}"
check "after kill -9 the agent gets the same node CIDR" test "$(node_cidr race-a)" = "$cidr_a"
check "found as already claimed under its name" grep -q \
	"node CIDR $cidr_a claimed in [0-9.]* ms (already claimed under this node's name" "$(ndir race-a)/agent.log"
check "and the same allocations" test "$(allocations race-a)" = "$held"
new=$(for o in k4 k5 k6; do alloc race-a "$o/eth0"; done)
check "allocating more never returns an address held" \
	test -z "$(comm -12 <(cut -d= -f1 <<<"$held" | sort) <(sort <<<"$new"))"

# The lease revoked behind the agent's back (kvstore.lease-lost): the same CIDR
# is claimed again under a new lease.
lease_of() {
	etcdctl_run get "$1" -w json | python3 -c 'import json, sys
print(json.load(sys.stdin).get("kvs", [{}])[0].get("lease", ""))'
}
cidr_b=$(node_cidr race-b)
key_b=/fibril/ipam/cluster-pool/4/${cidr_b/\//_}
lease_b=$(lease_of "$key_b")
etcdctl_run lease revoke "$(printf '%x' "$lease_b")" >/dev/null
check "lease revoked: the agent claims its CIDR again under a new lease" \
	until_ok 10 '[ -n "$(lease_of "$key_b")" ] && [ "$(lease_of "$key_b")" != "$lease_b" ]'
check "the same CIDR, under its name" test "$(node_cidr race-b)" = "$cidr_b" -a \
	"$(etcdctl_run get "$key_b" --print-value-only)" = race-b
check "the log says so" grep -q "node CIDR $cidr_b re-claimed under lease" "$(ndir race-b)/agent.log"

# Lost to another node meanwhile: no allocations, health names the holder;
# back once the key is free again.
cidr_c=$(node_cidr race-c)
key_c=/fibril/ipam/cluster-pool/4/${cidr_c/\//_}
lease_c=$(lease_of "$key_c")
etcdctl_run put "$key_c" intruder >/dev/null # now without a lease
etcdctl_run lease revoke "$(printf '%x' "$lease_c")" >/dev/null
lost() { [ "$(healthz race-c)" = 503 ] && grep -q "node CIDR $cidr_c is now claimed by intruder" "$WORK/body"; }
check "a CIDR taken by another node while the lease was lost: not ready, naming the holder" until_ok 10 lost
expect "and no allocations meanwhile" race-c POST '/v1/ipam?owner=y/eth0' 503
etcdctl_run del "$key_c" >/dev/null
check "once it is free again the agent takes it back" until_ok 10 '[ "$(healthz race-c)" = 200 ]'
check "the same CIDR" test "$(node_cidr race-c)" = "$cidr_c" -a \
	"$(etcdctl_run get "$key_c" --print-value-only)" = race-c
stop_all

# The lease expired while the agent was down: the state file brings the same CIDR back.
T=("${KV[@]}" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.97.0.0/22
	--set ipam-cluster-pool.cluster-pool-ipv4-mask-size=24 --set ipam-cluster-pool.lease-ttl=3s)
node_start ttl-z "$kmods" "${T[@]}" # takes 10.97.0.0/24, so ttl-a's is not the first free one
node_start ttl-a "$kmods" "${T[@]}"
cidr_t=$(node_cidr ttl-a)
check "ttl-a holds the second CIDR" test "$cidr_t" = 10.97.1.0/24
alloc ttl-a t1/eth0 >/dev/null
held=$(allocations ttl-a)
node_stop ttl-z TERM
node_stop ttl-a KILL || true
check "both leases expire and the claims are gone from etcd" until_ok 20 '[ -z "$(claims 4 | grep ttl-)" ]'
: >"$(ndir ttl-a)/agent.log"
node_start ttl-a "$kmods" "${T[@]}"
check "restarted after its lease expired, ttl-a claims its old CIDR again" test "$(node_cidr ttl-a)" = "$cidr_t"
check "with its allocations" test "$(allocations ttl-a)" = "$held"
check "the log times the claim and says where the CIDR came from" grep -q \
	"node CIDR 10.97.1.0/24 claimed in [0-9.]* ms (the last run's, from the state file; key ipam/cluster-pool/4/10.97.1.0_24" \
	"$(ndir ttl-a)/agent.log"
stop_all

# Dual stack through etcd: one claim per family.
D=("${KV[@]}" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.95.0.0/16
	--set ipam-cluster-pool.cluster-pool-ipv6-cidr=fd00:95::/104
	--set ipam-cluster-pool.cluster-pool-ipv6-mask-size=120)
node_start ds-kv "$kmods" "${D[@]}"
same "dual stack through etcd: one node CIDR per family" "$(node_cidr ds-kv)" "10.95.0.0/24 fd00:95::/120"
check "both claims are in etcd" test "$(claims 4 | grep -c 'ds-kv')$(claims 6 | grep -c 'ds-kv')" = 11
expect "dual stack through etcd: one address per family" ds-kv POST '/v1/ipam?owner=z/eth0&family=both' 201 \
	'"address":"10.95.0.2","cidr":"10.95.0.0/24","gateway":"10.95.0.1"},{"family":"ipv6","address":"fd00:95::2"'
stop_all

# ==== 4. valgrind: start, allocate, stop ========================================================
if [ -n "${SAN_CFLAGS:-}" ]; then
	echo "NOTE: sanitizer build: valgrind runs in the plain build"
elif ! command -v valgrind >/dev/null; then
	if [ "${CI:-}" = true ]; then fail "valgrind is not installed"; else echo "NOTE: no valgrind"; fi
else
	VG=(valgrind --leak-check=full --show-leak-kinds=definite,indirect
		--errors-for-leak-kinds=definite,indirect --error-exitcode=99 --log-file="$WORK/vg.%p")
	vg_case() { # vg_case NAME MODDIR ARGS...
		local name=$1 mods=$2 d
		shift 2
		d=$(ndir "$name")
		mkdir -p "$d"
		"$top_builddir/libtool" --mode=execute "${VG[@]}" "$AGENT" --set "agent.module-dir=$mods" \
			--set "agent.socket=$d/fibril.sock" --set "agent.state-dir=$d/state" \
			--set "agent.run-dir=$d/run" --set "agent.bpffs-dir=$BPFFS_DIR/$name" \
			--set "agent.node-name=$name" --set agent.start-timeout=60s "$@" >"$d/agent.log" 2>&1 &
		NODE_PID[$name]=$!
		wait_alive "${NODE_PID[$name]}" 30 test -S "$d/fibril.sock" || true
		alloc "$name" vg1/eth0 >/dev/null
		req "$name" POST '/v1/ipam/10.96.0.200?owner=vg2/eth0' >/dev/null
		req "$name" GET /v1/ipam >/dev/null
		req "$name" GET /v1/status >/dev/null
		req "$name" DELETE '/v1/ipam?owner=vg1/eth0' >/dev/null
		local rc=0
		node_stop "$name" TERM || rc=$?
		check "valgrind, $name: no leaks, no errors (exit $rc)" test "$rc" = 0
		[ "$rc" = 0 ] || { grep -h -A20 "ERROR SUMMARY\|definitely lost" "$WORK"/vg.* | head -60; tail "$d/agent.log"; }
		rm -f "$WORK"/vg.*
	}
	vg_case vg-static "$smods" --set ipam-cluster-pool.node-cidr=10.96.0.0/24
	vg_case vg-kv "$kmods" "${KV[@]}" --set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.96.0.0/16
fi

etcd_stop
finish
