/* tests/unit/test_graph.c - unit tests of the dependency graph
 * (host/graph.c) on fake modules built in memory: start order from requires
 * and wants, missing and soft dependencies, chains and cycles in the error
 * messages, ambiguous capabilities and [providers] choices, graph_provider
 * and the text and dot output of graph_print. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cunit_main.h"
#include "internal.h"

#include <string.h>

/* A NULL-terminated list that lives until the end of the enclosing block:
 * use it only in the test function that also resolves and frees. */
#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static char err[ERRBUF_LEN];

/* ---- fake modules -------------------------------------------------------------- */

#define MAX_MODS 8

static struct module_set set;

static void begin(void)
{
	config_reset();
	graph_fini();
	memset(&set, 0, sizeof(set));
	set.mods = xcalloc(MAX_MODS, sizeof(*set.mods));
	err[0] = '\0';
}

static struct fibril_module *add(const char *name, const char *const *provides,
				 const char *const *requires, const char *const *wants)
{
	CU_ASSERT_FATAL(set.n < MAX_MODS);
	struct fibril_module *m = xcalloc(1, sizeof(*m));
	m->name = xstrdup(name);
	char path[128];
	snprintf(path, sizeof(path), "/usr/lib/fibril/modules/%s.so", name);
	m->path = xstrdup(path);
	m->desc.sz = sizeof(m->desc);
	m->desc.name = m->name;
	m->desc.provides = provides;
	m->desc.requires = requires;
	m->desc.wants = wants;
	m->desc_sz = sizeof(m->desc);
	m->state = MODULE_LOADED;
	m->order = -1;
	set.mods[set.n++] = m;
	return m;
}

static void finish(void)
{
	for (size_t i = 0; i < set.n; i++) {
		free(set.mods[i]->name);
		free(set.mods[i]->path);
		free(set.mods[i]->deps);
		free(set.mods[i]);
	}
	free(set.mods);
	free(set.order);
	memset(&set, 0, sizeof(set));
	graph_fini();
	config_reset();
}

/* [providers] cap = choice, as --set providers.cap=choice. */
static void choose(const char *cap, const char *choice)
{
	static const char *caps[MAX_MODS];
	caps[0] = cap;
	CU_ASSERT_EQUAL(config_declare_dynamic("providers", caps, 1, "which module provides it"), 0);
	char spec[128];
	snprintf(spec, sizeof(spec), "providers.%s=%s", cap, choice);
	CU_ASSERT_EQUAL_FATAL(config_set_override(spec, err), 0);
}

static int resolve(void)
{
	err[0] = '\0';
	int rc = graph_resolve(&set, err);
	if (rc)
		CU_ASSERT_NOT_EQUAL(err[0], '\0');
	return rc;
}

/* Position of m in set.order, or -1. */
static int pos(const struct fibril_module *m)
{
	for (size_t i = 0; i < set.norder; i++)
		if (set.order[i] == m)
			return (int)i;
	return -1;
}

static bool has_dep(const struct fibril_module *m, const struct fibril_module *dep)
{
	for (size_t i = 0; i < m->ndeps; i++)
		if (m->deps[i] == dep)
			return true;
	return false;
}

/* Every placed module: order field matches its index; deps come first. */
static void check_order_consistent(void)
{
	for (size_t i = 0; i < set.norder; i++) {
		const struct fibril_module *m = set.order[i];
		CU_ASSERT_EQUAL(m->order, (int)i);
		CU_ASSERT_NOT_EQUAL(m->state, MODULE_STOPPED);
		for (size_t d = 0; d < m->ndeps; d++) {
			int dp = pos(m->deps[d]);
			CU_ASSERT(dp >= 0 && dp < (int)i);
		}
	}
}

static void assert_err_is(const char *expected)
{
	if (strcmp(err, expected) != 0)
		fprintf(stderr, "\n  expected: %s\n  got:      %s\n", expected, err);
	CU_ASSERT_STRING_EQUAL(err, expected);
}

static char *print_graph(bool dot)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	CU_ASSERT_PTR_NOT_NULL_FATAL(out);
	graph_print(&set, out, dot);
	fclose(out);
	return text;
}

