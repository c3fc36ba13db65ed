#!/usr/bin/env bash
# tests/security/api_bind.sh - the attack: a pod connects to the node's IP on
# the port of `[agent] api-tcp-listen = 127.0.0.1:PORT` (unauthenticated:
# flows, /metrics), which libwebsockets bound to every address, IPv4 and
# IPv6. The promise: the TCP listener binds exactly the configured address
# (127.0.0.1 or [::1]): `ss -ltn` shows that address, a connection from a
# pod's namespace to the node's address is refused, the loopback one is
# answered; a listen address that is not an IP literal is refused at start.
. "$top_srcdir/tests/lib/common.sh"

NODE=fib-bind-node-$$
POD=fib-bind-pod-$$
bind_cleanup() {
	ip netns del "$POD" 2>/dev/null || true
	ip netns del "$NODE" 2>/dev/null || true
}
trap 'rc=$?; set +e; bind_cleanup; cleanup "$rc"' EXIT INT TERM

ip netns add "$NODE"
ip netns add "$POD"
ip -n "$NODE" link set lo up
ip -n "$POD" link set lo up
ip -n "$NODE" link add veth-pod type veth peer name eth0 netns "$POD"
ip -n "$NODE" addr add 10.77.0.1/24 dev veth-pod
ip -n "$NODE" addr add fd77::1/64 dev veth-pod nodad
ip -n "$POD" addr add 10.77.0.2/24 dev eth0
ip -n "$POD" addr add fd77::2/64 dev eth0 nodad
ip -n "$NODE" link set veth-pod up
ip -n "$POD" link set eth0 up

mods=$WORK/mods
mkdir -p "$mods"
port=$((20000 + $$ % 20000))

# in_ns NS URL : the HTTP status of GET URL from namespace NS ("000": no answer)
in_ns() { ip netns exec "$1" curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$2" 2>/dev/null || true; }
listening() { ip netns exec "$NODE" ss -Hltn "sport = :$port" | awk '{print $4}' | sort | tr '\n' ' '; }

# the pod reaches the node (the path the attack takes is there)
check "the pod reaches the node's address (ICMP)" ip netns exec "$POD" ping -c1 -W2 10.77.0.1 >/dev/null

for spec in "127.0.0.1:$port" "[::1]:$port"; do
	start_agent_netns "$NODE" "$mods" --set "agent.api-tcp-listen=$spec"
	await "the listener is up ($spec)" 5 bash -c "ip netns exec $NODE ss -Hltn 'sport = :$port' | grep -q ."
	got=$(listening)
	check "ss -ltn shows exactly $spec (got: $got)" test "$got" = "$spec "
	if [ "$spec" = "127.0.0.1:$port" ]; then
		check "loopback is answered ($spec)" test "$(in_ns "$NODE" "http://127.0.0.1:$port/livez")" = 200
		check "[::1] is not served ($spec)" test "$(in_ns "$NODE" "http://[::1]:$port/livez")" = 000
	else
		check "loopback is answered ($spec)" test "$(in_ns "$NODE" "http://[::1]:$port/livez")" = 200
		check "127.0.0.1 is not served ($spec)" test "$(in_ns "$NODE" "http://127.0.0.1:$port/livez")" = 000
	fi
	check "a pod cannot reach the listener on the node's IPv4 address ($spec)" \
		test "$(in_ns "$POD" "http://10.77.0.1:$port/metrics")" = 000
	check "a pod cannot reach the listener on the node's IPv6 address ($spec)" \
		test "$(in_ns "$POD" "http://[fd77::1]:$port/metrics")" = 000
	stop_agent
done

# not an address: an interface name or a host name would bind what it resolves to
for spec in "localhost:$port" "eth0:$port" "0:$port"; do
	rm -f "$WORK/fibril.sock"
	mapfile -t args < <(agent_args "$mods")
	RC=0
	OUT=$(ip netns exec "$NODE" timeout 10 "$AGENT" "${args[@]}" --set "agent.api-tcp-listen=$spec" 2>&1) || RC=$?
	check "api-tcp-listen=$spec is refused at start (exit 1)" test "$RC" = 1
	check "the refusal names the setting ($spec)" contains "$OUT" "api-tcp-listen '$spec'"
done
finish
