/* tests/fuzz/fuzz_http_parse.c - fuzz target: the HTTP/1.1 response parser
 * of modules/common/http_parse.c, which every client of the tree reads its
 * answers with (the modules' loop client: etcd's JSON gateway and its
 * chunked watch streams, the Kubernetes API server; the CNI plugin's
 * client of the agent): status line, headers, bodies by Content-Length,
 * chunked or up to the end of the connection. Input: byte 0 picks the size
 * of the pieces the bytes arrive in (as reads from a socket would cut
 * them), the rest is the answer. The same bytes are also parsed in one
 * piece: both runs must agree on the outcome, the status, the framing and
 * every body byte, and the body can never hold more bytes than the input.
 * The answer's first line, as a request path, goes through the request
 * writer too: refused if it holds a line break, else written verbatim. */
#include <stdbool.h>

#include "../../modules/common/http_parse.h"
#include "fuzz.h"

struct sink {
	char *data;
	size_t len, cap;
};

static int on_body(void *ud, const char *data, size_t n)
{
	struct sink *s = ud;
	if (s->len + n > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		while (cap < s->len + n)
			cap *= 2;
		char *grown = realloc(s->data, cap);
		if (!grown)
			return -1;
		s->data = grown;
		s->cap = cap;
	}
	memcpy(s->data + s->len, data, n);
	s->len += n;
	return 0;
}

struct outcome {
	int rc;        /* 1 complete, 0 unfinished, -1 error */
	size_t used;   /* bytes taken when complete */
	bool at_eof;   /* completed by the end of the connection */
	int status;
	bool close;
	struct sink body;
};

/* Parse data in pieces of step bytes (0: one piece), then the end. */
static void parse(const uint8_t *data, size_t size, size_t step, struct outcome *o)
{
	static struct mod_http_parser p; /* 8 KB line buffer: not on the stack */
	memset(o, 0, sizeof(*o));
	mod_http_parser_init(&p);
	size_t at = 0;
	o->rc = 0;
	while (at < size) {
		size_t n = step && size - at > step ? step : size - at, used = 0;
		o->rc = mod_http_parser_feed(&p, (const char *)data + at, n, &used, on_body, &o->body);
		if (used > n)
			abort();
		if (o->rc < 0 && !p.error)
			abort(); /* an error always says what */
		at += used;
		if (o->rc != 0)
			break;
		if (used != n)
			abort(); /* unfinished answers take every byte */
	}
	o->used = at;
	if (o->rc == 0) {
		o->rc = mod_http_parser_eof(&p);
		o->at_eof = o->rc == 1;
		if (o->rc < 0 && !p.error)
			abort();
	}
	o->status = p.status;
	o->close = p.close;
	if (o->rc == 1 && !p.head_done)
		abort(); /* a complete answer had its headers */
	if (o->rc == 1 && (p.status < 200 || p.status > 599))
		abort();
	if (o->body.len > size)
		abort();
}

/* The writer: a path with a CR, LF or NUL is refused, any other is
 * written as given, the head ending with its blank line. */
static void write_path(const uint8_t *data, size_t size)
{
	char path[512];
	size_t n = size < sizeof(path) - 1 ? size : sizeof(path) - 1;
	const uint8_t *nl = memchr(data, '\n', n);
	if (nl)
		n = (size_t)(nl - data) + 1; /* with its LF: must be refused */
	memcpy(path, data, n);
	path[n] = '\0';
	const char *headers[] = {"Accept: application/json", NULL};
	char *out = NULL;
	size_t len = 0;
	int rc = mod_http_write_head(&out, &len, "GET", path, "localhost", headers, true, n);
	bool bad = !*path || path[strcspn(path, "\r\n")];
	if (bad != (rc != 0))
		abort();
	if (!rc && (len != strlen(out) || len < 4 || memcmp(out + len - 4, "\r\n\r\n", 4) != 0 ||
		    strncmp(out + 4, path, strlen(path)) != 0))
		abort();
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t step = data[0] % 64 + 1;
	data++;
	size--;
	struct outcome whole, pieces;
	parse(data, size, 0, &whole);
	parse(data, size, step, &pieces);
	if (whole.rc != pieces.rc || whole.body.len != pieces.body.len ||
	    (whole.body.len && memcmp(whole.body.data, pieces.body.data, whole.body.len) != 0))
		abort();
	if (whole.rc == 1 && (whole.status != pieces.status || whole.close != pieces.close ||
			      whole.used != pieces.used || whole.at_eof != pieces.at_eof))
		abort();
	free(whole.body.data);
	free(pieces.body.data);
	write_path(data, size);
	return 0;
}
