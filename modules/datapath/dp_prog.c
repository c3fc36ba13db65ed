/* modules/datapath/dp_prog.c - the tc programs: loaded once per agent run
 * from the skeleton embedded at build time (bpf/fibril_dp.skel.h), with
 * every map handed over from the host's registry (bpf_map__reuse_fd before
 * load), then attached to each endpoint's host veth with clsact filters of
 * fixed handle and priority: fibril_from_endpoint on the ingress (what the
 * pod sends), fibril_to_endpoint on the egress (what the node's stack
 * delivers to the pod). Attaching with BPF_TC_F_REPLACE swaps the program
 * of an existing filter atomically, so a restarted agent re-adopts a veth
 * without a gap in traffic; stopping leaves the filters (and the programs
 * they hold) in place.
 *
 * Reuse: every loaded program is pinned as <bpffs-dir>/dp_prog_<hash>_<hook>,
 * <hash> being the FNV-1a hash of the embedded object. A start whose object
 * hashes the same, and whose pinned programs use the registry's maps as
 * they are now (a recreated map makes them stale), adopts the pins: no
 * verifier at all. Otherwise the load runs on a worker, the start stays
 * pending meanwhile (the loop runs; nothing waits on it), and the new
 * programs are pinned in place of the old ones. */
#include <errno.h>
#include <pthread.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "datapath.h"
#include "libbpf_log.h"
#include "node_addrs.h"
#include "fibril_dp.skel.h"

/* Which programs a load verifies: the endpoints' two always (DP_PROGS_
 * ENDPOINT); fibril_from_overlay only in tunnel mode and fibril_from_netdev
 * only with host-routing = bpf, each ~8% of the verifier's work. */
#define DP_PROGS_ENDPOINT 1u
#define DP_PROGS_OVERLAY 2u
#define DP_PROGS_NETDEV 4u

#define DP_TC_HANDLE 0xf1b1
/* The tc order contract (bpf/README.md): on a device the datapath shares
 * (fibril_from_netdev on an underlay device's ingress) its filter is at
 * priority 1, before the lb module's at 2 (modules/lb/tc.c), so the source
 * check and the pods' redirect run first whichever module attached first;
 * a program that lets a packet by returns TC_ACT_UNSPEC so the next runs. */
#define DP_TC_PRIORITY 1

struct dp_prog {
	struct fibril_dp *skel;
	struct fibril_dp *overlay_skel; /* fibril_from_overlay loaded later on its own */
	int fd[DP_HOOK_COUNT]; /* by enum dp_hook */
	int id[DP_HOOK_COUNT];
	int overlay_fd, overlay_id; /* fibril_from_overlay (tunnel mode) */
	int netdev_fd, netdev_id;   /* fibril_from_netdev (host-routing = bpf, masquerade) */
	int to_netdev_fd;           /* fibril_to_netdev (masquerade), loaded with it */
	unsigned adopted;           /* DP_PROGS_* whose fds came from pins (ours to close) */
};

static const enum bpf_tc_attach_point hook_point[DP_HOOK_COUNT] = {
	[DP_HOOK_INGRESS] = BPF_TC_INGRESS,
	[DP_HOOK_EGRESS] = BPF_TC_EGRESS,
};
static const char *const hook_name[DP_HOOK_COUNT] = {
	[DP_HOOK_INGRESS] = "ingress",
	[DP_HOOK_EGRESS] = "egress",
};

static int prog_id_of(int fd)
{
	struct bpf_prog_info info;
	uint32_t info_len = sizeof(info);
	memset(&info, 0, sizeof(info));
	if (bpf_obj_get_info_by_fd(fd, &info, &info_len) == 0)
		return (int)info.id;
	return 0;
}

/* libbpf's messages (the verifier log above all) go to the agent's log
 * while this module loads its program (modules/common/libbpf_log.c). */

static int reuse(struct bpf_map *map, int fd, char *err, size_t len)
{
	int rc = bpf_map__reuse_fd(map, fd);
	if (rc < 0)
		dp_seterr(err, len, "map %s does not fit the program: %s", bpf_map__name(map),
			  strerror(-rc));
	return rc;
}


