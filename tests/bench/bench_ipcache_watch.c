/* tests/bench/bench_ipcache_watch.c - a helper of bench_cluster.sh: watches
 * a pinned ipcache map (LPM trie, struct dp_ipcache_key) and prints, for
 * every IPv4 /32 key that appears after it started, "ADDRESS NS" with the
 * CLOCK_REALTIME nanoseconds it was first seen. It walks the whole map every
 * 200 us; it exits once WANT new keys were seen, or after TIMEOUT seconds.
 * Usage: bench_ipcache_watch PIN WANT TIMEOUT (prints "ready" once the
 * existing keys are known). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

struct key {
	uint32_t prefixlen;
	uint8_t family;
	uint8_t pad[3];
	uint8_t addr[16];
};

#define SLOTS (1u << 20)
static uint32_t seen[SLOTS]; /* open addressing on the IPv4 address; 0: empty */

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* true when a was not known yet (and is now) */
static int remember(uint32_t a)
{
	uint32_t h = (a * 2654435761u) & (SLOTS - 1);

	while (seen[h]) {
		if (seen[h] == a)
			return 0;
		h = (h + 1) & (SLOTS - 1);
	}
	seen[h] = a;
	return 1;
}

static int scan(int fd, int report, long *news)
{
	struct key k, next;
	int first = 1;

	for (;;) {
		if (bpf_map_get_next_key(fd, first ? NULL : &k, &next))
			return errno == ENOENT ? 0 : -errno;
		first = 0;
		k = next;
		if (k.family != 4 || k.prefixlen != 32 + 32)
			continue;
		uint32_t a;

		memcpy(&a, k.addr, 4);
		if (a && remember(a) && report) {
			char text[INET_ADDRSTRLEN];

			printf("%s %lld\n", inet_ntop(AF_INET, &a, text, sizeof(text)),
			       (long long)now_ns());
			(*news)++;
		}
	}
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s PIN WANT TIMEOUT\n", argv[0]);
		return 2;
	}
	int fd = bpf_obj_get(argv[1]);
	long want = atol(argv[2]), news = 0;
	int64_t end = now_ns() + (int64_t)atol(argv[3]) * 1000000000;

	if (fd < 0) {
		fprintf(stderr, "bench_ipcache_watch: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	scan(fd, 0, &news);
	printf("ready\n");
	fflush(stdout);
	while (news < want && now_ns() < end) {
		if (scan(fd, 1, &news) < 0)
			return 1;
		fflush(stdout);
		usleep(200);
	}
	return news >= want ? 0 : 3;
}
