/* modules/hubble-lite/web.c - the web page (web/flows.html: a live flows
 * table and a service map, HTML, CSS and JS in one file) compiled into the
 * module with the assembler's .incbin, and served at GET /flows on the
 * unix socket and the TCP listener. The page reads /v1/flows/stream. */
#include <stddef.h>

#include <fibril/fibril.h>

#include "hubble.h"

#ifndef HL_WEB_FILE
#error "HL_WEB_FILE (the path of web/flows.html) is set by modules/hubble-lite/Makefile.inc"
#endif

__asm__(".pushsection .rodata,\"a\"\n"
	"hl_web_page:\n"
	".incbin \"" HL_WEB_FILE "\"\n"
	"hl_web_page_end:\n"
	".popsection\n");
extern const char hl_web_page[] __attribute__((visibility("hidden")));
extern const char hl_web_page_end[] __attribute__((visibility("hidden")));

static void route_page(struct fibril_request *req, struct fibril_response *resp, void *ud)
{
	(void)req;
	(void)ud;
	fibril_resp_body(resp, 200, "text/html; charset=utf-8", hl_web_page,
			 (size_t)(hl_web_page_end - hl_web_page));
}

int hl_web_register(struct fibril_module *m)
{
	return fibril_api_route(m, "GET", "/flows", FIBRIL_ROUTE_TCP, route_page, NULL);
}
