/* host/config_sources.h - what host/config.c (the store: declared keys,
 * validation, effective values) and host/config_sources.c (where the values
 * come from: the main file, its drop-in directory, --set) share. Private to
 * those two files. */
#ifndef FIBRIL_HOST_CONFIG_SOURCES_H
#define FIBRIL_HOST_CONFIG_SOURCES_H

#include "internal.h"

/* One value from a file or from --set, or a section heading (key NULL). */
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

/* The files' entries in reading order (main file, then drop-ins in name
 * order), and the --set overrides (one entry per section.key). */
HIDDEN struct entry_list *config_file_entries(void);
HIDDEN struct entry_list *config_override_entries(void);
/* The last entry that sets section.key, or NULL. */
HIDDEN struct config_entry *config_entry_find(const struct entry_list *list, const char *section,
					      const char *key);
HIDDEN bool config_entries_have_section(const struct entry_list *list, const char *section);
/* "FILE:LINE" or "--set section.key": how errors point at an entry. */
HIDDEN void config_entry_where(const struct config_entry *e, char *buf, size_t len);
/* Forget every entry read (config_reset calls it). */
HIDDEN void config_sources_reset(void);

#endif
