/* host/start_status.c - the agent's start, told to the CLI before the API
 * listens. The API socket opens only once every module has started (clients
 * and the CNI plugin take "the socket answers" as "the agent serves"), so
 * while a module waits (for etcd, say, up to its start timeout) there is no
 * socket to ask. The agent keeps "<socket>.starting" beside it instead: a
 * small JSON object saying which pid is starting, since when and what it
 * waits for, written atomically when a start has waited 2 s and rewritten
 * as the wait goes on (a fast start never writes it), removed once the API
 * listens, and left behind with the cause when the start fails, so
 * `fibril status` can say "starting: waiting for ..." or repeat why the
 * last start failed instead of "not running". */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static char g_path[4096];
static char g_since[40];

/* "2026-11-28T06:12:03Z" */
static void rfc3339_now(char *buf, size_t len)
{
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void write_status(const char *state, const char *key, const char *text)
{
	if (!g_path[0])
		return;
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "pid", json_object_new_int64((int64_t)getpid()));
	json_object_object_add(o, "state", json_object_new_string(state));
	json_object_object_add(o, "since", json_object_new_string(g_since));
	if (key && text)
		json_object_object_add(o, key, json_object_new_string(text));
	size_t len = 0;
	const char *s = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	if (write_file_atomic(g_path, s, len, 0644))
		host_debug("cannot write %s: %s", g_path, strerror(errno));
	json_object_put(o);
}

void start_status_begin(const char *socket_path)
{
	g_path[0] = '\0';
	if (!socket_path || !*socket_path ||
	    (size_t)snprintf(g_path, sizeof(g_path), "%s.starting", socket_path) >= sizeof(g_path)) {
		g_path[0] = '\0';
		return;
	}
	rfc3339_now(g_since, sizeof(g_since));
	/* a fast start never writes (no disk work on the restart path): the
	 * file appears with the first wait report, 2 s in; an older start's
	 * leftover must not speak for this one */
	if (unlink(g_path) && errno != ENOENT)
		host_debug("cannot remove %s: %s", g_path, strerror(errno));
}

void start_status_waiting(const char *what)
{
	write_status("starting", "waiting_for", what);
}

void start_status_failed(const char *cause)
{
	write_status("failed", "error", cause);
	g_path[0] = '\0';
}

void start_status_done(void)
{
	if (g_path[0] && unlink(g_path) && errno != ENOENT)
		host_debug("cannot remove %s: %s", g_path, strerror(errno));
	g_path[0] = '\0';
}
