/* cli/fibril.c - fibril: the operator CLI for fibril-agent. It sends
 * requests over HTTP/1.1 to the agent's unix socket (routes and replies in
 * docs/API.md; GET, and POST/DELETE for `fibril ipam`) and prints the
 * replies as aligned tables, or the agent's own JSON (pretty-printed) with
 * -o json.
 * Exit status: 0 success, 1 agent unreachable or agent error, 2 usage error. */

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include <curl/curl.h>
#include <json.h>

#include "cli.h"

#ifndef FIBRIL_VERSION
#define FIBRIL_VERSION "unknown"
#endif

#define DEFAULT_SOCKET "/run/fibril/fibril.sock"
#define TIMEOUT_MS 10000L
#define MAX_REPLY ((size_t)256 << 20) /* a full 64k-entry map dump is ~10 MiB */


struct cli_options opt;

static const char usage_text[] =
	"Usage: fibril [--socket PATH] [-o json|table] COMMAND [ARGS]\n"
	"\n"
	"Query the fibril-agent running on this node.\n"
	"\n"
	"Commands:\n"
	"  status          agent state, uptime, health, and each module's state\n"
	"  modules         loaded modules: version, ABI, start order, dependencies\n"
	"  config          effective configuration and where each value came from\n"
	"  map list        BPF maps known to the agent\n"
	"  map dump NAME   the entries of one map\n"
	"  health          readiness: prints \"ok\" (exit 0) or why not (exit 1)\n"
	"  ipam list       allocated addresses and their owners, and the pools\n"
	"  ipam allocate [--family ipv4|ipv6|both] OWNER\n"
	"                  the next free address(es) for OWNER (default: both)\n"
	"  ipam allocate --ip ADDR OWNER\n"
	"                  a given address for OWNER\n"
	"  ipam release ADDR | --owner OWNER\n"
	"                  release one address, or everything OWNER holds\n"
	"  endpoint list   endpoints on this node: ID, state, identity, addresses\n"
	"  endpoint get ID one endpoint (ID: number or container-id:CID[:IFNAME])\n"
	"  identity list   security identities: reserved and allocated, with labels\n"
	"  identity get ID one identity\n"
	"  k8s status      Kubernetes resources: synced, objects, last event, relists\n"
	"  version         versions of this CLI and of the agent\n"
	"  help            this help\n"
	"\n"
	"Options:\n"
	"  -s, --socket PATH     agent API socket (default: $FIBRIL_SOCKET,\n"
	"                        else " DEFAULT_SOCKET ")\n"
	"  -o, --output FORMAT   table (default) or json (the agent's reply)\n"
	"      --family F        ipam allocate: ipv4, ipv6 or both\n"
	"      --ip ADDR         ipam allocate: this address\n"
	"      --owner OWNER     ipam release: everything OWNER holds\n"
	"  -h, --help            this help\n"
	"\n"
	"Exit status: 0 success, 1 agent unreachable or failed, 2 usage error.\n";

/* ---- small helpers ------------------------------------------------------- */

void print_error(const char *fmt, ...)
{
	va_list ap;

	fputs("fibril: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* A usage error: one line naming what was wrong; returns EXIT_USAGE. */
int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("fibril: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (see 'fibril help')\n", stderr);
	return EXIT_USAGE;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p) {
		print_error("out of memory");
		exit(EXIT_FAIL);
	}
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0) {
		print_error("out of memory");
		exit(EXIT_FAIL);
	}
	return s;
}

/* Copy of s (at most n bytes) fit for one table cell or message line:
 * control characters (newlines, escape sequences from a misbehaving module)
 * become spaces or '?', so nothing the agent sends can break the layout or
 * the terminal. */
static char *clean_ndup(const char *s, size_t n)
{
	char *d;

	n = strnlen(s, n);
	d = xrealloc(NULL, n + 1);

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '\n' || c == '\r' || c == '\t')
			d[i] = ' ';
		else if (c < 0x20 || c == 0x7f)
			d[i] = '?';
		else
			d[i] = (char)c;
	}
	d[n] = '\0';
	return d;
}

char *clean_dup(const char *s)
{
	return clean_ndup(s, SIZE_MAX);
}

/* Terminal columns taken by s: UTF-8 continuation bytes take none. */
static size_t text_width(const char *s)
{
	size_t w = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			w++;
	return w;
}

/* ---- table printer --------------------------------------------------------- */

/* Rows of strings; the first row is the header. print pads every column but
 * the last to its widest cell, with two spaces between columns. */
void table_init(struct table *t, size_t ncols)
{
	*t = (struct table){ .ncols = ncols };
}

