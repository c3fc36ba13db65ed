/* tests/fuzz/fuzz_cni_gc.c - fuzz target: the CNI GC's attachment list
 * (parse_attachments of cni/cmd_gc.c): the network configuration a runtime
 * sends with GC, read by netconf_parse and then its
 * cni.dev/valid-attachments list turned into owners and host veth names,
 * each looked up again as GC does. cmd_gc.c is compiled into this file (its
 * parser is static); its netlink and agent calls are never reached and are
 * stubbed below (abort), as is main.c's error record. */
#include "../../cni/cmd_gc.c"

#include "fuzz.h"

/* ---- main.c's error record -------------------------------------------------- */
static bool fuzz_error_is_set;
static char fuzz_error_version[32];

int cni_error(int code, const char *details, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	(void)code;
	(void)details;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap); /* formats every message the parser makes */
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

/* ---- never reached from parse_attachments ---------------------------------- */
struct nl_sock *nl_open(void)
{
	abort();
}

void cni_nl_close(struct nl_sock *sk)
{
	(void)sk;
	abort();
}

char **host_veth_list(struct nl_sock *sk)
{
	(void)sk;
	abort();
}

int link_delete(struct nl_sock *sk, const char *name)
{
	(void)sk, (void)name;
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
	struct attachments valid;

	cni_error_clear();
	memset(&conf, 0, sizeof(conf));
	if (netconf_parse(text, size, &conf) == 0) {
		cni_error_clear();
		if (parse_attachments(&conf, &valid) == 0) {
			/* every entry is found again, as GC looks them up */
			for (size_t i = 0; i < valid.n; i++)
				if (!listed(valid.owners, valid.n, valid.owners[i]) ||
				    !listed(valid.hosts, valid.n, valid.hosts[i]) ||
				    !is_fibril_host_ifname(valid.hosts[i]))
					abort();
			is_cni_owner(text);
		}
		attachments_free(&valid); /* as cmd_gc does, on success and failure */
	}
	netconf_free(&conf);
	cni_error_clear();
	free(text);
	return 0;
}
