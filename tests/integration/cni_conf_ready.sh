#!/usr/bin/env bash
# tests/integration/cni_conf_ready.sh - what a node sees while the agent
# starts (issue 25): the CNI configuration appears only once the agent is
# ready ([agent] write-cni-conf-when-ready; before it, a runtime would hand
# pods to an agent that cannot serve them), from read-cni-conf byte for byte
# or a conflist naming the agent's socket; a bad read-cni-conf is refused
# with its path before anything starts and nothing is written; while a
# module's start is pending, systemd's STATUS= names the module and what it
# reports it waits for.
. "$top_srcdir/tests/lib/common.sh"

grep -q '^#define HAVE_LIBSYSTEMD 1' "$top_builddir/config.h" ||
	skip_or_fail "built without libsystemd (apt-get install libsystemd-dev)"
mods=$WORK/mods
build_module "$mods" alpha
netd=$WORK/net.d
mkdir -p "$netd"
dest=$netd/05-fibril.conflist
notify_sock=$WORK/notify.sock
events=$WORK/notify.events

/usr/bin/python3 - "$notify_sock" "$events" "$dest" <<'PY' &
import os, socket, sys, time
path, out, dest = sys.argv[1:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(30)
with open(out, "w", buffering=1) as f:
    while True:
        try:
            msg = s.recv(4096).decode()
        except socket.timeout:
            break
        # whether the CNI configuration existed when this message came
        f.write(("conf " if os.path.exists(dest) else "noconf ") + msg.replace("\n", " | ") + "\n")
        if "STOPPING=1" in msg:
            break
PY
listener=$!
wait_alive "$listener" 5 test -S "$notify_sock" || true

# a start that waits 5 s for its module, which says what for (started by
# hand: start_agent returns only once the API listens, after READY)
mapfile -t args < <(agent_args "$mods")
NOTIFY_SOCKET=$notify_sock "$AGENT" "${args[@]}" --set alpha.async-start=5s \
	--set alpha.degraded="waiting for the test's etcd at 192.0.2.1:2379" \
	--set agent.write-cni-conf-when-ready="$dest" >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
saw_early=no
while kill -0 "$AGENT_PID" 2>/dev/null && ! agent_healthy; do
	[ -e "$dest" ] && saw_early=yes
	sleep 0.05 # sleep: a poll interval inside the start (about 5 s)
done
check "no CNI configuration while the agent is not ready" test "$saw_early" = no
check "the agent becomes ready" wait_for 10 agent_healthy
check "the CNI configuration is written once it is ready" wait_for 5 test -s "$dest"
check "  a conflist of fibril-cni naming this agent's socket" /usr/bin/python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))
p = c["plugins"][0]
assert c["cniVersion"] and c["name"] == "fibril" and p["type"] == "fibril-cni", c
assert p["agent-socket"] == sys.argv[2], p' "$dest" "$WORK/fibril.sock"
check "  mode 0644, no temp file left" bash -c '[ "$(stat -c %a "$1")" = 644 ] && [ "$(ls -A "$2" | wc -l)" = 1 ]' _ "$dest" "$netd"
stop_agent TERM
wait "$listener" || true
check "STATUS= during the pending start names the module and what it waits for" \
	grep -q 'noconf STATUS=starting module alpha: waiting [0-9]* s: waiting for the test.s etcd at 192.0.2.1:2379' "$events"
# the order is the agent's: READY=1 is sent, then the file written (the
# listener may read the datagram after the file appeared, so its view of
# the file is no proof); the agent logs "agent ready" once READY=1 is
# sent and "CNI configuration written" once the file is in place
ready_first() {
	local r c
	r=$(grep -n 'agent ready in' "$WORK/agent.log" | head -n 1 | cut -d: -f1)
	c=$(grep -n 'CNI configuration written to' "$WORK/agent.log" | head -n 1 | cut -d: -f1)
	[ -n "$r" ] && [ -n "$c" ] && [ "$r" -lt "$c" ] && grep -q 'READY=1' "$events"
}
check "READY=1 came before the CNI configuration" ready_first

# read-cni-conf: written byte for byte
rm -f "$dest"
printf '{ "cniVersion": "1.0.0", "name": "mine",\n  "plugins": [ {"type": "fibril-cni"}, {"type": "bandwidth"} ] }\n' >"$WORK/source.conflist"
start_agent "$mods" --set agent.write-cni-conf-when-ready="$dest" --set agent.read-cni-conf="$WORK/source.conflist"
check "read-cni-conf is written byte for byte" wait_for 10 cmp -s "$WORK/source.conflist" "$dest"
stop_agent TERM

# a bad source: refused before the start, nothing written
rm -f "$dest"
printf '{"name": "no version", "plugins": []}\n' >"$WORK/bad.conflist"
run_agent "$mods" --set agent.write-cni-conf-when-ready="$dest" --set agent.read-cni-conf="$WORK/bad.conflist"
check "a read-cni-conf without cniVersion is refused (exit $RC)" test "$RC" = 1
check "  with one line naming the file and what is wrong" contains "$OUT" \
	"fibril-agent: [agent] read-cni-conf $WORK/bad.conflist: not a CNI network configuration: no \"cniVersion\""
check "  and nothing is written" test ! -e "$dest"
run_agent "$mods" --set agent.read-cni-conf="$WORK/source.conflist"
check "read-cni-conf without write-cni-conf-when-ready is refused" contains "$OUT" \
	"[agent] read-cni-conf is set but write-cni-conf-when-ready is not"
finish
