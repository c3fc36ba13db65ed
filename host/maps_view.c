/* host/maps_view.c - the BPF map registry as the API shows it: GET
 * /v1/map lists every map with its entry count (counted on the worker pool,
 * with batch lookups where the map type has them) and GET /v1/map/{name}
 * dumps one map's entries through its module's formatter or as hex. The
 * maps themselves are opened and released by host/maps.c. */
#include "maps_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- listing ------------------------------------------------------------- */

#define COUNT_BATCH 1024 /* entries per bpf_map_lookup_batch call when counting */

/* Count with bpf_map_lookup_batch: about n / COUNT_BATCH system calls
 * instead of n get_next_key calls (a full 128k-entry conntrack map: 128
 * calls, not 131072). -EINVAL/-ENOTSUP when the map type has no batch
 * operations (LPM tries), so that the caller walks the keys instead. */
static int64_t map_count_batch(const struct fibril_map *map)
{
	size_t vsz = value_buf_size(&map->spec);
	uint8_t *keys = xcalloc(COUNT_BATCH, map->spec.key_size);
	uint8_t *vals = xcalloc(COUNT_BATCH, vsz ? vsz : 1);
	uint64_t cursor = 0;
	bool first = true;
	int64_t n = 0;
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	for (;;) {
		__u32 count = COUNT_BATCH;
		vg_quiet_begin();
		int rc = bpf_map_lookup_batch(map->fd, first ? NULL : &cursor, &cursor, keys, vals,
					      &count, &opts);
		vg_quiet_end();
		int e = rc < 0 ? errno : 0;
		first = false;
		n += count;
		if (rc < 0) {
			if (e != ENOENT) /* ENOENT: that was the last chunk */
				n = -e;
			break;
		}
	}
	free(keys);
	free(vals);
	return n;
}

/* Number of keys present, or -1 when the map cannot be iterated. */
static int64_t map_count_entries(const struct fibril_map *map)
{
	enum map_class cls = map_class_of(map->spec.type);
	if (cls == CLASS_ARRAY)
		return map->spec.max_entries;
	if (cls != CLASS_HASH)
		return -1;
	if (map->spec.type != BPF_MAP_TYPE_LPM_TRIE) {
		int64_t n = map_count_batch(map);
		if (n >= 0)
			return n;
	}
	uint8_t *cur = xcalloc(2, map->spec.key_size);
	uint8_t *next = cur + map->spec.key_size;
	int64_t n = 0;
	const void *prev = NULL;
	/* Bounded: concurrent deletes can restart the walk from the start. */
	while (n < (int64_t)map->spec.max_entries &&
	       next_key(map->fd, prev, next) == 0) {
		memcpy(cur, next, map->spec.key_size);
		prev = cur;
		n++;
	}
	free(cur);
	return n;
}

static int map_cmp_name(const void *a, const void *b)
{
	const struct fibril_map *const *x = a, *const *y = b;
	return strcmp((*x)->name, (*y)->name);
}

/* The registry as an array sorted by name (caller frees); lock held. */
static struct fibril_map **maps_sorted(size_t *n)
{
	size_t count = 0;
	for (struct fibril_map *m = maps_list; m; m = m->next)
		count++;
	struct fibril_map **v = xcalloc(count, sizeof(*v));
	size_t i = 0;
	for (struct fibril_map *m = maps_list; m; m = m->next)
		v[i++] = m;
	qsort(v, count, sizeof(*v), map_cmp_name);
	*n = count;
	return v;
}

/* The map's description; "entries" is added by the caller. */
static struct json_object *map_to_json_uncounted(const struct fibril_map *map)
{
	struct json_object *o = json_object_new_object();
	const struct fibril_map_spec *s = &map->spec;
	json_object_object_add(o, "name", json_object_new_string(map->name));
	json_object_object_add(o, "type", json_object_new_int64(s->type));
	json_object_object_add(o, "type_name", json_object_new_string(map_type_name(s->type)));
	json_object_object_add(o, "key_size", json_object_new_int64(s->key_size));
	json_object_object_add(o, "value_size", json_object_new_int64(s->value_size));
	json_object_object_add(o, "max_entries", json_object_new_int64(s->max_entries));
	json_object_object_add(o, "flags", json_object_new_int64(s->map_flags));
	json_object_object_add(o, "pin", json_object_new_string(map->pin));
	json_object_object_add(o, "owner",
			       json_object_new_string(map->owner ? map->owner->name : "agent"));
	json_object_object_add(o, "origin", json_object_new_string(origin_name(map->origin)));
	return o;
}

static void add_entries(struct json_object *o, int64_t entries)
{
	json_object_object_add(o, "entries", entries < 0 ? NULL : json_object_new_int64(entries));
}

struct json_object *maps_list_json(void)
{
	struct json_object *arr = json_object_new_array();
	pthread_mutex_lock(&maps_lock);
	size_t n;
	struct fibril_map **v = maps_sorted(&n);
	for (size_t i = 0; i < n; i++) {
		struct json_object *o = map_to_json_uncounted(v[i]);
		add_entries(o, map_count_entries(v[i]));
		json_object_array_add(arr, o);
	}
	pthread_mutex_unlock(&maps_lock);
	free(v);
	struct json_object *root = json_object_new_object();
	json_object_object_add(root, "maps", arr);
	return root;
}

