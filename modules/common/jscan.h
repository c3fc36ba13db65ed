/* modules/common/jscan.h - a small JSON scanner for hot paths (the etcd
 * gateway's range answers, the ipcache's records): it walks a document in
 * place, without building objects, and hands strings over as pointers into
 * the text. It understands a strict subset: a string with an escape or a
 * control byte, a number that is not a plain integer, or anything else
 * unexpected makes it fail, and the caller then reads the document with
 * its full JSON parser (json-c) as before, so the answer never depends on
 * which path read it. Header-only (static inline). */
#ifndef FIBRIL_MOD_JSCAN_H
#define FIBRIL_MOD_JSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct mod_jscan {
	const char *p, *end;
	bool first; /* no member / element read yet in the current container */
};

static inline void mod_jscan_init(struct mod_jscan *s, const char *text, size_t len)
{
	s->p = text;
	s->end = text + len;
	s->first = true;
}

static inline void mod_jscan_ws(struct mod_jscan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
		s->p++;
}

/* the next byte after white space is c: consume it */
static inline bool mod_jscan_eat(struct mod_jscan *s, char c)
{
	mod_jscan_ws(s);
	if (s->p < s->end && *s->p == c) {
		s->p++;
		return true;
	}
	return false;
}

/* only white space left */
static inline bool mod_jscan_at_end(struct mod_jscan *s)
{
	mod_jscan_ws(s);
	return s->p == s->end;
}

/* a string without escapes or control bytes: *v points into the text */
static inline bool mod_jscan_string(struct mod_jscan *s, const char **v, size_t *len)
{
	if (!mod_jscan_eat(s, '"'))
		return false;
	const char *start = s->p;
	while (s->p < s->end && *s->p != '"') {
		unsigned char c = (unsigned char)*s->p;
		if (c == '\\' || c < 0x20 || c == 0x7f)
			return false;
		s->p++;
	}
	if (s->p >= s->end)
		return false;
	*v = start;
	*len = (size_t)(s->p - start);
	s->p++;
	return true;
}

/* a plain integer (at most 18 digits), bare or in a string as the etcd
 * gateway writes its int64 fields */
static inline bool mod_jscan_int(struct mod_jscan *s, int64_t *v, bool *quoted)
{
	mod_jscan_ws(s);
	bool q = s->p < s->end && *s->p == '"';
	if (q)
		s->p++;
	bool neg = s->p < s->end && *s->p == '-';
	if (neg)
		s->p++;
	int64_t n = 0;
	int digits = 0;
	while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
		if (++digits > 18 || (digits == 2 && n == 0))
			return false; /* too long, or a leading zero */
		n = n * 10 + (*s->p - '0');
		s->p++;
	}
	if (!digits)
		return false;
	if (q && !mod_jscan_eat(s, '"'))
		return false;
	if (!q && s->p < s->end && (*s->p == '.' || *s->p == 'e' || *s->p == 'E'))
		return false;
	*v = neg ? -n : n;
	if (quoted)
		*quoted = q;
	return true;
}

static inline bool mod_jscan_word(struct mod_jscan *s, const char *w)
{
	size_t n = strlen(w);
	mod_jscan_ws(s);
	if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n))
		return false;
	s->p += n;
	return true;
}

static inline bool mod_jscan_bool(struct mod_jscan *s, bool *v)
{
	if (mod_jscan_word(s, "true"))
		*v = true;
	else if (mod_jscan_word(s, "false"))
		*v = false;
	else
		return false;
	return true;
}

/* '{' or '[' opens a container: members / elements follow */
static inline bool mod_jscan_open(struct mod_jscan *s, char c)
{
	s->first = true;
	return mod_jscan_eat(s, c);
}

/* The next member of an object: 1 (its name in *key, positioned at its
 * value), 0 at the closing '}', -1 when that is not what follows. */
static inline int mod_jscan_member(struct mod_jscan *s, const char **key, size_t *klen)
{
	if (mod_jscan_eat(s, '}')) {
		s->first = false; /* the parent has one more value read */
		return 0;
	}
	if (!s->first && !mod_jscan_eat(s, ','))
		return -1;
	s->first = false;
	if (!mod_jscan_string(s, key, klen) || !mod_jscan_eat(s, ':'))
		return -1;
	return 1;
}

/* The next element of an array: 1 (positioned at it), 0 at ']', -1. */
static inline int mod_jscan_element(struct mod_jscan *s)
{
	if (mod_jscan_eat(s, ']')) {
		s->first = false;
		return 0;
	}
	if (!s->first && !mod_jscan_eat(s, ','))
		return -1;
	s->first = false;
	return 1;
}

/* Skip one value of any kind the scanner understands (depth-limited). */
static inline bool mod_jscan_skip_depth(struct mod_jscan *s, int depth)
{
	const char *k;
	size_t kl;
	int64_t n;
	bool b;
	if (depth > 32)
		return false;
	mod_jscan_ws(s);
	if (s->p >= s->end)
		return false;
	switch (*s->p) {
	case '"':
		return mod_jscan_string(s, &k, &kl);
	case '{': {
		int r;
		mod_jscan_open(s, '{');
		while ((r = mod_jscan_member(s, &k, &kl)) == 1) {
			if (!mod_jscan_skip_depth(s, depth + 1))
				return false;
		}
		return r == 0;
	}
	case '[': {
		int r;
		mod_jscan_open(s, '[');
		while ((r = mod_jscan_element(s)) == 1) {
			if (!mod_jscan_skip_depth(s, depth + 1))
				return false;
		}
		return r == 0;
	}
	case 't':
	case 'f':
		return mod_jscan_bool(s, &b);
	case 'n':
		return mod_jscan_word(s, "null");
	default:
		return mod_jscan_int(s, &n, NULL);
	}
}

static inline bool mod_jscan_skip(struct mod_jscan *s)
{
	return mod_jscan_skip_depth(s, 0);
}

/* the member's name is the literal lit */
#define MOD_JSCAN_IS(key, klen, lit) ((klen) == sizeof(lit) - 1 && !memcmp((key), (lit), (klen)))

#endif
