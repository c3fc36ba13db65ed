/* host/graph.c - the dependency graph: resolves each capability to one
 * provider ([providers] chooses when several modules offer one), turns
 * requires/wants into edges, and orders the start topologically. A missing
 * hard dependency names the chain that needs it; a cycle names every module
 * in it. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct capability {
	char *name;
	struct fibril_module *chosen;
};

static struct capability *g_caps;
static size_t g_ncaps;
static const char **g_cap_names;

void graph_fini(void)
{
	for (size_t i = 0; i < g_ncaps; i++)
		free(g_caps[i].name);
	free(g_caps);
	free(g_cap_names);
	g_caps = NULL;
	g_cap_names = NULL;
	g_ncaps = 0;
}

static struct capability *cap_find(const char *name)
{
	for (size_t i = 0; i < g_ncaps; i++)
		if (strcmp(g_caps[i].name, name) == 0)
			return &g_caps[i];
	return NULL;
}

struct fibril_module *graph_provider(const char *capability)
{
	struct capability *c = cap_find(capability);
	return c ? c->chosen : NULL;
}

const char *const *graph_capabilities(size_t *n)
{
	*n = g_ncaps;
	return g_cap_names;
}

static bool provides(const struct fibril_module *m, const char *cap)
{
	for (const char *const *p = m->desc.provides; p && *p; p++)
		if (strcmp(*p, cap) == 0)
			return true;
	return false;
}

void graph_collect_capabilities(const struct module_set *set)
{
	graph_fini();
	for (size_t i = 0; i < set->n; i++) {
		for (const char *const *p = set->mods[i]->desc.provides; p && *p; p++) {
			if (cap_find(*p))
				continue;
			g_caps = realloc(g_caps, (g_ncaps + 1) * sizeof(*g_caps));
			if (!g_caps)
				abort();
			g_caps[g_ncaps++] = (struct capability){.name = xstrdup(*p)};
		}
	}
	g_cap_names = xcalloc(g_ncaps + 1, sizeof(*g_cap_names));
	for (size_t i = 0; i < g_ncaps; i++)
		g_cap_names[i] = g_caps[i].name;
}

/* Pick one provider per capability; modules that lost a choice are dropped
 * from the set (they are not started) and unloaded by the caller later. */
/* Preview (--print-config, --graph): an ambiguous capability takes its
 * first provider and is noted here instead of failing the resolve. */
static bool g_preview;
static char g_ambiguities[4096];

void graph_set_preview(bool preview)
{
	g_preview = preview;
	g_ambiguities[0] = '\0';
}

const char *graph_ambiguities(void)
{
	return g_ambiguities;
}

static int choose_providers(struct module_set *set, char *err)
{
	for (size_t c = 0; c < g_ncaps; c++) {
		struct capability *cap = &g_caps[c];
		struct fibril_module *first = NULL, *second = NULL;
		size_t count = 0;
		for (size_t i = 0; i < set->n; i++) {
			if (!provides(set->mods[i], cap->name))
				continue;
			if (count == 0)
				first = set->mods[i];
			else if (count == 1)
				second = set->mods[i];
			count++;
		}
		const char *choice = config_value("providers", cap->name);
		if (choice) {
			struct fibril_module *m = module_set_find(set, choice);
			if (!m || !provides(m, cap->name)) {
				errbuf_set(err, "%s: [providers] %s = %s, but %s",
					   config_origin("providers", cap->name), cap->name, choice,
					   m ? "that module does not provide it" : "no such module is loaded");
				return -1;
			}
			cap->chosen = m;
		} else if (count > 1) {
			errbuf_set(err, "ambiguous capability '%s': provided by %s (%s) and %s (%s)%s; "
				   "choose one with [providers] %s = NAME",
				   cap->name, first->name, first->path, second->name, second->path,
				   count > 2 ? " and others" : "", cap->name);
			if (!g_preview)
				return -1;
			/* --print-config/--graph: show the graph with the first,
			 * and say so (graph_ambiguities). */
			size_t used = strlen(g_ambiguities);
			snprintf(g_ambiguities + used, sizeof(g_ambiguities) - used,
				 "%s; shown with %s, a start would refuse\n", err, first->name);
			err[0] = '\0';
			cap->chosen = first;
		} else {
			cap->chosen = first;
		}
	}
	return 0;
}

