/* tests/fuzz/fuzz.h - what every fuzz harness of tests/fuzz shares: the
 * libFuzzer entry point each one defines, and small helpers to turn the
 * fuzzer's bytes into the strings a parser takes. The same harness is linked
 * with libFuzzer (make fuzz, --enable-fuzz) and with replay.c (make check,
 * every build), which feeds it the seed corpus and the regression inputs. */
#ifndef FIBRIL_FUZZ_H
#define FIBRIL_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The host's log at ERROR only (all of it with FUZZ_VERBOSE set): a
 * rejected input logs one line, which would drown the fuzzer's output.
 * In fuzz_log.c, for the targets linked with the host runtime. */
void fuzz_quiet_logs(void);
/* Deliver (and so free) the events a parser published on the bus. */
void fuzz_host_drain(void);

/* The bytes as a NUL-terminated string (malloc'd; embedded NULs stay, so
 * C-string parsers see the text up to the first one). */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (!s)
		abort();
	if (size)
		memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

/* Split s in place at the first occurrence of sep (a line of its own, such
 * as "\n--\n"): returns the part after it, or NULL (s unchanged) when absent. */
static inline char *fuzz_split(char *s, const char *sep)
{
	char *at = strstr(s, sep);
	if (!at)
		return NULL;
	*at = '\0';
	return at + strlen(sep);
}

/* A file holding exactly the bytes, for parsers that take a path: a memfd
 * (no disk, nothing left behind) rewritten for each input; returns its
 * path, /proc/self/fd/N. */
static inline const char *fuzz_memfile(const char *text, size_t len)
{
	static int fd = -1;
	static char path[64];
	if (fd < 0) {
		fd = memfd_create("fuzz-input", MFD_CLOEXEC);
		if (fd < 0)
			abort();
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) || (len && pwrite(fd, text, len, 0) != (ssize_t)len))
		abort();
	return path;
}

#endif
