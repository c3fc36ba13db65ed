/* modules/datapath/dp_util.c - small helpers of the datapath module: error
 * lines, MAC and address text, the monotonic clock the BPF program stamps
 * conntrack entries and events with, and the bpf() calls valgrind
 * misreads. */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <bpf/bpf.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define DP_USE_VALGRIND_H 1
#endif
#endif

#include "datapath.h"

/* valgrind (3.19) checks all of union bpf_attr although libbpf sets, and
 * the kernel reads, only the leading fields of a command (as the host's
 * maps.c notes), and it loses track of libbpf's netlink reply buffers:
 * program load, get_next_key and the tc calls run with its error
 * reporting off. No-ops outside valgrind. */
void dp_vg_quiet_begin(void)
{
#ifdef DP_USE_VALGRIND_H
	VALGRIND_DISABLE_ERROR_REPORTING;
#endif
}

void dp_vg_quiet_end(void)
{
#ifdef DP_USE_VALGRIND_H
	VALGRIND_ENABLE_ERROR_REPORTING;
#endif
}

int dp_next_key(int fd, const void *key, void *next)
{
	dp_vg_quiet_begin();
	int rc = bpf_map_get_next_key(fd, key, next);
	dp_vg_quiet_end();
	return rc;
}

void dp_seterr(char *err, size_t len, const char *fmt, ...)
{
	if (!err || len == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

void dp_fmt_mac(const uint8_t *mac, char *out, size_t len)
{
	snprintf(out, len, "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3], mac[4],
		 mac[5]);
}

void dp_fmt_addr(int family, const uint8_t *addr, char *out, size_t len)
{
	if (!inet_ntop(family == DP_FAMILY_IPV6 ? AF_INET6 : AF_INET, addr, out, (socklen_t)len))
		snprintf(out, len, "?");
}

/* bpf_ktime_get_ns() is CLOCK_MONOTONIC. */
uint64_t dp_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