static void assert_contains(const char *text, const char *needle)
{
	if (!strstr(text, needle))
		fprintf(stderr, "\n  missing: [%s]\n  in:\n%s\n", needle, text);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, needle));
}

/* ---- ordering ------------------------------------------------------------------ */

static void t_order_requires_and_wants(void)
{
	begin();
	/* Added in an order that is neither the start order nor by name. */
	struct fibril_module *api = add("api", L("http"), L("store"), L("metrics"));
	struct fibril_module *zz = add("zz", NULL, NULL, NULL);
	struct fibril_module *prom = add("prom", L("metrics"), NULL, L("log"));
	struct fibril_module *db = add("db", L("store"), L("log"), NULL);
	struct fibril_module *logger = add("logger", L("log"), NULL, NULL);
	CU_ASSERT_EQUAL_FATAL(resolve(), 0);
	CU_ASSERT_EQUAL(err[0], '\0');
	CU_ASSERT_EQUAL_FATAL(set.norder, 5);
	check_order_consistent();
	CU_ASSERT(pos(logger) < pos(db));   /* requires */
	CU_ASSERT(pos(db) < pos(api));      /* requires */
	CU_ASSERT(pos(prom) < pos(api));    /* wants */
	CU_ASSERT(pos(logger) < pos(prom)); /* wants */
	CU_ASSERT(pos(zz) >= 0);
	/* The edges. */
	CU_ASSERT_EQUAL(api->ndeps, 2);
	CU_ASSERT(has_dep(api, db));
	CU_ASSERT(has_dep(api, prom));
	CU_ASSERT_EQUAL(db->ndeps, 1);
	CU_ASSERT(has_dep(db, logger));
	CU_ASSERT_EQUAL(prom->ndeps, 1);
	CU_ASSERT(has_dep(prom, logger));
	CU_ASSERT_EQUAL(logger->ndeps, 0);
	CU_ASSERT_EQUAL(zz->ndeps, 0);
	for (size_t i = 0; i < set.n; i++)
		CU_ASSERT_EQUAL(set.mods[i]->state, MODULE_LOADED);

	/* Resolving again gives the same order and the same edges. */
	struct fibril_module *first[5];
	memcpy(first, set.order, sizeof(first));
	CU_ASSERT_EQUAL_FATAL(resolve(), 0);
	CU_ASSERT_EQUAL_FATAL(set.norder, 5);
	CU_ASSERT_EQUAL(memcmp(first, set.order, sizeof(first)), 0);
	CU_ASSERT_EQUAL(api->ndeps, 2);
	finish();
}

static void t_order_chain(void)
{
	begin();
	/* A long chain added backwards: d needs c needs b needs a. */
	struct fibril_module *a = add("a", L("ca"), NULL, NULL);
	struct fibril_module *d = add("d", NULL, L("cc"), NULL);
	struct fibril_module *c = add("c", L("cc"), L("cb"), NULL);
	struct fibril_module *b = add("b", L("cb"), L("ca"), NULL);
	CU_ASSERT_EQUAL_FATAL(resolve(), 0);
	CU_ASSERT_EQUAL_FATAL(set.norder, 4);
	CU_ASSERT_PTR_EQUAL(set.order[0], a);
	CU_ASSERT_PTR_EQUAL(set.order[1], b);
	CU_ASSERT_PTR_EQUAL(set.order[2], c);
	CU_ASSERT_PTR_EQUAL(set.order[3], d);
	check_order_consistent();
	finish();
}

static void t_duplicate_requirements(void)
{
	begin();
	/* Two capabilities of one provider, required and wanted: one edge. */
	struct fibril_module *p = add("p", L("x", "y"), NULL, NULL);
	struct fibril_module *u = add("u", NULL, L("x", "y"), L("x"));
	CU_ASSERT_EQUAL_FATAL(resolve(), 0);
	CU_ASSERT_EQUAL(u->ndeps, 1);
	CU_ASSERT(has_dep(u, p));
	CU_ASSERT(pos(p) < pos(u));
	finish();
}

