/* modules/policy/endpoints.c - the local endpoints (st->eps, by ID) from
 * the endpoint module's events, and what each is matched with: its labels
 * plus its namespace's (under POL_NS_LABELS_PREFIX, from the k8s module's
 * namespace cache), and its pod's named ports (its containers' ports);
 * a policy's subject also sees its pod's labels that identities leave out
 * (subject_labels: a deny-all on a StatefulSet pod's name selects that pod,
 * not its identity). An
 * endpoint that changes leaves the selector cache with what it was
 * matched with and joins it again with what it is now, and is marked
 * dirty; one that goes has its entries removed from the map. */
#include "policy_state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

const char *pol_labels_namespace(const char *labels, char *buf, size_t len)
{
	const char *key = "io.kubernetes.pod.namespace=";
	buf[0] = '\0';
	for (const char *l = labels; l && *l;) {
		const char *end = strchr(l, '\n');
		size_t n = end ? (size_t)(end - l) : strlen(l);
		const char *c = memchr(l, ':', n);
		const char *k = c ? c + 1 : l;
		size_t kl = strlen(key);
		if ((size_t)(l + n - k) > kl && !strncmp(k, key, kl)) {
			snprintf(buf, len, "%.*s", (int)(l + n - k - kl), k + kl);
			break;
		}
		l = end ? end + 1 : NULL;
	}
	return buf;
}

const char *ep_namespace(const struct pol_ep *ep, char *buf, size_t len)
{
	return pol_labels_namespace(ep->labels, buf, len);
}

void ep_free(struct pol_ep *ep)
{
	if (!ep)
		return;
	free(ep->labels);
	free(ep->match_labels);
	free(ep->subject_labels);
	free(ep->ports);
	free(ep->entries);
	free(ep);
}

static struct json_object *k8s_object(struct pol_state *st, const char *res, const char *ns,
				      const char *name)
{
	const char *t = st->k8s && name[0] ? st->k8s->get(st->k8s_ctx, res, ns, name) : NULL;
	return t ? json_tokener_parse(t) : NULL;
}

static char *ns_labels_of(struct pol_state *st, const char *ns)
{
	size_t cap = 256, len = 0;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	out[0] = '\0';
	/* as the API server adds it to every namespace */
	len += (size_t)snprintf(out, cap, "k8s:%skubernetes.io/metadata.name=%s", POL_NS_LABELS_PREFIX,
				ns);
	struct json_object *o = k8s_object(st, FIBRIL_K8S_NAMESPACES, "", ns), *md, *labels;
	if (o && json_object_object_get_ex(o, "metadata", &md) &&
	    json_object_object_get_ex(md, "labels", &labels) &&
	    json_object_is_type(labels, json_type_object)) {
		json_object_object_foreach(labels, k, v)
		{
			if (!strcmp(k, "kubernetes.io/metadata.name") || !json_object_is_type(v, json_type_string))
				continue;
			const char *val = json_object_get_string(v);
			size_t need = len + strlen(POL_NS_LABELS_PREFIX) + strlen(k) + strlen(val) + 8;
			if (need > cap) {
				char *n = realloc(out, need * 2);
				if (!n)
					break;
				out = n;
				cap = need * 2;
			}
			len += (size_t)snprintf(out + len, cap - len, "\nk8s:%s%s=%s", POL_NS_LABELS_PREFIX, k,
						val);
		}
	}
	json_object_put(o);
	return out;
}

/* match_labels + the pod object's labels that identities leave out, as
 * "k8s:KEY=VALUE" (malloc'd; NULL: out of memory). */
