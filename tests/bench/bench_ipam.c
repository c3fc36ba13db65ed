/* tests/bench/bench_ipam.c - timing helper of tests/bench/bench_ipam_api.sh:
 * address allocations through the agent's API against the same number
 * through a CNI IPAM plugin invoked as a runtime does (one process each).
 *
 *   bench_ipam alloc SOCKET COUNT OWNER-PREFIX [CLIENTS]
 *       POST /v1/ipam?family=ipv4&owner=<prefix>-<i> COUNT times in all,
 *       by CLIENTS (1) threads, each on its own keep-alive connection and
 *       one request at a time (after 20 warm-up requests); each must be 201.
 *       With FLOOR-DIR (1 client only) each request has one floor write
 *       (below) next to it, before and after in turn, timed apart, so both are measured in the same
 *       seconds of a shared disk; then each rate is n / its own time, and a
 *       second line "floor ..." follows.
 *   bench_ipam cni PLUGIN COUNT CONFIG-FILE [CLIENTS]
 *       run PLUGIN COUNT times with CNI_COMMAND=ADD, CNI_CONTAINERID=bench-<i>,
 *       CNI_IFNAME=eth0, the config on stdin, CLIENTS (1) runs at a time;
 *       each must exit 0.
 *   bench_ipam floor DIR COUNT
 *       the disk's floor for one-at-a-time durable writes: COUNT times a
 *       64-byte append + fdatasync to a new file in DIR (removed after).
 * Each prints one line:
 *       <what> n=.. per_s=.. p50_us=.. p99_us=.. mean_us=..
 * Every wait is bounded, so a hung agent or plugin fails the run. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IO_TIMEOUT_MS 5000
#define WARMUP 20
#define PLUGIN_TIMEOUT_MS 30000 /* a plugin run, waiting for its lock among 32 */

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

/* A socket or a file (a file always polls writable). */
static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		if (wait_fd(fd, POLLOUT) != 0)
			return -1;
		ssize_t n = write(fd, buf, len); /* SIGPIPE is ignored */
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

/* The clients of a run share the next index and the latency array. */
struct run {
	const char *sock, *prefix, *plugin, *config;
	size_t count, config_len;
	atomic_size_t next;
	atomic_int failed;
	double *v;
	int floor_fd;      /* >= 0: one floor write next to each request (1 client) */
	double *floor_v;   /* its latencies */
};

static const char floor_rec[64] = "fsync floor: a record about the size of an allocation's";

/* One floor write (1 client: no other thread touches floor_v[i]). */
static int floor_write(struct run *r, size_t i)
{
	double t = now_us();
	if (write_all(r->floor_fd, floor_rec, sizeof(floor_rec)) || fdatasync(r->floor_fd)) {
		fprintf(stderr, "bench_ipam: the floor's write: %s\n", strerror(errno));
		atomic_store(&r->failed, 1);
		return -1;
	}
	r->floor_v[i] = now_us() - t;
	return 0;
}

static void *alloc_client(void *arg)
{
	struct run *r = arg;
	struct conn *c = calloc(1, sizeof(*c));
	if (!c || (c->fd = connect_unix(r->sock)) < 0) {
		fprintf(stderr, "bench_ipam: connect %s: %s\n", r->sock, strerror(errno));
		atomic_store(&r->failed, 1);
		free(c);
		return NULL;
	}
	char path[400];
	for (size_t i; !atomic_load(&r->failed) && (i = atomic_fetch_add(&r->next, 1)) < r->count;) {
		/* the floor's write goes before the request one time, after it
		 * the next: the first sync after a pause commits what the rest
		 * of the machine left in the filesystem's journal */
		if (r->floor_fd >= 0 && i % 2 == 0 && floor_write(r, i) != 0)
			break;
		snprintf(path, sizeof(path), "/v1/ipam?family=ipv4&owner=%s-%zu", r->prefix, i);
		double t = now_us();
		if (http_post(c, path) != 201) {
			fprintf(stderr, "bench_ipam: request %zu failed (%s)\n", i, strerror(errno));
			atomic_store(&r->failed, 1);
			break;
		}
		r->v[i] = now_us() - t;
		if (r->floor_fd >= 0 && i % 2 == 1 && floor_write(r, i) != 0)
			break;
	}
	close(c->fd);
	free(c);
	return NULL;
}

