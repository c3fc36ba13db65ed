/* modules/endpoint/cluster_crd.c - identity-allocation = crd: cluster-wide
 * identities as Cilium's CiliumIdentity objects (cilium.io/v2, cluster-
 * scoped; the name is the number, `security-labels` the label set) through
 * the k8s capability's writes (SDK 1.11), with no kvstore.
 *
 * A label set's number is found by linear probing from a hash of the
 * labels: try to create the object named by the first candidate; an
 * AlreadyExists is answered by reading it: the same labels (another node
 * won the race, or this node restarted) -> that number; other labels -> the
 * next candidate. Every node walks the same sequence over objects that
 * never change their labels, so racing nodes end on one number without a
 * lock, and a restarted or new node finds the number again from the API
 * server alone. The allocation steps live in cluster.c beside the kvstore
 * ones (they share its waiters, deadline and retries); this file: the
 * start, the object's JSON, and the labels of any node's identity (the
 * ciliumidentities informer's cache), whose events go on the bus as
 * identity-added / -deleted. */
#include "endpoint_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <fibril/k8s.h>

uint32_t cl_crd_first(const char *labels)
{
	uint32_t h = 2166136261u; /* FNV-1a: the same on every node */

	for (const unsigned char *p = (const unsigned char *)labels; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h;
}

/* "source:key=value" lines -> {"source:key": "value"} */
static struct json_object *labels_object(const char *labels)
{
	struct json_object *o = json_object_new_object();
	const char *p = labels;

	while (o && *p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		const char *eq = memchr(p, '=', n);
		size_t kl = eq ? (size_t)(eq - p) : n;
		char *key = strndup(p, kl);

		if (!key) {
			json_object_put(o);
			return NULL;
		}
		json_object_object_add(o, key, json_object_new_string_len(eq ? eq + 1 : "",
									  eq ? (int)(n - kl - 1) : 0));
		free(key);
		p += n;
		if (*p == '\n')
			p++;
	}
	return o;
}

char *cl_crd_identity_body(uint32_t n, const char *labels)
{
	struct json_object *doc = json_object_new_object(), *md = json_object_new_object();
	struct json_object *sec = labels_object(labels);
	char name[16];
	char *out = NULL;

	if (doc && md && sec) {
		snprintf(name, sizeof(name), "%u", n);
		json_object_object_add(doc, "apiVersion", json_object_new_string("cilium.io/v2"));
		json_object_object_add(doc, "kind", json_object_new_string("CiliumIdentity"));
		json_object_object_add(md, "name", json_object_new_string(name));
		json_object_object_add(doc, "metadata", md);
		json_object_object_add(doc, "security-labels", sec);
		out = strdup(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN));
		json_object_put(doc);
		return out;
	}
	json_object_put(doc);
	json_object_put(md);
	json_object_put(sec);
	return NULL;
}

/* The object's security-labels, or NULL. */
static struct json_object *security_labels(struct json_object *obj)
{
	struct json_object *sec;

	if (!obj || !json_object_object_get_ex(obj, "security-labels", &sec) ||
	    !json_object_is_type(sec, json_type_object))
		return NULL;
	return sec;
}

int cl_crd_labels_match(const char *json, const char *labels)
{
	struct json_object *obj = json ? json_tokener_parse(json) : NULL;
	struct json_object *theirs = security_labels(obj), *ours = labels_object(labels);
	int rc = -1;

	if (theirs && ours) {
		rc = json_object_object_length(theirs) == json_object_object_length(ours);
		json_object_object_foreach(ours, k, v) {
			struct json_object *tv;

			if (!rc)
				break;
			rc = json_object_object_get_ex(theirs, k, &tv) &&
			     json_object_is_type(tv, json_type_string) &&
			     !strcmp(json_object_get_string(tv), json_object_get_string(v));
		}
	}
	json_object_put(obj);
	json_object_put(ours);
	return rc;
}

static int key_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void cl_crd_answers_free(struct ep_cluster *c)
{
	fibril_timer_cancel(c->crd_answers_timer);
	c->crd_answers_timer = NULL;
	for (size_t i = 0; i < c->ncrd_answers; i++)
		free(c->crd_answers[i]);
	free(c->crd_answers);
	c->crd_answers = NULL;
	c->ncrd_answers = 0;
}

static void on_answers_timer(struct fibril_timer *t, void *ud)
{
	struct ep_cluster *c = ud;

	(void)t;
	c->crd_answers_timer = NULL; /* a one-shot timer is gone once it fired */
	cl_crd_answers_free(c);
}

/* Keep an answer until the loop runs again; NULL (and freed) when that fails. */
static const char *answer_keep(struct ep_cluster *c, char *s)
{
	char **grown = s ? realloc(c->crd_answers, (c->ncrd_answers + 1) * sizeof(*grown)) : NULL;

	if (!grown) {
		free(s);
		return NULL;
	}
	c->crd_answers = grown;
	c->crd_answers[c->ncrd_answers++] = s;
	if (!c->crd_answers_timer)
		c->crd_answers_timer = fibril_timer_add(c->mg->m, 0, 0, on_answers_timer, c);
	return s;
}

