/* modules/ipam-cluster-pool/claim_k8s.c - the node CIDR claim through the
 * API server, for CRD mode (no kvstore, no node-cidr; issue 27). The API
 * server's optimistic concurrency settles races on one object only, so each
 * CIDR has its own claim object whose NAME is derived from the CIDR: the
 * coordination.k8s.io/v1 Lease kube-system/fibril-podcidr-v4-10-244-1-0-24,
 * labelled fibril.io/podcidr-claim=v4, annotated fibril.io/podcidr with the
 * CIDR, spec.holderIdentity the node name.
 *   1. the claims are watched (the k8s module's "podcidr-claims" informer);
 *      after its first list: a claim already ours (a restart; the last
 *      run's preferred), else the last run's CIDR if free, else the lowest
 *      subnet no claim holds;
 *   2. POST the Lease: created -> ours. AlreadyExists -> GET it: our name
 *      -> ours (a restart); another node's -> the next free subnet;
 *      gone meanwhile -> POST again;
 *   3. a held claim deleted or taken while we run is created again (the
 *      same CIDR; another holder: allocations stop, health says so).
 * A claim that does not parse (name, CIDR, family, holder), or whose CIDR
 * is outside the pool, is ignored with one log line. The GC leader
 * (modules/endpoint/cluster_crd_gc.c) deletes the claims of nodes whose
 * Node object is gone. */
#include "cluster_pool.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#define LEASE_PREFIX "fibril-podcidr-"
#define CIDR_ANNOTATION "fibril.io/podcidr"
#define SYNC_TIMEOUT_MS 60000
#define MAX_ROUNDS 64
#define MAX_WARNED 64 /* bad claims logged (each once) */

static const char *const CLAIMS[] = {FIBRIL_K8S_PODCIDR_CLAIMS, NULL};
static char warned[MAX_WARNED][80];
static size_t nwarned;

void cp_k8s_lease_name(const struct cp_fam *f, const struct fibril_cidr *c, char *buf,
		       size_t len)
{
	char text[FIBRIL_IPAM_CIDR_LEN];
	fibril_cidr_format(c, text, sizeof(text));
	for (char *p = text; *p; p++)
		if (*p == '.' || *p == ':' || *p == '/')
			*p = '-';
	snprintf(buf, len, LEASE_PREFIX "v%d-%s", f->family, text);
}

static bool running(const struct cp *cp)
{
	return cp->k8s && !cp->stopping;
}

/* An RFC 1123 subdomain of at most 253 characters: a node name. */
static bool good_node_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > 253 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-' ||
		      s[i] == '.'))
			return false;
	return true;
}

static const char *str_at(struct json_object *o, const char *a, const char *b, const char *c)
{
	const char *p[] = {a, b, c};
	for (size_t i = 0; o && i < 3 && p[i]; i++) {
		struct json_object *x;
		if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, p[i], &x))
			return NULL;
		o = x;
	}
	return o && json_object_is_type(o, json_type_string) ? json_object_get_string(o) : NULL;
}

static void warn_once(struct cp *cp, const char *name, const char *why)
{
	char key[80];
	snprintf(key, sizeof(key), "%.79s", name ? name : "?");
	for (size_t i = 0; i < nwarned; i++)
		if (strcmp(warned[i], key) == 0)
			return;
	if (nwarned < MAX_WARNED)
		snprintf(warned[nwarned++], sizeof(warned[0]), "%s", key);
	fibril_warn(cp->m, "pod CIDR claim Lease %s/%.80s ignored: %s", FIBRIL_K8S_PODCIDR_CLAIM_NS,
		    name ? name : "?", why);
}

/* A claim of family f, checked: its CIDR (the annotation, whose Lease name
 * must be the one derived from it, inside the pool with the mask) and its
 * holder. false: not f's, or bad (logged once). */
static bool claim_parse(struct cp_fam *f, struct json_object *o, struct fibril_cidr *cidr,
			const char **holder)
{
	const char *name = str_at(o, "metadata", "name", NULL);
	const char *text = str_at(o, "metadata", "annotations", CIDR_ANNOTATION);
	char want[128], fam[8];
	uint64_t idx;
	snprintf(fam, sizeof(fam), "v%d", f->family);
	const char *label = str_at(o, "metadata", "labels", FIBRIL_K8S_PODCIDR_CLAIM_LABEL);
	if (!name || !label || strcmp(label, fam) != 0)
		return false; /* another family's */
	if (!text || fibril_cidr_parse(text, cidr) || cidr->ip.family != f->family) {
		warn_once(f->cp, name, "no IPv4/IPv6 CIDR in its annotation " CIDR_ANNOTATION);
		return false;
	}
	cp_k8s_lease_name(f, cidr, want, sizeof(want));
	if (strcmp(want, name) != 0) {
		warn_once(f->cp, name, "its name is not the one of the CIDR it names");
		return false;
	}
	if (!cp_cidr_index(f, cidr, &idx)) {
		warn_once(f->cp, name, "its CIDR is outside the pool or not of the pool's mask size");
		return false;
	}
	*holder = str_at(o, "spec", "holderIdentity", NULL);
	if (!good_node_name(*holder)) {
		warn_once(f->cp, name, "its spec.holderIdentity is no node name");
		return false;
	}
	return true;
}