/* Adds a row of t->ncols cells (const char *); NULL cells print as "-". */
void table_row(struct table *t, ...)
{
	va_list ap;

	if (t->nrows == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 16;
		t->cells = xrealloc(t->cells, t->cap * t->ncols * sizeof(*t->cells));
	}
	va_start(ap, t);
	for (size_t c = 0; c < t->ncols; c++) {
		const char *s = va_arg(ap, const char *);

		t->cells[t->nrows * t->ncols + c] = clean_dup(s ? s : "-");
	}
	va_end(ap);
	t->nrows++;
}

void table_print(const struct table *t)
{
	size_t *width = xrealloc(NULL, t->ncols * sizeof(*width));
	size_t linecap = 1;

	for (size_t c = 0; c < t->ncols; c++) {
		width[c] = 0;
		for (size_t r = 0; r < t->nrows; r++) {
			size_t w = text_width(t->cells[r * t->ncols + c]);

			if (w > width[c])
				width[c] = w;
		}
	}
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		linecap += strlen(t->cells[i]) + width[i % t->ncols] + 2;

	char *line = xrealloc(NULL, linecap);

	for (size_t r = 0; r < t->nrows; r++) {
		size_t len = 0;

		for (size_t c = 0; c < t->ncols; c++) {
			const char *cell = t->cells[r * t->ncols + c];
			size_t n = strlen(cell);

			memcpy(line + len, cell, n);
			len += n;
			if (c + 1 < t->ncols) {
				size_t pad = width[c] - text_width(cell) + 2;

				memset(line + len, ' ', pad);
				len += pad;
			}
		}
		while (len > 0 && line[len - 1] == ' ') /* empty trailing cells */
			len--;
		line[len] = '\0';
		puts(line);
	}
	free(line);
	free(width);
}

void table_free(struct table *t)
{
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->nrows = t->cap = 0;
}

/* ---- JSON accessors ------------------------------------------------------ */

struct json_object *jget(struct json_object *o, const char *key, enum json_type type)
{
	struct json_object *v;

	if (!json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, type))
		return NULL;
	return v;
}

/* The string o[key], or NULL when missing, null or not a string. */
const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v = jget(o, key, json_type_string);

	return v ? json_object_get_string(v) : NULL;
}

bool jnum(struct json_object *o, const char *key, double *out)
{
	struct json_object *v;

	if ((v = jget(o, key, json_type_int)) || (v = jget(o, key, json_type_double))) {
		*out = json_object_get_double(v);
		return true;
	}
	return false;
}

/* o[key] as an integer in buf, or "-" when missing or null. */
const char *fmt_int(struct json_object *o, const char *key, char *buf, size_t len)
{
	struct json_object *v = jget(o, key, json_type_int);
	double d;

	if (v)
		snprintf(buf, len, "%lld", (long long)json_object_get_int64(v));
	else if (jnum(o, key, &d))
		snprintf(buf, len, "%.0f", d);
	else
		return "-";
	return buf;
}

/* o[key], a duration in milliseconds, as "1.23ms", or "-". */
const char *fmt_ms(struct json_object *o, const char *key, char *buf, size_t len)
{
	double d;

	if (!jnum(o, key, &d))
		return "-";
	snprintf(buf, len, "%.2fms", d);
	return buf;
}

/* The array of strings o[key] joined with commas, or "-" when empty or
 * missing. The result is malloc'd. */
char *join_list(struct json_object *o, const char *key)
{
	struct json_object *a = jget(o, key, json_type_array);
	size_t n = a ? json_object_array_length(a) : 0;
	char *out = NULL;

	for (size_t i = 0; i < n; i++) {
		const char *s = json_object_get_string(json_object_array_get_idx(a, i));
		char *more = xasprintf("%s%s%s", out ? out : "", out ? "," : "", s ? s : "null");

		free(out);
		out = more;
	}
	return out ? out : xasprintf("-");
}

/* o[key] which must be an array of objects; prints a bad-reply error and
 * returns NULL otherwise. */
struct json_object *jarray_of_objects(struct json_object *o, const char *key)
{
	struct json_object *a = jget(o, key, json_type_array);

	if (!a) {
		print_error("bad reply from agent: no \"%s\" array", key);
		return NULL;
	}
	for (size_t i = 0; i < json_object_array_length(a); i++)
		if (!json_object_is_type(json_object_array_get_idx(a, i), json_type_object)) {
			print_error("bad reply from agent: \"%s\"[%zu] is not an object", key, i);
			return NULL;
		}
	return a;
}

