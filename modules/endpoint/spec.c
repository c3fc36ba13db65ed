/* modules/endpoint/spec.c - reading an endpoint from JSON (a PUT body or a
 * state file) into a struct ep_spec, checking the text of every field:
 * container ID (CNI's charset, < 128 bytes), interface names (1..15 bytes,
 * no '/', ':' or blanks), netns (absolute path), MACs, addresses (ipv4 /
 * ipv6, at least one), pod namespace and name (DNS names), labels
 * ("source:key[=value]", sorted, deduplicated, plus the namespace label).
 * Each error is one line naming the field. What the host says about the
 * values (interfaces, IPAM) is checked by the caller. */
#include "endpoint_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* A value shown in an error: at most 64 bytes, control characters as '?'. */
static const char *shown(const char *s, char *buf, size_t len)
{
	size_t n = strlen(s), max = len > 68 ? 64 : len - 4, i;

	for (i = 0; i < n && i < max; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	buf[i] = '\0';
	if (n > max)
		strcat(buf, "...");
	return buf;
}

bool ep_valid_container_id(const char *s)
{
	size_t n = strlen(s);

	/* CNI: ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$ */
	if (n == 0 || n > FIBRIL_ENDPOINT_CONTAINER_ID_MAX || !isalnum((unsigned char)s[0]))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
			return false;
	return true;
}

bool ep_valid_ifname(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= IFNAMSIZ || !strcmp(s, ".") || !strcmp(s, ".."))
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || s[i] == 0x7f || s[i] == '/' || s[i] == ':')
			return false;
	return true;
}

/* DNS label (namespace) or subdomain (pod name): [a-z0-9] at both ends,
 * [a-z0-9-] inside (and '.' in a subdomain). */
static bool valid_dns(const char *s, size_t max, bool dots)
{
	size_t n = strlen(s);

	if (n == 0 || n > max || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!(islower((unsigned char)c) || isdigit((unsigned char)c) || c == '-' ||
		      (dots && c == '.')))
			return false;
	}
	return true;
}

static int parse_mac(const char *s, uint8_t mac[6])
{
	unsigned v[6];
	char end;

	if (strlen(s) != 17 || sscanf(s, "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3],
				      &v[4], &v[5], &end) != 6)
		return -EINVAL;
	for (int i = 0; i < 6; i++) {
		if (!isxdigit((unsigned char)s[i * 3]) || !isxdigit((unsigned char)s[i * 3 + 1]))
			return -EINVAL;
		mac[i] = (uint8_t)v[i];
	}
	return 0;
}

/* One label: "source:key" or "source:key=value", printable, no blanks in
 * source and key. */
static int check_label(const char *l, char *why, size_t len)
{
	char buf[80];
	const char *colon = strchr(l, ':');
	size_t n = strlen(l);

	if (n == 0)
		return fail(why, len, "labels: an empty label");
	if (n > EP_LABEL_MAX)
		return fail(why, len, "labels: '%s' is longer than %d bytes", shown(l, buf, sizeof(buf)),
			    EP_LABEL_MAX);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)l[i] < 0x20 || l[i] == 0x7f)
			return fail(why, len, "labels: '%s' holds a control character",
				    shown(l, buf, sizeof(buf)));
	if (!colon || colon == l)
		return fail(why, len, "labels: '%s' is not source:key[=value] (e.g. k8s:app=web)",
			    shown(l, buf, sizeof(buf)));
	for (const char *c = l; c < colon; c++)
		if (!isalnum((unsigned char)*c) && *c != '-' && *c != '_' && *c != '.')
			return fail(why, len, "labels: '%s': the source may hold only [A-Za-z0-9._-]",
				    shown(l, buf, sizeof(buf)));
	const char *key = colon + 1, *eq = strchr(key, '=');
	size_t klen = eq ? (size_t)(eq - key) : strlen(key);

	if (klen == 0)
		return fail(why, len, "labels: '%s' has an empty key", shown(l, buf, sizeof(buf)));
	for (size_t i = 0; i < klen; i++)
		if (isspace((unsigned char)key[i]))
			return fail(why, len, "labels: '%s': the key holds a blank",
				    shown(l, buf, sizeof(buf)));
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

char *ep_labels_join(char **labels, size_t n)
{
	size_t total = 1, at = 0;

	if (n > 1)
		qsort(labels, n, sizeof(*labels), cmp_str);
	for (size_t i = 0; i < n; i++)
		total += strlen(labels[i]) + 1;
	char *out = malloc(total);

	if (!out)
		return NULL;
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (i > 0 && !strcmp(labels[i], labels[i - 1]))
			continue;
		size_t l = strlen(labels[i]);

		if (at)
			out[at++] = '\n';
		memcpy(out + at, labels[i], l);
		at += l;
		out[at] = '\0';
	}
	return out;
}

