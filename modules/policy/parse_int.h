/* modules/policy/parse_int.h - the parser's internals, shared by its
 * files (parse.c, parse_selector.c, parse_peer.c, parse_cnp.c,
 * parse_knp.c) and by nothing else (the module, the unit test and the fuzz
 * target see policy_int.h): the parse context, which keeps the first
 * error (one line naming the policy and the field's path), its helpers,
 * and the pieces one file's rules take from another's. */
#ifndef FIBRIL_POLICY_PARSE_INT_H
#define FIBRIL_POLICY_PARSE_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "policy_int.h"

struct json_object;

struct pctx {
	char *err;
	size_t errlen;
	const char *policy; /* its name, for errors */
	bool failed;
	char *warnings; /* the policy being parsed: its warnings ('\n'-separated), or NULL */
};

/* ---- parse.c: the context's helpers */
/* The first failure's message into c->err ("policy 'NAME': PATH: ..."); false. */
bool pol_fail(struct pctx *c, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
char *pol_strdup(const char *s);
/* A warning on the policy being parsed: "PATH: ..." appended to c->warnings. */
void pol_warn(struct pctx *c, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool pol_keys_known(struct pctx *c, struct json_object *o, const char *path,
		    const char *const *allowed);
struct json_object *pol_field(struct json_object *o, const char *k);

/* ---- parse_selector.c */
struct pol_expr *pol_expr_add(struct pol_selector *s);
bool pol_parse_selector(struct pctx *c, struct json_object *o, const char *path,
			struct pol_selector *s);
/* A peer selector naming a label identities leave out: warned (the
 * datapath decides peers by identity, so it selects no pod). */
void pol_peer_selector_check(struct pctx *c, const struct pol_selector *s, const char *path,
			     bool deny);

/* ---- parse_peer.c */
bool pol_cidr_add(struct pctx *c, struct pol_peer *p, struct json_object *v, const char *path);
bool pol_port_entry(struct pctx *c, struct json_object *po, const char *ps, bool knp,
		    struct pol_peer *p);

/* ---- parse_cnp.c: one rule of spec / specs */
bool pol_parse_cnp_rule(struct pctx *c, struct json_object *o, const char *path, struct pol_rule *r);

/* ---- parse_knp.c: a NetworkPolicy's spec, its one rule */
bool pol_parse_knp_spec(struct pctx *c, struct json_object *spec, struct pol_rule *r);

#endif
