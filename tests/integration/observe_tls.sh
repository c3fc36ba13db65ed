#!/usr/bin/env bash
# tests/integration/observe_tls.sh - `fibril observe` against a remote
# agent's TLS listener, with Hubble's flags (issue 22): the flow pods'
# agent (tests/lib/flowpods.sh) with `[agent] api-remote-listen` on
# 127.0.0.1 in its node namespace, a CA for the server's certificate and
# one for the readers' (made here with openssl). `fibril observe --server
# ADDR:PORT --tls --tls-ca-cert-files --tls-client-cert-file
# --tls-client-key-file` reads the flows one-shot and with --follow;
# --tls-server-name checks the certificate against a name; without a
# client certificate, with a wrong CA, or with a name the certificate does
# not carry, it is refused with one line naming the server and what
# failed, and prints no flow; flags that do not go together are usage
# errors; --server without --tls reads the plain TCP listener.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"
. "$top_srcdir/tests/lib/flowpods.sh"

command -v openssl >/dev/null || skip_or_fail "openssl is not installed"
. "$top_srcdir/tests/lib/pki.sh"
ca server-ca
ca clients-ca
ca rogue-ca
leaf server server-ca "IP:127.0.0.1,DNS:node1.fibril.test"
leaf reader clients-ca DNS:reader

RPORT=$((20000 + ($$ + 7) % 20000))
flowpods_start --set "agent.api-remote-listen=127.0.0.1:$RPORT" --set "agent.api-remote-cert=$PKI/server.crt" \
	--set "agent.api-remote-key=$PKI/server.key" --set "agent.api-remote-client-ca=$PKI/clients-ca.crt"
await "the remote listener is up" 10 bash -c "ip netns exec $NODE_NS ss -Hltn 'sport = :$RPORT' | grep -q ."

# remote ARGS... : fibril in the node namespace (stdout in $OUT, stderr in $ERR, status in $RC)
remote() {
	RC=0
	ip netns exec "$NODE_NS" timeout 20 "$CLI" --socket /nonexistent/fibril.sock observe "$@" \
		>"$WORK/remote.out" 2>"$WORK/remote.err" || RC=$?
	OUT=$(cat "$WORK/remote.out")
	ERR=$(cat "$WORK/remote.err")
}
SERVER=(--server "127.0.0.1:$RPORT" --tls)
CA=(--tls-ca-cert-files "$PKI/server-ca.crt")
CERT=(--tls-client-cert-file "$PKI/reader.crt" --tls-client-key-file "$PKI/reader.key")

# ---- one-shot ------------------------------------------------------------------------------
udp b a 7000
wait_for 10 ring_has "protocol=udp&from-pod=team/b&to-pod=team/a" || fail "b -> a UDP 7000 reaches the ring"
remote "${SERVER[@]}" "${CA[@]}" "${CERT[@]}" --from-pod team/b --to-pod team/a --protocol udp
check "observe --server --tls with the CA and a client certificate: exit 0" test "$RC" = 0 || echo "  $ERR"
check "... the flow of b -> a UDP 7000 (over TLS, through the remote listener)" \
	grep -q 'team/b:40000 (ID:[0-9]*) <> team/a:7000 (ID:[0-9]*) to-endpoint FORWARDED (UDP)' "$WORK/remote.out"
remote "${SERVER[@]}" "${CA[@]}" "${CERT[@]}" --tls-server-name node1.fibril.test --last 1 -o json
check "--tls-server-name node1.fibril.test (a name of the certificate): one flow in Hubble's JSON" \
	test "$RC" = 0 -a "$(grep -c '"flow":' "$WORK/remote.out")" = 1 || echo "  $ERR"
remote "${SERVER[@]}" --tls-ca-cert-files "$PKI/rogue-ca.crt,$PKI/server-ca.crt" "${CERT[@]}" --last 1
check "--tls-ca-cert-files with two files (comma-separated), the second the server's CA: exit 0" \
	test "$RC" = 0 || echo "  $ERR"

