/* host/metrics_process.c - the process metrics every Prometheus client
 * library exports (process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds,
 * process_start_time_seconds), read from /proc/self and getrusage at each
 * scrape, so dashboards made for any Prometheus-instrumented daemon work
 * on the agent unchanged. */
#include "internal.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static struct {
	struct fibril_metric *cpu, *rss, *vsz, *open_fds, *max_fds, *start_time;
} g_proc;

/* Open descriptors: the entries of /proc/self/fd, less the one reading it. */
static double open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	double n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;
}

/* The process's start, Unix seconds: /proc/self/stat's starttime (clock
 * ticks after boot) plus /proc/stat's btime. -1 when unreadable. */
static double start_time(void)
{
	char buf[1024], *p;
	unsigned long long ticks = 0, btime = 0;
	FILE *f = fopen("/proc/self/stat", "re");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

	if (f)
		fclose(f);
	buf[n] = '\0';
	/* after the ")" ending comm: field 3 (state) onwards; starttime is 22 */
	if (!(p = strrchr(buf, ')')))
		return -1;
	p++;
	for (int field = 3; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p, " %llu", &ticks) != 1)
		return -1;
	if (!(f = fopen("/proc/stat", "re")))
		return -1;
	while (fgets(buf, sizeof(buf), f))
		if (sscanf(buf, "btime %llu", &btime) == 1)
			break;
	fclose(f);
	long hz = sysconf(_SC_CLK_TCK);
	if (!btime || hz <= 0)
		return -1;
	return (double)btime + (double)ticks / (double)hz;
}

static void process_scrape(struct fibril_module *m, void *ud)
{
	(void)m;
	(void)ud;
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		fibril_series_set(fibril_metric_series(g_proc.cpu, NULL),
				  (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
					  (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
	unsigned long long pages_vsz = 0, pages_rss = 0;
	FILE *f = fopen("/proc/self/statm", "re");
	if (f && fscanf(f, "%llu %llu", &pages_vsz, &pages_rss) == 2) {
		double page = (double)sysconf(_SC_PAGESIZE);
		fibril_series_set(fibril_metric_series(g_proc.vsz, NULL), (double)pages_vsz * page);
		fibril_series_set(fibril_metric_series(g_proc.rss, NULL), (double)pages_rss * page);
	}
	if (f)
		fclose(f);
	double fds = open_fds();
	if (fds >= 0)
		fibril_series_set(fibril_metric_series(g_proc.open_fds, NULL), fds);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		fibril_series_set(fibril_metric_series(g_proc.max_fds, NULL), (double)rl.rlim_cur);
}

int metrics_process_init(void)
{
#define GAUGE(field, metric_name, text)                                                            \
	g_proc.field = fibril_metric_register(NULL, &(struct fibril_metric_opts){                  \
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_GAUGE,              \
		.name = metric_name, .help = text})
	/* a counter whose value is read, not added to: set at each scrape */
	g_proc.cpu = fibril_metric_register(NULL, &(struct fibril_metric_opts){
		.sz = sizeof(struct fibril_metric_opts), .type = FIBRIL_METRIC_COUNTER,
		.name = "process_cpu_seconds_total",
		.help = "Total user and system CPU time spent in seconds."});
	GAUGE(rss, "process_resident_memory_bytes", "Resident memory size in bytes.");
	GAUGE(vsz, "process_virtual_memory_bytes", "Virtual memory size in bytes.");
	GAUGE(open_fds, "process_open_fds", "Number of open file descriptors.");
	GAUGE(max_fds, "process_max_fds", "Maximum number of open file descriptors.");
	GAUGE(start_time, "process_start_time_seconds",
	      "Start time of the process since unix epoch in seconds.");
#undef GAUGE
	if (!g_proc.cpu || !g_proc.rss || !g_proc.vsz || !g_proc.open_fds || !g_proc.max_fds ||
	    !g_proc.start_time)
		return -1;
	double started = start_time();
	if (started > 0)
		fibril_series_set(fibril_metric_series(g_proc.start_time, NULL), started);
	fibril_metrics_on_scrape(NULL, process_scrape, NULL);
	return 0;
}
