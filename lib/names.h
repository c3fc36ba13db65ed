/* lib/names.h - name suggestions (lib/names.c), for the host and the CLI */
#ifndef FIBRIL_LIB_NAMES_H
#define FIBRIL_LIB_NAMES_H

#include <stddef.h>

/* (hidden: never part of libfibril's exported ABI) */
#define NAMES_HIDDEN __attribute__((visibility("hidden")))

/* Levenshtein distance of two names; (size_t)-1 past 64 characters. */
NAMES_HIDDEN size_t edit_distance(const char *a, const char *b);
/* The candidate at most 3 edits from word and nearest to it, or NULL. */
NAMES_HIDDEN const char *nearest_name(const char *word, const char *const *candidates, size_t n);

#endif