static void t_wants_missing_ignored(void)
{
	begin();
	struct fibril_module *a = add("a", NULL, NULL, L("nothing-provides-this"));
	struct fibril_module *b = add("b", L("cb"), NULL, L("also-missing"));
	struct fibril_module *c = add("c", NULL, L("cb"), L("missing-too"));
	CU_ASSERT_EQUAL_FATAL(resolve(), 0);
	CU_ASSERT_EQUAL(err[0], '\0');
	CU_ASSERT_EQUAL(set.norder, 3);
	CU_ASSERT_EQUAL(a->ndeps, 0);
	CU_ASSERT_EQUAL(b->ndeps, 0);
	CU_ASSERT_EQUAL(c->ndeps, 1);
	CU_ASSERT(pos(b) < pos(c));
	check_order_consistent();
	finish();
}

static void t_self_provided_requirement(void)
{
	begin();
	/* Requiring (and wanting) what it provides itself is fine. */
	struct fibril_module *a = add("a", L("ipam"), L("ipam"), L("ipam"));
	struct fibril_module *b = add("b", NULL, L("ipam"), NULL);
	CU_ASSERT_EQUAL_FATAL(resolve(), 0);
	CU_ASSERT_EQUAL(a->ndeps, 0);
	CU_ASSERT_EQUAL_FATAL(set.norder, 2);
	CU_ASSERT_PTR_EQUAL(set.order[0], a);
	CU_ASSERT_PTR_EQUAL(set.order[1], b);
	CU_ASSERT_PTR_EQUAL(graph_provider("ipam"), a);
	/* And the printed graph has no self edge. */
	char *dot = print_graph(true);
	CU_ASSERT_PTR_NULL(strstr(dot, "\"a\" -> \"a\""));
	free(dot);
	finish();
}

static void t_empty_set(void)
{
	begin();
	CU_ASSERT_EQUAL(resolve(), 0);
	CU_ASSERT_EQUAL(set.norder, 0);
	size_t n = 99;
	const char *const *caps = graph_capabilities(&n);
	CU_ASSERT_EQUAL(n, 0);
	CU_ASSERT_PTR_NOT_NULL(caps);
	char *text = print_graph(false);
	CU_ASSERT_STRING_EQUAL(text, "start order (0 modules):\n");
	free(text);
	finish();
}

/* ---- missing dependencies and cycles --------------------------------------------- */

static void t_missing_dependency_direct(void)
{
	begin();
	add("x", NULL, L("cap"), NULL);
	add("y", L("other"), NULL, NULL);
	CU_ASSERT_EQUAL(resolve(), -1);
	assert_err_is("unresolved dependency: x -> 'cap' (no loaded module provides 'cap'; "
		      "x is in /usr/lib/fibril/modules/x.so)");
	CU_ASSERT_EQUAL(set.norder, 0);
	finish();
}

static void t_missing_dependency_chain(void)
{
	begin();
	/* a needs b's capability; b needs one nobody provides. */
	add("b", L("cb"), L("cap"), NULL);
	add("a", NULL, L("cb"), NULL);
	CU_ASSERT_EQUAL(resolve(), -1);
	assert_err_is("unresolved dependency: a -> b -> 'cap' (no loaded module provides 'cap'; "
		      "b is in /usr/lib/fibril/modules/b.so)");
	CU_ASSERT_EQUAL(set.norder, 0);
	finish();
}

static void t_missing_dependency_long_chain(void)
{
	begin();
	add("a", NULL, L("cb"), NULL);
	add("b", L("cb"), L("cc"), NULL);
	add("c", L("cc"), L("cd"), NULL);
	add("d", L("cd"), L("gone"), NULL);
	CU_ASSERT_EQUAL(resolve(), -1);
	assert_err_is("unresolved dependency: a -> b -> c -> d -> 'gone' (no loaded module provides "
		      "'gone'; d is in /usr/lib/fibril/modules/d.so)");
	finish();
}

static void t_missing_want_does_not_hide_requires(void)
{
	begin();
	/* wants are soft, but what a wanted module requires is still hard. */
	add("a", NULL, NULL, L("cb"));
	add("b", L("cb"), L("gone"), NULL);
	CU_ASSERT_EQUAL(resolve(), -1);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "unresolved dependency: "));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "b -> 'gone'"));
	finish();
}

