/* tests/fuzz/api_harness.c - host/api_http.c compiled into the fuzz targets
 * that drive API routes (its static route table and the session structure
 * are needed to build a request), plus what libwebsockets would do before dispatch:
 * the method, the path and the query split into its arguments. */
#include "../../host/api_http.c"

#include <ctype.h>

#include "api_harness.h"

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* lws decodes %XX in each argument (and '+' as a space) */
static char *url_decode(const char *s, size_t n)
{
	char *out = xcalloc(1, n + 1), *o = out;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '%' && i + 2 < n && hexval((unsigned char)s[i + 1]) >= 0 &&
		    hexval((unsigned char)s[i + 2]) >= 0) {
			*o++ = (char)(hexval((unsigned char)s[i + 1]) * 16 + hexval((unsigned char)s[i + 2]));
			i += 2;
		} else {
			*o++ = s[i] == '+' ? ' ' : s[i];
		}
	}
	*o = '\0';
	return out;
}

int fuzz_api_request(const char *method, const char *path, const char *query, const char *body,
		     size_t body_len, bool tcp)
{
	struct session s;
	memset(&s, 0, sizeof(s));
	s.req.method = api_method_name(method);
	snprintf(s.req.path, sizeof(s.req.path), "%s", path && *path ? path : "/");
	for (const char *q = query; q && *q && s.req.nquery < MAX_QUERY;) {
		const char *amp = strchr(q, '&');
		size_t n = amp ? (size_t)(amp - q) : strlen(q);
		char *frag = url_decode(q, n < 1023 ? n : 1023);
		char *eq = strchr(frag, '=');
		if (eq)
			*eq = '\0';
		s.req.query[s.req.nquery][0] = xstrdup(frag);
		s.req.query[s.req.nquery][1] = xstrdup(eq ? eq + 1 : "");
		s.req.nquery++;
		free(frag);
		q = amp ? amp + 1 : q + n;
	}
	if (body_len && api_method_has_body(s.req.method)) {
		s.req.body = xcalloc(1, body_len + 1);
		memcpy(s.req.body, body, body_len);
		s.req.body_len = body_len;
	}
	api_dispatch(&s, tcp);
	int status = s.resp.status;
	if (getenv("FUZZ_VERBOSE")) /* what each request got, to check a seed does what it says */
		fprintf(stderr, "%s %s -> %d %.*s\n", s.req.method, s.req.path, status,
			s.resp.body ? (int)(s.resp.len < 300 ? s.resp.len : 300) : 0,
			s.resp.body ? s.resp.body : "");
	if (!s.resp.answered || status < 100 || status > 599 || !s.resp.body)
		abort(); /* every request gets an answer */
	api_session_reset(&s);
	return status;
}

int fuzz_api_requests(char *text)
{
	int n = 0;
	while (text) {
		char *next = strstr(text, "\n=====\n");
		if (next) {
			*next = '\0';
			next += 7;
		}
		char *nl = strchr(text, '\n');
		const char *body = "";
		if (nl) {
			*nl = '\0';
			body = nl + 1;
		}
		if (nl && nl > text && nl[-1] == '\r')
			nl[-1] = '\0';
		char *sp = strchr(text, ' ');
		const char *method = text, *target = "/";
		if (sp) {
			*sp = '\0';
			target = sp + 1;
		}
		char *path = xstrdup(target), *q = strchr(path, '?');
		if (q)
			*q++ = '\0';
		fuzz_api_request(method, path, q, body, strlen(body), false);
		free(path);
		n++;
		text = next;
	}
	return n;
}

static struct fibril_response g_fuzz_resp;

struct fibril_response *fuzz_api_resp(void)
{
	return &g_fuzz_resp;
}

void fuzz_api_resp_reset(void)
{
	free(g_fuzz_resp.body);
	free(g_fuzz_resp.content_type);
	memset(&g_fuzz_resp, 0, sizeof(g_fuzz_resp));
}
