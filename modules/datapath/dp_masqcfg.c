/* modules/datapath/dp_masqcfg.c - [datapath] ip-masq-agent-config: the
 * ip-masq-agent's config file (YAML or JSON, as a ConfigMap mounts it:
 * nonMasqueradeCIDRs, masqLinkLocal, masqLinkLocalIPv6, resyncInterval)
 * read at start and again whenever the file changes (a stat every second,
 * which also sees a ConfigMap's symlink swap). A bad file is refused with
 * one line naming the field, and the last good config stays in dp_nomasq. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "datapath.h"

#define MASQCFG_MAX_BYTES (256 * 1024)
#define MASQCFG_CHECK_MS 1000

/* The file's identity: a change of any of these is a new file to read */
static void file_sig(const struct stat *st, struct dp_masqcfg_sig *sig)
{
	sig->dev = (uint64_t)st->st_dev;
	sig->ino = (uint64_t)st->st_ino;
	sig->size = (int64_t)st->st_size;
	sig->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000ll + st->st_mtim.tv_nsec;
	sig->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000ll + st->st_ctim.tv_nsec;
}

static bool scalar_is(const yaml_node_t *n, const char *s)
{
	return n && n->type == YAML_SCALAR_NODE && !strcmp((const char *)n->data.scalar.value, s);
}

static int parse_bool(const yaml_node_t *v, const char *field, bool *out, char *why, size_t len)
{
	if (v && v->type == YAML_SCALAR_NODE) {
		const char *s = (const char *)v->data.scalar.value;
		if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) {
			*out = true;
			return 0;
		}
		if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) {
			*out = false;
			return 0;
		}
		snprintf(why, len, "%s: '%.64s' is not true or false", field, s);
		return -EINVAL;
	}
	snprintf(why, len, "%s: expected true or false", field);
	return -EINVAL;
}

static int parse_cidrs(yaml_document_t *doc, const yaml_node_t *v, struct dp_masqcfg *cfg,
		       char *why, size_t len)
{
	if (v && v->type == YAML_SCALAR_NODE && v->data.scalar.length == 0)
		return 0; /* "nonMasqueradeCIDRs:" with nothing: none */
	if (!v || v->type != YAML_SEQUENCE_NODE) {
		snprintf(why, len, "nonMasqueradeCIDRs: expected a list of CIDRs");
		return -EINVAL;
	}
	size_t i = 0;
	for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
	     it++, i++) {
		yaml_node_t *n = yaml_document_get_node(doc, *it);
		if (!n || n->type != YAML_SCALAR_NODE) {
			snprintf(why, len, "nonMasqueradeCIDRs[%zu]: expected a CIDR string", i);
			return -EINVAL;
		}
		if (cfg->ncidrs == DP_MASQCFG_MAX_CIDRS) {
			snprintf(why, len, "nonMasqueradeCIDRs: more than %d entries",
				 DP_MASQCFG_MAX_CIDRS);
			return -EINVAL;
		}
		char err[256];
		if (dp_nat_cidr_key((const char *)n->data.scalar.value, &cfg->cidrs[cfg->ncidrs], err,
				    sizeof(err)) < 0) {
			snprintf(why, len, "nonMasqueradeCIDRs[%zu]: %s", i, err);
			return -EINVAL;
		}
		cfg->ncidrs++;
	}
	return 0;
}

int dp_masqcfg_parse(const char *text, size_t size, struct dp_masqcfg *cfg, char *why, size_t len)
{
	memset(cfg, 0, sizeof(*cfg));
	yaml_parser_t parser;
	yaml_document_t doc;
	if (!yaml_parser_initialize(&parser)) {
		snprintf(why, len, "cannot start the YAML parser");
		return -ENOMEM;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, size);
	if (!yaml_parser_load(&parser, &doc)) {
		snprintf(why, len, "not YAML or JSON: %s at line %zu column %zu",
			 parser.problem ? parser.problem : "a syntax error",
			 parser.problem_mark.line + 1, parser.problem_mark.column + 1);
		yaml_parser_delete(&parser);
		return -EINVAL;
	}
	yaml_parser_delete(&parser);
	int rc = 0;
	yaml_node_t *root = yaml_document_get_root_node(&doc);
	bool seen_cidrs = false, seen_ll = false, seen_ll6 = false, seen_resync = false;
	if (!root) {
		rc = 0; /* an empty file: the defaults */
	} else if (root->type != YAML_MAPPING_NODE) {
		snprintf(why, len, "the top level is not a mapping of the ip-masq-agent's fields");
		rc = -EINVAL;
	} else {
		for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
		     rc == 0 && p < root->data.mapping.pairs.top; p++) {
			yaml_node_t *k = yaml_document_get_node(&doc, p->key);
			yaml_node_t *v = yaml_document_get_node(&doc, p->value);
			bool *seen = scalar_is(k, "nonMasqueradeCIDRs") ? &seen_cidrs
				     : scalar_is(k, "masqLinkLocal")    ? &seen_ll
				     : scalar_is(k, "masqLinkLocalIPv6") ? &seen_ll6
				     : scalar_is(k, "resyncInterval")    ? &seen_resync
									 : NULL;
			if (!seen) {
				snprintf(why, len, "unknown field '%.64s' (expected nonMasqueradeCIDRs, "
						   "masqLinkLocal, masqLinkLocalIPv6, resyncInterval)",
					 k && k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value
									  : "(not a string)");
				rc = -EINVAL;
				break;
			}
			if (*seen) {
				snprintf(why, len, "%s: given twice", (const char *)k->data.scalar.value);
				rc = -EINVAL;
				break;
			}
			*seen = true;
			if (seen == &seen_cidrs)
				rc = parse_cidrs(&doc, v, cfg, why, len);
			else if (seen == &seen_ll)
				rc = parse_bool(v, "masqLinkLocal", &cfg->masq_link_local, why, len);
			else if (seen == &seen_ll6)
				rc = parse_bool(v, "masqLinkLocalIPv6", &cfg->masq_link_local6, why, len);
			else if (!v || v->type != YAML_SCALAR_NODE) { /* resyncInterval: read, not used */
				snprintf(why, len, "resyncInterval: expected a duration string");
				rc = -EINVAL;
			}
		}
	}
	yaml_document_delete(&doc);
	if (rc < 0)
		memset(cfg, 0, sizeof(*cfg));
	return rc;
}

