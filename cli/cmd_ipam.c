/* cli/cmd_ipam.c - `fibril ipam list | allocate | release`: the addresses
 * handed out and the pools (GET /v1/ipam), an allocation for an owner
 * (POST) and a release by address or owner (DELETE). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include "cli.h"

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

int cmd_ipam(int argc, char **argv)
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
