# shellcheck shell=bash
# shellcheck disable=SC2034 # PRC, PCODE, DRIVER... are read by the scripts that source this
# tests/cni/lib.sh - helpers shared by the fibril-cni tests and benchmark
# (sourced after tests/lib/common.sh): a node network namespace holding the
# agent and the host side of every veth, pod namespaces, running the plugin
# directly the way the CNI spec says (env + stdin), building the libcni
# driver (tests/cni/driver/main.go) into $WORK, and snapshots of a pod
# namespace. Every namespace is named with this run's pid and removed on
# exit, whatever happened.

CNI_PLUGIN_DIR="$top_builddir"
CNI_PLUGIN="$top_builddir/fibril-cni"
CNI_REF_DIR=/usr/lib/cni
NODE_NS="fcni-node-$$"
CNI_NETNS_LIST=()
DRIVER="$WORK/cni-driver"
PRC=0   # the last plugin or driver run: exit status
PCODE="" #   and CNI error code

cni_cleanup() {
	local rc=$?
	set +e
	if [ -n "$AGENT_PID" ] && kill -0 "$AGENT_PID" 2>/dev/null; then
		kill -KILL "$AGENT_PID" 2>/dev/null
		wait "$AGENT_PID" 2>/dev/null
	fi
	AGENT_PID=""
	[ "$(type -t cni_test_cleanup)" = function ] && cni_test_cleanup
	local ns
	for ns in "${CNI_NETNS_LIST[@]}"; do ip netns del "$ns" 2>/dev/null; done
	(exit "$rc")
	cleanup
}
trap cni_cleanup EXIT INT TERM

# netns_add NAME : a namespace removed on exit, with lo up
netns_add() {
	ip netns add "$1"
	CNI_NETNS_LIST+=("$1")
	ip -n "$1" link set lo up
}

# cni_prereqs MODULE... : root, the plugin and the given agent modules built
cni_prereqs() {
	[ "$(id -u)" = 0 ] || skip_or_fail "needs root (network namespaces, root-owned modules)"
	command -v ip >/dev/null || skip_or_fail "iproute2 (ip) is not installed"
	[ -x "$CNI_PLUGIN" ] || skip_or_fail "fibril-cni is not built"
	local m
	for m in "$@"; do
		[ -f "$top_builddir/.libs/$m.so" ] || skip_or_fail "module $m is not built (it is needed here)"
	done
}

# cni_modules DIR MODULE... : a root-owned module dir with those modules
cni_modules() {
	local dir=$1 m
	shift
	mkdir -p "$dir"
	chmod 0755 "$dir"
	for m in "$@"; do install -m 0644 "$top_builddir/.libs/$m.so" "$dir/$m.so"; done
}

# start_node_agent MODULEDIR [agent args...] : the agent inside $NODE_NS
start_node_agent() {
	local dir=$1
	shift
	mapfile -t args < <(agent_args "$dir")
	rm -f "$WORK/fibril.sock"
	# as on a node: nsenter --net keeps the host's mounts (ip netns exec would
	# give the agent a private bpffs whose pins die with it)
	nsenter --net=/run/netns/"$NODE_NS" "$AGENT" "${args[@]}" "$@" >>"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	# healthy once the tc programs are in: a first start verifies them
	# (about a second idle, far longer on a loaded machine)
	wait_alive "$AGENT_PID" 120 agent_healthy && return 0
	kill -0 "$AGENT_PID" 2>/dev/null && echo "the agent did not become healthy within 120 s" >&2
	cat "$WORK/agent.log"
	return 1
}

# plugin COMMAND STDIN [VAR=VALUE...] : runs fibril-cni in $NODE_NS with only
# the given CNI_* variables; stdout in $WORK/out, stderr in $WORK/err,
# status in $PRC, the error code (or "") in $PCODE.
plugin() {
	local cmd=$1 stdin=$2
	shift 2
	local envs=(PATH="$PATH")
	[ -n "$cmd" ] && envs+=(CNI_COMMAND="$cmd")
	PRC=0
	printf '%s' "$stdin" | ip netns exec "$NODE_NS" env -i "${envs[@]}" CNI_PATH="$CNI_PLUGIN_DIR" "$@" \
		"$CNI_PLUGIN" >"$WORK/out" 2>"$WORK/err" || PRC=$?
	PCODE=$(python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1])).get("code", ""))
