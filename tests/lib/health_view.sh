# shellcheck shell=bash
# tests/lib/health_view.sh - checks over a node's GET /v1/health for the
# health module's tests (source after tests/lib/multinode.sh).
#
#   health_is NODE PYTHON-EXPR   EXPR over j = the node's GET /v1/health,
#                                with peer(name) and tgt(name, target) as
#                                shortcuts; prints the document when false
#                                (unless QUIET is set)
health_is() {
	local doc
	doc=$(mn_api "$1" http://x/v1/health) || true
	python3 -c '
import json, sys
j = json.loads(sys.argv[1])
def peer(n): return next(p for p in j["peers"] if p["name"] == n)
def tgt(n, t): return peer(n)["targets"][t]
sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' "$doc" "$2" 2>/dev/null && return 0
	[ -z "${QUIET:-}" ] && echo "  $1: ${doc:0:900}"
	return 1
}
