# tests/k8s/apiserver.sh - start tests/k8s/apiserver.py (the fake
# kube-apiserver) from an integration test. Source it after
# tests/lib/common.sh: everything lives under $WORK, so common.sh's cleanup
# (which kills processes whose command line holds "$WORK/") stops the server.
#
#   k8s_require [tools...]    fail (CI=true) or skip (exit 77) without python3,
#                             openssl, kubectl (or the extra tools named)
#   k8s_start [server args]   TLS server with a random bearer token on a free
#                             port of K8S_ADDRESS (default 127.0.0.1); exports K8S_URL, K8S_PORT,
#                             K8S_TOKEN, K8S_CA, K8S_KUBECONFIG, K8S_PID
#                             (inside network namespace $K8S_NETNS when set,
#                             e.g. the node's, where the agent reaches it)
#   k8s_stop                  stop it
#   kc ARGS...                the real kubectl against it (own kubeconfig and
#                             discovery cache under $WORK, --request-timeout=20s;
#                             in $K8S_NETNS when set)
#   k8s_api [curl args] PATH  curl the API with the token (PATH like /api/v1/pods)
#   k8s_ctl [curl args] WHAT  curl a control endpoint (/_control/WHAT, POST
#                             unless WHAT is "stats")
#   k8s_watches [RESOURCE]    the open watches the server holds, of RESOURCE
#                             (e.g. pods) or all (none a fault is ending)
#   k8s_watching N [RESOURCE] it holds N watches or more
#   k8s_rv                    the server's resourceVersion (its last change)
#   k8s_agent_requests VERB RESOURCE  how many VERB (list, watch, ...) requests
#                             on RESOURCE the agents made so far (the server's
#                             record of them)
#
# K8S_NETNS (optional): a network namespace the server runs in, and where
# kc, k8s_api and k8s_ctl reach it (for an agent in that namespace).
#
# kubectl only sends a bearer token over TLS (client-go ignores user
# credentials for http:// servers), hence the private CA and server cert.
K8S_PID=""
# run "$@" in K8S_NETNS when it is set
_k8s_in() { if [ -n "${K8S_NETNS:-}" ]; then ip netns exec "$K8S_NETNS" "$@"; else "$@"; fi; }

k8s_require() {
	local tool
	for tool in python3 openssl kubectl curl "$@"; do
		command -v "$tool" >/dev/null && continue
		if [ "${CI:-}" = true ]; then
			echo "FAIL: $tool is not installed (needed by $TEST_NAME)"
			exit 1
		fi
		echo "SKIP: $tool is not installed"
		exit 77
	done
}

_k8s_tls() {
	local dir=$1
	mkdir -p "$dir"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj "/CN=fibril test kube CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=kube-apiserver" \
		-keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1,IP:%s,DNS:localhost\n' "${K8S_ADDRESS:-127.0.0.1}" >"$dir/server.ext"
	printf 'extendedKeyUsage=serverAuth\n' >>"$dir/server.ext"
	openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
		-CAcreateserial -days 2 -extfile "$dir/server.ext" -out "$dir/server.pem" 2>/dev/null
}

k8s_start() {
	local dir=$WORK/k8s _
	mkdir -p "$dir"
	[ -f "$dir/tls/server.pem" ] || _k8s_tls "$dir/tls"
	K8S_TOKEN=${K8S_TOKEN:-tok-$RANDOM$RANDOM}
	K8S_CA=$dir/tls/ca.pem
	# a copy under $WORK, so cleanup's "$WORK/" match finds the server
	cp "$top_srcdir/tests/k8s/apiserver.py" "$top_srcdir/tests/k8s/apiserver_crd.py" "$dir/"
	rm -f "$dir/server.out"
	# not through _k8s_in: $! must be the server itself (ip netns exec
	# execs it), so that k8s_stop's kill reaches it
	local in_ns=()
	[ -n "${K8S_NETNS:-}" ] && in_ns=(ip netns exec "$K8S_NETNS")
	"${in_ns[@]}" python3 "$dir/apiserver.py" --address "${K8S_ADDRESS:-127.0.0.1}" \
		--port "${K8S_PORT:-0}" --token "$K8S_TOKEN" \
		--tls-cert "$dir/tls/server.pem" --tls-key "$dir/tls/server.key" "$@" \
		>"$dir/server.out" 2>"$dir/server.log" &
	K8S_PID=$!
	local rc=0
	wait_alive "$K8S_PID" 10 grep -q '^LISTENING' "$dir/server.out" || rc=$?
	[ "$rc" != 2 ] || { cat "$dir/server.log"; return 1; }
	K8S_PORT=$(awk '/^LISTENING/ {print $2; exit}' "$dir/server.out" 2>/dev/null)
	[ -n "$K8S_PORT" ] || { echo "apiserver did not start" >&2; return 1; }
	K8S_URL=https://${K8S_ADDRESS:-127.0.0.1}:$K8S_PORT
	K8S_KUBECONFIG=$dir/kubeconfig
	cat >"$K8S_KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: fibril-test
  cluster:
    server: $K8S_URL
    certificate-authority: $K8S_CA
users:
- name: fibril-test
  user:
    token: $K8S_TOKEN
contexts:
- name: fibril-test
  context:
    cluster: fibril-test
    user: fibril-test
    namespace: default
current-context: fibril-test
EOF
	export K8S_URL K8S_PORT K8S_TOKEN K8S_CA K8S_KUBECONFIG K8S_PID
}

k8s_stop() {
	[ -n "$K8S_PID" ] || return 0
	kill "$K8S_PID" 2>/dev/null || true
	wait "$K8S_PID" 2>/dev/null || true
	K8S_PID=""
}

kc() { _k8s_in kubectl --kubeconfig "$K8S_KUBECONFIG" --cache-dir "$WORK/k8s/kubectl-cache" --request-timeout=20s "$@"; }

k8s_api() {
	local path=${*: -1}
	_k8s_in curl -sS --max-time 20 --cacert "$K8S_CA" -H "Authorization: Bearer $K8S_TOKEN" \
		"${@:1:$#-1}" "$K8S_URL$path"
}

k8s_ctl() {
	local what=${*: -1} method=POST
	case $what in stats*) method=GET ;; esac
	_k8s_in curl -sS --max-time 20 --cacert "$K8S_CA" -X "$method" "${@:1:$#-1}" "$K8S_URL/_control/$what"
}

k8s_watches() {
	k8s_ctl stats | python3 -c 'import json, sys
s = json.load(sys.stdin)
print(s["openWatchesByResource"].get(sys.argv[1], 0) if sys.argv[1] else sum(s["openWatchesByResource"].values()))' "${1:-}"
}

k8s_watching() { [ "$(k8s_watches "${2:-}")" -ge "$1" ]; }

k8s_rv() { k8s_ctl stats | python3 -c 'import json, sys; print(json.load(sys.stdin)["resourceVersion"])'; }

k8s_agent_requests() {
	local n
	n=$(grep -c "^$1 [a-z0-9.]* $2\$" "$FIBRIL_K8S_REQUEST_LOG_DIR/requests-$K8S_PID.log" 2>/dev/null) || true
	echo "${n:-0}"
}
