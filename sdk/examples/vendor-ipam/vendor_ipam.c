/* sdk/examples/vendor-ipam/vendor_ipam.c - an example IPAM mode: the
 * "ipam" capability (fibril/ipam.h) served from a static table that says
 * which owner gets which address. Copy it to plug your own address
 * management into fibril: the ipam-api module serves whatever mode provides
 * "ipam" on /v1/ipam and `fibril ipam`, and [providers] ipam = vendor-ipam
 * chooses this one.
 *
 *   [vendor-ipam]
 *   table   = /etc/fibril/vendor-ipam.table   # "owner address" per line
 *   cidr    = 10.0.0.0/24
 *   gateway = 10.0.0.1                        # default: the first address
 *
 * The table is read and checked once, in start: a bad line fails the start
 * with "table FILE:LINE: why". Which table addresses are handed out is kept
 * in memory only: the table is the source of truth, so after a restart an
 * owner that asks again gets the same address, and there is nothing to
 * persist. Everything here runs on the loop thread. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fibril/fibril.h>

/* One line of the table. */
struct entry {
	char owner[FIBRIL_IPAM_OWNER_LEN];
	struct fibril_ip ip;
	char address[FIBRIL_IPAM_ADDR_LEN]; /* canonical text */
	unsigned line;                      /* where it was read, for messages */
	bool allocated;
};

struct vendor_ipam {
	struct fibril_module *m;
	struct fibril_ipam_ops ops;        /* what we provide */
	struct fibril_cidr cidr;           /* the one pool */
	char cidr_text[FIBRIL_IPAM_CIDR_LEN];
	struct fibril_ip gateway;
	char gateway_text[FIBRIL_IPAM_ADDR_LEN];
	struct entry *entries;             /* the table, in file order */
	size_t n_entries;
	uint64_t used;                     /* entries allocated */
};

/* ---- addresses ------------------------------------------------------------- */

static size_t ip_len(const struct fibril_ip *ip)
{
	return ip->family == 4 ? 4 : 16;
}

static bool ip_equal(const struct fibril_ip *a, const struct fibril_ip *b)
{
	return a->family == b->family && !memcmp(a->bytes, b->bytes, ip_len(a));
}

/* True when every host bit (those after prefix_len) of ip equals `bit`. */
static bool host_bits_are(const struct fibril_ip *ip, unsigned prefix_len, int bit)
{
	for (unsigned i = prefix_len; i < ip_len(ip) * 8; i++)
		if (((ip->bytes[i / 8] >> (7 - i % 8)) & 1) != bit)
			return false;
	return true;
}

/* The network address, the IPv4 broadcast address and the gateway are
 * never handed out; says which one ip is, or NULL. */
static const char *reserved_as(const struct vendor_ipam *v, const struct fibril_ip *ip)
{
	if (ip_equal(ip, &v->gateway))
		return "the gateway";
	if (host_bits_are(ip, v->cidr.prefix_len, 0))
		return "the network address";
	if (ip->family == 4 && v->cidr.prefix_len < 31 && host_bits_are(ip, v->cidr.prefix_len, 1))
		return "the broadcast address";
	return NULL;
}

/* The first address after the network address: the default gateway. */
static void first_address(const struct fibril_cidr *cidr, struct fibril_ip *out)
{
	*out = cidr->ip;
	for (size_t i = ip_len(out); i-- > 0;)
		if (++out->bytes[i] != 0)
			break;
}

/* ---- the table --------------------------------------------------------------- */

static struct entry *find_owner(struct vendor_ipam *v, const char *owner)
{
	for (size_t i = 0; i < v->n_entries; i++)
		if (!strcmp(v->entries[i].owner, owner))
			return &v->entries[i];
	return NULL;
}

static struct entry *find_address(struct vendor_ipam *v, const struct fibril_ip *ip)
{
	for (size_t i = 0; i < v->n_entries; i++)
		if (ip_equal(&v->entries[i].ip, ip))
			return &v->entries[i];
	return NULL;
}

