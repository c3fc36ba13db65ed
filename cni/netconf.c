/* cni/netconf.c - the network configuration fibril-cni reads on stdin
 * (name, cniVersion / cniVersions, agent-socket, mtu, dns, ipam-family,
 * prevResult, runtimeConfig.bandwidth.egressRate), the CNI version table,
 * and the checks of the environment: container ID, interface name,
 * CNI_ARGS, and the names derived from them (IPAM owner, host veth name). */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "fibril_cni.h"

const char *const cni_version_names[CNI_NVERSIONS] = {"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"};

int cni_version_parse(const char *s)
{
	for (int i = 0; i < CNI_NVERSIONS; i++)
		if (strcmp(s, cni_version_names[i]) == 0)
			return i;
	return -1;
}

const char *json_str(struct json_object *o, const char *key)
{
	struct json_object *v;
	if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

void free_strv(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

static int invalid(const char *field, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int invalid(const char *field, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return cni_error(CNI_ERR_INVALID_CONFIG, field, "invalid network configuration: %s: %s", field, msg);
}

static const char *supported_list(void)
{
	static char buf[64];
	if (!buf[0])
		for (int i = 0; i < CNI_NVERSIONS; i++)
			snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%s%s", i ? ", " : "",
				 cni_version_names[i]);
	return buf;
}

/* cniVersion, or the highest supported of cniVersions. */
static int parse_version(struct netconf *conf)
{
	struct json_object *v, *list;
	if (json_object_object_get_ex(conf->root, "cniVersion", &v)) {
		if (!json_object_is_type(v, json_type_string))
			return invalid("cniVersion", "expected a string such as \"1.0.0\"");
		const char *s = json_object_get_string(v);
		cni_set_error_version(s);
		conf->version = cni_version_parse(s);
		if (conf->version < 0)
			return cni_error(CNI_ERR_INCOMPATIBLE_VERSION, "cniVersion",
					 "incompatible CNI version %s (fibril-cni supports %s)", s, supported_list());
		conf->version_name = cni_version_names[conf->version];
		return 0;
	}
	if (!json_object_object_get_ex(conf->root, "cniVersions", &list))
		return invalid("cniVersion", "is required");
	if (!json_object_is_type(list, json_type_array))
		return invalid("cniVersions", "expected a list of version strings");
	int best = -1;
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		struct json_object *e = json_object_array_get_idx(list, i);
		if (!json_object_is_type(e, json_type_string))
			return invalid("cniVersions", "expected a list of version strings");
		int idx = cni_version_parse(json_object_get_string(e));
		if (idx > best)
			best = idx;
	}
	if (best < 0)
		return cni_error(CNI_ERR_INCOMPATIBLE_VERSION, "cniVersions",
				 "none of the versions in cniVersions is supported (fibril-cni supports %s)",
				 supported_list());
	conf->version = best;
	conf->version_name = cni_version_names[best];
	cni_set_error_version(conf->version_name);
	return 0;
}

static bool valid_network_name(const char *s)
{
	if (!*s || !isalnum((unsigned char)*s))
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_' && *s != '.' && *s != '-')
			return false;
	return true;
}

static bool is_ip(const char *s)
{
	unsigned char buf[16];
	return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

static int check_string_list(struct json_object *dns, const char *key, const char *field, bool ips)
{
	struct json_object *v;
	if (!json_object_object_get_ex(dns, key, &v))
		return 0;
	if (!json_object_is_type(v, json_type_array))
		return invalid(field, "expected a list of strings");
	for (size_t i = 0; i < json_object_array_length(v); i++) {
		struct json_object *e = json_object_array_get_idx(v, i);
		if (!json_object_is_type(e, json_type_string))
			return invalid(field, "expected a list of strings");
		if (ips && !is_ip(json_object_get_string(e)))
			return invalid(field, "'%s' is not an IP address", json_object_get_string(e));
	}
	return 0;
}

static int parse_dns(struct netconf *conf)
{
	struct json_object *dns, *v;
	if (!json_object_object_get_ex(conf->root, "dns", &dns) || json_object_is_type(dns, json_type_null))
		return 0;
	if (!json_object_is_type(dns, json_type_object))
		return invalid("dns", "expected an object with nameservers, domain, search, options");
	if (check_string_list(dns, "nameservers", "dns.nameservers", true) ||
	    check_string_list(dns, "search", "dns.search", false) ||
	    check_string_list(dns, "options", "dns.options", false))
		return -1;
	if (json_object_object_get_ex(dns, "domain", &v) && !json_object_is_type(v, json_type_string))
		return invalid("dns.domain", "expected a string");
	conf->dns = dns;
	return 0;
}

int netconf_parse(const char *text, size_t len, struct netconf *conf)
{
	struct json_tokener *tok = json_tokener_new();
	conf->root = json_tokener_parse_ex(tok, text, (int)len);
	enum json_tokener_error jerr = json_tokener_get_error(tok);
#if JSON_C_VERSION_NUM >= ((0 << 16) | (15 << 8))
	size_t used = json_tokener_get_parse_end(tok);
#else
	size_t used = (size_t)tok->char_offset;
#endif
	json_tokener_free(tok);
	if (!conf->root || jerr != json_tokener_success) {
		json_object_put(conf->root);
		conf->root = NULL;
		const char *why = jerr == json_tokener_continue ? "unexpected end of the document"
								 : json_tokener_error_desc(jerr);
		if (!len)
			why = "it is empty";
		return cni_error(CNI_ERR_DECODE, why,
				 "cannot decode the network configuration on stdin: %s at byte %zu", why, used);
	}
	for (size_t i = used; i < len; i++)
		if (!isspace((unsigned char)text[i]))
			return cni_error(CNI_ERR_DECODE, "trailing data",
					 "cannot decode the network configuration on stdin: data after the JSON "
					 "object at byte %zu",
					 i);
	if (!json_object_is_type(conf->root, json_type_object))
		return cni_error(CNI_ERR_DECODE, NULL,
				 "cannot decode the network configuration on stdin: expected a JSON object");

	/* Take the version first: every later error names it. */
	if (parse_version(conf))
		return -1;

	struct json_object *v;
	if (!json_object_object_get_ex(conf->root, "name", &v))
		return invalid("name", "is required");
	if (!json_object_is_type(v, json_type_string) || !valid_network_name(json_object_get_string(v)))
		return invalid("name", "expected letters, digits, '_', '.' or '-', starting with a letter or "
				       "digit");
	conf->name = json_object_get_string(v);

	if (!json_object_object_get_ex(conf->root, "type", &v))
		return invalid("type", "is required");
	if (!json_object_is_type(v, json_type_string) || !*json_object_get_string(v))
		return invalid("type", "expected the plugin's name (\"fibril-cni\")");

	conf->socket = DEFAULT_AGENT_SOCKET;
	if (json_object_object_get_ex(conf->root, "agent-socket", &v)) {
		const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
		if (!s || s[0] != '/')
			return invalid("agent-socket", "expected an absolute path to the agent's socket");
		if (strlen(s) >= sizeof(((struct sockaddr_un *)0)->sun_path))
			return invalid("agent-socket", "path '%s' is too long for a unix socket", s);
		conf->socket = s;
	}

	conf->mtu = DEFAULT_MTU;
	if (json_object_object_get_ex(conf->root, "mtu", &v)) {
		int64_t mtu = json_object_get_int64(v);
		if (!json_object_is_type(v, json_type_int) || mtu < 68 || mtu > 65535)
			return invalid("mtu", "expected an integer from 68 to 65535, got %s",
				       json_object_to_json_string(v));
		conf->mtu = (int)mtu;
		conf->mtu_set = true;
	}

	conf->family = FAMILY_BOTH;
	if (json_object_object_get_ex(conf->root, "ipam-family", &v)) {
		const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
		if (strcmp(s, "ipv4") == 0)
			conf->family = FAMILY_IPV4;
		else if (strcmp(s, "ipv6") == 0)
			conf->family = FAMILY_IPV6;
		else if (strcmp(s, "both") == 0)
			conf->family = FAMILY_BOTH;
		else
			return invalid("ipam-family", "expected ipv4, ipv6 or both, got %s",
				       json_object_to_json_string(v));
	}
	if (conf->family == FAMILY_IPV6 && conf->mtu < 1280)
		return invalid("mtu", "IPv6 needs an MTU of at least 1280, got %s",
			       json_object_to_json_string(json_object_object_get(conf->root, "mtu")));

	if (parse_dns(conf))
		return -1;

	/* Only noted here (DEL must take any configuration); ADD refuses it. */
	struct json_object *rc, *bw;
	if (json_object_object_get_ex(conf->root, "runtimeConfig", &rc) &&
	    json_object_object_get_ex(rc, "bandwidth", &bw) &&
	    json_object_object_get_ex(bw, "egressRate", &v) && !json_object_is_type(v, json_type_null))
		conf->egress_rate = v;

	if (json_object_object_get_ex(conf->root, "prevResult", &v) && !json_object_is_type(v, json_type_null)) {
		if (!json_object_is_type(v, json_type_object))
			return invalid("prevResult", "expected a CNI result object");
		struct json_object *list;
		if ((json_object_object_get_ex(v, "interfaces", &list) &&
		     !json_object_is_type(list, json_type_array)) ||
		    (json_object_object_get_ex(v, "ips", &list) && !json_object_is_type(list, json_type_array)) ||
		    (json_object_object_get_ex(v, "routes", &list) && !json_object_is_type(list, json_type_array)))
			return invalid("prevResult", "interfaces, ips and routes must be lists");
		conf->prev_result = v;
	}
	return 0;
}

void netconf_free(struct netconf *conf)
{
	json_object_put(conf->root);
	memset(conf, 0, sizeof(*conf));
}

/* ---- the environment ---------------------------------------------------------- */

int env_validate_container_id(const char *id)
{
	if (!isalnum((unsigned char)id[0]))
		return cni_error(CNI_ERR_BAD_ENV, "CNI_CONTAINERID",
				 "CNI_CONTAINERID '%s' must start with a letter or digit", id);
	for (const char *p = id; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.' && *p != '-')
			return cni_error(CNI_ERR_BAD_ENV, "CNI_CONTAINERID",
					 "CNI_CONTAINERID '%s' may only hold letters, digits, '_', '.' and '-'",
					 id);
	return 0;
}

/* ADD and CHECK: the ID fits an endpoint (DEL takes any length, so that a
 * runtime can always finish tearing a pod down). */
int env_check_container_id_len(const char *id)
{
	if (strlen(id) > FIBRIL_ENDPOINT_CONTAINER_ID_MAX)
		return cni_error(CNI_ERR_BAD_ENV, "CNI_CONTAINERID",
				 "CNI_CONTAINERID is %zu characters long, at most %d are supported",
				 strlen(id), FIBRIL_ENDPOINT_CONTAINER_ID_MAX);
	return 0;
}

int env_validate_ifname(const char *name)
{
	if (strlen(name) > 15)
		return cni_error(CNI_ERR_BAD_ENV, "CNI_IFNAME",
				 "CNI_IFNAME '%s' is longer than 15 characters", name);
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return cni_error(CNI_ERR_BAD_ENV, "CNI_IFNAME", "CNI_IFNAME '%s' is not a valid name", name);
	for (const char *p = name; *p; p++)
		if (*p == '/' || *p == ':' || isspace((unsigned char)*p) || !isprint((unsigned char)*p))
			return cni_error(CNI_ERR_BAD_ENV, "CNI_IFNAME",
					 "CNI_IFNAME '%s' must not hold '/', ':', spaces or control characters",
					 name);
	return 0;
}

int env_parse_args(struct cni_env *env)
{
	if (!env->args)
		return 0;
	char *copy = strdup(env->args), *save = NULL;
	if (!copy)
		return cni_error(CNI_ERR_IO, NULL, "out of memory");
	int rc = 0;
	for (char *kv = strtok_r(copy, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq || eq == kv) {
			rc = cni_error(CNI_ERR_BAD_ENV, "CNI_ARGS", "CNI_ARGS: '%s' is not KEY=VALUE", kv);
			break;
		}
		*eq = '\0';
		char *dst = NULL;
		if (strcmp(kv, "K8S_POD_NAMESPACE") == 0)
			dst = env->pod_namespace;
		else if (strcmp(kv, "K8S_POD_NAME") == 0)
			dst = env->pod_name;
		if (!dst)
			continue;
		if (strlen(eq + 1) >= sizeof(env->pod_name)) {
			rc = cni_error(CNI_ERR_BAD_ENV, "CNI_ARGS", "CNI_ARGS: %s is longer than 253 characters",
				       kv);
			break;
		}
		snprintf(dst, sizeof(env->pod_name), "%s", eq + 1);
	}
	free(copy);
	return rc;
}

/* FNV-1a 64 of "CID/IFNAME", folded to 48 bits: 12 hex digits. */
static uint64_t attachment_hash(const char *container_id, const char *ifname)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	const char *parts[3] = {container_id, "/", ifname};
	for (int i = 0; i < 3; i++)
		for (const unsigned char *p = (const unsigned char *)parts[i]; *p; p++) {
			h ^= *p;
			h *= 0x100000001b3ULL;
		}
	return (h ^ (h >> 48)) & 0xffffffffffffULL;
}

void host_ifname_for(const char *container_id, const char *ifname, char out[16])
{
	snprintf(out, 16, "lxc%012llx", (unsigned long long)attachment_hash(container_id, ifname));
}

bool is_fibril_host_ifname(const char *name)
{
	if (strncmp(name, "lxc", 3) != 0 || strlen(name) != 15)
		return false;
	for (const char *p = name + 3; *p; p++)
		if (!isxdigit((unsigned char)*p) || isupper((unsigned char)*p))
			return false;
	return true;
}

void env_derive_names(struct cni_env *env)
{
	snprintf(env->owner, sizeof(env->owner), "%s/%s", env->container_id, env->ifname);
	host_ifname_for(env->container_id, env->ifname, env->host_ifname);
	snprintf(env->tmp_ifname, sizeof(env->tmp_ifname), "tmp%s", env->host_ifname + 3);
}
