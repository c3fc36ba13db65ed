/* tests/unit/test_api_head.c - unit tests of the API server's request-head
 * check (host/api_head.c), which runs before libwebsockets parses a head:
 * good heads pass whole and are never refused while still arriving; a
 * percent-encoded NUL, a bad escape, an unknown method, another HTTP
 * version, a malformed request line or header field, and heads past the
 * limits are refused with the status and the line the client gets; the
 * body's length is read from the head (a pipelined request is told from a
 * body by it). */
#include "cunit_main.h"
#include "../../host/api_internal.h"

#include <stdlib.h>
#include <string.h>

static enum api_head_result check(const char *head, struct api_head_verdict *v)
{
	return api_head_check(head, strlen(head), v);
}

static void refused_is(const char *head, int status, const char *msg)
{
	struct api_head_verdict v;
	CU_ASSERT_EQUAL(check(head, &v), API_HEAD_REFUSED);
	CU_ASSERT_EQUAL(v.status, status);
	CU_ASSERT_PTR_NOT_NULL(strstr(v.msg, msg));
	if (!strstr(v.msg, msg))
		fprintf(stderr, "\n  %s -> %d '%s', expected '%s'\n", head, v.status, v.msg, msg);
	CU_ASSERT_PTR_NULL(strchr(v.msg, '\n'));
}

static void test_good_heads_pass_whole(void)
{
	static const char *const heads[] = {
		"GET /v1/healthz HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"DELETE /v1/ipam?owner=a%2Fb&x=%7e HTTP/1.1\r\nHost: [::1]:80\r\nX-Empty:\r\n\r\n",
		"POST /v1/endpoint/x HTTP/1.1\nContent-Length: 2\nUser-Agent: a\tb\n\n",
		("GET /v1/flows/stream HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"),
	};
	for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		struct api_head_verdict v;
		size_t len = strlen(heads[i]);
		CU_ASSERT_EQUAL(check(heads[i], &v), API_HEAD_OK);
		CU_ASSERT_EQUAL(v.head_len, len);
		/* every prefix waits for more, none is refused */
		for (size_t n = 0; n < len; n++)
			CU_ASSERT_EQUAL(api_head_check(heads[i], n, &v), API_HEAD_MORE);
	}
}

static void test_body_after_the_head(void)
{
	const char *head = "PUT /v1/x HTTP/1.1\r\nContent-Length: 4\r\n\r\n";
	char req[128];
	size_t len = strlen(head);
	memcpy(req, head, len);
	memcpy(req + len, "{\0}\n", 4);
	struct api_head_verdict v;
	CU_ASSERT_EQUAL(api_head_check(req, len + 4, &v), API_HEAD_OK);
	CU_ASSERT_EQUAL(v.head_len, len);
	CU_ASSERT_STRING_EQUAL(v.method, "PUT");
}

static void test_percent_encoded_nul(void)
{
	refused_is("GET /v1/healthz%00x HTTP/1.1\r\n\r\n", 400, "path: percent-encoded NUL at byte 11");
	refused_is("GET /v1/ipam?owner=a%00b HTTP/1.1\r\n\r\n", 400, "query: percent-encoded NUL at byte 16");
	refused_is("GET /%00 HTTP/1.1\r\n\r\n", 400, "path: percent-encoded NUL at byte 1");
}

static void test_bad_escapes_and_targets(void)
{
	refused_is("GET /a%zz HTTP/1.1\r\n\r\n", 400, "path: malformed percent-escape at byte 2");
	refused_is("GET /a?b=%4 HTTP/1.1\r\n\r\n", 400, "query: malformed percent-escape at byte 5");
	refused_is("GET /a% HTTP/1.1\r\n\r\n", 400, "malformed percent-escape");
	refused_is("GET http://x/ HTTP/1.1\r\n\r\n", 400, "must start with '/'");
	refused_is("GET /a\x01 HTTP/1.1\r\n\r\n", 400, "path: control character 0x01 at byte 2");
}

static void test_request_lines(void)
{
	refused_is("GARBAGE\r\n\r\n", 400, "malformed request line");
	refused_is("BLAH /v1/healthz HTTP/1.1\r\n\r\n", 501, "method 'BLAH' not implemented");
	refused_is("GET /v1/healthz HTTP/3.0\r\n\r\n", 505, "HTTP version HTTP/3.0 not supported");
	refused_is("GET /v1/healthz\r\n\r\n", 400, "malformed request line");
	refused_is("GET /v1/healthz HTTP/1.1 x\r\n\r\n", 400, "malformed request line");
	refused_is("get / HTTP/1.1\r\n\r\n", 400, "malformed request line");
	refused_is(" GET / HTTP/1.1\r\n\r\n", 400, "malformed request line");
	/* refused before the line ends: no method starts so */
	refused_is("\x01\x02\x03", 400, "malformed request line");
	refused_is("\x16\x03\x01\x02", 400, "malformed request line"); /* a TLS hello */
	refused_is("ABCDEFGHIJKLMNOPQ", 400, "malformed request line");
}

