/* cli/cmd_endpoint.c - `fibril endpoint list|get REF` and `fibril identity
 * list|get ID`: the endpoint module's /v1/endpoint and /v1/identity, as
 * aligned tables (or the agent's JSON with -o json). REF is an endpoint ID
 * or container-id:CID[:IFNAME]. `endpoint get` adds the endpoint's policy
 * enforcement per direction and the policy revision it enforces, from the
 * policy module's GET /v1/policy when the agent has it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* "ns/name", or NULL when the endpoint has no pod; malloc'd. */
static char *pod_of(struct json_object *ep)
{
	const char *ns = jstr(ep, "pod-namespace"), *name = jstr(ep, "pod-name");

	if (!ns)
		return NULL;
	return name ? xasprintf("%s/%s", ns, name) : xasprintf("%s", ns);
}

/* The policy module's view of the endpoint (nothing without the module). */
static void policy_rows(struct table *t, struct json_object *ep)
{
	struct json_object *pol = NULL;
	long status = 0;
	double id = -1;
	jnum(ep, "id", &id);
	if (fetch("GET", "policy", &pol, &status) < 0)
		return;
	struct json_object *eps = status == 200 ? jarray_of_objects(pol, "endpoints") : NULL;
	for (size_t i = 0; eps && i < json_object_array_length(eps); i++) {
		struct json_object *e = json_object_array_get_idx(eps, i);
		double eid = -2;
		if (!jnum(e, "id", &eid) || eid != id)
			continue;
		char rev[32], repo[32], entries[32];
		table_row(t, "POLICY-INGRESS", jstr(e, "ingress"));
		table_row(t, "POLICY-EGRESS", jstr(e, "egress"));
		char *revline = xasprintf("%s (repository: %s)", fmt_int(e, "revision", rev, sizeof(rev)),
					  fmt_int(pol, "revision", repo, sizeof(repo)));
		table_row(t, "POLICY-REVISION", revline);
		free(revline);
		table_row(t, "POLICY-ENTRIES", fmt_int(e, "entries", entries, sizeof(entries)));
		break;
	}
	json_object_put(pol);
}

/* How many characters of the container IDs the list shows: 12 as docker
 * shows them, more when that leaves two different IDs looking the same (the
 * demo's "demo-fibril-demo-pod-web" and "...-db"); get shows them whole. */
static int container_width(struct json_object *eps)
{
	size_t n = json_object_array_length(eps), width = 12;

	for (size_t i = 0; i < n; i++) {
		const char *a = jstr(json_object_array_get_idx(eps, i), "container-id");
		for (size_t j = i + 1; a && j < n; j++) {
			const char *b = jstr(json_object_array_get_idx(eps, j), "container-id");
			size_t common = 0;
			if (!b || !strcmp(a, b))
				continue;
			while (a[common] && a[common] == b[common])
				common++;
			if (common + 1 > width)
				width = common + 1;
		}
	}
	return width > 128 ? 128 : (int)width;
}

/* One row per endpoint; the container ID cut as container_width says (get
 * shows it whole). */
static int render_endpoint_list(struct json_object *reply)
{
	struct json_object *eps = jarray_of_objects(reply, "endpoints");
	struct table t;

	if (!eps)
		return EXIT_FAIL;
	if (json_object_array_length(eps) == 0) {
		puts("No endpoints.");
		return 0;
	}
	int cid_width = container_width(eps);
	table_init(&t, 9);
	table_row(&t, "ID", "STATE", "IDENTITY", "IPV4", "IPV6", "HOST-IF", "POD", "CONTAINER",
		  "IFNAME");
	for (size_t i = 0; i < json_object_array_length(eps); i++) {
		struct json_object *ep = json_object_array_get_idx(eps, i);
		char id[32], identity[32];
		const char *cid = jstr(ep, "container-id");
		char *pod = pod_of(ep);
		char *short_cid = cid ? xasprintf("%.*s", cid_width, cid) : NULL;

		table_row(&t, fmt_int(ep, "id", id, sizeof(id)), jstr(ep, "state"),
			  fmt_int(ep, "identity", identity, sizeof(identity)), jstr(ep, "ipv4"),
			  jstr(ep, "ipv6"), jstr(ep, "host-ifname"), pod, short_cid, jstr(ep, "ifname"));
		free(pod);
		free(short_cid);
	}
	table_print(&t);
	table_free(&t);
	printf("%zu endpoint%s\n", json_object_array_length(eps),
	       json_object_array_length(eps) == 1 ? "" : "s");
	return 0;
}

