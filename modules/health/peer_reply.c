/* modules/health/peer_reply.c - the parser of a peer health responder's
 * HTTP reply (the prober reads it from the network, so it is fuzzed:
 * tests/fuzz/fuzz_health_reply.c): an HTTP/1.x status line, headers, and
 * a JSON body {"node": NAME, "peers": {NAME: bool, ...}}. */
#include "health.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <json.h>

static const char *find_crlfcrlf(const char *buf, size_t len)
{
	for (size_t i = 0; i + 3 < len; i++)
		if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n')
			return buf + i;
	return NULL;
}

/* Content-Length of the header block [h, end), -1 when absent, -2 when bad. */
static long long content_length(const char *h, const char *end)
{
	static const char name[] = "content-length:";
	long long found = -1;
	for (const char *line = h; line < end;) {
		const char *eol = memchr(line, '\n', (size_t)(end - line));
		if (!eol)
			eol = end;
		size_t n = (size_t)(eol - line);
		if (n > sizeof(name) - 1 && !strncasecmp(line, name, sizeof(name) - 1)) {
			const char *v = line + sizeof(name) - 1;
			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			long long x = 0;
			int digits = 0;
			while (v < eol && isdigit((unsigned char)*v) && digits < 10) {
				x = x * 10 + (*v++ - '0');
				digits++;
			}
			while (v < eol && (*v == ' ' || *v == '\t' || *v == '\r'))
				v++;
			if (!digits || v != eol || (found >= 0 && found != x))
				return -2;
			found = x;
		}
		line = eol + 1;
	}
	return found;
}

static int body_parse(const char *body, size_t len, struct health_reply *out, char *err,
		      size_t errlen)
{
	struct json_tokener *tok = json_tokener_new_ex(8);
	if (!tok) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	struct json_object *o = len ? json_tokener_parse_ex(tok, body, (int)len) : NULL;
	bool complete = o != NULL;
	for (size_t i = o ? (size_t)tok->char_offset : len; i < len; i++)
		if (body[i] != ' ' && body[i] != '\t' && body[i] != '\r' && body[i] != '\n')
			complete = false; /* something after the document */
	json_tokener_free(tok);
	int rc = -1;
	struct json_object *node, *peers;
	if (!complete)
		snprintf(err, errlen, "the body is not one JSON document");
	else if (!json_object_is_type(o, json_type_object) ||
		 !json_object_object_get_ex(o, "node", &node) ||
		 !json_object_is_type(node, json_type_string))
		snprintf(err, errlen, "the body has no \"node\" string");
	else if (json_object_get_string_len(node) == 0 ||
		 (size_t)json_object_get_string_len(node) >= sizeof(out->node) ||
		 strlen(json_object_get_string(node)) != (size_t)json_object_get_string_len(node))
		snprintf(err, errlen, "\"node\" is empty, too long or holds a NUL");
	else {
		snprintf(out->node, sizeof(out->node), "%s", json_object_get_string(node));
		rc = 1;
		out->n_row = 0;
		if (json_object_object_get_ex(o, "peers", &peers)) {
			if (!json_object_is_type(peers, json_type_object)) {
				snprintf(err, errlen, "\"peers\" is not an object");
				rc = -1;
			} else {
				json_object_object_foreach(peers, k, v) {
					if (!json_object_is_type(v, json_type_boolean) || !*k ||
					    strlen(k) >= HEALTH_NAME_LEN) {
						snprintf(err, errlen,
							 "\"peers\" holds a bad entry (a name of 1..%d "
							 "characters to true or false)", HEALTH_NAME_LEN - 1);
						rc = -1;
						break;
					}
					if (out->row && out->n_row < out->max_row) {
						struct health_row_entry *e = &out->row[out->n_row++];
						snprintf(e->name, sizeof(e->name), "%s", k);
						e->reachable = json_object_get_boolean(v);
					}
				}
			}
		}
	}
	json_object_put(o);
	return rc;
}

int health_reply_parse(const char *buf, size_t len, bool eof, struct health_reply *out,
		       char *err, size_t errlen)
{
	out->status = 0;
	out->node[0] = '\0';
	out->n_row = 0;
	if (len > HEALTH_REPLY_MAX) {
		snprintf(err, errlen, "the reply is over %d bytes", HEALTH_REPLY_MAX);
		return -1;
	}
	const char *hend = find_crlfcrlf(buf, len);
	if (!hend) {
		if (eof) {
			snprintf(err, errlen, "the reply ends before its headers do");
			return -1;
		}
		return 0;
	}
	/* status line: HTTP/1.x NNN reason */
	if (len < 12 || memcmp(buf, "HTTP/1.", 7) || (buf[7] != '0' && buf[7] != '1') ||
	    buf[8] != ' ' || !isdigit((unsigned char)buf[9]) || !isdigit((unsigned char)buf[10]) ||
	    !isdigit((unsigned char)buf[11]) || (buf + 12 < hend && buf[12] != ' ' && buf[12] != '\r')) {
		snprintf(err, errlen, "the reply does not start with an HTTP/1.x status line");
		return -1;
	}
	out->status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
	const char *h = memchr(buf, '\n', (size_t)(hend - buf) + 2);
	h = h ? h + 1 : hend;
	long long cl = content_length(h, hend + 2);
	if (cl == -2) {
		snprintf(err, errlen, "the reply has a bad Content-Length");
		return -1;
	}
	const char *body = hend + 4;
	size_t have = len - (size_t)(body - buf);
	size_t blen;
	if (cl >= 0) {
		if (have < (size_t)cl) {
			if (eof) {
				snprintf(err, errlen, "the body ends after %zu of %lld bytes", have, cl);
				return -1;
			}
			return 0;
		}
		blen = (size_t)cl;
	} else {
		if (!eof)
			return 0;
		blen = have;
	}
	if (out->status != 200) {
		snprintf(err, errlen, "the responder answered HTTP %d", out->status);
		return -1;
	}
	return body_parse(body, blen, out, err, errlen);
}
