/* cni/main.c - fibril-cni's entry point: reads the CNI environment and the
 * network configuration on stdin, checks what the command needs, runs
 * ADD/DEL/CHECK/GC/STATUS/VERSION and prints the result, or the CNI error
 * object {"cniVersion","code","msg","details"} on stdout with exit status 1. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fibril_cni.h"

#define MAX_STDIN ((size_t)4 << 20)

static struct {
	bool set;
	int code;
	char msg[1024];
	char details[512];
} g_error;

static char g_error_version[32];

int cni_error(int code, const char *details, const char *fmt, ...)
{
	if (g_error.set)
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g_error.msg, sizeof(g_error.msg), fmt, ap);
	va_end(ap);
	snprintf(g_error.details, sizeof(g_error.details), "%s", details ? details : "");
	g_error.code = code;
	g_error.set = true;
	return -1;
}

bool cni_error_set(void)
{
	return g_error.set;
}

const char *cni_error_msg(void)
{
	return g_error.set ? g_error.msg : "";
}

void cni_error_clear(void)
{
	g_error.set = false;
}

const char *cni_error_version(void)
{
	return g_error_version[0] ? g_error_version : cni_version_names[CNI_V110];
}

void cni_set_error_version(const char *v)
{
	snprintf(g_error_version, sizeof(g_error_version), "%s", v ? v : "");
}

static int print_error(void)
{
	if (!g_error.set)
		cni_error(FCNI_ERR_LINK, NULL, "failed without a reason (a bug in fibril-cni)");
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "cniVersion", json_object_new_string(cni_error_version()));
	json_object_object_add(o, "code", json_object_new_int(g_error.code));
	json_object_object_add(o, "msg", json_object_new_string(g_error.msg));
	if (g_error.details[0])
		json_object_object_add(o, "details", json_object_new_string(g_error.details));
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
								  JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
	/* Also a line on stderr for whoever runs the plugin by hand. */
	fprintf(stderr, "fibril-cni: %s (code %d)\n", g_error.msg, g_error.code);
	fflush(stdout);
	return 1;
}

/* Reads all of stdin; NULL with the error set. */
static char *read_stdin(size_t *len)
{
	size_t cap = 8192, n = 0;
	char *buf = malloc(cap);
	if (!buf) {
		cni_error(CNI_ERR_IO, NULL, "out of memory reading stdin");
		return NULL;
	}
	for (;;) {
		if (n + 1 >= cap) {
			if (cap >= MAX_STDIN) {
				free(buf);
				cni_error(CNI_ERR_DECODE, NULL, "network configuration on stdin is larger than %zu bytes",
					  MAX_STDIN);
				return NULL;
			}
			cap *= 2;
			char *nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				cni_error(CNI_ERR_IO, NULL, "out of memory reading stdin");
				return NULL;
			}
			buf = nb;
		}
		ssize_t r = read(STDIN_FILENO, buf + n, cap - n - 1);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			free(buf);
			cni_error(CNI_ERR_IO, NULL, "cannot read the network configuration from stdin: %s",
				  strerror(e));
			return NULL;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

/* VERSION: answer in the version asked for on stdin when we know it. */
static int cmd_version(void)
{
	size_t len = 0;
	char *text = read_stdin(&len);
	const char *answer = cni_version_names[CNI_V110];
	struct json_object *in = NULL;
	if (text && len) {
		in = json_tokener_parse(text);
		const char *asked = in ? json_str(in, "cniVersion") : NULL;
		if (asked && cni_version_parse(asked) >= 0)
			answer = asked;
	}
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "cniVersion", json_object_new_string(answer));
	struct json_object *list = json_object_new_array();
	for (int i = 0; i < CNI_NVERSIONS; i++)
		json_object_array_add(list, json_object_new_string(cni_version_names[i]));
	json_object_object_add(o, "supportedVersions", list);
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	json_object_put(in);
	free(text);
	return 0;
}

