/* tests/bench/bench_api.c - timing helper of tests/bench/run.sh (make bench):
 * a minimal HTTP/1.1 client for the agent's unix socket plus process timing,
 * so the benchmark measures the agent and not curl or the shell.
 *
 *   bench_api agent SOCKET LOGFILE -- AGENT [ARGS...]
 *       fork/exec the agent (stdout+stderr to LOGFILE, killed if we die),
 *       poll GET /v1/healthz until 200, read bootstrap.total_ms from
 *       GET /v1/status and VmRSS from /proc/PID/status, send SIGTERM and
 *       wait for the exit. Prints one line:
 *       agent ready_ms=.. bootstrap_ms=.. rss_kb=.. stop_ms=.. exit=..
 *   bench_api rtt SOCKET COUNT [PATH]       one keep-alive connection
 *   bench_api rtt-new SOCKET COUNT [PATH]   a new connection per request
 *       GET PATH (default /v1/status) COUNT times after a short warm-up;
 *       prints: rtt n=.. p50_us=.. p99_us=.. mean_us=.. bytes=..
 *   bench_api spawn COUNT -- CMD [ARGS...]
 *       run CMD COUNT times (stdout/stderr to /dev/null), each must exit 0;
 *       prints: spawn n=.. p50_us=.. p99_us=.. mean_us=..
 * Every wait is bounded, so a hung agent fails the run instead of hanging. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IO_TIMEOUT_MS 5000
#define READY_TIMEOUT_MS 10000
#define STOP_TIMEOUT_MS 15000

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void sleep_us(long us)
{
	struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int connect_unix(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

static int wait_fd(int fd, short events)
{
	struct pollfd p = {.fd = fd, .events = events};
	for (;;) {
		int rc = poll(&p, 1, IO_TIMEOUT_MS);
		if (rc > 0)
			return 0;
		if (rc == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (errno != EINTR)
			return -1;
	}
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		if (wait_fd(fd, POLLOUT) != 0)
			return -1;
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A response buffer that keeps bytes past the current response (keep-alive). */
struct conn {
	int fd;
	char *buf;
	size_t len, cap;
};

static int conn_fill(struct conn *c)
{
	if (c->len == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 65536;
		char *grown = realloc(c->buf, cap + 1);
		if (!grown)
			return -1;
		c->buf = grown;
		c->cap = cap;
	}
	if (wait_fd(c->fd, POLLIN) != 0)
		return -1;
	ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
	if (n < 0)
		return errno == EINTR ? 0 : -1;
	if (n == 0) {
		errno = ECONNRESET;
		return -1;
	}
	c->len += (size_t)n;
	c->buf[c->len] = '\0';
	return 0;
}

/* Send GET path, read one response. Returns the HTTP status (or -1); the
 * body is copied to body (NUL-terminated, truncated to bodysz) if given. */
