/* modules/nodes/registry.c - the kvstore's node registry (Cilium's
 * state/nodes/v1), one of the module's two node sources: this node's
 * record (record.c) put under state/nodes/v1/<name>, held by a lease of
 * lease-ttl (granted again and the record put again when the kvstore says
 * the lease was lost, put again when the kvstore reconnects); the registry
 * read whole (mark and sweep: a node no longer there is removed unless its
 * Node object takes over), then watched from that read's revision (a
 * compacted watch reads it whole again). A failed step fails a pending
 * start, else is retried after [nodes] retry. The first read starts the
 * ipcache's (ipcache.c). */
#include "nodes_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t now_unix(void)
{
	return (int64_t)time(NULL);
}

static bool running(const struct nodes *s)
{
	return s->kv && !s->stopping; /* the registry's paths */
}

/* one registry key read or watched: add, update or just mark the node */
static void apply_put(struct nodes *s, const struct fibril_kv *kv)
{
	const char *name = kv->key + strlen(NODES_KEY_PREFIX);
	char why[NODES_WHY_LEN];
	if (strncmp(kv->key, NODES_KEY_PREFIX, strlen(NODES_KEY_PREFIX)) || !nodes_name_valid(name)) {
		s->stats.bad_records++;
		fibril_warn(s->m, "registry key %s: not a node name; ignored", kv->key);
		return;
	}
	if (!strcmp(name, s->self.name))
		return;
	struct fibril_node n;
	if (nodes_record_decode(kv->value, kv->value_len, name, &n, why, sizeof(why))) {
		s->stats.bad_records++;
		fibril_warn(s->m, "registry key %s (revision %lld): %s; ignored", kv->key,
			    (long long)kv->mod_revision, why);
		struct node_entry *stale = nodes_find(s, name);
		if (stale)
			stale->mark = true; /* keep what was known rather than drop it */
		return;
	}
	n.last_seen_unix = now_unix();
	nodes_upsert(s, &n);
}

static void resync(struct nodes *s);

static void on_retry(struct fibril_timer *t, void *ud)
{
	struct nodes *s = ud;
	(void)t;
	s->retry = NULL;
	if (!running(s))
		return;
	if (!s->lease)
		nodes_registry_start(s);
	else if (!s->synced)
		resync(s);
	else
		nodes_registry_start(s); /* the put failed: a new lease and a new put */
}

/* Errors a retry can fix: the kvstore was slow or unreachable for a moment
 * (an agent starting on a busy node, etcd restarting). */
static bool transient(int err)
{
	switch (err < 0 ? -err : err) {
	case ETIMEDOUT:
	case ECONNREFUSED:
	case ECONNRESET:
	case ECONNABORTED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case ENOTCONN:
	case EPIPE:
	case EAGAIN:
		return true;
	default:
		return false;
	}
}

/* A step failed: a pending start fails with it unless a retry can fix it
 * (then the start stays pending, bounded by [agent] start-timeout, and the
 * step is retried every [nodes] retry); after the start, retry. */
static void failed(struct nodes *s, int err, const char *step)
{
	snprintf(s->why, sizeof(s->why), "%s: %s", step, strerror(err < 0 ? -err : err));
	if (s->start_pending && !transient(err)) {
		s->start_pending = false;
		fibril_module_set_error(s->m, "node registry: %s", s->why);
		if (s->in_start)
			s->start_done = true;
		else
			fibril_module_start_done(s->m, err ? err : -EIO);
		return;
	}
	fibril_health_report(s->m, "registry", FIBRIL_HEALTH_DEGRADED, "%s (retrying)", s->why);
	fibril_warn(s->m, "node registry: %s (retrying)", s->why);
	if (!s->retry && running(s))
		s->retry = fibril_timer_add(s->m, (uint64_t)fibril_config_duration_ms(s->m, "retry"), 0,
					    on_retry, s);
}

static void on_watch(void *ud, int err, enum fibril_kv_event_type type, const struct fibril_kv *kv,
		     int64_t revision)
{
	struct nodes *s = ud;
	(void)revision;
	if (!running(s))
		return;
	if (err) {
		if (err == -ERANGE) { /* compacted: read everything again */
			s->stats.resyncs++;
			resync(s);
		} else {
			fibril_health_report(s->m, "registry", FIBRIL_HEALTH_DEGRADED,
					     "watch broken (%s): re-establishing", strerror(-err));
		}
		return;
	}
	fibril_health_report(s->m, "registry", FIBRIL_HEALTH_OK, "registered as %s, %zu remote node(s)",
			     s->self.name, s->n_nodes);
	if (type == FIBRIL_KV_EVENT_PUT) {
		apply_put(s, kv);
		return;
	}
	const char *name = kv->key + strlen(NODES_KEY_PREFIX);
	if (!strncmp(kv->key, NODES_KEY_PREFIX, strlen(NODES_KEY_PREFIX))) {
		if (!strcmp(name, s->self.name)) {
			/* ours went (lease lost, or removed by hand): register again */
			fibril_warn(s->m, "this node's registry key was removed; registering again");
			nodes_registry_start(s);
			return;
		}
		struct node_entry *e = nodes_find(s, name);
		if (e && !nodes_k8s_fallback(s, e))
			nodes_record_gone(s, e); /* deleted: it goes; expired: lost */
	}
}

