/* modules/hubble-lite/grpc_observer.c - the calls of Hubble's Observer
 * service (proto/observer.proto) over hubble-lite's ring: GetFlows (the
 * last or first `number` flows, since/until, whitelist minus blacklist,
 * then with follow every new matching flow), ServerStatus (the ring's
 * numbers) and GetNodes (this node, and the other nodes the "nodes"
 * capability knows). Requests are decoded and answers encoded with
 * protobuf-c (the code protoc-c makes from proto/ at build time); a
 * FlowFilter field hubble-lite cannot honour is refused with
 * INVALID_ARGUMENT naming it, never ignored. The flow's encoding is in
 * grpc_flow.c, the filters' in grpc_filter.c. */
#include "grpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fibril/fibril.h>
#include <fibril/nodes.h>

#include "observer.pb-c.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "1.0.0"
#endif
#define HL_GRPC_VERSION "fibril-hubble-lite " PACKAGE_VERSION

struct hl_obs_call {
	struct hl_grpc *g;
	struct hl_grpc_stream *s;
	struct hl_cfilter *white, *black;
	size_t nwhite, nblack;
	uint64_t since_ns, until_ns; /* 0: open */
	uint64_t lost;               /* lost to a full queue, not yet told */
	struct hl_obs_call *next;
};

static uint64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Pack msg and queue it on s. */
static int send_msg(struct hl_grpc_stream *s, const ProtobufCMessage *msg)
{
	size_t n = protobuf_c_message_get_packed_size(msg);
	uint8_t stackbuf[2048], *buf = n <= sizeof(stackbuf) ? stackbuf : malloc(n);
	if (!buf)
		return -ENOMEM;
	protobuf_c_message_pack(msg, buf);
	int rc = hl_grpc_send(s, buf, n);
	if (buf != stackbuf)
		free(buf);
	return rc;
}

/* ---- GetFlows ------------------------------------------------------------ */

static void call_free(struct hl_obs_call *c)
{
	hl_cfilters_free(c->white, c->nwhite);
	hl_cfilters_free(c->black, c->nblack);
	free(c);
}

static bool call_match(const struct hl_obs_call *c, const struct hl_flow *f, const char *node)
{
	if (c->since_ns && f->time_ns < c->since_ns)
		return false;
	if (c->until_ns && f->time_ns > c->until_ns)
		return false;
	return (!c->nwhite || hl_cfilters_any(c->white, c->nwhite, f, node)) &&
	       !hl_cfilters_any(c->black, c->nblack, f, node);
}

static uint64_t ts_ns(const Google__Protobuf__Timestamp *t)
{
	if (!t || t->seconds < 0)
		return 0;
	return (uint64_t)t->seconds * 1000000000ULL + (uint64_t)(t->nanos > 0 ? t->nanos : 0);
}

/* Tell c's reader of the flows it lost (its queue was full), then f. */
static void call_send(struct hl_obs_call *c, const uint8_t *msg, size_t len, const char *node)
{
	if (c->lost) {
		Flow__LostEvent le = FLOW__LOST_EVENT__INIT;
		le.source = FLOW__LOST_EVENT_SOURCE__OBSERVER_EVENTS_QUEUE;
		le.num_events_lost = c->lost;
		Observer__GetFlowsResponse r = OBSERVER__GET_FLOWS_RESPONSE__INIT;
		r.response_types_case = OBSERVER__GET_FLOWS_RESPONSE__RESPONSE_TYPES_LOST_EVENTS;
		r.lost_events = &le;
		r.node_name = (char *)node;
		if (send_msg(c->s, &r.base))
			goto lost;
		c->lost = 0;
	}
	if (hl_grpc_send(c->s, msg, len) == 0)
		return;
lost:
	c->lost++;
}