static int http_get(struct conn *c, const char *path, char *body, size_t bodysz, size_t *body_len)
{
	char req[512];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
	if (n < 0 || (size_t)n >= sizeof(req) || write_all(c->fd, req, (size_t)n) != 0)
		return -1;
	char *end;
	while (!c->buf || !(end = strstr(c->buf, "\r\n\r\n")))
		if (conn_fill(c) != 0)
			return -1;
	size_t head_len = (size_t)(end - c->buf) + 4;
	int status = 0;
	if (sscanf(c->buf, "HTTP/1.%*d %d", &status) != 1) {
		errno = EPROTO;
		return -1;
	}
	size_t clen = 0;
	bool have_clen = false;
	for (char *line = strstr(c->buf, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n")) {
		if (strncasecmp(line + 2, "content-length:", 15) == 0) {
			clen = strtoull(line + 2 + 15, NULL, 10);
			have_clen = true;
		}
	}
	if (!have_clen) {
		errno = EPROTO; /* the agent always sends Content-Length */
		return -1;
	}
	while (c->len < head_len + clen)
		if (conn_fill(c) != 0)
			return -1;
	if (body && bodysz) {
		size_t k = clen < bodysz - 1 ? clen : bodysz - 1;
		memcpy(body, c->buf + head_len, k);
		body[k] = '\0';
	}
	if (body_len)
		*body_len = clen;
	memmove(c->buf, c->buf + head_len + clen, c->len - head_len - clen);
	c->len -= head_len + clen;
	c->buf[c->len] = '\0';
	return status;
}

static void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->len = 0;
	if (c->buf)
		c->buf[0] = '\0';
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array. */
static double pct(const double *v, size_t n, double p)
{
	double r = p * (double)n;
	size_t k = (size_t)r;
	if ((double)k < r)
		k++;
	return v[k ? k - 1 : 0];
}

static void print_stats(const char *what, double *v, size_t n, const char *extra)
{
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += v[i];
	qsort(v, n, sizeof(*v), cmp_double);
	printf("%s n=%zu p50_us=%.1f p99_us=%.1f mean_us=%.1f%s\n", what, n, pct(v, n, 0.50),
	       pct(v, n, 0.99), sum / (double)n, extra ? extra : "");
}

/* ---- agent start/stop ---------------------------------------------------- */

static long vmrss_kb(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long kb = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* waitpid with a deadline; returns the wait status or -1 on timeout. */
static int wait_child(pid_t pid, int timeout_ms, int *status)
{
	double deadline = now_us() + timeout_ms * 1000.0;
	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);
		if (r == pid)
			return 0;
		if (r < 0 && errno != EINTR)
			return -1;
		if (now_us() > deadline)
			return -1;
		sleep_us(50);
	}
}

static void kill_and_reap(pid_t pid)
{
	int st;
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
}

