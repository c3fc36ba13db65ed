/* modules/hubble-lite/grpc_filter.c - Hubble's FlowFilter (flow.proto)
 * over hubble-lite's flows. A filter matches when every field it sets
 * matches (a field matches when any of its values does), as Hubble's.
 * Honoured: source_ip/destination_ip (address or CIDR), source_pod/
 * destination_pod ("ns/pod-prefix", "pod-prefix", "ns/"), source_label/
 * destination_label ("key", "key=value", "source:key=value"),
 * source_service/destination_service (as pods), source_identity/
 * destination_identity, source_port/destination_port, protocol (tcp, udp,
 * sctp, icmp, icmpv4, icmpv6), verdict, traffic_direction, event_type
 * (type only), tcp_flags (all the set flags present), node_name (shell
 * pattern), ip_version. Refused (INVALID_ARGUMENT naming the field, never
 * ignored): uuid, fqdn, workload, reply, the L7 fields (http_*, dns_query)
 * and trace_id, which hubble-lite's flows do not carry, and label
 * selectors beyond key / key=value. Values are checked when the call
 * starts; matching does no parsing. */
#include "grpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "flow.pb-c.h"

struct cside {
	struct hl_cidr *ip;
	size_t nip;
	uint16_t *port;
	size_t nport;
	char **pod, **label, **service; /* borrowed from the copy in cf->strs */
	size_t npod, nlabel, nservice;
	uint32_t *identity;
	size_t nidentity;
};

struct hl_cfilter {
	struct cside src, dst;
	int *proto;
	size_t nproto;
	uint8_t *verdict, *direction, *ipver, *tcpflags;
	size_t nverdict, ndirection, nipver, ntcpflags;
	int32_t *etype;
	size_t netype;
	char **node;
	size_t nnode;
	Flow__FlowFilter *copy; /* the strings point into it */
};

static bool parse_cidr(const char *s, struct hl_cidr *c)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", s);
	char *slash = strchr(buf, '/');
	if (slash)
		*slash = '\0';
	if (inet_pton(AF_INET, buf, c->addr) == 1)
		c->family = 4, c->plen = 32;
	else if (inet_pton(AF_INET6, buf, c->addr) == 1)
		c->family = 6, c->plen = 128;
	else
		return false;
	if (slash) {
		char *end;
		unsigned long p = strtoul(slash + 1, &end, 10);
		if (!slash[1] || *end || p > c->plen)
			return false;
		c->plen = (unsigned)p;
	}
	return true;
}