static void get_flows(struct hl_grpc *g, struct hl_grpc_stream *s, const uint8_t *msg, size_t len)
{
	const struct hl_grpc_source *src = hl_grpc_src(g);
	Observer__GetFlowsRequest *req = observer__get_flows_request__unpack(NULL, len, msg);
	if (!req) {
		hl_grpc_finish(s, HL_GRPC_INVALID_ARGUMENT, "GetFlowsRequest: not a valid protobuf message");
		return;
	}
	struct hl_obs_call *c = calloc(1, sizeof(*c));
	char err[HL_ERR_LEN] = "";
	if (!c) {
		observer__get_flows_request__free_unpacked(req, NULL);
		hl_grpc_finish(s, HL_GRPC_INTERNAL, "out of memory");
		return;
	}
	c->g = g;
	c->s = s;
	c->since_ns = ts_ns(req->since);
	c->until_ns = ts_ns(req->until);
	if (req->first && req->follow)
		snprintf(err, sizeof(err), "GetFlowsRequest: first is incompatible with follow");
	else if (hl_cfilters_compile(req->whitelist, req->n_whitelist, &c->white, &c->nwhite, "whitelist",
				     err, sizeof(err)) ||
		 hl_cfilters_compile(req->blacklist, req->n_blacklist, &c->black, &c->nblack, "blacklist",
				     err, sizeof(err))) {
	}
	bool follow = req->follow, first = req->first;
	uint64_t number = req->number;
	bool replay = !follow || number || c->since_ns;
	observer__get_flows_request__free_unpacked(req, NULL);
	if (err[0]) {
		call_free(c);
		hl_grpc_finish(s, HL_GRPC_INVALID_ARGUMENT, "%s", err);
		return;
	}
	/* the ring: number 0 is all of it */
	size_t n = hl_ring_len(src->h), taken = 0;
	size_t *hits = replay ? malloc((n ? n : 1) * sizeof(*hits)) : NULL;
	if (replay && !hits) {
		call_free(c);
		hl_grpc_finish(s, HL_GRPC_INTERNAL, "out of memory");
		return;
	}
	for (size_t k = 0; replay && k < n && (!number || taken < number); k++) {
		size_t i = first ? k : n - 1 - k;
		if (call_match(c, hl_ring_get(src->h, i), src->node))
			hits[taken++] = i;
	}
	for (size_t k = 0; k < taken; k++) {
		size_t i = hits[first ? k : taken - 1 - k]; /* oldest first */
		struct hl_flow_pb pb;
		const uint8_t *m = hl_flow_pb(&pb, hl_ring_get(src->h, i), src->node, &len);
		if (m)
			call_send(c, m, len, src->node);
		hl_flow_pb_done(&pb);
	}
	free(hits);
	/* following up to an until already past: nothing more can come */
	if (!follow || (c->until_ns && c->until_ns <= realtime_ns())) {
		call_free(c);
		hl_grpc_finish(s, HL_GRPC_OK, NULL);
		return;
	}
	struct hl_obs_list *l = hl_grpc_obs(g);
	c->next = l->head;
	l->head = c;
	l->n++;
	hl_grpc_set_call(s, c);
	/* the headers now: a follower with nothing yet knows it is being served */
	hl_grpc_send_headers(s);
}

void hl_obs_stream_gone(struct hl_grpc *g, struct hl_obs_call *call)
{
	struct hl_obs_list *l = hl_grpc_obs(g);
	for (struct hl_obs_call **pp = &l->head; *pp; pp = &(*pp)->next) {
		if (*pp == call) {
			*pp = call->next;
			l->n--;
			break;
		}
	}
	call_free(call);
}

void hl_grpc_flow(struct hl_grpc *g, const struct hl_flow *f)
{
	struct hl_obs_list *l = hl_grpc_obs(g);
	if (!g || !l->head)
		return;
	const struct hl_grpc_source *src = hl_grpc_src(g);
	struct hl_flow_pb pb;
	const uint8_t *m = NULL;
	size_t len = 0;
	for (struct hl_obs_call *c = l->head, *next; c; c = next) {
		next = c->next;
		if (c->until_ns && f->time_ns > c->until_ns) {
			/* past until: the call is complete (the stream closes later) */
			hl_grpc_finish(c->s, HL_GRPC_OK, NULL);
			continue;
		}
		if (!call_match(c, f, src->node))
			continue;
		if (!m && !(m = hl_flow_pb(&pb, f, src->node, &len)))
			break;
		call_send(c, m, len, src->node);
	}
	if (m)
		hl_flow_pb_done(&pb);
}

void hl_grpc_lost(struct hl_grpc *g, uint64_t n)
{
	if (!g)
		return;
	struct hl_obs_list *l = hl_grpc_obs(g);
	Flow__LostEvent le = FLOW__LOST_EVENT__INIT;
	le.source = FLOW__LOST_EVENT_SOURCE__PERF_EVENT_RING_BUFFER;
	le.num_events_lost = n;
	Observer__GetFlowsResponse r = OBSERVER__GET_FLOWS_RESPONSE__INIT;
	r.response_types_case = OBSERVER__GET_FLOWS_RESPONSE__RESPONSE_TYPES_LOST_EVENTS;
	r.lost_events = &le;
	r.node_name = (char *)hl_grpc_src(g)->node;
	for (struct hl_obs_call *c = l->head; c; c = c->next)
		if (send_msg(c->s, &r.base))
			c->lost++;
}

unsigned hl_grpc_followers(const struct hl_grpc *g)
{
	return g ? hl_grpc_obs((struct hl_grpc *)g)->n : 0;
}

/* ---- ServerStatus, GetNodes ---------------------------------------------- */