static void t_cycle_three(void)
{
	begin();
	add("c", L("cc"), L("ca"), NULL);
	add("a", L("ca"), L("cb"), NULL);
	add("b", L("cb"), L("cc"), NULL);
	CU_ASSERT_EQUAL(resolve(), -1);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "dependency cycle: "));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "a"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "b"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "c"));
	assert_err_is("dependency cycle: a -> b -> c -> a");
	CU_ASSERT_EQUAL(set.norder, 0);
	finish();
}

static void t_cycle_not_from_first(void)
{
	begin();
	/* The walk enters the cycle through a module outside it: only the
	 * modules in the cycle are named. */
	add("entry", NULL, L("c1"), NULL);
	add("m1", L("c1"), L("c2"), NULL);
	add("m2", L("c2"), L("c3"), NULL);
	add("m3", L("c3"), L("c1"), NULL);
	CU_ASSERT_EQUAL(resolve(), -1);
	assert_err_is("dependency cycle: m1 -> m2 -> m3 -> m1");
	finish();
}

static void t_cycle_through_wants(void)
{
	begin();
	add("p", L("cp"), L("cq"), NULL);
	add("q", L("cq"), NULL, L("cp"));
	CU_ASSERT_EQUAL(resolve(), -1);
	assert_err_is("dependency cycle: p -> q -> p");
	finish();
}

/* ---- providers -------------------------------------------------------------------- */

static void t_ambiguous_capability(void)
{
	begin();
	add("host-local", L("ipam"), NULL, NULL);
	add("whereabouts", L("ipam"), NULL, NULL);
	add("bridge", NULL, L("ipam"), NULL);
	CU_ASSERT_EQUAL(resolve(), -1);
	assert_err_is("ambiguous capability 'ipam': provided by host-local "
		      "(/usr/lib/fibril/modules/host-local.so) and whereabouts "
		      "(/usr/lib/fibril/modules/whereabouts.so); choose one with [providers] ipam = NAME");
	CU_ASSERT_EQUAL(set.norder, 0);
	finish();
}

static void t_ambiguous_three_providers(void)
{
	begin();
	add("p1", L("dns"), NULL, NULL);
	add("p2", L("dns"), NULL, NULL);
	add("p3", L("dns"), NULL, NULL);
	CU_ASSERT_EQUAL(resolve(), -1);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "ambiguous capability 'dns'"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "p1"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "p2"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, " and others"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "[providers] dns = NAME"));
	finish();
}

static void t_provider_choice(void)
{
	begin();
	struct fibril_module *x = add("x", L("ipam"), NULL, NULL);
	/* The loser needs something missing: it is not started, so no error. */
	struct fibril_module *y = add("y", L("ipam"), L("missing"), NULL);
	struct fibril_module *c = add("c", NULL, L("ipam"), NULL);
	choose("ipam", "x");
	CU_ASSERT_STRING_EQUAL(config_value("providers", "ipam"), "x");
	CU_ASSERT_EQUAL_FATAL(resolve(), 0);
	CU_ASSERT_PTR_EQUAL(graph_provider("ipam"), x);
	CU_ASSERT_EQUAL(y->state, MODULE_STOPPED);
	CU_ASSERT_EQUAL(y->order, -1);
	CU_ASSERT_EQUAL(pos(y), -1);
	CU_ASSERT_NOT_EQUAL(x->state, MODULE_STOPPED);
	CU_ASSERT_EQUAL_FATAL(set.norder, 2);
	CU_ASSERT_PTR_EQUAL(set.order[0], x);
	CU_ASSERT_PTR_EQUAL(set.order[1], c);
	CU_ASSERT(has_dep(c, x));
	CU_ASSERT(!has_dep(c, y));
	check_order_consistent();
	char *text = print_graph(false);
	assert_contains(text, "start order (2 modules):\n");
	assert_contains(text, "not started: y (another provider was chosen)\n");
	CU_ASSERT_PTR_NULL(strstr(text, "not started: x"));
	free(text);
	char *dot = print_graph(true);
	CU_ASSERT_PTR_NULL(strstr(dot, "\"y\""));
	assert_contains(dot, "\t\"c\" -> \"x\" [label=\"ipam\"];\n");
	free(dot);
	finish();
}

static void t_provider_choice_single_provider(void)
{
	begin();
	/* Naming the only provider is fine too. */
	struct fibril_module *x = add("x", L("ipam"), NULL, NULL);
	choose("ipam", "x");
	CU_ASSERT_EQUAL_FATAL(resolve(), 0);
	CU_ASSERT_PTR_EQUAL(graph_provider("ipam"), x);
	CU_ASSERT_EQUAL(set.norder, 1);
	finish();
}

