/* modules/hubble-lite/web.c - the web page compiled into the module with
 * the assembler's .incbin and served on the unix socket and the TCP
 * listener: GET /flows (web/flows.html, markup and style), /flows.js (the
 * stream, table, detail panel) and /flowmap.js (the service map's layout).
 * The page reads /v1/flows/stream. */
#include <stddef.h>

#include <fibril/fibril.h>

#include "hubble.h"

#ifndef HL_WEB_DIR
#error "HL_WEB_DIR (the path of modules/hubble-lite/web) is set by modules/hubble-lite/Makefile.inc"
#endif

#define HL_WEB_EMBED(sym, file)                                                                      \
	__asm__(".pushsection .rodata,\"a\"\n" #sym ":\n"                                            \
		".incbin \"" HL_WEB_DIR "/" file "\"\n" #sym "_end:\n"                               \
		".popsection\n");                                                                    \
	extern const char sym[] __attribute__((visibility("hidden")));                               \
	extern const char sym##_end[] __attribute__((visibility("hidden")))

HL_WEB_EMBED(hl_web_page, "flows.html");
HL_WEB_EMBED(hl_web_script, "flows.js");
HL_WEB_EMBED(hl_web_map, "flowmap.js");

struct web_file {
	const char *type;
	const char *start;
	const char *end;
};

static const struct web_file web_page = {"text/html; charset=utf-8", hl_web_page, hl_web_page_end};
static const struct web_file web_script = {"text/javascript; charset=utf-8", hl_web_script,
					   hl_web_script_end};
static const struct web_file web_map = {"text/javascript; charset=utf-8", hl_web_map, hl_web_map_end};

static void route_file(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	const struct web_file *file = ud;
	(void)req;
	fibril_resp_body(resp, 200, file->type, file->start, (size_t)(file->end - file->start));
}

int hl_web_register(struct fibril_module *m)
{
	if (fibril_api_route(m, "GET", "/flows", FIBRIL_ROUTE_TCP, route_file, (void *)&web_page) ||
	    fibril_api_route(m, "GET", "/flows.js", FIBRIL_ROUTE_TCP, route_file, (void *)&web_script))
		return -1;
	return fibril_api_route(m, "GET", "/flowmap.js", FIBRIL_ROUTE_TCP, route_file, (void *)&web_map);
}
