/* modules/common/http_parse.h - the HTTP/1.1 wire format shared by every
 * client of the tree: an incremental parser of one response (the status
 * line, the headers a client acts on: Content-Length, Transfer-Encoding:
 * chunked, Connection, Content-Encoding: gzip; and the body by length,
 * chunked, or up to the end of the connection, handed to a callback as it
 * is decoded), the writer of a request's head and percent-encoding. No dependency but libc:
 * the modules' loop client (http_client.c), the CNI plugin's blocking
 * client (cni/agent.c) and the fuzz target (tests/fuzz/fuzz_http_parse.c)
 * compile it in. Internal to the tree, not part of the SDK. */
#ifndef FIBRIL_MODULES_HTTP_PARSE_H
#define FIBRIL_MODULES_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MOD_HTTP_MAX_LINE 8192u       /* one status, header or chunk-size line */
#define MOD_HTTP_MAX_HEAD (64u << 10) /* every header line together */

enum mod_http_state {
	MOD_HTTP_STATUS,     /* the status line */
	MOD_HTTP_HEADER,     /* a header line (or the blank line ending them) */
	MOD_HTTP_BODY_LEN,   /* remaining bytes of a Content-Length body */
	MOD_HTTP_BODY_EOF,   /* a body ending when the connection closes */
	MOD_HTTP_CHUNK_SIZE, /* a chunk-size line */
	MOD_HTTP_CHUNK_DATA, /* remaining bytes of a chunk */
	MOD_HTTP_CHUNK_END,  /* the CRLF after a chunk's data */
	MOD_HTTP_TRAILER,    /* a trailer line (or the blank line ending them) */
	MOD_HTTP_DONE,
	MOD_HTTP_ERROR,
};

/* Body bytes: 0 to go on, nonzero to stop (the parser then fails with
 * "the body callback refused it"). */
typedef int (*mod_http_body_fn)(void *ud, const char *data, size_t len);

struct mod_http_parser {
	enum mod_http_state state;
	int status;         /* of the final (non-1xx) answer */
	bool http10;        /* the answer is HTTP/1.0 */
	bool chunked;       /* Transfer-Encoding: chunked */
	bool has_length;    /* Content-Length seen */
	bool gzip;          /* Content-Encoding: gzip (the body bytes are as sent) */
	bool close;         /* the connection cannot be reused afterwards */
	bool head_done;     /* the final answer's headers are in */
	bool head_request;  /* set by the caller: no body follows */
	uint64_t remaining; /* of a length body or a chunk */
	size_t head_bytes;  /* header bytes so far */
	size_t line_len;
	char line[MOD_HTTP_MAX_LINE];
	const char *error; /* static text, set in MOD_HTTP_ERROR */
};

void mod_http_parser_init(struct mod_http_parser *p);
/* Feed n bytes. Returns 1 when the answer is complete (*used = the bytes
 * it took; the rest belongs to no answer), 0 when it needs more, -1 on a
 * malformed answer (p->error says what). */
int mod_http_parser_feed(struct mod_http_parser *p, const char *data, size_t n, size_t *used,
			 mod_http_body_fn body, void *ud);
/* The connection closed: 1 if that completes the answer (a body up to the
 * end), else -1 with p->error set. */
int mod_http_parser_eof(struct mod_http_parser *p);

/* A request's head, malloc'ed in *out (NUL-terminated, *len bytes):
 * "METHOD PATH HTTP/1.1", Host, each of headers (NULL-terminated "Name:
 * value" lines, or NULL) in order, and Content-Length: body_len when
 * with_length. 0, -EINVAL when a part holds a CR, LF or NUL (or method or
 * path is empty), -ENOMEM. */
int mod_http_write_head(char **out, size_t *len, const char *method, const char *path,
			const char *host, const char *const *headers, bool with_length,
			size_t body_len);

/* s percent-encoded for a path segment or a query value: every byte but
 * the unreserved ones (A-Z a-z 0-9 - . _ ~) as %XX. malloc'ed, or NULL. */
char *mod_http_escape(const char *s);
/* The same, leaving the characters of keep as they are too (fibril-cni
 * keeps ':' in its endpoint references, which the agent's routes expect). */
char *mod_http_escape_keep(const char *s, const char *keep);

#endif
