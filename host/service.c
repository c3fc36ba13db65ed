/* host/service.c - the capability registry: modules provide function tables
 * under capability names; consumers look up the provider the graph chose. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct service_entry {
	char *capability;
	struct fibril_module *owner;
	const struct fibril_service_header *table;
	void *ctx;
	struct service_entry *next;
};

static struct service_entry *g_services;

static bool list_has(const char *const *list, const char *name)
{
	for (; list && *list; list++)
		if (strcmp(*list, name) == 0)
			return true;
	return false;
}

int fibril_service_provide(struct fibril_module *m, const char *capability,
			   const struct fibril_service_header *table, void *ctx)
{
	if (!capability || !table || table->sz < sizeof(*table))
		return -EINVAL;
	if (m && !list_has(m->desc.provides, capability)) {
		fibril_error(m, "provides service '%s' not declared in its descriptor's provides",
			     capability);
		return -EPERM;
	}
	for (struct service_entry *e = g_services; e; e = e->next)
		if (e->owner == m && strcmp(e->capability, capability) == 0)
			return -EEXIST;
	struct service_entry *e = xcalloc(1, sizeof(*e));
	e->capability = xstrdup(capability);
	e->owner = m;
	e->table = table;
	e->ctx = ctx;
	e->next = g_services;
	g_services = e;
	return 0;
}

const struct fibril_service_header *fibril_service_lookup(struct fibril_module *m,
							  const char *capability,
							  uint32_t min_version, void **ctx)
{
	if (!capability) {
		errno = EINVAL;
		return NULL;
	}
	if (m && !list_has(m->desc.requires, capability) && !list_has(m->desc.wants, capability)) {
		fibril_error(m, "looks up '%s' without listing it in requires or wants", capability);
		errno = EPERM;
		return NULL;
	}
	struct fibril_module *chosen = graph_provider(capability);
	for (struct service_entry *e = g_services; e; e = e->next) {
		if (strcmp(e->capability, capability) != 0)
			continue;
		if (chosen && e->owner != chosen)
			continue;
		if (e->table->version < min_version) {
			errno = EPROTO;
			return NULL;
		}
		if (ctx)
			*ctx = e->ctx;
		return e->table;
	}
	errno = ENOENT;
	return NULL;
}

void service_release_owner(struct fibril_module *owner)
{
	struct service_entry **pp = &g_services;
	while (*pp) {
		struct service_entry *e = *pp;
		if (e->owner == owner) {
			*pp = e->next;
			free(e->capability);
			free(e);
			continue;
		}
		pp = &e->next;
	}
}

void service_fini(void)
{
	while (g_services) {
		struct service_entry *e = g_services;
		g_services = e->next;
		free(e->capability);
		free(e);
	}
}
