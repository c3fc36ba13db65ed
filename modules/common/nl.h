/* modules/common/nl.h - the one wrapper over libnl-route-3 (rtnetlink) for
 * the datapath, nodes, health and lb modules and fibril-cni: a socket,
 * links looked up, listed, created (veth, dummy, external VXLAN), changed
 * and deleted, addresses added, listed and removed, routes added (with the
 * caller's protocol mark, optionally an IP tunnel encapsulation), deleted
 * and read back, and a socket of the kernel's link, address and tc
 * events. Which devices, addresses and routes stays with the callers.
 *
 * Each function returns 0 (or what it says) or a negative errno, and on
 * failure writes the reason - libnl's words ("Object exists"), or "out of
 * memory" - into err[0..len) for the caller to put after its own. Free of
 * libfibril and of the agent's loop (fibril-cni compiles it too); compiled
 * into each user, not into libmodcommon (the curl glue); not SDK. */
#ifndef FIBRIL_MODCOMMON_NL_H
#define FIBRIL_MODCOMMON_NL_H

#include <net/if.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nl_sock;
struct rtnl_link;
struct rtnl_addr;

/* libnl's error (a negative NLE_*) as a negative errno: NLE_EXIST -EEXIST,
 * NLE_OBJ_NOTFOUND -ENOENT, NLE_NODEV -ENODEV, NLE_NOADDR -EADDRNOTAVAIL,
 * NLE_OPNOTSUPP -EOPNOTSUPP, NLE_PERM -EPERM, NLE_NOMEM -ENOMEM,
 * NLE_INVAL -EINVAL, NLE_AGAIN -EAGAIN, anything else -EIO. */
int mod_nl_errno(int nlerr);

/* An rtnetlink socket in the calling thread's network namespace (a socket
 * stays in the namespace it was opened in). */
int mod_nl_open(struct nl_sock **out, char *err, size_t len);
void mod_nl_close(struct nl_sock *sk); /* NULL: nothing */

/* ---- links ------------------------------------------------------------------- */

struct mod_nl_link {
	int ifindex;
	unsigned int flags;     /* IFF_* */
	unsigned int mtu;
	char name[IF_NAMESIZE];
	char kind[32];          /* "veth", "dummy", "vxlan", ...; "" for a plain link */
	char mac[32];           /* "aa:bb:cc:dd:ee:ff" */
	bool vxlan_external;    /* kind vxlan: collect-metadata mode */
	uint16_t vxlan_port;    /* kind vxlan: its UDP port, 0 when unknown */
	struct rtnl_link *obj;  /* libnl's link, for the changes below */
};

/* The link NAME: 1 and *out (release it), 0 when there is none (err says
 * so in libnl's words), or an error. */
int mod_nl_link_get(struct nl_sock *sk, const char *name, struct mod_nl_link *out, char *err,
		    size_t len);
void mod_nl_link_release(struct mod_nl_link *l);
/* One request: the link renamed (rename not NULL) and flags (IFF_*) set. */
int mod_nl_link_change(struct nl_sock *sk, const struct mod_nl_link *l, const char *rename,
		       unsigned int flags, char *err, size_t len);
/* The flags the link lacks set; no request when it has them all. */
int mod_nl_link_set_flags(struct nl_sock *sk, const struct mod_nl_link *l, unsigned int flags,
			  char *err, size_t len);
/* 1 deleted, 0 when there was no such link, or an error. */
int mod_nl_link_del(struct nl_sock *sk, const char *name, char *err, size_t len);
/* fn for each link of the namespace (l->obj valid during the call). */
int mod_nl_link_walk(struct nl_sock *sk, void (*fn)(const struct mod_nl_link *l, void *ud), void *ud,
		     char *err, size_t len);

/* New links (NLM_F_CREATE | NLM_F_EXCL) with the IFF_* flags given. */
/* The pair NAME/PEER, both with mtu when > 0; PEER made inside the network
 * namespace peer_netns_fd when >= 0. Flags go on NAME only (the kernel
 * refuses them on the peer). */
int mod_nl_veth_add(struct nl_sock *sk, const char *name, const char *peer, int mtu,
		    int peer_netns_fd, unsigned int flags, char *err, size_t len);
/* -EOPNOTSUPP when the kernel has no dummy driver. */
int mod_nl_dummy_add(struct nl_sock *sk, const char *name, unsigned int flags, char *err,
		     size_t len);
/* A VXLAN device in external (collect-metadata) mode on UDP port, no learning. */
int mod_nl_vxlan_external_add(struct nl_sock *sk, const char *name, uint16_t port,
			      unsigned int flags, char *err, size_t len);

/* ---- addresses --------------------------------------------------------------- */

/* family AF_INET or AF_INET6, addr 4 or 16 bytes; IPv6 ones are added
 * without duplicate address detection (IFA_F_NODAD: usable at once), every
 * one with scope global. nlm_flags: NLM_F_REPLACE, or 0 (an existing one
 * is then -EEXIST). */
int mod_nl_addr_add(struct nl_sock *sk, int ifindex, int family, const void *addr,
		    unsigned int prefixlen, int nlm_flags, char *err, size_t len);
int mod_nl_addr_del(struct nl_sock *sk, int ifindex, int family, const void *addr,
		    unsigned int prefixlen, char *err, size_t len);

struct mod_nl_addr {
	int ifindex;
	int family;             /* AF_INET or AF_INET6 */
	unsigned int prefixlen;
	int scope;              /* RT_SCOPE_* */
	uint8_t addr[16];       /* the local address: 4 or 16 bytes */
	struct rtnl_addr *obj;  /* libnl's, valid during the walk: mod_nl_addr_remove */
};

