/* modules/policy/parse_peer.c - the L3/L4 parts of a peer that a
 * CiliumNetworkPolicy and a NetworkPolicy share: a CIDR, or a CIDR with
 * excepts (each inside it), and a port (a number, a name, or a range with
 * endPort) with its protocol (a CNP's defaults to ANY: TCP, UDP and SCTP;
 * a NetworkPolicy's to TCP); and a port range split into the power-of-two
 * aligned blocks the datapath's policy map holds. */
#include "parse_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

static bool parse_cidr_text(const char *t, struct pol_cidr *out)
{
	char buf[64];
	const char *slash = strchr(t, '/');
	if (!slash || (size_t)(slash - t) >= sizeof(buf))
		return false;
	memcpy(buf, t, (size_t)(slash - t));
	buf[slash - t] = '\0';
	memset(out, 0, sizeof(*out));
	unsigned max;
	if (inet_pton(AF_INET, buf, out->addr) == 1)
		out->family = 4, max = 32;
	else if (inet_pton(AF_INET6, buf, out->addr) == 1)
		out->family = 6, max = 128;
	else
		return false;
	const char *d = slash + 1;
	if (!*d || strspn(d, "0123456789") != strlen(d) || strlen(d) > 3)
		return false;
	out->plen = (unsigned)atoi(d);
	if (out->plen > max)
		return false;
	for (unsigned b = out->plen; b < max; b++)
		out->addr[b / 8] &= (uint8_t)~(0x80u >> (b % 8));
	return true;
}

bool pol_cidr_within(const struct pol_cidr *inner, const struct pol_cidr *outer)
{
	if (inner->family != outer->family || inner->plen < outer->plen)
		return false;
	for (unsigned b = 0; b < outer->plen; b++) {
		uint8_t m = (uint8_t)(0x80u >> (b % 8));
		if ((inner->addr[b / 8] & m) != (outer->addr[b / 8] & m))
			return false;
	}
	return true;
}

bool pol_cidr_add(struct pctx *c, struct pol_peer *p, struct json_object *v, const char *path)
{
	struct pol_cidr_rule *n = realloc(p->cidrs, (p->ncidrs + 1) * sizeof(*n));
	if (!n)
		return pol_fail(c, path, "out of memory");
	p->cidrs = n;
	struct pol_cidr_rule *r = &p->cidrs[p->ncidrs];
	memset(r, 0, sizeof(*r));
	char sub[320];
	if (json_object_is_type(v, json_type_string)) {
		if (!parse_cidr_text(json_object_get_string(v), &r->cidr))
			return pol_fail(c, path, "'%.60s' is not a CIDR", json_object_get_string(v));
		p->ncidrs++;
		return true;
	}
	static const char *const keys[] = {"cidr", "except", NULL};
	if (!json_object_is_type(v, json_type_object))
		return pol_fail(c, path, "must be a CIDR text or an object");
	if (!pol_keys_known(c, v, path, keys))
		return false;
	struct json_object *cidr = pol_field(v, "cidr"), *ex = pol_field(v, "except");
	if (!cidr || !json_object_is_type(cidr, json_type_string) ||
	    !parse_cidr_text(json_object_get_string(cidr), &r->cidr))
		return pol_fail(c, path, "cidr: missing or not a CIDR");
	p->ncidrs++; /* owned from here: freed with the peer */
	if (ex) {
		if (!json_object_is_type(ex, json_type_array))
			return pol_fail(c, path, "except must be an array");
		size_t ne = json_object_array_length(ex);
		r->except = calloc(ne ? ne : 1, sizeof(*r->except));
		if (!r->except)
			return pol_fail(c, path, "out of memory");
		for (size_t i = 0; i < ne; i++) {
			struct json_object *e = json_object_array_get_idx(ex, i);
			snprintf(sub, sizeof(sub), "%.200s.except[%zu]", path, i);
			if (!json_object_is_type(e, json_type_string) ||
			    !parse_cidr_text(json_object_get_string(e), &r->except[i]))
				return pol_fail(c, sub, "not a CIDR");
			if (!pol_cidr_within(&r->except[i], &r->cidr))
				return pol_fail(c, sub, "'%.60s' is not inside %.60s", json_object_get_string(e),
						json_object_get_string(cidr));
			r->nexcept++;
		}
	}
	return true;
}

static bool parse_port_number(const char *t, long *out)
{
	if (!*t || strlen(t) > 5 || strspn(t, "0123456789") != strlen(t))
		return false;
	*out = strtol(t, NULL, 10);
	return *out >= 0 && *out <= 65535;
}

