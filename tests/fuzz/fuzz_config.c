/* tests/fuzz/fuzz_config.c - fuzz target: the agent's configuration, as the
 * agent reads it: the INI file (config_load_file: inih with fibril's line
 * reader, section headings, duplicate keys), then --set overrides
 * (config_set_override), then validation against declared keys of every
 * type (string with a check, int with a range, bool, path, duration, list)
 * and [providers], then every reader: values, origins, --print-config and
 * /v1/config. Input: the INI text; lines after a line "--set" are --set
 * arguments, one per line. The file is a memfd (fuzz_memfile). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#include "fuzz.h"

static int check_level(const char *value, char *why, size_t len)
{
	enum fibril_log_level level;
	if (log_parse_level(value, &level) == 0)
		return 0;
	snprintf(why, len, "'%s' is not a log level", value);
	return -1;
}

static const struct fibril_config_key agent_keys[] = {
	{.name = "state-dir", .type = FIBRIL_CONFIG_PATH, .default_value = "/var/lib/fibril", .help = "state"},
	{.name = "modules", .type = FIBRIL_CONFIG_LIST, .default_value = "", .help = "modules"},
	{.name = "log-level", .type = FIBRIL_CONFIG_STRING, .default_value = "info", .help = "level",
	 .check = check_level},
	{.name = "api-max-body", .type = FIBRIL_CONFIG_INT, .default_value = "1048576", .help = "body",
	 .min = 1024, .max = 64 * 1024 * 1024},
	{.name = "start-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "2m", .help = "start",
	 .min = 1000, .max = 3600 * 1000},
	{.name = "node-name", .type = FIBRIL_CONFIG_STRING, .default_value = "", .help = "node"},
	{0},
};

static const struct fibril_config_key alpha_keys[] = {
	{.name = "count", .type = FIBRIL_CONFIG_INT, .default_value = "1", .help = "a bounded integer",
	 .min = 1, .max = 100},
	{.name = "offset", .type = FIBRIL_CONFIG_INT, .help = "an unbounded integer"},
	{.name = "fail-start", .type = FIBRIL_CONFIG_BOOL, .default_value = "false", .help = "a bool"},
	{.name = "trace", .type = FIBRIL_CONFIG_PATH, .help = "a path"},
	{.name = "interval", .type = FIBRIL_CONFIG_DURATION, .default_value = "5s", .help = "a duration"},
	{.name = "resources", .type = FIBRIL_CONFIG_LIST, .default_value = "nodes,pods", .help = "a list"},
	{0},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *devnull;
	char err[ERRBUF_LEN];

	if (!devnull) {
		fuzz_quiet_logs();
		devnull = fopen("/dev/null", "w");
		if (!devnull)
			abort();
	}
	char *text = fuzz_strndup(data, size);
	char *sets = fuzz_split(text, "\n--set\n");
	const char *path = fuzz_memfile(text, strlen(text));

	config_reset();
	if (config_declare("agent", agent_keys))
		abort();
	config_load_file(path, err);
	for (char *save = NULL, *line = sets ? strtok_r(sets, "\n", &save) : NULL; line;
	     line = strtok_r(NULL, "\n", &save))
		config_set_override(line, err);
	config_validate_section("agent", err);
	static const char *const caps[] = {"ipam", "kvstore"};
	if (config_declare("alpha", alpha_keys) || config_declare_dynamic("providers", caps, 2, "providers"))
		abort();
	config_validate_all(err);
	const char *keys[][2] = {{"agent", "state-dir"}, {"alpha", "count"}, {"alpha", "interval"},
				 {"providers", "ipam"}, {"alpha", "nope"}, {"nope", "x"}};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		config_value(keys[i][0], keys[i][1]);
		config_origin(keys[i][0], keys[i][1]);
		config_section_present(keys[i][0]);
	}
	const char *v = config_value("alpha", "interval");
	int64_t ms;
	bool b;
	if (v)
		config_parse_duration_ms(v, &ms);
	if ((v = config_value("alpha", "offset")))
		config_parse_int(v, &ms);
	if ((v = config_value("alpha", "fail-start")))
		config_parse_bool(v, &b);
	config_print(devnull);
	json_object_put(config_to_json());
	config_reset();
	free(text);
	return 0;
}
