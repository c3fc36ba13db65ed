/* modules/kvstore-etcd/lease.c - leases: grant (/v3/lease/grant), keep
 * alive every TTL/3 (/v3/lease/keepalive; an answer without TTL means etcd
 * no longer knows the lease: it is lost, FIBRIL_KVSTORE_TOPIC_LEASE_LOST is
 * published and it is no longer kept alive) and revoke (/v3/lease/revoke).
 * At stop the keepalives end but nothing is revoked: keys attached to a
 * lease survive an agent restart within the TTL. */
#include <errno.h>
#include <stdlib.h>

#include "etcd.h"

struct etcd_lease {
	struct etcd_lease *next;
	struct etcd *e;
	int64_t id, ttl;
	struct fibril_timer *timer;
	bool inflight; /* a keepalive is on its way */
};

static struct etcd_lease *lease_find(struct etcd *e, int64_t id)
{
	struct etcd_lease *l = e->leases;
	while (l && l->id != id)
		l = l->next;
	return l;
}

static void lease_forget(struct etcd *e, int64_t id)
{
	for (struct etcd_lease **p = &e->leases; *p; p = &(*p)->next) {
		struct etcd_lease *l = *p;
		if (l->id != id)
			continue;
		*p = l->next;
		e->nleases--;
		fibril_timer_cancel(l->timer);
		free(l);
		return;
	}
}

static void lease_lost(struct etcd *e, int64_t id, const char *why)
{
	struct fibril_kvstore_event ev = {.sz = sizeof(ev), .lease = id};
	fibril_warn(e->m, "lease %lld lost: %s", (long long)id, why);
	lease_forget(e, id);
	fibril_bus_publish(e->m, FIBRIL_KVSTORE_TOPIC_LEASE_LOST, 1, &ev, sizeof(ev));
}

static uint64_t keepalive_period_ms(int64_t ttl)
{
	uint64_t ms = (uint64_t)ttl * 1000 / 3;
	return ms < 500 ? 500 : ms;
}

static void keepalive_done(struct etcd_req *r, int err, struct json_object *resp)
{
	struct etcd *e = r->e;
	struct etcd_lease *l = lease_find(e, r->id);
	if (!l || err == -ECANCELED)
		return; /* revoked meanwhile, or stopping */
	l->inflight = false;
	if (!err && json_object_object_get_ex(resp, "error", NULL)) /* inside the stream */
		err = etcd_json_error(resp, r->errbuf, sizeof(r->errbuf));
	etcd_metrics_keepalive(!err);
	if (err == -ENOENT) {
		lease_lost(e, l->id, r->errbuf);
		return;
	}
	if (err) {
		fibril_debug(e->m, "keepalive of lease %lld: %s", (long long)l->id, r->errbuf);
		return; /* try again at the next tick */
	}
	struct json_object *res = NULL;
	if (!json_object_object_get_ex(resp, "result", &res))
		res = resp;
	int64_t ttl = etcd_json_int(res, "TTL");
	if (ttl <= 0) {
		lease_lost(e, l->id, "etcd no longer knows it (expired or revoked)");
		return;
	}
	if (ttl != l->ttl) {
		l->ttl = ttl;
		fibril_timer_rearm(l->timer, keepalive_period_ms(ttl), keepalive_period_ms(ttl));
	}
}

static void keepalive_send(struct etcd_lease *l)
{
	struct etcd *e = l->e;
	if (l->inflight || !e->running)
		return;
	struct json_object *body = json_object_new_object();
	if (body)
		json_object_object_add(body, "ID", json_object_new_int64(l->id));
	struct etcd_req *r = etcd_req_new(e, "/v3/lease/keepalive", body, keepalive_done, NULL);
	if (!r)
		return;
	r->id = l->id;
	l->inflight = etcd_req_send(r) == 0;
}

static void on_keepalive_tick(struct fibril_timer *t, void *ud)
{
	keepalive_send(ud);
}

static int lease_track(struct etcd *e, int64_t id, int64_t ttl)
{
	struct etcd_lease *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->e = e;
	l->id = id;
	l->ttl = ttl;
	uint64_t period = keepalive_period_ms(ttl);
	l->timer = fibril_timer_add(e->m, period, period, on_keepalive_tick, l);
	if (!l->timer) {
		free(l);
		return -ENOMEM;
	}
	l->next = e->leases;
	e->leases = l;
	e->nleases++;
	return 0;
}

static void grant_done(struct etcd_req *r, int err, struct json_object *resp)
{
	fibril_kv_lease_fn cb = (fibril_kv_lease_fn)r->user_cb;
	int64_t id = 0, ttl = 0;
	if (!err) {
		id = etcd_json_int(resp, "ID");
		ttl = etcd_json_int(resp, "TTL");
		if (id == 0 || ttl <= 0)
			err = -EIO;
		else
			err = lease_track(r->e, id, ttl);
	}
	if (cb)
		cb(r->user_ud, err, err ? 0 : id, err ? 0 : ttl);
}

int etcd_op_lease_grant(void *ctx, int64_t ttl_seconds, fibril_kv_lease_fn cb, void *ud)
{
	struct etcd *e = ctx;
	if (!e->running)
		return -ECANCELED;
	if (ttl_seconds <= 0)
		ttl_seconds = (int64_t)(e->lease_ttl_ms / 1000);
	struct json_object *body = json_object_new_object();
	if (!body)
		return -ENOMEM;
	json_object_object_add(body, "TTL", json_object_new_int64(ttl_seconds));
	struct etcd_req *r = etcd_req_new(e, "/v3/lease/grant", body, grant_done, NULL);
	if (!r)
		return -ENOMEM;
	r->user_cb = (etcd_user_fn)cb;
	r->user_ud = ud;
	return etcd_req_send(r);
}

static void revoke_done(struct etcd_req *r, int err, struct json_object *resp)
{
	fibril_kv_done_fn cb = (fibril_kv_done_fn)r->user_cb;
	if (cb)
		cb(r->user_ud, err, err ? 0 : etcd_header_revision(resp));
}

int etcd_op_lease_revoke(void *ctx, int64_t lease, fibril_kv_done_fn cb, void *ud)
{
	struct etcd *e = ctx;
	if (!e->running)
		return -ECANCELED;
	if (lease <= 0)
		return -EINVAL;
	struct json_object *body = json_object_new_object();
	if (!body)
		return -ENOMEM;
	json_object_object_add(body, "ID", json_object_new_int64(lease));
	struct etcd_req *r = etcd_req_new(e, "/v3/lease/revoke", body, revoke_done, NULL);
	if (!r)
		return -ENOMEM;
	r->user_cb = (etcd_user_fn)cb;
	r->user_ud = ud;
	int rc = etcd_req_send(r);
	if (rc == 0)
		lease_forget(e, lease); /* no more keepalives, whatever etcd answers */
	return rc;
}

void etcd_lease_kick_all(struct etcd *e)
{
	for (struct etcd_lease *l = e->leases; l; l = l->next)
		keepalive_send(l);
}

void etcd_lease_free_all(struct etcd *e)
{
	while (e->leases)
		lease_forget(e, e->leases->id);
}