/* Open the skeleton, hand it the registry's maps (fds by enum dp_map_id)
 * and load the programs in `which`: the kernel verifies them here. The
 * object into *out, the fds and ids of what it loaded into *p. Touches
 * nothing of the module but those, so it runs on a worker thread as well. */
static int prog_build(struct dp_prog *p, struct fibril_dp **out, unsigned which,
		      const int *map_fds, const struct bpf_object_open_opts *opts, char *err,
		      size_t len)
{
	struct fibril_dp *s = *out = fibril_dp__open_opts(opts);
	if (!s) {
		int rc = -errno;
		dp_seterr(err, len, "cannot open the BPF object: %s", strerror(-rc));
		return rc;
	}
	int rc;
	if ((rc = reuse(s->maps.dp_endpoints, map_fds[DPM_ENDPOINTS], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_ipcache, map_fds[DPM_IPCACHE], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_conntrack, map_fds[DPM_CONNTRACK], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_metrics, map_fds[DPM_METRICS], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_events, map_fds[DPM_EVENTS], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_config, map_fds[DPM_CONFIG], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_ct_any, map_fds[DPM_CT_ANY], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_frags, map_fds[DPM_FRAGS], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_evlimit, map_fds[DPM_EVLIMIT], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_policy, map_fds[DPM_POLICY], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_policy_ep, map_fds[DPM_POLICY_EP], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_frags_out, map_fds[DPM_FRAGS_OUT], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_ct_count, map_fds[DPM_CT_COUNT], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_nat, map_fds[DPM_NAT], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_nat_devs, map_fds[DPM_NAT_DEVS], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_nomasq, map_fds[DPM_NOMASQ], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_nat_count, map_fds[DPM_NAT_COUNT], err, len)) < 0 ||
	    (rc = reuse(s->maps.dp_egress, map_fds[DPM_EGRESS], err, len)) < 0)
		return rc;
	bpf_program__set_autoload(s->progs.fibril_from_endpoint, which & DP_PROGS_ENDPOINT);
	bpf_program__set_autoload(s->progs.fibril_to_endpoint, which & DP_PROGS_ENDPOINT);
	bpf_program__set_autoload(s->progs.fibril_from_overlay, which & DP_PROGS_OVERLAY);
	bpf_program__set_autoload(s->progs.fibril_from_netdev, which & DP_PROGS_NETDEV);
	bpf_program__set_autoload(s->progs.fibril_to_netdev, which & DP_PROGS_NETDEV);
	dp_vg_quiet_begin();
	rc = fibril_dp__load(s);
	dp_vg_quiet_end();
	if (rc == -EPERM) {
		/* not the verifier: bpf(2) itself was refused */
		dp_seterr(err, len,
			  "the kernel refused to load the tc programs: %s (loading BPF programs "
			  "needs CAP_BPF and CAP_NET_ADMIN, or CAP_SYS_ADMIN; a seccomp or LSM "
			  "policy may deny bpf(2))",
			  strerror(-rc));
		return rc;
	}
	if (rc < 0) {
		dp_seterr(err, len, "the kernel refused the tc program: %s (the verifier log is above)",
			  strerror(-rc));
		return rc;
	}
	if (which & DP_PROGS_ENDPOINT) {
		p->fd[DP_HOOK_INGRESS] = bpf_program__fd(s->progs.fibril_from_endpoint);
		p->fd[DP_HOOK_EGRESS] = bpf_program__fd(s->progs.fibril_to_endpoint);
		for (int h = 0; h < DP_HOOK_COUNT; h++)
			p->id[h] = prog_id_of(p->fd[h]);
	}
	if (which & DP_PROGS_OVERLAY) {
		p->overlay_fd = bpf_program__fd(s->progs.fibril_from_overlay);
		p->overlay_id = prog_id_of(p->overlay_fd);
	}
	if (which & DP_PROGS_NETDEV) {
		p->netdev_fd = bpf_program__fd(s->progs.fibril_from_netdev);
		p->netdev_id = prog_id_of(p->netdev_fd);
		p->to_netdev_fd = bpf_program__fd(s->progs.fibril_to_netdev);
	}
	return 0;
}

static struct dp_prog *prog_new(void)
{
	struct dp_prog *p = calloc(1, sizeof(*p));
	if (p)
		p->overlay_fd = p->netdev_fd = p->to_netdev_fd = -1;
	return p;
}

