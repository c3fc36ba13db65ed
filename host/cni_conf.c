/* host/cni_conf.c - the CNI network configuration written once the agent is
 * ready ([agent] write-cni-conf-when-ready, Cilium's option of the same
 * name). A container runtime picks the first conflist in its net.d
 * directory and kubelet reports the node Ready once one is there: written
 * before the agent can serve CNI ADD, pods scheduled in that window fail.
 * So the DaemonSet no longer writes it from an init container; the agent
 * writes it (atomically: temp file, fsync, rename, fsync the directory)
 * right after READY, from [agent] read-cni-conf or, when that is empty, a
 * conflist naming this agent's socket. The source is read and checked
 * before anything starts: a bad one is refused with its path. */
#include "internal.h"

#include <errno.h>
#include <json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *g_cni_conf; /* the bytes to write; NULL: off */

/* The conflist used when no read-cni-conf is given. */
static char *default_conflist(const char *socket_path)
{
	struct json_object *plugin = json_object_new_object();
	json_object_object_add(plugin, "type", json_object_new_string("fibril-cni"));
	json_object_object_add(plugin, "agent-socket", json_object_new_string(socket_path));
	struct json_object *plugins = json_object_new_array();
	json_object_array_add(plugins, plugin);
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "cniVersion", json_object_new_string("1.0.0"));
	json_object_object_add(o, "name", json_object_new_string("fibril"));
	json_object_object_add(o, "plugins", plugins);
	const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
								  JSON_C_TO_STRING_NOSLASHESCAPE);
	size_t len = strlen(text);
	char *out = xcalloc(1, len + 2);
	memcpy(out, text, len);
	out[len] = '\n';
	json_object_put(o);
	return out;
}

static char *read_small_file(const char *path, size_t max, char *err)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		errbuf_set(err, "[agent] read-cni-conf %s: %s", path, strerror(errno));
		return NULL;
	}
	char *buf = xcalloc(1, max + 1);
	size_t n = fread(buf, 1, max + 1, f);
	bool bad = ferror(f);
	fclose(f);
	if (bad || n > max) {
		errbuf_set(err, "[agent] read-cni-conf %s: %s", path,
			   bad ? "cannot be read" : "larger than 64 KiB");
		free(buf);
		return NULL;
	}
	return buf;
}

int cni_conf_prepare(char *err)
{
	free(g_cni_conf);
	g_cni_conf = NULL;
	const char *dest = config_value("agent", "write-cni-conf-when-ready");
	const char *src = config_value("agent", "read-cni-conf");
	if (!dest || !dest[0]) {
		if (src && src[0]) {
			errbuf_set(err, "[agent] read-cni-conf is set but write-cni-conf-when-ready is not "
					"(where should it be written?)");
			return -1;
		}
		return 0;
	}
	if (!src || !src[0]) {
		g_cni_conf = default_conflist(config_value("agent", "socket"));
		return 0;
	}
	char *text = read_small_file(src, 64 * 1024, err);
	if (!text)
		return -1;
	enum json_tokener_error jerr = json_tokener_success;
	struct json_object *o = json_tokener_parse_verbose(text, &jerr);
	const char *why = NULL;
	if (!o)
		why = json_tokener_error_desc(jerr);
	else if (!json_object_is_type(o, json_type_object))
		why = "not a JSON object";
	else if (!json_object_object_get_ex(o, "cniVersion", NULL))
		why = "no \"cniVersion\"";
	else if (!json_object_object_get_ex(o, "plugins", NULL) && !json_object_object_get_ex(o, "type", NULL))
		why = "neither \"plugins\" (a conflist) nor \"type\" (a single plugin)";
	json_object_put(o);
	if (why) {
		errbuf_set(err, "[agent] read-cni-conf %s: not a CNI network configuration: %s", src, why);
		free(text);
		return -1;
	}
	g_cni_conf = text;
	return 0;
}

int cni_conf_write(char *err)
{
	if (!g_cni_conf)
		return 0;
	const char *dest = config_value("agent", "write-cni-conf-when-ready");
	int rc = write_file_atomic(dest, g_cni_conf, strlen(g_cni_conf), 0644);
	if (rc) {
		errbuf_set(err, "[agent] write-cni-conf-when-ready %s: %s", dest, strerror(-rc));
		return -1;
	}
	host_info("CNI configuration written to %s", dest);
	return 0;
}

void cni_conf_reset(void)
{
	free(g_cni_conf);
	g_cni_conf = NULL;
}
