/* modules/common/http_parse.c - the HTTP/1.1 wire format of http_parse.h:
 * the incremental response parser (lines are gathered in a bounded buffer,
 * body bytes go straight to the caller's callback, chunked bodies are
 * decoded, chunk extensions and trailers skipped), the request head
 * writer and percent-encoding. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_parse.h"

void mod_http_parser_init(struct mod_http_parser *p)
{
	memset(p, 0, sizeof(*p));
	p->state = MOD_HTTP_STATUS;
}

static int fail(struct mod_http_parser *p, const char *why)
{
	p->state = MOD_HTTP_ERROR;
	p->error = why;
	return -1;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t';
}

/* Trim blanks at both ends, in place. */
static char *trim(char *s, size_t *len)
{
	while (*len && is_space(*s)) {
		s++;
		(*len)--;
	}
	while (*len && is_space(s[*len - 1]))
		(*len)--;
	s[*len] = '\0';
	return s;
}

/* "HTTP/1.1 200 OK" */
static int parse_status(struct mod_http_parser *p, char *line)
{
	if (strncmp(line, "HTTP/1.", 7) != 0 || (line[7] != '0' && line[7] != '1') || line[8] != ' ')
		return fail(p, "not an HTTP/1.x status line");
	char *s = line + 9;
	if (s[0] < '1' || s[0] > '5' || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9' ||
	    (s[3] != '\0' && s[3] != ' '))
		return fail(p, "bad status code");
	p->status = (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
	p->http10 = line[7] == '0';
	p->chunked = p->has_length = p->gzip = false;
	p->close = p->http10;
	p->state = MOD_HTTP_HEADER;
	return 0;
}

/* A decimal or hexadecimal number filling s; false if not one or too big. */
static bool parse_number(const char *s, size_t len, unsigned base, uint64_t *out)
{
	uint64_t v = 0;
	if (!len)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned d;
		char c = s[i];
		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (base == 16 && c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (base == 16 && c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			return false;
		if (v > (UINT64_MAX - d) / base)
			return false;
		v = v * base + d;
	}
	*out = v;
	return true;
}

/* Does a comma-separated header value hold token (case-insensitive)? */
static bool has_token(const char *value, const char *token)
{
	size_t tl = strlen(token);
	for (const char *s = value; *s;) {
		while (*s == ',' || is_space(*s))
			s++;
		size_t n = strcspn(s, ",");
		size_t end = n;
		while (end && is_space(s[end - 1]))
			end--;
		if (end == tl && strncasecmp(s, token, tl) == 0)
			return true;
		s += n;
	}
	return false;
}

/* The blank line after the headers: how the body is framed. */
static int headers_done(struct mod_http_parser *p)
{
	if (p->status < 200) { /* 1xx: an interim answer; the real one follows */
		p->state = MOD_HTTP_STATUS;
		return 0;
	}
	p->head_done = true;
	if (p->head_request || p->status == 204 || p->status == 304) {
		p->state = MOD_HTTP_DONE;
		return 0;
	}
	if (p->chunked) {
		p->state = MOD_HTTP_CHUNK_SIZE;
		return 0;
	}
	if (p->has_length) {
		p->state = p->remaining ? MOD_HTTP_BODY_LEN : MOD_HTTP_DONE;
		return 0;
	}
	p->close = true; /* the body ends with the connection */
	p->state = MOD_HTTP_BODY_EOF;
	return 0;
}

static int parse_header(struct mod_http_parser *p, char *line, size_t len)
{
	if (!len)
		return headers_done(p);
	if (is_space(line[0]))
		return fail(p, "obsolete header line folding");
	char *colon = memchr(line, ':', len);
	if (!colon || colon == line)
		return fail(p, "header line without a name");
	size_t name_len = (size_t)(colon - line);
	while (name_len && is_space(line[name_len - 1]))
		name_len--; /* "Name :" (RFC 9112 5.1: a server refuses it, a client may read it) */
	if (!name_len)
		return fail(p, "header line without a name");
	for (size_t i = 0; i < name_len; i++)
		if (line[i] <= ' ' || line[i] == 0x7f)
			return fail(p, "bad character in a header name");
	size_t vlen = len - (size_t)(colon - line) - 1;
	char *value = trim(colon + 1, &vlen);
	if (name_len == 14 && strncasecmp(line, "Content-Length", 14) == 0) {
		uint64_t v;
		if (!parse_number(value, vlen, 10, &v))
			return fail(p, "bad Content-Length");
		if (p->has_length && v != p->remaining)
			return fail(p, "conflicting Content-Length headers");
		p->has_length = true;
		p->remaining = v;
	} else if (name_len == 17 && strncasecmp(line, "Transfer-Encoding", 17) == 0) {
		if (vlen < 7 || strcasecmp(value + vlen - 7, "chunked") != 0)
			return fail(p, "unsupported Transfer-Encoding");
		p->chunked = true;
	} else if (name_len == 16 && strncasecmp(line, "Content-Encoding", 16) == 0) {
		p->gzip = strcasecmp(value, "gzip") == 0 || strcasecmp(value, "x-gzip") == 0;
	} else if (name_len == 10 && strncasecmp(line, "Connection", 10) == 0) {
		if (has_token(value, "close"))
			p->close = true;
		else if (has_token(value, "keep-alive"))
			p->close = false;
	}
	if (p->chunked && p->has_length)
		p->has_length = false; /* RFC 9112 6.3: chunked wins, and the length is ignored */
	return 0;
}

/* "1a;ext=1" */
static int parse_chunk_size(struct mod_http_parser *p, char *line, size_t len)
{
	size_t n = strcspn(line, ";");
	if (n > len)
		n = len;
	char *size = trim(line, &n);
	if (!parse_number(size, n, 16, &p->remaining))
		return fail(p, "bad chunk size");
	p->state = p->remaining ? MOD_HTTP_CHUNK_DATA : MOD_HTTP_TRAILER;
	return 0;
}

/* A complete line (CRLF or LF stripped) in the current state. */
static int handle_line(struct mod_http_parser *p, char *line, size_t len)
{
	switch (p->state) {
	case MOD_HTTP_STATUS:
		return parse_status(p, line);
	case MOD_HTTP_HEADER:
		return parse_header(p, line, len);
	case MOD_HTTP_CHUNK_SIZE:
		return parse_chunk_size(p, line, len);
	case MOD_HTTP_CHUNK_END:
		if (len)
			return fail(p, "chunk data longer than its size");
		p->state = MOD_HTTP_CHUNK_SIZE;
		return 0;
	case MOD_HTTP_TRAILER:
		if (!len)
			p->state = MOD_HTTP_DONE;
		return 0;
	default:
		return fail(p, "internal: line in a body state");
	}
}

static bool line_state(enum mod_http_state s)
{
	return s == MOD_HTTP_STATUS || s == MOD_HTTP_HEADER || s == MOD_HTTP_CHUNK_SIZE ||
	       s == MOD_HTTP_CHUNK_END || s == MOD_HTTP_TRAILER;
}

int mod_http_parser_feed(struct mod_http_parser *p, const char *data, size_t n, size_t *used,
		    mod_http_body_fn body, void *ud)
{
	size_t i = 0;
	int rc = 0;
	while (i < n && p->state != MOD_HTTP_DONE && p->state != MOD_HTTP_ERROR) {
		if (line_state(p->state)) {
			const char *nl = memchr(data + i, '\n', n - i);
			size_t take = nl ? (size_t)(nl - (data + i)) : n - i;
			bool in_head = p->state == MOD_HTTP_STATUS || p->state == MOD_HTTP_HEADER ||
				       p->state == MOD_HTTP_TRAILER;
			if (p->line_len + take >= sizeof(p->line)) {
				rc = fail(p, "line too long");
				break;
			}
			if (in_head && (p->head_bytes += take + 1) > MOD_HTTP_MAX_HEAD) {
				rc = fail(p, "headers too long");
				break;
			}
			memcpy(p->line + p->line_len, data + i, take);
			p->line_len += take;
			i += take;
			if (!nl)
				break;
			i++; /* the '\n' */
			size_t len = p->line_len;
			if (len && p->line[len - 1] == '\r')
				len--;
			p->line[len] = '\0';
			p->line_len = 0;
			if (memchr(p->line, '\0', len)) {
				rc = fail(p, "NUL byte in a header line");
				break;
			}
			if ((rc = handle_line(p, p->line, len)) < 0)
				break;
			continue;
		}
		size_t take = n - i;
		if (p->state != MOD_HTTP_BODY_EOF && take > p->remaining)
			take = (size_t)p->remaining;
		if (take && body && body(ud, data + i, take)) {
			rc = fail(p, "the body callback refused it");
			break;
		}
		i += take;
		if (p->state == MOD_HTTP_BODY_EOF)
			continue;
		p->remaining -= take;
		if (!p->remaining)
			p->state = p->state == MOD_HTTP_CHUNK_DATA ? MOD_HTTP_CHUNK_END : MOD_HTTP_DONE;
	}
	*used = i;
	if (p->state == MOD_HTTP_ERROR)
		return -1;
	(void)rc;
	return p->state == MOD_HTTP_DONE ? 1 : 0;
}

int mod_http_parser_eof(struct mod_http_parser *p)
{
	if (p->state == MOD_HTTP_DONE)
		return 1;
	if (p->state == MOD_HTTP_BODY_EOF) {
		p->state = MOD_HTTP_DONE;
		return 1;
	}
	if (p->state != MOD_HTTP_ERROR)
		fail(p, p->state == MOD_HTTP_STATUS && !p->status ? "the connection closed without an answer"
							       : "the connection closed in the middle of the answer");
	return -1;
}

/* A part of the head: no line break or NUL inside. */
static bool head_safe(const char *s)
{
	return s && !s[strcspn(s, "\r\n")];
}

int mod_http_write_head(char **out, size_t *len, const char *method, const char *path,
			const char *host, const char *const *headers, bool with_length,
			size_t body_len)
{
	*out = NULL;
	*len = 0;
	if (!head_safe(method) || !head_safe(path) || !head_safe(host) || !*method || !*path)
		return -EINVAL;
	size_t need = strlen(method) + strlen(path) + strlen(host) + 64;
	for (const char *const *h = headers; h && *h; h++) {
		if (!head_safe(*h))
			return -EINVAL;
		need += strlen(*h) + 2;
	}
	char *buf = malloc(need);
	if (!buf)
		return -ENOMEM;
	size_t n = (size_t)snprintf(buf, need, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path, host);
	for (const char *const *h = headers; h && *h; h++) {
		size_t hl = strlen(*h);
		memcpy(buf + n, *h, hl);
		memcpy(buf + n + hl, "\r\n", 2);
		n += hl + 2;
	}
	if (with_length)
		n += (size_t)snprintf(buf + n, need - n, "Content-Length: %zu\r\n", body_len);
	memcpy(buf + n, "\r\n", 3);
	*out = buf;
	*len = n + 2;
	return 0;
}

char *mod_http_escape(const char *s)
{
	return mod_http_escape_keep(s, "");
}

char *mod_http_escape_keep(const char *s, const char *keep)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(strlen(s) * 3 + 1), *o = out;
	if (!out)
		return NULL;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    *p == '-' || *p == '.' || *p == '_' || *p == '~' || (*p && strchr(keep, *p))) {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = hex[*p >> 4];
			*o++ = hex[*p & 15];
		}
	}
	*o = '\0';
	return out;
}