/* What a load at start verifies (see DP_PROGS_*): fibril_from_overlay when
 * the last run left tunnel mode on (else its first tunnel_setup loads it). */
static unsigned progs_at_start(const struct datapath *dp)
{
	return DP_PROGS_ENDPOINT | (dp->tunnel_ifindex ? DP_PROGS_OVERLAY : 0) |
	       (dp->host_routing_bpf || dp->masquerade ? DP_PROGS_NETDEV : 0);
}

static void prog_free(struct dp_prog *p)
{
	if (!p)
		return;
	if (p->adopted & DP_PROGS_ENDPOINT)
		for (int h = 0; h < DP_HOOK_COUNT; h++)
			close(p->fd[h]);
	if ((p->adopted & DP_PROGS_OVERLAY) && p->overlay_fd >= 0)
		close(p->overlay_fd);
	if ((p->adopted & DP_PROGS_NETDEV) && p->netdev_fd >= 0)
		close(p->netdev_fd);
	if ((p->adopted & DP_PROGS_NETDEV) && p->to_netdev_fd >= 0)
		close(p->to_netdev_fd);
	fibril_dp__destroy(p->skel);
	fibril_dp__destroy(p->overlay_skel);
	free(p);
}

static void map_fds_of(struct datapath *dp, int *fds)
{
	for (int i = 0; i < DPM_COUNT; i++)
		fds[i] = fibril_map_fd(dp->maps[i]);
}

/* ---- the pins: reuse what is in place ------------------------------------------------------ */

/* The embedded object's FNV-1a hash: the same bytes load the same programs. */
static uint64_t object_hash(void)
{
	static uint64_t hash;
	if (hash)
		return hash;
	size_t n = 0;
	const unsigned char *b = fibril_dp__elf_bytes(&n);
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return hash = h ? h : 1;
}

/* Adopt every program of `which` from the pins, or none (0 or -ENOENT). */
static int prog_adopt(struct dp_prog *p, unsigned which, const int *map_fds)
{
	int fd[5] = {-1, -1, -1, -1, -1}, id[5] = {0, 0, 0, 0, 0};
	const struct dp_pin_def *defs[5] = {&dp_pin_ingress, &dp_pin_egress, &dp_pin_overlay,
					    &dp_pin_netdev, &dp_pin_to_netdev};
	bool want[5] = {which & DP_PROGS_ENDPOINT, which & DP_PROGS_ENDPOINT,
			which & DP_PROGS_OVERLAY, which & DP_PROGS_NETDEV, which & DP_PROGS_NETDEV};
	bool ok = true;
	for (int i = 0; i < 5 && ok; i++)
		if (want[i])
			if ((ok = (fd[i] = dp_pin_adopt(object_hash(), defs[i], map_fds)) >= 0))
				id[i] = prog_id_of(fd[i]);
	if (!ok) {
		for (int i = 0; i < 5; i++)
			if (fd[i] >= 0)
				close(fd[i]);
		return -ENOENT;
	}
	if (which & DP_PROGS_ENDPOINT) {
		p->fd[DP_HOOK_INGRESS] = fd[0], p->id[DP_HOOK_INGRESS] = id[0];
		p->fd[DP_HOOK_EGRESS] = fd[1], p->id[DP_HOOK_EGRESS] = id[1];
	}
	if (which & DP_PROGS_OVERLAY)
		p->overlay_fd = fd[2], p->overlay_id = id[2];
	if (which & DP_PROGS_NETDEV)
		p->netdev_fd = fd[3], p->netdev_id = id[3], p->to_netdev_fd = fd[4];
	p->adopted |= which;
	return 0;
}

/* Pin what p loaded (not what it adopted) and remove the pins of other
 * objects (an older agent's): the filters hold their own references. */
