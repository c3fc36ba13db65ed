/* modules/lb/lb_int.h - the lb module's internals: the service model (a
 * frontend, its type and options, its backends with their states), the
 * table that gives services and backends stable IDs, the JSON form of a
 * service (parse and print), Maglev table construction, and the
 * programming of the BPF maps (bpf/fibril_lb.h layouts) and their restore.
 * model.c, table.c, maglev.c and maps.c use no host function, so the fuzz
 * target and the benchmark link them alone; lb.c and the other files
 * (lb_mod.h) are the module around them. */
#ifndef FIBRIL_LB_INT_H
#define FIBRIL_LB_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json.h>

#include "fibril_lb.h"

#define LB_NAME_MAX 254
#define LB_SVC_ID_MAX 65535u           /* IDs are 1..65535 (rev-NAT index) */
#define LB_BACKENDS_PER_SVC_MAX 8192u
#define LB_AFFINITY_TIMEOUT_DEFAULT 10800u /* Kubernetes' default, 3 h */
#define LB_AFFINITY_TIMEOUT_MAX 86400u
#define LB_SRC_RANGES_PER_SVC_MAX 256u /* loadBalancerSourceRanges of one service */

/* an address as the maps hold it: 16 bytes, IPv4 mapped */
struct lb_addr {
	uint8_t a[16];
};

/* a prefix as lb_src_range holds it: plen counts the bits of the 16-byte
 * form (an IPv4 /n is 96 + n), the bits past it are zero */
struct lb_cidr {
	struct lb_addr addr;
	uint8_t plen;
};

struct lb_be_spec {
	struct lb_addr addr;
	uint16_t port; /* host order */
	uint8_t state; /* enum lb_backend_state */
	uint32_t id;   /* assigned by the table */
};

/* where a service came from */
enum lb_source {
	LB_SRC_API = 0,
	LB_SRC_K8S = 1,
	LB_SRC_RESTORED = 2, /* from the pins, origin not recorded */
	LB_SRC_HOSTPORT = 3, /* a pod's hostPort (hostport.c); its name is the attachment */
};
/* a source the origins journal records (the others are not known) */
#define LB_SRC_RECORDED(s) ((s) == LB_SRC_API || (s) == LB_SRC_K8S || (s) == LB_SRC_HOSTPORT)

struct lb_svc {
	uint16_t id;           /* 0 in a parsed spec without "id" */
	struct lb_addr addr;
	uint16_t port;         /* host order */
	uint8_t proto;
	uint8_t type;          /* enum lb_svc_type */
	uint8_t algorithm;     /* enum lb_algorithm */
	bool algorithm_set;    /* given in the input (else the module's default) */
	bool affinity;
	bool ext_local, int_local;
	uint32_t affinity_timeout;
	uint8_t source;        /* enum lb_source */
	bool restored;         /* read from the pins at start, not upserted since */
	char name[LB_NAME_MAX + 1]; /* "namespace/name[:port]" or "" */
	size_t nbe;
	struct lb_be_spec *be;
	size_t nranges;          /* loadBalancerSourceRanges ("source-ranges"); */
	struct lb_cidr *ranges;  /* none: every source */
	/* as programmed */
	uint16_t slots;        /* slots written (count + qcount) */
	uint16_t count;        /* selectable */
	bool fallback;         /* the selectable ones are terminating */
};

