/* tests/fuzz/api_harness.h - the host's API request path for fuzz targets:
 * api_harness.c compiles host/api_http.c in, so a target dispatches requests to
 * the real route table (the same matching, {param} capture, JSON-body check,
 * 404/405 and handlers) without a socket or libwebsockets' parser. */
#ifndef FIBRIL_FUZZ_API_HARNESS_H
#define FIBRIL_FUZZ_API_HARNESS_H

#include <stdbool.h>
#include <stddef.h>

/* One request: METHOD, PATH, QUERY ("a=1&b=2", split and percent-decoded
 * as libwebsockets does, or NULL) and a body. Returns the HTTP status. */
int fuzz_api_request(const char *method, const char *path, const char *query, const char *body,
		     size_t body_len, bool tcp);

/* Requests from the fuzzer's text: each "METHOD /path?query\n" line followed
 * by its body, requests separated by a line "\n=====\n". Returns how many
 * were dispatched. */
int fuzz_api_requests(char *text);

/* A response object for calling a handler's helper directly (its body is
 * dropped by the next fuzz_api_resp_reset). */
struct fibril_response *fuzz_api_resp(void);
void fuzz_api_resp_reset(void);

#endif