static char *subject_labels_of(const char *match_labels, struct json_object *pod)
{
	struct json_object *md, *labels;
	size_t cap = strlen(match_labels) + 1, len = cap - 1;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	memcpy(out, match_labels, cap);
	if (!pod || !json_object_object_get_ex(pod, "metadata", &md) ||
	    !json_object_object_get_ex(md, "labels", &labels) ||
	    !json_object_is_type(labels, json_type_object))
		return out;
	json_object_object_foreach(labels, k, v)
	{
		if (!json_object_is_type(v, json_type_string))
			continue;
		if (!pol_key_filtered(k))
			continue; /* the endpoint's own labels have it */
		const char *val = json_object_get_string(v);
		size_t need = len + strlen(k) + strlen(val) + 7;
		if (need > cap) {
			char *n = realloc(out, need * 2);
			if (!n)
				break;
			out = n;
			cap = need * 2;
		}
		len += (size_t)snprintf(out + len, cap - len, "%sk8s:%s=%s", len ? "\n" : "", k, val);
	}
	return out;
}

static void pod_ports_of(struct pol_ep *ep, struct json_object *o)
{
	struct json_object *spec, *ctrs;
	free(ep->ports);
	ep->ports = NULL;
	ep->nports = 0;
	if (!o || !json_object_object_get_ex(o, "spec", &spec) ||
	    !json_object_object_get_ex(spec, "containers", &ctrs) ||
	    !json_object_is_type(ctrs, json_type_array))
		return;
	for (size_t i = 0; i < json_object_array_length(ctrs); i++) {
		struct json_object *ports, *c = json_object_array_get_idx(ctrs, i);
		if (!json_object_object_get_ex(c, "ports", &ports) ||
		    !json_object_is_type(ports, json_type_array))
			continue;
		for (size_t j = 0; j < json_object_array_length(ports); j++) {
			struct json_object *pt = json_object_array_get_idx(ports, j), *name, *num, *proto;
			if (!json_object_object_get_ex(pt, "name", &name) ||
			    !json_object_object_get_ex(pt, "containerPort", &num) ||
			    !pol_port_name_ok(json_object_get_string(name)))
				continue;
			int64_t n = json_object_get_int64(num);
			const char *pr = json_object_object_get_ex(pt, "protocol", &proto)
						 ? json_object_get_string(proto)
						 : "TCP";
			uint8_t p = !strcmp(pr, "TCP") ? IPPROTO_TCP : !strcmp(pr, "UDP") ? IPPROTO_UDP
				    : !strcmp(pr, "SCTP")				  ? IPPROTO_SCTP
											  : 0;
			if (n < 1 || n > 65535 || !p)
				continue;
			struct pol_named_port *v = realloc(ep->ports, (ep->nports + 1) * sizeof(*v));
			if (!v)
				break;
			ep->ports = v;
			snprintf(v[ep->nports].name, sizeof(v->name), "%s", json_object_get_string(name));
			v[ep->nports].proto = p;
			v[ep->nports].port = (uint16_t)n;
			ep->nports++;
		}
	}
}

/* What labels of namespace ns are matched with: they and the namespace's
 * (malloc'd, NULL: out of memory). */
char *pol_match_labels_of(struct pol_state *st, const char *labels, const char *ns)
{
	char *nsl = ns[0] ? ns_labels_of(st, ns) : NULL;
	size_t n = strlen(labels) + (nsl ? strlen(nsl) : 0) + 2;
	char *ml = malloc(n);
	if (ml)
		snprintf(ml, n, "%s%s%s", labels, nsl && labels[0] ? "\n" : "", nsl ? nsl : "");
	free(nsl);
	return ml;
}