/* fn for each IPv4 and IPv6 address of the namespace. */
int mod_nl_addr_walk(struct nl_sock *sk, void (*fn)(struct nl_sock *sk, const struct mod_nl_addr *a,
						    void *ud),
		     void *ud, char *err, size_t len);
/* Remove the address a of a walk, as the kernel listed it. */
int mod_nl_addr_remove(struct nl_sock *sk, const struct mod_nl_addr *a, char *err, size_t len);

/* Text to bytes: *family AF_INET (a ':' makes it AF_INET6) and 4 or 16
 * bytes into out; -EINVAL when it is no such address. As libnl reads
 * addresses: a "/prefix" after it is accepted and ignored. */
int mod_nl_addr_parse(const char *text, int *family, uint8_t out[16]);

/* ---- routes (the main table, unicast) ----------------------------------------- */

struct mod_nl_route {
	int family;             /* AF_INET or AF_INET6 */
	const void *dst;        /* 4 or 16 bytes (zeros with dst_len 0: the default route) */
	unsigned int dst_len;
	uint8_t protocol;       /* rtm_protocol: the caller's mark; RTPROT_STATIC libnl's own */
	uint8_t scope;          /* RT_SCOPE_*; RT_SCOPE_NOWHERE in a delete: any scope */
	int oif;                /* the next hop's device; 0: none */
	const void *gateway;    /* the next hop's gateway; NULL: none */
	const void *pref_src;   /* NULL: none */
	uint32_t mtu;           /* RTAX_MTU; 0: none */
	/* An IP tunnel encapsulation (RTA_ENCAP, LWTUNNEL_ENCAP_IP / _IP6:
	 * outer destination, tunnel id, TTL); encap_family 0: none. Such a
	 * route takes no gateway (add only: a delete needs none). */
	int encap_family;       /* AF_INET or AF_INET6 */
	const void *encap_dst;
	uint64_t encap_id;      /* host order */
	uint8_t encap_ttl;
};

/* nlm_flags: NLM_F_REPLACE, NLM_F_EXCL (NLM_F_CREATE is added). */
int mod_nl_route_add(struct nl_sock *sk, const struct mod_nl_route *r, int nlm_flags, char *err,
		     size_t len);
/* The route's next hop (oif, gateway) must match when given. -ENOENT,
 * -ENODEV or -EADDRNOTAVAIL when there is no such route. */
int mod_nl_route_del(struct nl_sock *sk, const struct mod_nl_route *r, char *err, size_t len);

/* A route of a dump, read from the message itself (libnl's route cache
 * refuses one with an IP tunnel encapsulation). */
struct mod_nl_route_entry {
	int family;             /* AF_INET or AF_INET6 */
	unsigned int dst_len;
	uint32_t table;         /* RTA_TABLE, else rtm_table */
	uint8_t protocol, scope, type;
	bool has_dst, has_gateway, has_pref_src;
	uint8_t dst[16], gateway[16], pref_src[16];
	int oif;                /* 0: none */
	uint32_t mtu;           /* RTAX_MTU, 0: none */
	bool multipath;         /* RTA_MULTIPATH: the next hops are there, not in oif/gateway */
	int encap_family;       /* an IP tunnel encapsulation with an outer destination: */
	uint8_t encap_dst[16];  /* AF_INET or AF_INET6 and it; else 0 */
	uint64_t encap_id;      /* its tunnel id (host order), 0 when it has none */
	const void *nexthops;   /* RTA_MULTIPATH's payload, for mod_nl_route_through */
	size_t nexthops_len;
};

/* fn for each route of family (AF_UNSPEC: all) in every table. A route
 * whose destination or gateway is not of its family's length is skipped. */
int mod_nl_route_dump(struct nl_sock *sk, int family,
		      void (*fn)(const struct mod_nl_route_entry *r, void *ud), void *ud, char *err,
		      size_t len);
/* Whether one of the route's next hops leaves through oif (via gateway when
 * not NULL: of the route's family's length). */
bool mod_nl_route_through(const struct mod_nl_route_entry *r, int oif, const void *gateway);

/* ---- the kernel's events -------------------------------------------------------- */

struct mod_nl_event {
	int type;               /* RTM_NEWLINK, RTM_DELADDR, RTM_DELQDISC, RTM_DELTFILTER, ... */
	int ifindex;            /* the link it concerns */
	const char *ifname;     /* links: the link's name; NULL when it has none, and otherwise */
};

/* The kernel's events: a socket in rtnetlink multicast groups. */
struct mod_nl_events {
	struct nl_sock *sk; /* NULL: not open */
	void (*fn)(const struct mod_nl_event *e, void *ud);
	void *ud;
};

/* A non-blocking socket in the groups (RTNLGRP_*) groups[0..n), with a
 * receive buffer of rcvbuf bytes when > 0 (capped by net.core.rmem_max);
 * fn gets each link, address and tc (qdisc, class, filter) message that
 * mod_nl_events_read reads. */
int mod_nl_events_open(struct mod_nl_events *ev, const unsigned int *groups, size_t n, int rcvbuf,
		       void (*fn)(const struct mod_nl_event *e, void *ud), void *ud, char *err,
		       size_t len);
/* Read one datagram's messages: 0, -EAGAIN when there was none, -ENOBUFS
 * when the kernel dropped events (the socket's buffer was full), or an
 * error. */
int mod_nl_events_read(struct mod_nl_events *ev, char *err, size_t len);
void mod_nl_events_close(struct mod_nl_events *ev); /* not open: nothing */
int mod_nl_events_fd(const struct mod_nl_events *ev);

#endif