static int render_endpoint(struct json_object *ep)
{
	struct table t;
	char id[32], identity[32], ifindex[32], created[32];
	char *pod = pod_of(ep), *labels = join_list(ep, "labels");

	if (!jstr(ep, "state")) {
		print_error("bad reply from agent: not an endpoint");
		free(pod);
		free(labels);
		return EXIT_FAIL;
	}
	table_init(&t, 2);
	table_row(&t, "ID", fmt_int(ep, "id", id, sizeof(id)));
	table_row(&t, "STATE", jstr(ep, "state"));
	table_row(&t, "IDENTITY", fmt_int(ep, "identity", identity, sizeof(identity)));
	table_row(&t, "LABELS", labels);
	table_row(&t, "CONTAINER-ID", jstr(ep, "container-id"));
	table_row(&t, "IFNAME", jstr(ep, "ifname"));
	table_row(&t, "NETNS", jstr(ep, "netns"));
	table_row(&t, "POD", pod);
	table_row(&t, "IPV4", jstr(ep, "ipv4"));
	table_row(&t, "IPV6", jstr(ep, "ipv6"));
	table_row(&t, "MAC", jstr(ep, "mac"));
	table_row(&t, "HOST-IFNAME", jstr(ep, "host-ifname"));
	table_row(&t, "HOST-IFINDEX", fmt_int(ep, "host-ifindex", ifindex, sizeof(ifindex)));
	table_row(&t, "HOST-MAC", jstr(ep, "host-mac"));
	table_row(&t, "CREATED", fmt_time(ep, "created", created, sizeof(created)));
	policy_rows(&t, ep);
	table_print(&t);
	table_free(&t);
	free(pod);
	free(labels);
	return 0;
}

/* The identity's scope as the agent says it ("reserved", "local", "cluster:kvstore",
 * "cluster:crd", "cidr"); an older agent's reply says only reserved or not. */
static const char *identity_kind(struct json_object *id)
{
	struct json_object *scope = jget(id, "scope", json_type_string);
	struct json_object *reserved = jget(id, "reserved", json_type_boolean);

	if (scope)
		return json_object_get_string(scope);
	return reserved && json_object_get_boolean(reserved) ? "reserved" : "local";
}

static int render_identity_list(struct json_object *reply)
{
	struct json_object *ids = jarray_of_objects(reply, "identities");
	struct table t;

	if (!ids)
		return EXIT_FAIL;
	table_init(&t, 4);
	table_row(&t, "ID", "KIND", "ENDPOINTS", "LABELS");
	for (size_t i = 0; i < json_object_array_length(ids); i++) {
		struct json_object *id = json_object_array_get_idx(ids, i);
		char num[32], eps[32];
		char *labels = join_list(id, "labels");

		table_row(&t, fmt_int(id, "id", num, sizeof(num)), identity_kind(id),
			  fmt_int(id, "endpoints", eps, sizeof(eps)), labels);
		free(labels);
	}
	table_print(&t);
	table_free(&t);
	return 0;
}

static int render_identity(struct json_object *id)
{
	struct table t;
	char num[32], eps[32];
	char *labels = join_list(id, "labels");

	table_init(&t, 2);
	table_row(&t, "ID", fmt_int(id, "id", num, sizeof(num)));
	table_row(&t, "KIND", identity_kind(id));
	table_row(&t, "ENDPOINTS", fmt_int(id, "endpoints", eps, sizeof(eps)));
	table_row(&t, "LABELS", labels);
	table_print(&t);
	table_free(&t);
	free(labels);
	return 0;
}

/* fibril <group> get ARG: GET <path>/<escaped ARG>. */
static int get_one(const char *group, const char *base, int argc, char **argv,
		   int (*render)(struct json_object *))
{
	if (argc < 1 || !*argv[0])
		return usage_error("%s get: missing %s", group,
				   !strcmp(group, "endpoint") ? "REF (ID or container-id:CID[:IFNAME])" : "ID");
	if (argc > 1)
		return usage_error("%s get: unexpected argument '%s'", group, argv[1]);

	char *arg = url_escape(argv[0]);
	char *path = xasprintf("%s/%s", base, arg);
	int rc = show(path, render);

	free(path);
	free(arg);
	return rc;
}

int cmd_endpoint(int argc, char **argv)
{
	if (argc < 1)
		return usage_error("endpoint: missing subcommand (list or get REF)");
	if (!strcmp(argv[0], "list")) {
		if (argc > 1)
			return usage_error("endpoint list: unexpected argument '%s'", argv[1]);
		return show("endpoint", render_endpoint_list);
	}
	if (!strcmp(argv[0], "get"))
		return get_one("endpoint", "endpoint", argc - 1, argv + 1, render_endpoint);
	return usage_error("endpoint: unknown subcommand '%s' (expected list or get REF)", argv[0]);
}

int cmd_identity(int argc, char **argv)
{
	if (argc < 1)
		return usage_error("identity: missing subcommand (list or get ID)");
	if (!strcmp(argv[0], "list")) {
		if (argc > 1)
			return usage_error("identity list: unexpected argument '%s'", argv[1]);
		return show("identity", render_identity_list);
	}
	if (!strcmp(argv[0], "get"))
		return get_one("identity", "identity", argc - 1, argv + 1, render_identity);
	return usage_error("identity: unknown subcommand '%s' (expected list or get ID)", argv[0]);
}
