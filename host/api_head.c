/* host/api_head.c - the check of a request head (request line and header
 * fields) before libwebsockets sees it: what lws 4.1 gives up on without
 * a word (a percent-encoded NUL, a header block past its buffer, a request
 * line that is not HTTP) is refused here with the status and the one-line
 * message the client gets as JSON. Pure: bytes in, a verdict out (the
 * connections are api_accept.c's). */
#include "api_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const known_methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"};

static enum api_head_result refuse(struct api_head_verdict *v, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static enum api_head_result refuse(struct api_head_verdict *v, int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(v->msg, sizeof(v->msg), fmt, ap);
	va_end(ap);
	v->status = status;
	return API_HEAD_REFUSED;
}

static bool is_hex(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int hex_value(unsigned char c)
{
	return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

/* The method: 1-15 upper-case letters then a space. MORE while it may still
 * be one. */
static enum api_head_result check_method(const char *buf, size_t len, size_t *end,
					 struct api_head_verdict *v)
{
	size_t i = 0;
	while (i < len && buf[i] >= 'A' && buf[i] <= 'Z' && i < 15)
		i++;
	if (i == len)
		return API_HEAD_MORE;
	if (i == 0 || buf[i] != ' ')
		return refuse(v, 400, "malformed request line: expected METHOD /path HTTP/1.1");
	memcpy(v->method, buf, i);
	v->method[i] = '\0';
	*end = i;
	return API_HEAD_OK;
}

/* The request target, buf[0..len): an origin form ("/path?query") whose
 * escapes are well-formed and decode to no NUL (lws drops the connection
 * on one in the path; one in the query cut a value short). */
static enum api_head_result check_target(const char *buf, size_t len, struct api_head_verdict *v)
{
	if (len == 0 || buf[0] != '/')
		return refuse(v, 400, "malformed request line: the target must start with '/'");
	bool query = false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)buf[i];
		const char *part = query ? "query" : "path";
		if (c == '?')
			query = true;
		if (c < 0x21 || c == 0x7f)
			return refuse(v, 400, "%s: control character 0x%02x at byte %zu", part, c, i);
		if (c != '%')
			continue;
		if (i + 2 >= len || !is_hex((unsigned char)buf[i + 1]) || !is_hex((unsigned char)buf[i + 2]))
			return refuse(v, 400, "%s: malformed percent-escape at byte %zu", part, i);
		if (hex_value((unsigned char)buf[i + 1]) == 0 && hex_value((unsigned char)buf[i + 2]) == 0)
			return refuse(v, 400, "%s: percent-encoded NUL at byte %zu", part, i);
		i += 2;
	}
	return API_HEAD_OK;
}

static enum api_head_result check_version(const char *buf, size_t len, struct api_head_verdict *v)
{
	if (len == 8 && (!memcmp(buf, "HTTP/1.1", 8) || !memcmp(buf, "HTTP/1.0", 8)))
		return API_HEAD_OK;
	if (len > 5 && len < 16 && !memcmp(buf, "HTTP/", 5)) {
		for (size_t i = 5; i < len; i++)
			if (!(buf[i] == '.' || (buf[i] >= '0' && buf[i] <= '9')))
				goto malformed;
		return refuse(v, 505, "HTTP version %.*s not supported (HTTP/1.1)", (int)len, buf);
	}
malformed:
	return refuse(v, 400, "malformed request line: expected METHOD /path HTTP/1.1");
}

/* The request line, buf[0..len) without its line end. */
static enum api_head_result check_request_line(const char *buf, size_t len, struct api_head_verdict *v)
{
	size_t mlen = 0;
	enum api_head_result r = check_method(buf, len, &mlen, v);
	if (r != API_HEAD_OK)
		return r == API_HEAD_MORE ? refuse(v, 400, "malformed request line: expected METHOD "
					  "/path HTTP/1.1") : r;
	const char *target = buf + mlen + 1;
	const char *sp = memchr(target, ' ', len - mlen - 1);
	if (!sp)
		return refuse(v, 400, "malformed request line: expected METHOD /path HTTP/1.1");
	size_t tlen = (size_t)(sp - target);
	if (tlen > API_MAX_REQUEST_LINE)
		return refuse(v, 414, "request target longer than %d bytes", API_MAX_REQUEST_LINE);
	if ((r = check_version(sp + 1, len - (size_t)(sp + 1 - buf), v)) != API_HEAD_OK)
		return r;
	bool known = false;
	for (size_t i = 0; i < sizeof(known_methods) / sizeof(known_methods[0]); i++)
		known = known || !strcmp(v->method, known_methods[i]);
	if (!known)
		return refuse(v, 501, "method '%s' not implemented (GET, POST, PUT, PATCH, DELETE, "
			      "OPTIONS, HEAD)", v->method);
	return check_target(target, tlen, v);
}

/* Where the request's body ends: a Content-Length gives its length; a
 * Transfer-Encoding (or a length that is not one number) leaves it unknown. */
static void note_body_length(const char *name, size_t name_len, const char *value, const char *end,
			     struct api_head_verdict *v)
{
	if (name_len == 17 && !strncasecmp(name, "transfer-encoding", 17)) {
		v->body_unknown = true;
		return;
	}
	if (name_len != 14 || strncasecmp(name, "content-length", 14))
		return;
	while (value < end && (*value == ' ' || *value == '\t'))
		value++;
	size_t length = 0;
	const char *digit = value;
	while (digit < end && *digit >= '0' && *digit <= '9' && length < ((size_t)1 << 48))
		length = length * 10 + (size_t)(*digit++ - '0');
	while (digit < end && (*digit == ' ' || *digit == '\t'))
		digit++;
	if (digit == value || digit != end)
		v->body_unknown = true;
	else
		v->body_len = length;
}

/* One header field line, without its line end: NAME ":" VALUE, a token
 * name, no control character but HTAB in the value. */
static enum api_head_result check_field(const char *line, size_t len, unsigned n,
					struct api_head_verdict *v)
{
	if (line[0] == ' ' || line[0] == '\t')
		return refuse(v, 400, "header field %u: a folded line (obsolete in HTTP/1.1)", n);
	const char *colon = memchr(line, ':', len);
	if (!colon || colon == line)
		return refuse(v, 400, "header field %u: expected NAME: VALUE", n);
	for (const char *c = line; c < colon; c++)
		if ((unsigned char)*c <= 0x20 || *c == 0x7f || *c == '"' || *c == '(' || *c == ')')
			return refuse(v, 400, "header field %u: malformed name", n);
	for (const char *c = colon + 1; c < line + len; c++)
		if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
			return refuse(v, 400, "header field %u: control character 0x%02x in the value", n,
				      (unsigned char)*c);
	note_body_length(line, (size_t)(colon - line), colon + 1, line + len, v);
	return API_HEAD_OK;
}

enum api_head_result api_head_check(const char *buf, size_t len, struct api_head_verdict *v)
{
	memset(v, 0, sizeof(*v));
	snprintf(v->method, sizeof(v->method), "-");
	const char *nl = memchr(buf, '\n', len);
	if (!nl) {
		/* a method that cannot become one is refused before its line ends */
		size_t mlen;
		enum api_head_result r = check_method(buf, len, &mlen, v);
		if (r == API_HEAD_REFUSED)
			return r;
		if (len > API_MAX_REQUEST_LINE + 64)
			return refuse(v, 414, "request target longer than %d bytes", API_MAX_REQUEST_LINE);
		return API_HEAD_MORE;
	}
	size_t line_len = (size_t)(nl - buf);
	if (line_len && buf[line_len - 1] == '\r')
		line_len--;
	enum api_head_result r = check_request_line(buf, line_len, v);
	if (r != API_HEAD_OK)
		return r;
	size_t pos = (size_t)(nl - buf) + 1;
	for (unsigned n = 1;; n++) {
		nl = memchr(buf + pos, '\n', len - pos);
		size_t upto = nl ? (size_t)(nl - buf) : len;
		if (upto > API_MAX_HEAD)
			return refuse(v, 431, "request header fields: the request head is longer than %d "
				      "bytes", API_MAX_HEAD);
		if (!nl)
			return API_HEAD_MORE;
		size_t flen = upto - pos;
		if (flen && buf[pos + flen - 1] == '\r')
			flen--;
		if (flen == 0) {
			v->head_len = upto + 1;
			return API_HEAD_OK;
		}
		if (n > API_MAX_HEADER_FIELDS)
			return refuse(v, 431, "request header fields: more than %d", API_MAX_HEADER_FIELDS);
		if ((r = check_field(buf + pos, flen, n, v)) != API_HEAD_OK)
			return r;
		pos = upto + 1;
	}
}
