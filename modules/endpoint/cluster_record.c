/* modules/endpoint/cluster_record.c - the kvstore records of cluster-wide
 * identities (Cilium's state/identities/v1 layout), encoded and decoded
 * with nothing but libc so the fuzz target links only this file:
 *   id/<number>            -> the label set, "k8s:a=b;k8s:c=d;" (no lease)
 *   value/<labels>/<node>  -> "<number>" (held by that node's lease: the
 *                             node's reference to the identity)
 * Labels are kept '\n'-separated in memory and ';'-terminated in the
 * store. Every decode refuses what it cannot read with a one-line reason. */
#include "cluster_record.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a label usable in a key: printable, no ';' (the separator), no '\n' */
static bool label_ok(const char *s, size_t n)
{
	if (!n)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c <= 0x20 || c == 0x7f || c == ';')
			return false;
	}
	return true;
}

int cl_labels_encode(const char *labels, char *out, size_t outlen, char *why, size_t whylen)
{
	size_t o = 0;
	const char *p = labels;

	if (!*labels) {
		snprintf(why, whylen, "an empty label set has no cluster identity");
		return -EINVAL;
	}
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);

		if (!label_ok(p, n)) {
			snprintf(why, whylen, "label '%.*s' cannot go into a kvstore key "
				 "(empty, a space, a control character or ';')", (int)(n > 64 ? 64 : n), p);
			return -EINVAL;
		}
		if (o + n + 2 > outlen) {
			snprintf(why, whylen, "the label set is longer than %zu bytes", outlen - 1);
			return -E2BIG;
		}
		memcpy(out + o, p, n);
		o += n;
		out[o++] = ';';
		p += n;
		if (*p == '\n')
			p++;
	}
	out[o] = '\0';
	return 0;
}

int cl_labels_decode(const char *text, size_t len, char *out, size_t outlen, char *why,
		     size_t whylen)
{
	size_t o = 0, i = 0, prev = 0, prevlen = 0;
	int shown = (int)(len > 64 ? 64 : len);

	if (!len || text[len - 1] != ';') {
		snprintf(why, whylen, "labels '%.*s' do not end with ';'", shown, text);
		return -EINVAL;
	}
	if (len + 1 > outlen) {
		snprintf(why, whylen, "labels longer than %zu bytes", outlen - 1);
		return -E2BIG;
	}
	for (unsigned k = 0; i < len; k++) {
		const char *semi = memchr(text + i, ';', len - i);
		size_t n = (size_t)(semi - (text + i));

		if (!label_ok(text + i, n)) {
			snprintf(why, whylen, "label %u of '%.*s' is empty or holds a space or a "
				 "control character", k + 1, shown, text);
			return -EINVAL;
		}
		/* sorted and without duplicates, as the endpoint module keeps them */
		if (k) {
			int c = memcmp(text + prev, text + i, prevlen < n ? prevlen : n);

			if (c > 0 || (c == 0 && prevlen >= n)) {
				snprintf(why, whylen, "labels '%.*s' are not sorted without duplicates",
					 shown, text);
				return -EINVAL;
			}
			out[o++] = '\n';
		}
		memcpy(out + o, text + i, n);
		o += n;
		prev = i;
		prevlen = n;
		i += n + 1;
	}
	out[o] = '\0';
	return 0;
}

int cl_number_parse(const char *text, size_t len, uint32_t min, uint32_t max, uint32_t *out)
{
	uint64_t v = 0;

	if (!len || len > 10 || (text[0] == '0' && len > 1))
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (text[i] < '0' || text[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(text[i] - '0');
	}
	if (v < min || v > max)
		return -ERANGE;
	*out = (uint32_t)v;
	return 0;
}

int cl_ref_key_parse(const char *rest, size_t len, char *labels, size_t lablen, char *node,
		     size_t nodelen, char *why, size_t whylen)
{
	const char *slash = NULL;

	for (size_t i = len; i > 0; i--)
		if (rest[i - 1] == '/') {
			slash = rest + i - 1;
			break;
		}
	if (!slash || slash == rest || (size_t)(rest + len - slash - 1) == 0) {
		snprintf(why, whylen, "not <labels>/<node>");
		return -EINVAL;
	}
	size_t nl = (size_t)(rest + len - slash - 1);

	if (nl >= nodelen) {
		snprintf(why, whylen, "node name longer than %zu bytes", nodelen - 1);
		return -EINVAL;
	}
	for (size_t i = 0; i < nl; i++) {
		unsigned char c = (unsigned char)slash[1 + i];

		if (c <= 0x20 || c >= 0x7f) {
			snprintf(why, whylen, "the node name holds a space or a control character");
			return -EINVAL;
		}
	}
	memcpy(node, slash + 1, nl);
	node[nl] = '\0';
	return cl_labels_decode(rest, (size_t)(slash - rest), labels, lablen, why, whylen);
}