/* Check one "owner address" line and fill e; on error write why. */
static int parse_line(struct vendor_ipam *v, char *line, struct entry *e, char *why, size_t len)
{
	char *save = NULL;
	char *owner = strtok_r(line, " \t", &save);
	char *address = strtok_r(NULL, " \t", &save);
	const char *reserved;
	struct entry *dup;

	if (!owner || !address || strtok_r(NULL, " \t", &save)) {
		snprintf(why, len, "expected 'OWNER ADDRESS'");
		return -EINVAL;
	}
	if (strlen(owner) >= sizeof(e->owner)) {
		snprintf(why, len, "owner is longer than %zu bytes", sizeof(e->owner) - 1);
		return -EINVAL;
	}
	if (fibril_ip_parse(address, &e->ip) != 0) {
		snprintf(why, len, "invalid address '%.*s'", FIBRIL_IPAM_ADDR_LEN, address);
		return -EINVAL;
	}
	if (!fibril_cidr_contains(&v->cidr, &e->ip)) {
		snprintf(why, len, "address %s is outside cidr %s", address, v->cidr_text);
		return -EINVAL;
	}
	if ((reserved = reserved_as(v, &e->ip))) {
		snprintf(why, len, "address %s is %s of %s", address, reserved, v->cidr_text);
		return -EINVAL;
	}
	if ((dup = find_owner(v, owner))) {
		snprintf(why, len, "owner %s is listed twice (first on line %u)", owner, dup->line);
		return -EINVAL;
	}
	if ((dup = find_address(v, &e->ip))) {
		snprintf(why, len, "address %s is listed twice (first on line %u)", address, dup->line);
		return -EINVAL;
	}
	snprintf(e->owner, sizeof(e->owner), "%s", owner);
	fibril_ip_format(&e->ip, e->address, sizeof(e->address));
	e->allocated = false;
	return 0;
}

/* Read the whole table; any bad line fails the start with FILE:LINE. */
static int load_table(struct vendor_ipam *v, const char *path)
{
	FILE *f = fopen(path, "r");
	char *line = NULL, why[512];
	size_t cap = 0, room = 0;
	unsigned lineno = 0;
	int rc = 0;

	if (!f) {
		rc = -errno;
		fibril_module_set_error(v->m, "table %s: %s", path, strerror(errno));
		return rc;
	}
	while (getline(&line, &cap, f) >= 0) {
		lineno++;
		line[strcspn(line, "#\r\n")] = '\0'; /* drop comments and the newline */
		if (line[strspn(line, " \t")] == '\0')
			continue;                     /* blank */
		if (v->n_entries == room) {
			size_t grown = room ? 2 * room : 16;
			struct entry *e = realloc(v->entries, grown * sizeof(*e));

			if (!e) {
				rc = -ENOMEM;
				break;
			}
			v->entries = e;
			room = grown;
		}
		struct entry *e = &v->entries[v->n_entries];

		if ((rc = parse_line(v, line, e, why, sizeof(why)))) {
			fibril_module_set_error(v->m, "table %s:%u: %s", path, lineno, why);
			break;
		}
		e->line = lineno;
		v->n_entries++;
	}
	if (!rc && ferror(f)) {
		rc = -EIO;
		fibril_module_set_error(v->m, "table %s: read error", path);
	}
	free(line);
	fclose(f);
	return rc;
}

/* ---- the ipam interface -------------------------------------------------- */

/* Fill what the caller gets back for an entry. */
static void fill_result(const struct vendor_ipam *v, const struct entry *e,
			struct fibril_ipam_result *out)
{
	out->family = e->ip.family;
	snprintf(out->address, sizeof(out->address), "%s", e->address);
	snprintf(out->cidr, sizeof(out->cidr), "%s", v->cidr_text);
	snprintf(out->gateway, sizeof(out->gateway), "%s", v->gateway_text);
}

static bool valid_owner(const char *owner)
{
	return owner && *owner && strlen(owner) < FIBRIL_IPAM_OWNER_LEN;
}

static void allocate(struct vendor_ipam *v, struct entry *e)
{
	if (!e->allocated) {
		e->allocated = true;
		v->used++;
	}
}

/* The owner's table address (the same one again when it already has it). */
static int vi_allocate_next(void *ctx, int family, const char *owner,
			    struct fibril_ipam_result *out, size_t max)
{
	struct vendor_ipam *v = ctx;
	struct entry *e;

