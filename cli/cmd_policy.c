/* cli/cmd_policy.c - `fibril policy import FILE|-`, `fibril policy get`,
 * `fibril policy delete [NAMESPACE/]NAME`, `fibril policy delete-all` and
 * `fibril policy trace --src S --dst D --dport N/PROTO` and `fibril policy
 * selectors`: the policy module's repository (PUT, GET, DELETE /v1/policy,
 * GET /v1/policy/trace, GET /v1/policy/selectors).
 * import sends the file (CiliumNetworkPolicy, CCNP or NetworkPolicy, JSON
 * or YAML: one, a list or {"items": []}; the module parses and validates
 * both alike) as the body of a PUT, which the CLI's GET/DELETE client has
 * no body for. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json.h>

#include "cli.h"

#define POLICY_MAX_FILE ((size_t)16 << 20)

struct buf {
	char *data;
	size_t len;
};

static size_t on_reply(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct buf *b = ud;
	size_t n = size * nmemb;
	if (n > POLICY_MAX_FILE - b->len)
		return 0;
	b->data = xrealloc(b->data, b->len + n + 1);
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

static int read_file(const char *path, struct buf *out)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	char chunk[65536];
	size_t n;

	out->data = NULL;
	out->len = 0;
	if (!f) {
		print_error("policy import: cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
		if (out->len + n > POLICY_MAX_FILE) {
			print_error("policy import: %s is larger than %zu MiB", path, POLICY_MAX_FILE >> 20);
			if (f != stdin)
				fclose(f);
			return -1;
		}
		out->data = xrealloc(out->data, out->len + n + 1);
		memcpy(out->data + out->len, chunk, n);
		out->len += n;
		out->data[out->len] = '\0';
	}
	int bad = ferror(f);
	if (f != stdin)
		fclose(f);
	if (bad) {
		print_error("policy import: cannot read %s", path);
		return -1;
	}
	if (!out->len) {
		print_error("policy import: %s is empty", path);
		return -1;
	}
	return 0;
}

static int policy_import(const char *path)
{
	struct buf body, reply = {0};
	char errbuf[CURL_ERROR_SIZE] = "";
	long status = 0;
	int ret = EXIT_FAIL;

	if (read_file(path, &body) < 0)
		return EXIT_FAIL;
	CURL *curl = curl_easy_init();
	if (!curl) {
		free(body.data);
		print_error("cannot initialise libcurl");
		return EXIT_FAIL;
	}
	struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, opt.socket);
	curl_easy_setopt(curl, CURLOPT_URL, "http://localhost/v1/policy");
	curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "PUT");
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)body.len);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_reply);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply);
	CURLcode rc = curl_easy_perform(curl);
	if (rc != CURLE_OK) {
		print_error("agent is not reachable at %s: %s", opt.socket,
			    *errbuf ? errbuf : curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	struct json_object *j = reply.data ? json_tokener_parse(reply.data) : NULL;
	if (!j) {
		print_error("bad reply from agent: HTTP %ld, not JSON", status);
		goto out;
	}
	if (status < 200 || status > 299) {
		report_http_error(j, status);
	} else if (opt.json) {
		print_json(j);
		ret = 0;
	} else {
		char rev[32];
		char *names = join_list(j, "imported");
		printf("Imported: %s\nRevision: %s\n", names, fmt_int(j, "revision", rev, sizeof(rev)));
		free(names);
		ret = 0;
	}
	json_object_put(j);
out:
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(curl);
	free(body.data);
	free(reply.data);
	return ret;
}

static int render_policy(struct json_object *reply)
{
	struct json_object *pols = jarray_of_objects(reply, "policies");
	struct json_object *eps = jarray_of_objects(reply, "endpoints");
	char rev[32];
	struct table t;

	if (!pols || !eps)
		return EXIT_FAIL;
	printf("Revision: %s\n", fmt_int(reply, "revision", rev, sizeof(rev)));
	if (json_object_array_length(pols) == 0) {
		puts("No policies.");
	} else {
		table_init(&t, 5);
		table_row(&t, "NAMESPACE", "NAME", "KIND", "SOURCE", "RULES");
		for (size_t i = 0; i < json_object_array_length(pols); i++) {
			struct json_object *p = json_object_array_get_idx(pols, i);
			char rules[32];
			const char *ns = jstr(p, "namespace"), *kind = jstr(p, "kind"),
				   *source = jstr(p, "source");
			table_row(&t, ns && *ns ? ns : "-", jstr(p, "name"), kind ? kind : "-",
				  source ? source : "-", fmt_int(p, "rules", rules, sizeof(rules)));
		}
		table_print(&t);
		table_free(&t);
		/* what a policy enforces otherwise than written (the agent's warnings) */
		for (size_t i = 0; i < json_object_array_length(pols); i++) {
			struct json_object *p = json_object_array_get_idx(pols, i), *w = NULL;
			const char *ns = jstr(p, "namespace");
			if (!json_object_object_get_ex(p, "warnings", &w) ||
			    !json_object_is_type(w, json_type_array))
				continue;
			for (size_t j = 0; j < json_object_array_length(w); j++)
				printf("Warning: %s%s%s: %s\n", ns && *ns ? ns : "", ns && *ns ? "/" : "",
				       jstr(p, "name") ? jstr(p, "name") : "?",
				       json_object_get_string(json_object_array_get_idx(w, j)));
		}
	}
	if (json_object_array_length(eps) > 0) {
		puts("");
		table_init(&t, 6);
		table_row(&t, "ENDPOINT", "IDENTITY", "INGRESS", "EGRESS", "ENTRIES", "REVISION");
		for (size_t i = 0; i < json_object_array_length(eps); i++) {
			struct json_object *e = json_object_array_get_idx(eps, i);
			char id[32], ident[32], n[32], r[32];
			table_row(&t, fmt_int(e, "id", id, sizeof(id)),
				  fmt_int(e, "identity", ident, sizeof(ident)), jstr(e, "ingress"),
				  jstr(e, "egress"), fmt_int(e, "entries", n, sizeof(n)),
				  fmt_int(e, "revision", r, sizeof(r)));
		}
		table_print(&t);
		table_free(&t);
	}
	return 0;
}