/* ---- errors, address helpers (model.c) ------------------------------------ */
/* err (len bytes) = the message, made one line; nothing when err is NULL. */
void lb_seterr(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool lb_addr_is_v4(const struct lb_addr *a);
/* "10.0.0.1:80" or "[fd00::1]:80"; 0 or -EINVAL */
int lb_parse_addrport(const char *s, struct lb_addr *addr, uint16_t *port);
/* prints "10.0.0.1:80" / "[fd00::1]:80" */
void lb_format_addrport(const struct lb_addr *a, uint16_t port, char *out, size_t len);
void lb_format_addr(const struct lb_addr *a, char *out, size_t len);
/* "10.0.0.0/8" / "fd00::/64"; 0 or -EINVAL (the host bits are cleared) */
int lb_parse_cidr(const char *s, struct lb_cidr *out);
void lb_format_cidr(const struct lb_cidr *c, char *out, size_t len);
/* Why the address cannot be a backend, as kube-proxy refuses it
 * ("loopback", "link-local", "unspecified", "multicast"), or NULL. The
 * node's own addresses are the module's to check (lb_node_addrs_list). */
const char *lb_backend_addr_refusal(const struct lb_addr *a);
const char *lb_proto_name(uint8_t proto);
const char *lb_type_name(uint8_t type);
const char *lb_state_name(uint8_t state);
const char *lb_algorithm_name(uint8_t alg);
int lb_algorithm_parse(const char *s, uint8_t *out);

/* ---- parsing (model.c) ---------------------------------------------------- */
/* Parses one service from JSON text; 0 and *out (free with lb_svc_free), or
 * -EINVAL with a one-line reason in err. */
int lb_svc_parse(const char *text, size_t len, struct lb_svc **out, char *err, size_t errlen);
int lb_svc_from_json(struct json_object *o, struct lb_svc **out, char *err, size_t errlen);
void lb_svc_free(struct lb_svc *s);
struct json_object *lb_svc_to_json(const struct lb_svc *s);

/* ---- the table: IDs, maps (table.c, maps.c) -------------------------------- */
struct lb_hash; /* fixed-size key -> uint32 */

struct lb_be_ent {
	struct lb_addr addr;
	uint16_t port;
	uint8_t proto;
	uint8_t state;
	uint32_t refs; /* services holding it; 0: free slot */
};

struct lb_maps {
	int services, backends, revnat, maglev, aff_match, src_range; /* fds; -1: absent */
};

struct lb_table {
	struct lb_svc **svc;        /* by ID, LB_SVC_ID_MAX + 1 */
	size_t nsvc;
	struct lb_hash *fe;         /* frontend -> service ID */
	struct lb_be_ent *be;       /* by backend ID, be_max + 1 */
	uint32_t be_max;
	size_t nbe;
	struct lb_hash *beh;        /* (addr, port, proto) -> backend ID */
	uint32_t next_be;           /* where the next backend ID search starts */
	uint16_t next_svc;
	struct lb_maps maps;
	uint32_t maglev_m;
	uint32_t *maglev_buf;       /* M entries */
	void *maglev_scratch;
	const struct lb_be_spec **sel; /* LB_BACKENDS_PER_SVC_MAX, maps.c's scratch */
	uint8_t default_algorithm;
	/* counters */
	uint64_t map_errors;
};

int lb_table_init(struct lb_table *t, uint32_t be_max, uint32_t maglev_m, uint8_t default_alg);
void lb_table_free(struct lb_table *t);
struct lb_svc *lb_table_get(const struct lb_table *t, uint16_t id);
struct lb_svc *lb_table_find(const struct lb_table *t, const struct lb_addr *a, uint16_t port,
			     uint8_t proto);
/* Upsert (takes ownership of *spec on success, sets *spec = NULL): the
 * service keeps its ID when its frontend exists; a given "id" must be free
 * or this frontend's. -EEXIST (duplicate frontend / id taken), -ENOSPC,
 * -EIO (a map write failed; the table is unchanged where it could be
 * undone) with err. On success *out_id is the service's ID. */
int lb_table_upsert(struct lb_table *t, struct lb_svc **spec, uint16_t *out_id, char *err,
		    size_t errlen);
int lb_table_delete(struct lb_table *t, uint16_t id, char *err, size_t errlen);
/* Rebuilds the table from the maps (before anything is programmed).
 * Returns the number of services restored; problems counted in *skipped
 * and the first described in err. */
int lb_table_restore(struct lb_table *t, size_t *skipped, char *err, size_t errlen);

/* ---- maps (maps.c) ---------------------------------------------------------- */
int lb_maps_program(struct lb_table *t, struct lb_svc *s, const struct lb_svc *old, char *err,
		    size_t errlen);
int lb_maps_unprogram(struct lb_table *t, const struct lb_svc *s, char *err, size_t errlen);
int lb_maps_backend_put(struct lb_table *t, uint32_t id, char *err, size_t errlen);
void lb_maps_backend_del(struct lb_table *t, uint32_t id);
void lb_svc_key_of(const struct lb_svc *s, uint16_t slot, struct lb_svc_key *k);

/* ---- maglev (maglev.c) ------------------------------------------------------ */
/* Is m a usable table size (a prime, 7..LB_MAGLEV_MAX)? */
bool lb_maglev_size_ok(uint64_t m);
void *lb_maglev_scratch_new(size_t max_backends);
void lb_maglev_scratch_free(void *scratch);
/* Fills out[m] with backend IDs; backends are named by (addr, port) so that
 * the table depends on the set, not on its order. n >= 1, n <= the
 * scratch's max. */
int lb_maglev_build(const struct lb_be_spec *const *be, size_t n, uint32_t m, uint32_t *out,
		    void *scratch);

/* ---- origins (model.c: the record; origin.c: the journal) ------------------ */
/* What the pins cannot say about a frontend - where it came from and its
 * name - kept in <state-dir>/lb/origins.journal, one record per change:
 * [version 1][op][source][proto][id u16][port u16][addr 16][name...]. */
enum lb_origin_op { LB_ORIGIN_SET = 1, LB_ORIGIN_DELETED = 2 };
#define LB_ORIGIN_HDR 24
struct lb_origin_rec {
	uint8_t op;     /* enum lb_origin_op */
	uint8_t source; /* LB_SRC_API or LB_SRC_K8S */
	uint8_t proto;
	uint16_t id;
	uint16_t port;
	struct lb_addr addr;
	char name[LB_NAME_MAX + 1];
};
/* Writes rec's encoding into out (LB_ORIGIN_HDR + LB_NAME_MAX bytes);
 * returns its length. */
size_t lb_origin_encode(const struct lb_origin_rec *rec, uint8_t *out);
/* 0, or -EINVAL with a one-line reason (a bad length, op, source, name). */
int lb_origin_decode(const void *buf, size_t len, struct lb_origin_rec *out, char *err,
		     size_t errlen);
/* The 24-byte key of a frontend in the table's and the origins' hashes
 * (table.c). */
void lb_frontend_key(uint8_t key[24], const struct lb_addr *a, uint16_t port, uint8_t proto);

/* ---- the hash (table.c) ------------------------------------------------------ */
struct lb_hash *lb_hash_new(size_t cap);
void lb_hash_free(struct lb_hash *h);
bool lb_hash_get(const struct lb_hash *h, const void *key24, uint32_t *val);
int lb_hash_put(struct lb_hash *h, const void *key24, uint32_t val);
void lb_hash_del(struct lb_hash *h, const void *key24);

#endif
