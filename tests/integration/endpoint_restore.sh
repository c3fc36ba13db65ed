#!/usr/bin/env bash
# tests/integration/endpoint_restore.sh - the endpoint module at scale and
# its restore: 1,000 endpoints PUT through the API (each with its own veth
# in the node netns), GET /v1/endpoint timed, the agent's VmRSS, kill -9
# and restart (the restore time from the log, every ID, identity and
# address the same), a restore that waits for an IPAM that has no pool yet
# (a test ipam module answering -EAGAIN for its first second: the start is
# pending, the API opens only once the endpoints are back), and the
# start/serve/stop path under valgrind with those endpoints. Figures are
# printed, never asserted.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/integration/endpoint_common.sh"

N=${ENDPOINTS:-1000}
STATE=$WORK/state/endpoint
NODE_ARGS=(--set "ipam-cluster-pool.node-cidr=10.77.0.0/21,fd00:77::/112")

# one namespace stands for every pod's netns; N veth pairs in the node
ip netns add "fibep-$$-pods"
POD_NAMESPACES+=("fibep-$$-pods")
for i in $(seq 1 "$N"); do
	echo "link add lxc$i type veth peer name pod$i"
done >"$WORK/links.batch"
ip -n "$NODE" -batch "$WORK/links.batch"
pass "$N veth pairs in the node netns"

start_node_agent || { fail "the agent starts"; finish; exit 1; }
echo "FIGURE: agent VmRSS with 0 endpoints (reference): $(agent_rss_kb) kB"

# the load: a python client over the unix socket (one connection per request)
cat >"$WORK/load.py" <<'EOF'
# load.py - PUT N endpoints, time GET /v1/endpoint (endpoint_restore.sh)
import http.client, json, os, socket, sys, time
sock, netns, node, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
class Conn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(sock)
def call(method, path, body=None):
    c = Conn("x")
    c.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data
def sysfs(name, attr):  # the agent's netns is ours: we run under ip netns exec
    with open(f"/sys/class/net/{name}/{attr}") as f:
        return f.read().strip()
if sys.argv[5] == "put":
    t0 = time.monotonic()
    for i in range(1, n + 1):
        cid = f"c{i:06d}"
        b = {"container-id": cid, "ifname": "eth0", "netns": netns,
             "host-ifname": f"lxc{i}", "host-ifindex": int(sysfs(f"lxc{i}", "ifindex")),
             "mac": sysfs(f"pod{i}", "address"), "host-mac": sysfs(f"lxc{i}", "address"),
             "ipv4": f"10.77.{i // 250}.{i % 250 + 2}", "ipv6": f"fd00:77::{i + 1:x}",
             "pod-namespace": f"ns{i % 7}", "pod-name": f"pod-{i}", "labels": [f"k8s:app=app{i % 40}"]}
        st, data = call("PUT", f"/v1/endpoint/container-id:{cid}:eth0", json.dumps(b))
        if st != 201:
            print(f"PUT {cid}: HTTP {st}: {data.decode()}")
            sys.exit(1)
    dt = time.monotonic() - t0
    print(f"FIGURE: {n} PUTs in {dt * 1e3:.0f} ms ({dt * 1e3 / n:.2f} ms each, state file and IPAM fsyncs included)")
else:
    times = []
    for _ in range(10):
        t0 = time.monotonic()
        st, data = call("GET", "/v1/endpoint")
        times.append(time.monotonic() - t0)
        assert st == 200
    eps = json.loads(data)["endpoints"]
    times.sort()
    ref = []
    for _ in range(10):
        t0 = time.monotonic()
        call("GET", "/v1/status")
        ref.append(time.monotonic() - t0)
    ref.sort()
    print(f"FIGURE: GET /v1/endpoint with {len(eps)} endpoints: median {times[5] * 1e3:.1f} ms, {len(data)} bytes"
          f" (reference, same run: GET /v1/status median {ref[5] * 1e3:.1f} ms)")
    st, data = call("GET", "/v1/identity")
    print(f"identities: {len(json.loads(data)['identities'])}")
EOF

ip netns exec "$NODE" python3 "$WORK/load.py" "$WORK/fibril.sock" "/run/netns/fibep-$$-pods" "$NODE" "$N" put \
	>"$WORK/put.out" 2>&1 && pass "$N endpoints PUT through the API" || { fail "$N endpoints PUT"; cat "$WORK/put.out"; }
