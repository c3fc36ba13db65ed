#!/usr/bin/env bash
# tests/integration/lb_batch.sh - many services in one request (issue 23):
# `fibril service apply -f FILE` (PUT /v1/service with a JSON array) to an
# agent with the lb module in a netns of its own (as root; API only, no
# socket hooks). Promises: JSON lines and a JSON array are applied whole;
# an entry with a bad field, or a frontend twice in the batch, is a 400
# naming its index and field and nothing changes (an earlier entry's
# change is not applied either); a batch the backend map cannot hold
# midway (backend-map-max 16) is refused and the entries applied before
# the failing one are put back as they were.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/node.sh"

node_require "network namespaces, BPF" lb
node_netns_up flbt
node_modules lb
start_agent_netns "$NODE" "$mods" --set lb.socket-lb=false --set lb.backend-map-max=16 ||
	{ fail "the agent starts"; finish; }

fib() { "$CLI" --socket "$WORK/fibril.sock" "$@"; }
# svc PORT BACKEND_HOST... -> one service line: 10.96.0.1:PORT, backends HOST:8080
svc() {
	local port=$1 bes="" h
	shift
	for h in "$@"; do bes="$bes${bes:+,}{\"address\":\"$h:8080\",\"state\":\"active\"}"; done
	printf '{"frontend":"10.96.0.1:%s","protocol":"TCP","backends":[%s]}\n' "$port" "$bes"
}
# the table as "FRONTEND=BACKEND,BACKEND ..." sorted
table() {
	api http://x/v1/service | python3 -c '
import json, sys
print(" ".join(sorted(s["frontend"] + "=" + ",".join(sorted(b["address"] for b in s["backends"]))
      for s in json.load(sys.stdin)["services"])))'
}

# ---- JSON lines, then a JSON array ---------------------------------------------------------------
{ svc 81 10.1.0.1; echo; svc 82 10.1.0.2 10.1.0.3; svc 83 10.1.0.4; } >"$WORK/lines.json"
check "apply -f of JSON lines applies them all" output_is "Applied 3 services" fib service apply -f "$WORK/lines.json"
{ echo "["; svc 84 10.1.0.5; echo ","; svc 81 10.1.0.6; echo "]"; } >"$WORK/array.json"
check "apply -f of a JSON array applies it (a new frontend and a changed one)" \
	output_is "Applied 2 services" fib service apply -f "$WORK/array.json"
want="10.96.0.1:81=10.1.0.6:8080 10.96.0.1:82=10.1.0.2:8080,10.1.0.3:8080 10.96.0.1:83=10.1.0.4:8080 10.96.0.1:84=10.1.0.5:8080"
check "the table holds the four services as applied" output_is "$want" table
echo "  table: $(table)"

# ---- a bad entry: 400 naming it, nothing changes -------------------------------------------------
{ svc 81 10.1.0.9; svc 85 10.1.0.7; echo '{"frontend":"10.96.0.1:86","protocol":"TCP","backends":[{"address":"10.1.0.8:99999"}]}'; } >"$WORK/bad.json"
out=$(fib service apply -f "$WORK/bad.json" 2>&1) && rc=0 || rc=$?
echo "  bad entry: rc $rc: $out"
check "a bad entry fails the apply" test "$rc" != 0
check "the error names the entry's index and field" contains "$out" "services[2]"
check "the error names the field" contains "$out" "backends[0]"
check "nothing of that batch was applied (services[0]'s change neither)" output_is "$want" table
{ svc 87 10.1.0.7; svc 88 10.1.0.8; svc 87 10.1.0.9; } >"$WORK/dup.json"
out=$(fib service apply -f "$WORK/dup.json" 2>&1) && rc=0 || rc=$?
echo "  duplicate: rc $rc: $out"
check "a frontend twice in a batch is refused naming the second" contains "$out" "services[2].frontend"
check "nothing of the duplicate batch was applied" output_is "$want" table
printf '%s\n' "$(svc 89 10.1.0.7)" 'not json' >"$WORK/notjson.json"
out=$(fib service apply -f "$WORK/notjson.json" 2>&1) && rc=0 || rc=$?
check "a line that is not a JSON object is refused naming the line" contains "$out" "line 2"

# ---- the backend map full midway: the applied entries are put back --------------------------------
# 5 backends in use of 16; each entry brings 4 new: the 4th entry cannot be
# programmed (5 + 4 * 3 = 17 > 16 before it), after services[0] changed 81
{ svc 81 10.2.0.1 10.2.0.2 10.2.0.3 10.2.0.4; svc 90 10.2.1.1 10.2.1.2 10.2.1.3 10.2.1.4
  svc 91 10.2.2.1 10.2.2.2 10.2.2.3 10.2.2.4; svc 92 10.2.3.1 10.2.3.2 10.2.3.3 10.2.3.4; } >"$WORK/full.json"
out=$(fib service apply -f "$WORK/full.json" 2>&1) && rc=0 || rc=$?
echo "  map full: rc $rc: $out"
check "a batch the backend map cannot hold fails" test "$rc" != 0
check "the error names the entry that failed" contains "$out" "services[3]"
check "the entries applied before it are put back as they were" output_is "$want" table
echo "  table: $(table)"
check "the agent is still healthy" agent_healthy
finish