	if (!valid_owner(owner) || !out || max < 1 || out->sz < sizeof(*out))
		return -EINVAL;
	if (family != FIBRIL_IPAM_ANY && family != v->cidr.ip.family)
		return -EAFNOSUPPORT;
	if (!(e = find_owner(v, owner))) {
		/* ipam.h has no "unknown owner": to the caller, the pool holds
		 * nothing for this owner. */
		fibril_warn(v->m, "no address in the table for owner %s", owner);
		return -ENOSPC;
	}
	allocate(v, e);
	fill_result(v, e, out);
	return 1;
}

/* A given address: only the owner's own table address. */
static int vi_allocate_ip(void *ctx, const char *address, const char *owner,
			  struct fibril_ipam_result *out)
{
	struct vendor_ipam *v = ctx;
	struct fibril_ip ip;
	struct entry *e;

	if (!valid_owner(owner) || !out || out->sz < sizeof(*out) || !address ||
	    fibril_ip_parse(address, &ip) != 0)
		return -EINVAL;
	if (ip.family != v->cidr.ip.family)
		return -EAFNOSUPPORT;
	if (!fibril_cidr_contains(&v->cidr, &ip) || !(e = find_address(v, &ip)))
		return -ERANGE; /* not an address this mode hands out */
	if (strcmp(e->owner, owner) != 0)
		return -EEXIST; /* the table gives it to someone else */
	allocate(v, e);
	fill_result(v, e, out);
	return 0;
}

static int vi_release_ip(void *ctx, const char *address)
{
	struct vendor_ipam *v = ctx;
	struct fibril_ip ip;
	struct entry *e;

	if (!address || fibril_ip_parse(address, &ip) != 0)
		return -EINVAL;
	if (ip.family != v->cidr.ip.family || !fibril_cidr_contains(&v->cidr, &ip))
		return -ERANGE;
	if (!(e = find_address(v, &ip)) || !e->allocated)
		return -ENOENT;
	e->allocated = false;
	v->used--;
	return 0;
}

static int vi_release_owner(void *ctx, const char *owner)
{
	struct vendor_ipam *v = ctx;
	struct entry *e;

	if (!valid_owner(owner))
		return -EINVAL;
	if (!(e = find_owner(v, owner)) || !e->allocated)
		return 0;
	e->allocated = false;
	v->used--;
	return 1;
}

static int vi_list(void *ctx, fibril_ipam_list_fn cb, void *ud)
{
	struct vendor_ipam *v = ctx;

	if (!cb)
		return -EINVAL;
	for (size_t i = 0; i < v->n_entries; i++)
		if (v->entries[i].allocated && cb(v->entries[i].address, v->entries[i].owner, ud))
			break;
	return 0;
}

/* One pool: the cidr; what can be handed out is what the table lists. */
static int vi_pools(void *ctx, struct fibril_ipam_pool *out, size_t max)
{
	struct vendor_ipam *v = ctx;

	if (!out || max < 1 || out->sz < sizeof(*out))
		return -EINVAL;
	out->family = v->cidr.ip.family;
	snprintf(out->cidr, sizeof(out->cidr), "%s", v->cidr_text);
	snprintf(out->gateway, sizeof(out->gateway), "%s", v->gateway_text);
	out->used = v->used;
	out->total = v->n_entries;
	return 1;
}

/* ---- config ---------------------------------------------------------------- */

/* Checked when the config is read, so a typo is reported with FILE:LINE
 * before anything starts. */
static int check_cidr(const char *value, char *why, size_t len)
{
	struct fibril_cidr c;

	if (fibril_cidr_parse(value, &c) != 0) {
		snprintf(why, len, "expected a CIDR such as 10.0.0.0/24 (no host bits set)");
		return -EINVAL;
	}
	return 0;
}

static int check_address(const char *value, char *why, size_t len)
{
	struct fibril_ip ip;

	if (fibril_ip_parse(value, &ip) != 0) {
		snprintf(why, len, "expected an IPv4 or IPv6 address");
		return -EINVAL;
	}
	return 0;
}