static void prog_pin(struct datapath *dp, const struct dp_prog *p)
{
	if (p->skel && !(p->adopted & DP_PROGS_ENDPOINT) && p->fd[DP_HOOK_INGRESS] > 0) {
		dp_pin_one(dp, object_hash(), &dp_pin_ingress, p->fd[DP_HOOK_INGRESS]);
		dp_pin_one(dp, object_hash(), &dp_pin_egress, p->fd[DP_HOOK_EGRESS]);
	}
	if (!(p->adopted & DP_PROGS_OVERLAY))
		dp_pin_one(dp, object_hash(), &dp_pin_overlay, p->overlay_fd);
	if (!(p->adopted & DP_PROGS_NETDEV)) {
		dp_pin_one(dp, object_hash(), &dp_pin_netdev, p->netdev_fd);
		dp_pin_one(dp, object_hash(), &dp_pin_to_netdev, p->to_netdev_fd);
	}
	dp_pins_drop_others(object_hash());
}

/* At start: the pins of this object, when they fit (see pinned_fits). */
static bool prog_reuse(struct datapath *dp)
{
	int fds[DPM_COUNT];
	map_fds_of(dp, fds);
	struct dp_prog *p = prog_new();
	if (!p)
		return false;
	uint64_t t0 = dp_mono_ns();
	if (prog_adopt(p, progs_at_start(dp), fds) < 0) {
		prog_free(p);
		return false;
	}
	dp->prog = p;
	dp->prog_reused = true;
	dp->prog_load_ms = (double)(dp_mono_ns() - t0) / 1e6;
	fibril_info(dp->m, "tc programs reused from their pins in %.1f ms: same object (%016llx), "
			   "same maps (ingress id %d, egress id %d)",
		    dp->prog_load_ms, (unsigned long long)object_hash(), p->id[DP_HOOK_INGRESS],
		    p->id[DP_HOOK_EGRESS]);
	return true;
}

int dp_prog_load(struct datapath *dp, char *err, size_t len)
{
	struct dp_prog *p = prog_new();
	if (!p) {
		dp_seterr(err, len, "out of memory");
		return -ENOMEM;
	}
	int fds[DPM_COUNT];
	map_fds_of(dp, fds);
	uint64_t t0 = dp_mono_ns();
	libbpf_print_fn_t old = modcommon_libbpf_log_begin(dp->m);
	int rc = prog_build(p, &p->skel, progs_at_start(dp), fds, NULL, err, len);
	modcommon_libbpf_log_end(old);
	if (rc < 0) {
		prog_free(p);
		return rc;
	}
	dp->prog = p;
	dp->prog_reused = false;
	dp->prog_load_ms = (double)(dp_mono_ns() - t0) / 1e6;
	prog_pin(dp, p);
	return 0;
}

/* ---- the load on a worker thread ----------------------------------------------------------
 * The kernel's verifier takes a few hundred ms of CPU for these programs:
 * dp_prog_load_start() runs it on the worker pool while the agent goes on
 * starting (the maps are open already, so the ipcache and endpoint entries
 * can be written meanwhile); whatever needs the programs (an attachment,
 * their ids) calls dp_prog_wait() first, which blocks until the load is
 * done. The job's state is shared by the worker and the loop thread under
 * its mutex; the job's completion (on the loop) is the one that frees it. */
struct dp_prog_job {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	int rc;
	struct datapath *dp;
	struct dp_prog *prog;
	int map_fds[DPM_COUNT];
	unsigned which; /* DP_PROGS_* */
	uint64_t t0_ns, t1_ns;
	char err[DP_ERR_LEN];
	/* the verifier log of a failed load lands here, not in libbpf's print
	 * function (global, maybe another module's at that moment); a failed
	 * load is done again on the loop thread to log it in full */
	char log[16384];
};

static void job_run(void *ud)
{
	struct dp_prog_job *j = ud;
	LIBBPF_OPTS(bpf_object_open_opts, opts, .kernel_log_buf = j->log,
		    .kernel_log_size = sizeof(j->log));
	char err[DP_ERR_LEN] = "";
	struct dp_prog *p = prog_new();
	int rc = p ? prog_build(p, &p->skel, j->which, j->map_fds, &opts, err, sizeof(err))
		   : -ENOMEM;
	if (!p)
		dp_seterr(err, sizeof(err), "out of memory");
	if (rc < 0) {
		prog_free(p);
		p = NULL;
	}
	uint64_t t1 = dp_mono_ns();
	pthread_mutex_lock(&j->mu);
	j->prog = p;
	j->rc = rc;
	j->t1_ns = t1;
	memcpy(j->err, err, sizeof(err));
	j->done = true;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->mu);
}