/* GET /v1/map off the loop: the registry is copied on the loop (each map's
 * description, spec and a dup of its fd), the entries are counted on the
 * worker pool without the registry lock, and the answer is sent back on the
 * loop. A map walk (an LPM trie is walked key by key) never holds the loop
 * or the lock that fibril_map_open and fibril_map_remove take. */
struct map_count_job {
	struct fibril_response *resp; /* the deferred answer */
	size_t n;
	struct fibril_map *copies;    /* spec + dup'd fd, counted by the worker */
	struct json_object **descr;   /* each map's description */
	int64_t *entries;
};

static struct map_count_job *count_job_snapshot(void)
{
	struct map_count_job *j = xcalloc(1, sizeof(*j));
	pthread_mutex_lock(&maps_lock);
	struct fibril_map **v = maps_sorted(&j->n);
	j->copies = xcalloc(j->n ? j->n : 1, sizeof(*j->copies));
	j->descr = xcalloc(j->n ? j->n : 1, sizeof(*j->descr));
	j->entries = xcalloc(j->n ? j->n : 1, sizeof(*j->entries));
	for (size_t i = 0; i < j->n; i++) {
		j->descr[i] = map_to_json_uncounted(v[i]);
		j->copies[i].spec = v[i]->spec;
		j->copies[i].spec.name = j->copies[i].name;
		memcpy(j->copies[i].name, v[i]->name, sizeof(j->copies[i].name));
		j->copies[i].fd = fcntl(v[i]->fd, F_DUPFD_CLOEXEC, 0);
	}
	pthread_mutex_unlock(&maps_lock);
	free(v);
	return j;
}

static void count_job_work(void *ud)
{
	struct map_count_job *j = ud;
	for (size_t i = 0; i < j->n; i++)
		j->entries[i] = j->copies[i].fd < 0 ? -1 : map_count_entries(&j->copies[i]);
}

static void count_job_free(struct map_count_job *j)
{
	for (size_t i = 0; i < j->n; i++) {
		if (j->copies[i].fd >= 0)
			close(j->copies[i].fd);
		json_object_put(j->descr[i]);
	}
	free(j->copies);
	free(j->descr);
	free(j->entries);
	free(j);
}

static void count_job_done(void *ud, int status)
{
	struct map_count_job *j = ud;
	if (status) {
		fibril_resp_error(j->resp, 503, "the agent is stopping");
	} else {
		struct json_object *arr = json_object_new_array();
		for (size_t i = 0; i < j->n; i++) {
			add_entries(j->descr[i], j->entries[i]);
			json_object_array_add(arr, j->descr[i]);
			j->descr[i] = NULL; /* owned by arr */
		}
		struct json_object *root = json_object_new_object();
		json_object_object_add(root, "maps", arr);
		api_resp_object(j->resp, 200, root);
	}
	fibril_resp_send(j->resp);
	count_job_free(j);
}

/* ---- dumping ------------------------------------------------------------- */

/* Lowercase hex, bytes in groups of 4 separated by spaces; out holds at
 * least len * 9 / 4 + 2 bytes. */
static void hex_groups(const uint8_t *p, size_t len, char *out)
{
	static const char digits[] = "0123456789abcdef";
	char *o = out;
	for (size_t i = 0; i < len; i++) {
		if (i && i % 4 == 0)
			*o++ = ' ';
		*o++ = digits[p[i] >> 4];
		*o++ = digits[p[i] & 0xf];
	}
	*o = '\0';
}

static struct json_object *hex_json(const uint8_t *p, size_t len)
{
	char *buf = xcalloc(1, len * 9 / 4 + 4);
	hex_groups(p, len, buf);
	struct json_object *s = json_object_new_string(buf);
	free(buf);
	return s;
}

/* A per-CPU value: each CPU's value_size bytes in hex, CPUs separated by
 * " | " (the 8-byte alignment padding is left out). */
static struct json_object *percpu_hex_json(const struct fibril_map_spec *spec, const uint8_t *p)
{
	size_t slot = ((size_t)spec->value_size + 7) & ~(size_t)7;
	size_t ncpus = value_buf_size(spec) / slot;
	size_t one = (size_t)spec->value_size * 9 / 4 + 4;
	char *buf = xcalloc(ncpus, one + 3);
	char *o = buf;
	for (size_t cpu = 0; cpu < ncpus; cpu++) {
		if (cpu)
			o = stpcpy(o, " | ");
		hex_groups(p + cpu * slot, spec->value_size, o);
		o += strlen(o);
	}
	struct json_object *s = json_object_new_string(buf);
	free(buf);
	return s;
}

static struct json_object *value_hex_json(const struct fibril_map_spec *spec, const uint8_t *v)
{
	if (map_type_is_percpu(spec->type))
		return percpu_hex_json(spec, v);
	return hex_json(v, spec->value_size);
}