static int render_deleted(struct json_object *reply)
{
	char n[32], rev[32];
	printf("Deleted: %s\nRevision: %s\n", fmt_int(reply, "deleted", n, sizeof(n)),
	       fmt_int(reply, "revision", rev, sizeof(rev)));
	return 0;
}

static void print_dir(const char *title, struct json_object *d)
{
	printf("%s: %s: %s\n", title, jstr(d, "verdict") ? jstr(d, "verdict") : "?",
	       jstr(d, "reason") ? jstr(d, "reason") : "");
	static const char *const lists[] = {"selected_by", "allowed_by", "denied_by"};
	static const char *const heads[] = {"selected by", "allowed by", "denied by"};
	for (size_t l = 0; l < 3; l++) {
		struct json_object *a = NULL;
		if (!json_object_object_get_ex(d, lists[l], &a) || !json_object_is_type(a, json_type_array))
			continue;
		for (size_t i = 0; i < json_object_array_length(a); i++)
			printf("  %s: %s\n", heads[l], json_object_get_string(json_object_array_get_idx(a, i)));
	}
	/* what the datapath's entries decide, and the rule its events name */
	const char *match = jstr(d, "match");
	char *rule = policy_rule_text(jget(d, "rule", json_type_object));
	struct json_object *localhost = NULL;
	if (match && !strcmp(match, "default-deny"))
		printf("  decided by: default deny (enforced, no rule allows it)\n");
	else if (json_object_object_get_ex(d, "allow_localhost", &localhost) &&
		 json_object_get_boolean(localhost))
		printf("  decided by: allow allow-localhost (the node's own traffic, no rule)\n");
	else if (match && strcmp(match, "open"))
		printf("  decided by: %s %s\n", match, rule ? rule : "(an unknown rule)");
	free(rule);
}

