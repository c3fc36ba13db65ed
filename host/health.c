/* host/health.c - module health: OK / Degraded / Stopped with a message,
 * per module and per named sub-component; a module's level is its worst. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static const char *const level_names[] = {"ok", "degraded", "stopped"};

const char *health_level_name(enum fibril_health_level l)
{
	return (unsigned)l < 3 ? level_names[l] : "unknown";
}

static struct health_component *component_get(struct fibril_module *m, const char *name)
{
	for (struct health_component *c = m->health; c; c = c->next) {
		if ((!name && !c->name) || (name && c->name && strcmp(name, c->name) == 0))
			return c;
	}
	struct health_component *c = xcalloc(1, sizeof(*c));
	c->name = name ? xstrdup(name) : NULL;
	/* the module's own entry first, components after in report order */
	if (!name || !m->health) {
		c->next = m->health;
		m->health = c;
	} else {
		struct health_component *last = m->health;
		while (last->next)
			last = last->next;
		last->next = c;
	}
	return c;
}

void fibril_health_report(struct fibril_module *m, const char *component,
			  enum fibril_health_level level, const char *fmt, ...)
{
	if (!m)
		return;
	if ((unsigned)level > FIBRIL_HEALTH_STOPPED)
		level = FIBRIL_HEALTH_DEGRADED;
	struct health_component *c = component_get(m, component);
	enum fibril_health_level before = c->level;
	c->level = level;
	c->message[0] = '\0';
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->message, sizeof(c->message), fmt, ap);
		va_end(ap);
	}
	if (before != level)
		fibril_log(m, level == FIBRIL_HEALTH_OK ? FIBRIL_LOG_INFO : FIBRIL_LOG_WARN,
			   "health%s%s: %s -> %s%s%s", component ? " of " : "",
			   component ? component : "", health_level_name(before),
			   health_level_name(level), c->message[0] ? ": " : "", c->message);
}

enum fibril_health_level health_of(const struct fibril_module *m, const char **why)
{
	enum fibril_health_level worst = FIBRIL_HEALTH_OK;
	const struct health_component *worst_c = NULL;
	if (m->state == MODULE_FAILED || m->state == MODULE_STOPPED) {
		if (why)
			*why = m->error[0] ? m->error : module_state_name(m->state);
		return FIBRIL_HEALTH_STOPPED;
	}
	for (const struct health_component *c = m->health; c; c = c->next) {
		if (c->level > worst || !worst_c) {
			if (c->level > worst)
				worst = c->level;
			worst_c = c;
		}
	}
	if (why)
		*why = worst_c && worst != FIBRIL_HEALTH_OK ? worst_c->message : "";
	return worst;
}

struct json_object *health_to_json(const struct fibril_module *m)
{
	const char *why = "";
	enum fibril_health_level level = health_of(m, &why);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "level", json_object_new_string(health_level_name(level)));
	json_object_object_add(o, "message", json_object_new_string(why ? why : ""));
	struct json_object *comps = json_object_new_array();
	for (const struct health_component *c = m->health; c; c = c->next) {
		if (!c->name)
			continue;
		struct json_object *co = json_object_new_object();
		json_object_object_add(co, "name", json_object_new_string(c->name));
		json_object_object_add(co, "level", json_object_new_string(health_level_name(c->level)));
		json_object_object_add(co, "message", json_object_new_string(c->message));
		json_object_array_add(comps, co);
	}
	json_object_object_add(o, "components", comps);
	return o;
}

void health_free(struct fibril_module *m)
{
	while (m->health) {
		struct health_component *c = m->health;
		m->health = c->next;
		free(c->name);
		free(c);
	}
}
