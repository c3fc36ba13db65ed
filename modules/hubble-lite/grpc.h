/* modules/hubble-lite/grpc.h - hubble-lite's gRPC server of Hubble's
 * Observer API: the transport (grpc_server.c: the unix socket and the TLS
 * listener, HTTP/2 with nghttp2, gRPC framing, limits) and the calls
 * (grpc_observer.c: GetFlows, GetNodes, ServerStatus with protobuf-c),
 * with the small interface between them and hubble.c. Everything runs on
 * the agent's loop thread. */
#ifndef FIBRIL_HUBBLE_GRPC_H
#define FIBRIL_HUBBLE_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hubble.h"

struct fibril_module;
struct hl_grpc;        /* the server (grpc_server.c) */
struct hl_grpc_stream; /* one call on one HTTP/2 stream */
struct hl_obs_call;    /* the observer's state of one call (grpc_observer.c) */

/* gRPC status codes used here */
enum {
	HL_GRPC_OK = 0,
	HL_GRPC_INVALID_ARGUMENT = 3,
	HL_GRPC_RESOURCE_EXHAUSTED = 8,
	HL_GRPC_UNIMPLEMENTED = 12,
	HL_GRPC_INTERNAL = 13,
};

/* What the server reads of hubble-lite (hubble.c fills it). */
struct hl_grpc_source {
	const struct hubble *h;
	const char *node;                  /* this node's name */
	uint64_t start_ns;                 /* CLOCK_REALTIME at init */
};

/* ---- hubble.c -> the server ---------------------------------------------- */
/* Reads the [hubble-lite] grpc-* keys; NULL with err set (the listener
 * that could not be made, the TLS setting missing, ...). A NULL with
 * err[0] == '\0' means both listeners are off. */
struct hl_grpc *hl_grpc_new(struct fibril_module *m, const struct hl_grpc_source *src, char *err,
			    size_t errlen);
void hl_grpc_free(struct hl_grpc *g);
/* A new flow in the ring / events lost before the ring: to the followers. */
void hl_grpc_flow(struct hl_grpc *g, const struct hl_flow *f);
void hl_grpc_lost(struct hl_grpc *g, uint64_t n);
/* Followers of GetFlows now (for the summary). */
unsigned hl_grpc_followers(const struct hl_grpc *g);

/* ---- the server -> the observer ------------------------------------------ */
/* A whole request message of path arrived on s: answer it (send, finish). */
void hl_obs_request(struct hl_grpc *g, struct hl_grpc_stream *s, const char *path,
		    const uint8_t *msg, size_t len);
/* s is gone (client cancel, connection closed): forget its call. */
void hl_obs_stream_gone(struct hl_grpc *g, struct hl_obs_call *call);
/* The ring and the node, for the observer. */
const struct hl_grpc_source *hl_grpc_src(const struct hl_grpc *g);
struct fibril_module *hl_grpc_module(const struct hl_grpc *g);
bool hl_grpc_tls(const struct hl_grpc *g);

/* ---- the observer -> the server ------------------------------------------ */
/* Queue one message (already protobuf-encoded, len bytes) on s: 0, or
 * -ENOBUFS when s's queue is over its limit (the message is dropped),
 * -ENOMEM. */
int hl_grpc_send(struct hl_grpc_stream *s, const uint8_t *msg, size_t len);
/* End the call with status (and a message when not OK); no send after. */
void hl_grpc_finish(struct hl_grpc_stream *s, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void hl_grpc_set_call(struct hl_grpc_stream *s, struct hl_obs_call *call);
/* The response headers now (a follower with nothing to read yet). */
void hl_grpc_send_headers(struct hl_grpc_stream *s);
/* The calls following flows. */
struct hl_obs_list {
	struct hl_obs_call *head;
	unsigned n;
};
struct hl_obs_list *hl_grpc_obs(struct hl_grpc *g);
/* Where this server is reached ("unix:///run/fibril/hubble.sock", or the
 * grpc-listen address). */
const char *hl_grpc_address(const struct hl_grpc *g);

/* ---- grpc_flow.c: a flow as an encoded GetFlowsResponse ------------------ */
struct hl_flow_pb {
	uint8_t *heap;
	uint8_t stack[1536];
};
/* The encoded message (in pb), *len bytes; NULL when out of memory. Free
 * with hl_flow_pb_done. */
const uint8_t *hl_flow_pb(struct hl_flow_pb *pb, const struct hl_flow *f, const char *node,
			  size_t *len);
void hl_flow_pb_done(struct hl_flow_pb *pb);

/* ---- grpc_filter.c: Hubble's FlowFilter, checked once, matched often ---- */
struct Flow__FlowFilter;
struct hl_cfilter;
/* n filters of the request's list `what` ("whitelist"): 0, or -1 with a
 * one-line reason naming the list, its index and the field in err. */
int hl_cfilters_compile(struct Flow__FlowFilter **in, size_t n, struct hl_cfilter **out,
			size_t *nout, const char *what, char *err, size_t errlen);
/* One of the n filters matches f (false when n is 0). */
bool hl_cfilters_any(const struct hl_cfilter *cf, size_t n, const struct hl_flow *f,
		     const char *node);
void hl_cfilters_free(struct hl_cfilter *cf, size_t n);

/* ---- grpc_listen.c ------------------------------------------------------- */
struct ssl_ctx_st;
/* The listening socket in *fd: 0, or -1 with a one-line reason naming
 * the setting in err. */
int hl_listen_unix(const char *path, int *fd, char *err, size_t errlen);
int hl_listen_tcp(const char *spec, int *fd, char *err, size_t errlen);
/* The TLS context of the TCP listener (all three files required). */
struct ssl_ctx_st *hl_tls_server_ctx(const char *cert, const char *key, const char *ca, char *err,
				     size_t errlen);

/* ---- hubble.c: the ring, oldest first ------------------------------------ */
size_t hl_ring_len(const struct hubble *h);
const struct hl_flow *hl_ring_get(const struct hubble *h, size_t i);
struct hl_ring_stats {
	uint64_t num, max, seen, lost;
};
void hl_ring_stats(const struct hubble *h, struct hl_ring_stats *st);

#endif
