#!/usr/bin/env bash
# tests/security/hubble_grpc_hostile.sh - the attack: a local client of
# hubble-lite's gRPC socket sends bytes that are not HTTP/2, a garbage
# HTTP/2 frame, a 1 MiB request message, messages that are not protobuf,
# calls to methods that do not exist, four times grpc-max-connections
# connections, and a connection that never speaks. The promise: each gets
# an error or is closed (a too-large message RESOURCE_EXHAUSTED naming the
# limit, a bad message INVALID_ARGUMENT, an unknown method UNIMPLEMENTED,
# connections past the limit and idle ones closed), nothing grows without
# bound, and the agent lives and answers afterwards.
. "$top_srcdir/tests/lib/common.sh"

[ -f "$top_builddir/.libs/hubble-lite.so" ] || skip_or_fail "hubble-lite.so is not built"
/usr/bin/python3 -c 'import grpc' 2>/dev/null || skip_or_fail "python3-grpcio is not installed (scripts/deps.sh)"
trap cleanup EXIT INT TERM
mods=$WORK/mods
mkdir -p "$mods"
install -m 0644 "$top_builddir/.libs/hubble-lite.so" "$mods/"
start_agent "$mods" --set agent.modules=hubble-lite --set "hubble-lite.grpc-socket=$WORK/hubble.sock" \
	--set hubble-lite.grpc-max-connections=8 --set hubble-lite.grpc-idle-timeout=2s ||
	{ fail "the agent starts with hubble-lite"; finish; exit 1; }
RC=0
/usr/bin/python3 "$top_srcdir/tests/security/hubble_grpc_hostile.py" "$WORK/hubble.sock" 8 || RC=$?
check "the hostile clients got errors or were closed (exit $RC)" test "$RC" = 0
check "the agent is alive after them" kill -0 "$AGENT_PID"
check "and its API answers" agent_healthy
finish
