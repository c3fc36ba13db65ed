/* cli/client.c - the fibril CLI's HTTP client: one request at a time over
 * the agent's unix socket with libcurl (GET, or POST/DELETE without a body;
 * with --server, to a remote agent over TCP or TLS: cli/remote.c),
 * the reply parsed as one JSON document, and every failure explained in one
 * line (agent not running, not allowed, timed out, bad reply, the agent's
 * own error and status). */

#include <errno.h>
#include <signal.h>
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

#define TIMEOUT_MS 10000L
#define MAX_REPLY ((size_t)256 << 20) /* a full 64k-entry map dump is ~10 MiB */

/* The path of the last request, for explaining a 404 (report_http_error). */
static char last_path[512];

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

/* When nothing listens on the socket: the agent may be starting (a module
 * waiting for etcd, say) or its last start may have failed; it says so in
 * "<socket>.starting" (host/start_status.c). Prints that in one line and
 * returns true, or returns false when the file is absent or unreadable. */
static bool report_start_status(void)
{
	char path[4096];
	if ((size_t)snprintf(path, sizeof(path), "%s.starting", opt.socket) >= sizeof(path))
		return false;
	struct json_object *o = json_object_from_file(path);
	if (!o)
		return false;
	struct json_object *v;
	int64_t pid = json_object_object_get_ex(o, "pid", &v) ? json_object_get_int64(v) : 0;
	const char *state = json_object_object_get_ex(o, "state", &v) ? json_object_get_string(v) : "";
	const char *since = json_object_object_get_ex(o, "since", &v) ? json_object_get_string(v) : "?";
	const char *waiting = json_object_object_get_ex(o, "waiting_for", &v) ? json_object_get_string(v) : "";
	const char *error = json_object_object_get_ex(o, "error", &v) ? json_object_get_string(v) : "";
	bool alive = pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
	bool told = true;
	if (!strcmp(state, "starting") && alive)
		print_error("agent is starting (pid %lld, since %s), the API opens when it is ready: %s",
			    (long long)pid, since, waiting);
	else if (!strcmp(state, "failed") && !alive)
		print_error("agent is not running: its start at %s failed: %s", since, error);
	else if (!strcmp(state, "starting"))
		print_error("agent is not running: its start at %s ended while %s", since, waiting);
	else
		told = false;
	json_object_put(o);
	return told;
}

/* Explains a failed transfer in one line on stderr. */
static void report_curl_error(CURL *curl, CURLcode rc, const char *errbuf, const struct reply *r)
{
	long os_errno = 0;

	curl_easy_getinfo(curl, CURLINFO_OS_ERRNO, &os_errno);
	if (opt.server && !(rc == CURLE_WRITE_ERROR && r->too_big)) {
		remote_report_curl_error((int)rc, errbuf, os_errno);
	} else if (rc == CURLE_COULDNT_CONNECT) {
		const char *why = os_errno ? strerror((int)os_errno) : (*errbuf ? errbuf : curl_easy_strerror(rc));

		if (os_errno == EACCES || os_errno == EPERM)
			print_error("not allowed to talk to the agent (cannot connect to %s: %s)", opt.socket, why);
		else if (!report_start_status())
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
int fetch(const char *method, const char *path, struct json_object **json,
	  long *http_status)
{
	return fetch_body(method, path, NULL, 0, json, http_status);
}

/* fetch() with a JSON request body (body NULL: none, as fetch). */
int fetch_body(const char *method, const char *path, const char *body, size_t body_len,
	       struct json_object **json, long *http_status)
{
	struct curl_slist *hdrs = NULL;
	char *url, errbuf[CURL_ERROR_SIZE] = "";
	struct reply r = { 0 };
	CURL *curl;
	CURLcode rc;
	int ret = -1;

	*json = NULL;
	*http_status = 0;
	snprintf(last_path, sizeof(last_path), "/v1/%s", path);
	if (!opt.server && strlen(opt.socket) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		print_error("agent socket path is too long (%zu bytes, at most %zu): %s",
			    strlen(opt.socket), sizeof(((struct sockaddr_un *)0)->sun_path) - 1, opt.socket);
		return -1;
	}
	if (!(curl = curl_easy_init())) {
		print_error("cannot initialise libcurl");
		return -1;
	}
	if (opt.server) {
		if (!(url = remote_curl_setup(curl, path, &hdrs))) {
			curl_easy_cleanup(curl);
			curl_slist_free_all(hdrs);
			return -1;
		}
	} else {
		url = xasprintf("http://localhost/v1/%s", path);
		curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, opt.socket);
	}
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, TIMEOUT_MS);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_USERAGENT, "fibril/" FIBRIL_VERSION);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r);
	if (body)
		hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	if (hdrs)
		curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdrs);
	if (body) {
		curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)body_len);
	} else if (!strcmp(method, "POST")) {
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
	curl_slist_free_all(hdrs);
	free(url);
	free(r.data);
	return ret;
}

