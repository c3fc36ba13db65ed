/* tests/bench/bench_ipam.c - timing helper of tests/bench/bench_ipam_api.sh:
 * address allocations through the agent's API against the same number
 * through a CNI IPAM plugin invoked as a runtime does (one process each).
 *
 *   bench_ipam alloc SOCKET COUNT OWNER-PREFIX
 *       POST /v1/ipam?family=ipv4&owner=<prefix>-<i> COUNT times on one
 *       keep-alive connection (after 20 warm-up requests); each must be 201.
 *   bench_ipam cni PLUGIN COUNT CONFIG-FILE
 *       run PLUGIN COUNT times with CNI_COMMAND=ADD, CNI_CONTAINERID=bench-<i>,
 *       CNI_IFNAME=eth0, the config on stdin; each must exit 0.
 * Both print one line:
 *       <what> n=.. per_s=.. p50_us=.. p99_us=.. mean_us=..
 * Every wait is bounded, so a hung agent or plugin fails the run. */
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
#define WARMUP 20

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
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
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
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
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A keep-alive connection: bytes past the current response stay buffered. */
struct conn {
	int fd;
	char buf[65536];
	size_t len;
};

static int conn_fill(struct conn *c)
{
	if (c->len >= sizeof(c->buf) - 1) {
		errno = EMSGSIZE;
		return -1;
	}
	if (wait_fd(c->fd, POLLIN) != 0)
		return -1;
	ssize_t n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len, 0);
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

static long content_length(const char *head, const char *end)
{
	for (const char *l = strstr(head, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n"))
		if (strncasecmp(l + 2, "content-length:", 15) == 0)
			return strtol(l + 17, NULL, 10);
	return -1;
}

/* One request, one response; returns the HTTP status or -1. */
static int http_post(struct conn *c, const char *path)
{
	char req[512];
	int n = snprintf(req, sizeof(req), "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
			 path);
	if (n < 0 || (size_t)n >= sizeof(req) || write_all(c->fd, req, (size_t)n) != 0)
		return -1;
	char *end;
	while (!(end = strstr(c->buf, "\r\n\r\n")))
		if (conn_fill(c) != 0)
			return -1;
	int status = 0;
	long clen = content_length(c->buf, end);
	if (sscanf(c->buf, "HTTP/1.%*d %d", &status) != 1 || clen < 0) {
		errno = EPROTO;
		return -1;
	}
	size_t total = (size_t)(end - c->buf) + 4 + (size_t)clen;
	while (c->len < total)
		if (conn_fill(c) != 0)
			return -1;
	if (status != 201)
		fprintf(stderr, "bench_ipam: POST %s: %d %.*s\n", path, status, (int)clen, end + 4);
	memmove(c->buf, c->buf + total, c->len - total);
	c->len -= total;
	c->buf[c->len] = '\0';
	return status;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double pct(const double *v, size_t n, double p)
{
	double r = p * (double)n;
	size_t k = (size_t)r;
	if ((double)k < r)
		k++;
	return v[k ? k - 1 : 0];
}

static void print_stats(const char *what, double *v, size_t n, double total_us)
{
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += v[i];
	qsort(v, n, sizeof(*v), cmp_double);
	printf("%s n=%zu per_s=%.1f p50_us=%.1f p99_us=%.1f mean_us=%.1f\n", what, n,
	       (double)n / (total_us / 1e6), pct(v, n, 0.50), pct(v, n, 0.99), sum / (double)n);
}

static int cmd_alloc(const char *sock, size_t count, const char *prefix)
{
	static struct conn c;
	c.fd = connect_unix(sock);
	if (c.fd < 0) {
		fprintf(stderr, "bench_ipam: connect %s: %s\n", sock, strerror(errno));
		return 1;
	}
	char path[400];
	for (int i = 0; i < WARMUP; i++) {
		snprintf(path, sizeof(path), "/v1/ipam?family=ipv4&owner=%s-warm-%d", prefix, i);
		if (http_post(&c, path) != 201)
			return 1;
	}
	double *v = calloc(count, sizeof(*v));
	if (!v)
		return 1;
	double t0 = now_us();
	for (size_t i = 0; i < count; i++) {
		snprintf(path, sizeof(path), "/v1/ipam?family=ipv4&owner=%s-%zu", prefix, i);
		double t = now_us();
		if (http_post(&c, path) != 201) {
			fprintf(stderr, "bench_ipam: request %zu failed (%s)\n", i, strerror(errno));
			return 1;
		}
		v[i] = now_us() - t;
	}
	print_stats("alloc", v, count, now_us() - t0);
	free(v);
	close(c.fd);
	return 0;
}

/* One plugin run: config on stdin, stdout/stderr to /dev/null; 0 when it
 * exited 0 within the timeout. */
static int run_plugin(const char *plugin, const char *config, size_t len, size_t i)
{
	int in[2];
	if (pipe2(in, O_CLOEXEC))
		return -1;
	pid_t parent = getpid(), pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		char id[64];
		snprintf(id, sizeof(id), "bench-%zu", i);
		int null = open("/dev/null", O_WRONLY);
		dup2(in[0], STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		setenv("CNI_COMMAND", "ADD", 1);
		setenv("CNI_CONTAINERID", id, 1);
		setenv("CNI_NETNS", "/var/run/netns/bench", 1);
		setenv("CNI_IFNAME", "eth0", 1);
		setenv("CNI_PATH", "/usr/lib/cni", 1);
		execl(plugin, plugin, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	ssize_t w = pid < 0 ? -1 : write(in[1], config, len); /* < PIPE_BUF: one write */
	close(in[1]);
	if (w != (ssize_t)len)
		return -1;
	int st;
	double deadline = now_us() + IO_TIMEOUT_MS * 1000.0;
	while (waitpid(pid, &st, WNOHANG) != pid) {
		if (now_us() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		usleep(20);
	}
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int cmd_cni(const char *plugin, size_t count, const char *config_file)
{
	static char config[4096]; /* PIPE_BUF: written in one go */
	FILE *f = fopen(config_file, "r");
	size_t len = f ? fread(config, 1, sizeof(config) - 1, f) : 0;
	if (f)
		fclose(f);
	if (!len) {
		fprintf(stderr, "bench_ipam: cannot read %s\n", config_file);
		return 1;
	}
	double *v = calloc(count, sizeof(*v));
	if (!v)
		return 1;
	double t0 = now_us();
	for (size_t i = 0; i < count; i++) {
		double t = now_us();
		if (run_plugin(plugin, config, len, i) != 0) {
			fprintf(stderr, "bench_ipam: %s run %zu failed\n", plugin, i);
			return 1;
		}
		v[i] = now_us() - t;
	}
	print_stats("cni", v, count, now_us() - t0);
	free(v);
	return 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN); /* a plugin exiting before reading its stdin */
	if (argc == 5 && strcmp(argv[1], "alloc") == 0)
		return cmd_alloc(argv[2], strtoul(argv[3], NULL, 10), argv[4]);
	if (argc == 5 && strcmp(argv[1], "cni") == 0)
		return cmd_cni(argv[2], strtoul(argv[3], NULL, 10), argv[4]);
	fprintf(stderr, "usage: bench_ipam alloc SOCKET COUNT OWNER-PREFIX\n"
			"       bench_ipam cni PLUGIN COUNT CONFIG-FILE\n");
	return 2;
}