/* The last lines of a refused load's verifier log, into the module's log
 * (from the loop thread: libbpf's printer is global). */
static void log_verifier(struct datapath *dp, char *log, size_t size)
{
	log[size - 1] = '\0';
	size_t n = strlen(log);
	if (!n)
		return;
	char *from = log;
	int lines = 0;
	for (char *q = log + n; q > log && lines < 24; q--)
		if (q[-1] == '\n' && q != log + n && ++lines == 24)
			from = q;
	fibril_error(dp->m, "the verifier's log (its end):");
	for (char *line = strtok(from, "\n"); line; line = strtok(NULL, "\n"))
		fibril_error(dp->m, "  %s", line);
}

/* The job's result into dp: the programs (pinned for the next start, and
 * what waited for them), or a refusal: its reasons in the log, every
 * attachment fails with them, health component programs Degraded. Nothing
 * here runs the verifier again: the loop never waits for it. */
static void job_result(struct datapath *dp, struct dp_prog_job *j)
{
	if (j->rc == 0) {
		dp->prog = j->prog;
		j->prog = NULL;
		dp->prog_reused = false;
		dp->prog_load_ms = (double)(j->t1_ns - j->t0_ns) / 1e6;
		fibril_info(dp->m, "tc programs loaded in %.0f ms (ingress id %d, egress id %d)",
			    dp->prog_load_ms, dp->prog->id[DP_HOOK_INGRESS],
			    dp->prog->id[DP_HOOK_EGRESS]);
		prog_pin(dp, dp->prog);
		if (!dp->stopping)
			dp_programs_loaded(dp);
		return;
	}
	if (j->rc != -ECANCELED && j->rc != -ENOMEM && j->rc != -EPERM)
		log_verifier(dp, j->log, sizeof(j->log));
	if (!dp->prog_error[0])
		snprintf(dp->prog_error, sizeof(dp->prog_error), "%s", j->err);
	fibril_error(dp->m, "%s", dp->prog_error);
	fibril_health_report(dp->m, "programs", FIBRIL_HEALTH_DEGRADED, "%s", dp->prog_error);
}

/* Take the job's result (on the loop thread, once): the programs, or the
 * error, after a synchronous load again (which logs the verifier's
 * reasons through the module's log as the load in start always did); then
 * answer what waited for it. */
static void job_adopt(struct datapath *dp, struct dp_prog_job *j)
{
	pthread_mutex_lock(&j->mu);
	while (!j->done)
		pthread_cond_wait(&j->cv, &j->mu);
	pthread_mutex_unlock(&j->mu);
	dp->prog_job = NULL;
	job_result(dp, j);
	dp_api_programs_loaded(dp);
	if (dp->start_pending) {
		/* the start waited for the programs (without holding the loop) */
		dp->start_pending = false;
		fibril_module_start_done(dp->m, 0);
	}
}

static void job_done(void *ud, int status)
{
	struct dp_prog_job *j = ud;
	if (status == -ECANCELED) { /* never ran: the agent is stopping */
		pthread_mutex_lock(&j->mu);
		if (!j->done) {
			j->rc = -ECANCELED;
			snprintf(j->err, sizeof(j->err), "the tc programs' load was cancelled");
			j->done = true;
		}
		pthread_mutex_unlock(&j->mu);
	}
	if (j->dp->prog_job == j)
		job_adopt(j->dp, j);
	prog_free(j->prog);
	pthread_cond_destroy(&j->cv);
	pthread_mutex_destroy(&j->mu);
	free(j);
}

int dp_prog_load_start(struct datapath *dp, char *err, size_t len)
{
	struct dp_prog_job *j = calloc(1, sizeof(*j));
	if (!j) {
		dp_seterr(err, len, "out of memory");
		return -ENOMEM;
	}
	dp->prog_error[0] = '\0';
	if (prog_reuse(dp)) {
		free(j);
		return 0;
	}
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->cv, NULL);
	j->dp = dp;
	map_fds_of(dp, j->map_fds);
	j->which = progs_at_start(dp);
	j->t0_ns = dp_mono_ns();
	dp->prog_error[0] = '\0';
	int rc = fibril_work_submit(dp->m, job_run, job_done, j);
	if (rc < 0) {
		pthread_cond_destroy(&j->cv);
		pthread_mutex_destroy(&j->mu);
		free(j);
		/* no worker: load here */
		return dp_prog_load(dp, err, len);
	}
	dp->prog_job = j;
	return 0;
}