bool pol_port_name_ok(const char *s)
{
	size_t n = strlen(s);
	bool letter = false;
	if (n == 0 || n > 15 || s[0] == '-' || s[n - 1] == '-' || strstr(s, "--"))
		return false;
	for (const char *p = s; *p; p++) {
		if (*p >= 'a' && *p <= 'z')
			letter = true;
		else if (!((*p >= '0' && *p <= '9') || *p == '-'))
			return false;
	}
	return letter;
}

static bool port_add(struct pctx *c, struct pol_peer *p, uint8_t proto, long port, long end,
		     const char *name, const char *path)
{
	struct pol_port *n = realloc(p->ports, (p->nports + 1) * sizeof(*n));
	if (!n)
		return pol_fail(c, path, "out of memory");
	p->ports = n;
	char *nm = name ? pol_strdup(name) : NULL;
	if (name && !nm)
		return pol_fail(c, path, "out of memory");
	p->ports[p->nports++] = (struct pol_port){.proto = proto, .port = (uint16_t)port,
						  .end_port = (uint16_t)(end ? end : port), .name = nm};
	return true;
}

/* A port given as a number or a text: a number 0-65535, else a port name. */
static bool port_value(struct pctx *c, struct json_object *pv, const char *ps, long *port,
		       const char **name)
{
	*port = 0;
	*name = NULL;
	if (!pv)
		return true;
	if (json_object_is_type(pv, json_type_int)) {
		*port = json_object_get_int64(pv);
		if (*port < 0 || *port > 65535)
			return pol_fail(c, ps, "port %ld is out of range 0-65535", *port);
		return true;
	}
	const char *t = json_object_is_type(pv, json_type_string) ? json_object_get_string(pv) : NULL;
	if (t && parse_port_number(t, port))
		return true;
	if (t && pol_port_name_ok(t)) {
		*name = t;
		return true;
	}
	return pol_fail(c, ps, "port '%.40s' is neither a number 0-65535 nor a port name", t ? t : "?");
}

/* One port object: {port (number or name), endPort, protocol}. A CNP's
 * protocol defaults to ANY (TCP, UDP and SCTP), a NetworkPolicy's to TCP. */
bool pol_port_entry(struct pctx *c, struct json_object *po, const char *ps, bool knp,
		    struct pol_peer *p)
{
	static const char *const pkeys[] = {"port", "endPort", "protocol", NULL};
	if (!json_object_is_type(po, json_type_object))
		return pol_fail(c, ps, "must be an object");
	if (!pol_keys_known(c, po, ps, pkeys))
		return false;
	struct json_object *pv = pol_field(po, "port"), *ev = pol_field(po, "endPort"),
			   *prv = pol_field(po, "protocol");
	long port = 0, end = 0;
	const char *name = NULL;
	if (!port_value(c, pv, ps, &port, &name))
		return false;
	if (ev && name)
		return pol_fail(c, ps, "endPort needs a numeric port");
	if (ev) {
		if (!json_object_is_type(ev, json_type_int))
			return pol_fail(c, ps, "endPort must be a number");
		end = json_object_get_int64(ev);
		if (end < 1 || end > 65535 || end < port || port == 0)
			return pol_fail(c, ps, "endPort %ld must be a port >= port", end);
	}
	const char *proto = prv && json_object_is_type(prv, json_type_string) ? json_object_get_string(prv)
			    : prv					      ? "?"
			    : knp					      ? "TCP"
									      : "ANY";
	if (!strcmp(proto, "TCP"))
		return port_add(c, p, IPPROTO_TCP, port, end, name, ps);
	if (!strcmp(proto, "UDP"))
		return port_add(c, p, IPPROTO_UDP, port, end, name, ps);
	if (!strcmp(proto, "SCTP"))
		return port_add(c, p, IPPROTO_SCTP, port, end, name, ps);
	if (!strcmp(proto, "ANY") && !knp)
		return port_add(c, p, IPPROTO_TCP, port, end, name, ps) &&
		       port_add(c, p, IPPROTO_UDP, port, end, name, ps) &&
		       port_add(c, p, IPPROTO_SCTP, port, end, name, ps);
	return pol_fail(c, ps, "protocol '%.20s' is not TCP, UDP, SCTP%s", proto, knp ? "" : " or ANY");
}

void pol_port_blocks(uint16_t first, uint16_t last, void (*fn)(uint16_t port, unsigned bits, void *ud),
		     void *ud)
{
	uint32_t p = first, end = last;
	while (p <= end) {
		unsigned size_bits = 0; /* block of 2^size_bits ports */
		while (size_bits < 16 && (p & ((1u << (size_bits + 1)) - 1)) == 0 &&
		       p + (1u << (size_bits + 1)) - 1 <= end)
			size_bits++;
		fn((uint16_t)p, 16 - size_bits, ud);
		p += 1u << size_bits;
	}
}
