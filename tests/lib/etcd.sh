# tests/lib/etcd.sh - a real single-member etcd on loopback for integration
# tests. Source it after tests/lib/common.sh (it needs $WORK: the data dir
# lives under it, so common.sh's cleanup kills etcd with the test).
#
#   etcd_start NAME [tls]  start etcd NAME on free 127.0.0.1 ports and wait
#                          until it is healthy; exports ETCD_ENDPOINT
#                          (http://127.0.0.1:PORT, or https:// with "tls")
#                          and ETCD_PID; with "tls" also ETCD_CA_FILE,
#                          ETCD_CLIENT_CERT, ETCD_CLIENT_KEY (a private CA,
#                          server cert for 127.0.0.1, client cert; etcd then
#                          requires client certificates)
#   etcd_stop              stop it (SIGTERM, then wait)
#   etcd_restart           stop and start again: same name, data, ports
#   etcdctl_run ARGS...    etcdctl (API v3) against it
#   etcd_watchers          how many watchers it has (etcd_watchers_are N)
#   etcd_require           fail (CI=true) or skip (exit 77) without etcd
ETCD_PID=""
ETCD_ENDPOINT=""

etcd_require() {
	local tool
	for tool in etcd etcdctl python3 "$@"; do
		command -v "$tool" >/dev/null && continue
		if [ "${CI:-}" = true ]; then
			echo "FAIL: $tool is not installed (needed by $TEST_NAME)"
			exit 1
		fi
		echo "SKIP: $tool is not installed"
		exit 77
	done
}

# _etcd_free_port : a TCP port free on 127.0.0.1 right now
_etcd_free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# _etcd_tls DIR : a CA, a server certificate for 127.0.0.1 and a client one
_etcd_tls() {
	local dir=$1 name
	mkdir -p "$dir"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj "/CN=fibril test CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
	for name in server client; do
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$name" \
			-keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
		printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=%s\n' \
			"$([ $name = server ] && echo serverAuth,clientAuth || echo clientAuth)" >"$dir/$name.ext"
		openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
			-CAcreateserial -days 2 -extfile "$dir/$name.ext" -out "$dir/$name.pem" 2>/dev/null
	done
	chmod 0644 "$dir"/*.key
}

etcd_start() {
	local name=${1:?etcd_start NAME [tls]} mode=${2:-}
	etcd_require
	ETCD_NAME=$name
	ETCD_DIR=$WORK/etcd-$name
	mkdir -p "$ETCD_DIR"
	ETCD_CLIENT_PORT=$(_etcd_free_port)
	ETCD_PEER_PORT=$(_etcd_free_port)
	while [ "$ETCD_PEER_PORT" = "$ETCD_CLIENT_PORT" ]; do ETCD_PEER_PORT=$(_etcd_free_port); done
	ETCD_SCHEME=http
	ETCD_TLS_ARGS=()
	unset ETCD_CA_FILE ETCD_CLIENT_CERT ETCD_CLIENT_KEY
	if [ "$mode" = tls ]; then
		etcd_require openssl
		_etcd_tls "$ETCD_DIR/tls"
		ETCD_SCHEME=https
		ETCD_TLS_ARGS=(--cert-file "$ETCD_DIR/tls/server.pem" --key-file "$ETCD_DIR/tls/server.key"
			--client-cert-auth --trusted-ca-file "$ETCD_DIR/tls/ca.pem")
		export ETCD_CA_FILE=$ETCD_DIR/tls/ca.pem ETCD_CLIENT_CERT=$ETCD_DIR/tls/client.pem \
			ETCD_CLIENT_KEY=$ETCD_DIR/tls/client.key
	fi
	export ETCD_ENDPOINT=$ETCD_SCHEME://127.0.0.1:$ETCD_CLIENT_PORT
	_etcd_launch
}

_etcd_launch() {
	local peer=http://127.0.0.1:$ETCD_PEER_PORT
	# etcd reads ETCD_* variables as flags: keep ours out of its environment
	env -u ETCD_ENDPOINT -u ETCD_PID -u ETCD_CA_FILE -u ETCD_CLIENT_CERT -u ETCD_CLIENT_KEY \
		etcd --name "$ETCD_NAME" --data-dir "$ETCD_DIR/data" --logger zap --log-outputs stderr \
		--listen-client-urls "$ETCD_ENDPOINT" --advertise-client-urls "$ETCD_ENDPOINT" \
		--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
		--initial-cluster "$ETCD_NAME=$peer" --initial-cluster-state new \
		"${ETCD_TLS_ARGS[@]}" >>"$ETCD_DIR/etcd.log" 2>&1 &
	export ETCD_PID=$!

	wait_alive "$ETCD_PID" 20 _quietly etcdctl_run endpoint health && return 0
	if kill -0 "$ETCD_PID" 2>/dev/null; then
		echo "etcd $ETCD_NAME did not become healthy within 20 s" >&2
	else
		echo "etcd $ETCD_NAME exited; its log:" >&2
	fi
	tail -20 "$ETCD_DIR/etcd.log" >&2
	return 1
}

# etcd_watchers : how many watchers etcd has (from its /metrics)
etcd_watchers() {
	local tls=()
	[ -z "${ETCD_CA_FILE:-}" ] || tls=(--cacert "$ETCD_CA_FILE" --cert "$ETCD_CLIENT_CERT" --key "$ETCD_CLIENT_KEY")
	curl -sS --max-time 5 "${tls[@]}" "$ETCD_ENDPOINT/metrics" |
		sed -n 's/^etcd_debugging_mvcc_watcher_total \([0-9]*\).*/\1/p'
}
# etcd_watchers_are N : etcd has N watchers
etcd_watchers_are() { [ "$(etcd_watchers)" = "$1" ]; }

etcd_stop() {
	[ -n "$ETCD_PID" ] || return 0
	kill -TERM "$ETCD_PID" 2>/dev/null || true
	wait "$ETCD_PID" 2>/dev/null || true
	ETCD_PID=""
}

etcd_restart() {
	etcd_stop
	_etcd_launch
}

etcdctl_run() {
	local tls=()
	[ -n "${ETCD_CA_FILE:-}" ] && tls=(--cacert "$ETCD_CA_FILE" --cert "$ETCD_CLIENT_CERT" --key "$ETCD_CLIENT_KEY")
	ETCDCTL_API=3 etcdctl --endpoints="$ETCD_ENDPOINT" --dial-timeout=2s --command-timeout=5s \
		"${tls[@]}" "$@"
}