static void t_provider_choice_not_a_provider(void)
{
	begin();
	add("x", L("ipam"), NULL, NULL);
	add("y", L("ipam"), NULL, NULL);
	add("c", NULL, L("ipam"), NULL);
	choose("ipam", "c");
	CU_ASSERT_EQUAL(resolve(), -1);
	assert_err_is("--set: [providers] ipam = c, but that module does not provide it");
	CU_ASSERT_EQUAL(set.norder, 0);
	finish();
}

static void t_provider_choice_unknown_module(void)
{
	begin();
	add("x", L("ipam"), NULL, NULL);
	add("y", L("ipam"), NULL, NULL);
	choose("ipam", "nope");
	CU_ASSERT_EQUAL(resolve(), -1);
	assert_err_is("--set: [providers] ipam = nope, but no such module is loaded");
	finish();
}

static void t_loser_only_provider_of_other_capability(void)
{
	begin();
	/* y provides ipam and dns; x is chosen for ipam, so y is not started.
	 * c requires dns, which only y offered: y must not be started anyway
	 * (it lost a choice), so either the resolve fails naming 'dns' or c
	 * is left without y - but y must never appear in the start order. */
	struct fibril_module *x = add("x", L("ipam"), NULL, NULL);
	struct fibril_module *y = add("y", L("ipam", "dns"), NULL, NULL);
	add("c", NULL, L("dns"), NULL);
	choose("ipam", "x");
	int rc = resolve();
	CU_ASSERT_EQUAL(y->state, MODULE_STOPPED);
	CU_ASSERT_EQUAL(pos(y), -1);
	if (rc == 0) {
		CU_ASSERT(pos(x) >= 0);
		check_order_consistent();
	} else {
		CU_ASSERT_PTR_NOT_NULL(strstr(err, "dns"));
	}
	CU_ASSERT_PTR_NOT_EQUAL(graph_provider("dns"), y);
	finish();
}

static void t_graph_provider_and_capabilities(void)
{
	begin();
	struct fibril_module *a = add("a", L("one", "two"), NULL, NULL);
	struct fibril_module *b = add("b", L("three"), L("one"), NULL);
	CU_ASSERT_EQUAL_FATAL(resolve(), 0);
	CU_ASSERT_PTR_EQUAL(graph_provider("one"), a);
	CU_ASSERT_PTR_EQUAL(graph_provider("two"), a);
	CU_ASSERT_PTR_EQUAL(graph_provider("three"), b);
	CU_ASSERT_PTR_NULL(graph_provider("four"));
	size_t n = 0;
	const char *const *caps = graph_capabilities(&n);
	CU_ASSERT_EQUAL_FATAL(n, 3);
	bool seen[3] = {false, false, false};
	for (size_t i = 0; i < n; i++) {
		if (strcmp(caps[i], "one") == 0)
			seen[0] = true;
		else if (strcmp(caps[i], "two") == 0)
			seen[1] = true;
		else if (strcmp(caps[i], "three") == 0)
			seen[2] = true;
	}
	CU_ASSERT(seen[0] && seen[1] && seen[2]);
	CU_ASSERT_PTR_NULL(caps[n]); /* NULL-terminated */
	/* graph_fini forgets the providers. */
	graph_fini();
	CU_ASSERT_PTR_NULL(graph_provider("one"));
	caps = graph_capabilities(&n);
	CU_ASSERT_EQUAL(n, 0);
	finish();
}

/* ---- printing ---------------------------------------------------------------------- */

/* File scope: the modules keep pointing at these after the builder returns. */
static const char *const store_list[] = {"store", NULL};
static const char *const metrics_list[] = {"metrics", NULL};
static const char *const api_wants[] = {"metrics", "absent", NULL};

static void build_print_set(struct fibril_module **api, struct fibril_module **db,
			    struct fibril_module **prom)
{
	*api = add("api", NULL, store_list, api_wants);
	*db = add("db", store_list, NULL, NULL);
	*prom = add("prom", metrics_list, NULL, NULL);
	CU_ASSERT_EQUAL_FATAL(resolve(), 0);
	CU_ASSERT_EQUAL_FATAL(set.norder, 3);
	CU_ASSERT(pos(*db) < pos(*api));
	CU_ASSERT(pos(*prom) < pos(*api));
}

