#!/usr/bin/env bash
# tests/integration/nodes_lease_retry.sh - an agent that starts while etcd
# does not answer (issue 23: "module nodes failed to start: node registry:
# granting the registry lease: Connection timed out", in tunnel mode under
# load). etcd is paused with SIGSTOP (its socket accepts, nothing answers:
# every request times out) at two moments of a start and resumed with
# SIGCONT a few [nodes] retry periods later:
#   1. before the agent starts: the kvstore module's own start waits;
#   2. right after the kvstore module connected, while the datapath still
#      verifies its programs (a first start: the bpffs dir is empty), so
#      the nodes module's registry lease request is the one that times out.
# The promise: a start fails only for what retrying cannot fix. The agent
# stays up, logs the failed step "(retrying)", and once etcd answers again
# it becomes ready (/v1/healthz 200) with its node record in the registry
# under a lease, without being restarted.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/multinode.sh"

MODS="kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath nodes"
# shellcheck disable=SC2086
mn_cluster_up 1 $MODS
AGENT_ARGS=(--set ipam-cluster-pool.cluster-pool-ipv4-cidr=10.205.0.0/16
	--set nodes.routing-mode=tunnel --set nodes.retry=300ms --set nodes.lease-ttl=30s
	--set kvstore-etcd.request-timeout=1s --set datapath.masquerade=false)
LOG=${MN_DIR[n1]}/agent.log
RECORD=/fibril/state/nodes/v1/n1
ETCD_STOPPED=""
mn_test_cleanup() { [ -z "$ETCD_STOPPED" ] || kill -CONT "$MN_ETCD_PID" 2>/dev/null; }

etcd_stop() { kill -STOP "$MN_ETCD_PID" && ETCD_STOPPED=1; }
etcd_cont() { kill -CONT "$MN_ETCD_PID" && ETCD_STOPPED=""; }
# log_since LINE PATTERN : the agent's log from line LINE on matches PATTERN
log_since() { tail -n +"$1" "$LOG" | grep -Eq -- "$2"; }
log_lines() { if [ -f "$LOG" ]; then wc -l <"$LOG"; else echo 0; fi; }
record_leased() { # the node's record is in etcd, held by a lease
	mn_etcdctl get "$RECORD" -w json 2>/dev/null |
		python3 -c 'import json, sys; kv = json.load(sys.stdin).get("kvs") or []; sys.exit(0 if kv and int(kv[0].get("lease", 0)) else 1)'
}
alive() { kill -0 "${MN_PID[n1]}" 2>/dev/null; }
# an agent that is up but not ready
up_not_ready() { alive && ! mn_healthy n1; }
# after SIGCONT: still the same process, ready, its record leased
ready_after() { # WHAT
	check "$1: the agent becomes ready once etcd answers again (no restart)" \
		wait_alive "${MN_PID[n1]}" 60 mn_healthy n1
	check "$1: its node record is in the registry under a lease" wait_for 20 record_leased
	alive || tail -20 "$LOG"
}

# ---- 1. etcd paused before the agent starts -------------------------------------------------
etcd_stop
from=$(($(log_lines) + 1))
MN_START_NOWAIT=1 mn_agent_start n1 "$WORK/mods" "${AGENT_ARGS[@]}"
check "1: with etcd paused the kvstore start waits, retrying (the log says why)" \
	wait_alive "${MN_PID[n1]}" 30 log_since "$from" 'kvstore-etcd.*(unreachable|timed out|retrying)'
check "1: meanwhile the agent is up and not ready" up_not_ready
etcd_cont
ready_after 1
mn_agent_kill n1

# ---- 2. etcd paused between the kvstore's connection and the registry lease -----------------
# A fresh bpffs dir: the datapath verifies its programs again (on a
# worker, a second or more), the window in which the lease is requested
# after the kvstore module connected.
rm -rf "/sys/fs/bpf/$MN_TAG-n1"
from=$(($(log_lines) + 1))
MN_START_NOWAIT=1 mn_agent_start n1 "$WORK/mods" "${AGENT_ARGS[@]}"
if wait_alive "${MN_PID[n1]}" 30 log_since "$from" 'kvstore-etcd.*connected to'; then
	before_stop=$(tail -n +"$from" "$LOG")
	etcd_stop
	pass "2: the kvstore module connected; etcd paused"
else
	fail "2: the kvstore module connected; etcd paused"
fi
# the nodes module logs its node ("node n1 (IPv4 ...") as it starts: not yet
check "2: the window was hit: the nodes module had not started when etcd was paused" \
	bash -c '! grep -q "nodes.*node n1 (IPv4" <<<"$1"' _ "${before_stop:-}"
check "2: the lease request times out and is retried (the log says so)" \
	wait_for 60 log_since "$from" 'node registry: granting the registry lease: .*\(retrying\)'
check "2: the nodes module did not fail its start" bash -c '! tail -n +"$1" "$2" | grep -q "module nodes failed"' _ "$from" "$LOG"
check "2: meanwhile the agent is up and not ready" up_not_ready
# a few retry periods (300 ms) with etcd paused: each one times out again
from2=$(($(log_lines) + 1))
check "2: the lease is requested again while etcd stays paused" \
	wait_alive "${MN_PID[n1]}" 20 log_since "$from2" 'granting the registry lease: .*\(retrying\)'
etcd_cont
ready_after 2
mn_agent_kill n1 TERM
[ "$FAILED" -eq 0 ] || tail -40 "$LOG"
finish