/* Prints an HTTP error reply as "fibril: <error> (HTTP <code>)"; a path
 * the agent has no route for (its router's "no such path") also names the
 * module that serves it and how to enable that module. */
void report_http_error(struct json_object *reply, long status)
{
	const char *err = jstr(reply, "error");
	char *e = clean_dup(err && *err ? err : "request failed");
	const char *module = status == 404 && err && !strncmp(err, "no such path:", 13)
				     ? module_serving_path(last_path)
				     : NULL;

	if (module)
		print_error("%s (HTTP %ld): served by the %s module, which this agent has not loaded; "
			    "to enable it, %s",
			    e, status, module, module_enable_hint());
	else
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

/* request() with a JSON body. */
int request_body(const char *method, const char *path, const char *body, size_t len,
		 struct json_object **json)
{
	long status;

	if (fetch_body(method, path, body, len, json, &status) < 0)
		return -1;
	if (status < 200 || status > 299) {
		report_http_error(*json, status);
		json_object_put(*json);
		*json = NULL;
		return -1;
	}
	return 0;
}

/* The whole of a file (or stdin for "-"), at most max bytes, NUL-terminated;
 * 0, or -1 after printing "<what>: <why>". */
int read_input(const char *what, const char *path, size_t max, char **data, size_t *len)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	char chunk[65536];
	size_t n;

	*data = NULL;
	*len = 0;
	if (!f) {
		print_error("%s: cannot open %s: %s", what, path, strerror(errno));
		return -1;
	}
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
		if (*len + n > max) {
			print_error("%s: %s is larger than %zu bytes", what, path, max);
			goto bad;
		}
		*data = xrealloc(*data, *len + n + 1);
		memcpy(*data + *len, chunk, n);
		*len += n;
		(*data)[*len] = '\0';
	}
	if (ferror(f)) {
		print_error("%s: cannot read %s", what, path);
		goto bad;
	}
	if (f != stdin)
		fclose(f);
	if (!*len) {
		print_error("%s: %s is empty", what, path);
		return -1;
	}
	return 0;
bad:
	if (f != stdin)
		fclose(f);
	free(*data);
	*data = NULL;
	return -1;
}

int get(const char *path, struct json_object **json)
{
	return request("GET", path, json);
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

/* Whether the agent lists module name in GET /v1/modules (true when that
 * cannot be told: then nothing is claimed about it). */
bool module_is_loaded(const char *name)
{
	struct json_object *reply = NULL, *mods;
	long status = 0;
	bool loaded = true;

	if (fetch("GET", "modules", &reply, &status) == 0 && status == 200 &&
	    (mods = jget(reply, "modules", json_type_array))) {
		loaded = false;
		for (size_t i = 0; i < json_object_array_length(mods); i++) {
			const char *n = jstr(json_object_array_get_idx(mods, i), "name");
			if (n && !strcmp(n, name))
				loaded = true;
		}
	}
	json_object_put(reply);
	return loaded;
}
