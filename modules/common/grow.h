/* modules/common/grow.h - room for one more element at the end of a
 * growable array (the modules' lists of services, rules, key-values,
 * identities...): the capacity doubles from a first size, every
 * multiplication checked for overflow. Header-only (static inline), so the
 * modules and the fuzz targets that compile a module's file need only
 * -I modules/common; internal to the modules, not part of the SDK. */
#ifndef FIBRIL_MOD_GROW_H
#define FIBRIL_MOD_GROW_H

#include <stddef.h>
#include <stdlib.h>

/* arr holds n elements of size bytes in room for *cap. While n < *cap it
 * returns arr as it is. Otherwise it reallocates arr to twice *cap
 * elements (first when *cap is 0), stores the new capacity in *cap and
 * returns the new array. NULL when out of memory or when the new size
 * would not fit in a size_t: arr and *cap are then untouched (arr is still
 * the caller's, valid, to keep or free). Typical use:
 *
 *	struct item *v = mod_grow(list->v, list->n, &list->cap, sizeof(*v), 64);
 *	if (!v)
 *		return -ENOMEM;
 *	list->v = v;
 *	list->v[list->n++] = item;
 */
static inline void *mod_grow(void *arr, size_t n, size_t *cap, size_t size, size_t first)
{
	if (n < *cap)
		return arr;
	size_t ncap, bytes;
	if (*cap == 0)
		ncap = first ? first : 1;
	else if (__builtin_mul_overflow(*cap, (size_t)2, &ncap))
		return NULL;
	if (ncap <= n || __builtin_mul_overflow(ncap, size, &bytes))
		return NULL;
	void *grown = realloc(arr, bytes);
	if (!grown)
		return NULL;
	*cap = ncap;
	return grown;
}

#endif
