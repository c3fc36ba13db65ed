/* modules/k8s/list_scan.c - the informers' cached objects and the fast
 * read of a LIST page. An object is one allocation (the struct, then its
 * key, namespace, name, resourceVersion and JSON), not six: with 100,000
 * objects cached the five mallocs' headers and roundings were ~12 MB. A
 * page is read in place by modules/common/jscan.h: each item's text kept as
 * the server sent it and only its metadata's name, namespace and
 * resourceVersion read, where json-c built the whole page's tree and wrote
 * every item out again (most of the agent's CPU on a list of 100,000
 * CiliumEndpoints); anything the scanner does not understand (an escape in
 * a string, a fraction) sends the page to the json-c path, which reads
 * the same fields. */
#include <stdlib.h>
#include <string.h>

#include "jscan.h"
#include "k8s_mod.h"

static char *put(char *p, const char *s, size_t n)
{
	if (n)
		memcpy(p, s, n);
	p[n] = '\0';
	return p + n + 1;
}

struct k8s_obj *k8s_obj_new(const char *ns, size_t nsl, const char *name, size_t nl,
			    const char *rv, size_t rvl, const char *json, size_t jl)
{
	size_t kl = (nsl ? nsl + 1 : 0) + nl;
	struct k8s_obj *o = malloc(sizeof(*o) + kl + 1 + nsl + 1 + nl + 1 + rvl + 1 + jl + 1);
	if (!o)
		return NULL;
	memset(o, 0, sizeof(*o));
	char *p = (char *)(o + 1);
	o->key = p;
	if (nsl) {
		memcpy(p, ns, nsl);
		p[nsl] = '/';
		p += nsl + 1;
	}
	p = put(p, name, nl);
	o->ns = p;
	p = put(p, ns, nsl);
	o->name = p;
	p = put(p, name, nl);
	o->rv = p;
	p = put(p, rv, rvl);
	o->json = p;
	put(p, json, jl);
	return o;
}

/* One item of the page: *o its object (NULL when it has no name, as the
 * json-c path skips it); false when the scanner cannot read it. */
static bool item_scan(struct mod_jscan *s, struct k8s_obj **o)
{
	const char *k, *start, *name = NULL, *ns = "", *rv = "";
	size_t kl, nl = 0, nsl = 0, rvl = 0;
	int m;
	*o = NULL;
	mod_jscan_ws(s);
	start = s->p;
	if (!mod_jscan_open(s, '{'))
		return false;
	while ((m = mod_jscan_member(s, &k, &kl)) == 1) {
		if (!MOD_JSCAN_IS(k, kl, "metadata")) {
			if (!mod_jscan_skip(s))
				return false;
			continue;
		}
		if (!mod_jscan_open(s, '{'))
			return false;
		while ((m = mod_jscan_member(s, &k, &kl)) == 1) {
			bool ok;
			if (MOD_JSCAN_IS(k, kl, "name"))
				ok = mod_jscan_string(s, &name, &nl);
			else if (MOD_JSCAN_IS(k, kl, "namespace"))
				ok = mod_jscan_string(s, &ns, &nsl);
			else if (MOD_JSCAN_IS(k, kl, "resourceVersion"))
				ok = mod_jscan_string(s, &rv, &rvl);
			else
				ok = mod_jscan_skip(s);
			if (!ok)
				return false;
		}
		if (m < 0)
			return false;
	}
	if (m < 0)
		return false;
	if (name && !(*o = k8s_obj_new(ns, nsl, name, nl, rv, rvl, start, (size_t)(s->p - start))))
		return false;
	return true;
}

/* The page's items into next (each replacing one of its key), its
 * metadata's continue and resourceVersion as copies (NULL when absent or
 * empty). False when the scanner cannot read the page: what it put in next
 * is put there again by the json-c path. */
bool k8s_list_page_scan(struct k8s_cache *next, const char *text, size_t len, char **cont,
			char **rv)
{
	struct mod_jscan s;
	const char *k, *c = NULL, *v = NULL;
	size_t kl, cl = 0, vl = 0;
	bool items = false;
	int m;
	*cont = *rv = NULL;
	mod_jscan_init(&s, text, len);
	if (!mod_jscan_open(&s, '{'))
		return false;
	while ((m = mod_jscan_member(&s, &k, &kl)) == 1) {
		if (MOD_JSCAN_IS(k, kl, "metadata")) {
			if (!mod_jscan_open(&s, '{'))
				return false;
			while ((m = mod_jscan_member(&s, &k, &kl)) == 1) {
				bool ok;
				if (MOD_JSCAN_IS(k, kl, "continue"))
					ok = mod_jscan_string(&s, &c, &cl);
				else if (MOD_JSCAN_IS(k, kl, "resourceVersion"))
					ok = mod_jscan_string(&s, &v, &vl);
				else
					ok = mod_jscan_skip(&s);
				if (!ok)
					return false;
			}
			if (m < 0)
				return false;
		} else if (MOD_JSCAN_IS(k, kl, "items")) {
			if (!mod_jscan_open(&s, '['))
				return false;
			items = true;
			while ((m = mod_jscan_element(&s)) == 1) {
				struct k8s_obj *o;
				if (!item_scan(&s, &o))
					return false;
				if (o)
					k8s_cache_replace(next, o);
			}
			if (m < 0)
				return false;
		} else if (!mod_jscan_skip(&s)) {
			return false;
		}
	}
	if (m < 0 || !items || !mod_jscan_at_end(&s))
		return false;
	if (cl && !(*cont = strndup(c, cl)))
		return false;
	if (vl && !(*rv = strndup(v, vl))) {
		free(*cont);
		*cont = NULL;
		return false;
	}
	return true;
}
