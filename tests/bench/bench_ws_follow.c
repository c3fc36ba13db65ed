/* tests/bench/bench_ws_follow.c - a websocket follower of the agent's flow
 * stream for bench_flows.sh's fan-out figure: the CLI's own client
 * (cli/ws.c) on the unix socket, counting lines (flows) and the lost
 * notices, nothing parsed, so what is measured is the agent's side. Ends
 * after IDLE seconds without a message (SO_RCVTIMEO) or at the close.
 *
 *   bench_ws_follow SOCKET PATH?QUERY READY_FILE IDLE_SECONDS
 * Output: one JSON object {"flows": N, "lost": M, "frames": F, "cpu_ns": C}
 * (C: this process's user and system CPU time, to put the reader's cost
 * per flow beside the agent's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "../../cli/cli.h"

struct cli_options opt;

struct counts {
	unsigned long long flows, lost, frames;
};

static int on_message(const char *text, size_t len, void *ud)
{
	struct counts *c = ud;
	const char *p = text, *end = text + len;
	c->frames++;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (n > 16 && !memcmp(p, "{\"lost_events\":", 15)) {
			const char *k = strstr(p, "\"num_events_lost\":");
			if (k && k < p + n)
				c->lost += strtoull(k + 18, NULL, 10);
		} else {
			c->flows++;
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
	struct counts c = {0};
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
	printf("{\"flows\": %llu, \"lost\": %llu, \"frames\": %llu, \"cpu_ns\": %llu}\n", c.flows,
	       c.lost, c.frames, cpu_ns);
	return rc < 0 ? 1 : 0;
}
