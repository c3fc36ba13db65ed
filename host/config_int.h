/* host/config_int.h - what the two halves of the configuration store
 * share: the entries read from the file and --set (host/config_file.c) and
 * the sections and keys the agent and modules declare, with validation and
 * the effective values' uses (host/config.c). Internal to the host. */
#ifndef FIBRIL_HOST_CONFIG_INT_H
#define FIBRIL_HOST_CONFIG_INT_H

#include "internal.h"

/* One value from the file or from --set, or a section heading (key NULL). */
struct config_entry {
	char *section;
	char *key;
	char *value;
	char *file;   /* NULL: from --set */
	int line;
	char *origin; /* "FILE:LINE" or "--set" */
	struct config_entry *next;
};

struct entry_list {
	struct config_entry *head, *tail;
};

struct config_section {
	char *name;
	const struct fibril_config_key *keys; /* not owned (module descriptor) */
	size_t nkeys;
	struct fibril_config_key *owned_keys; /* dynamic sections only */
	char *owned_help;
};

/* The one config store. */
struct config_store {
	struct config_section *sections; /* in declaration order */
	size_t nsections;
	struct entry_list file_entries;  /* in file order */
	struct entry_list overrides;     /* one entry per section.key */
};
HIDDEN extern struct config_store config_store;

/* host/config_file.c */
HIDDEN void list_free(struct entry_list *list);
/* "FILE:LINE" or "--set" of an entry, for an error message. */
HIDDEN void entry_where(const struct config_entry *e, char *buf, size_t len);
/* host/config.c */
HIDDEN const struct fibril_config_key *declared_key(const char *section, const char *key);

#endif
