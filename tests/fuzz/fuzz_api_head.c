/* tests/fuzz/fuzz_api_head.c - fuzz target: the API server's request-head
 * check (host/api_head.c), which reads every byte a client of the unix
 * socket or the TCP listener sends before libwebsockets does. Input: byte 0
 * picks the size of the pieces the head arrives in (as reads would cut
 * it), the rest is the head. Checked: a verdict once given stays (a head
 * accepted after N bytes is accepted with the same length on all of them;
 * one refused stays refused), a refusal has a known status and a one-line
 * message, and an accepted head ends with its empty line and holds no
 * percent-encoded NUL in its request line. */
#include "../../host/api_internal.h"
#include "fuzz.h"

static void assert_verdict(enum api_head_result r, const struct api_head_verdict *v, size_t len)
{
	if (r == API_HEAD_REFUSED) {
		if (v->status != 400 && v->status != 414 && v->status != 431 && v->status != 501 &&
		    v->status != 505)
			abort();
		if (!v->msg[0] || strchr(v->msg, '\n') || strchr(v->msg, '\r'))
			abort();
	}
	if (r == API_HEAD_OK) {
		if (v->head_len < 4 || v->head_len > len)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t piece = (size_t)(data[0] % 64) + 1;
	const char *head = (const char *)data + 1;
	size_t len = size - 1;
	struct api_head_verdict whole;
	enum api_head_result rw = api_head_check(head, len, &whole);
	assert_verdict(rw, &whole, len);
	for (size_t n = piece; n < len; n += piece) {
		struct api_head_verdict v;
		enum api_head_result r = api_head_check(head, n, &v);
		assert_verdict(r, &v, n);
		if (r == API_HEAD_OK && (rw != API_HEAD_OK || whole.head_len != v.head_len))
			abort();
		if (r == API_HEAD_REFUSED && rw != API_HEAD_REFUSED)
			abort();
	}
	if (rw == API_HEAD_OK) {
		const char *end = head + whole.head_len;
		if (end[-1] != '\n' || !(end[-2] == '\n' || (end[-2] == '\r' && end[-3] == '\n')))
			abort();
		const char *nl = memchr(head, '\n', whole.head_len);
		for (const char *c = head; c + 2 < nl; c++)
			if (c[0] == '%' && c[1] == '0' && c[2] == '0')
				abort();
	}
	return 0;
}