/* CLIENTS threads running FN over r->count indices; prints the stats. */
static int run_clients(struct run *r, size_t clients, void *(*fn)(void *), const char *what)
{
	pthread_t th[256];
	if (clients < 1 || clients > 256 || !(r->v = calloc(r->count ? r->count : 1, sizeof(double)))) {
		fprintf(stderr, "bench_ipam: 1 to 256 clients\n");
		return 1;
	}
	atomic_init(&r->next, 0);
	atomic_init(&r->failed, 0);
	double t0 = now_us();
	size_t started = 0;
	for (; started < clients; started++)
		if (pthread_create(&th[started], NULL, fn, r)) {
			atomic_store(&r->failed, 1);
			break;
		}
	for (size_t k = 0; k < started; k++)
		pthread_join(th[k], NULL);
	double total = now_us() - t0;
	if (!atomic_load(&r->failed) && r->floor_fd >= 0) {
		/* interleaved: each rate from its own time only */
		double a = 0, f = 0;
		for (size_t i = 0; i < r->count; i++) {
			a += r->v[i];
			f += r->floor_v[i];
		}
		print_stats(what, r->v, r->count, a);
		print_stats("floor", r->floor_v, r->count, f);
	} else if (!atomic_load(&r->failed)) {
		print_stats(what, r->v, r->count, total);
	}
	free(r->v);
	return atomic_load(&r->failed) ? 1 : 0;
}

static int open_floor_file(const char *dir, char *path, size_t len)
{
	snprintf(path, len, "%s/fsync-floor.%d", dir, (int)getpid());
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0)
		fprintf(stderr, "bench_ipam: %s: %s\n", path, strerror(errno));
	return fd;
}

static int cmd_alloc(const char *sock, size_t count, const char *prefix, size_t clients,
		     const char *floor_dir)
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
	close(c.fd);
	struct run r = {.sock = sock, .prefix = prefix, .count = count, .floor_fd = -1};
	char fpath[4096];
	if (floor_dir && clients != 1) {
		fprintf(stderr, "bench_ipam: the interleaved floor needs 1 client\n");
		return 1;
	}
	if (floor_dir && ((r.floor_fd = open_floor_file(floor_dir, fpath, sizeof(fpath))) < 0 ||
			  !(r.floor_v = calloc(count ? count : 1, sizeof(double)))))
		return 1;
	int rc = run_clients(&r, clients, alloc_client, "alloc");
	if (r.floor_fd >= 0) {
		close(r.floor_fd);
		unlink(fpath);
	}
	free(r.floor_v);
	return rc;
}

/* One plugin run: config on stdin, stdout/stderr to /dev/null; 0 when it
 * exited 0 within the timeout. */