/* an object's security-labels in the '\n' form (sorted), malloc'd; NULL: none */
static char *labels_of(const char *json)
{
	struct json_object *obj = json ? json_tokener_parse(json) : NULL;
	struct json_object *sec = security_labels(obj);
	size_t count = sec ? (size_t)json_object_object_length(sec) : 0, i = 0, len = 1;
	char **lines = count ? calloc(count, sizeof(*lines)) : NULL, *out = NULL;

	if (lines) {
		json_object_object_foreach(sec, k, v) {
			const char *val = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";

			if (asprintf(&lines[i], "%s=%s", k, val) < 0) {
				lines[i] = NULL;
				break;
			}
			len += strlen(lines[i]) + 1;
			i++;
		}
		qsort(lines, i, sizeof(*lines), key_cmp); /* labels are kept sorted */
		if (i == count && (out = calloc(1, len)))
			for (size_t j = 0; j < i; j++) {
				if (j)
					strcat(out, "\n");
				strcat(out, lines[j]);
			}
		for (size_t j = 0; j < i; j++)
			free(lines[j]);
		free(lines);
	}
	json_object_put(obj);
	return out;
}

const char *cl_crd_labels(struct ep_cluster *c, uint32_t n)
{
	char name[16];
	const char *json;

	snprintf(name, sizeof(name), "%u", n);
	json = c->k8s ? c->k8s->get(c->k8sctx, FIBRIL_K8S_CILIUM_IDENTITIES, "", name) : NULL;
	char *out = labels_of(json);

	return out ? answer_keep(c, out) : NULL;
}

/* a CiliumIdentity of any node came, changed or went: the identity events
 * the kvstore mode publishes from its id/ watch (the policy's selectors) */
static int on_identity_object(const struct fibril_event *ev, void *ud)
{
	struct ep_cluster *c = ud;
	const struct fibril_k8s_event *k = ev->payload;
	const char *name;
	uint32_t n;

	if (!c->running || ev->payload_len < sizeof(*k) || !(name = FIBRIL_K8S_STR(k, name)) ||
	    cl_number_parse(name, strlen(name), FIBRIL_IDENTITY_LOCAL_MIN, UINT32_MAX, &n))
		return 0;
	if (k->type == FIBRIL_K8S_DELETED) {
		cl_identity_event(c, n, NULL);
		return 0;
	}
	char *labels = labels_of(FIBRIL_K8S_STR(k, object));

	if (labels && *labels)
		cl_identity_event(c, n, labels);
	free(labels);
	return 0;
}

int cl_crd_start(struct ep_cluster *c)
{
	struct ep_manager *mg = c->mg;
	void *ctx = NULL;
	const struct fibril_k8s_ops *k8s = (const struct fibril_k8s_ops *)fibril_service_lookup(
		mg->m, FIBRIL_K8S_CAPABILITY, FIBRIL_K8S_VERSION, &ctx);

	if (!k8s || !FIBRIL_SERVICE_HAS(k8s, request) || !k8s->request) {
		fibril_module_set_error(mg->m, "identity-allocation = crd: no k8s module with writes "
					"(k8s interface %d, SDK 1.11) is loaded", FIBRIL_K8S_VERSION);
		return -ENOENT;
	}
	c->crd = true;
	c->k8s = k8s;
	c->k8sctx = ctx;
	if (!c->crd_sub)
		c->crd_sub = fibril_bus_subscribe(mg->m, FIBRIL_K8S_TOPIC_PREFIX
						  FIBRIL_K8S_CILIUM_IDENTITIES, 1, on_identity_object, c);
	int rc = c->crd_sub ? k8s->watch_resource(ctx, FIBRIL_K8S_CILIUM_IDENTITIES) : -ENOMEM;

	if (rc) {
		fibril_module_set_error(mg->m, "identity-allocation = crd: cannot watch %s: %s",
					FIBRIL_K8S_CILIUM_IDENTITIES, strerror(-rc));
		return rc;
	}
	const char *node = k8s->node_name(ctx);

	snprintf(c->node, sizeof(c->node), "%s", node && *node ? node : "node");
	c->timeout_ms = fibril_config_duration_ms(mg->m, "identity-timeout");
	c->running = true;
	if ((rc = cl_crd_gc_start(c))) {
		c->running = false;
		return rc;
	}
	mg->cluster = c;
	mg->identity_released = ep_cluster_unref;
	fibril_info(mg->m, "identities are cluster-wide through the Kubernetes API "
		    "(CiliumIdentity objects, node %s)", c->node);
	fibril_health_report(mg->m, "identities", FIBRIL_HEALTH_OK,
			     "cluster-wide through CiliumIdentity objects as node %s", c->node);
	return 0;
}