static bool lost_a_choice(const struct fibril_module *m)
{
	for (const char *const *p = m->desc.provides; p && *p; p++) {
		struct capability *c = cap_find(*p);
		if (c && c->chosen != m)
			return true;
	}
	return false;
}

static void add_dep(struct fibril_module *m, struct fibril_module *dep)
{
	if (dep == m)
		return;
	for (size_t i = 0; i < m->ndeps; i++)
		if (m->deps[i] == dep)
			return;
	m->deps = realloc(m->deps, (m->ndeps + 1) * sizeof(*m->deps));
	if (!m->deps)
		abort();
	m->deps[m->ndeps++] = dep;
}

/* DFS stack used for chains and cycles. */
struct walk {
	struct fibril_module **stack;
	size_t depth;
	struct fibril_module **order;
	size_t norder;
	char *err;
};

static void stack_text(const struct walk *w, size_t from, char *buf, size_t len)
{
	size_t off = 0;
	buf[0] = '\0';
	for (size_t i = from; i < w->depth && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s", i > from ? " -> " : "",
					w->stack[i]->name);
}

/* Check every hard requirement is provided; name the chain when not. */
static int check_requires(struct walk *w, struct fibril_module *m)
{
	if (m->mark == 1)
		return 0; /* already on the stack: cycles are reported by the sort */
	if (m->mark == 2)
		return 0;
	m->mark = 1;
	w->stack[w->depth++] = m;
	for (const char *const *r = m->desc.requires; r && *r; r++) {
		if (provides(m, *r))
			continue;
		struct fibril_module *p = graph_provider(*r);
		if (!p) {
			char chain[ERRBUF_LEN];
			stack_text(w, 0, chain, sizeof(chain));
			errbuf_set(w->err, "unresolved dependency: %s -> '%s' (no loaded module provides '%s'; "
				   "%s is in %s)", chain, *r, *r, m->name, m->path);
			return -1;
		}
		if (check_requires(w, p))
			return -1;
	}
	w->depth--;
	m->mark = 2;
	return 0;
}

static int topo_visit(struct walk *w, struct fibril_module *m)
{
	if (m->mark == 2)
		return 0;
	if (m->mark == 1) {
		size_t from = 0;
		while (from < w->depth && w->stack[from] != m)
			from++;
		char cycle[ERRBUF_LEN];
		stack_text(w, from, cycle, sizeof(cycle));
		errbuf_set(w->err, "dependency cycle: %s -> %s", cycle, m->name);
		return -1;
	}
	m->mark = 1;
	w->stack[w->depth++] = m;
	for (size_t i = 0; i < m->ndeps; i++)
		if (topo_visit(w, m->deps[i]))
			return -1;
	w->depth--;
	m->mark = 2;
	m->order = (int)w->norder;
	w->order[w->norder++] = m;
	return 0;
}

static int by_module_name(const void *a, const void *b)
{
	return strcmp((*(struct fibril_module *const *)a)->name,
		      (*(struct fibril_module *const *)b)->name);
}

