/* cni/fibril_cni.h - shared declarations of the fibril-cni plugin: the CNI
 * error codes and the error being reported, the parsed environment and
 * network configuration, the agent client (HTTP over the agent's unix
 * socket), the netlink helpers (links, addresses, routes, namespaces) and
 * the commands. */
#ifndef FIBRIL_CNI_H
#define FIBRIL_CNI_H

#include <stdbool.h>
#include <stddef.h>

#include <json.h>

#include <fibril/endpoint.h> /* FIBRIL_ENDPOINT_CONTAINER_ID_MAX */

/* ---- errors --------------------------------------------------------------- */

/* Well-known CNI error codes (spec 1.1.0, "Error" section). */
enum {
	CNI_ERR_INCOMPATIBLE_VERSION = 1,
	CNI_ERR_UNSUPPORTED_FIELD = 2,
	CNI_ERR_UNKNOWN_CONTAINER = 3,
	CNI_ERR_BAD_ENV = 4,
	CNI_ERR_IO = 5,
	CNI_ERR_DECODE = 6,
	CNI_ERR_INVALID_CONFIG = 7,
	CNI_ERR_TRY_AGAIN = 11,
	CNI_ERR_STATUS_UNAVAILABLE = 50,
	CNI_ERR_STATUS_LIMITED = 51,
};

/* fibril-cni's own codes (>= 100), documented in cni/README.md. */
enum {
	FCNI_ERR_LINK = 100,	      /* a netlink or sysctl step failed */
	FCNI_ERR_IFNAME_EXISTS = 101, /* CNI_IFNAME already exists in the pod */
	FCNI_ERR_AGENT = 102,	      /* the agent answered with an error */
	FCNI_ERR_NO_ADDRESS = 103,    /* IPAM has no address to give */
	FCNI_ERR_CHECK = 104,	      /* CHECK found something missing */
	FCNI_ERR_GC = 105,	      /* GC could not remove everything */
	FCNI_ERR_PORT_CONFLICT = 106, /* a hostPort (portMappings) another pod holds */
};

