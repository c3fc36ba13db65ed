#!/usr/bin/env bash
# tests/integration/lb_udp_backend_removed.sh - issue 23: a UDP NodePort
# flow whose backend is removed moves to a backend still serving, as
# kube-proxy's clearing of a removed UDP endpoint's conntrack entries does,
# instead of staying on the removed one for as long as the client keeps
# sending (the lb_ct entry was refreshed by every datagram: 103 of 103
# flows stuck after 6 s). The topology of tests/lib/lbtopo.sh with two
# backends: a client outside the node sends a datagram every 50 ms from
# one socket to a NodePort served by b0; b0 is replaced by b1 (upsert) -> the
# same socket's datagrams are answered by b1 within 5 s; the service
# deleted and upserted again with b0 -> answered by b0 again (the delete
# purges too); a TCP service's flows are left alone.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "run as root (network namespaces, BPF, cgroups)"
for tool in ip nsenter python3 curl; do
	command -v "$tool" >/dev/null || skip_or_fail "$tool is not installed"
done
LB_BACKENDS=2
. "$top_srcdir/tests/lib/lbtopo.sh"

start_agent_netns "$NODE" "$mods" --set "lb.cgroup=$CG" --set lb.nodeport-devices=ext0 ||
	{ fail "the agent starts"; finish; }
wait_alive "$AGENT_PID" 60 agent_healthy || { fail "the agent is healthy"; finish; }

FE=192.168.212.1:30053
upsert '{"frontend":"'$FE'","type":"NodePort","protocol":"UDP","backends":'"$(be_json active 0)"'}'
check "a UDP NodePort served by b0" test "$URC" = 0

# one socket, a datagram every 50 ms until $WORK/stop exists; each answer
# (or "-" for none within 0.3 s) appended to $WORK/answers
ip netns exec "$OUTSIDE" python3 -c '
import os, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.3)
with open(sys.argv[3], "a", buffering=1) as out:
    while not os.path.exists(sys.argv[4]):
        s.sendto(b"hello\n", (sys.argv[1], int(sys.argv[2])))
        try:
            out.write(s.recvfrom(256)[0].decode().strip() + "\n")
        except OSError:
            out.write("-\n")
        time.sleep(0.05)  # sleep: the pace of a client that keeps sending
' 192.168.212.1 30053 "$WORK/answers" "$WORK/stop" &
BG_PIDS+=($!)
answered_by() { [ "$(tail -n 1 "$WORK/answers" 2>/dev/null)" = "$1" ]; }
check "the client's flow is answered by b0" wait_for 10 answered_by b0

upsert '{"frontend":"'$FE'","type":"NodePort","protocol":"UDP","backends":'"$(be_json active 1)"'}'
check "b0 replaced by b1: the same socket's datagrams reach b1 within 5 s" wait_for 5 answered_by b1
check "... and stay there" wait_for 2 sh -c "[ \"\$(tail -n 5 '$WORK/answers' | sort -u)\" = b1 ]"

ID=$(jq_ "$UOUT" 'j["id"]')
fib service delete "$ID" >/dev/null
upsert '{"frontend":"'$FE'","type":"NodePort","protocol":"UDP","backends":'"$(be_json active 0)"'}'
check "the service deleted and made again with b0: the flow reaches b0 within 5 s" \
	wait_for 5 answered_by b0
touch "$WORK/stop"

# a TCP service's flows are not the purge's: a long connection survives
# the removal of another backend
upsert '{"frontend":"192.168.212.1:30080","type":"NodePort","backends":'"$(be_json active 0 1)"'}'
nsenter --net="/run/netns/$OUTSIDE" python3 "$top_srcdir/tests/lib/lbnet.py" hold 192.168.212.1 30080 "$WORK/hold" &
BG_PIDS+=($!)
check "a held TCP connection through the NodePort" wait_for 10 grep -qs "^ok" "$WORK/hold"
upsert '{"frontend":"'$FE'","type":"NodePort","protocol":"UDP","backends":'"$(be_json active 1)"'}'
lines=$(wc -l <"$WORK/hold")
check "... goes on after the UDP purge" wait_for 5 sh -c "[ \$(wc -l <'$WORK/hold') -gt $((lines + 5)) ]"
check "... without an error" test "$(grep -c '^error' "$WORK/hold")" = 0
finish
