#!/usr/bin/env bash
# tests/integration/crd_apiserver.sh - the test API server behaves as CRD
# mode needs the real one to (tests/integration/crd_apiserver.py does the
# checks): racing creates of one name end with one object and 409
# AlreadyExists for the rest, racing read-modify-writes lose no update (409
# Conflict on a stale resourceVersion), a custom resource is never updated
# without a resourceVersion, stale delete preconditions are refused,
# ownerReferences are garbage-collected when every owner is gone (Orphan
# keeps the dependent, a same-name owner with a new uid does not adopt it),
# racing Lease acquisitions end with one holder, and a CRD marked missing
# answers 404 and leaves discovery.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/k8s/apiserver.sh"
k8s_require

k8s_start || { fail "the API server starts"; finish; exit 1; }
if python3 "$top_srcdir/tests/integration/crd_apiserver.py" "$K8S_URL" "$K8S_TOKEN" "$K8S_CA"; then
	pass "the test API server races, refuses and collects as the real one"
else
	fail "the test API server races, refuses and collects as the real one"
	tail -20 "$WORK/k8s/server.log"
fi
k8s_stop
finish