/* Rebuild what the endpoint is matched with; true when it changed. */
bool ep_refresh(struct pol_state *st, struct pol_ep *ep)
{
	char nsbuf[POL_NS_MAX];
	const char *ns = ep->pod_ns[0] ? ep->pod_ns : ep_namespace(ep, nsbuf, sizeof(nsbuf));
	char *ml = pol_match_labels_of(st, ep->labels, ns);
	struct json_object *pod = k8s_object(st, FIBRIL_K8S_PODS, ep->pod_ns, ep->pod_name);
	char *sl = ml ? subject_labels_of(ml, pod) : NULL;
	if (!ml || !sl) {
		free(ml);
		json_object_put(pod);
		return false;
	}
	size_t old_n = ep->nports;
	struct pol_named_port *old = ep->nports ? malloc(old_n * sizeof(*old)) : NULL;
	if (old)
		memcpy(old, ep->ports, old_n * sizeof(*old));
	pod_ports_of(ep, pod);
	json_object_put(pod);
	bool changed = !ep->match_labels || strcmp(ml, ep->match_labels) || !ep->subject_labels ||
		       strcmp(sl, ep->subject_labels) || old_n != ep->nports ||
		       (old_n && (!old || memcmp(old, ep->ports, old_n * sizeof(*old))));
	free(old);
	free(ep->match_labels);
	ep->match_labels = ml;
	free(ep->subject_labels);
	ep->subject_labels = sl;
	return changed;
}

static void ep_forget(struct pol_state *st, uint16_t id)
{
	struct pol_ep *ep = st->eps[id];
	if (!ep)
		return;
	sel_cache_ep(st, ep, -1);
	if (st->dp) {
		pol_dp_enforce(st, ep, false, false);
		for (size_t i = 0; i < ep->nentries; i++)
			pol_dp_write(st, ep, &ep->entries[i], true);
	}
	ep_free(ep);
	st->eps[id] = NULL;
}

int ep_seen(const struct fibril_endpoint_event *ev, void *ud)
{
	struct pol_state *st = ud;
	if (ev->id == 0)
		return 0;
	struct pol_ep *ep = st->eps[ev->id];
	const char *labels = FIBRIL_ENDPOINT_LABELS(ev);
	if (ep && ep->identity == ev->identity && !strcmp(ep->labels, labels) &&
	    ep->has_ipv4 == ev->has_ipv4 && ep->ipv4.s_addr == ev->ipv4.s_addr &&
	    ep->has_ipv6 == ev->has_ipv6 && !memcmp(&ep->ipv6, &ev->ipv6, sizeof(ep->ipv6)))
		return 0;
	if (!ep) {
		if (!(ep = calloc(1, sizeof(*ep))))
			return 0;
		ep->id = ev->id;
		st->eps[ev->id] = ep;
		if ((size_t)ev->id + 1 > st->ep_hi)
			st->ep_hi = (size_t)ev->id + 1;
	} else
		sel_cache_ep(st, ep, -1);
	char *l = strdup(labels);
	if (!l) {
		sel_cache_ep(st, ep, 1);
		return 0;
	}
	free(ep->labels);
	ep->labels = l;
	ep->identity = ev->identity;
	ep->has_ipv4 = ev->has_ipv4;
	ep->ipv4 = ev->ipv4;
	ep->has_ipv6 = ev->has_ipv6;
	ep->ipv6 = ev->ipv6;
	snprintf(ep->pod_ns, sizeof(ep->pod_ns), "%.*s", (int)sizeof(ev->pod_namespace),
		 ev->pod_namespace);
	snprintf(ep->pod_name, sizeof(ep->pod_name), "%.*s", (int)sizeof(ev->pod_name), ev->pod_name);
	ep_refresh(st, ep);
	sel_cache_ep(st, ep, 1);
	ep->dirty = true;
	return 0;
}

int pol_on_endpoint_event(const struct fibril_event *ev, void *ud)
{
	struct pol_state *st = ud;
	const struct fibril_endpoint_event *e = ev->payload;
	if (ev->payload_len < sizeof(uint32_t) || e->sz < offsetof(struct fibril_endpoint_event, labels) +
							       sizeof(e->labels) ||
	    e->sz > ev->payload_len || (e->labels && e->labels >= ev->payload_len))
		return -EINVAL;
	st->sel_gen++;
	if (!strcmp(ev->topic, FIBRIL_ENDPOINT_TOPIC_DELETED))
		ep_forget(st, e->id);
	else
		ep_seen(e, st);
	pol_mark_dependents(st);
	pol_recompute(st);
	return 0;
}
