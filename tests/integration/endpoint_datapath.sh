#!/usr/bin/env bash
# tests/integration/endpoint_datapath.sh - the endpoint module with the
# modules around it: a fake "datapath" (dpprobe, built here: records
# endpoint_upsert/endpoint_remove and can be told to refuse) and a consumer
# of the "endpoint" capability (epprobe: checks every bus payload, calls
# foreach, get and identity_labels). PUT attaches before it answers, a
# datapath refusal is a 500 that changes nothing, PATCH re-upserts with the
# new identity, DELETE removes, restore re-adopts live endpoints and
# removes dead ones from the datapath, events carry the endpoint and its
# labels.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/integration/endpoint_common.sh"

STATE=$WORK/state/endpoint
cat >"$WORK/probes.c" <<'EOF'
/* probes.c - dpprobe (provides "datapath") and epprobe (uses "endpoint"),
 * test modules of endpoint_datapath.sh; -DDPPROBE picks the first. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fibril/fibril.h>
static char out[16384];
#ifdef DPPROBE
struct att { int used; struct fibril_datapath_endpoint ep; };
static struct att atts[64];
static int upserts, removes, fail_next, bad_sz;
static int upsert(void *c, const struct fibril_datapath_endpoint *ep, char *err, size_t len)
{
	if (ep->sz != sizeof(*ep)) bad_sz++;
	if (fail_next > 0) { fail_next--; snprintf(err, len, "dpprobe refuses endpoint %u", ep->id); return -EIO; }
	upserts++;
	atts[ep->id % 64].used = 1;
	atts[ep->id % 64].ep = *ep;
	return 0;
}
static int remove_(void *c, const struct fibril_datapath_endpoint *ep, char *err, size_t len)
{
	if (fail_next > 0) { fail_next--; snprintf(err, len, "dpprobe refuses to remove %u", ep->id); return -EIO; }
	removes++;
	atts[ep->id % 64].used = 0;
	return 0;
}
static int ipc_up(void *c, int f, const void *a, unsigned p, uint32_t id, char *e, size_t l) { return 0; }
static int ipc_rm(void *c, int f, const void *a, unsigned p, char *e, size_t l) { return 0; }
static int node(void *c, struct fibril_datapath_node *o) { return -ENOENT; }
static const struct fibril_datapath_ops ops = {
	.hdr = {.sz = sizeof(ops), .version = FIBRIL_DATAPATH_VERSION}, .endpoint_upsert = upsert,
	.endpoint_remove = remove_, .ipcache_upsert = ipc_up, .ipcache_remove = ipc_rm, .node = node,
};
static void get(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	size_t at = 0;
	at += snprintf(out + at, sizeof(out) - at, "{\"upserts\":%d,\"removes\":%d,\"bad_sz\":%d,\"attached\":[",
		       upserts, removes, bad_sz);
	for (int i = 0, first = 1; i < 64; i++) {
		char a4[INET_ADDRSTRLEN] = "";
		if (!atts[i].used) continue;
		if (atts[i].ep.has_ipv4) inet_ntop(AF_INET, &atts[i].ep.ipv4, a4, sizeof(a4));
		at += snprintf(out + at, sizeof(out) - at, "%s{\"id\":%u,\"identity\":%u,\"ifindex\":%d,\"ifname\":\"%s\",\"ipv4\":\"%s\",\"mac\":\"%02x\"}",
			       first ? "" : ",", atts[i].ep.id, atts[i].ep.identity, atts[i].ep.host_ifindex,
			       atts[i].ep.host_ifname, a4, atts[i].ep.mac[5]);
		first = 0;
	}
	snprintf(out + at, sizeof(out) - at, "]}");
	fibril_resp_json(resp, 200, out);
}
static void fail(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	fail_next = atoi(fibril_req_query(req, "n") ? fibril_req_query(req, "n") : "1");
	fibril_resp_json(resp, 200, "{}");
}
static int init(struct fibril_module *m)
{
	fibril_service_provide(m, FIBRIL_DATAPATH_CAPABILITY, &ops.hdr, NULL);
	fibril_api_route(m, "POST", "/v1/dpprobe/fail", 0, fail, NULL);
	return fibril_api_route(m, "GET", "/v1/dpprobe", 0, get, NULL);
}
FIBRIL_MODULE(.name = "dpprobe", .version = "1", .provides = FIBRIL_LIST("datapath"), .init = init);
#else
static const struct fibril_endpoint_ops *ops;
static void *ctx;
static int created, updated, deleted, bad;
static char last[1024];
static int on_event(const struct fibril_event *ev, void *ud)
{
	const struct fibril_endpoint_event *e = ev->payload;
	if (ev->payload_len < sizeof(*e) || e->sz != sizeof(*e) ||
	    (e->labels && (e->labels < sizeof(*e) || e->labels >= ev->payload_len)) ||
	    ((const char *)ev->payload)[ev->payload_len - 1] != '\0') { bad++; return 0; }
	if (!strcmp(ev->topic, FIBRIL_ENDPOINT_TOPIC_CREATED)) created++;
	else if (!strcmp(ev->topic, FIBRIL_ENDPOINT_TOPIC_UPDATED)) updated++;
	else deleted++;
	char a4[INET_ADDRSTRLEN] = "";
	if (e->has_ipv4) inet_ntop(AF_INET, &e->ipv4, a4, sizeof(a4));
	snprintf(last, sizeof(last), "%s id=%u state=%u identity=%u old=%u cid=%s ifname=%s pod=%s/%s ipv4=%s labels=%s",
		 ev->topic, e->id, e->state, e->identity, e->old_identity, e->container_id, e->ifname,
		 e->pod_namespace, e->pod_name, a4, FIBRIL_ENDPOINT_LABELS(e));
	for (char *c = last; *c; c++) if (*c == '\n') *c = '|';
	return 0;
}
static int count_cb(const struct fibril_endpoint_event *ep, void *ud) { (*(int *)ud)++; return 0; }
static int id_cb(const struct fibril_endpoint_event *ep, void *ud) { *(uint32_t *)ud = ep->identity; return 0; }
static void get(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	int n = 0;
	uint32_t id1 = 0;
	ops->foreach(ctx, count_cb, &n);
	int rc = ops->get(ctx, 1, id_cb, &id1);
	const char *l = ops->identity_labels(ctx, id1);
	char labels[512];
	snprintf(labels, sizeof(labels), "%s", l ? l : "(null)");
	for (char *c = labels; *c; c++) if (*c == '\n') *c = '|';
	snprintf(out, sizeof(out), "{\"created\":%d,\"updated\":%d,\"deleted\":%d,\"bad\":%d,\"foreach\":%d,"
		 "\"get1\":%d,\"identity1\":%u,\"labels1\":\"%s\",\"get999\":%d,\"host\":\"%s\",\"nolabels\":%s,\"last\":\"%s\"}",
		 created, updated, deleted, bad, n, rc, id1, labels, ops->get(ctx, 999, id_cb, &id1),
		 ops->identity_labels(ctx, 1), ops->identity_labels(ctx, 77777) ? "false" : "true", last);
	fibril_resp_json(resp, 200, out);
}
static int init(struct fibril_module *m)
{
	fibril_bus_subscribe(m, FIBRIL_ENDPOINT_TOPIC_CREATED, 1, on_event, NULL);
	fibril_bus_subscribe(m, FIBRIL_ENDPOINT_TOPIC_UPDATED, 1, on_event, NULL);
	fibril_bus_subscribe(m, FIBRIL_ENDPOINT_TOPIC_DELETED, 1, on_event, NULL);
	return fibril_api_route(m, "GET", "/v1/epprobe", 0, get, NULL);
}
static int start(struct fibril_module *m)
{
	ops = (const struct fibril_endpoint_ops *)fibril_service_lookup(m, "endpoint", 1, &ctx);
	return ops ? 0 : -ENOENT;
}
FIBRIL_MODULE(.name = "epprobe", .version = "1", .requires = FIBRIL_LIST("endpoint"), .init = init,
	      .start = start);
#endif
EOF
for p in dpprobe epprobe; do
	def=""
	[ $p = dpprobe ] && def=-DDPPROBE
	# shellcheck disable=SC2086
	$CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-unused-parameter \
		${SAN_CFLAGS:-} $def -I"$top_srcdir/sdk/include" -o "$mods/$p.so" "$WORK/probes.c" \
		-L"$top_builddir/.libs" -lfibril
	chmod 0644 "$mods/$p.so"
done

snapshot() {
	{
		# the endpoint state as the agent replays it (a refused change may
		# leave its record and a tombstone in the journal: same state)
		python3 "$top_srcdir/tests/integration/endpoint_journal.py" "$STATE"
		(cd "$STATE" && for f in $(ls -A | grep -v '^endpoints\.' | sort); do echo "== $f"; cat "$f"; echo; done)
		api http://x/v1/endpoint
		api http://x/v1/identity
		api http://x/v1/ipam
	} | md5sum
}

start_node_agent || { fail "the agent starts with dpprobe and epprobe"; finish; exit 1; }
check "the endpoint module sees the datapath" grep -q "datapath loaded" <(last_log)

make_pod a lxca$$ ; A=("$POD_NETNS" "lxca$$" "$HOST_IFINDEX" "$POD_MAC" "$HOST_MAC")
make_pod b lxcb$$ ; B=("$POD_NETNS" "lxcb$$" "$HOST_IFINDEX" "$POD_MAC" "$HOST_MAC")

body cida$$ "${A[@]}" 10.77.1.2 "" default web-1 '["k8s:app=web"]' >"$WORK/a.json"
expect "PUT: 201" PUT "/v1/endpoint/container-id:cida$$:eth0" 201 '"id":1,' --data-binary @"$WORK/a.json"
IDENT=$(jq_py "j['identity']")
expect "the datapath has it when PUT answers" GET /v1/dpprobe 200 '"upserts":1,'
check "... with its ID, identity, veth, address and MAC" json_ok \
	"j['attached'] == [{'id': 1, 'identity': $IDENT, 'ifindex': ${A[2]}, 'ifname': '${A[1]}', 'ipv4': '10.77.1.2', 'mac': '${A[3]##*:}'}] and j['bad_sz'] == 0"
expect "epprobe got endpoint.created" GET /v1/epprobe 200 '"created":1,'
check "... a well-formed payload carrying the endpoint and its labels" json_ok \
	"j['bad'] == 0 and j['last'] == 'endpoint.created id=1 state=1 identity=$IDENT old=$IDENT cid=cida$$ ifname=eth0 pod=default/web-1 ipv4=10.77.1.2 labels=k8s:app=web|k8s:io.kubernetes.pod.namespace=default'"
check "ops: foreach, get, identity_labels" json_ok \
	"j['foreach'] == 1 and j['get1'] == 0 and j['identity1'] == $IDENT and j['labels1'] == 'k8s:app=web|k8s:io.kubernetes.pod.namespace=default' and j['get999'] < 0 and j['host'] == 'reserved:host' and j['nolabels']"

# the datapath refuses: 500, nothing changed (the free address given back to IPAM)
BEFORE=$(snapshot)
api -s -X POST 'http://x/v1/dpprobe/fail?n=1' >/dev/null
body cidb$$ "${B[@]}" 10.77.1.3 "" default web-2 '["k8s:app=other"]' >"$WORK/b.json"
expect "PUT refused by the datapath: 500 naming it" PUT "/v1/endpoint/container-id:cidb$$:eth0" 500 \
	'"error":"datapath: dpprobe refuses endpoint 2"' --data-binary @"$WORK/b.json"
check "... nothing changed: no endpoint record, no endpoint, no identity, the address free" test "$(snapshot)" = "$BEFORE"
api -s -X POST 'http://x/v1/dpprobe/fail?n=1' >/dev/null
expect "PATCH refused by the datapath: 500" PATCH /v1/endpoint/1 500 '"error":"datapath: dpprobe refuses endpoint 1"' \
	--data-binary '{"labels":["k8s:app=x"]}'
check "... nothing changed" test "$(snapshot)" = "$BEFORE"
expect "PUT retried: 201" PUT "/v1/endpoint/container-id:cidb$$:eth0" 201 '"id":2,' --data-binary @"$WORK/b.json"
expect "PATCH: 200" PATCH /v1/endpoint/1 200 '"id":1,' --data-binary '{"labels":["k8s:app=x"]}'
IDENTX=$(jq_py "j['identity']")
expect "the datapath got the new identity" GET /v1/dpprobe 200 '"attached"'
check "... endpoint 1 with identity $IDENTX" json_ok "[a['identity'] for a in j['attached'] if a['id'] == 1] == [$IDENTX]"
expect "epprobe got endpoint.updated with the old identity" GET /v1/epprobe 200 '"updated":1,'
check "... id 1, identity $IDENT -> $IDENTX" contains "$(resp)" "endpoint.updated id=1 state=1 identity=$IDENTX old=$IDENT"

api -s -X POST 'http://x/v1/dpprobe/fail?n=1' >/dev/null
expect "DELETE refused by the datapath: 500, still there" DELETE /v1/endpoint/2 500 "datapath: dpprobe refuses to remove 2"
expect "... listed as disconnecting" GET /v1/endpoint/2 200 '"state":"disconnecting"'
expect "DELETE again: 200" DELETE /v1/endpoint/2 200 '{"deleted":2}'
expect "the datapath no longer has it" GET /v1/dpprobe 200 '"attached"'
check "... only endpoint 1 is attached" json_ok "[a['id'] for a in j['attached']] == [1]"
expect "epprobe got endpoint.deleted (state disconnecting)" GET /v1/epprobe 200 '"deleted":1,'
check "... " contains "$(resp)" "endpoint.deleted id=2 state=3"
api -o "$WORK/metrics.txt" http://x/metrics
check "metrics: regenerations (3 written, 2 refused by the datapath), endpoints by state" eval \
	'grep -qx "fibril_endpoint_regenerations_total{outcome=\"success\"} 3" "$WORK/metrics.txt" &&
	grep -qx "fibril_endpoint_regenerations_total{outcome=\"failure\"} 2" "$WORK/metrics.txt" &&
	grep -qx "fibril_endpoint_regeneration_duration_seconds_count 5" "$WORK/metrics.txt" &&
	grep -qx "fibril_endpoint_endpoints{state=\"ready\"} 1" "$WORK/metrics.txt"'
check "metrics: the API latency of the CNI requests by method (PUT 3, PATCH 2, DELETE 2)" eval \
	'grep -qx "fibril_endpoint_api_request_duration_seconds_count{method=\"PUT\"} 3" "$WORK/metrics.txt" &&
	grep -qx "fibril_endpoint_api_request_duration_seconds_count{method=\"PATCH\"} 2" "$WORK/metrics.txt" &&
	grep -qx "fibril_endpoint_api_request_duration_seconds_count{method=\"DELETE\"} 2" "$WORK/metrics.txt"'

# restore: re-adopt the live one, remove the dead one from the datapath
expect "a second endpoint again" PUT "/v1/endpoint/container-id:cidb$$:eth0" 201 '"id":2,' --data-binary @"$WORK/b.json"
stop_agent KILL || true
ip -n "$NODE" link del "${B[1]}"
start_node_agent || fail "the agent restarts"
expect "after the restart the datapath re-adopted endpoint 1 and removed endpoint 2" GET /v1/dpprobe 200 '"upserts":1,"removes":1,'
check "... endpoint 1 attached with its identity" json_ok "[(a['id'], a['identity']) for a in j['attached']] == [(1, $IDENTX)]"
expect "epprobe got endpoint.created for the restored one only" GET /v1/epprobe 200 '"created":1,'
check "... endpoint 1 ready" contains "$(resp)" "endpoint.created id=1 state=1 identity=$IDENTX"
stop_agent TERM || true
finish