/* Set the error to report (the first one set wins); returns -1. */
int cni_error(int code, const char *details, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool cni_error_set(void);
const char *cni_error_msg(void);
/* Forget the error set so far (to report another one instead). */
void cni_error_clear(void);

/* ---- versions --------------------------------------------------------------- */

enum cni_version { CNI_V030, CNI_V031, CNI_V040, CNI_V100, CNI_V110, CNI_NVERSIONS };
extern const char *const cni_version_names[CNI_NVERSIONS];
int cni_version_parse(const char *s); /* index, or -1 */

/* ---- environment and configuration --------------------------------------- */

enum ipam_family { FAMILY_IPV4 = 1, FAMILY_IPV6 = 2, FAMILY_BOTH = 3 };

struct cni_env {
	const char *command;
	const char *container_id;
	const char *netns;
	const char *ifname;
	const char *args;
	char pod_namespace[254];
	char pod_name[254];
	char owner[256];     /* CONTAINERID/IFNAME: the IPAM owner */
	char host_ifname[16]; /* lxc<12 hex> */
	char tmp_ifname[16];  /* tmp<12 hex>: the peer before it is renamed */
};

struct netconf {
	struct json_object *root; /* the whole stdin document (owned) */
	const char *name;
	int version; /* enum cni_version */
	const char *version_name;
	const char *socket;
	int mtu;     /* of both veth ends and the pod's routes */
	bool mtu_set; /* "mtu" in the configuration; else the agent's pod MTU */
	struct json_object *dns;	       /* validated, or NULL */
	enum ipam_family family;
	struct json_object *prev_result;       /* or NULL */
	struct json_object *egress_rate;       /* runtimeConfig.bandwidth.egressRate, or NULL */
};

#define DEFAULT_AGENT_SOCKET "/run/fibril/fibril.sock"
#define DEFAULT_MTU 1500

/* The version string to put in an error: the configuration's, when known. */
const char *cni_error_version(void);
void cni_set_error_version(const char *v);

int netconf_parse(const char *text, size_t len, struct netconf *conf);
void netconf_free(struct netconf *conf);
/* K8S_POD_NAMESPACE and K8S_POD_NAME from CNI_ARGS (others ignored). */
int env_parse_args(struct cni_env *env);
int env_validate_container_id(const char *id);
int env_check_container_id_len(const char *id);
/* Opens CNI_NETNS, which must be a network namespace (else CNI error 3). */
int netns_open_path(const char *path);
int env_validate_ifname(const char *name);
/* Fill owner, host_ifname and tmp_ifname from the container ID and ifname. */
void env_derive_names(struct cni_env *env);
/* lxc<12 hex> for an attachment (the same hash as env_derive_names). */
void host_ifname_for(const char *container_id, const char *ifname, char out[16]);
bool is_fibril_host_ifname(const char *name);

/* ---- the agent --------------------------------------------------------------- */

struct agent_reply {
	long status;		   /* HTTP status */
	struct json_object *json;  /* parsed body, or NULL */
	char error[512];	   /* the agent's "error" text, when it sent one */
};

int agent_open(const char *socket_path);
void agent_close(void);
/* Sends METHOD PATH (already escaped) with an optional JSON body. Returns 0
 * when the agent answered (any status), -1 with CNI error 11 when it could
 * not be reached. The caller frees reply->json. */
int agent_request(const char *method, const char *path, struct json_object *body,
		  struct agent_reply *reply);
void agent_reply_free(struct agent_reply *reply);
/* Percent-escape a path segment or query value (':' kept). */
char *agent_escape(const char *s);

/* ---- netlink ------------------------------------------------------------------- */

struct nl_sock;

struct link_info {
	int ifindex;
	char mac[18];
	bool up;
	char kind[16];
	int mtu;
};

struct nl_sock *nl_open(void);
void cni_nl_close(struct nl_sock *sk);
int netns_open_current(void);
int netns_switch(int fd, const char *what); /* setns(fd, CLONE_NEWNET) */
/* A netlink socket bound to the network namespace ns_fd (this process
 * comes back to its own namespace); NULL after reporting the error. */
struct nl_sock *nl_open_in(int ns_fd, const char *what);

/* 1 and the info when NAME exists, 0 when not, -1 on error. */
int cni_link_lookup(struct nl_sock *sk, const char *name, struct link_info *info);
/* The pair HOST/PEER; PEER is made inside PEER_NETNS_FD when >= 0 (the
 * kernel creates it there at once: moving a link later costs an RCU grace
 * period, ~20 ms). */
int veth_create(struct nl_sock *sk, const char *host, const char *peer, int mtu, int peer_netns_fd);
/* Rename FROM to TO and bring it up, in one request (FROM must be down). */
int link_rename_up(struct nl_sock *sk, const char *from, const char *to);
/* 1 deleted, 0 not there, -1 error. */
int link_delete(struct nl_sock *sk, const char *name);
/* link_delete, skipping the netlink request when NAME does not exist; the
 * caller must be in SK's network namespace. */
int link_delete_present(struct nl_sock *sk, const char *name);
/* ADDR "10.0.3.7" with the host prefix (/32 or /128). */
int addr_add_host(struct nl_sock *sk, int ifindex, const char *addr);
/* mtu > 0: the route's MTU metric */
int route_add_gateway_link(struct nl_sock *sk, int ifindex, const char *gateway, int mtu);
int route_add_default(struct nl_sock *sk, int ifindex, const char *gateway, int mtu);
/* 1 when the address ADDR/PREFIX is on IFINDEX, 0 when not, -1 on error. */
int addr_present(struct nl_sock *sk, int ifindex, const char *addr, int prefix);
/* 1 when a route DST/PREFIX [via GW] [scope link] out of IFINDEX exists. */
int route_present(struct nl_sock *sk, int ifindex, const char *dst, int prefix, const char *gw,
		  bool scope_link);
/* Every veth named lxc<12 hex> in the current namespace (NULL-terminated). */
char **host_veth_list(struct nl_sock *sk);
/* The name of every link in SK's namespace (NULL-terminated; NULL after
 * reporting the error). */
char **link_name_list(struct nl_sock *sk);
int sysctl_write(const char *path, const char *value);

/* ---- the commands ------------------------------------------------------------- */

int cmd_add(struct cni_env *env, struct netconf *conf);
int cmd_del(struct cni_env *env, struct netconf *conf);
int cmd_check(struct cni_env *env, struct netconf *conf);
int cmd_gc(struct netconf *conf);
int cmd_status(struct netconf *conf);

/* portmap.c: the portMappings capability (hostPort). portmap_parse: the
 * mappings of runtimeConfig when the configuration declares the capability,
 * checked, in the agent's form (*out NULL: none); -1 with the CNI error. */
int portmap_parse(const struct netconf *conf, struct json_object **out);
/* PUT /v1/hostport/CID:IFNAME: 0, or -1 with the CNI error (106: taken). */
int portmap_claim(const struct cni_env *env, struct json_object *mappings, const char *const *addrs,
		  int naddrs);
/* DELETE /v1/hostport/CID:IFNAME; strict: an agent error is a CNI error */
int portmap_release(const struct cni_env *env, bool strict);

/* Helpers shared by the commands. */
const char *json_str(struct json_object *o, const char *key);
void free_strv(char **v);

#endif