cat "$WORK/put.out"
ip netns exec "$NODE" python3 "$WORK/load.py" "$WORK/fibril.sock" x "$NODE" "$N" get >"$WORK/get.out" 2>&1
cat "$WORK/get.out"
check "GET /v1/endpoint lists $N" grep -q "GET /v1/endpoint with $N endpoints" "$WORK/get.out"
SETS=$(python3 -c "print(len({(i % 40, i % 7) for i in range(1, $N + 1)}))")
check "one identity per distinct label set ($SETS) + 10 reserved" grep -q "identities: $((SETS + 10))$" "$WORK/get.out"
RSS_RUN=$(agent_rss_kb)
echo "FIGURE: agent VmRSS with $N endpoints (after the PUTs and GETs): $RSS_RUN kB"
check "$N endpoints in the state journal" \
	test "$(python3 "$top_srcdir/tests/integration/endpoint_journal.py" "$STATE" --count)" = "$N"

api http://x/v1/endpoint >"$WORK/before.json"
stop_agent KILL || true
start_node_agent || fail "the agent restarts with $N endpoints"
LINE=$(last_log | grep -o "restored [0-9]* endpoints in [0-9.]* ms ([0-9]* removed.*)" || true)
echo "FIGURE: restore after kill -9: $LINE"
check "the restore log line counts $N endpoints, none removed" contains "$LINE" "restored $N endpoints in"
RSS_RESTORED=$(agent_rss_kb)
echo "FIGURE: agent VmRSS right after restoring $N endpoints: $RSS_RESTORED kB"
api http://x/v1/endpoint >"$WORK/after.json"
check "after the restart: every ID, identity, address and label as before" \
	python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if a==b and len(a['endpoints'])==$N else 1)" \
	"$WORK/before.json" "$WORK/after.json"
ip netns exec "$NODE" python3 "$WORK/load.py" "$WORK/fibril.sock" x "$NODE" "$N" get >"$WORK/get.out" 2>&1
cat "$WORK/get.out"
echo "FIGURE: agent VmRSS after the restore and 10 GETs: $(agent_rss_kb) kB"
stop_agent TERM || true