void print_json(struct json_object *o)
{
	puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
						       JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* ---- talking to the agent ------------------------------------------------ */

struct reply {
	char *data;
	size_t len, cap;
	bool too_big;
};

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct reply *r = userdata;
	size_t n = size * nmemb;

	if (n > MAX_REPLY - r->len) {
		r->too_big = true;
		return 0; /* makes curl fail with CURLE_WRITE_ERROR */
	}
	if (r->len + n + 1 > r->cap) {
		while (r->len + n + 1 > r->cap)
			r->cap = r->cap ? 2 * r->cap : 16384;
		r->data = xrealloc(r->data, r->cap);
	}
	memcpy(r->data + r->len, ptr, n);
	r->len += n;
	r->data[r->len] = '\0';
	return n;
}

/* Explains a failed transfer in one line on stderr. */
static void report_curl_error(CURL *curl, CURLcode rc, const char *errbuf, const struct reply *r)
{
	long os_errno = 0;

	curl_easy_getinfo(curl, CURLINFO_OS_ERRNO, &os_errno);
	if (rc == CURLE_COULDNT_CONNECT) {
		const char *why = os_errno ? strerror((int)os_errno) : (*errbuf ? errbuf : curl_easy_strerror(rc));

		if (os_errno == EACCES || os_errno == EPERM)
			print_error("not allowed to talk to the agent (cannot connect to %s: %s)", opt.socket, why);
		else
			print_error("agent is not running (cannot connect to %s: %s)", opt.socket, why);
	} else if (rc == CURLE_OPERATION_TIMEDOUT) {
		print_error("agent did not answer within %ld s (%s)", TIMEOUT_MS / 1000, opt.socket);
	} else if (rc == CURLE_WRITE_ERROR && r->too_big) {
		print_error("bad reply from agent: larger than %zu MiB", MAX_REPLY >> 20);
	} else {
		print_error("request to agent failed: %s", *errbuf ? errbuf : curl_easy_strerror(rc));
	}
}

/* Parses a whole reply as one JSON value; on failure prints a bad-reply
 * error and returns NULL. */
static struct json_object *parse_reply(const struct reply *r, long status)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *o = NULL;
	enum json_tokener_error jerr = json_tokener_error_parse_eof;
	size_t end = 0;

	if (!tok) {
		print_error("out of memory");
		return NULL;
	}
	if (r->len > 0 && r->len <= INT32_MAX) {
		o = json_tokener_parse_ex(tok, r->data, (int)r->len);
		jerr = json_tokener_get_error(tok);
		end = (size_t)tok->char_offset;
	}
	json_tokener_free(tok);
	if (o && jerr == json_tokener_success) {
		while (end < r->len && strchr(" \t\r\n", r->data[end]))
			end++;
		if (end == r->len)
			return o;
		jerr = json_tokener_error_parse_unexpected;
	}
	json_object_put(o);

	if (r->len == 0) {
		print_error("bad reply from agent: HTTP %ld with an empty body", status);
	} else {
		/* Show the start of it, so a wrong socket is easy to spot. */
		char *start = clean_ndup(r->data, 60);

		print_error("bad reply from agent: HTTP %ld, body is not JSON (%s): %s%s", status,
			    json_tokener_error_desc(jerr), start, r->len > 60 ? "..." : "");
		free(start);
	}
	return NULL;
}

/* <method> http://localhost/v1/<path> on the agent's socket (GET, or POST
 * and DELETE without a body). Returns 0 with the parsed reply in *json (the
 * caller puts it) and the HTTP status in *http_status, whatever the status;
 * or -1 after printing why on stderr. */
static int fetch(const char *method, const char *path, struct json_object **json,
		 long *http_status)
{
	char *url, errbuf[CURL_ERROR_SIZE] = "";
	struct reply r = { 0 };
	CURL *curl;
	CURLcode rc;
	int ret = -1;

	*json = NULL;
	*http_status = 0;
	if (strlen(opt.socket) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		print_error("agent socket path is too long (%zu bytes, at most %zu): %s",
			    strlen(opt.socket), sizeof(((struct sockaddr_un *)0)->sun_path) - 1, opt.socket);
		return -1;
	}
	if (!(curl = curl_easy_init())) {
		print_error("cannot initialise libcurl");
		return -1;
	}
	url = xasprintf("http://localhost/v1/%s", path);
	curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, opt.socket);
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, TIMEOUT_MS);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_USERAGENT, "fibril/" FIBRIL_VERSION);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r);
	if (!strcmp(method, "POST")) {
		/* an empty body with Content-Length: 0 */
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "");
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, 0L);
	} else if (strcmp(method, "GET") != 0) {
		curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
	}

	rc = curl_easy_perform(curl);
	if (rc != CURLE_OK) {
		report_curl_error(curl, rc, errbuf, &r);
	} else {
		curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, http_status);
		if ((*json = parse_reply(&r, *http_status)))
			ret = 0;
	}
	curl_easy_cleanup(curl);
	free(url);
	free(r.data);
	return ret;
}