/* The pool and its gateway from [vendor-ipam]. */
static int read_pool_config(struct vendor_ipam *v)
{
	const char *cidr = fibril_config_string(v->m, "cidr");
	const char *gateway = fibril_config_string(v->m, "gateway");

	if (!cidr || fibril_cidr_parse(cidr, &v->cidr) != 0) {
		fibril_module_set_error(v->m, "[vendor-ipam] cidr is not set");
		return -EINVAL;
	}
	fibril_cidr_format(&v->cidr, v->cidr_text, sizeof(v->cidr_text));
	if (gateway && *gateway)
		fibril_ip_parse(gateway, &v->gateway); /* checked by check_address */
	else
		first_address(&v->cidr, &v->gateway);
	fibril_ip_format(&v->gateway, v->gateway_text, sizeof(v->gateway_text));
	if (!fibril_cidr_contains(&v->cidr, &v->gateway) ||
	    host_bits_are(&v->gateway, v->cidr.prefix_len, 0)) {
		fibril_module_set_error(v->m, "[vendor-ipam] gateway %s is not a host address of %s",
					v->gateway_text, v->cidr_text);
		return -EINVAL;
	}
	return 0;
}

/* ---- lifecycle ---------------------------------------------------------------- */

/* init: provide the capability (no I/O yet). */
static int vi_init(struct fibril_module *m)
{
	struct vendor_ipam *v = calloc(1, sizeof(*v));

	if (!v)
		return -ENOMEM;
	v->m = m;
	v->ops = (struct fibril_ipam_ops){
		.hdr = { .sz = sizeof(v->ops), .version = FIBRIL_IPAM_VERSION },
		.allocate_next = vi_allocate_next,
		.allocate_ip = vi_allocate_ip,
		.release_ip = vi_release_ip,
		.release_owner = vi_release_owner,
		.list = vi_list,
		.pools = vi_pools,
	};
	fibril_module_set_data(m, v);
	return fibril_service_provide(m, FIBRIL_IPAM_CAPABILITY, &v->ops.hdr, v);
}

/* start: read the config and the table; consumers start after us. */
static int vi_start(struct fibril_module *m)
{
	struct vendor_ipam *v = fibril_module_data(m);
	const char *table = fibril_config_string(m, "table");
	int rc;

	if (!table || !*table) {
		fibril_module_set_error(m, "[vendor-ipam] table is not set");
		return -EINVAL;
	}
	if ((rc = read_pool_config(v)) || (rc = load_table(v, table)))
		return rc;
	fibril_health_report(m, NULL, FIBRIL_HEALTH_OK, "%zu addresses in the table for %s",
			     v->n_entries, v->cidr_text);
	fibril_info(m, "%zu addresses from %s in %s, gateway %s", v->n_entries, table,
		    v->cidr_text, v->gateway_text);
	return 0;
}

/* stop: forget the allocations and the table (a new start reads it again). */
static void vi_stop(struct fibril_module *m)
{
	struct vendor_ipam *v = fibril_module_data(m);

	free(v->entries);
	v->entries = NULL;
	v->n_entries = 0;
	v->used = 0;
}

static void vi_fini(struct fibril_module *m)
{
	struct vendor_ipam *v = fibril_module_data(m);

	if (v)
		free(v->entries);
	free(v);
	fibril_module_set_data(m, NULL);
}

static int vi_summary(struct fibril_module *m, char *buf, size_t len)
{
	struct vendor_ipam *v = fibril_module_data(m);

	return snprintf(buf, len, "%llu/%zu table addresses allocated in %s",
			(unsigned long long)v->used, v->n_entries, v->cidr_text);
}

static const struct fibril_config_key vi_keys[] = {
	{ .name = "table", .type = FIBRIL_CONFIG_PATH,
	  .help = "The table: one 'OWNER ADDRESS' per line, # starts a comment" },
	{ .name = "cidr", .type = FIBRIL_CONFIG_STRING, .check = check_cidr,
	  .help = "The pool every table address is in, e.g. 10.0.0.0/24" },
	{ .name = "gateway", .type = FIBRIL_CONFIG_STRING, .check = check_address,
	  .help = "The pool's router address (default: the first address of cidr)" },
	{ 0 },
};

FIBRIL_MODULE(.name = "vendor-ipam", .version = "1.0.0",
	      .description = "example ipam mode: a static owner -> address table",
	      .provides = FIBRIL_LIST(FIBRIL_IPAM_CAPABILITY), .config_keys = vi_keys,
	      .init = vi_init, .start = vi_start, .stop = vi_stop, .fini = vi_fini,
	      .summary = vi_summary);
