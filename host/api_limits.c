/* host/api_limits.c - the TCP listeners' connection limits: at most
 * [agent] api-max-connections connections per listener and
 * api-max-connections-per-source from one address, counted at accept
 * (libwebsockets' LWS_CALLBACK_FILTER_NETWORK_CONNECTION, before the
 * connection costs anything more) and refused by closing it at once. A
 * flood of idle connections then holds a bounded number of descriptors
 * and header buffers, and the unix socket (CNI ADD, IPAM) is still served.
 *
 * A connection is known by its descriptor and the socket's inode: lws
 * closes connections in many places and says so after the descriptor is
 * gone, so a counted descriptor that no longer holds the same socket (a
 * new accept got its number, or a check finds it closed) is forgotten
 * then. The unix socket is not limited (it is root's, mode 0660). */
#include "api_internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

struct conn_slot {
	bool counted;
	int listener;
	ino_t ino;
	size_t source; /* index in g_sources */
};

struct source {
	unsigned char addr[16];
	unsigned count;
};

static void *grow_or_die(void *p, size_t sz)
{
	void *q = realloc(p, sz);
	if (!q)
		abort();
	return q;
}

static struct conn_slot *g_slots; /* by descriptor */
static size_t g_nslots;
static struct source *g_sources;
static size_t g_nsources, g_sources_cap;
static unsigned g_count[API_LISTENERS];
static unsigned g_max_conns = 256, g_max_per_source = 32;
static uint64_t g_refused, g_refused_logged;
static double g_last_log_ms, g_last_sweep_ms;

void api_limits_set(unsigned max_conns, unsigned max_per_source)
{
	g_max_conns = max_conns;
	g_max_per_source = max_per_source;
}

unsigned api_limits_count(int listener)
{
	return listener >= 0 && listener < API_LISTENERS ? g_count[listener] : 0;
}

static void forget(int fd)
{
	struct conn_slot *c = &g_slots[fd];
	if (!c->counted)
		return;
	c->counted = false;
	g_count[c->listener]--;
	g_sources[c->source].count--;
}

/* Forget every counted descriptor that no longer holds its socket. */
static void sweep(void)
{
	struct stat st;
	for (size_t fd = 0; fd < g_nslots; fd++)
		if (g_slots[fd].counted && (fstat((int)fd, &st) || st.st_ino != g_slots[fd].ino))
			forget((int)fd);
	g_last_sweep_ms = mono_ms();
}

static size_t source_of(const unsigned char addr[16])
{
	size_t free_slot = g_nsources;
	for (size_t i = 0; i < g_nsources; i++) {
		if (!memcmp(g_sources[i].addr, addr, 16))
			return i;
		if (!g_sources[i].count && free_slot == g_nsources)
			free_slot = i;
	}
	if (free_slot == g_nsources) {
		if (g_nsources == g_sources_cap) {
			g_sources_cap = g_sources_cap ? g_sources_cap * 2 : 64;
			g_sources = grow_or_die(g_sources, g_sources_cap * sizeof(*g_sources));
		}
		g_nsources++;
	}
	memcpy(g_sources[free_slot].addr, addr, 16);
	g_sources[free_slot].count = 0;
	return free_slot;
}

static void log_refusals(const char *listener_name, const char *why)
{
	double now = mono_ms();
	if (g_last_log_ms && now - g_last_log_ms < 10000)
		return;
	host_log(FIBRIL_LOG_WARN, "api: %s listener: refused %llu connection%s (%s)", listener_name,
		 (unsigned long long)(g_refused - g_refused_logged), g_refused - g_refused_logged == 1 ? "" : "s",
		 why);
	g_refused_logged = g_refused;
	g_last_log_ms = now;
}

bool api_conn_admit(int listener, const char *listener_name, int fd)
{
	if (fd < 0 || listener < 0 || listener >= API_LISTENERS)
		return false;
	if ((size_t)fd >= g_nslots) {
		size_t n = g_nslots ? g_nslots : 256;
		while (n <= (size_t)fd)
			n *= 2;
		g_slots = grow_or_die(g_slots, n * sizeof(*g_slots));
		memset(g_slots + g_nslots, 0, (n - g_nslots) * sizeof(*g_slots));
		g_nslots = n;
	}
	forget(fd); /* that descriptor's former connection is gone */
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	unsigned char addr[16] = {0};
	struct stat st;
	if (getpeername(fd, (struct sockaddr *)&ss, &len) || fstat(fd, &st))
		return false;
	if (ss.ss_family == AF_INET) {
		addr[10] = addr[11] = 0xff; /* as ::ffff:a.b.c.d */
		memcpy(addr + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
	} else if (ss.ss_family == AF_INET6) {
		memcpy(addr, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
	}
	size_t src = source_of(addr);
	bool full = g_count[listener] >= g_max_conns || g_sources[src].count >= g_max_per_source;
	if (full && mono_ms() - g_last_sweep_ms > 100) {
		sweep();
		full = g_count[listener] >= g_max_conns || g_sources[src].count >= g_max_per_source;
	}
	if (full) {
		g_refused++;
		log_refusals(listener_name, g_count[listener] >= g_max_conns
						    ? "api-max-connections reached"
						    : "api-max-connections-per-source reached");
		return false;
	}
	g_slots[fd] = (struct conn_slot){.counted = true, .listener = listener, .ino = st.st_ino,
					 .source = src};
	g_count[listener]++;
	g_sources[src].count++;
	return true;
}

void api_limits_free(void)
{

	free(g_slots);
	free(g_sources);
	g_slots = NULL;
	g_sources = NULL;
	g_nslots = g_nsources = g_sources_cap = 0;
	memset(g_count, 0, sizeof(g_count));
}