/* Prints an HTTP error reply as "fibril: <error> (HTTP <code>)". */
static void report_http_error(struct json_object *reply, long status)
{
	const char *err = jstr(reply, "error");
	char *e = clean_dup(err && *err ? err : "request failed");

	print_error("%s (HTTP %ld)", e, status);
	free(e);
}

/* fetch() that also treats any non-2xx status as a failure (reported). */
int request(const char *method, const char *path, struct json_object **json)
{
	long status;

	if (fetch(method, path, json, &status) < 0)
		return -1;
	if (status < 200 || status > 299) {
		report_http_error(*json, status);
		json_object_put(*json);
		*json = NULL;
		return -1;
	}
	if (!json_object_is_type(*json, json_type_object)) {
		print_error("bad reply from agent: not a JSON object");
		json_object_put(*json);
		*json = NULL;
		return -1;
	}
	return 0;
}

int get(const char *path, struct json_object **json)
{
	return request("GET", path, json);
}

/* ---- commands -------------------------------------------------------------- */

static void fmt_uptime(double s, char *buf, size_t len)
{
	long t = (long)s;

	if (s < 60)
		snprintf(buf, len, "%.1fs", s);
	else if (t < 3600)
		snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
	else if (t < 86400)
		snprintf(buf, len, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(buf, len, "%ldd%02ldh%02ldm", t / 86400, t / 3600 % 24, t / 60 % 60);
}

/* The SUMMARY/MESSAGE cell of a module: its error, its health message and
 * its summary, whichever are present, joined with "; ". Malloc'd. */
static char *module_message(struct json_object *m)
{
	const char *parts[3] = { jstr(m, "error"), jstr(jget(m, "health", json_type_object), "message"),
				 jstr(m, "summary") };
	const char *prefix[3] = { "error: ", "", "" };
	char *out = NULL;

	for (int i = 0; i < 3; i++) {
		if (!parts[i] || !*parts[i])
			continue;
		char *more = xasprintf("%s%s%s%s", out ? out : "", out ? "; " : "", prefix[i], parts[i]);

		free(out);
		out = more;
	}
	return out ? out : xasprintf("-");
}

/* The summary of module `want` in a status reply, or NULL. */
static const char *module_summary(struct json_object *mods, const char *want)
{
	for (size_t i = 0; i < json_object_array_length(mods); i++) {
		struct json_object *m = json_object_array_get_idx(mods, i);
		const char *name = jstr(m, "name"), *summary = jstr(m, "summary");

		if (name && !strcmp(name, want) && summary && *summary)
			return summary;
	}
	return NULL;
}

/* The summary of the ipam-api module in a status reply, or NULL. */
static const char *ipam_summary(struct json_object *mods)
{
	return module_summary(mods, "ipam-api");
}

static int cmd_status(struct json_object *st)
{
	struct json_object *mods = jarray_of_objects(st, "modules");
	struct json_object *boot = jget(st, "bootstrap", json_type_object);
	char buf[64];
	double d;

	if (!mods)
		return EXIT_FAIL;
	printf("Version:    %s\n", jstr(st, "version") ? jstr(st, "version") : "-");
	printf("State:      %s\n", jstr(st, "state") ? jstr(st, "state") : "-");
	if (jnum(st, "uptime_seconds", &d))
		fmt_uptime(d, buf, sizeof(buf));
	else
		strcpy(buf, "-");
	printf("Uptime:     %s\n", buf);
	printf("Health:     %s\n", jstr(st, "health") ? jstr(st, "health") : "-");
	if (ipam_summary(mods)) {
		char *ipam = clean_dup(ipam_summary(mods));

		printf("IPAM:       %s\n", ipam);
		free(ipam);
	}
	if (module_summary(mods, "k8s")) {
		char *k8s = clean_dup(module_summary(mods, "k8s"));

		printf("Kubernetes: %s\n", k8s);
		free(k8s);
	}
	if (jnum(boot, "total_ms", &d)) {
		char c[32], l[32], i[32], s[32];

		printf("Bootstrap:  %.2fms (config %s, load %s, init %s, start %s)\n", d,
		       fmt_ms(boot, "config_ms", c, sizeof(c)), fmt_ms(boot, "load_ms", l, sizeof(l)),
		       fmt_ms(boot, "init_ms", i, sizeof(i)), fmt_ms(boot, "start_ms", s, sizeof(s)));
	}
	putchar('\n');

	size_t n = json_object_array_length(mods);

	if (n == 0) {
		puts("No modules loaded.");
		return 0;
	}

	struct table t;

	table_init(&t, 6);
	table_row(&t, "NAME", "STATE", "HEALTH", "INIT", "START", "SUMMARY/MESSAGE");
	for (size_t i = 0; i < n; i++) {
		struct json_object *m = json_object_array_get_idx(mods, i);
		struct json_object *health = jget(m, "health", json_type_object);
		struct json_object *timings = jget(m, "timings", json_type_object);
		struct json_object *comps = jget(health, "components", json_type_array);
		char init[32], start[32];
		char *msg = module_message(m);

		table_row(&t, jstr(m, "name"), jstr(m, "state"), jstr(health, "level"),
			  fmt_ms(timings, "init_ms", init, sizeof(init)),
			  fmt_ms(timings, "start_ms", start, sizeof(start)), msg);
		free(msg);
		for (size_t j = 0; comps && j < json_object_array_length(comps); j++) {
			struct json_object *c = json_object_array_get_idx(comps, j);
			const char *cname = jstr(c, "name"), *cmsg = jstr(c, "message");
			char *name = xasprintf("  %s", cname ? cname : "?");

			table_row(&t, name, "", jstr(c, "level"), "", "", cmsg && *cmsg ? cmsg : "");
			free(name);
		}
	}
	table_print(&t);
	table_free(&t);
	return 0;
}

static int cmd_modules(struct json_object *reply)
{
	struct json_object *mods = jarray_of_objects(reply, "modules");
	struct table t;

	if (!mods)
		return EXIT_FAIL;
	table_init(&t, 9);
	table_row(&t, "NAME", "VERSION", "ABI", "ORDER", "STATE", "PROVIDES", "REQUIRES", "WANTS", "FILE");
	for (size_t i = 0; i < json_object_array_length(mods); i++) {
		struct json_object *m = json_object_array_get_idx(mods, i);
		char order[32];
		char *provides = join_list(m, "provides"), *requires = join_list(m, "requires"),
		     *wants = join_list(m, "wants");

		table_row(&t, jstr(m, "name"), jstr(m, "version"), jstr(m, "abi"),
			  fmt_int(m, "order", order, sizeof(order)), jstr(m, "state"), provides, requires,
			  wants, jstr(m, "file"));
		free(provides);
		free(requires);
		free(wants);
	}
	if (t.nrows == 1)
		puts("No modules loaded.");
	else
		table_print(&t);
	table_free(&t);
	return 0;
}

static int cmd_config(struct json_object *reply)
{
	struct json_object *sections = jarray_of_objects(reply, "sections");
	struct table t;

	if (!sections)
		return EXIT_FAIL;
	table_init(&t, 4);
	table_row(&t, "SECTION", "KEY", "VALUE", "ORIGIN");
	for (size_t i = 0; i < json_object_array_length(sections); i++) {
		struct json_object *s = json_object_array_get_idx(sections, i);
		struct json_object *keys = jget(s, "keys", json_type_array);

		for (size_t j = 0; keys && j < json_object_array_length(keys); j++) {
			struct json_object *k = json_object_array_get_idx(keys, j);
			const char *value = jstr(k, "value");

			table_row(&t, jstr(s, "name"), jstr(k, "name"), value && !*value ? "\"\"" : value,
				  jstr(k, "origin"));
		}
	}
	table_print(&t);
	table_free(&t);
	return 0;
}

static int cmd_map_list(struct json_object *reply)
{
	struct json_object *maps = jarray_of_objects(reply, "maps");
	struct table t;

	if (!maps)
		return EXIT_FAIL;
	if (json_object_array_length(maps) == 0) {
		puts("No maps.");
		return 0;
	}
	table_init(&t, 8);
	table_row(&t, "NAME", "TYPE", "KEY", "VALUE", "MAX", "ENTRIES", "OWNER", "ORIGIN");
	for (size_t i = 0; i < json_object_array_length(maps); i++) {
		struct json_object *m = json_object_array_get_idx(maps, i);
		char type[32], key[32], value[32], max[32], entries[32];
		const char *tname = jstr(m, "type_name");

		table_row(&t, jstr(m, "name"), tname ? tname : fmt_int(m, "type", type, sizeof(type)),
			  fmt_int(m, "key_size", key, sizeof(key)),
			  fmt_int(m, "value_size", value, sizeof(value)),
			  fmt_int(m, "max_entries", max, sizeof(max)),
			  fmt_int(m, "entries", entries, sizeof(entries)), jstr(m, "owner"),
			  jstr(m, "origin"));
	}
	table_print(&t);
	table_free(&t);
	return 0;
}

static int cmd_map_dump(struct json_object *reply)
{
	struct json_object *entries = jarray_of_objects(reply, "entries");
	size_t n;
	struct table t;

	if (!entries)
		return EXIT_FAIL;
	n = json_object_array_length(entries);
	if (n > 0) {
		table_init(&t, 2);
		table_row(&t, "KEY", "VALUE");
		for (size_t i = 0; i < n; i++) {
			struct json_object *e = json_object_array_get_idx(entries, i);

			table_row(&t, jstr(e, "key"), jstr(e, "value"));
		}
		table_print(&t);
		table_free(&t);
	}
	printf("%zu %s\n", n, n == 1 ? "entry" : "entries");
	return 0;
}

/* Runs method path and hands the reply to render (or prints it with -o
 * json). */
int show_request(const char *method, const char *path, int (*render)(struct json_object *))
{
	struct json_object *reply;
	int rc;

	if (request(method, path, &reply) < 0)
		return EXIT_FAIL;
	if (opt.json) {
		print_json(reply);
		rc = 0;
	} else {
		rc = render(reply);
	}
	json_object_put(reply);
	return rc;
}

/* Runs GET path and hands the reply to render (or prints it with -o json). */
int show(const char *path, int (*render)(struct json_object *))
{
	return show_request("GET", path, render);
}

static int cmd_map(int argc, char **argv)
{
	if (argc < 1)
		return usage_error("map: missing subcommand (list or dump NAME)");
	if (!strcmp(argv[0], "list")) {
		if (argc > 1)
			return usage_error("map list: unexpected argument '%s'", argv[1]);
		return show("map", cmd_map_list);
	}
	if (!strcmp(argv[0], "dump")) {
		if (argc < 2 || !*argv[1])
			return usage_error("map dump: missing map NAME");
		if (argc > 2)
			return usage_error("map dump: unexpected argument '%s'", argv[2]);

		CURL *curl = curl_easy_init();
		char *name = curl ? curl_easy_escape(curl, argv[1], 0) : NULL;
		char *path = NULL;
		int rc = EXIT_FAIL;

		if (!name) {
			print_error("out of memory");
		} else {
			path = xasprintf("map/%s", name);
			rc = show(path, cmd_map_dump);
		}
		free(path);
		curl_free(name);
		curl_easy_cleanup(curl);
		return rc;
	}
	return usage_error("map: unknown subcommand '%s' (expected list or dump NAME)", argv[0]);
}

/* ---- ipam ------------------------------------------------------------------ */

/* s escaped for a URL path segment or query value; malloc'd. */
char *url_escape(const char *s)
{
	CURL *curl = curl_easy_init();
	char *e = curl ? curl_easy_escape(curl, s, 0) : NULL;
	char *out;

	if (!e) {
		curl_easy_cleanup(curl);
		print_error("out of memory");
		exit(EXIT_FAIL);
	}
	out = xasprintf("%s", e);
	curl_free(e);
	curl_easy_cleanup(curl);
	return out;
}

static int render_ipam_list(struct json_object *reply)
{
	struct json_object *allocs = jarray_of_objects(reply, "allocations");
	struct json_object *pools = allocs ? jarray_of_objects(reply, "pools") : NULL;
	struct table t;

	if (!pools)
		return EXIT_FAIL;
	if (json_object_array_length(allocs) == 0) {
		puts("No addresses allocated.");
	} else {
		table_init(&t, 2);
		table_row(&t, "ADDRESS", "OWNER");
		for (size_t i = 0; i < json_object_array_length(allocs); i++) {
			struct json_object *a = json_object_array_get_idx(allocs, i);

			table_row(&t, jstr(a, "address"), jstr(a, "owner"));
		}
		table_print(&t);
		table_free(&t);
	}
	putchar('\n');
	if (json_object_array_length(pools) == 0) {
		puts("No pool yet.");
		return 0;
	}
	table_init(&t, 4);
	table_row(&t, "POOL", "FAMILY", "GATEWAY", "ALLOCATED");
	for (size_t i = 0; i < json_object_array_length(pools); i++) {
		struct json_object *p = json_object_array_get_idx(pools, i);
		char used[32], total[32];
		char *alloc = xasprintf("%s/%s", fmt_int(p, "used", used, sizeof(used)),
					fmt_int(p, "total", total, sizeof(total)));

		table_row(&t, jstr(p, "cidr"), jstr(p, "family"), jstr(p, "gateway"), alloc);
		free(alloc);
	}
	table_print(&t);
	table_free(&t);
	return 0;
}

static int render_ipam_allocated(struct json_object *reply)
{
	struct json_object *addrs = jarray_of_objects(reply, "addresses");
	struct table t;

	if (!addrs)
		return EXIT_FAIL;
	table_init(&t, 5);
	table_row(&t, "ADDRESS", "FAMILY", "CIDR", "GATEWAY", "OWNER");
	for (size_t i = 0; i < json_object_array_length(addrs); i++) {
		struct json_object *a = json_object_array_get_idx(addrs, i);

		table_row(&t, jstr(a, "address"), jstr(a, "family"), jstr(a, "cidr"), jstr(a, "gateway"),
			  jstr(reply, "owner"));
	}
	table_print(&t);
	table_free(&t);
	return 0;
}

static int render_ipam_released(struct json_object *reply)
{
	struct json_object *released = jget(reply, "released", json_type_array);
	const char *owner = jstr(reply, "owner");
	size_t n = released ? json_object_array_length(released) : 0;

	if (!released) {
		print_error("bad reply from agent: no \"released\" array");
		return EXIT_FAIL;
	}
	for (size_t i = 0; i < n; i++) {
		const char *a = json_object_get_string(json_object_array_get_idx(released, i));
		char *c = clean_dup(a ? a : "?");

		printf("released %s\n", c);
		free(c);
	}
	if (n == 0 && owner) {
		char *c = clean_dup(owner);

		printf("%s holds no address: nothing released\n", c);
		free(c);
	}
	return 0;
}

/* fibril ipam allocate [--family F] OWNER | --ip ADDR OWNER */
static int cmd_ipam_allocate(int argc, char **argv)
{
	char *owner, *path;
	int rc;

	if (opt.owner)
		return usage_error("ipam allocate: OWNER is an argument, not --owner");
	if (argc < 1 || !*argv[0])
		return usage_error("ipam allocate: missing OWNER");
	if (argc > 1)
		return usage_error("ipam allocate: unexpected argument '%s'", argv[1]);
	if (opt.ip && opt.family)
		return usage_error("ipam allocate: --ip and --family cannot be combined");
	if (opt.family && strcmp(opt.family, "ipv4") && strcmp(opt.family, "ipv6") &&
	    strcmp(opt.family, "both"))
		return usage_error("ipam allocate: unknown family '%s' (expected ipv4, ipv6 or both)",
				   opt.family);
	if (opt.ip && !*opt.ip)
		return usage_error("ipam allocate: --ip needs an address");

	owner = url_escape(argv[0]);
	if (opt.ip) {
		char *ip = url_escape(opt.ip);

		path = xasprintf("ipam/%s?owner=%s", ip, owner);
		free(ip);
	} else {
		path = xasprintf("ipam?family=%s&owner=%s", opt.family ? opt.family : "both", owner);
	}
	rc = show_request("POST", path, render_ipam_allocated);
	free(path);
	free(owner);
	return rc;
}

/* fibril ipam release ADDR | --owner OWNER */
static int cmd_ipam_release(int argc, char **argv)
{
	char *arg, *path;
	int rc;

	if (opt.family || opt.ip)
		return usage_error("ipam release: --%s is for 'ipam allocate'", opt.family ? "family" : "ip");
	if (opt.owner && argc > 0)
		return usage_error("ipam release: give ADDR or --owner OWNER, not both");
	if (argc > 1)
		return usage_error("ipam release: unexpected argument '%s'", argv[1]);
	if (opt.owner) {
		if (!*opt.owner)
			return usage_error("ipam release: --owner needs an owner");
		arg = url_escape(opt.owner);
		path = xasprintf("ipam?owner=%s", arg);
	} else {
		if (argc < 1 || !*argv[0])
			return usage_error("ipam release: missing ADDR (or --owner OWNER)");
		arg = url_escape(argv[0]);
		path = xasprintf("ipam/%s", arg);
	}
	rc = show_request("DELETE", path, render_ipam_released);
	free(path);
	free(arg);
	return rc;
}

static int cmd_ipam(int argc, char **argv)
{
	if (argc < 1)
		return usage_error("ipam: missing subcommand (list, allocate or release)");
	if (!strcmp(argv[0], "list")) {
		if (opt.family || opt.ip || opt.owner)
			return usage_error("ipam list: takes no options but -o");
		if (argc > 1)
			return usage_error("ipam list: unexpected argument '%s'", argv[1]);
		return show("ipam", render_ipam_list);
	}
	if (!strcmp(argv[0], "allocate"))
		return cmd_ipam_allocate(argc - 1, argv + 1);
	if (!strcmp(argv[0], "release"))
		return cmd_ipam_release(argc - 1, argv + 1);
	return usage_error("ipam: unknown subcommand '%s' (expected list, allocate or release)",
			   argv[0]);
}

static int cmd_health(void)
{
	struct json_object *reply;
	long status;
	int rc = EXIT_FAIL;

	if (fetch("GET", "healthz", &reply, &status) < 0)
		return EXIT_FAIL;
	if (opt.json) {
		print_json(reply);
		rc = status == 200 ? 0 : EXIT_FAIL;
	} else if (status == 200) {
		const char *s = jstr(reply, "status");

		if (s) {
			char *c = clean_dup(s);

			puts(c);
			free(c);
			rc = 0;
		} else {
			print_error("bad reply from agent: no \"status\" in %s", "/v1/healthz");
		}
	} else {
		report_http_error(reply, status);
	}
	json_object_put(reply);
	return rc;
}

static int cmd_version(void)
{
	struct json_object *st = NULL;
	const char *agent;

	/* The agent is optional here: its absence is reported, not fatal. */
	agent = get("status", &st) == 0 ? jstr(st, "version") : NULL;
	if (opt.json) {
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "client", json_object_new_string(FIBRIL_VERSION));
		json_object_object_add(o, "agent", agent ? json_object_new_string(agent) : NULL);
		print_json(o);
		json_object_put(o);
	} else {
		char *a = clean_dup(agent ? agent : "unknown (agent unreachable)");

		printf("fibril  %s\n", FIBRIL_VERSION);
		printf("agent   %s\n", a);
		free(a);
	}
	json_object_put(st);
	return 0;
}