/* The ends as the ipcache named them (NULL: as the agent's reply says). */
static char *trace_src_name, *trace_dst_name;

static int render_trace(struct json_object *reply)
{
	struct json_object *eg = NULL, *in = NULL;
	char port[32], rev[32];
	const char *verdict = jstr(reply, "verdict");
	printf("Tracing %s -> %s, %s/%s (policy revision %s)\n",
	       trace_src_name ? trace_src_name : jstr(reply, "src"),
	       trace_dst_name ? trace_dst_name : jstr(reply, "dst"),
	       jstr(reply, "protocol"), fmt_int(reply, "port", port, sizeof(port)),
	       fmt_int(reply, "revision", rev, sizeof(rev)));
	if (json_object_object_get_ex(reply, "egress", &eg))
		print_dir("Egress from the source", eg);
	if (json_object_object_get_ex(reply, "ingress", &in))
		print_dir("Ingress to the destination", in);
	printf("Final verdict: %s\n", verdict && !strcmp(verdict, "allowed") ? "ALLOWED" : "DENIED");
	return 0;
}

/* Another node's pod or address, as the ipcache of the nodes module knows
 * it (GET /v1/ipcache: source "kvstore"): *spec becomes "identity:N", the
 * identity its packets carry, and *name says who it is. A local endpoint,
 * an address no remote record holds, or an agent without the nodes module:
 * unchanged (the policy module resolves those itself). */
static void resolve_remote(const char **spec, char **rewritten, char **name)
{
	struct json_object *reply = NULL, *entries;
	long status = 0;
	const char *s = *spec;

	*rewritten = *name = NULL;
	if (!strncmp(s, "identity:", 9) || !strcmp(s, "host") || !strcmp(s, "world") ||
	    strspn(s, "0123456789") == strlen(s))
		return;
	if (fetch("GET", "ipcache", &reply, &status) < 0 || status != 200 ||
	    !(entries = jget(reply, "entries", json_type_array))) {
		json_object_put(reply);
		return;
	}
	for (size_t i = 0; i < json_object_array_length(entries); i++) {
		struct json_object *e = json_object_array_get_idx(entries, i);
		const char *prefix = jstr(e, "prefix"), *pod = jstr(e, "pod"), *source = jstr(e, "source");
		double id = 0;
		if (!prefix || !source || strcmp(source, "kvstore") || !jnum(e, "identity", &id) || id < 1)
			continue;
		size_t n = strlen(s);
		bool by_ip = !strncmp(prefix, s, n) && (!strcmp(prefix + n, "/32") || !strcmp(prefix + n, "/128"));
		if (!by_ip && !(pod && !strcmp(pod, s)))
			continue;
		const char *node = jstr(e, "node");
		char *ip = xasprintf("%.*s", (int)strcspn(prefix, "/"), prefix);
		*rewritten = xasprintf("identity:%.0f", id);
		*name = xasprintf("%s (%s on node %s, identity %.0f, from the ipcache)", ip, pod ? pod : "a pod",
				  node ? node : "?", id);
		free(ip);
		*spec = *rewritten;
		break;
	}
	json_object_put(reply);
}

static int render_selectors(struct json_object *reply)
{
	struct json_object *sels = jarray_of_objects(reply, "selectors");
	struct table t;
	if (!sels)
		return EXIT_FAIL;
	if (json_object_array_length(sels) == 0) {
		puts("No selectors (no policy).");
		return 0;
	}
	table_init(&t, 3);
	table_row(&t, "SELECTOR", "IDENTITIES", "USERS");
	for (size_t i = 0; i < json_object_array_length(sels); i++) {
		struct json_object *s = json_object_array_get_idx(sels, i), *ids = NULL;
		char *users = join_list(s, "users");
		char *idtext = xasprintf("%s", "");
		if (json_object_object_get_ex(s, "identities", &ids) && json_object_is_type(ids, json_type_array))
			for (size_t j = 0; j < json_object_array_length(ids); j++) {
				char *n = xasprintf("%s%s%s", idtext, j ? "," : "",
						    json_object_get_string(json_object_array_get_idx(ids, j)));
				free(idtext);
				idtext = n;
			}
		table_row(&t, jstr(s, "selector"), *idtext ? idtext : "-", users);
		free(idtext);
		free(users);
	}
	table_print(&t);
	table_free(&t);
	return 0;
}