int dp_prog_wait(struct datapath *dp, char *err, size_t len)
{
	/* while the start is pending nothing but stop gets here: the API and
	 * the modules that use this one start after it */
	if (dp->prog_job)
		job_adopt(dp, dp->prog_job);
	if (dp->prog)
		return 0;
	dp_seterr(err, len, "the tc program is not loaded%s%s", dp->prog_error[0] ? ": " : "",
		  dp->prog_error);
	return -ENOENT;
}

void dp_prog_unload(struct datapath *dp)
{
	dp->stopping = true;
	dp_prog_wait(dp, NULL, 0);
	dp->stopping = false;
	if (!dp->prog)
		return;
	/* the filters hold their own reference: attached copies keep running */
	prog_free(dp->prog);
	dp->prog = NULL;
}

int dp_prog_id(struct datapath *dp, enum dp_hook h)
{
	dp_prog_wait(dp, NULL, 0);
	return dp->prog ? dp->prog->id[h] : 0;
}

int dp_prog_overlay_id(struct datapath *dp)
{
	dp_prog_wait(dp, NULL, 0);
	return dp->prog ? dp->prog->overlay_id : 0;
}

/* The clsact qdisc of ifindex (one already there is fine). */
static int hook_create(int ifindex, enum dp_hook h, char *err, size_t len)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = hook_point[h]);
	/* a clsact qdisc already there (EEXIST) is fine: keep libbpf from
	 * printing the kernel's "Exclusivity flag on" for it */
	libbpf_print_fn_t old = modcommon_libbpf_quiet_begin();
	dp_vg_quiet_begin(); /* libbpf's netlink reply parsing, see dp_util.c */
	int rc = bpf_tc_hook_create(&hook);
	dp_vg_quiet_end();
	modcommon_libbpf_log_end(old);
	if (rc < 0 && rc != -EEXIST) {
		dp_seterr(err, len, "cannot add the clsact qdisc to ifindex %d: %s", ifindex,
			  strerror(-rc));
		return rc;
	}
	return 0;
}

static int tc_replace(int prog_fd, int ifindex, enum dp_hook h)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = hook_point[h]);
	LIBBPF_OPTS(bpf_tc_opts, opts, .handle = DP_TC_HANDLE, .priority = DP_TC_PRIORITY,
		    .prog_fd = prog_fd, .flags = BPF_TC_F_REPLACE);
	libbpf_print_fn_t old = modcommon_libbpf_quiet_begin();
	dp_vg_quiet_begin();
	int rc = bpf_tc_attach(&hook, &opts);
	dp_vg_quiet_end();
	modcommon_libbpf_log_end(old);
	return rc;
}

/* One filter, replaced atomically. The clsact qdisc is created only when
 * the filter cannot go in without it: a veth re-adopted at a restart has
 * it, and its filter is one netlink round trip, not two. */
static int attach_fd(int prog_fd, int ifindex, enum dp_hook h, char *err, size_t len)
{
	if (tc_replace(prog_fd, ifindex, h) == 0)
		return 0;
	int rc = hook_create(ifindex, h, err, len);
	if (rc < 0)
		return rc;
	rc = tc_replace(prog_fd, ifindex, h);
	if (rc < 0) {
		dp_seterr(err, len, "cannot attach the tc program to ifindex %d %s: %s", ifindex,
			  hook_name[h], strerror(-rc));
		return rc;
	}
	return 0;
}

static int attach_one(struct datapath *dp, int ifindex, enum dp_hook h, char *err, size_t len)
{
	return attach_fd(dp->prog->fd[h], ifindex, h, err, len);
}