/* ---- main -------------------------------------------------------------------- */

static int no_args(const char *cmd, int argc, char **argv)
{
	if (argc > 0)
		return usage_error("%s: unexpected argument '%s'", cmd, argv[0]);
	return 0;
}

static int run(int argc, char **argv)
{
	const char *cmd = argv[0];
	int rc;

	if (!strcmp(cmd, "help")) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (!strcmp(cmd, "ipam"))
		return cmd_ipam(argc - 1, argv + 1);
	if (opt.family || opt.ip || opt.owner)
		return usage_error("--%s is only for 'fibril ipam'",
				   opt.family ? "family" : opt.ip ? "ip" : "owner");
	if (!strcmp(cmd, "map"))
		return cmd_map(argc - 1, argv + 1);
	if (!strcmp(cmd, "endpoint"))
		return cmd_endpoint(argc - 1, argv + 1);
	if (!strcmp(cmd, "identity"))
		return cmd_identity(argc - 1, argv + 1);
	if (!strcmp(cmd, "k8s"))
		return cmd_k8s(argc - 1, argv + 1);
	if ((rc = no_args(cmd, argc - 1, argv + 1)))
		return rc;
	if (!strcmp(cmd, "status"))
		return show("status", cmd_status);
	if (!strcmp(cmd, "modules"))
		return show("modules", cmd_modules);
	if (!strcmp(cmd, "config"))
		return show("config", cmd_config);
	if (!strcmp(cmd, "health"))
		return cmd_health();
	if (!strcmp(cmd, "version"))
		return cmd_version();
	return usage_error("unknown command '%s'", cmd);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		/* options of `fibril ipam`, accepted anywhere like -o */
		{ "family", required_argument, NULL, 'F' },
		{ "ip", required_argument, NULL, 'I' },
		{ "owner", required_argument, NULL, 'O' },
		{ NULL, 0, NULL, 0 },
	};
	const char *env = getenv("FIBRIL_SOCKET");
	int c, rc;

	opt.socket = env && *env ? env : DEFAULT_SOCKET;
	opterr = 0; /* our own one-line messages */
	while ((c = getopt_long(argc, argv, ":s:o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (!*optarg)
				return usage_error("--socket: empty path");
			opt.socket = optarg;
			break;
		case 'o':
			if (!strcmp(optarg, "json"))
				opt.json = true;
			else if (!strcmp(optarg, "table"))
				opt.json = false;
			else
				return usage_error("unknown output format '%s' (expected json or table)", optarg);
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case 'F':
			opt.family = optarg;
			break;
		case 'I':
			opt.ip = optarg;
			break;
		case 'O':
			opt.owner = optarg;
			break;
		case ':':
			return usage_error("option '%s' needs an argument", argv[optind - 1]);
		default:
			if (optopt)
				return usage_error("unknown option '-%c'", optopt);
			return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return usage_error("missing COMMAND");

	if (curl_global_init(CURL_GLOBAL_NOTHING) != CURLE_OK) {
		print_error("cannot initialise libcurl");
		return EXIT_FAIL;
	}
	rc = run(argc - optind, argv + optind);
	curl_global_cleanup();

	if (fflush(stdout) != 0 || ferror(stdout)) {
		print_error("cannot write output: %s", strerror(errno));
		return EXIT_FAIL;
	}
	return rc;
}
