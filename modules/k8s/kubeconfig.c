/* modules/k8s/kubeconfig.c - where the API server is and how to talk to it:
 * a kubeconfig (YAML, read with libyaml: current-context -> context ->
 * cluster and user; *-data fields base64-decoded in memory with
 * modules/common/b64.c and handed to the HTTP client as PEM text) or the
 * in-cluster service account. Runs in start only. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "b64.h"
#include "k8s_int.h"

static yaml_node_t *map_get(yaml_document_t *d, yaml_node_t *map, const char *key)
{
	if (!map || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = yaml_document_get_node(d, p->key);
		if (k && k->type == YAML_SCALAR_NODE && strcmp((char *)k->data.scalar.value, key) == 0)
			return yaml_document_get_node(d, p->value);
	}
	return NULL;
}

static const char *map_str(yaml_document_t *d, yaml_node_t *map, const char *key)
{
	yaml_node_t *n = map_get(d, map, key);
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* The `inner` mapping of the entry named `name` in the list `list`. */
static yaml_node_t *named(yaml_document_t *d, yaml_node_t *root, const char *list,
			  const char *name, const char *inner)
{
	yaml_node_t *seq = map_get(d, root, list);
	if (!seq || seq->type != YAML_SEQUENCE_NODE || !name)
		return NULL;
	for (yaml_node_item_t *i = seq->data.sequence.items.start; i < seq->data.sequence.items.top;
	     i++) {
		yaml_node_t *e = yaml_document_get_node(d, *i);
		const char *n = map_str(d, e, "name");
		if (n && strcmp(n, name) == 0)
			return map_get(d, e, inner);
	}
	return NULL;
}

static char *dupnull(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* A file named in a kubeconfig, relative to the kubeconfig's directory (as
 * kubectl resolves it). */
static char *path_rel(const char *kubeconfig, const char *file)
{
	if (!file)
		return NULL;
	if (file[0] == '/')
		return strdup(file);
	const char *slash = strrchr(kubeconfig, '/');
	if (!slash)
		return strdup(file);
	size_t n = (size_t)(slash - kubeconfig) + strlen(file) + 2;
	char *out = malloc(n);
	if (out)
		snprintf(out, n, "%.*s/%s", (int)(slash - kubeconfig), kubeconfig, file);
	return out;
}

static int decode_field(const char *b64, char **out, size_t *len, const char *what, char *why,
			size_t why_len)
{
	if (!b64)
		return 0;
	if (mod_b64_decode(b64, out, len)) {
		snprintf(why, why_len, "%s is not valid base64", what);
		return -EINVAL;
	}
	return 0;
}

static char *read_small(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	char *buf = malloc(65536);
	size_t n = buf ? fread(buf, 1, 65535, f) : 0;
	fclose(f);
	if (!buf)
		return NULL;
	buf[n] = '\0';
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return buf;
}

int k8s_kubeconfig_load(const char *path, struct k8s_conn *c, char *why, size_t why_len)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		snprintf(why, why_len, "kubeconfig %s: %s", path, strerror(errno));
		return -errno;
	}
	yaml_parser_t p;
	yaml_document_t d;
	yaml_parser_initialize(&p);
	yaml_parser_set_input_file(&p, f);
	int rc = 0;
	if (!yaml_parser_load(&p, &d)) {
		snprintf(why, why_len, "kubeconfig %s:%zu: %s", path, p.problem_mark.line + 1,
			 p.problem ? p.problem : "YAML error");
		yaml_parser_delete(&p);
		fclose(f);
		return -EINVAL;
	}
	yaml_parser_delete(&p);
	fclose(f);
	yaml_node_t *root = yaml_document_get_root_node(&d);
	const char *cur = map_str(&d, root, "current-context");
	yaml_node_t *ctx = named(&d, root, "contexts", cur, "context");
	if (!ctx) {
		snprintf(why, why_len, "kubeconfig %s: no context \"%s\"", path, cur ? cur : "");
		rc = -EINVAL;
		goto out;
	}
	const char *cname = map_str(&d, ctx, "cluster"), *uname = map_str(&d, ctx, "user");
	yaml_node_t *cl = named(&d, root, "clusters", cname, "cluster");
	yaml_node_t *us = named(&d, root, "users", uname, "user");
	const char *server = map_str(&d, cl, "server");
	if (!server) {
		snprintf(why, why_len, "kubeconfig %s: cluster \"%s\" has no server", path,
			 cname ? cname : "");
		rc = -EINVAL;
		goto out;
	}
	c->server = strdup(server);
	size_t sl = strlen(c->server);
	while (sl && c->server[sl - 1] == '/')
		c->server[--sl] = '\0';
	const char *ins = map_str(&d, cl, "insecure-skip-tls-verify");
	c->insecure = ins && strcmp(ins, "true") == 0;
	c->ca_file = path_rel(path, map_str(&d, cl, "certificate-authority"));
	if ((rc = decode_field(map_str(&d, cl, "certificate-authority-data"), &c->ca_data, &c->ca_len,
			       "certificate-authority-data", why, why_len)))
		goto out;
	if (us) {
		c->token = dupnull(map_str(&d, us, "token"));
		c->token_file = path_rel(path, map_str(&d, us, "tokenFile"));
		if (!c->token_file)
			c->token_file = path_rel(path, map_str(&d, us, "token-file"));
		c->cert_file = path_rel(path, map_str(&d, us, "client-certificate"));
		c->key_file = path_rel(path, map_str(&d, us, "client-key"));
		if ((rc = decode_field(map_str(&d, us, "client-certificate-data"), &c->cert_data,
				       &c->cert_len, "client-certificate-data", why, why_len)))
			goto out;
		if ((rc = decode_field(map_str(&d, us, "client-key-data"), &c->key_data, &c->key_len,
				       "client-key-data", why, why_len)))
			goto out;
	}
out:
	yaml_document_delete(&d);
	return rc;
}

int k8s_incluster_load(const char *sa_dir, struct k8s_conn *c, char *why, size_t why_len)
{
	const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
	if (!host || !port || !*host || !*port) {
		snprintf(why, why_len, "no kubeconfig, $KUBECONFIG unset and not in a cluster "
				       "(KUBERNETES_SERVICE_HOST/PORT unset)");
		return -ENOENT;
	}
	char buf[1024];
	bool v6 = strchr(host, ':') != NULL;
	snprintf(buf, sizeof(buf), "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
	c->server = strdup(buf);
	snprintf(buf, sizeof(buf), "%s/token", sa_dir);
	c->token_file = strdup(buf);
	snprintf(buf, sizeof(buf), "%s/ca.crt", sa_dir);
	c->ca_file = strdup(buf);
	char *t = read_small(c->token_file);
	if (!t) {
		snprintf(why, why_len, "service account token %s: %s", c->token_file, strerror(errno));
		return -ENOENT;
	}
	free(t);
	return 0;
}

void k8s_conn_free(struct k8s_conn *c)
{
	free(c->server);
	free(c->token);
	free(c->token_file);
	free(c->ca_file);
	free(c->ca_data);
	free(c->cert_file);
	free(c->key_file);
	free(c->cert_data);
	free(c->key_data);
	memset(c, 0, sizeof(*c));
}
