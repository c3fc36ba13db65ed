/* modules/nodes/lost.c - a node whose registry record went (issue 23).
 * Either it was deleted on purpose (by an operator, or by a node removed
 * from the cluster) and the node goes at once, or its lease expired (its
 * agent died, or lost the kvstore for the lease's TTL) and the node is
 * lost: its routes and ipcache entries go as before, but it stays listed
 * (GET /v1/nodes, `fibril node list`: "lost" and since when) and on the
 * nodes capability, so the health module keeps probing it and shows it
 * unreachable, until it comes back, its Kubernetes Node is deleted, or
 * [nodes] lost-node-grace passes (0: it goes at once, as before).
 *
 * Which of the two: every agent puts, next to its record, a key under
 * state/nodes/alive/v1/<name> held by the same lease. A lease that
 * expires takes both keys at once; a record deleted by hand leaves that
 * key while the lease runs. So when a record goes, the key is read: still
 * there, a deliberate delete; gone (or unreadable), an expiry. */
#include "nodes_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct alive_check {
	struct nodes *s;
	uint64_t lost_ms; /* which time the node was lost */
	char name[FIBRIL_NODE_NAME_LEN];
};

static struct node_entry *lost_find(struct nodes *s, const char *name)
{
	for (struct node_entry *e = s->lost; e; e = e->next)
		if (!strcmp(e->n.name, name))
			return e;
	return NULL;
}

static void lost_unlink(struct nodes *s, struct node_entry *e)
{
	for (struct node_entry **p = &s->lost; *p; p = &(*p)->next) {
		if (*p == e) {
			*p = e->next;
			break;
		}
	}
	e->next = NULL;
	if (!s->lost && s->lost_timer) {
		fibril_timer_cancel(s->lost_timer);
		s->lost_timer = NULL;
	}
}

/* out of the cluster: the nodes.node DELETED event (health stops probing it) */
static void lost_remove(struct nodes *s, struct node_entry *e, const char *why)
{
	lost_unlink(s, e);
	fibril_info(s->m, "node %s is gone (%s)", e->n.name, why);
	s->stats.deleted++;
	nodes_publish(s, FIBRIL_NODE_DELETED, &e->n);
	free(e);
}

struct node_entry *nodes_lost_take(struct nodes *s, const char *name)
{
	struct node_entry *e = lost_find(s, name);
	if (!e)
		return NULL;
	lost_unlink(s, e);
	e->lost_unix = 0;
	e->lost_ms = 0;
	fibril_info(s->m, "node %s is back", name);
	return e;
}

void nodes_lost_remove_name(struct nodes *s, const char *name, const char *why)
{
	struct node_entry *e = lost_find(s, name);
	if (e)
		lost_remove(s, e, why);
}

static void on_grace_tick(struct fibril_timer *t, void *ud)
{
	struct nodes *s = ud;
	(void)t;
	uint64_t now = fibril_now_ms();
	for (struct node_entry *e = s->lost, *next; e; e = next) {
		next = e->next;
		if (now - e->lost_ms >= s->lost_grace_ms)
			lost_remove(s, e, "lost for [nodes] lost-node-grace");
	}
}

static void on_alive(void *ud, int err, const struct fibril_kv *kvs, size_t n, int64_t revision)
{
	struct alive_check *c = ud;
	struct nodes *s = c->s;
	(void)kvs;
	(void)revision;
	struct node_entry *e = s->stopping ? NULL : lost_find(s, c->name);
	if (e && e->lost_ms == c->lost_ms) {
		if (err)
			fibril_warn(s->m, "node %s: cannot tell a deleted record from an expired one "
					  "(%s): kept as lost", c->name, strerror(-err));
		else if (n > 0) /* its lease runs: the record was deleted on purpose */
			lost_remove(s, e, "its registry record was deleted");
	}
	free(c);
}

void nodes_record_gone(struct nodes *s, struct node_entry *e)
{
	if (!s->lost_grace_ms || !s->kv) {
		nodes_remove_entry(s, e);
		return;
	}
	for (struct node_entry **p = &s->nodes; *p; p = &(*p)->next) {
		if (*p == e) {
			*p = e->next;
			break;
		}
	}
	s->n_nodes--;
	/* its routes and ipcache entries go now, as for a node removed */
	nodes_node_unprogram(s, &e->n);
	e->routed = false;
	nodes_ipcache_node_changed(s, e->n.name);
	e->lost_unix = (int64_t)time(NULL);
	e->lost_ms = fibril_now_ms();
	e->next = s->lost;
	s->lost = e;
	s->stats.lost++;
	fibril_warn(s->m, "node %s: its registry record is gone; unrouted, listed as lost until it "
			  "is removed or %llu s pass", e->n.name,
		    (unsigned long long)(s->lost_grace_ms / 1000));
	if (!s->lost_timer) {
		uint64_t tick = s->lost_grace_ms / 8;
		tick = tick < 200 ? 200 : tick > 10000 ? 10000 : tick;
		s->lost_timer = fibril_timer_add(s->m, tick, tick, on_grace_tick, s);
	}
	struct alive_check *c = calloc(1, sizeof(*c));
	char key[sizeof(NODES_ALIVE_PREFIX) + FIBRIL_NODE_NAME_LEN];
	if (!c)
		return;
	c->s = s;
	c->lost_ms = e->lost_ms;
	snprintf(c->name, sizeof(c->name), "%s", e->n.name);
	snprintf(key, sizeof(key), NODES_ALIVE_PREFIX "%s", e->n.name);
	if (s->kv->get(s->kvctx, key, false, on_alive, c))
		free(c);
}

static void on_alive_put(void *ud, int err, int64_t revision)
{
	struct nodes *s = ud;
	(void)revision;
	if (err && !s->stopping)
		fibril_warn(s->m, "cannot put this node's alive key: %s (a delete of its record "
				  "would look like an expiry)", strerror(-err));
}

void nodes_alive_put(struct nodes *s)
{
	char key[sizeof(NODES_ALIVE_PREFIX) + FIBRIL_NODE_NAME_LEN];
	snprintf(key, sizeof(key), NODES_ALIVE_PREFIX "%s", s->self.name);
	s->kv->put(s->kvctx, key, "1", 1, s->lease, on_alive_put, s);
}

void nodes_lost_free(struct nodes *s)
{
	fibril_timer_cancel(s->lost_timer);
	s->lost_timer = NULL;
	while (s->lost) {
		struct node_entry *e = s->lost;
		s->lost = e->next;
		free(e);
	}
}
