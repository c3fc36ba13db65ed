/* host/api_int.h - what the two halves of the API server share: the route
 * table and the request and response a handler sees (host/api_routes.c),
 * and the HTTP server that parses requests and sends answers
 * (host/api.c). Internal to the host. */
#ifndef FIBRIL_HOST_API_INT_H
#define FIBRIL_HOST_API_INT_H

#include "internal.h"

#define MAX_SEGMENTS 16
#define MAX_QUERY 32

struct route {
	struct fibril_module *owner;
	char *method;
	char *pattern;
	char *segs[MAX_SEGMENTS];
	size_t nsegs;
	uint32_t flags;
	fibril_route_fn cb;
	void *ud;
	bool tcp; /* served on the TCP listener instead of the unix socket */
	struct route *next;
};

struct fibril_request {
	const char *method;
	char path[1024];
	char path_split[1024];
	const char *param_names[MAX_SEGMENTS];
	const char *param_values[MAX_SEGMENTS];
	size_t nparams;
	char *query[MAX_QUERY][2];
	size_t nquery;
	char *body;
	size_t body_len;
};

struct fibril_response {
	int status;
	char *content_type;
	char *body;
	size_t len;
	bool answered;
};

/* Every route, newest first (host/api_routes.c). */
HIDDEN extern struct route *g_routes;

/* Split path (modified) at '/' into at most MAX_SEGMENTS segments. */
HIDDEN size_t split_path(char *path, char **segs);
HIDDEN void free_route(struct route *r);
/* Whether r's pattern matches the segments; fills req's parameters. */
HIDDEN bool route_matches(const struct route *r, struct fibril_request *req, char **segs, size_t n);

#endif