/* The file into a config; -ENOENT when it is not there */
static int masqcfg_read(const char *path, struct dp_masqcfg *cfg, struct dp_masqcfg_sig *sig,
			char *why, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		snprintf(why, len, "cannot open: %s", strerror(e));
		return -e;
	}
	struct stat st;
	int rc = 0;
	char *text = NULL;
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		snprintf(why, len, "cannot stat: %s", strerror(-rc));
	} else if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		snprintf(why, len, "not a regular file");
	} else if (st.st_size > MASQCFG_MAX_BYTES) {
		rc = -EFBIG;
		snprintf(why, len, "%lld bytes, more than %d", (long long)st.st_size, MASQCFG_MAX_BYTES);
	} else if (!(text = malloc((size_t)st.st_size + 1))) {
		rc = -ENOMEM;
		snprintf(why, len, "out of memory");
	}
	size_t got = 0;
	while (rc == 0 && got < (size_t)st.st_size) {
		ssize_t n = read(fd, text + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			snprintf(why, len, "cannot read: %s", n < 0 ? strerror(errno) : "short read");
			break;
		}
		got += (size_t)n;
	}
	close(fd);
	if (rc == 0) {
		file_sig(&st, sig);
		rc = dp_masqcfg_parse(text, got, cfg, why, len);
	}
	free(text);
	return rc;
}

/* Reads the file if it is new or changed; applies a good one to dp_nomasq,
 * names what is wrong with a bad one and keeps the last good config. */
static void masqcfg_check(struct datapath *dp, bool first)
{
	struct stat st;
	struct dp_masqcfg_sig sig;
	memset(&sig, 0, sizeof(sig));
	if (stat(dp->masqcfg_path, &st) == 0)
		file_sig(&st, &sig);
	if (!first && !memcmp(&sig, &dp->masqcfg_sig, sizeof(sig)))
		return; /* unchanged (or still missing) */
	dp->masqcfg_sig = sig;
	char why[320] = "";
	struct dp_masqcfg *cfg = calloc(1, sizeof(*cfg));
	if (!cfg) {
		fibril_warn(dp->m, "ip-masq-agent-config %s: out of memory; keeping the last good "
				   "config", dp->masqcfg_path);
		return;
	}
	int rc = masqcfg_read(dp->masqcfg_path, cfg, &sig, why, sizeof(why));
	if (rc == -ENOENT) {
		/* a ConfigMap not there (or gone): the defaults, as ip-masq-agent */
		memset(cfg, 0, sizeof(*cfg));
		fibril_info(dp->m, "ip-masq-agent-config %s: no such file; the defaults apply "
				   "(link-local not masqueraded)", dp->masqcfg_path);
	} else if (rc < 0) {
		fibril_warn(dp->m, "ip-masq-agent-config %s: %s; keeping the last good config",
			    dp->masqcfg_path, why);
		snprintf(dp->masqcfg_error, sizeof(dp->masqcfg_error), "%s", why);
		dp->masqcfg_errors++;
		free(cfg);
		return;
	} else {
		dp->masqcfg_sig = sig; /* what was read, if it changed since the stat */
	}
	struct dp_masqcfg *old = dp->masqcfg;
	dp->masqcfg = cfg;
	char err[DP_ERR_LEN] = "";
	if (dp_nat_nomasq_write(dp, err, sizeof(err)) < 0) {
		fibril_warn(dp->m, "ip-masq-agent-config %s: %s; keeping the last good config",
			    dp->masqcfg_path, err);
		snprintf(dp->masqcfg_error, sizeof(dp->masqcfg_error), "%s", err);
		dp->masqcfg_errors++;
		dp->masqcfg = old;
		free(cfg);
		char err2[DP_ERR_LEN];
		dp_nat_nomasq_write(dp, err2, sizeof(err2)); /* back to the last good */
		return;
	}
	free(old);
	dp->masqcfg_error[0] = 0;
	dp->masqcfg_loads++;
	if (rc == 0)
		fibril_info(dp->m, "ip-masq-agent-config %s: %zu non-masquerade CIDR(s), "
				   "masqLinkLocal %s, masqLinkLocalIPv6 %s",
			    dp->masqcfg_path, cfg->ncidrs, cfg->masq_link_local ? "true" : "false",
			    cfg->masq_link_local6 ? "true" : "false");
}

static void masqcfg_tick(struct fibril_timer *t, void *ud)
{
	(void)t;
	masqcfg_check(ud, false);
}

void dp_masqcfg_start(struct datapath *dp)
{
	if (!dp->masqcfg_path[0])
		return;
	masqcfg_check(dp, true);
	dp->masqcfg_timer = fibril_timer_add(dp->m, MASQCFG_CHECK_MS, MASQCFG_CHECK_MS, masqcfg_tick, dp);
}

void dp_masqcfg_stop(struct datapath *dp)
{
	if (dp->masqcfg_timer)
		fibril_timer_cancel(dp->masqcfg_timer);
	dp->masqcfg_timer = NULL;
	free(dp->masqcfg);
	dp->masqcfg = NULL;
	memset(&dp->masqcfg_sig, 0, sizeof(dp->masqcfg_sig));
}
