/* modules/hubble-lite/stream.c - the followers of /v1/flows/stream: each
 * websocket client with its own filter gets the flows it matches as they
 * come, one JSON object per line, and is told what it lost. */
#include "hubble_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the stream: /v1/flows/stream ----------------------------------------------------------- */

/* Each follower gets the flows its filter matches, one JSON object per
 * line (FIBRIL_STREAM_LINES joins the lines queued while it is busy into
 * one frame); a follower too slow to keep up loses its own flows and is
 * told: {"lost_events":{"source":"SLOW_READER","num_events_lost":N}}, or with
 * format=hubble as Hubble's GetFlowsResponse ({"lost_events":{"source":
 * "OBSERVER_EVENTS_QUEUE","num_events_lost":"N"},"node_name":...,"time":...}). */

static void send_text(struct hl_follower *fw, const char *text, size_t len)
{
	int rc = fibril_stream_client_send(fw->c, text, len);
	if (rc == 0)
		fw->sent++;
	else if (rc == -ENOBUFS)
		fibril_series_inc(fw->h->s_follower_lost);
}

/* The flow's JSON line in h->line (reused); NULL when out of memory. */
static const char *flow_text(struct hubble *h, const struct hl_flow *f, bool hubble, size_t *len)
{
	h->line.len = 0;
	h->line.failed = false;
	if (hubble)
		hl_flow_hubble_json(&h->line, f, h->node, h->uuid_seed);
	else
		hl_flow_json(&h->line, f, h->node);
	*len = h->line.failed ? 0 : h->line.len;
	return h->line.failed ? NULL : h->line.p;
}

/* 1 when fw's queue was full (the flow is lost to it, counted by the
 * caller), else 0. */
static unsigned send_msg(struct hl_follower *fw, struct fibril_stream_msg *msg)
{
	int rc = fibril_stream_client_send_msg(fw->c, msg);
	if (rc == 0)
		fw->sent++;
	return rc == -ENOBUFS;
}

/* The flow goes to every follower whose filter matches it: its JSON is
 * written once, on the first match, and shared by reference (the host
 * copies it into no queue). */
void hl_follow_flow(struct hubble *h, const struct hl_flow *f)
{
	struct fibril_stream_msg *msgs[2] = {NULL, NULL}; /* flat, hubble */
	unsigned lost = 0; /* one metric update for all the followers */
	bool match = false;
	for (struct hl_follower *fw = h->followers; fw; fw = fw->next) {
		if (!fw->same_filter_as_prev)
			match = hl_query_match(&fw->filter, f);
		if (!match)
			continue;
		struct fibril_stream_msg **msg = &msgs[fw->hubble];
		if (!*msg) {
			size_t len;
			const char *text = flow_text(h, f, fw->hubble, &len);
			if (!text || !(*msg = fibril_stream_msg_new(text, len)))
				break; /* out of memory */
		}
		lost += send_msg(fw, *msg);
	}
	fibril_stream_msg_put(msgs[0]);
	fibril_stream_msg_put(msgs[1]);
	if (lost)
		fibril_series_add(h->s_follower_lost, lost);
}

/* The notice of n lost events from source for a follower: fibril's flat
 * line, or Hubble's GetFlowsResponse (format=hubble) in h->line (reused). */
static const char *lost_line(struct hubble *h, bool hubble, const char *source, uint64_t n,
			     size_t *len)
{
	h->line.len = 0;
	h->line.failed = false;
	if (hubble) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		hl_lost_hubble_json(&h->line, source, n, h->node,
				    (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec);
	} else {
		hl_buf_printf(&h->line, "{\"lost_events\":{\"source\":\"%s\",\"num_events_lost\":%llu}}",
			      source, (unsigned long long)n);
	}
	*len = h->line.failed ? 0 : h->line.len;
	return h->line.failed ? NULL : h->line.p;
}

void hl_follow_lost(struct hubble *h, const char *source, uint64_t n)
{
	struct fibril_stream_msg *msgs[2] = {NULL, NULL}; /* flat, hubble */
	unsigned lost = 0;
	for (struct hl_follower *fw = h->followers; fw; fw = fw->next) {
		struct fibril_stream_msg **msg = &msgs[fw->hubble];
		if (!*msg) {
			size_t len;
			const char *text = lost_line(h, fw->hubble, source, n, &len);
			if (!text || !(*msg = fibril_stream_msg_new(text, len)))
				break; /* out of memory */
		}
		lost += send_msg(fw, *msg);
	}
	fibril_stream_msg_put(msgs[0]);
	fibril_stream_msg_put(msgs[1]);
	if (lost)
		fibril_series_add(h->s_follower_lost, lost);
}

/* fw into the list of followers: right after one with the same filter
 * (both built from zeroed memory by the same parser, so the same query
 * gives the same bytes), else at the head. */
static void followers_add(struct hubble *h, struct hl_follower *fw)
{
	struct hl_follower *twin = h->followers;
	while (twin && memcmp(&twin->filter, &fw->filter, sizeof(fw->filter)))
		twin = twin->next;
	if (twin) {
		fw->same_filter_as_prev = true;
		fw->next = twin->next;
		twin->next = fw;
	} else {
		fw->same_filter_as_prev = false;
		fw->next = h->followers;
		h->followers = fw;
	}
	h->nfollowers++;
}

int hl_stream_open(struct fibril_stream_client *c, const struct fibril_request *req, void *ud,
		       char *err, size_t errlen)
{
	struct hubble *h = ud;
	struct hl_follower *fw = calloc(1, sizeof(*fw));
	if (!fw) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	int hubble = hl_format_of(req, err, errlen);
	if (hubble < 0 || hl_filter_from_request(&fw->filter, req, err, errlen)) {
		free(fw);
		return -1;
	}
	fw->hubble = hubble;
	fw->h = h;
	fw->c = c;
	/* with last=N or since: the ring's matches first, as hubble observe -f does */
	if (fw->filter.f.last || fw->filter.f.since_ns) {
		size_t n = 0;
		size_t *hits = hl_ring_matches(h, &fw->filter, &n);
		for (size_t i = 0; hits && i < n; i++) {
			size_t len;
			const char *text = flow_text(h, &h->ring[hits[i]], fw->hubble, &len);
			if (text)
				send_text(fw, text, len);
		}
		free(hits);
	}
	fw->filter.f.last = 0;
	fibril_stream_client_set_data(c, fw);
	followers_add(h, fw);
	fibril_series_set(h->s_followers, h->nfollowers);
	return 0;
}

void hl_stream_close(struct fibril_stream_client *c, void *ud)
{
	struct hubble *h = ud;
	struct hl_follower *fw = fibril_stream_client_data(c);
	for (struct hl_follower **pp = &h->followers; *pp; pp = &(*pp)->next) {
		if (*pp == fw) {
			*pp = fw->next;
			h->nfollowers--;
			/* the next one is still its predecessor's twin only if fw was */
			if (*pp)
				(*pp)->same_filter_as_prev &= fw->same_filter_as_prev;
			break;
		}
	}
	fibril_series_set(h->s_followers, h->nfollowers);
	free(fw);
}

void hl_stream_lost(struct fibril_stream_client *c, uint64_t n, void *ud)
{
	(void)ud;
	struct hl_follower *fw = fibril_stream_client_data(c);
	size_t len;
	fw->lost += n;
	const char *text = lost_line(fw->h, fw->hubble, "SLOW_READER", n, &len);
	if (text)
		send_text(fw, text, len);
}