static void t_graph_print_text(void)
{
	begin();
	struct fibril_module *api, *db, *prom;
	build_print_set(&api, &db, &prom);
	char *text = print_graph(false);
	assert_contains(text, "start order (3 modules):\n");
	char line[128];
	snprintf(line, sizeof(line), "%3d. db\n", pos(db) + 1);
	assert_contains(text, line);
	snprintf(line, sizeof(line), "%3d. prom\n", pos(prom) + 1);
	assert_contains(text, line);
	snprintf(line, sizeof(line), "%3d. api  (after %s, %s)\n", pos(api) + 1,
		 api->deps[0]->name, api->deps[1]->name);
	assert_contains(text, line);
	CU_ASSERT_PTR_NULL(strstr(text, "not started"));
	/* With the dependencies in the order they are declared. */
	CU_ASSERT_STRING_EQUAL(text, "start order (3 modules):\n"
				     "  1. db\n"
				     "  2. prom\n"
				     "  3. api  (after db, prom)\n");
	free(text);
	finish();
}

static void t_graph_print_dot(void)
{
	begin();
	struct fibril_module *api, *db, *prom;
	build_print_set(&api, &db, &prom);
	char *dot = print_graph(true);
	CU_ASSERT_EQUAL(strncmp(dot, "digraph fibril {\n", 17), 0);
	assert_contains(dot, "\trankdir=LR;\n");
	char line[128];
	snprintf(line, sizeof(line), "\t\"api\" [label=\"%d. api\"];\n", pos(api) + 1);
	assert_contains(dot, line);
	snprintf(line, sizeof(line), "\t\"db\" [label=\"%d. db\"];\n", pos(db) + 1);
	assert_contains(dot, line);
	snprintf(line, sizeof(line), "\t\"prom\" [label=\"%d. prom\"];\n", pos(prom) + 1);
	assert_contains(dot, line);
	assert_contains(dot, "\t\"api\" -> \"db\" [label=\"store\"];\n");
	assert_contains(dot, "\t\"api\" -> \"prom\" [label=\"metrics\", style=dashed];\n");
	CU_ASSERT_PTR_NULL(strstr(dot, "absent"));
	CU_ASSERT_PTR_NULL(strstr(dot, "\"db\" ->"));
	size_t len = strlen(dot);
	CU_ASSERT(len >= 2 && strcmp(dot + len - 2, "}\n") == 0);
	free(dot);
	finish();
}

FIBRIL_TEST_MAIN("graph", NULL, NULL,
		 FIBRIL_TEST(t_order_requires_and_wants),
		 FIBRIL_TEST(t_order_chain),
		 FIBRIL_TEST(t_duplicate_requirements),
		 FIBRIL_TEST(t_wants_missing_ignored),
		 FIBRIL_TEST(t_self_provided_requirement),
		 FIBRIL_TEST(t_empty_set),
		 FIBRIL_TEST(t_missing_dependency_direct),
		 FIBRIL_TEST(t_missing_dependency_chain),
		 FIBRIL_TEST(t_missing_dependency_long_chain),
		 FIBRIL_TEST(t_missing_want_does_not_hide_requires),
		 FIBRIL_TEST(t_cycle_three),
		 FIBRIL_TEST(t_cycle_not_from_first),
		 FIBRIL_TEST(t_cycle_through_wants),
		 FIBRIL_TEST(t_ambiguous_capability),
		 FIBRIL_TEST(t_ambiguous_three_providers),
		 FIBRIL_TEST(t_provider_choice),
		 FIBRIL_TEST(t_provider_choice_single_provider),
		 FIBRIL_TEST(t_provider_choice_not_a_provider),
		 FIBRIL_TEST(t_provider_choice_unknown_module),
		 FIBRIL_TEST(t_loser_only_provider_of_other_capability),
		 FIBRIL_TEST(t_graph_provider_and_capabilities),
		 FIBRIL_TEST(t_graph_print_text),
		 FIBRIL_TEST(t_graph_print_dot))
