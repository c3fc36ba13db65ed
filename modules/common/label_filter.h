/* modules/common/label_filter.h - Cilium's default label filter, the one
 * rule of which labels count for an identity: the endpoint module leaves
 * the others out of an endpoint's labels (so the pods of one workload share
 * an identity across rollouts and StatefulSet pods share one), and the
 * policy module matches a policy's subject against them from the pod
 * object and flags a peer selector that names one (identities do not carry
 * them). Header-only, hidden, not SDK. */
#ifndef FIBRIL_MOD_LABEL_FILTER_H
#define FIBRIL_MOD_LABEL_FILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

static inline bool mod_label_has_prefix(const char *s, size_t len, const char *prefix)
{
	size_t n = strlen(prefix);

	return len >= n && !memcmp(s, prefix, n);
}

/* Is the domain part of a key (what stands before its '/') D or a
 * subdomain of D? */
static inline bool mod_label_domain_is(const char *key, size_t len, const char *d)
{
	const char *slash = memchr(key, '/', len);
	size_t dl = strlen(d);

	if (!slash)
		return false;
	size_t n = (size_t)(slash - key);

	return n >= dl && !memcmp(slash - dl, d, dl) && (n == dl || slash[-(ptrdiff_t)dl - 1] == '.');
}

/* One "source:key[=value]" label (LEN bytes): does it count for the identity?
 * Cilium's default filter: every label counts but the Kubernetes ones that
 * change per pod or per rollout, or carry bookkeeping: keys under
 * io.kubernetes (but the namespace label), in the kubernetes.io and k8s.io
 * domains and their subdomains (but app.kubernetes.io, the recommended
 * application labels), pod-template-hash, pod-template-generation,
 * controller-revision-hash, controller-uid, etcd_node and annotation.*. */
static inline bool mod_label_counts_for_identity(const char *label, size_t len)
{
	static const char source[] = "k8s:";
	static const char *const excluded_keys[] = {
		"pod-template-hash", "pod-template-generation", "controller-revision-hash",
		"controller-uid", "etcd_node",
	};

	if (!mod_label_has_prefix(label, len, source) ||
	    mod_label_has_prefix(label, len, "k8s:io.kubernetes.pod.namespace="))
		return true; /* reserved:, container:, ..., and the namespace label */
	const char *key = label + sizeof(source) - 1;
	const char *eq = memchr(key, '=', len - (sizeof(source) - 1));
	size_t klen = eq ? (size_t)(eq - key) : len - (sizeof(source) - 1);

	if (mod_label_domain_is(key, klen, "app.kubernetes.io"))
		return true;
	if (mod_label_has_prefix(key, klen, "io.kubernetes") ||
	    mod_label_has_prefix(key, klen, "annotation.") ||
	    mod_label_domain_is(key, klen, "kubernetes.io") || mod_label_domain_is(key, klen, "k8s.io"))
		return false;
	for (size_t i = 0; i < sizeof(excluded_keys) / sizeof(excluded_keys[0]); i++)
		if (klen == strlen(excluded_keys[i]) && !memcmp(key, excluded_keys[i], klen))
			return false;
	return true;
}

#endif
