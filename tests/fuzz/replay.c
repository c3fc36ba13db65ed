/* tests/fuzz/replay.c - the main() of the replay drivers: feeds each file
 * of the target's seed corpus (tests/fuzz/corpus/NAME) and regression inputs
 * (tests/fuzz/regressions/NAME) to the harness's LLVMFuzzerTestOneInput, so
 * that make check runs every crash ever found, in every build (gcc, clang,
 * ASan+UBSan) and without libFuzzer. Arguments, when given, are files or
 * directories to replay instead. A crash or sanitizer report fails it. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

#ifndef FUZZ_TARGET
#error "FUZZ_TARGET (the name of the target) must be defined"
#endif

static int replay_file(const char *path, unsigned *count)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
		return -1;
	}
	size_t cap = 4096, len = 0;
	uint8_t *buf = malloc(cap);
	size_t n;
	while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len == cap) {
			uint8_t *nb = realloc(buf, cap *= 2);
			if (!nb)
				free(buf);
			buf = nb;
		}
	}
	int err = ferror(f);
	fclose(f);
	if (!buf || err) {
		fprintf(stderr, "replay: cannot read %s\n", path);
		free(buf);
		return -1;
	}
	/* an exact-size copy: ASan then catches a read past the input's end */
	uint8_t *exact = malloc(len ? len : 1);
	if (!exact)
		abort();
	memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	(*count)++;
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of dir (sorted); a missing dir is fine when optional. */
static int replay_dir(const char *dir, unsigned *count, int optional)
{
	DIR *d = opendir(dir);
	if (!d) {
		if (optional && errno == ENOENT)
			return 0;
		fprintf(stderr, "replay: cannot open %s: %s\n", dir, strerror(errno));
		return -1;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			char **nn = realloc(names, cap * sizeof(*names));
			if (!nn)
				abort();
			names = nn;
		}
		names[n] = strdup(de->d_name);
		if (!names[n])
			abort();
		n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(*names), cmp_names);
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		char path[4096];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && replay_file(path, count))
			rc = -1;
		free(names[i]);
	}
	free(names);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned count = 0;
	int rc = 0;
	if (argc > 1) {
		for (int i = 1; i < argc; i++) {
			struct stat st;
			if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
				rc |= replay_dir(argv[i], &count, 0);
			else
				rc |= replay_file(argv[i], &count);
		}
	} else {
		const char *top = getenv("top_srcdir");
		if (!top || !*top)
			top = FUZZ_SRCDIR;
		char corpus[4096], regressions[4096];
		snprintf(corpus, sizeof(corpus), "%s/tests/fuzz/corpus/%s", top, FUZZ_TARGET);
		snprintf(regressions, sizeof(regressions), "%s/tests/fuzz/regressions/%s", top, FUZZ_TARGET);
		rc |= replay_dir(corpus, &count, 0);
		rc |= replay_dir(regressions, &count, 1);
		if (count == 0) {
			fprintf(stderr, "replay %s: no inputs found under %s/tests/fuzz\n", FUZZ_TARGET, top);
			return 1;
		}
	}
	printf("replay %s: %u inputs replayed without a crash%s\n", FUZZ_TARGET, count,
	       rc ? " (some could not be read)" : "");
	return rc ? 1 : 0;
}