static struct json_object *entry_json(const struct fibril_map *map, const uint8_t *key,
				      const uint8_t *value)
{
	struct json_object *e = json_object_new_object();
	if (map->formatter) {
		char k[FMT_KEY_LEN] = "", v[FMT_VALUE_LEN] = "";
		int rc = map->formatter(key, value, k, sizeof(k), v, sizeof(v), map->formatter_ud);
		if (rc == FIBRIL_MAP_FORMAT_SKIP) {
			json_object_put(e);
			return NULL;
		}
		if (rc >= 0) {
			k[sizeof(k) - 1] = '\0';
			v[sizeof(v) - 1] = '\0';
			json_object_object_add(e, "key", json_object_new_string(k));
			json_object_object_add(e, "value", json_object_new_string(v));
			return e;
		}
	}
	json_object_object_add(e, "key", hex_json(key, map->spec.key_size));
	json_object_object_add(e, "value", value_hex_json(&map->spec, value));
	return e;
}

struct dump_bufs {
	uint8_t *key, *next, *value;
};

/* Walk a hash-like map; returns true when capped. */
static bool dump_hash(const struct fibril_map *map, struct dump_bufs *b, struct json_object *arr)
{
	size_t ks = map->spec.key_size, n = 0, steps = 0;
	const void *prev = NULL;
	/* Bounded: concurrent deletes can restart the walk from the start. */
	while (steps++ < map->spec.max_entries &&
	       next_key(map->fd, prev, b->next) == 0) {
		if (n == DUMP_MAX_ENTRIES)
			return true;
		memcpy(b->key, b->next, ks);
		prev = b->key;
		if (bpf_map_lookup_elem(map->fd, b->key, b->value) != 0)
			continue; /* deleted meanwhile */
		struct json_object *e = entry_json(map, b->key, b->value);
		if (!e)
			continue; /* the formatter left it out */
		json_object_array_add(arr, e);
		n++;
	}
	return false;
}

static bool dump_array(const struct fibril_map *map, struct dump_bufs *b, struct json_object *arr)
{
	uint32_t max = map->spec.max_entries;
	for (uint32_t i = 0; i < max; i++) {
		if (i == DUMP_MAX_ENTRIES)
			return true;
		memcpy(b->key, &i, sizeof(i));
		if (bpf_map_lookup_elem(map->fd, b->key, b->value) != 0)
			continue;
		struct json_object *e = entry_json(map, b->key, b->value);
		if (e)
			json_object_array_add(arr, e);
	}
	return false;
}

static struct json_object *map_dump(const struct fibril_map *map)
{
	struct dump_bufs b;
	size_t ks = map->spec.key_size;
	b.key = xcalloc(2, ks);
	b.next = b.key + ks;
	b.value = xcalloc(1, value_buf_size(&map->spec));
	struct json_object *arr = json_object_new_array();
	bool truncated = map_class_of(map->spec.type) == CLASS_ARRAY ? dump_array(map, &b, arr)
								      : dump_hash(map, &b, arr);
	free(b.key);
	free(b.value);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "name", json_object_new_string(map->name));
	json_object_object_add(o, "formatted", json_object_new_boolean(map->formatter != NULL));
	json_object_object_add(o, "entries", arr);
	if (truncated)
		json_object_object_add(o, "truncated", json_object_new_boolean(1));
	return o;
}

int maps_dump_json(const char *name, struct json_object **out, char *err)
{
	*out = NULL;
	pthread_mutex_lock(&maps_lock);
	const struct fibril_map *map = name ? maps_registry_find(name) : NULL;
	int rc = 0;
	if (!map) {
		errbuf_set(err, "no map named '%s'", name ? name : "");
		rc = -ENOENT;
	} else if (map_class_of(map->spec.type) == CLASS_OPAQUE) {
		errbuf_set(err, "map '%s' (%s) cannot be dumped", name, map_type_name(map->spec.type));
		rc = -EOPNOTSUPP;
	} else {
		*out = map_dump(map);
	}
	pthread_mutex_unlock(&maps_lock);
	return rc;
}

/* ---- API routes ---------------------------------------------------------- */

static void route_map_list(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct fibril_response *d = fibril_resp_defer(resp);
	if (!d) {
		api_resp_object(resp, 200, maps_list_json());
		return;
	}
	struct map_count_job *j = count_job_snapshot();
	j->resp = d;
	if (fibril_work_submit(NULL, count_job_work, count_job_done, j)) {
		count_job_work(j); /* no worker pool: count here */
		count_job_done(j, 0);
	}
}

static void route_map_dump(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	char err[ERRBUF_LEN];
	struct json_object *obj;
	int rc = maps_dump_json(fibril_req_param(req, "name"), &obj, err);
	if (rc == 0)
		api_resp_object(resp, 200, obj);
	else
		fibril_resp_error(resp, rc == -ENOENT ? 404 : 400, "%s", err);
}

int maps_register_routes(void)
{
	int rc = api_route_host("GET", "/v1/map", 0, route_map_list, NULL);
	if (rc == 0)
		rc = api_route_host("GET", "/v1/map/{name}", 0, route_map_dump, NULL);
	return rc;
}
