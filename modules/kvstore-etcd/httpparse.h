/* modules/kvstore-etcd/httpparse.h - an incremental parser of one HTTP/1.1
 * response as etcd's JSON gateway sends them: the status line, the headers
 * the client needs (Content-Length, Transfer-Encoding: chunked, Connection),
 * and the body (by length, chunked, or up to the end of the connection),
 * handed to a callback as it is decoded. No dependency but libc, so the fuzz
 * target (tests/fuzz/fuzz_etcd_http.c) links it alone. */
#ifndef KVSTORE_ETCD_HTTPPARSE_H
#define KVSTORE_ETCD_HTTPPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETCD_HTTP_MAX_LINE 8192u     /* one status, header or chunk-size line */
#define ETCD_HTTP_MAX_HEAD (64u << 10) /* every header line together */

enum etcd_httpp_state {
	HTTPP_STATUS,     /* the status line */
	HTTPP_HEADER,     /* a header line (or the blank line ending them) */
	HTTPP_BODY_LEN,   /* remaining bytes of a Content-Length body */
	HTTPP_BODY_EOF,   /* a body ending when the connection closes */
	HTTPP_CHUNK_SIZE, /* a chunk-size line */
	HTTPP_CHUNK_DATA, /* remaining bytes of a chunk */
	HTTPP_CHUNK_END,  /* the CRLF after a chunk's data */
	HTTPP_TRAILER,    /* a trailer line (or the blank line ending them) */
	HTTPP_DONE,
	HTTPP_ERROR,
};

/* Body bytes: 0 to go on, nonzero to stop (the parser then fails with
 * "the body callback refused it"). */
typedef int (*etcd_httpp_body_fn)(void *ud, const char *data, size_t len);

struct etcd_httpp {
	enum etcd_httpp_state state;
	int status;         /* of the final (non-1xx) answer */
	bool http10;        /* the answer is HTTP/1.0 */
	bool chunked;       /* Transfer-Encoding: chunked */
	bool has_length;    /* Content-Length seen */
	bool close;         /* the connection cannot be reused afterwards */
	bool head_request;  /* set by the caller: no body follows (unused by etcd) */
	uint64_t remaining; /* of a length body or a chunk */
	size_t head_bytes;  /* header bytes so far */
	size_t line_len;
	char line[ETCD_HTTP_MAX_LINE];
	const char *error; /* static text, set in HTTPP_ERROR */
};

void etcd_httpp_init(struct etcd_httpp *p);
/* Feed n bytes. Returns 1 when the answer is complete (*used = the bytes
 * it took; the rest belongs to no answer), 0 when it needs more, -1 on a
 * malformed answer (p->error says what). */
int etcd_httpp_feed(struct etcd_httpp *p, const char *data, size_t n, size_t *used,
		    etcd_httpp_body_fn body, void *ud);
/* The connection closed: 1 if that completes the answer (a body up to the
 * end), else -1 with p->error set. */
int etcd_httpp_eof(struct etcd_httpp *p);

#endif