struct scan {
	struct cp_fam *f;
	struct fibril_cidr mine;
	bool have_mine;
};

static int scan_one(const char *json, void *ud)
{
	struct scan *s = ud;
	struct cp_fam *f = s->f;
	struct json_object *o = json_tokener_parse(json);
	struct fibril_cidr c;
	const char *holder;
	uint64_t idx;
	if (o && claim_parse(f, o, &c, &holder) && cp_cidr_index(f, &c, &idx)) {
		if (strcmp(holder, f->cp->node_name) != 0)
			cp_taken_add(f, idx);
		else if (!s->have_mine || (f->have_saved && cp_cidr_equal(&c, &f->saved))) {
			s->mine = c;
			s->have_mine = true;
		}
	}
	json_object_put(o);
	return 0;
}

/* ---- POST, and GET on AlreadyExists ---------------------------------------------- */

static void post(struct cp_fam *f);

static void on_get(void *ud, int status, const char *reason, const char *body, int err,
		   const char *message)
{
	struct cp_fam *f = ud;
	(void)reason;
	f->busy = false;
	if (!running(f->cp))
		return;
	if (status == 404) { /* deleted meanwhile: claim it as free */
		post(f);
		return;
	}
	if (status != 200) {
		fibril_debug(f->cp->m, "claim GET: %d %s", status, message);
		cp_claim_fail(f, err ? err : -EIO, "reading the claim Lease");
		return;
	}
	struct json_object *o = json_tokener_parse(body ? body : "");
	struct fibril_cidr c;
	const char *holder = NULL;
	bool ok = o && claim_parse(f, o, &c, &holder) && cp_cidr_equal(&c, &f->cand);
	if (ok && strcmp(holder, f->cp->node_name) == 0)
		cp_claim_held(f);
	else
		cp_claim_other_holds(f, ok ? holder : "an unreadable claim");
	json_object_put(o);
}

static void on_post(void *ud, int status, const char *reason, const char *body, int err,
		    const char *message)
{
	struct cp_fam *f = ud;
	struct cp *cp = f->cp;
	char name[128];
	(void)body;
	f->busy = false;
	if (!running(cp))
		return;
	if (status == 201 || status == 200) {
		cp_claim_held(f);
		return;
	}
	if (status == 409 && reason && strcmp(reason, "AlreadyExists") == 0) {
		cp_k8s_lease_name(f, &f->cand, name, sizeof(name));
		f->busy = true;
		int rc = cp->k8s->request(cp->k8sctx, "GET", FIBRIL_K8S_LEASES,
					  FIBRIL_K8S_PODCIDR_CLAIM_NS, name, NULL, on_get, f);
		if (rc) {
			f->busy = false;
			cp_claim_fail(f, rc, "reading the claim Lease");
		}
		return;
	}
	if (status)
		fibril_warn(cp->m, "claim Lease refused: %d %s", status, reason ? reason : "");
	cp_claim_fail(f, err ? err : -EIO, status ? "creating the claim Lease" : message);
}

static char *lease_body(struct cp_fam *f, const char *name)
{
	char cidr[FIBRIL_IPAM_CIDR_LEN], fam[8];
	struct json_object *doc = json_object_new_object(), *md = json_object_new_object();
	struct json_object *labels = json_object_new_object(), *ann = json_object_new_object();
	struct json_object *spec = json_object_new_object();
	snprintf(fam, sizeof(fam), "v%d", f->family);
	fibril_cidr_format(&f->cand, cidr, sizeof(cidr));
	json_object_object_add(doc, "apiVersion", json_object_new_string("coordination.k8s.io/v1"));
	json_object_object_add(doc, "kind", json_object_new_string("Lease"));
	json_object_object_add(md, "name", json_object_new_string(name));
	json_object_object_add(md, "namespace", json_object_new_string(FIBRIL_K8S_PODCIDR_CLAIM_NS));
	json_object_object_add(labels, FIBRIL_K8S_PODCIDR_CLAIM_LABEL, json_object_new_string(fam));
	json_object_object_add(ann, CIDR_ANNOTATION, json_object_new_string(cidr));
	json_object_object_add(md, "labels", labels);
	json_object_object_add(md, "annotations", ann);
	json_object_object_add(doc, "metadata", md);
	json_object_object_add(spec, "holderIdentity", json_object_new_string(f->cp->node_name));
	json_object_object_add(doc, "spec", spec);
	char *out = strdup(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN));
	json_object_put(doc);
	return out;
}

/* Create the claim of f->cand. */
static void post(struct cp_fam *f)
{
	struct cp *cp = f->cp;
	char name[128];
	if (++f->rounds > MAX_ROUNDS) {
		f->rounds = 0;
		cp_claim_fail(f, -EAGAIN, "too many conflicting claims");
		return;
	}
	cp_k8s_lease_name(f, &f->cand, name, sizeof(name));
	char *body = lease_body(f, name);
	if (!body) {
		cp_claim_fail(f, -ENOMEM, "creating the claim Lease");
		return;
	}
	f->busy = true;
	int rc = cp->k8s->request(cp->k8sctx, "POST", FIBRIL_K8S_LEASES, FIBRIL_K8S_PODCIDR_CLAIM_NS,
				  NULL, body, on_post, f);
	free(body);
	if (rc) {
		f->busy = false;
		cp_claim_fail(f, rc, "creating the claim Lease");
	}
}

