/* modules/endpoint/cluster_record.h - the kvstore records of cluster-wide
 * identities (cluster_record.c): label sets in the store's ';' form and
 * back, identity numbers, and the per-node reference keys. */
#ifndef FIBRIL_EP_CLUSTER_RECORD_H
#define FIBRIL_EP_CLUSTER_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* keys, relative to the kvstore's prefix (Cilium's state/identities/v1) */
#define CL_ID_PREFIX "state/identities/v1/id/"
#define CL_VALUE_PREFIX "state/identities/v1/value/"
#define CL_LABELS_MAX 8192 /* a label set in either form, bytes with NUL */
#define CL_NODE_MAX 256

/* '\n'-separated labels -> "a;b;" (0, or -EINVAL / -E2BIG with why) */
int cl_labels_encode(const char *labels, char *out, size_t outlen, char *why, size_t whylen);
/* "a;b;" (len bytes, sorted, no duplicates) -> "a\nb" */
int cl_labels_decode(const char *text, size_t len, char *out, size_t outlen, char *why,
		     size_t whylen);
/* a decimal number in [min, max], no sign, no leading zero: 0, -EINVAL, -ERANGE */
int cl_number_parse(const char *text, size_t len, uint32_t min, uint32_t max, uint32_t *out);
/* "<labels>/<node>" (what follows CL_VALUE_PREFIX) -> labels ('\n' form), node */
int cl_ref_key_parse(const char *rest, size_t len, char *labels, size_t lablen, char *node,
		     size_t nodelen, char *why, size_t whylen);

#endif
