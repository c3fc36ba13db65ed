/* tests/bench/bench_ws_follow.c - a websocket follower of the agent's flow
 * stream for bench_flows.sh's fan-out figure: the CLI's own client
 * (cli/ws.c) on the unix socket, counting lines (flows) and the lost
 * notices, nothing parsed, so what is measured is the agent's side. Ends
 * after IDLE seconds without a message (SO_RCVTIMEO) or at the close.
 *
 *   bench_ws_follow SOCKET PATH?QUERY READY_FILE IDLE_SECONDS
 * Output: one JSON object {"flows": N, "lost": M, "frames": F, "cpu_ns": C,
 * "lat_p50_us": .., "lat_p99_us": .., "lat_max_us": ..} (C: this process's
 * user and system CPU time, to put the reader's cost per flow beside the
 * agent's; lat: the age of every 16th flow when this reader had it, its
 * "time" - the datapath's stamp of the packet - to the clock at the
 * frame's arrival: the datapath's ring buffer, the agent's queue, the
 * socket and this reader's pauses together). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "../../cli/cli.h"

struct cli_options opt;

#define LAT_EVERY 16
#define LAT_MAX (1u << 20)

struct counts {
	unsigned long long flows, lost, frames;
	uint64_t *lat_ns; /* samples */
	size_t nlat;
	char sec_text[20]; /* "2026-11-25T07:40:01" last parsed, and its time */
	int64_t sec;
};

/* The flow's "time" (its first field) in ns since the epoch; -1 if none. */
/* ws.c explains a path the agent refuses through the CLI's module table
 * (cli/help.c, cli/client.c), which would pull in every command. The bench
 * follows an agent that serves the stream, so a refusal is reported as is. */
const char *module_serving_path(const char *path)
{
	(void)path;
	return NULL;
}
const char *module_enable_hint(void)
{
	return "";
}
bool module_is_loaded(const char *name)
{
	(void)name;
	return true;
}

static int64_t flow_time_ns(struct counts *c, const char *line, size_t n)
{
	static const char key[] = "{\"time\":\"";
	size_t k = sizeof(key) - 1;
	if (n < k + 30 || memcmp(line, key, k))
		return -1;
	const char *t = line + k; /* YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ */
	if (memcmp(t, c->sec_text, 19)) {
		struct tm tm = {0};
		if (sscanf(t, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
			   &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
			return -1;
		tm.tm_year -= 1900;
		tm.tm_mon -= 1;
		c->sec = (int64_t)timegm(&tm);
		memcpy(c->sec_text, t, 19);
	}
	int64_t frac = 0;
	for (int i = 20; i < 29; i++)
		frac = frac * 10 + (t[i] - '0');
	return c->sec * 1000000000LL + frac;
}

static int by_value(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int on_message(const char *text, size_t len, void *ud)
{
	struct counts *c = ud;
	const char *p = text, *end = text + len;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	int64_t now_ns = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	c->frames++;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (n > 16 && !memcmp(p, "{\"lost_events\":", 15)) {
			const char *k = strstr(p, "\"num_events_lost\":");
			if (k && k < p + n)
				c->lost += strtoull(k + 18, NULL, 10);
		} else {
			if (c->flows++ % LAT_EVERY == 0 && c->nlat < LAT_MAX) {
				int64_t t = flow_time_ns(c, p, n);
				if (t > 0)
					c->lat_ns[c->nlat++] = now_ns > t ? (uint64_t)(now_ns - t) : 0;
			}
		}
		p = nl ? nl + 1 : end;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: bench_ws_follow SOCKET PATH?QUERY READY_FILE IDLE_SECONDS\n");
		return 2;
	}
	struct counts c = {.lat_ns = malloc(LAT_MAX * sizeof(uint64_t))};
	if (!c.lat_ns)
		return 1;
	int fd = ws_connect(argv[1], argv[2]);
	if (fd < 0)
		return 1;
	struct timeval idle = {.tv_sec = atoi(argv[4])};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
	FILE *ready = fopen(argv[3], "w");
	if (ready)
		fclose(ready);
	int rc = ws_read(fd, argv[2], on_message, &c);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	unsigned long long cpu_ns =
		((unsigned long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000ULL +
		 (unsigned long long)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec)) * 1000ULL;
	qsort(c.lat_ns, c.nlat, sizeof(*c.lat_ns), by_value);
	double p50 = c.nlat ? (double)c.lat_ns[c.nlat / 2] / 1e3 : -1;
	double p99 = c.nlat ? (double)c.lat_ns[c.nlat * 99 / 100] / 1e3 : -1;
	double max = c.nlat ? (double)c.lat_ns[c.nlat - 1] / 1e3 : -1;
	printf("{\"flows\": %llu, \"lost\": %llu, \"frames\": %llu, \"cpu_ns\": %llu, "
	       "\"lat_p50_us\": %.0f, \"lat_p99_us\": %.0f, \"lat_max_us\": %.0f}\n",
	       c.flows, c.lost, c.frames, cpu_ns, p50, p99, max);
	free(c.lat_ns);
	return rc < 0 ? 1 : 0;
}