except Exception: print("")' "$WORK/out")
}
out() { cat "$WORK/out"; }

# outjson PYTHON-EXPR : EXPR true with `j` = the plugin's stdout as JSON
outjson() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" "$WORK/out"; }

# build_driver : the libcni driver into $DRIVER (nothing written in the tree)
build_driver() {
	command -v go >/dev/null || skip_or_fail "go is not installed (golang-go)"
	[ -d /usr/share/gocode/src/github.com/containernetworking/cni/libcni ] ||
		skip_or_fail "libcni is not installed (golang-github-appc-cni-dev)"
	mkdir -p "$WORK/gocache"
	if ! (cd "$WORK" && GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$WORK/gocache" GOFLAGS="" \
		go build -o "$DRIVER" "$top_srcdir/tests/cni/driver/main.go") >"$WORK/go.log" 2>&1; then
		cat "$WORK/go.log"
		return 1
	fi
}

# driver CONFLIST ARGS... : the libcni driver in $NODE_NS; stdout in
# $WORK/out, status in $PRC, error code in $PCODE
driver() {
	local conflist=$1
	shift
	PRC=0
	ip netns exec "$NODE_NS" "$DRIVER" -conflist "$conflist" -path "$CNI_PLUGIN_DIR:$CNI_REF_DIR" \
		-cache "$WORK/cni-cache" "$@" >"$WORK/out" 2>"$WORK/err" || PRC=$?
	PCODE=$(python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1])).get("code", ""))
except Exception: print("")' "$WORK/out")
}

# pod_snapshot NS : links (without counters), addresses, routes, rules
pod_snapshot() {
	ip -n "$1" -o link show | sed 's/ qlen [0-9]*//'
	ip -n "$1" -o addr show
	ip -n "$1" route show table all
}

# node_lxc_links : the lxc*/tmp* links in the node namespace, one per line
node_lxc_links() { ip -n "$NODE_NS" -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep -E '^(lxc|tmp)' || true; }

# ipam_allocations : the agent's allocations as "owner address" lines
ipam_allocations() {
	api http://x/v1/ipam | python3 -c 'import json,sys
for a in json.load(sys.stdin)["allocations"]: print(a["owner"], a["address"])'
}

# wait_listening NS PORT : until something listens on TCP PORT in netns NS
# (at most 10 s; python servers start slowly on a busy machine)
wait_listening() { wait_for 10 _listening_in "$1" "$2"; }
_listening_in() { ip netns exec "$1" ss -Hltn "sport = :$2" | grep -q .; }

# labelled_pods PREFIX POD... : for each POD a namespace PREFIX-$$-POD
# (NS[POD]) wired up by the plugin in $NODE_NS with the conf $CONF (CNI ADD;
# a failure ends the test), its IPv4 address in ADDR[POD], its endpoint
# labelled app=POD (an identity of its own). The caller declares
# `declare -A ADDR NS` and sets CONF.
labelled_pods() {
	local prefix=$1 pod code
	shift
	for pod in "$@"; do
		NS[$pod]="$prefix-$$-$pod"
		netns_add "${NS[$pod]}"
		plugin ADD "$CONF" CNI_CONTAINERID="$prefix$$$pod" CNI_NETNS="/var/run/netns/${NS[$pod]}" \
			CNI_IFNAME=eth0 CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=$pod"
		[ "$PRC" = 0 ] || { fail "ADD pod $pod: $(out) $(cat "$WORK/err")"; finish; }
		ADDR[$pod]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ips"][0]["address"].split("/")[0])' "$WORK/out")
		code=$(api -o "$WORK/patch.out" -w '%{http_code}' -X PATCH -H 'Content-Type: application/json' \
			-d '{"labels":["k8s:app='"$pod"'"]}' "http://x/v1/endpoint/container-id:$prefix$$$pod")
		check "pod $pod is labelled app=$pod" test "$code" = 200 || cat "$WORK/patch.out"
	done
}