int ep_labels_from_json(struct json_object *arr, const char *ns, char **out, char *why, size_t len)
{
	char nslabel[sizeof(EP_NAMESPACE_LABEL) + EP_NS_LEN];
	char *list[EP_LABELS_MAX + 1];
	size_t count = 0, n;
	char buf[80];

	if (arr && !json_object_is_type(arr, json_type_array))
		return fail(why, len, "labels: expected an array of strings");
	n = arr ? json_object_array_length(arr) : 0;
	if (n > EP_LABELS_MAX)
		return fail(why, len, "labels: at most %d labels (got %zu)", EP_LABELS_MAX, n);
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(arr, i);
		int rc;

		if (!json_object_is_type(e, json_type_string))
			return fail(why, len, "labels: element %zu is not a string", i);
		const char *l = json_object_get_string(e);

		if ((size_t)json_object_get_string_len(e) != strlen(l))
			return fail(why, len, "labels: element %zu holds a NUL byte", i);
		if ((rc = check_label(l, why, len)))
			return rc;
		if (ns && *ns && !strncmp(l, EP_NAMESPACE_LABEL, strlen(EP_NAMESPACE_LABEL)) &&
		    strcmp(l + strlen(EP_NAMESPACE_LABEL), ns))
			return fail(why, len, "labels: '%s' contradicts pod-namespace '%s'",
				    shown(l, buf, sizeof(buf)), ns);
		if (ep_label_counts_for_identity(l, strlen(l)))
			list[count++] = (char *)l;
	}
	if (ns && *ns) {
		snprintf(nslabel, sizeof(nslabel), "%s%s", EP_NAMESPACE_LABEL, ns);
		list[count++] = nslabel;
	}
	*out = ep_labels_join(list, count);
	return *out ? 0 : -ENOMEM;
}

struct json_object *ep_labels_to_json(const char *labels)
{
	struct json_object *arr = json_object_new_array();

	for (const char *p = labels; p && *p;) {
		const char *nl = strchr(p, '\n');
		size_t l = nl ? (size_t)(nl - p) : strlen(p);

		json_object_array_add(arr, json_object_new_string_len(p, (int)l));
		p += l + (nl ? 1 : 0);
	}
	return arr;
}

/* ---- fields ---------------------------------------------------------------- */

/* A string field: 0 and *out, 1 when absent (and not required), or -EINVAL. */
static int get_string(struct json_object *o, const char *key, bool required, const char **out,
		      char *why, size_t len)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null)) {
		if (required)
			return fail(why, len, "%s: missing (required)", key);
		return 1;
	}
	if (!json_object_is_type(v, json_type_string))
		return fail(why, len, "%s: expected a string", key);
	*out = json_object_get_string(v);
	if ((size_t)json_object_get_string_len(v) != strlen(*out))
		return fail(why, len, "%s: holds a NUL byte", key);
	if (!**out && required)
		return fail(why, len, "%s: empty (required)", key);
	return **out ? 0 : 1;
}

static int get_int(struct json_object *o, const char *key, bool required, int64_t min, int64_t max,
		   int64_t *out, char *why, size_t len)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null)) {
		if (required)
			return fail(why, len, "%s: missing (required)", key);
		return 1;
	}
	if (!json_object_is_type(v, json_type_int))
		return fail(why, len, "%s: expected an integer", key);
	errno = 0;
	int64_t x = json_object_get_int64(v);

	if (errno || x < min || x > max)
		return fail(why, len, "%s: %lld is out of range (%lld..%lld)", key, (long long)x,
			    (long long)min, (long long)max);
	*out = x;
	return 0;
}

static int get_address(struct json_object *o, const char *key, int family, void *addr,
		       bool *has, char *why, size_t len)
{
	const char *s;
	char buf[80];
	int rc = get_string(o, key, false, &s, why, len);

	*has = false;
	if (rc < 0)
		return rc;
	if (rc > 0)
		return 0;
	if (strchr(s, '/'))
		return fail(why, len, "%s: '%s' is a prefix; expected a single %s address", key,
			    shown(s, buf, sizeof(buf)), family == AF_INET ? "IPv4" : "IPv6");
	if (inet_pton(family, s, addr) != 1)
		return fail(why, len, "%s: '%s' is not an %s address", key, shown(s, buf, sizeof(buf)),
			    family == AF_INET ? "IPv4" : "IPv6");
	*has = true;
	return 0;
}

void ep_spec_clear(struct ep_spec *spec)
{
	free(spec->labels);
	spec->labels = NULL;
}