int graph_resolve(struct module_set *set, char *err)
{
	graph_collect_capabilities(set);
	if (choose_providers(set, err))
		return -1;
	/* Drop the modules that were not chosen for a capability they offer. */
	for (size_t i = 0; i < set->n; i++) {
		struct fibril_module *m = set->mods[i];
		if (lost_a_choice(m)) {
			if (!g_ambiguities[0]) /* else the preview's warning says why */
				host_info("not starting module %s: [providers] chose another provider",
					  m->name);
			m->state = MODULE_STOPPED;
			m->order = -1;
		}
	}
	/* A loser is not started, so it provides nothing, not even the
	 * capabilities nobody competed for. */
	for (size_t c = 0; c < g_ncaps; c++)
		if (g_caps[c].chosen && g_caps[c].chosen->state == MODULE_STOPPED)
			g_caps[c].chosen = NULL;
	if (set->n > 1) /* no module at all (an agent package alone): mods may be NULL */
		qsort(set->mods, set->n, sizeof(*set->mods), by_module_name);
	for (size_t i = 0; i < set->n; i++) {
		struct fibril_module *m = set->mods[i];
		m->ndeps = 0;
		m->mark = 0;
		if (m->state == MODULE_STOPPED)
			continue;
		for (const char *const *r = m->desc.requires; r && *r; r++) {
			struct fibril_module *p = graph_provider(*r);
			if (p)
				add_dep(m, p);
		}
		for (const char *const *r = m->desc.wants; r && *r; r++) {
			struct fibril_module *p = graph_provider(*r);
			if (p)
				add_dep(m, p);
		}
	}
	struct walk w = {
		.stack = xcalloc(set->n + 1, sizeof(*w.stack)),
		.order = xcalloc(set->n + 1, sizeof(*w.order)),
		.err = err,
	};
	int rc = 0;
	for (size_t i = 0; i < set->n && !rc; i++)
		if (set->mods[i]->state != MODULE_STOPPED)
			rc = check_requires(&w, set->mods[i]);
	for (size_t i = 0; i < set->n; i++)
		set->mods[i]->mark = 0;
	w.depth = 0;
	for (size_t i = 0; i < set->n && !rc; i++)
		if (set->mods[i]->state != MODULE_STOPPED)
			rc = topo_visit(&w, set->mods[i]);
	free(w.stack);
	free(set->order);
	set->order = w.order;
	set->norder = rc ? 0 : w.norder;
	return rc;
}

void graph_print(const struct module_set *set, FILE *out, bool dot)
{
	if (dot) {
		fprintf(out, "digraph fibril {\n\trankdir=LR;\n\tnode [shape=box];\n");
		for (size_t i = 0; i < set->norder; i++) {
			const struct fibril_module *m = set->order[i];
			fprintf(out, "\t\"%s\" [label=\"%d. %s\"];\n", m->name, m->order + 1, m->name);
		}
		for (size_t i = 0; i < set->norder; i++) {
			const struct fibril_module *m = set->order[i];
			for (const char *const *r = m->desc.requires; r && *r; r++) {
				const struct fibril_module *p = graph_provider(*r);
				if (p && p != m)
					fprintf(out, "\t\"%s\" -> \"%s\" [label=\"%s\"];\n", m->name, p->name, *r);
			}
			for (const char *const *r = m->desc.wants; r && *r; r++) {
				const struct fibril_module *p = graph_provider(*r);
				if (p && p != m)
					fprintf(out, "\t\"%s\" -> \"%s\" [label=\"%s\", style=dashed];\n",
						m->name, p->name, *r);
			}
		}
		fprintf(out, "}\n");
		return;
	}
	fprintf(out, "start order (%zu modules):\n", set->norder);
	for (size_t i = 0; i < set->norder; i++) {
		const struct fibril_module *m = set->order[i];
		fprintf(out, "%3zu. %s", i + 1, m->name);
		if (m->ndeps) {
			fprintf(out, "  (after");
			for (size_t d = 0; d < m->ndeps; d++)
				fprintf(out, "%s %s", d ? "," : "", m->deps[d]->name);
			fprintf(out, ")");
		}
		fprintf(out, "\n");
	}
	for (size_t i = 0; i < set->n; i++)
		if (set->mods[i]->state == MODULE_STOPPED)
			fprintf(out, "not started: %s (another provider was chosen)\n", set->mods[i]->name);
}
