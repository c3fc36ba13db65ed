// tests/modules/cxxmod.cpp - a module written in C++, for
// tests/integration/cxx_module.sh: it includes every SDK header, declares
// its descriptor the C++20 way (FIBRIL_MODULE with designated initializers
// in member order) or the C++17 way (FIBRIL_MODULE_DESC over a constexpr
// function), with lists from FIBRIL_DEFINE_LIST, a config key, a route, a
// summary and a bus subscription, and is built with -Wall -Wextra -Werror.
//
//   GET /v1/cxx/hello  -> {"greeting":"<[cxxmod] greeting>","std":<__cplusplus>,
//                          "kvstore_has_txn":<FIBRIL_SERVICE_HAS on a local table>}
#include <fibril/api.h>
#include <fibril/bpfmap.h>
#include <fibril/bus.h>
#include <fibril/config.h>
#include <fibril/datapath.h>
#include <fibril/endpoint.h>
#include <fibril/fibril.h>
#include <fibril/health.h>
#include <fibril/ipalloc.h>
#include <fibril/ipam.h>
#include <fibril/ipamstore.h>
#include <fibril/k8s.h>
#include <fibril/kvstore.h>
#include <fibril/log.h>
#include <fibril/loop.h>
#include <fibril/module.h>
#include <fibril/service.h>
#include <fibril/version.h>

#include <cstdio>
#include <string>

namespace {

struct state {
	std::string greeting;
	int hellos = 0;
};

FIBRIL_DEFINE_LIST(cxx_provides, "cxx-greeting");
FIBRIL_DEFINE_LIST(cxx_wants, "nothing-at-all");

const fibril_config_key cxx_keys[] = {
	{"greeting", FIBRIL_CONFIG_STRING, "hello from C++", "what GET /v1/cxx/hello says", 0, 0,
	 nullptr, "salutation", false},
	{},
};

void hello(fibril_request *, fibril_response *resp, void *ud)
{
	auto *s = static_cast<state *>(ud);
	s->hellos++;
	fibril_kvstore_ops table{};
	table.hdr.sz = sizeof(table);
	char buf[512];
	std::snprintf(buf, sizeof(buf), "{\"greeting\":\"%s\",\"std\":%ld,\"kvstore_has_txn\":%s}",
		      s->greeting.c_str(), static_cast<long>(__cplusplus),
		      FIBRIL_SERVICE_HAS(&table, txn) ? "true" : "false");
	fibril_resp_json(resp, 200, buf);
}

int cxx_init(fibril_module *m)
{
	auto *s = new state;
	fibril_module_set_data(m, s);
	return fibril_api_route(m, "GET", "/v1/cxx/hello", 0, hello, s);
}

int cxx_start(fibril_module *m)
{
	auto *s = static_cast<state *>(fibril_module_data(m));
	const char *g = fibril_config_string(m, "greeting");
	s->greeting = g ? g : "";
	fibril_info(m, "C++ module started: %s", s->greeting.c_str());
	return 0;
}

void cxx_fini(fibril_module *m)
{
	delete static_cast<state *>(fibril_module_data(m));
}

int cxx_summary(fibril_module *m, char *buf, size_t len)
{
	auto *s = static_cast<state *>(fibril_module_data(m));
	return std::snprintf(buf, len, "%d hellos", s->hellos);
}

} // namespace

#if __cplusplus >= 202002L
FIBRIL_MODULE(.name = "cxxmod", .version = "1.0", .description = "a C++20 module",
	      .provides = cxx_provides, .requires_ = nullptr, .wants = cxx_wants,
	      .config_keys = cxx_keys, .init = cxx_init, .start = cxx_start, .fini = cxx_fini,
	      .summary = cxx_summary);
#else
static constexpr fibril_module_desc cxx_describe()
{
	fibril_module_desc d = fibril_module_desc_init();
	d.name = "cxxmod";
	d.version = "1.0";
	d.description = "a C++17 module";
	d.provides = cxx_provides;
	d.wants = cxx_wants;
	d.config_keys = cxx_keys;
	d.init = cxx_init;
	d.start = cxx_start;
	d.fini = cxx_fini;
	d.summary = cxx_summary;
	return d;
}
FIBRIL_MODULE_DESC(cxx_describe());
#endif