static void on_get(void *ud, int err, const struct fibril_kv *kvs, size_t n, int64_t revision)
{
	struct nodes *s = ud;
	s->reading = false;
	if (!running(s))
		return;
	if (err) {
		failed(s, err, "reading the registry");
		return;
	}
	for (struct node_entry *e = s->nodes; e; e = e->next)
		e->mark = false;
	for (size_t i = 0; i < n; i++)
		apply_put(s, &kvs[i]);
	for (struct node_entry *e = s->nodes, *next; e; e = next) {
		next = e->next;
		/* a node only the Kubernetes source knows is not the registry's */
		if (!e->mark && e->n.source != FIBRIL_NODE_SOURCE_K8S && !nodes_k8s_fallback(s, e))
			nodes_record_gone(s, e);
	}
	if (!s->synced && s->nl)
		nodes_routes_sweep_old(s);
	s->synced = true;
	if (!s->watch)
		s->watch = s->kv->watch(s->kvctx, NODES_KEY_PREFIX, revision + 1, on_watch, s);
	if (!s->ipc.synced && !s->ipc.reading)
		nodes_ipcache_start(s, revision);
	fibril_info(s->m, "registry read at revision %lld: %zu remote node(s)", (long long)revision,
		    s->n_nodes);
	fibril_health_report(s->m, "registry", FIBRIL_HEALTH_OK, "registered as %s, %zu remote node(s)",
			     s->self.name, s->n_nodes);
	if (s->start_pending)
		nodes_start_finished(s, 0);
}

static void resync(struct nodes *s)
{
	if (s->reading)
		return;
	s->reading = true;
	int rc = s->kv->get(s->kvctx, NODES_KEY_PREFIX, true, on_get, s);
	if (rc) {
		s->reading = false;
		failed(s, rc, "reading the registry");
	}
}

static void on_put(void *ud, int err, int64_t revision)
{
	struct nodes *s = ud;
	(void)revision;
	if (!running(s))
		return;
	if (err) {
		s->lease = 0; /* the lease may be gone: the retry grants a new one */
		failed(s, err, "registering this node");
		return;
	}
	s->stats.registrations++;
	nodes_alive_put(s); /* beside the record, under its lease (lost.c) */
	nodes_ipcache_publish(s); /* our endpoints, under this lease */
	if (!s->synced)
		resync(s);
}

static void put_self(struct nodes *s)
{
	char key[sizeof(NODES_KEY_PREFIX) + FIBRIL_NODE_NAME_LEN];
	snprintf(key, sizeof(key), NODES_KEY_PREFIX "%s", s->self.name);
	s->self.last_seen_unix = now_unix();
	char *json = nodes_record_encode(&s->self);
	if (!json) {
		failed(s, -ENOMEM, "registering this node");
		return;
	}
	int rc = s->kv->put(s->kvctx, key, json, strlen(json), s->lease, on_put, s);
	free(json);
	if (rc)
		failed(s, rc, "registering this node");
}

static void on_lease(void *ud, int err, int64_t lease, int64_t ttl)
{
	struct nodes *s = ud;
	s->lease_pending = 0;
	if (!running(s))
		return;
	if (err) {
		failed(s, err, "granting the registry lease");
		return;
	}
	s->lease = lease;
	fibril_debug(s->m, "registry lease %lld granted, TTL %llds", (long long)lease, (long long)ttl);
	put_self(s);
}

void nodes_registry_start(struct nodes *s)
{
	if (s->lease_pending || !running(s))
		return;
	s->lease = 0;
	s->lease_pending = 1;
	int rc = s->kv->lease_grant(s->kvctx, s->ttl_s, on_lease, s);
	if (rc) {
		s->lease_pending = 0;
		failed(s, rc, "granting the registry lease");
	}
}

int nodes_registry_on_kv_event(const struct fibril_event *ev, void *ud)
{
	struct nodes *s = ud;
	if (!running(s) || !s->synced)
		return 0;
	if (!strcmp(ev->topic, FIBRIL_KVSTORE_TOPIC_LEASE_LOST)) {
		const struct fibril_kvstore_event *k = ev->payload;
		if (ev->payload_len >= offsetof(struct fibril_kvstore_event, lease) + sizeof(k->lease) &&
		    k->lease == s->lease) {
			fibril_warn(s->m, "the registry lease was lost; registering again");
			nodes_registry_start(s);
		}
	} else if (!strcmp(ev->topic, FIBRIL_KVSTORE_TOPIC_CONNECTED) && s->lease) {
		put_self(s); /* the store came back: make sure our record is there */
	}
	return 0;
}
