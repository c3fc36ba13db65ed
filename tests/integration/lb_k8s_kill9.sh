#!/usr/bin/env bash
# tests/integration/lb_k8s_kill9.sh - Services from Kubernetes across a
# kill -9 (issue 23, as root). The agent dies hard with N Services
# programmed (default 2,000) and starts again: once with the lists
# answered at once, once with the EndpointSlice list 3 s late, and once
# killed again while that slow list runs. The promise: while it restarts,
# lists and syncs, connect() to the clusterIPs of 200 Services spread over
# all N (socket LB, a backend that answers behind each) is never refused,
# and every service and backend ID is the one it had; the same prober
# with no restart refuses nothing (the floor). It is
# tests/bench/bench_lb_k8s_restart.sh at a smaller size with one restart
# of each kind, its figures asserted (PASS/FAIL lines).
: "${top_srcdir:?run through make check (top_srcdir unset)}"
export LB_RESTART_SERVICES=${LB_K8S_KILL9_SERVICES:-2000} LB_RESTART_RUNS=1 LB_RESTART_CHECK=1 \
	LB_RESTART_REF_S=3 LB_RESTART_SLOW_LIST=3 LB_RESTART_AFTER=2
exec bash "$top_srcdir/tests/bench/bench_lb_k8s_restart.sh"