static bool cidr_has(const struct hl_cidr *c, uint8_t family, const uint8_t *a)
{
	if (c->family != family)
		return false;
	unsigned full = c->plen / 8, rest = c->plen % 8;
	if (memcmp(c->addr, a, full))
		return false;
	return !rest || ((c->addr[full] ^ a[full]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

static int proto_of(const char *s)
{
	static const struct { const char *n; int p; } t[] = {
		{"tcp", 6}, {"udp", 17}, {"sctp", 132}, {"icmp", 1}, {"icmpv4", 1}, {"icmpv6", 58},
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (!strcasecmp(s, t[i].n))
			return t[i].p;
	return -1;
}

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)
#define ALLOC(ptr, n) do { if ((n) && !((ptr) = calloc((n), sizeof(*(ptr))))) FAIL("out of memory"); } while (0)

static int side_compile(struct cside *c, char **ip, size_t nip, char **port, size_t nport,
			char **pod, size_t npod, char **label, size_t nlabel, char **svc, size_t nsvc,
			uint32_t *id, size_t nid, const char *where, const char *dir, char *err,
			size_t errlen)
{
	ALLOC(c->ip, nip);
	for (size_t i = 0; i < nip; i++, c->nip++)
		if (!parse_cidr(ip[i], &c->ip[i]))
			FAIL("%s.%s_ip: not an address or CIDR: \"%.64s\"", where, dir, ip[i]);
	ALLOC(c->port, nport);
	for (size_t i = 0; i < nport; i++, c->nport++) {
		char *end;
		unsigned long p = strtoul(port[i], &end, 10);
		if (!port[i][0] || *end || p > 65535)
			FAIL("%s.%s_port: not a port: \"%.64s\"", where, dir, port[i]);
		c->port[i] = (uint16_t)p;
	}
	for (size_t i = 0; i < nlabel; i++)
		if (strpbrk(label[i], ",!() ") || !label[i][0])
			FAIL("%s.%s_label: only \"key\" and \"key=value\" selectors are supported: \"%.64s\"",
			     where, dir, label[i]);
	c->pod = pod, c->npod = npod;
	c->label = label, c->nlabel = nlabel;
	c->service = svc, c->nservice = nsvc;
	c->identity = id, c->nidentity = nid;
	return 0;
}

static int compile_one(Flow__FlowFilter *ff, struct hl_cfilter *cf, const char *where, char *err,
		       size_t errlen)
{
	static const char *const unsupported[] = {"uuid", "source_fqdn", "destination_fqdn",
		"source_workload", "destination_workload", "http_status_code", "reply", "dns_query",
		"http_method", "http_path", "trace_id"};
	const size_t counts[] = {ff->n_uuid, ff->n_source_fqdn, ff->n_destination_fqdn,
		ff->n_source_workload, ff->n_destination_workload, ff->n_http_status_code, ff->n_reply,
		ff->n_dns_query, ff->n_http_method, ff->n_http_path, ff->n_trace_id};
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
		if (counts[i])
			FAIL("%s.%s: not supported by hubble-lite (its flows carry no such field)", where,
			     unsupported[i]);
	cf->copy = ff;
	if (side_compile(&cf->src, ff->source_ip, ff->n_source_ip, ff->source_port, ff->n_source_port,
			 ff->source_pod, ff->n_source_pod, ff->source_label, ff->n_source_label,
			 ff->source_service, ff->n_source_service, ff->source_identity,
			 ff->n_source_identity, where, "source", err, errlen) ||
	    side_compile(&cf->dst, ff->destination_ip, ff->n_destination_ip, ff->destination_port,
			 ff->n_destination_port, ff->destination_pod, ff->n_destination_pod,
			 ff->destination_label, ff->n_destination_label, ff->destination_service,
			 ff->n_destination_service, ff->destination_identity, ff->n_destination_identity,
			 where, "destination", err, errlen))
		return -1;
	ALLOC(cf->proto, ff->n_protocol);
	for (size_t i = 0; i < ff->n_protocol; i++, cf->nproto++)
		if ((cf->proto[i] = proto_of(ff->protocol[i])) < 0)
			FAIL("%s.protocol: not one of tcp, udp, sctp, icmp, icmpv4, icmpv6: \"%.32s\"", where,
			     ff->protocol[i]);
	ALLOC(cf->verdict, ff->n_verdict);
	for (size_t i = 0; i < ff->n_verdict; i++, cf->nverdict++)
		cf->verdict[i] = (uint8_t)(ff->verdict[i] > 0 && ff->verdict[i] < 256 ? ff->verdict[i] : 255);
	ALLOC(cf->direction, ff->n_traffic_direction);
	for (size_t i = 0; i < ff->n_traffic_direction; i++, cf->ndirection++)
		cf->direction[i] = (uint8_t)(ff->traffic_direction[i] == FLOW__TRAFFIC_DIRECTION__INGRESS ? 1
					     : ff->traffic_direction[i] == FLOW__TRAFFIC_DIRECTION__EGRESS ? 0
					     : 255);
	ALLOC(cf->ipver, ff->n_ip_version);
	for (size_t i = 0; i < ff->n_ip_version; i++, cf->nipver++)
		cf->ipver[i] = (uint8_t)(ff->ip_version[i] == FLOW__IPVERSION__IPv4 ? 4
					 : ff->ip_version[i] == FLOW__IPVERSION__IPv6 ? 6 : 0);
	ALLOC(cf->etype, ff->n_event_type);
	for (size_t i = 0; i < ff->n_event_type; i++, cf->netype++) {
		if (ff->event_type[i]->match_sub_type)
			FAIL("%s.event_type[%zu]: match_sub_type is not supported", where, i);
		cf->etype[i] = ff->event_type[i]->type;
	}
	ALLOC(cf->tcpflags, ff->n_tcp_flags);
	for (size_t i = 0; i < ff->n_tcp_flags; i++, cf->ntcpflags++) {
		const Flow__TCPFlags *t = ff->tcp_flags[i];
		if (t->ns)
			FAIL("%s.tcp_flags[%zu]: NS is not recorded by the datapath", where, i);
		cf->tcpflags[i] = (uint8_t)(t->fin | t->syn << 1 | t->rst << 2 | t->psh << 3 |
					    t->ack << 4 | t->urg << 5 | t->ece << 6 | t->cwr << 7);
	}
	cf->node = ff->node_name, cf->nnode = ff->n_node_name;
	return 0;
}

int hl_cfilters_compile(struct Flow__FlowFilter **in, size_t n, struct hl_cfilter **out,
			size_t *nout, const char *what, char *err, size_t errlen)
{
	*out = NULL;
	*nout = 0;
	if (!n)
		return 0;
	struct hl_cfilter *cf = calloc(n, sizeof(*cf));
	if (!cf)
		FAIL("out of memory");
	*out = cf;
	for (size_t i = 0; i < n; i++) {
		/* keep our own copy of the strings: the request is freed */
		size_t sz = protobuf_c_message_get_packed_size(&in[i]->base);
		uint8_t *buf = malloc(sz ? sz : 1);
		if (!buf)
			FAIL("out of memory");
		protobuf_c_message_pack(&in[i]->base, buf);
		Flow__FlowFilter *copy = flow__flow_filter__unpack(NULL, sz, buf);
		free(buf);
		*nout = i + 1;
		char where[48];
		snprintf(where, sizeof(where), "%s[%zu]", what, i);
		if (!copy)
			FAIL("%s: out of memory", where);
		if (compile_one(copy, &cf[i], where, err, errlen)) {
			if (!cf[i].copy)
				flow__flow_filter__free_unpacked(copy, NULL);
			return -1;
		}
	}
	return 0;
}

void hl_cfilters_free(struct hl_cfilter *cf, size_t n)
{
	for (size_t i = 0; cf && i < n; i++) {
		free(cf[i].src.ip), free(cf[i].src.port), free(cf[i].dst.ip), free(cf[i].dst.port);
		free(cf[i].proto), free(cf[i].verdict), free(cf[i].direction), free(cf[i].ipver);
		free(cf[i].etype), free(cf[i].tcpflags);
		if (cf[i].copy)
			flow__flow_filter__free_unpacked(cf[i].copy, NULL);
	}
	free(cf);
}

/* "ns/prefix" (pod name starts with prefix in namespace ns), "ns/" (any
 * pod of ns), "prefix" (any namespace) */
static bool name_match(const char *want, const char *ns, const char *name)
{
	if (!name[0])
		return false;
	const char *slash = strchr(want, '/');
	if (slash) {
		size_t nl = (size_t)(slash - want);
		if (strlen(ns) != nl || memcmp(ns, want, nl))
			return false;
		want = slash + 1;
	}
	return !strncmp(name, want, strlen(want));
}

/* labels: "source:key=value" lines; want "key", "key=value" or with a source */
static bool label_match(const char *want, const char *labels)
{
	size_t wl = strlen(want);
	bool with_value = strchr(want, '=') != NULL;
	for (const char *line = labels; *line;) {
		const char *end = strchr(line, '\n');
		size_t ll = end ? (size_t)(end - line) : strlen(line);
		for (int pass = 0; pass < 2; pass++) {
			const char *l = line;
			size_t n = ll;
			const char *colon = pass ? memchr(line, ':', ll) : NULL;
			if (pass && !colon)
				break;
			if (colon)
				n -= (size_t)(colon + 1 - line), l = colon + 1;
			if (with_value ? (n == wl && !memcmp(l, want, wl))
				       : (n >= wl && !memcmp(l, want, wl) && (n == wl || l[wl] == '=')))
				return true;
		}
		if (!end)
			break;
		line = end + 1;
	}
	return false;
}

static bool side_match(const struct cside *c, const struct hl_peer *p, uint8_t family)
{
	bool ok = !c->nip;
	for (size_t i = 0; !ok && i < c->nip; i++)
		ok = cidr_has(&c->ip[i], family, p->addr);
	if (!ok)
		return false;
	ok = !c->nport;
	for (size_t i = 0; !ok && i < c->nport; i++)
		ok = c->port[i] == p->port;
	if (!ok)
		return false;
	ok = !c->npod;
	for (size_t i = 0; !ok && i < c->npod; i++)
		ok = name_match(c->pod[i], p->ns, p->pod);
	if (!ok)
		return false;
	ok = !c->nservice;
	for (size_t i = 0; !ok && i < c->nservice; i++)
		ok = name_match(c->service[i], p->service.ns, p->service.name);
	if (!ok)
		return false;
	ok = !c->nidentity;
	for (size_t i = 0; !ok && i < c->nidentity; i++)
		ok = c->identity[i] == p->identity;
	if (!ok)
		return false;
	ok = !c->nlabel;
	for (size_t i = 0; !ok && i < c->nlabel; i++)
		ok = label_match(c->label[i], p->labels);
	return ok;
}

#define ANY(n, cond) ({ bool any_ = !(n); for (size_t i = 0; !any_ && i < (n); i++) any_ = (cond); any_; })

static bool cfilter_match(const struct hl_cfilter *cf, const struct hl_flow *f, const char *node)
{
	int etype = f->type == HL_TYPE_DROP ? 1 : f->type == HL_TYPE_POLICY ? 5 : 4;
	uint8_t dir = f->direction == 0 ? 0 : 1;
	return ANY(cf->nverdict, cf->verdict[i] == f->verdict) &&
	       ANY(cf->nproto, cf->proto[i] == f->proto) &&
	       ANY(cf->ndirection, cf->direction[i] == dir) &&
	       ANY(cf->nipver, cf->ipver[i] == f->family) &&
	       ANY(cf->netype, cf->etype[i] == etype) &&
	       ANY(cf->ntcpflags, f->proto == 6 && (f->tcp_flags & cf->tcpflags[i]) == cf->tcpflags[i]) &&
	       ANY(cf->nnode, fnmatch(cf->node[i], node, 0) == 0) &&
	       side_match(&cf->src, &f->src, f->family) && side_match(&cf->dst, &f->dst, f->family);
}

bool hl_cfilters_any(const struct hl_cfilter *cf, size_t n, const struct hl_flow *f,
		     const char *node)
{
	for (size_t i = 0; i < n; i++)
		if (cfilter_match(&cf[i], f, node))
			return true;
	return false;
}
