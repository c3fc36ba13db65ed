/* tests/bench/bench_dp_rr.c - a TCP request/response benchmark (netperf
 * TCP_RR style) for tests/bench/bench_datapath.sh: the client sends one
 * byte, waits for the server's one byte back, and counts round trips.
 *
 *   bench_dp_rr server PORTFILE        listen on a free port (IPv4 and
 *                                      IPv6), write it to PORTFILE, echo
 *                                      every byte of each connection
 *   bench_dp_rr client HOST PORT SECS  ping-pong for SECS seconds, print
 *                                      "transactions=N seconds=S rate=R"
 *   bench_dp_rr crr-server PORTFILE    netperf TCP_CRR's server, in one
 *                                      process: each connection gets its
 *                                      byte echoed, then the server closes
 *   bench_dp_rr crr HOST PORT SECS     a new connection per transaction
 *                                      (connect, one byte there and back,
 *                                      close) for SECS seconds; prints
 *                                      "connections=N seconds=S rate=R" */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int write_port(const char *path, int port)
{
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0) {
		fprintf(stderr, "bench_dp_rr: cannot write %s: %s\n", tmp, strerror(errno));
		return -1;
	}
	return rename(tmp, path);
}

static void echo_conn(int c)
{
	char b;
	nodelay(c);
	while (read(c, &b, 1) == 1)
		if (write(c, &b, 1) != 1)
			break;
	close(c);
}

static int serve(const char *portfile, bool one_shot)
{
	int s = socket(AF_INET6, SOCK_STREAM, 0);
	int zero = 0, one = 1;
	struct sockaddr_in6 a;
	socklen_t len = sizeof(a);

	if (s < 0) {
		perror("bench_dp_rr: socket");
		return 1;
	}
	setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&a, 0, sizeof(a));
	a.sin6_family = AF_INET6;
	a.sin6_addr = in6addr_any;
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s, 128) != 0 ||
	    getsockname(s, (struct sockaddr *)&a, &len) != 0) {
		perror("bench_dp_rr: bind/listen");
		return 1;
	}
	if (write_port(portfile, ntohs(a.sin6_port)) != 0)
		return 1;
	signal(SIGCHLD, SIG_IGN); /* children reaped by the kernel */
	for (;;) {
		int c = accept(s, NULL, NULL);
		if (c < 0) {
			if (errno == EINTR)
				continue;
			perror("bench_dp_rr: accept");
			return 1;
		}
		if (one_shot) { /* TCP_CRR: no fork, the connection's cost is the path's */
			char b;
			nodelay(c);
			if (read(c, &b, 1) == 1 && write(c, &b, 1) != 1)
				perror("bench_dp_rr: write");
			close(c);
			continue;
		}
		pid_t pid = fork();
		if (pid == 0) {
			close(s);
			echo_conn(c);
			_exit(0);
		}
		close(c);
	}
}

static int client(const char *host, const char *port, double secs)
{
	struct addrinfo hints, *res;
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0) {
		fprintf(stderr, "bench_dp_rr: %s port %s: %s\n", host, port, gai_strerror(rc));
		return 1;
	}
	int c = socket(res->ai_family, SOCK_STREAM, 0);
	if (c < 0 || connect(c, res->ai_addr, res->ai_addrlen) != 0) {
		fprintf(stderr, "bench_dp_rr: connect %s port %s: %s\n", host, port, strerror(errno));
		freeaddrinfo(res);
		return 1;
	}
	freeaddrinfo(res);
	nodelay(c);
	unsigned long long n = 0;
	char b = 'x';
	double start = now_s(), end = start + secs, t = start;
	while (t < end) {
		/* check the clock every 64 round trips */
		for (int i = 0; i < 64; i++) {
			if (write(c, &b, 1) != 1 || read(c, &b, 1) != 1) {
				fprintf(stderr, "bench_dp_rr: connection lost after %llu\n", n);
				return 1;
			}
			n++;
		}
		t = now_s();
	}
	close(c);
	printf("transactions=%llu seconds=%.3f rate=%.0f\n", n, t - start, (double)n / (t - start));
	return 0;
}

/* TCP_CRR: connect, one byte there and back, close; the server closes
 * first (its side keeps the TIME_WAIT), so the client's ports come back at
 * once and only the path limits the rate */
static int client_crr(const char *host, const char *port, double secs)
{
	struct addrinfo hints, *res;
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0) {
		fprintf(stderr, "bench_dp_rr: %s port %s: %s\n", host, port, gai_strerror(rc));
		return 1;
	}
	unsigned long long n = 0;
	double start = now_s(), end = start + secs, t = start;
	while (t < end) {
		for (int i = 0; i < 16; i++) {
			char b = 'x';
			int c = socket(res->ai_family, SOCK_STREAM, 0);
			if (c < 0 || connect(c, res->ai_addr, res->ai_addrlen) != 0) {
				fprintf(stderr, "bench_dp_rr: connection %llu to %s port %s: %s\n", n + 1,
					host, port, strerror(errno));
				freeaddrinfo(res);
				return 1;
			}
			nodelay(c);
			if (write(c, &b, 1) != 1 || read(c, &b, 1) != 1) {
				fprintf(stderr, "bench_dp_rr: connection %llu: no answer\n", n + 1);
				freeaddrinfo(res);
				return 1;
			}
			while (read(c, &b, 1) > 0) /* the server's FIN */
				;
			close(c);
			n++;
		}
		t = now_s();
	}
	freeaddrinfo(res);
	printf("connections=%llu seconds=%.3f rate=%.0f\n", n, t - start, (double)n / (t - start));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && (!strcmp(argv[1], "server") || !strcmp(argv[1], "crr-server")))
		return serve(argv[2], !strcmp(argv[1], "crr-server"));
	if (argc == 5 && (!strcmp(argv[1], "client") || !strcmp(argv[1], "crr"))) {
		double secs = atof(argv[4]);
		if (secs <= 0) {
			fprintf(stderr, "bench_dp_rr: SECS must be positive, not '%s'\n", argv[4]);
			return 2;
		}
		return !strcmp(argv[1], "crr") ? client_crr(argv[2], argv[3], secs)
					       : client(argv[2], argv[3], secs);
	}
	fprintf(stderr, "usage: bench_dp_rr server|crr-server PORTFILE | client|crr HOST PORT SECS\n");
	return 2;
}
