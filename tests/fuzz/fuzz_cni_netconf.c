/* tests/fuzz/fuzz_cni_netconf.c - fuzz target: what fibril-cni reads from
 * outside: the network configuration on stdin (netconf_parse, with dns,
 * cniVersions and prevResult), the prevResult as CHECK reads it
 * (read_prev_result of cni/cmd_check.c), and the environment: CNI_ARGS,
 * CNI_CONTAINERID and CNI_IFNAME. The whole input goes to each parser.
 * cmd_check.c is compiled into this file (its parser is static); its
 * netlink and agent calls are never reached and are stubbed below, as is
 * main.c's error record. */
#include "../../cni/cmd_check.c"

#include "fuzz.h"

/* ---- main.c's error record -------------------------------------------------- */
static char fuzz_error_version[32];
static bool fuzz_error_is_set;

int cni_error(int code, const char *details, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	(void)code;
	(void)details;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap); /* formats every message the parsers make */
	va_end(ap);
	fuzz_error_is_set = true;
	return -1;
}

bool cni_error_set(void)
{
	return fuzz_error_is_set;
}

const char *cni_error_msg(void)
{
	return "";
}

void cni_error_clear(void)
{
	fuzz_error_is_set = false;
}

const char *cni_error_version(void)
{
	return fuzz_error_version;
}

void cni_set_error_version(const char *v)
{
	snprintf(fuzz_error_version, sizeof(fuzz_error_version), "%s", v ? v : "");
}

/* ---- never reached from read_prev_result ------------------------------------ */
int cni_link_lookup(struct nl_sock *sk, const char *name, struct link_info *info)
{
	(void)sk, (void)name, (void)info;
	abort();
}

int addr_present(struct nl_sock *sk, int ifindex, const char *addr, int prefix)
{
	(void)sk, (void)ifindex, (void)addr, (void)prefix;
	abort();
}

int route_present(struct nl_sock *sk, int ifindex, const char *dst, int prefix, const char *gw,
		  bool scope_link)
{
	(void)sk, (void)ifindex, (void)dst, (void)prefix, (void)gw, (void)scope_link;
	abort();
}

struct nl_sock *nl_open(void)
{
	abort();
}

int netns_open_path(const char *path)
{
	(void)path;
	abort();
}

void cni_nl_close(struct nl_sock *sk)
{
	(void)sk;
	abort();
}

struct nl_sock *nl_open_in(int ns_fd, const char *what)
{
	(void)ns_fd, (void)what;
	abort();
}

int agent_open(const char *socket_path)
{
	(void)socket_path;
	abort();
}

void agent_close(void)
{
	abort();
}

int agent_request(const char *method, const char *path, struct json_object *body,
		  struct agent_reply *reply)
{
	(void)method, (void)path, (void)body, (void)reply;
	abort();
}

void agent_reply_free(struct agent_reply *reply)
{
	(void)reply;
	abort();
}

char *agent_escape(const char *s)
{
	(void)s;
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	struct netconf conf;

	cni_error_clear();
	memset(&conf, 0, sizeof(conf));
	if (netconf_parse(text, size, &conf) == 0 && conf.prev_result) {
		struct cni_env env = {.command = "CHECK", .container_id = "c0ffee", .netns = "/run/netns/pod",
				      .ifname = "eth0"};
		struct expected_address addrs[MAX_CHECK_ADDRS];
		char mac[18];
		int naddrs;
		bool host_listed;

		env_derive_names(&env);
		read_prev_result(&env, &conf, mac, addrs, &naddrs, &host_listed);
	}
	netconf_free(&conf);

	/* the environment, each from the same text */
	struct cni_env env = {.command = "ADD", .args = text};
	cni_error_clear();
	env_parse_args(&env);
	cni_error_clear();
	if (env_validate_container_id(text) == 0) {
		cni_error_clear();
		if (env_validate_ifname("eth0") == 0) {
			env.container_id = text;
			env.ifname = "eth0";
			env_derive_names(&env);
		}
	}
	cni_error_clear();
	if (env_validate_ifname(text) == 0) {
		env.container_id = "c0ffee";
		env.ifname = text;
		env_derive_names(&env);
		is_fibril_host_ifname(env.host_ifname);
	}
	cni_error_clear();
	free(text);
	return 0;
}
