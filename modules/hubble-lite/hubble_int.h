/* modules/hubble-lite/hubble_int.h - what the module's own files share:
 * the module's state (struct hubble: the ring, the endpoints, the
 * followers, the metrics) and the calls between hubble.c (events, the
 * ring, GET /v1/flows, lifecycle) and stream.c (the followers of
 * /v1/flows/stream). Nothing here is seen outside the module. */
#ifndef FIBRIL_HUBBLE_LITE_PRIV_H
#define FIBRIL_HUBBLE_LITE_PRIV_H

#include "hubble.h"

#include <fibril/fibril.h>
#include <fibril/lb.h>
#include <fibril/endpoint.h>
#include <fibril/nodes.h>
#include <fibril/policy.h>

#define HL_MODULE "hubble-lite"
#define HL_CAPABILITY "flows"
#define NPROTO 5 /* TCP, UDP, ICMPv4, ICMPv6, other */

/* A local endpoint as the endpoint module announced it. */
struct hl_ep {
	uint16_t id;
	uint32_t identity;
	char ns[HL_NS_LEN], pod[HL_POD_LEN], labels[HL_LABELS_LEN];
	bool has4, has6;
	uint8_t ip4[4], ip6[16];
	struct hl_ep *next;
};

struct hubble;

/* One websocket client of /v1/flows/stream with its own filter. */
struct hl_follower {
	struct hubble *h;
	struct fibril_stream_client *c;
	struct hl_query filter; /* filter.f, and filter.exclude (--not) */
	bool hubble; /* format=hubble: Hubble's GetFlowsResponse lines */
	uint64_t sent, lost;
	/* its filter is byte for byte the one of the follower before it in
	 * the list (followers with the same filter are kept together): the
	 * match of a flow is worked out once for them all */
	bool same_filter_as_prev;
	struct hl_follower *next;
};

struct hubble {
	struct fibril_module *m;
	struct fibril_stream *stream;
	struct hl_follower *followers;
	int nfollowers;
	struct hl_buf line; /* a flow's JSON for the stream, reused */
	char node[256];
	uint64_t uuid_seed[2]; /* random: the flows' UUIDs of this run */
	struct hl_flow *ring;
	size_t size, head, count;
	uint64_t seq, lost, overwritten, malformed;
	/* drops the datapath sent no event for (over its event rate limit)
	 * and events its ring had no room for, as it last told
	 * (datapath.events_unsent) */
	uint64_t sampled, ring_lost;
	uint64_t sampled_total; /* over the datapath's restarts */
	struct hl_ep *eps;
	struct hl_svcmap *svcs; /* the lb module's services (lb.service events) */
	/* metrics */
	struct fibril_metric *m_flows, *m_drops;
	struct fibril_series *s_flows[3][4][NPROTO]; /* [verdict][type][proto] */
	/* the policy module, to name the rules of verdicts (NULL: none) */
	const struct fibril_policy_ops *pol;
	void *pol_ctx;
	struct fibril_series *s_drops[256];          /* by reason code, made on first drop */
	struct fibril_series *s_lost, *s_overwritten, *s_followers, *s_follower_lost, *s_sampled;
	struct hl_grpc *grpc; /* Hubble's Observer API (grpc_server.c), NULL: off */
	/* the nodes module's ipcache and the endpoint module's identities, to
	 * name another node's pods (NULL: not loaded, or too old) */
	const struct fibril_nodes_ops *nodes;
	void *nodes_ctx;
	const struct fibril_endpoint_ops *idents;
	void *idents_ctx;
	uint64_t start_ns;
};

/* ---- hubble.c: GET /v1/flows's parts the stream uses too -------------- */
/* the query's format: 0 flat (the default), 1 Hubble's; -1 with err */
int hl_format_of(const struct fibril_request *req, char *err, size_t errlen);
/* the filter of a request's query; -1 with err */
int hl_filter_from_request(struct hl_query *q, const struct fibril_request *req, char *err,
			   size_t errlen);
/* the ring's flows matching q, oldest first, as ring indexes (*n); NULL:
 * out of memory */
size_t *hl_ring_matches(const struct hubble *h, const struct hl_query *q, size_t *n);

/* ---- stream.c: the followers of /v1/flows/stream ---------------------- */
/* a new flow to every follower whose filter matches it */
void hl_follow_flow(struct hubble *h, const struct hl_flow *f);
/* n events lost on the way (source: Hubble's or fibril's name) */
void hl_follow_lost(struct hubble *h, const char *source, uint64_t n);
/* the stream's hooks (fibril_stream_ops) */
int hl_stream_open(struct fibril_stream_client *c, const struct fibril_request *req, void *ud,
		   char *err, size_t errlen);
void hl_stream_close(struct fibril_stream_client *c, void *ud);
void hl_stream_lost(struct fibril_stream_client *c, uint64_t n, void *ud);

#endif