# ---- refusals: one line naming the server and what failed, no flow --------------------------
refused() { # refused WHAT PATTERN
	check "$1: exit 1, no flow" test "$RC" = 1 -a -z "$OUT"
	check "$1: one line" test "$(wc -l <<<"$ERR")" = 1 || echo "  $ERR"
	check "$1: the error names the server and what failed" contains "$ERR" "$2"
}
remote "${SERVER[@]}" "${CA[@]}" --last 1
refused "without a client certificate" "TLS: the agent at 127.0.0.1:$RPORT refused the handshake (no client certificate given"
remote "${SERVER[@]}" "${CA[@]}" -f
refused "--follow without a client certificate" "TLS: the agent at 127.0.0.1:$RPORT refused the handshake (no client certificate given"
remote "${SERVER[@]}" --tls-ca-cert-files "$PKI/rogue-ca.crt" "${CERT[@]}" --last 1
refused "with a CA that did not sign the server's certificate" \
	"TLS: the certificate of the agent at 127.0.0.1:$RPORT failed verification"
remote "${SERVER[@]}" --tls-ca-cert-files "$PKI/rogue-ca.crt" "${CERT[@]}" -f
refused "--follow with a wrong CA" "TLS: the certificate of the agent at 127.0.0.1:$RPORT failed verification"
remote "${SERVER[@]}" "${CA[@]}" "${CERT[@]}" --tls-server-name other.fibril.test --last 1
refused "--tls-server-name the certificate does not carry" \
	"the certificate of the agent at 127.0.0.1:$RPORT (as other.fibril.test) failed verification"
remote "${SERVER[@]}" "${CA[@]}" "${CERT[@]}" --tls-server-name other.fibril.test -f
refused "--follow, --tls-server-name the certificate does not carry" \
	"the certificate of the agent at 127.0.0.1:$RPORT (as other.fibril.test) failed verification"
remote "${SERVER[@]}" "${CA[@]}" --tls-client-cert-file "$PKI/reader.crt" --tls-client-key-file "$PKI/server.key" -f
refused "--follow, a key that is not the certificate's" "TLS: cannot use the client certificate"

# ---- usage errors --------------------------------------------------------------------------
remote --tls-ca-cert-files "$PKI/server-ca.crt" --last 1
check "--tls-ca-cert-files without --tls: usage error (2)" test "$RC" = 2
check "--tls-ca-cert-files without --tls: usage error (2): the message" contains "$ERR" "--tls-ca-cert-files goes with --tls"
remote --tls --last 1
check "--tls without --server: usage error (2)" test "$RC" = 2
check "--tls without --server: usage error (2): the message" contains "$ERR" "--tls goes with --server"
remote --server 127.0.0.1 --last 1
check "--server without a port: usage error naming it" test "$RC" = 2
check "--server without a port: usage error naming it: the message" contains "$ERR" "--server '127.0.0.1' is not ADDRESS:PORT"
remote "${SERVER[@]}" "${CA[@]}" --tls-client-cert-file "$PKI/reader.crt" --last 1
check "a client certificate without its key: usage error" test "$RC" = 2
check "a client certificate without its key: usage error: the message" contains "$ERR" "needs --tls-client-key-file"

# ---- --server without --tls: the plain TCP listener (on the node's loopback) ----------------
remote --server "127.0.0.1:$TCP_PORT" --from-pod team/b --protocol udp --last 1
check "--server 127.0.0.1:TCP_PORT (api-tcp-listen, plain HTTP): the flow" test "$RC" = 0
check "--server 127.0.0.1:TCP_PORT (api-tcp-listen, plain HTTP): the flow: the message" contains "$OUT" "team/a:7000"

# ---- --follow over TLS: the flows as they come --------------------------------------------
ip netns exec "$NODE_NS" "$CLI" observe "${SERVER[@]}" "${CA[@]}" "${CERT[@]}" -f --to-pod team/a --protocol udp \
	>"$WORK/follow.out" 2>"$WORK/follow.err" &
FOLLOW=$!
BG+=($FOLLOW)
followers_are() { grep -q "^fibril_hubble_followers $1\$" <<<"$(api http://x/metrics)"; }
check "observe -f over TLS is a follower of the agent" wait_for 10 followers_are 1
udp b a 7000 3
followed() { [ "$(grep -c 'to-endpoint FORWARDED (UDP)' "$WORK/follow.out")" -ge 3 ]; }
check "observe -f --server --tls: the 3 datagrams' flows as they come" wait_for 10 followed
kill "$FOLLOW" 2>/dev/null || true
wait "$FOLLOW" 2>/dev/null || true
check "... and nothing on stderr" test ! -s "$WORK/follow.err" || cat "$WORK/follow.err"
finish