int ep_spec_parse(struct json_object *o, struct ep_spec *spec, bool state_file, char *why,
		  size_t len)
{
	const char *s;
	char buf[80];
	int64_t x;
	int rc;

	memset(spec, 0, sizeof(*spec));
	if (!o || !json_object_is_type(o, json_type_object))
		return fail(why, len, "body: expected a JSON object");

	if ((rc = get_string(o, "container-id", true, &s, why, len)) < 0)
		return rc;
	if (!ep_valid_container_id(s))
		return fail(why, len,
			    "container-id: '%s' is not a container ID (1..%d bytes of [A-Za-z0-9_.-], starting with a letter or digit)",
			    shown(s, buf, sizeof(buf)), FIBRIL_ENDPOINT_CONTAINER_ID_MAX);
	snprintf(spec->container_id, sizeof(spec->container_id), "%s", s);

	if ((rc = get_string(o, "ifname", true, &s, why, len)) < 0)
		return rc;
	if (!ep_valid_ifname(s))
		return fail(why, len,
			    "ifname: '%s' is not an interface name (1..15 bytes, no '/', ':' or blanks)",
			    shown(s, buf, sizeof(buf)));
	snprintf(spec->ifname, sizeof(spec->ifname), "%s", s);

	if ((rc = get_string(o, "netns", true, &s, why, len)) < 0)
		return rc;
	if (s[0] != '/' || strlen(s) >= EP_NETNS_MAX)
		return fail(why, len, "netns: '%s' is not an absolute path (under %d bytes)",
			    shown(s, buf, sizeof(buf)), EP_NETNS_MAX);
	for (const char *c = s; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return fail(why, len, "netns: the path holds a control character");
	snprintf(spec->netns, sizeof(spec->netns), "%s", s);

	if ((rc = get_string(o, "host-ifname", true, &s, why, len)) < 0)
		return rc;
	if (!ep_valid_ifname(s))
		return fail(why, len,
			    "host-ifname: '%s' is not an interface name (1..15 bytes, no '/', ':' or blanks)",
			    shown(s, buf, sizeof(buf)));
	snprintf(spec->host_ifname, sizeof(spec->host_ifname), "%s", s);

	if ((rc = get_int(o, "host-ifindex", true, 1, INT32_MAX, &x, why, len)) < 0)
		return rc;
	spec->host_ifindex = (int)x;

	if ((rc = get_string(o, "mac", true, &s, why, len)) < 0)
		return rc;
	if (parse_mac(s, spec->mac))
		return fail(why, len, "mac: '%s' is not a MAC address (expected aa:bb:cc:dd:ee:ff)",
			    shown(s, buf, sizeof(buf)));
	if ((rc = get_string(o, "host-mac", true, &s, why, len)) < 0)
		return rc;
	if (parse_mac(s, spec->host_mac))
		return fail(why, len, "host-mac: '%s' is not a MAC address (expected aa:bb:cc:dd:ee:ff)",
			    shown(s, buf, sizeof(buf)));

	if ((rc = get_address(o, "ipv4", AF_INET, &spec->ipv4, &spec->has_ipv4, why, len)) ||
	    (rc = get_address(o, "ipv6", AF_INET6, &spec->ipv6, &spec->has_ipv6, why, len)))
		return rc;
	if (!spec->has_ipv4 && !spec->has_ipv6)
		return fail(why, len, "ipv4, ipv6: at least one address is required");

	if ((rc = get_string(o, "pod-namespace", false, &s, why, len)) < 0)
		return rc;
	if (rc == 0) {
		if (!valid_dns(s, EP_NS_LEN - 1, false))
			return fail(why, len, "pod-namespace: '%s' is not a namespace name (DNS label, at most %d bytes)",
				    shown(s, buf, sizeof(buf)), EP_NS_LEN - 1);
		snprintf(spec->pod_namespace, sizeof(spec->pod_namespace), "%s", s);
	}
	if ((rc = get_string(o, "pod-name", false, &s, why, len)) < 0)
		return rc;
	if (rc == 0) {
		if (!valid_dns(s, EP_POD_LEN - 1, true))
			return fail(why, len, "pod-name: '%s' is not a pod name (DNS subdomain, at most %d bytes)",
				    shown(s, buf, sizeof(buf)), EP_POD_LEN - 1);
		snprintf(spec->pod_name, sizeof(spec->pod_name), "%s", s);
	}
	if (*spec->pod_name && !*spec->pod_namespace)
		return fail(why, len, "pod-name: given without pod-namespace");

	if (state_file) {
		if ((rc = get_int(o, "id", true, 1, EP_ID_MAX, &x, why, len)) < 0)
			return rc;
		spec->id = (uint32_t)x;
		if ((rc = get_int(o, "identity", true, 1, EP_IDENTITY_MAX, &x, why, len)) < 0)
			return rc;
		spec->identity = (uint32_t)x;
		if ((rc = get_int(o, "created", true, 0, INT64_MAX, &x, why, len)) < 0)
			return rc;
		spec->created = x;
	}

	struct json_object *labels = NULL;

	json_object_object_get_ex(o, "labels", &labels);
	if (labels && json_object_is_type(labels, json_type_null))
		labels = NULL;
	return ep_labels_from_json(labels, spec->pod_namespace, &spec->labels, why, len);
}