/* getenv, treating an empty value as unset. */
static const char *env_get(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

static int require_env(const char *value, const char *name, const char *command)
{
	if (value)
		return 0;
	return cni_error(CNI_ERR_BAD_ENV, name, "%s is required for %s but is not set", name, command);
}

static const char usage[] =
	"fibril-cni: the CNI plugin of fibril (CNI spec 0.3.0 to 1.1.0).\n"
	"It is run by a container runtime with CNI_COMMAND (ADD, DEL, CHECK, GC, STATUS\n"
	"or VERSION), CNI_CONTAINERID, CNI_NETNS and CNI_IFNAME in the environment and\n"
	"the network configuration on stdin; see cni/README.md.\n";

int main(void)
{
	struct cni_env env = {0};
	struct netconf conf = {0};
	int rc = -1;

	env.command = env_get("CNI_COMMAND");
	if (!env.command) {
		fputs(usage, stderr);
		cni_error(CNI_ERR_BAD_ENV, "CNI_COMMAND", "CNI_COMMAND is not set");
		return print_error();
	}
	if (strcmp(env.command, "VERSION") == 0)
		return cmd_version() == 0 ? 0 : print_error();

	/* The configuration first, so that every error, even one about the
	 * environment, carries the configuration's cniVersion. */
	size_t len = 0;
	char *text = read_stdin(&len);
	if (!text)
		return print_error();
	struct json_object *peek = json_tokener_parse(text);
	struct json_object *ver;
	if (peek && json_object_object_get_ex(peek, "cniVersion", &ver) &&
	    json_object_is_type(ver, json_type_string))
		cni_set_error_version(json_object_get_string(ver));
	json_object_put(peek);

	bool add = strcmp(env.command, "ADD") == 0, del = strcmp(env.command, "DEL") == 0,
	     check = strcmp(env.command, "CHECK") == 0, gc = strcmp(env.command, "GC") == 0,
	     status = strcmp(env.command, "STATUS") == 0;
	if (!add && !del && !check && !gc && !status) {
		cni_error(CNI_ERR_BAD_ENV, "CNI_COMMAND",
			  "unknown CNI_COMMAND '%s' (expected ADD, DEL, CHECK, GC, STATUS or VERSION)",
			  env.command);
		free(text);
		return print_error();
	}

	env.container_id = env_get("CNI_CONTAINERID");
	env.netns = env_get("CNI_NETNS");
	env.ifname = env_get("CNI_IFNAME");
	env.args = env_get("CNI_ARGS");
	if (add || del || check) {
		if (require_env(env.container_id, "CNI_CONTAINERID", env.command) ||
		    ((add || check) && require_env(env.netns, "CNI_NETNS", env.command)) ||
		    require_env(env.ifname, "CNI_IFNAME", env.command) ||
		    env_validate_container_id(env.container_id) || env_validate_ifname(env.ifname) ||
		    (!del && env_check_container_id_len(env.container_id)) ||
		    env_parse_args(&env)) {
			free(text);
			return print_error();
		}
		env_derive_names(&env);
	}

	if (netconf_parse(text, len, &conf) < 0) {
		free(text);
		netconf_free(&conf);
		return print_error();
	}
	free(text);

	if (check && conf.version < CNI_V040) {
		cni_error(CNI_ERR_INCOMPATIBLE_VERSION, "cniVersion",
			  "CHECK needs cniVersion 0.4.0 or later, the configuration has %s", conf.version_name);
	} else if ((gc || status) && conf.version < CNI_V110) {
		cni_error(CNI_ERR_INCOMPATIBLE_VERSION, "cniVersion",
			  "%s needs cniVersion 1.1.0 or later, the configuration has %s", env.command,
			  conf.version_name);
	} else if (agent_open(conf.socket) == 0) {
		if (add)
			rc = cmd_add(&env, &conf);
		else if (del)
			rc = cmd_del(&env, &conf);
		else if (check)
			rc = cmd_check(&env, &conf);
		else if (gc)
			rc = cmd_gc(&conf);
		else
			rc = cmd_status(&conf);
		agent_close();
	}
	netconf_free(&conf);
	fflush(stdout);
	return rc == 0 ? 0 : print_error();
}
