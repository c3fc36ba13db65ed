#!/usr/bin/env bash
# tests/security/api_remote_auth.sh - the attack: anyone who reaches a node's
# address reads every flow of the node and its /metrics (the shipped
# DaemonSet listened on 0.0.0.0:9876 with hostNetwork, no authentication).
# The promise: remote readers are served by `[agent] api-remote-listen`
# only, over TLS with a client certificate signed by
# `api-remote-client-ca` (as Hubble's relay does): without a certificate,
# with one of another CA, or in plain HTTP, a pod gets nothing; with one it
# reads /metrics and the flows, and nothing else of the API (no
# /v1/status, /v1/config, no write); the unauthenticated listener stays on
# loopback, out of the pod's reach.
. "$top_srcdir/tests/lib/common.sh"

command -v openssl >/dev/null || skip_or_fail "openssl is not installed"
NODE=fib-remote-node-$$
POD=fib-remote-pod-$$
remote_cleanup() {
	ip netns del "$POD" 2>/dev/null || true
	ip netns del "$NODE" 2>/dev/null || true
}
trap 'rc=$?; set +e; remote_cleanup; cleanup "$rc"' EXIT INT TERM

ip netns add "$NODE"
ip netns add "$POD"
ip -n "$NODE" link set lo up
ip -n "$POD" link set lo up
ip -n "$NODE" link add veth-pod type veth peer name eth0 netns "$POD"
ip -n "$NODE" addr add 10.78.0.1/24 dev veth-pod
ip -n "$POD" addr add 10.78.0.2/24 dev eth0
ip -n "$NODE" link set veth-pod up
ip -n "$POD" link set eth0 up

# the certificates: a CA for the clients, the server's (for 10.78.0.1), a
# client's signed by the CA, and one signed by a CA of the attacker's
. "$top_srcdir/tests/lib/pki.sh"
ca clients-ca
ca server-ca
ca rogue-ca
leaf server server-ca IP:10.78.0.1
leaf reader clients-ca
leaf intruder rogue-ca

mods=$WORK/mods
mkdir -p "$mods"
install -m 0644 "$top_builddir/.libs/hubble-lite.so" "$mods/hubble-lite.so"
TPORT=$((20000 + $$ % 20000))
RPORT=$((TPORT + 1))
start_agent_netns "$NODE" "$mods" --set "agent.api-tcp-listen=127.0.0.1:$TPORT" \
	--set "agent.api-remote-listen=10.78.0.1:$RPORT" --set "agent.api-remote-cert=$PKI/server.crt" \
	--set "agent.api-remote-key=$PKI/server.key" --set "agent.api-remote-client-ca=$PKI/clients-ca.crt" ||
	{ fail "the agent starts with api-remote-listen"; finish; exit 1; }
await "the remote listener is up" 5 bash -c "ip netns exec $NODE ss -Hltn 'sport = :$RPORT' | grep -q ."

# from_pod URL [curl args] : the HTTP status a pod gets ("000": nothing)
from_pod() {
	local url=$1
	shift
	ip netns exec "$POD" curl -s -o "$WORK/body" -w '%{http_code}' --max-time 5 "$@" "$url" 2>/dev/null || true
}
R=https://10.78.0.1:$RPORT
AUTH=(--cacert "$PKI/server-ca.crt" --cert "$PKI/reader.crt" --key "$PKI/reader.key")

check "with a client certificate of the configured CA, a pod reads /metrics" \
	test "$(from_pod "$R/metrics" "${AUTH[@]}")" = 200
check "... and it is Prometheus text" grep -q '^fibril_uptime_seconds' "$WORK/body"
check "with it, a pod reads the flows (GET /v1/flows)" test "$(from_pod "$R/v1/flows?last=5" "${AUTH[@]}")" = 200
check "... a flow answer" grep -q '"flows":' "$WORK/body"
check "without a client certificate: nothing" test "$(from_pod "$R/metrics" --cacert "$PKI/server-ca.crt")" = 000
check "without a client certificate: no flows" test "$(from_pod "$R/v1/flows?last=5" --cacert "$PKI/server-ca.crt")" = 000
check "with a certificate of another CA: nothing" \
	test "$(from_pod "$R/metrics" --cacert "$PKI/server-ca.crt" --cert "$PKI/intruder.crt" --key "$PKI/intruder.key")" = 000
check "plain HTTP on the remote listener: nothing" test "$(from_pod "http://10.78.0.1:$RPORT/metrics")" = 000
for path in /v1/status /v1/config /v1/modules /v1/ipam; do
	check "GET $path is not served on the remote listener (404)" test "$(from_pod "$R$path" "${AUTH[@]}")" = 404
done
check "a write is not served on the remote listener (PUT /v1/config: 404/405)" \
	bash -c "case $(from_pod "$R/v1/config" "${AUTH[@]}" -X PUT -d '{}') in 404|405) exit 0;; *) exit 1;; esac"
check "the unauthenticated listener is out of the pod's reach" \
	test "$(from_pod "http://10.78.0.1:$TPORT/metrics")" = 000
check "the unauthenticated listener answers on the node's loopback" \
	test "$(ip netns exec "$NODE" curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$TPORT/livez")" = 200
stop_agent

# refusals at start: a remote listener without its certificates
mapfile -t args < <(agent_args "$mods")
for missing in api-remote-cert api-remote-key api-remote-client-ca; do
	set -- --set "agent.api-remote-listen=10.78.0.1:$RPORT" --set "agent.api-remote-cert=$PKI/server.crt" \
		--set "agent.api-remote-key=$PKI/server.key" --set "agent.api-remote-client-ca=$PKI/clients-ca.crt"
	set -- "$@" --set "agent.$missing="
	RC=0
	OUT=$(ip netns exec "$NODE" timeout 10 "$AGENT" "${args[@]}" "$@" 2>&1) || RC=$?
	check "api-remote-listen without $missing is refused at start (exit 1)" test "$RC" = 1
	check "the refusal names $missing" contains "$OUT" "$missing"
done
finish