int dp_prog_attach_overlay(struct datapath *dp, int ifindex, char *err, size_t len)
{
	int rc = dp_prog_wait(dp, err, len);
	if (rc < 0)
		return rc;
	if (dp->prog->overlay_fd < 0) { /* tunnel mode since the start: its pin, else load it */
		int fds[DPM_COUNT];
		map_fds_of(dp, fds);
		if (prog_adopt(dp->prog, DP_PROGS_OVERLAY, fds) == 0)
			return attach_fd(dp->prog->overlay_fd, ifindex, DP_HOOK_INGRESS, err, len);
		libbpf_print_fn_t old = modcommon_libbpf_log_begin(dp->m);
		rc = prog_build(dp->prog, &dp->prog->overlay_skel, DP_PROGS_OVERLAY, fds, NULL, err,
				len);
		modcommon_libbpf_log_end(old);
		if (rc < 0) {
			fibril_dp__destroy(dp->prog->overlay_skel);
			dp->prog->overlay_skel = NULL;
			return rc;
		}
		dp_pin_one(dp, object_hash(), &dp_pin_overlay, dp->prog->overlay_fd);
	}
	return attach_fd(dp->prog->overlay_fd, ifindex, DP_HOOK_INGRESS, err, len);
}

int dp_prog_attach(struct datapath *dp, int ifindex, char *err, size_t len)
{
	int rc = dp_prog_wait(dp, err, len);
	if (rc < 0)
		return rc;
	/* each filter is swapped on its own; the ingress one first, as before
	 * the egress program existed */
	for (int h = 0; h < DP_HOOK_COUNT; h++) {
		rc = attach_one(dp, ifindex, (enum dp_hook)h, err, len);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static bool gone(int rc)
{
	return rc == -ENOENT || rc == -ENODEV || rc == -EINVAL;
}

int dp_prog_detach(struct datapath *dp, int ifindex, char *err, size_t len)
{
	(void)dp;
	int first = 0;
	/* both, even when the first fails: leave as little behind as we can */
	for (int h = 0; h < DP_HOOK_COUNT; h++) {
		LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = hook_point[h]);
		LIBBPF_OPTS(bpf_tc_opts, opts, .handle = DP_TC_HANDLE, .priority = DP_TC_PRIORITY);
		dp_vg_quiet_begin();
		int rc = bpf_tc_detach(&hook, &opts);
		dp_vg_quiet_end();
		if (rc < 0 && !gone(rc) && !first) {
			dp_seterr(err, len, "cannot detach the tc program from ifindex %d %s: %s",
				  ifindex, hook_name[h], strerror(-rc));
			first = rc;
		}
	}
	return first;
}

int dp_prog_attached_id(int ifindex, enum dp_hook h)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = hook_point[h]);
	LIBBPF_OPTS(bpf_tc_opts, opts, .handle = DP_TC_HANDLE, .priority = DP_TC_PRIORITY);
	dp_vg_quiet_begin();
	int rc = bpf_tc_query(&hook, &opts);
	dp_vg_quiet_end();
	if (rc < 0)
		return gone(rc) ? 0 : rc;
	return (int)opts.prog_id;
}

/* ---- host-routing = bpf: fibril_from_netdev on the underlay devices ---------------
 * The devices: every one that is up, not loopback, with an IPv4 or IPv6
 * address (getifaddrs: netlink, no shelling out), other than the host
 * device and the tunnel device; the endpoints' veths carry no address. */
/* An underlay device: up, not loopback, with an IPv4 or a global IPv6
 * address (an endpoint's host veth has only its link-local one), not the
 * host or tunnel device. */
static bool is_netdev_candidate(const struct datapath *dp, const struct mod_node_addr *a)
{
	if (!(a->flags & IFF_UP) || (a->flags & IFF_LOOPBACK))
		return false;
	if (a->family != AF_INET && !mod_node_addr_v6_global(a))
		return false;
	return strcmp(a->ifname, dp->host_dev) && strcmp(a->ifname, dp->host_peer) &&
	       strcmp(a->ifname, dp->tunnel_dev);
}

/* Is the filter at our handle on ifindex's hook h the program `name`? */
static bool prog_attached_is(int ifindex, enum dp_hook h, const char *name)
{
	int id = dp_prog_attached_id(ifindex, h);
	if (id <= 0)
		return false;
	int fd = bpf_prog_get_fd_by_id((__u32)id);
	if (fd < 0)
		return false;
	struct bpf_prog_info info;
	__u32 len = sizeof(info);
	memset(&info, 0, sizeof(info));
	bool ours = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 &&
		    !strncmp(info.name, name, sizeof(info.name) - 1);
	close(fd);
	return ours;
}