void cp_k8s_next(struct cp_fam *f)
{
	post(f);
}

/* ---- driving ------------------------------------------------------------------------ */

static void step(struct cp_fam *f)
{
	if (f->busy || (f->claim == CP_CLAIM_HELD && !f->reclaim))
		return;
	f->rounds = 0;
	if (f->have_node) { /* never move a held CIDR: create its claim again */
		f->cand = f->node;
		f->cand_src = "held";
		post(f);
		return;
	}
	struct scan s = {.f = f};
	f->ntaken = 0;
	f->cp->k8s->list(f->cp->k8sctx, FIBRIL_K8S_PODCIDR_CLAIMS, scan_one, &s);
	uint64_t idx;
	if (s.have_mine) {
		f->cand = s.mine;
		f->cand_src = "already claimed under this node's name";
	} else if (f->have_saved && cp_cidr_index(f, &f->saved, &idx) && !cp_is_taken(f, idx)) {
		f->cand = f->saved;
		f->cand_src = "the last run's, from the state file";
	} else if (cp_first_free(f, &f->cand)) {
		f->cand_src = "the first free one";
	} else {
		cp_claim_exhausted(f, NULL);
		return;
	}
	post(f);
}

void cp_k8s_kick(struct cp *cp)
{
	if (!running(cp) || !cp->k8s_synced)
		return;
	for (int i = 0; i < CP_NFAM; i++)
		if (cp->fam[i].enabled)
			step(&cp->fam[i]);
}

static void on_synced(void *ud, int err, const char *pending)
{
	struct cp *cp = ud;
	if (!running(cp))
		return;
	if (err) {
		fibril_warn(cp->m, "node CIDR claim waits for the first list of %s",
			    pending ? pending : FIBRIL_K8S_PODCIDR_CLAIMS);
		cp->k8s->wait_synced(cp->k8sctx, CLAIMS, SYNC_TIMEOUT_MS, on_synced, cp);
		return;
	}
	cp->k8s_synced = true;
	cp_k8s_kick(cp);
}

/* A held claim deleted, or now another's: create it again (or find it lost). */
static int on_claim_event(const struct fibril_event *ev, void *ud)
{
	struct cp *cp = ud;
	const struct fibril_k8s_event *e = ev->payload;
	if (!running(cp) || ev->payload_len < sizeof(*e) || e->sz < sizeof(*e))
		return 0;
	const char *name = FIBRIL_K8S_STR(e, name), *json = FIBRIL_K8S_STR(e, object);
	if (!name)
		return 0;
	bool kick_it = false;
	for (int i = 0; i < CP_NFAM; i++) {
		struct cp_fam *f = &cp->fam[i];
		char mine[128];
		if (!f->enabled || !f->have_node || f->claim != CP_CLAIM_HELD)
			continue;
		cp_k8s_lease_name(f, &f->node, mine, sizeof(mine));
		if (strcmp(mine, name) != 0)
			continue;
		bool gone = e->type == FIBRIL_K8S_DELETED;
		if (!gone) {
			struct json_object *o = json_tokener_parse(json ? json : "");
			const char *holder = str_at(o, "spec", "holderIdentity", NULL);
			gone = !holder || strcmp(holder, cp->node_name) != 0;
			json_object_put(o);
		}
		if (gone) {
			fibril_warn(cp->m, "the claim Lease %s of our node CIDR was %s: claiming it again",
				    name, e->type == FIBRIL_K8S_DELETED ? "deleted" : "changed");
			f->reclaim = true;
			kick_it = true;
		}
	}
	if (kick_it)
		cp_k8s_kick(cp);
	return 0;
}

int cp_k8s_start(struct cp *cp)
{
	int rc = cp->k8s->watch_resource(cp->k8sctx, FIBRIL_K8S_PODCIDR_CLAIMS);
	if (rc == 0) {
		cp->claims_sub = fibril_bus_subscribe(cp->m, FIBRIL_K8S_TOPIC_PREFIX
						     FIBRIL_K8S_PODCIDR_CLAIMS, 1, on_claim_event, cp);
		if (!cp->claims_sub)
			rc = -errno;
	}
	if (rc == 0)
		rc = cp->k8s->wait_synced(cp->k8sctx, CLAIMS, SYNC_TIMEOUT_MS, on_synced, cp);
	if (rc) {
		fibril_module_set_error(cp->m, "cannot watch the pod CIDR claims (Leases in %s): %s",
					FIBRIL_K8S_PODCIDR_CLAIM_NS, strerror(-rc));
		return rc;
	}
	for (int i = 0; i < CP_NFAM; i++)
		cp->fam[i].claim_t0 = cp_mono_ms();
	return 0;
}
