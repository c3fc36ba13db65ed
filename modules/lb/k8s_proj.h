/* modules/lb/k8s_proj.h - a Kubernetes Service or EndpointSlice as the lb
 * module keeps it (k8s_proj.c builds them, k8s.c programs them): a
 * projection reduced to the fields lb reads, each in one allocation of
 * fixed-size records (addresses already parsed, states already decided)
 * followed by the few strings it needs. Two projections are equal when
 * their bytes are (padding is zeroed), so an event that changes nothing lb
 * reads reprograms nothing. Each also carries the keyed hash of the JSON
 * text it was made from (not part of the comparison), so the same text met
 * again - the informer's cache listed at the sync, then the queued event of
 * the same object - is recognized without parsing it a second time. */
#ifndef FIBRIL_LB_K8S_PROJ_H
#define FIBRIL_LB_K8S_PROJ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lb_int.h"

#define K8S_PORT_NAME_MAX 63 /* a DNS label, as the API validates port names */

/* a Service's or an EndpointSlice's port */
struct k8s_port {
	int32_t port;       /* slice: -1 absent or not an integer, 0 out of range */
	uint16_t node_port; /* Service: 0 none */
	uint8_t proto;      /* IPPROTO_*; 0: not TCP, UDP or SCTP */
	uint8_t name_len;
	uint32_t name_off;  /* into the projection's strings */
};

struct k8s_svc_proj {
	uint64_t text_hash; /* of the JSON text (not compared) */
	uint32_t size;      /* bytes of the whole projection */
	uint8_t nodeport, lbtype, itp_local, etp_local, affinity, want4, want6, invalid;
	uint32_t affinity_timeout;
	uint16_t nports, ncips, neips, ningress, nranges, why_len;
	/* then: struct k8s_port ports[nports];
	 * struct lb_addr cips[ncips], eips[neips], ingress[ningress];
	 * struct lb_cidr ranges[nranges]; char strings[] (port names; an invalid one: the reason) */
};

/* an endpoint address of a slice, of the slice's family */
struct k8s_ep {
	struct lb_addr addr;
	uint8_t state; /* enum lb_backend_state */
	uint8_t local; /* on this node */
};

struct k8s_slice_proj {
	uint64_t text_hash; /* of the JSON text (not compared) */
	uint32_t size;
	uint8_t family;     /* 4, 6; 0: another addressType (no backends) */
	uint16_t name_len;  /* the slice's name is strings[0 .. name_len) */
	uint16_t nports;
	uint32_t neps;
	/* then: struct k8s_port ports[nports]; struct k8s_ep eps[neps];
	 * char strings[] (the slice's name, port names) */
};

/* The parts of a projection. */
const struct k8s_port *k8s_svc_ports(const struct k8s_svc_proj *p);
const struct lb_addr *k8s_svc_cips(const struct k8s_svc_proj *p);
const struct lb_addr *k8s_svc_eips(const struct k8s_svc_proj *p);
const struct lb_addr *k8s_svc_ingress(const struct k8s_svc_proj *p);
const struct lb_cidr *k8s_svc_ranges(const struct k8s_svc_proj *p);
const char *k8s_svc_strings(const struct k8s_svc_proj *p);
const struct k8s_port *k8s_slice_ports(const struct k8s_slice_proj *p);
const struct k8s_ep *k8s_slice_eps(const struct k8s_slice_proj *p);
const char *k8s_slice_strings(const struct k8s_slice_proj *p);
/* Does port q of a projection whose strings are at strs have this name? */
bool k8s_port_named(const struct k8s_port *q, const char *strs, const char *name, size_t len);

/* A Service object (its "spec", "status") projected; NULL when it has no
 * spec object or memory ran out (*no_spec says which). A spec lb cannot
 * program gives a projection with invalid set and the reason as its
 * strings' last why_len bytes. */
struct k8s_svc_proj *k8s_svc_project(struct json_object *svc, bool *no_spec);
/* An EndpointSlice object projected (name: its metadata.name; node: this
 * node's name, for "local"); NULL when memory ran out. */
struct k8s_slice_proj *k8s_slice_project(struct json_object *slice, const char *name,
					 const char *node);
/* An endpoint address refused as a backend (kube-proxy's rules: loopback,
 * link-local, the node's own), as k8s_slice_scan reports it. */
struct k8s_refusal {
	struct lb_addr addr;
	const char *why;  /* the reason, from the refuser */
	char text[64];    /* the address as the slice wrote it */
};
/* Decides refusals: the reason an address is refused, or NULL. */
struct k8s_refuser {
	const char *(*refusal)(const struct lb_addr *a, void *ud);
	void *ud;
};
struct k8s_slice_scanned {
	struct k8s_slice_proj *proj;  /* malloc'ed, text_hash 0 */
	bool has_service;             /* metadata.labels["kubernetes.io/service-name"] */
	char service[LB_NAME_MAX + 1];
	struct k8s_refusal *refused;  /* malloc'ed, in the order json-c's path finds them */
	size_t nrefused;
};
/* An EndpointSlice's text (len bytes) projected in place (k8s_scan.c),
 * the addresses rf refuses left out and reported: 0, or -1 when the text is
 * not in the shape the scanner reads (then project it with json-c:
 * k8s_slice_project; the result would be the same) or -ENOMEM. */
int k8s_slice_scan(const char *text, size_t len, const char *name, const char *node,
		   const struct k8s_refuser *rf, struct k8s_slice_scanned *out);
/* A Service's text projected in place (k8s_scan.c): 0 and *out, or -1
 * when the scanner does not read it - not the shape the API server
 * writes, or a Service lb refuses as invalid (then k8s_svc_project reads
 * it, to the same bytes, and words the reason) - or -ENOMEM. */
int k8s_svc_scan(const char *text, size_t len, struct k8s_svc_proj **out);
/* An object's metadata.name (required) and metadata.namespace ("" when
 * absent or null) read in place, each at most size - 1 bytes; false: not
 * read (json-c's path reads it). */
bool k8s_meta_scan(const char *text, size_t len, char *ns, size_t ns_size, char *name,
		   size_t name_size);
/* an IP address (no port) */
bool k8s_ip_of(const char *s, struct lb_addr *a);

/* Same fields for lb (text hashes aside)? */
bool k8s_svc_proj_same(const struct k8s_svc_proj *a, const struct k8s_svc_proj *b);
bool k8s_slice_proj_same(const struct k8s_slice_proj *a, const struct k8s_slice_proj *b);

/* The keyed 64-bit hash of an object's JSON text (the key drawn once per
 * process, so that no API object can be made to collide on purpose); never 0. */
uint64_t k8s_text_hash(const char *text);

/* A multiset of text hashes: the texts the projections were made from. */
struct k8s_hash_set {
	uint64_t *slot; /* 0: empty */
	size_t mask, n;
};
int k8s_hash_set_add(struct k8s_hash_set *s, uint64_t h);
bool k8s_hash_set_has(const struct k8s_hash_set *s, uint64_t h);
void k8s_hash_set_del(struct k8s_hash_set *s, uint64_t h); /* one of them */
void k8s_hash_set_free(struct k8s_hash_set *s);

#endif
