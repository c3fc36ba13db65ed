/* fibril/compat.h - the SDK's growth rule for a struct (or an array
 * element) handed over with the size its caller was built with: libbpf's
 * OPTS_VALID rule, as a header-only helper that the host, the in-tree
 * modules and a vendor's module that serves a capability interface all use
 * the same way. Nothing here is a library symbol: it adds no ABI.
 *
 *   caller's size <  ours: fine; the fields it does not carry read as zero.
 *   caller's size == ours: fine.
 *   caller's size >  ours: fine only if every byte we do not know is zero
 *                          (it set no field we do not understand), else
 *                          -E2BIG: it asked for something we cannot do.
 *
 * A size below `min` (e.g. smaller than the sz field itself, or an array
 * element without its first field) is -EINVAL. An array is walked with the
 * element size its caller passed beside it (never sizeof of our element),
 * each element copied in by the same rule. */
#ifndef FIBRIL_COMPAT_H
#define FIBRIL_COMPAT_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The offset just past a member: the size of a struct as of that field
 * (e.g. the `min` of fibril_struct_copy_in: the struct as of its first
 * field). */
#define FIBRIL_OFFSETOFEND(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

/* Largest element or struct size accepted from a caller (a sanity bound). */
#define FIBRIL_STRUCT_SIZE_MAX 4096u

/* Copy the caller's struct (src, src_sz bytes as it built it) into dst
 * (ours, dst_sz bytes) by the rule above. On failure dst is zeroed and a
 * one-line reason naming `what` is written to why. Returns 0, -EINVAL or
 * -E2BIG. */
static inline int fibril_struct_copy_in(void *dst, size_t dst_sz, const void *src, size_t src_sz,
					size_t min, const char *what, char *why, size_t why_len)
{
	memset(dst, 0, dst_sz);
	if (!src) {
		snprintf(why, why_len, "%s: missing (NULL)", what);
		return -EINVAL;
	}
	if (src_sz < min || src_sz > FIBRIL_STRUCT_SIZE_MAX) {
		snprintf(why, why_len, "%s: size %zu is not valid (at least %zu, at most %u)", what,
			 src_sz, min, FIBRIL_STRUCT_SIZE_MAX);
		return -EINVAL;
	}
	const unsigned char *p = (const unsigned char *)src;
	for (size_t i = dst_sz; i < src_sz; i++) {
		if (p[i]) {
			snprintf(why, why_len,
				 "%s: size %zu has non-zero byte %zu past the %zu this host knows "
				 "(a field of a newer SDK is set; upgrade fibril-agent)",
				 what, src_sz, i, dst_sz);
			return -E2BIG;
		}
	}
	memcpy(dst, src, src_sz < dst_sz ? src_sz : dst_sz);
	return 0;
}

#ifdef __cplusplus
}
#endif

#endif