static void test_header_fields(void)
{
	refused_is("GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400, "header field 1: expected NAME: VALUE");
	refused_is("GET / HTTP/1.1\r\nA: b\r\n: v\r\n\r\n", 400, "header field 2: expected NAME: VALUE");
	refused_is("GET / HTTP/1.1\r\nA b: c\r\n\r\n", 400, "header field 1: malformed name");
	refused_is("GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400, "header field 2: a folded line");
	refused_is("GET / HTTP/1.1\r\nA: b\x7f\r\n\r\n", 400, "header field 1: control character 0x7f");
	const char nul[] = "GET / HTTP/1.1\r\nA: b\0c\r\n\r\n";
	struct api_head_verdict v;
	CU_ASSERT_EQUAL(api_head_check(nul, sizeof(nul) - 1, &v), API_HEAD_REFUSED);
	CU_ASSERT_EQUAL(v.status, 400);
	CU_ASSERT_PTR_NOT_NULL(strstr(v.msg, "control character 0x00"));
}

/* Where the body ends, which tells a pipelined next request from a body:
 * the Content-Length (any case, blanks around it), else 0; a
 * Transfer-Encoding or a length that is not one number: unknown. */
static void test_body_length(void)
{
	static const struct {
		const char *head;
		size_t body_len;
		bool unknown;
	} cases[] = {
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 0, false},
		{"POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n", 17, false},
		{"POST / HTTP/1.1\r\ncontent-LENGTH:\t5 \r\n\r\n", 5, false},
		{"POST / HTTP/1.1\r\nX-Content-Length: 9\r\n\r\n", 0, false},
		{"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 0, true},
		{"POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n", 1, true},
		{"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 0, true},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 0, true},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct api_head_verdict v;
		CU_ASSERT_EQUAL_FATAL(check(cases[i].head, &v), API_HEAD_OK);
		CU_ASSERT_EQUAL(v.body_unknown, cases[i].unknown);
		if (!cases[i].unknown)
			CU_ASSERT_EQUAL(v.body_len, cases[i].body_len);
	}
}

static void test_limits(void)
{
	struct api_head_verdict v;
	/* one 40 KB field: refused once past the limit, before its end */
	size_t big = 40960;
	char *head = malloc(big + 64);
	int n = snprintf(head, 64, "GET / HTTP/1.1\r\nX-Pad: ");
	memset(head + n, 'a', big);
	CU_ASSERT_EQUAL(api_head_check(head, API_MAX_HEAD - 100, &v), API_HEAD_MORE);
	CU_ASSERT_EQUAL(api_head_check(head, API_MAX_HEAD + 1, &v), API_HEAD_REFUSED);
	CU_ASSERT_EQUAL(v.status, 431);
	CU_ASSERT_PTR_NOT_NULL(strstr(v.msg, "request head is longer than 28672 bytes"));
	/* too many small fields */
	size_t len = (size_t)snprintf(head, 64, "GET / HTTP/1.1\r\n");
	for (int i = 0; i <= API_MAX_HEADER_FIELDS; i++)
		len += (size_t)sprintf(head + len, "F%d: v\r\n", i);
	len += (size_t)sprintf(head + len, "\r\n");
	CU_ASSERT_EQUAL(api_head_check(head, len, &v), API_HEAD_REFUSED);
	CU_ASSERT_EQUAL(v.status, 431);
	/* a request target past its limit, with or without its line end yet */
	n = snprintf(head, 64, "GET /");
	memset(head + n, 'a', API_MAX_REQUEST_LINE + 100);
	CU_ASSERT_EQUAL(api_head_check(head, (size_t)n + API_MAX_REQUEST_LINE + 100, &v), API_HEAD_REFUSED);
	CU_ASSERT_EQUAL(v.status, 414);
	len = (size_t)n + API_MAX_REQUEST_LINE;
	len += (size_t)sprintf(head + len, " HTTP/1.1\r\n\r\n");
	CU_ASSERT_EQUAL(api_head_check(head, len, &v), API_HEAD_REFUSED);
	CU_ASSERT_EQUAL(v.status, 414);
	free(head);
}

FIBRIL_TEST_MAIN("api_head", NULL, NULL, {"good heads pass whole", test_good_heads_pass_whole},
		 {"body after the head", test_body_after_the_head},
		 {"percent-encoded NUL", test_percent_encoded_nul},
		 {"bad escapes and targets", test_bad_escapes_and_targets},
		 {"request lines", test_request_lines}, {"header fields", test_header_fields},
		 {"body length", test_body_length}, {"limits", test_limits})
