/* modules/policy/state.c - the state file <state-dir>/policy/policies.json:
 * the API's policies and the last state of the k8s ones, the revision and
 * the rule ID table, written atomically after every change of the
 * repository (state_save) and read back at start (state_load), so the
 * policies and their rule IDs survive a restart. */
#include "policy_state.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

int state_open(struct pol_state *st, char *why, size_t len)
{
	const char *base = fibril_state_dir();
	char path[PATH_MAX];
	st->dirfd = -1;
	if (!base || !*base) {
		snprintf(why, len, "no [agent] state-dir");
		return -EINVAL;
	}
	if (snprintf(path, sizeof(path), "%s/%s", base, POL_MODULE) >= (int)sizeof(path)) {
		snprintf(why, len, "state dir path too long");
		return -ENAMETOOLONG;
	}
	if ((mkdir(base, 0755) && errno != EEXIST) || (mkdir(path, 0700) && errno != EEXIST)) {
		int e = errno;
		snprintf(why, len, "cannot create %.300s: %s", path, strerror(e));
		return -e;
	}
	st->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->dirfd < 0) {
		int e = errno;
		snprintf(why, len, "cannot open %.300s: %s", path, strerror(e));
		return -e;
	}
	return 0;
}

/* {"revision": N, "policies": [...], "k8s_policies": [...]}, atomically; 0
 * or a negative errno. Each policy's text is JSON already: it is copied,
 * not parsed again (a change with 1,000 policies loaded stays cheap). */
int state_save(struct pol_state *st, struct pol_policy **pols, size_t n, uint64_t revision)
{
	if (st->dirfd < 0)
		return 0;
	size_t len = 160 + st->nrules * (64 + POL_NS_MAX + POL_NAME_MAX);
	for (size_t i = 0; i < n; i++)
		len += strlen(pols[i]->text) + 1;
	char *t = malloc(len), *w = t;
	if (!t)
		return -ENOMEM;
	w += sprintf(w, "{\"revision\":%llu,\"policies\":[", (unsigned long long)revision);
	/* the last state of the k8s ones: enforced from the start, until the
	 * informers' first list says what is gone */
	for (int k8s = 0; k8s < 2; k8s++) {
		bool first = true;
		if (k8s)
			w += sprintf(w, "],\"k8s_policies\":[");
		for (size_t i = 0; i < n; i++) {
			if (pols[i]->from_k8s != k8s)
				continue;
			size_t l = strlen(pols[i]->text);
			if (!first)
				*w++ = ',';
			memcpy(w, pols[i]->text, l);
			w += l;
			first = false;
		}
	}
	/* the rule IDs: [id, from k8s, kind, namespace, name, spec, ingress,
	 * deny, index] (names are DNS names: nothing to escape) */
	w += sprintf(w, "],\"rule_ids\":{\"next\":%u,\"rules\":[", st->next_rule_id);
	for (size_t i = 0; i < st->nrules; i++) {
		const struct pol_rule_rec *r = &st->rules[i];
		w += sprintf(w, "%s[%u,%d,%u,\"%s\",\"%s\",%u,%d,%d,%u]", i ? "," : "", r->id,
			     r->from_k8s, r->kind, r->ns, r->name, r->spec, r->ingress, r->deny, r->index);
	}
	w += sprintf(w, "]}}");
	int rc = fibril_state_write_atomic(st->dirfd, POL_STATE_FILE, t, (size_t)(w - t), 0600);
	free(t);
	return rc;
}

/* The rule IDs saved with the policies (none in a file of an older agent:
 * the policies get new ones, and the map entries are rewritten). */
static void rules_load(struct pol_state *st, struct json_object *o)
{
	struct json_object *t, *next, *arr;
	if (!json_object_object_get_ex(o, "rule_ids", &t) ||
	    !json_object_object_get_ex(t, "rules", &arr) || !json_object_is_type(arr, json_type_array))
		return;
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		struct json_object *a = json_object_array_get_idx(arr, i);
		if (!json_object_is_type(a, json_type_array) || json_object_array_length(a) != 9)
			continue;
#define AT(k) json_object_array_get_idx(a, k)
		struct pol_rule_rec r = {
			.id = (uint32_t)json_object_get_int64(AT(0)),
			.from_k8s = json_object_get_int(AT(1)) != 0,
			.kind = (uint8_t)json_object_get_int(AT(2)),
			.spec = (uint32_t)json_object_get_int64(AT(5)),
			.ingress = json_object_get_int(AT(6)) != 0,
			.deny = json_object_get_int(AT(7)) != 0,
			.index = (uint32_t)json_object_get_int64(AT(8)),
		};
		snprintf(r.ns, sizeof(r.ns), "%s", json_object_get_string(AT(3)));
		snprintf(r.name, sizeof(r.name), "%s", json_object_get_string(AT(4)));
#undef AT
		if (!r.id || r.kind > POL_KIND_KNP || rule_by_id(st, r.id))
			continue;
		r.hash = rule_hash(&r);
		if (!rule_insert(st, &r))
			break;
	}
	if (json_object_object_get_ex(t, "next", &next) &&
	    (uint32_t)json_object_get_int64(next) > st->next_rule_id)
		st->next_rule_id = (uint32_t)json_object_get_int64(next);
}

void state_load(struct pol_state *st)
{
	int fd = openat(st->dirfd, POL_STATE_FILE, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	struct stat sb;
	char *text = NULL;
	if (fstat(fd, &sb) == 0 && sb.st_size > 0 && sb.st_size < (64 << 20) &&
	    (text = malloc((size_t)sb.st_size + 1))) {
		ssize_t got = read(fd, text, (size_t)sb.st_size);
		text[got > 0 ? got : 0] = '\0';
	}
	close(fd);
	struct json_object *o = text ? json_tokener_parse(text) : NULL;
	struct json_object *arr = NULL, *rev = NULL;
	if (!o || !json_object_object_get_ex(o, "policies", &arr) ||
	    !json_object_object_get_ex(o, "revision", &rev)) {
		fibril_error(st->m, "%s/%s/%s is unreadable: starting with no policy",
			     fibril_state_dir(), POL_MODULE, POL_STATE_FILE);
		goto out;
	}
	st->revision = (uint64_t)json_object_get_int64(rev);
	rules_load(st, o);
	struct json_object *k8s = NULL;
	json_object_object_get_ex(o, "k8s_policies", &k8s);
	for (int from_k8s = 0; from_k8s < 2; from_k8s++) {
		struct json_object *a = from_k8s ? k8s : arr;
		if (!a || !json_object_is_type(a, json_type_array) || !json_object_array_length(a))
			continue;
		const char *t = json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN);
		char err[512];
		struct pol_policy **v = NULL;
		int n = pol_parse(t, strlen(t), &v, err, sizeof(err));
		if (n < 0) {
			fibril_error(st->m, "%s: %s: starting without those policies", POL_STATE_FILE, err);
			continue;
		}
		struct pol_policy **all = realloc(st->pols, (st->npols + (size_t)n) * sizeof(*all));
		if (!all) {
			pol_policies_free(v, (size_t)n);
			continue;
		}
		st->pols = all;
		for (int i = 0; i < n; i++) {
			v[i]->from_k8s = from_k8s;
			pol_take_ids(st, v[i]);
			st->pols[st->npols++] = v[i];
		}
		free(v);
	}
	rules_prune(st);
	fibril_info(st->m, "%zu policies restored, revision %llu, %zu rule IDs", st->npols,
		    (unsigned long long)st->revision, st->nrules);
out:
	json_object_put(o);
	free(text);
}