static bool netdev_prog_attached(int ifindex)
{
	return prog_attached_is(ifindex, DP_HOOK_INGRESS, "fibril_from_netdev");
}

static int detach_at(int ifindex, enum dp_hook h, const char *ifname, const char *what,
		     char *err, size_t len)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = hook_point[h]);
	LIBBPF_OPTS(bpf_tc_opts, opts, .handle = DP_TC_HANDLE, .priority = DP_TC_PRIORITY);
	dp_vg_quiet_begin();
	int rc = bpf_tc_detach(&hook, &opts);
	dp_vg_quiet_end();
	if (rc < 0 && !gone(rc)) {
		dp_seterr(err, len, "cannot detach %s from %s: %s", what, ifname, strerror(-rc));
		return rc;
	}
	return 0;
}

/* masquerade: fibril_to_netdev on the device's egress and its addresses
 * in dp_nat_devs, or both gone; 1 attached, 0 nothing to do, <0 error */
static int to_netdev_sync(struct datapath *dp, int ifindex, const char *ifname, char *err,
			  size_t len)
{
	bool ours = prog_attached_is(ifindex, DP_HOOK_EGRESS, "fibril_to_netdev");
	if (dp->masquerade && dp->prog && dp->prog->to_netdev_fd >= 0) {
		if (!ours && dp_prog_attached_id(ifindex, DP_HOOK_EGRESS) > 0)
			return 0; /* an endpoint's veth (fibril_to_endpoint) */
		int rc = dp_nat_dev_write(dp, ifindex, ifname, true);
		if (rc < 0) {
			dp_seterr(err, len, "cannot write %s for %s: %s", DP_MAP_NAT_DEVS, ifname,
				  strerror(-rc));
			return rc;
		}
		rc = attach_fd(dp->prog->to_netdev_fd, ifindex, DP_HOOK_EGRESS, err, len);
		return rc < 0 ? rc : 1;
	}
	dp_nat_dev_write(dp, ifindex, ifname, false);
	return ours ? detach_at(ifindex, DP_HOOK_EGRESS, ifname, "fibril_to_netdev", err, len) : 0;
}

int dp_prog_netdevs_sync(struct datapath *dp, bool attach, int *count, char *err, size_t len)
{
	struct mod_node_addr *all = NULL;
	size_t nall = 0;
	int done[64], ndone = 0, first = 0;
	*count = 0;
	dp->nat_devs = 0;
	if (attach && dp_prog_wait(dp, err, len) < 0)
		return -ENOENT;
	int e = dp_underlay_addrs(&all, &nall); /* no link dump: one veth per endpoint */
	if (e < 0) {
		dp_seterr(err, len, "cannot list the node's addresses: %s", strerror(-e));
		return e;
	}
	for (const struct mod_node_addr *a = all; a < all + nall; a++) {
		if (!is_netdev_candidate(dp, a))
			continue;
		int ifindex = (int)if_nametoindex(a->ifname), seen = 0;
		for (int i = 0; i < ndone; i++)
			seen |= done[i] == ifindex;
		if (!ifindex || seen || ndone == (int)(sizeof(done) / sizeof(done[0])))
			continue;
		done[ndone++] = ifindex;
		int rc = to_netdev_sync(dp, ifindex, a->ifname, err, len);
		if (rc < 0 && !first)
			first = rc;
		else if (rc > 0)
			dp->nat_devs++;
		rc = 0;
		if (attach && dp_prog_attached_id(ifindex, DP_HOOK_INGRESS) > 0 &&
		    !netdev_prog_attached(ifindex)) {
			continue; /* an endpoint's veth (fibril_from_endpoint): never ours */
		} else if (attach) {
			rc = attach_fd(dp->prog->netdev_fd, ifindex, DP_HOOK_INGRESS, err, len);
		} else if (netdev_prog_attached(ifindex)) {
			rc = detach_at(ifindex, DP_HOOK_INGRESS, a->ifname, "fibril_from_netdev", err,
				       len);
		} else {
			continue;
		}
		if (rc < 0 && !first)
			first = rc;
		else if (rc == 0)
			(*count)++;
	}
	free(all);
	return first;
}