static int policy_trace(int argc, char **argv)
{
	/* --src, --dst and --dport are parsed by main() (global getopt) */
	const char *src = opt.src, *dst = opt.dst, *dport = opt.dport;
	if (argc > 1)
		return usage_error("policy trace: unexpected argument '%s'", argv[1]);
	if (!src || !dst || !dport)
		return usage_error("policy trace: expected --src ENDPOINT --dst ENDPOINT --dport PORT[/PROTO] "
				   "(an end: endpoint ID, NAMESPACE/POD, IP address, identity:N, host or world)");
	char *src_id, *dst_id;
	resolve_remote(&src, &src_id, &trace_src_name);
	resolve_remote(&dst, &dst_id, &trace_dst_name);
	char *s = url_escape(src), *d = url_escape(dst), *p = url_escape(dport);
	char *path = xasprintf("policy/trace?src=%s&dst=%s&dport=%s", s, d, p);
	struct json_object *reply = NULL;
	int rc = EXIT_FAIL;
	if (get(path, &reply) == 0) {
		/* a script branches on the verdict: exit 1 when DENIED */
		const char *verdict = jstr(reply, "verdict");
		if (opt.json)
			print_json(reply);
		else
			render_trace(reply);
		rc = verdict && !strcmp(verdict, "allowed") ? 0 : EXIT_FAIL;
	}
	json_object_put(reply);
	free(path);
	free(s);
	free(d);
	free(p);
	free(src_id);
	free(dst_id);
	free(trace_src_name);
	free(trace_dst_name);
	return rc;
}

int cmd_policy(int argc, char **argv)
{
	if (argc < 1)
		return usage_error("policy: missing subcommand (import FILE, get, delete NAME, "
				   "delete-all, trace, selectors)");
	const char *sub = argv[0];
	if (!strcmp(sub, "import")) {
		if (argc != 2 || !*argv[1])
			return usage_error("policy import: expected one FILE (or - for stdin)");
		return policy_import(argv[1]);
	}
	if (!strcmp(sub, "get")) {
		if (argc > 1)
			return usage_error("policy get: unexpected argument '%s'", argv[1]);
		return show("policy", render_policy);
	}
	if (!strcmp(sub, "delete")) {
		if (argc != 2 || !*argv[1])
			return usage_error("policy delete: expected [NAMESPACE/]NAME");
		const char *slash = strchr(argv[1], '/');
		char *name = url_escape(slash ? slash + 1 : argv[1]);
		char *path;
		if (slash) {
			char *ns_raw = xasprintf("%.*s", (int)(slash - argv[1]), argv[1]);
			char *ns = url_escape(ns_raw);
			path = xasprintf("policy/%s?namespace=%s", name, ns);
			free(ns);
			free(ns_raw);
		} else {
			path = xasprintf("policy/%s", name);
		}
		int rc = show_request("DELETE", path, render_deleted);
		free(path);
		free(name);
		return rc;
	}
	if (!strcmp(sub, "trace"))
		return policy_trace(argc, argv);
	if (!strcmp(sub, "selectors")) {
		if (argc > 1)
			return usage_error("policy selectors: unexpected argument '%s'", argv[1]);
		return show("policy/selectors", render_selectors);
	}
	if (!strcmp(sub, "delete-all")) {
		if (argc > 1)
			return usage_error("policy delete-all: unexpected argument '%s'", argv[1]);
		return show_request("DELETE", "policy", render_deleted);
	}
	return usage_error("policy: unknown subcommand '%s'", sub);
}