static void server_status(struct hl_grpc *g, struct hl_grpc_stream *s)
{
	const struct hl_grpc_source *src = hl_grpc_src(g);
	struct hl_ring_stats st;
	hl_ring_stats(src->h, &st);
	Google__Protobuf__UInt32Value connected = GOOGLE__PROTOBUF__UINT32_VALUE__INIT,
				      unavailable = GOOGLE__PROTOBUF__UINT32_VALUE__INIT;
	connected.value = 1; /* this node: hubble-lite answers for itself only */
	Observer__ServerStatusResponse r = OBSERVER__SERVER_STATUS_RESPONSE__INIT;
	r.num_flows = st.num;
	r.max_flows = st.max;
	r.seen_flows = st.seen;
	r.uptime_ns = realtime_ns() - src->start_ns;
	r.num_connected_nodes = &connected;
	r.num_unavailable_nodes = &unavailable;
	r.version = (char *)HL_GRPC_VERSION;
	if (send_msg(s, &r.base))
		hl_grpc_finish(s, HL_GRPC_INTERNAL, "out of memory");
	else
		hl_grpc_finish(s, HL_GRPC_OK, NULL);
}

struct node_list {
	Observer__Node **nodes;
	size_t n, cap;
	const char *self;
};

static int add_peer(const struct fibril_node *node, void *ud)
{
	struct node_list *l = ud;
	char name[FIBRIL_NODE_NAME_LEN + 1];
	hl_copy_str(name, sizeof(name), node->name, sizeof(node->name));
	if (node->source == FIBRIL_NODE_SOURCE_LOCAL || !strcmp(name, l->self) || l->n >= l->cap)
		return 0;
	Observer__Node *x = calloc(1, sizeof(*x) + sizeof(name) + 48);
	if (!x)
		return -1;
	observer__node__init(x);
	x->name = (char *)(x + 1);
	memcpy(x->name, name, sizeof(name));
	x->address = x->name + sizeof(name);
	if (node->has_ipv4)
		inet_ntop(AF_INET, &node->ipv4, x->address, 48);
	else if (node->has_ipv6)
		inet_ntop(AF_INET6, &node->ipv6, x->address, 48);
	x->state = RELAY__NODE_STATE__UNKNOWN_NODE_STATE; /* its hubble-lite is not asked */
	l->nodes[l->n++] = x;
	return 0;
}

static void get_nodes(struct hl_grpc *g, struct hl_grpc_stream *s)
{
	const struct hl_grpc_source *src = hl_grpc_src(g);
	struct hl_ring_stats st;
	hl_ring_stats(src->h, &st);
	Observer__TLS tls = OBSERVER__TLS__INIT;
	tls.enabled = hl_grpc_tls(g);
	tls.server_name = (char *)"";
	Observer__Node self = OBSERVER__NODE__INIT;
	self.name = (char *)src->node;
	self.version = (char *)HL_GRPC_VERSION;
	self.address = (char *)hl_grpc_address(g);
	self.state = RELAY__NODE_STATE__NODE_CONNECTED;
	self.tls = &tls;
	self.uptime_ns = realtime_ns() - src->start_ns;
	self.num_flows = st.num;
	self.max_flows = st.max;
	self.seen_flows = st.seen;
	Observer__Node *list[257] = {&self};
	struct node_list l = {.nodes = list + 1, .cap = 256, .self = src->node};
	void *ctx = NULL;
	const struct fibril_nodes_ops *ops = (const struct fibril_nodes_ops *)fibril_service_lookup(
		hl_grpc_module(g), FIBRIL_NODES_CAPABILITY, 1, &ctx);
	if (ops && FIBRIL_SERVICE_HAS(ops, list))
		ops->list(ctx, add_peer, &l);
	Observer__GetNodesResponse r = OBSERVER__GET_NODES_RESPONSE__INIT;
	r.nodes = list;
	r.n_nodes = 1 + l.n;
	int rc = send_msg(s, &r.base);
	for (size_t i = 0; i < l.n; i++)
		free(l.nodes[i]);
	if (rc)
		hl_grpc_finish(s, HL_GRPC_INTERNAL, "out of memory");
	else
		hl_grpc_finish(s, HL_GRPC_OK, NULL);
}

void hl_obs_request(struct hl_grpc *g, struct hl_grpc_stream *s, const char *path,
		    const uint8_t *msg, size_t len)
{
	if (!strcmp(path, "/observer.Observer/GetFlows")) {
		get_flows(g, s, msg, len);
		return;
	}
	ProtobufCMessage *empty = NULL;
	if (!strcmp(path, "/observer.Observer/ServerStatus") &&
	    (empty = (ProtobufCMessage *)observer__server_status_request__unpack(NULL, len, msg))) {
		protobuf_c_message_free_unpacked(empty, NULL);
		server_status(g, s);
	} else if (!strcmp(path, "/observer.Observer/GetNodes") &&
		   (empty = (ProtobufCMessage *)observer__get_nodes_request__unpack(NULL, len, msg))) {
		protobuf_c_message_free_unpacked(empty, NULL);
		get_nodes(g, s);
	} else if (!strcmp(path, "/observer.Observer/ServerStatus") ||
		   !strcmp(path, "/observer.Observer/GetNodes")) {
		hl_grpc_finish(s, HL_GRPC_INVALID_ARGUMENT, "%s: not a valid protobuf message", path + 19);
	} else {
		hl_grpc_finish(s, HL_GRPC_UNIMPLEMENTED, "no such method: %.80s", path);
	}
}