static int cmd_agent(const char *sock, const char *logfile, char **argv)
{
	int logfd = open(logfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (logfd < 0) {
		fprintf(stderr, "bench_api: %s: %s\n", logfile, strerror(errno));
		return 1;
	}
	unlink(sock);
	pid_t parent = getpid();
	double t0 = now_us();
	pid_t pid = fork();
	if (pid < 0) {
		perror("bench_api: fork");
		return 1;
	}
	if (pid == 0) {
		/* Never outlive the benchmark, whatever happens to it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		dup2(logfd, STDOUT_FILENO);
		dup2(logfd, STDERR_FILENO);
		execv(argv[0], argv);
		fprintf(stderr, "bench_api: exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(logfd);

	/* Ready: the socket answers GET /v1/healthz with 200. */
	struct conn c = {.fd = -1};
	double ready_us = -1;
	int last_status = 0;
	while (ready_us < 0) {
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			fprintf(stderr, "bench_api: agent exited before ready (status 0x%x), see %s\n", st,
				logfile);
			return 1;
		}
		if (now_us() - t0 > READY_TIMEOUT_MS * 1000.0) {
			fprintf(stderr, "bench_api: agent not ready within %d ms (last healthz %d), see %s\n",
				READY_TIMEOUT_MS, last_status, logfile);
			kill_and_reap(pid);
			return 1;
		}
		c.fd = connect_unix(sock);
		if (c.fd < 0) {
			sleep_us(50);
			continue;
		}
		last_status = http_get(&c, "/v1/healthz", NULL, 0, NULL);
		if (last_status == 200)
			ready_us = now_us() - t0;
		else
			sleep_us(50);
		conn_close(&c);
	}

	/* The agent's own view of its bootstrap, and its memory. */
	double bootstrap_ms = -1;
	static char body[1 << 20];
	c.fd = connect_unix(sock);
	if (c.fd >= 0 && http_get(&c, "/v1/status", body, sizeof(body), NULL) == 200) {
		const char *p = strstr(body, "\"total_ms\"");
		if (p && (p = strchr(p, ':')))
			bootstrap_ms = strtod(p + 1, NULL);
	}
	conn_close(&c);
	free(c.buf);
	long rss = vmrss_kb(pid);

	double s0 = now_us();
	kill(pid, SIGTERM);
	int st = 0;
	if (wait_child(pid, STOP_TIMEOUT_MS, &st) != 0) {
		fprintf(stderr, "bench_api: agent did not stop within %d ms of SIGTERM, see %s\n",
			STOP_TIMEOUT_MS, logfile);
		kill_and_reap(pid);
		return 1;
	}
	double stop_us = now_us() - s0;
	int exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	printf("agent ready_ms=%.3f bootstrap_ms=%.3f rss_kb=%ld stop_ms=%.3f exit=%d\n",
	       ready_us / 1000.0, bootstrap_ms, rss, stop_us / 1000.0, exit_code);
	return 0;
}

/* ---- API round trip -------------------------------------------------------- */

static int cmd_rtt(const char *sock, long count, const char *path, bool reconnect)
{
	double *v = calloc((size_t)count, sizeof(*v));
	if (!v)
		return 1;
	struct conn c = {.fd = -1};
	size_t bytes = 0;
	const long warmup = 50;
	for (long i = -warmup; i < count; i++) {
		double t0 = now_us();
		if (c.fd < 0 && (c.fd = connect_unix(sock)) < 0) {
			fprintf(stderr, "bench_api: connect %s: %s\n", sock, strerror(errno));
			return 1;
		}
		int status = http_get(&c, path, NULL, 0, &bytes);
		if (status != 200) {
			fprintf(stderr, "bench_api: GET %s: %s\n", path,
				status < 0 ? strerror(errno) : "status is not 200");
			return 1;
		}
		if (reconnect)
			conn_close(&c);
		if (i >= 0)
			v[i] = now_us() - t0;
	}
	conn_close(&c);
	free(c.buf);
	char extra[64];
	snprintf(extra, sizeof(extra), " bytes=%zu", bytes);
	print_stats("rtt", v, (size_t)count, extra);
	free(v);
	return 0;
}

/* ---- process spawn ------------------------------------------------------- */

static int cmd_spawn(long count, char **argv)
{
	double *v = calloc((size_t)count, sizeof(*v));
	if (!v)
		return 1;
	int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (devnull < 0)
		return 1;
	for (long i = -5; i < count; i++) {
		double t0 = now_us();
		pid_t pid = fork();
		if (pid < 0) {
			perror("bench_api: fork");
			return 1;
		}
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			dup2(devnull, STDOUT_FILENO);
			dup2(devnull, STDERR_FILENO);
			execv(argv[0], argv);
			_exit(127);
		}
		int st;
		if (wait_child(pid, IO_TIMEOUT_MS * 2, &st) != 0) {
			fprintf(stderr, "bench_api: %s did not finish\n", argv[0]);
			kill_and_reap(pid);
			return 1;
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "bench_api: %s failed (status 0x%x)\n", argv[0], st);
			return 1;
		}
		if (i >= 0)
			v[i] = now_us() - t0;
	}
	close(devnull);
	print_stats("spawn", v, (size_t)count, NULL);
	free(v);
	return 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: bench_api agent SOCKET LOGFILE -- AGENT [ARGS...]\n"
			"       bench_api rtt|rtt-new SOCKET COUNT [PATH]\n"
			"       bench_api spawn COUNT -- CMD [ARGS...]\n");
	return 2;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return usage();
	const char *cmd = argv[1];
	if (strcmp(cmd, "agent") == 0) {
		if (argc < 6 || strcmp(argv[4], "--") != 0)
			return usage();
		return cmd_agent(argv[2], argv[3], argv + 5);
	}
	if (strcmp(cmd, "rtt") == 0 || strcmp(cmd, "rtt-new") == 0) {
		if (argc < 4 || argc > 5)
			return usage();
		long count = strtol(argv[3], NULL, 10);
		if (count <= 0)
			return usage();
		return cmd_rtt(argv[2], count, argc == 5 ? argv[4] : "/v1/status",
			       strcmp(cmd, "rtt-new") == 0);
	}
	if (strcmp(cmd, "spawn") == 0) {
		if (argc < 5 || strcmp(argv[3], "--") != 0)
			return usage();
		long count = strtol(argv[2], NULL, 10);
		if (count <= 0)
			return usage();
		return cmd_spawn(count, argv + 4);
	}
	return usage();
}
