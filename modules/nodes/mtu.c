/* modules/nodes/mtu.c - the pod MTU, as Cilium's mtu package: the
 * underlay's MTU (`[nodes] mtu`, else the MTU of the interface holding
 * this node's IP, read with SIOCGIFMTU in the agent's network namespace),
 * less the encapsulation's overhead in routing-mode tunnel (VXLAN: 50
 * bytes over IPv4, 70 over IPv6), so a full-size pod packet is never
 * dropped or fragmented on the underlay. fibril-cni reads it from GET
 * /v1/mtu for both veth ends and the pod's routes; the tunnel routes of
 * the node's own traffic carry it too (route.c). */
#include "node_addrs.h"
#include "nodes_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <json.h>

/* the interface that holds addr (family 4 or 6) into name; 0 or -ENOENT */
static int iface_of(int family, const void *addr, char *name, size_t len)
{
	struct mod_node_addr *ifs;
	size_t nifs;
	int rc = mod_node_addrs(&ifs, &nifs);
	if (rc < 0)
		return rc;
	rc = -ENOENT;
	for (const struct mod_node_addr *i = ifs; i < ifs + nifs && rc; i++) {
		if (family == 4 && i->family == AF_INET && !memcmp(&i->addr.v4, addr, 4))
			rc = 0;
		else if (family == 6 && i->family == AF_INET6 && !memcmp(&i->addr.v6, addr, 16))
			rc = 0;
		if (!rc)
			snprintf(name, len, "%s", i->ifname);
	}
	free(ifs);
	return rc;
}

static int iface_mtu(const char *name)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	int rc = ioctl(fd, SIOCGIFMTU, &ifr) ? -errno : ifr.ifr_mtu;
	close(fd);
	return rc;
}

int nodes_mtu_setup(struct nodes *s, char *why, size_t len)
{
	int configured = (int)fibril_config_int(s->m, "mtu");
	s->mtu.device[0] = '\0';
	if (configured) {
		s->mtu.underlay = configured;
		s->mtu.configured = true;
	} else {
		int family = s->self.has_ipv4 ? 4 : 6;
		const void *ip = family == 4 ? (const void *)&s->self.ipv4 : (const void *)&s->self.ipv6;
		int mtu = -ENOENT;
		if (!iface_of(family, ip, s->mtu.device, sizeof(s->mtu.device)))
			mtu = iface_mtu(s->mtu.device);
		if (mtu <= 0) {
			char a[INET6_ADDRSTRLEN];
			fibril_warn(s->m, "no interface holds the node IP %s (%s): the underlay MTU is "
					  "taken as %d; set [nodes] mtu",
				    inet_ntop(family == 4 ? AF_INET : AF_INET6, ip, a, sizeof(a)),
				    strerror(mtu == -ENOENT ? ENOENT : -mtu), NODES_DEFAULT_MTU);
			mtu = NODES_DEFAULT_MTU;
			s->mtu.device[0] = '\0';
		}
		s->mtu.underlay = mtu;
		s->mtu.configured = false;
	}
	/* VXLAN: outer IP (20 / 40) + UDP (8) + VXLAN (8) + inner Ethernet (14),
	 * towards this node's tunnel endpoint family (IPv4 when it has one) */
	s->mtu.overhead = s->routing != NODES_ROUTING_TUNNEL ? 0 : s->self.has_ipv4 ? 50 : 70;
	s->mtu.pod = s->mtu.underlay - s->mtu.overhead;
	if (s->mtu.pod < NODES_MIN_POD_MTU) {
		snprintf(why, len, "the pod MTU would be %d (underlay %d%s, less %d of tunnel "
			 "overhead): below IPv4's minimum of 68; set [nodes] mtu", s->mtu.pod, s->mtu.underlay,
			 s->mtu.configured ? " from [nodes] mtu" : "", s->mtu.overhead);
		return -EINVAL;
	}
	fibril_info(s->m, "pod MTU %d: underlay %d (%s%s) less %d of tunnel overhead", s->mtu.pod,
		    s->mtu.underlay, s->mtu.configured ? "[nodes] mtu" : "device ",
		    s->mtu.configured ? "" : s->mtu.device[0] ? s->mtu.device : "unknown",
		    s->mtu.overhead);
	return 0;
}

struct json_object *nodes_mtu_json(const struct nodes *s)
{
	struct json_object *o = json_object_new_object();
	json_object_object_add(o, "pod-mtu", json_object_new_int(s->mtu.pod));
	json_object_object_add(o, "underlay-mtu", json_object_new_int(s->mtu.underlay));
	json_object_object_add(o, "tunnel-overhead", json_object_new_int(s->mtu.overhead));
	json_object_object_add(o, "source", json_object_new_string(s->mtu.configured ? "config"
										     : "device"));
	if (!s->mtu.configured && s->mtu.device[0])
		json_object_object_add(o, "device", json_object_new_string(s->mtu.device));
	return o;
}

void nodes_mtu_get(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	struct nodes *s = ud;
	(void)req;
	struct json_object *o = nodes_mtu_json(s);
	fibril_resp_json(resp, 200, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
}
