/* host/module.c - the module handle as modules see it: private data, name,
 * error text, asynchronous start completion, the agent's paths. */
#include "internal.h"

#include <string.h>

static const char *const state_names[] = {
	[MODULE_LOADED] = "loaded",     [MODULE_INITIALIZED] = "initialized",
	[MODULE_STARTING] = "starting", [MODULE_RUNNING] = "running",
	[MODULE_STOPPING] = "stopping", [MODULE_STOPPED] = "stopped",
	[MODULE_FAILED] = "failed",
};

const char *module_state_name(enum module_state s)
{
	return (unsigned)s < sizeof(state_names) / sizeof(state_names[0]) ? state_names[s] : "?";
}

void fibril_module_set_data(struct fibril_module *m, void *data)
{
	if (m)
		m->data = data;
}

void *fibril_module_data(const struct fibril_module *m)
{
	return m ? m->data : NULL;
}

const char *fibril_module_name(const struct fibril_module *m)
{
	return m ? m->name : "agent";
}

void fibril_module_set_error(struct fibril_module *m, const char *fmt, ...)
{
	if (!m)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m->error, sizeof(m->error), fmt, ap);
	va_end(ap);
}

void fibril_module_start_done(struct fibril_module *m, int rc)
{
	if (!m || !m->start_pending)
		return;
	m->start_pending = false;
	m->start_rc = rc > 0 ? -rc : rc;
}

const char *fibril_state_dir(void)
{
	return config_value("agent", "state-dir");
}

const char *fibril_run_dir(void)
{
	return config_value("agent", "run-dir");
}