static int run_plugin(const char *plugin, const char *config, size_t len, size_t i)
{
	/* everything the child needs is made before fork: other threads run */
	char id[64];
	snprintf(id, sizeof(id), "CNI_CONTAINERID=bench-%zu", i);
	char *const env[] = {"CNI_COMMAND=ADD", id, "CNI_NETNS=/var/run/netns/bench",
			     "CNI_IFNAME=eth0", "CNI_PATH=/usr/lib/cni", NULL};
	char *const argv[] = {(char *)plugin, NULL};
	int in[2];
	if (pipe2(in, O_CLOEXEC))
		return -1;
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	pid_t parent = getpid(), pid = null < 0 ? -1 : fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		dup2(in[0], STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		execve(plugin, argv, env);
		_exit(127);
	}
	if (null >= 0)
		close(null);
	close(in[0]);
	ssize_t w = pid < 0 ? -1 : write(in[1], config, len); /* < PIPE_BUF: one write */
	close(in[1]);
	if (w != (ssize_t)len) {
		if (pid > 0) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
		}
		return -1;
	}
	/* sleep until it exits (a pidfd polls readable then): polling
	 * waitpid would take CPU from the plugins on a small machine */
	int st, pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	double deadline = now_us() + PLUGIN_TIMEOUT_MS * 1000.0;
	while (waitpid(pid, &st, WNOHANG) != pid) {
		double left_ms = (deadline - now_us()) / 1000.0;
		if (left_ms <= 0) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			if (pidfd >= 0)
				close(pidfd);
			return -1;
		}
		if (pidfd >= 0)
			poll(&(struct pollfd){.fd = pidfd, .events = POLLIN}, 1, (int)left_ms + 1);
		else
			usleep(500);
	}
	if (pidfd >= 0)
		close(pidfd);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void *cni_client(void *arg)
{
	struct run *r = arg;
	for (size_t i; !atomic_load(&r->failed) && (i = atomic_fetch_add(&r->next, 1)) < r->count;) {
		double t = now_us();
		if (run_plugin(r->plugin, r->config, r->config_len, i) != 0) {
			fprintf(stderr, "bench_ipam: %s run %zu failed\n", r->plugin, i);
			atomic_store(&r->failed, 1);
			break;
		}
		r->v[i] = now_us() - t;
	}
	return NULL;
}

static int cmd_cni(const char *plugin, size_t count, const char *config_file, size_t clients)
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
	struct run r = {.plugin = plugin, .config = config, .config_len = len, .count = count,
			.floor_fd = -1};
	return run_clients(&r, clients, cni_client, "cni");
}

/* The floor: one small record appended and fdatasync'd at a time. */
static int cmd_floor(const char *dir, size_t count)
{
	char path[4096];
	int fd = open_floor_file(dir, path, sizeof(path));
	if (fd < 0)
		return 1;
	double *v = calloc(count ? count : 1, sizeof(*v));
	int rc = v ? 0 : 1;
	double t0 = now_us();
	for (size_t i = 0; rc == 0 && i < count; i++) {
		double t = now_us();
		if (write_all(fd, floor_rec, sizeof(floor_rec)) || fdatasync(fd)) {
			fprintf(stderr, "bench_ipam: %s: %s\n", path, strerror(errno));
			rc = 1;
		}
		v[i] = now_us() - t;
	}
	double total = now_us() - t0;
	close(fd);
	unlink(path);
	if (rc == 0)
		print_stats("floor", v, count, total);
	free(v);
	return rc;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN); /* a plugin exiting before reading its stdin */
	size_t clients = argc >= 6 ? strtoul(argv[5], NULL, 10) : 1;
	if (argc >= 5 && argc <= 7 && strcmp(argv[1], "alloc") == 0)
		return cmd_alloc(argv[2], strtoul(argv[3], NULL, 10), argv[4], clients,
				 argc == 7 ? argv[6] : NULL);
	if ((argc == 5 || argc == 6) && strcmp(argv[1], "cni") == 0)
		return cmd_cni(argv[2], strtoul(argv[3], NULL, 10), argv[4], clients);
	if (argc == 4 && strcmp(argv[1], "floor") == 0)
		return cmd_floor(argv[2], strtoul(argv[3], NULL, 10));
	fprintf(stderr, "usage: bench_ipam alloc SOCKET COUNT OWNER-PREFIX [CLIENTS [FLOOR-DIR]]\n"
			"       bench_ipam cni PLUGIN COUNT CONFIG-FILE [CLIENTS]\n"
			"       bench_ipam floor DIR COUNT\n");
	return 2;
}