# ---- a restore that waits for IPAM ---------------------------------------------------
# slowipam: an ipam mode that has no pool for its first second (-EAGAIN)
cat >"$WORK/slowipam.c" <<'EOF'
/* slowipam - test ipam mode (endpoint_restore.sh): -EAGAIN until 1 s after
 * start, then hands any address to whoever asks first. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fibril/fibril.h>
#define MAXA 4096
static char addrs[MAXA][FIBRIL_IPAM_ADDR_LEN], owners[MAXA][FIBRIL_IPAM_OWNER_LEN];
static int n, eagains;
static uint64_t ready_at;
static int ready(void) { if (fibril_now_ms() >= ready_at) return 1; eagains++; return 0; }
static int alloc_ip(void *c, const char *a, const char *o, struct fibril_ipam_result *r)
{
	if (!ready()) return -EAGAIN;
	for (int i = 0; i < n; i++)
		if (!strcmp(addrs[i], a)) return strcmp(owners[i], o) ? -EEXIST : 0;
	if (n == MAXA) return -ENOSPC;
	snprintf(addrs[n], sizeof(addrs[n]), "%s", a);
	snprintf(owners[n++], sizeof(owners[0]), "%s", o);
	snprintf(r->address, sizeof(r->address), "%s", a);
	return 0;
}
static int alloc_next(void *c, int f, const char *o, struct fibril_ipam_result *r, size_t m) { return -ENOSPC; }
static int rel_ip(void *c, const char *a) { return -ENOENT; }
static int rel_owner(void *c, const char *o)
{
	int k = 0;
	if (!ready()) return -EAGAIN;
	for (int i = 0; i < n; i++)
		if (!strcmp(owners[i], o)) { owners[i][0] = 0; addrs[i][0] = 0; k++; }
	return k;
}
static int list(void *c, fibril_ipam_list_fn cb, void *ud)
{
	for (int i = 0; i < n; i++) if (addrs[i][0] && cb(addrs[i], owners[i], ud)) break;
	return 0;
}
static int pools(void *c, struct fibril_ipam_pool *p, size_t m) { return 0; }
static void on_route(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "{\"held\":%d,\"eagains\":%d}", n, eagains);
	fibril_resp_json(resp, 200, buf);
}
static const struct fibril_ipam_ops ops = {
	.hdr = {.sz = sizeof(ops), .version = FIBRIL_IPAM_VERSION}, .allocate_next = alloc_next,
	.allocate_ip = alloc_ip, .release_ip = rel_ip, .release_owner = rel_owner, .list = list,
	.pools = pools,
};
static int init(struct fibril_module *m)
{
	fibril_service_provide(m, FIBRIL_IPAM_CAPABILITY, &ops.hdr, NULL);
	return fibril_api_route(m, "GET", "/v1/slowipam", 0, on_route, NULL);
}
static int start(struct fibril_module *m) { ready_at = fibril_now_ms() + 1000; return 0; }
FIBRIL_MODULE(.name = "slowipam", .version = "1", .provides = FIBRIL_LIST("ipam"),
	      .init = init, .start = start);
EOF
smods=$WORK/smods
mkdir -p "$smods"
chmod 0755 "$smods"
# shellcheck disable=SC2086
$CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-unused-parameter \
	${SAN_CFLAGS:-} -I"$top_srcdir/sdk/include" -o "$smods/slowipam.so" "$WORK/slowipam.c" \
	-L"$top_builddir/.libs" -lfibril
chmod 0644 "$smods/slowipam.so"
install -m 0644 "$top_builddir/.libs/endpoint.so" "$smods/endpoint.so"
mods_saved=$mods
mods=$smods
NODE_ARGS_SAVED=("${NODE_ARGS[@]}")
NODE_ARGS=()
start_node_agent || fail "the agent starts with an ipam mode that has no pool yet"
check "the start waits for IPAM, saying so" grep -q "ipam has no pool yet: restore of $N endpoints waits for it" <(last_log)
LINE=$(last_log | grep -o "restored [0-9]* endpoints in .*" || true)
echo "FIGURE: restore that waited for IPAM: $LINE"
check "the restore finished after waiting, with every endpoint" contains "$LINE" "restored $N endpoints in"
check "... and the log says how long it waited" contains "$LINE" "; waited "
expect "the pending start was retried until IPAM answered" GET /v1/slowipam 200 "\"held\":$((2 * N)),"
check "... after some -EAGAIN answers" json_ok "j['eagains'] >= 2"
api http://x/v1/endpoint >"$WORK/after2.json"
check "the endpoints are the same as before" \
	python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if a==b else 1)" \
	"$WORK/before.json" "$WORK/after2.json"
stop_agent TERM || true
mods=$mods_saved
NODE_ARGS=("${NODE_ARGS_SAVED[@]}")

# ---- valgrind: start (restore), serve, stop --------------------------------------------
if [ -n "${SAN_CFLAGS:-}" ]; then
	echo "NOTE: sanitizer build: the valgrind part runs in the plain build"
elif ! command -v valgrind >/dev/null; then
	skip_or_fail "valgrind is not installed"
else
	# keep it short under valgrind: 50 endpoints, as per-endpoint state
	# files of before the journal (the restore moves them into it)
	python3 - "$STATE" <<'PY'
import json, os, subprocess, sys
d = sys.argv[1]
live = json.loads(subprocess.check_output([sys.executable, os.environ["top_srcdir"] + "/tests/integration/endpoint_journal.py", d]))
for i, rec in live.items():
    if int(i) <= 50:
        with open(os.path.join(d, i + ".json"), "w") as f:
            f.write(json.dumps(rec) + "\n")
for f in ("endpoints.journal", "endpoints.snap"):
    if os.path.exists(os.path.join(d, f)):
        os.unlink(os.path.join(d, f))
PY
	mapfile -t args < <(agent_args "$mods")
	rm -f "$WORK/fibril.sock"
	echo "---- agent start (valgrind) $(date +%T.%N)" >>"$WORK/agent.log"
	ip netns exec "$NODE" "$top_builddir/libtool" --mode=execute valgrind --leak-check=full \
		--show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
		--error-exitcode=99 --log-file="$WORK/vg.%p" "$AGENT" "${args[@]}" "${NODE_ARGS[@]}" \
		>>"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	wait_alive "$AGENT_PID" 30 test -S "$WORK/fibril.sock" || true
	check "the agent starts under valgrind and restores" test -S "$WORK/fibril.sock"
	expect "valgrind: GET /v1/endpoint" GET /v1/endpoint 200 '"endpoints"'
	expect "valgrind: PATCH" PATCH /v1/endpoint/3 200 '"id":3' --data-binary '{"labels":["k8s:x=y"]}'
	expect "valgrind: DELETE" DELETE /v1/endpoint/4 200 '{"deleted":4}'
	expect "valgrind: a bad PUT" PUT /v1/endpoint/container-id:x:eth0 400 'mac' \
		--data-binary '{"container-id":"x","ifname":"eth0","netns":"/","host-ifname":"a","host-ifindex":1,"mac":"1"}'
	expect "valgrind: identities" GET /v1/identity 200 '"identities"'
	rc=0
	stop_agent TERM || rc=$?
	check "start/restore/serve/stop under valgrind: no leaks, no errors (exit $rc)" test "$rc" -eq 0
	grep -h -E "definitely lost|indirectly lost|ERROR SUMMARY" "$WORK"/vg.* || true
fi
finish
