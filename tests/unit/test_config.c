/* tests/unit/test_config.c - unit tests of the config store (host/config.c,
 * host/config_sources.c): loading INI files and drop-in directories, --set
 * overrides, validation messages with file:line, defaults, --print-config
 * (with each value's origin), the /v1/config JSON and the SDK getters. */
#include "cunit_main.h"
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char test_dir[64];
static char ini_path[PATH_MAX];
static char err[ERRBUF_LEN];

/* ---- declared test sections --------------------------------------------- */

static int check_log_level(const char *value, char *why, size_t len)
{
	static const char *const levels[] = {"debug", "info", "warn", "error"};
	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
		if (strcmp(value, levels[i]) == 0)
			return 0;
	}
	snprintf(why, len, "must be one of debug, info, warn, error");
	return -EINVAL;
}

static int check_silently(const char *value, char *why, size_t len)
{
	return strcmp(value, "bad") == 0 ? -EINVAL : 0;
}

static const struct fibril_config_key agent_keys[] = {
	{.name = "state-dir", .type = FIBRIL_CONFIG_PATH, .default_value = "/var/lib/fibril",
	 .help = "where the agent keeps its state"},
	{.name = "start-timeout", .type = FIBRIL_CONFIG_DURATION, .default_value = "30s",
	 .help = "how long a module may take to start", .min = 1000, .max = 3600000},
	{.name = "log-level", .type = FIBRIL_CONFIG_STRING, .default_value = "info",
	 .help = "log verbosity", .check = check_log_level},
	{.name = "api-tcp-listen", .type = FIBRIL_CONFIG_STRING, .help = "TCP address of the API"},
	{.name = "debug", .type = FIBRIL_CONFIG_BOOL, .default_value = "false", .help = "extra checks"},
	{0},
};

static const struct fibril_config_key hello_keys[] = {
	{.name = "count", .type = FIBRIL_CONFIG_INT, .default_value = "3",
	 .help = "how many greetings", .min = 1, .max = 100},
	{.name = "greeting", .type = FIBRIL_CONFIG_STRING, .default_value = "hello",
	 .help = "what to say"},
	{.name = "tags", .type = FIBRIL_CONFIG_LIST, .help = "labels"},
	{.name = "enabled", .type = FIBRIL_CONFIG_BOOL, .default_value = "true"},
	{.name = "interval", .type = FIBRIL_CONFIG_DURATION, .default_value = "5s",
	 .help = "time between greetings"},
	{.name = "offset", .type = FIBRIL_CONFIG_INT, .help = "any number"},
	{.name = "socket", .type = FIBRIL_CONFIG_PATH, .help = "where to listen"},
	{.name = "mood", .type = FIBRIL_CONFIG_STRING, .check = check_silently},
	{0},
};

static void declare_test_sections(void)
{
	config_reset();
	CU_ASSERT_EQUAL(config_declare("agent", agent_keys), 0);
	CU_ASSERT_EQUAL(config_declare("hello", hello_keys), 0);
}

/* ---- helpers --------------------------------------------------------------- */

static int make_test_dir(void)
{
	snprintf(test_dir, sizeof(test_dir), "/tmp/fibril-test-config-XXXXXX");
	return mkdtemp(test_dir) ? 0 : -1;
}

static int remove_test_dir(void)
{
	config_reset();
	DIR *d = opendir(test_dir);
	if (!d)
		return -1;
	struct dirent *de;
	while ((de = readdir(d))) {
		char path[PATH_MAX];
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", test_dir, de->d_name);
		unlink(path);
	}
	closedir(d);
	return rmdir(test_dir);
}

/* Writes test_dir/name and leaves its path in ini_path. */
static const char *write_ini(const char *name, const char *content)
{
	snprintf(ini_path, sizeof(ini_path), "%s/%s", test_dir, name);
	FILE *f = fopen(ini_path, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(content, f);
	fclose(f);
	return ini_path;
}

/* Fresh store with the test sections, then load and validate content. */
static int load_and_validate(const char *content)
{
	declare_test_sections();
	err[0] = '\0';
	if (config_load_file(write_ini("test.ini", content), err))
		return -1;
	return config_validate_all(err);
}

/* For content that must load: shows why it did not. */
static void assert_valid(const char *content)
{
	if (load_and_validate(content))
		fprintf(stderr, "\n  unexpected error: %s\n", err);
	CU_ASSERT_EQUAL(err[0], '\0');
}

static void assert_err_is(const char *expected)
{
	if (strcmp(err, expected) != 0)
		fprintf(stderr, "\n  expected: %s\n  got:      %s\n", expected, err);
	CU_ASSERT_STRING_EQUAL(err, expected);
}

/* err must be "<ini_path>:<line>: <what>". */
static void assert_file_err(int line, const char *what)
{
	char expected[ERRBUF_LEN + PATH_MAX];
	snprintf(expected, sizeof(expected), "%s:%d: %s", ini_path, line, what);
	assert_err_is(expected);
}

/* content must be refused with "<ini_path>:<line>: <what>". */
static void assert_refused(const char *content, int line, const char *what)
{
	CU_ASSERT_EQUAL(load_and_validate(content), -1);
	assert_file_err(line, what);
}

static void assert_value(const char *section, const char *key, const char *expected)
{
	const char *v = config_value(section, key);
	if (!expected) {
		CU_ASSERT_PTR_NULL(v);
		return;
	}
	CU_ASSERT_PTR_NOT_NULL_FATAL(v);
	CU_ASSERT_STRING_EQUAL(v, expected);
}

static void assert_origin(const char *section, const char *key, const char *expected)
{
	const char *o = config_origin(section, key);
	CU_ASSERT_PTR_NOT_NULL_FATAL(o);
	CU_ASSERT_STRING_EQUAL(o, expected);
}

static void assert_file_origin(const char *section, const char *key, int line)
{
	char expected[PATH_MAX + 16];
	snprintf(expected, sizeof(expected), "%s:%d", ini_path, line);
	assert_origin(section, key, expected);
}

/* ---- loading and validating -------------------------------------------- */

static void t_valid_file_all_types(void)
{
	assert_valid("; a comment\n"
		     "[agent]\n"
		     "state-dir = /srv/fibril\n"
		     "start-timeout = 1500ms\n"
		     "log-level = debug\n"
		     "debug = Yes\n"
		     "\n"
		     "[hello]\n"
		     "count = 42\n"
		     "greeting = good morning, world\n"
		     "tags = a, b ,c\n"
		     "enabled = off\n"
		     "interval = 2m\n"
		     "offset = -9223372036854775808\n"
		     "socket = /run/hello.sock\n");
	assert_value("agent", "state-dir", "/srv/fibril");
	assert_value("agent", "start-timeout", "1500ms");
	assert_value("agent", "debug", "Yes");
	assert_value("hello", "greeting", "good morning, world");
	assert_value("hello", "tags", "a, b ,c");
	assert_value("hello", "offset", "-9223372036854775808");
	assert_file_origin("agent", "state-dir", 3);
	assert_file_origin("hello", "socket", 15);
	assert_value("agent", "api-tcp-listen", NULL);
	assert_origin("agent", "api-tcp-listen", "default");
}

static void t_defaults_without_file(void)
{
	declare_test_sections();
	CU_ASSERT_EQUAL(config_validate_all(err), 0);
	assert_value("agent", "state-dir", "/var/lib/fibril");
	assert_origin("agent", "state-dir", "default");
	assert_value("hello", "interval", "5s");
	assert_value("hello", "tags", NULL);
	assert_origin("hello", "tags", "default");
	CU_ASSERT_PTR_NULL(config_value("hello", "no-such-key"));
	CU_ASSERT_PTR_NULL(config_origin("hello", "no-such-key"));
	CU_ASSERT_PTR_NULL(config_value("nowhere", "count"));
	CU_ASSERT_PTR_NULL(config_value(NULL, "count"));
	CU_ASSERT_PTR_NULL(config_value("hello", NULL));
}

static void t_empty_lists_and_zero_durations(void)
{
	assert_valid("[hello]\ntags =\ninterval = 0\n");
	assert_value("hello", "tags", "");
	assert_value("hello", "interval", "0");
	assert_valid("[hello]\ntags = one\n");
}

static void t_unknown_section(void)
{
	assert_refused("[agent]\ndebug = on\n[hellp]\ncount = 3\n", 3,
		       "unknown section [hellp] (did you mean [hello]?)");
	/* no declared section near it: a module's leftover section (a removed,
	 * not purged module package's drop-in) warns and is ignored */
	assert_valid("[zzzzzzzzzz]\ncount = 3\n");
	/* a heading alone is enough */
	assert_refused("[agent]\n\n[agnet]\n", 3, "unknown section [agnet] (did you mean [agent]?)");
}

static void t_unknown_key(void)
{
	assert_refused("[agent]\nstat-dir = /x\n", 2,
		       "[agent] unknown key 'stat-dir' (did you mean 'state-dir'?)");
	assert_refused("[hello]\ncount = 2\ncompletely-different = 1\n", 3,
		       "[hello] unknown key 'completely-different'");
}

static void t_wrong_types(void)
{
	assert_refused("[agent]\nstart-timeout = 5x\n", 2,
		       "[agent] start-timeout: '5x' is not a duration (e.g. 250ms, 5s, 2m, 1h)");
	assert_refused("[agent]\nstart-timeout = 5\n", 2,
		       "[agent] start-timeout: '5' is not a duration (e.g. 250ms, 5s, 2m, 1h)");
	assert_refused("[hello]\ninterval = 99999999999999999h\n", 2,
		       "[hello] interval: '99999999999999999h' is too long a duration");
	assert_refused("[hello]\ncount = 12x\n", 2, "[hello] count: '12x' is not an integer");
	assert_refused("[hello]\ncount =\n", 2, "[hello] count: '' is not an integer");
	assert_refused("[hello]\noffset = 9223372036854775808\n", 2,
		       "[hello] offset: '9223372036854775808' does not fit in 64 bits");
	assert_refused("[agent]\ndebug = maybe\n", 2,
		       "[agent] debug: 'maybe' is not a boolean (true/false, yes/no, on/off, 1/0)");
	assert_refused("[agent]\nstate-dir = var/lib\n", 2,
		       "[agent] state-dir: 'var/lib' is not an absolute path");
	assert_refused("[hello]\ntags = a,,b\n", 2,
		       "[hello] tags: 'a,,b' is not a comma-separated list of words");
	assert_refused("[hello]\ntags = a b, c\n", 2,
		       "[hello] tags: 'a b, c' is not a comma-separated list of words");
}

static void t_out_of_range(void)
{
	assert_refused("[hello]\ncount = 500\n", 2, "[hello] count: 500 is out of range 1..100");
	assert_refused("[hello]\ncount = 0\n", 2, "[hello] count: 0 is out of range 1..100");
	assert_refused("[agent]\nstart-timeout = 2h\n", 2,
		       "[agent] start-timeout: 2h is out of range 1s..1h");
	assert_refused("[agent]\nstart-timeout = 999ms\n", 2,
		       "[agent] start-timeout: 999ms is out of range 1s..1h");
	assert_valid("[hello]\ncount = 100\n[agent]\nstart-timeout = 60m\n");
	/* min == max == 0: unbounded */
	assert_valid("[hello]\noffset = -5\ninterval = 1000h\n");
}

static void t_check_callback(void)
{
	assert_refused("[agent]\nlog-level = loud\n", 2,
		       "[agent] log-level: must be one of debug, info, warn, error");
	assert_refused("[hello]\nmood = bad\n", 2, "[hello] mood: 'bad' is not accepted");
	assert_valid("[agent]\nlog-level = warn\n[hello]\nmood = good\n");
}

static void t_duplicate_key(void)
{
	assert_refused("[agent]\nstate-dir = /a\nstate-dir = /b\n", 3,
		       "[agent] key 'state-dir' already set at line 2");
	assert_refused("[agent]\ndebug = on\n[hello]\ncount = 1\n[agent]\n\ndebug = off\n", 7,
		       "[agent] key 'debug' already set at line 2");
}

static void t_syntax_errors(void)
{
	assert_refused("[agent\n", 1, "syntax error");
	assert_refused("[agent]\ndebug = on\njust words\n", 3, "syntax error");
	assert_refused("[agent]\n= value\n", 2, "syntax error");
	assert_refused("debug = on\n[agent]\n", 1, "key 'debug' is outside any [section]");
	/* the first problem wins, whoever found it */
	assert_refused("[agent]\nbroken\ndebug = 1\ndebug = 0\n", 2, "syntax error");
	assert_refused("[agent]\ndebug = 1\ndebug = 0\nbroken\n", 3,
		       "[agent] key 'debug' already set at line 2");
}

static void t_overlong_lines(void)
{
	char content[1024];
	snprintf(content, sizeof(content), "[agent]\nlog-level = %0600d\n", 0);
	CU_ASSERT_EQUAL(load_and_validate(content), -1);
	char prefix[PATH_MAX + 64];
	snprintf(prefix, sizeof(prefix), "%s:2: line is longer than ", ini_path);
	CU_ASSERT_EQUAL(strncmp(err, prefix, strlen(prefix)), 0);

	char name[80];
	memset(name, 'x', 60);
	name[60] = '\0';
	snprintf(content, sizeof(content), "[%s]\n", name);
	assert_refused(content, 1, "section name is longer than 49 characters");
}

static void t_failed_load_keeps_nothing(void)
{
	CU_ASSERT_EQUAL(load_and_validate("[hello]\ncount = 7\n[agent]\ndebug = on\nbroken\n"), -1);
	assert_value("hello", "count", "3");
	assert_origin("hello", "count", "default");
	CU_ASSERT_FALSE(config_section_present("hello"));
	CU_ASSERT_EQUAL(config_validate_all(err), 0);
}

static void t_missing_file(void)
{
	declare_test_sections();
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/absent.ini", test_dir);
	CU_ASSERT_EQUAL(config_load_file(path, err), -1);
	char expected[PATH_MAX + 64];
	snprintf(expected, sizeof(expected), "%s: No such file or directory", path);
	assert_err_is(expected);

	CU_ASSERT_EQUAL(config_load_file(test_dir, err), -1);
	snprintf(expected, sizeof(expected), "%s: Is a directory", test_dir);
	assert_err_is(expected);
}

static void t_indent_comments_crlf(void)
{
	assert_valid("\xEF\xBB\xBF# leading comment\r\n"
		     "  [agent]\r\n"
		     "\tstate-dir = /x ; inline comment\r\n"
		     "    debug = true\r\n"
		     "  ; indented comment\n"
		     "[hello]\n"
		     "greeting: hi there\n");
	assert_value("agent", "state-dir", "/x");
	assert_value("agent", "debug", "true");
	assert_file_origin("agent", "debug", 4);
	assert_value("hello", "greeting", "hi there");
}

/* A later file overrides what an earlier one set (drop-ins rely on it). */
static void t_two_files(void)
{
	declare_test_sections();
	char first[PATH_MAX];
	snprintf(first, sizeof(first), "%s", write_ini("first.ini", "[agent]\ndebug = on\n"));
	CU_ASSERT_EQUAL(config_load_file(first, err), 0);
	CU_ASSERT_EQUAL(config_load_file(write_ini("second.ini", "[hello]\ncount = 4\n"), err), 0);
	assert_value("hello", "count", "4");
	assert_value("agent", "debug", "on");
	CU_ASSERT_EQUAL(config_load_file(write_ini("third.ini", "\n[agent]\ndebug = off\n"), err), 0);
	CU_ASSERT_EQUAL(config_validate_all(err), 0);
	assert_value("agent", "debug", "off");
	assert_file_origin("agent", "debug", 3);
}

/* ---- drop-in directories ----------------------------------------------------- */

static char dropin_dir[PATH_MAX + 8];
static char main_conf[PATH_MAX - 16];

/* test_dir/main.conf (NULL: none) and an empty test_dir/main.conf.d. */
static void dropin_setup(const char *main_content)
{
	snprintf(main_conf, sizeof(main_conf), "%s/main.conf", test_dir);
	snprintf(dropin_dir, sizeof(dropin_dir), "%s.d", main_conf);
	unlink(main_conf);
	if (main_content) {
		FILE *f = fopen(main_conf, "w");
		CU_ASSERT_PTR_NOT_NULL_FATAL(f);
		fputs(main_content, f);
		fclose(f);
	}
	mkdir(dropin_dir, 0755);
	declare_test_sections();
	err[0] = '\0';
}

/* Writes main.conf.d/name; leaves its path in ini_path. */
static void write_dropin(const char *name, const char *content)
{
	CU_ASSERT_FATAL(strlen(dropin_dir) + strlen(name) + 2 <= sizeof(ini_path));
	strcpy(ini_path, dropin_dir);
	strcat(ini_path, "/");
	strcat(ini_path, name);
	FILE *f = fopen(ini_path, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(content, f);
	fclose(f);
}

static void dropin_cleanup(void)
{
	config_reset();
	DIR *d = opendir(dropin_dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		char path[2 * PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", dropin_dir, de->d_name);
		if (de->d_name[0] != '.' || strlen(de->d_name) > 2)
			unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(dropin_dir);
	unlink(main_conf);
}

static void assert_origin_in(const char *section, const char *key, const char *name, int line)
{
	char expected[2 * PATH_MAX];
	snprintf(expected, sizeof(expected), "%s/%s:%d", dropin_dir, name, line);
	assert_origin(section, key, expected);
}

static void t_dropins_in_name_order(void)
{
	dropin_setup("[agent]\ndebug = on\nstate-dir = /main\nlog-level = warn\n");
	write_dropin("20-b.conf", "[hello]\ncount = 5\n[agent]\nstate-dir = /b\n");
	write_dropin("10-a.conf", "# comment\n[agent]\nstate-dir = /a\ndebug = off\n");
	/* not read: dpkg leftovers, hidden files, other names */
	write_dropin("30-c.conf.dpkg-dist", "[agent]\nstate-dir = /dpkg-dist\n");
	write_dropin("30-c.conf.dpkg-old", "[agent]\nstate-dir = /dpkg-old\n");
	write_dropin(".hidden.conf", "not ini at all\n");
	write_dropin("README", "not ini at all\n");
	CU_ASSERT_EQUAL(config_load_with_dropins(main_conf, true, err), 0);
	CU_ASSERT_EQUAL(config_validate_all(err), 0);
	assert_value("agent", "state-dir", "/b");
	assert_origin_in("agent", "state-dir", "20-b.conf", 4);
	assert_value("agent", "debug", "off");
	assert_origin_in("agent", "debug", "10-a.conf", 4);
	assert_value("hello", "count", "5");
	assert_origin_in("hello", "count", "20-b.conf", 2);
	assert_value("agent", "log-level", "warn");
	char expected[PATH_MAX + 8];
	snprintf(expected, sizeof(expected), "%s:4", main_conf);
	assert_origin("agent", "log-level", expected);
	/* --set still wins over every file */
	CU_ASSERT_EQUAL(config_set_override("agent.state-dir=/set", err), 0);
	assert_value("agent", "state-dir", "/set");
	assert_origin("agent", "state-dir", "--set");
	dropin_cleanup();
}

static void t_dropins_without_main_file(void)
{
	dropin_setup(NULL);
	write_dropin("50-x.conf", "[hello]\ngreeting = hi\n");
	/* the default path need not exist; its drop-ins are still read */
	CU_ASSERT_EQUAL(config_load_with_dropins(main_conf, false, err), 0);
	assert_value("hello", "greeting", "hi");
	/* an explicit --config that is missing is an error */
	declare_test_sections();
	CU_ASSERT_EQUAL(config_load_with_dropins(main_conf, true, err), -1);
	char expected[PATH_MAX + 64];
	snprintf(expected, sizeof(expected), "%s: No such file or directory", main_conf);
	assert_err_is(expected);
	dropin_cleanup();
	/* no drop-in directory at all is fine */
	dropin_setup("[hello]\ncount = 2\n");
	rmdir(dropin_dir);
	CU_ASSERT_EQUAL(config_load_with_dropins(main_conf, true, err), 0);
	assert_value("hello", "count", "2");
	dropin_cleanup();
}

static void t_dropin_errors_name_the_file(void)
{
	dropin_setup("[hello]\ncount = 2\n");
	write_dropin("10-ok.conf", "[hello]\ncount = 3\n");
	write_dropin("20-bad.conf", "[hello]\ngreeting = a\ngreeting = b\n");
	CU_ASSERT_EQUAL(config_load_with_dropins(main_conf, true, err), -1);
	assert_file_err(3, "[hello] key 'greeting' already set at line 2");
	dropin_cleanup();

	dropin_setup("[hello]\ncount = 2\n");
	write_dropin("10-syntax.conf", "[hello]\nthis is not a key value line\n");
	CU_ASSERT_EQUAL(config_load_with_dropins(main_conf, true, err), -1);
	assert_file_err(2, "syntax error");
	dropin_cleanup();

	dropin_setup("[hello]\ncount = 2\n");
	write_dropin("10-range.conf", "[hello]\n\ncount = 500\n");
	CU_ASSERT_EQUAL(config_load_with_dropins(main_conf, true, err), 0);
	CU_ASSERT_EQUAL(config_validate_all(err), -1);
	assert_file_err(3, "[hello] count: 500 is out of range 1..100");
	dropin_cleanup();

	dropin_setup("[hello]\ncount = 2\n");
	write_dropin("10-section.conf", "[helo]\ncount = 5\n");
	CU_ASSERT_EQUAL(config_load_with_dropins(main_conf, true, err), 0);
	CU_ASSERT_EQUAL(config_validate_all(err), -1);
	assert_file_err(1, "unknown section [helo] (did you mean [hello]?)");
	dropin_cleanup();
}

/* ---- --set ------------------------------------------------------------------ */

static void t_set_override_precedence(void)
{
	declare_test_sections();
	CU_ASSERT_EQUAL(config_load_file(write_ini("test.ini", "[hello]\ncount = 7\ngreeting = hi\n"),
					 err),
			0);
	CU_ASSERT_EQUAL(config_set_override("hello.count=9", err), 0);
	CU_ASSERT_EQUAL(config_set_override(" hello . count = 11 ", err), 0); /* last --set wins */
	CU_ASSERT_EQUAL(config_set_override("agent.state-dir=/opt/x=y", err), 0);
	CU_ASSERT_EQUAL(config_set_override("hello.tags=", err), 0);
	CU_ASSERT_EQUAL(config_validate_all(err), 0);
	assert_value("hello", "count", "11");
	assert_origin("hello", "count", "--set");
	assert_value("hello", "greeting", "hi");
	assert_file_origin("hello", "greeting", 3);
	assert_value("agent", "state-dir", "/opt/x=y");
	assert_value("hello", "tags", "");
	assert_value("hello", "interval", "5s");
	assert_origin("hello", "interval", "default");
}

static void t_set_errors(void)
{
	static const char *const malformed[] = {"foo", "foo=bar", ".x=1", "a.=1", "=1", "a.b", ""};
	declare_test_sections();
	for (size_t i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++) {
		char expected[128];
		snprintf(expected, sizeof(expected), "--set '%s': expected section.key=value",
			 malformed[i]);
		CU_ASSERT_EQUAL(config_set_override(malformed[i], err), -1);
		assert_err_is(expected);
	}
	CU_ASSERT_EQUAL(config_set_override(NULL, err), -1);
	assert_err_is("--set '': expected section.key=value");
	CU_ASSERT_EQUAL(config_set_override("a.b=x\ny", err), -1);
	assert_err_is("--set 'a.b=x\ny': the value must be a single line");
	CU_ASSERT_EQUAL(config_validate_all(err), 0); /* nothing was stored */

	CU_ASSERT_EQUAL(config_set_override("hello.count=500", err), 0);
	CU_ASSERT_EQUAL(config_validate_all(err), -1);
	assert_err_is("--set hello.count: [hello] count: 500 is out of range 1..100");

	declare_test_sections();
	CU_ASSERT_EQUAL(config_set_override("agent.stat-dir=/x", err), 0);
	CU_ASSERT_EQUAL(config_validate_all(err), -1);
	assert_err_is("--set agent.stat-dir: [agent] unknown key 'stat-dir' (did you mean 'state-dir'?)");

	declare_test_sections();
	CU_ASSERT_EQUAL(config_set_override("hellp.count=3", err), 0);
	CU_ASSERT_EQUAL(config_validate_all(err), -1);
	assert_err_is("--set hellp.count: unknown section [hellp] (did you mean [hello]?)");
}

static void t_file_errors_come_before_set_errors(void)
{
	declare_test_sections();
	CU_ASSERT_EQUAL(config_set_override("hello.count=x", err), 0);
	CU_ASSERT_EQUAL(config_load_file(write_ini("test.ini", "[agent]\ndebug = x\n"), err), 0);
	CU_ASSERT_EQUAL(config_validate_all(err), -1);
	assert_file_err(2, "[agent] debug: 'x' is not a boolean (true/false, yes/no, on/off, 1/0)");
}

/* ---- sections ----------------------------------------------------------------- */

static void t_validate_one_section(void)
{
	declare_test_sections();
	CU_ASSERT_EQUAL(config_load_file(write_ini("test.ini", "[agent]\ndebug = on\n"
							       "[later]\nx = 1\n"
							       "[hello]\ncount = x\n"),
					 err),
			0);
	CU_ASSERT_EQUAL(config_validate_section("agent", err), 0);
	CU_ASSERT_EQUAL(config_validate_section("hello", err), -1);
	assert_file_err(6, "[hello] count: 'x' is not an integer");
	CU_ASSERT_EQUAL(config_validate_section("later", err), -1);
	assert_err_is("[later] is not a declared config section");
	/* [later] is nobody's (a warning, ignored); [hello]'s error stands */
	CU_ASSERT_EQUAL(config_validate_all(err), -1);
	assert_file_err(6, "[hello] count: 'x' is not an integer");

	CU_ASSERT_EQUAL(config_set_override("agent.debug=perhaps", err), 0);
	CU_ASSERT_EQUAL(config_validate_section("agent", err), -1);
	assert_err_is("--set agent.debug: [agent] debug: 'perhaps' is not a boolean "
		      "(true/false, yes/no, on/off, 1/0)");
}

static void t_section_present(void)
{
	declare_test_sections();
	CU_ASSERT_EQUAL(config_load_file(write_ini("test.ini", "[agent]\n[other]\nx = 1\n"), err), 0);
	CU_ASSERT_EQUAL(config_set_override("providers.dns=coredns", err), 0);
	CU_ASSERT_TRUE(config_section_present("agent"));
	CU_ASSERT_TRUE(config_section_present("other"));
	CU_ASSERT_TRUE(config_section_present("providers"));
	CU_ASSERT_FALSE(config_section_present("hello"));
	CU_ASSERT_FALSE(config_section_present(NULL));
	/* values are readable before their section is declared */
	assert_value("other", "x", "1");
	assert_value("providers", "dns", "coredns");
}

static void t_dynamic_section(void)
{
	static const char *const capabilities[] = {"dns", "ipam", "dns"};
	declare_test_sections();
	CU_ASSERT_EQUAL(config_load_file(write_ini("test.ini", "[providers]\nipam = host-local\n"
							       "ipan = other\n"),
					 err),
			0);
	CU_ASSERT_EQUAL(config_validate_section("agent", err), 0);
	CU_ASSERT_EQUAL(config_declare_dynamic("providers", capabilities, 3, "module providing it"), 0);
	CU_ASSERT_EQUAL(config_declare_dynamic("providers", capabilities, 3, "again"), -EEXIST);
	CU_ASSERT_EQUAL(config_validate_all(err), -1);
	assert_file_err(3, "[providers] unknown key 'ipan' (did you mean 'ipam'?)");
	assert_value("providers", "ipam", "host-local");
	assert_value("providers", "dns", NULL);
	assert_origin("providers", "dns", "default");

	declare_test_sections();
	CU_ASSERT_EQUAL(config_declare_dynamic("providers", NULL, 0, NULL), 0);
	CU_ASSERT_EQUAL(config_set_override("providers.dns=x", err), 0);
	CU_ASSERT_EQUAL(config_validate_all(err), -1);
	assert_err_is("--set providers.dns: [providers] unknown key 'dns'");
}

static void t_declare_refusals(void)
{
	static const struct fibril_config_key duplicate[] = {
		{.name = "a", .type = FIBRIL_CONFIG_INT}, {.name = "a", .type = FIBRIL_CONFIG_BOOL}, {0}};
	static const struct fibril_config_key bad_type[] = {{.name = "a", .type = 0}, {0}};
	static const struct fibril_config_key empty_name[] = {{.name = "", .type = 1}, {0}};
	declare_test_sections();
	CU_ASSERT_EQUAL(config_declare("agent", hello_keys), -EEXIST);
	CU_ASSERT_EQUAL(config_declare("dup", duplicate), -EINVAL);
	CU_ASSERT_EQUAL(config_declare("bad", bad_type), -EINVAL);
	CU_ASSERT_EQUAL(config_declare("empty", empty_name), -EINVAL);
	CU_ASSERT_EQUAL(config_declare("", hello_keys), -EINVAL);
	CU_ASSERT_EQUAL(config_declare(NULL, hello_keys), -EINVAL);
	CU_ASSERT_EQUAL(config_declare("no-keys", NULL), 0);
	CU_ASSERT_EQUAL(config_load_file(write_ini("test.ini", "[no-keys]\ncount = 1\n"), err), 0);
	CU_ASSERT_EQUAL(config_validate_all(err), -1);
	assert_file_err(2, "[no-keys] unknown key 'count'");
}

/* ---- parse helpers -------------------------------------------------------- */

static void t_parse_helpers(void)
{
	bool b = false;
	int64_t v = 0;
	CU_ASSERT_EQUAL(config_parse_bool("ON", &b), 0);
	CU_ASSERT_TRUE(b);
	CU_ASSERT_EQUAL(config_parse_bool("No", &b), 0);
	CU_ASSERT_FALSE(b);
	CU_ASSERT_EQUAL(config_parse_bool("1", &b), 0);
	CU_ASSERT_TRUE(b);
	CU_ASSERT_EQUAL(config_parse_bool("0", &b), 0);
	CU_ASSERT_FALSE(b);
	CU_ASSERT_EQUAL(config_parse_bool("2", &b), -EINVAL);
	CU_ASSERT_EQUAL(config_parse_bool("", &b), -EINVAL);
	CU_ASSERT_EQUAL(config_parse_bool(NULL, &b), -EINVAL);

	CU_ASSERT_EQUAL(config_parse_int("-42", &v), 0);
	CU_ASSERT_EQUAL(v, -42);
	CU_ASSERT_EQUAL(config_parse_int("+7", &v), 0);
	CU_ASSERT_EQUAL(v, 7);
	CU_ASSERT_EQUAL(config_parse_int("9223372036854775807", &v), 0);
	CU_ASSERT_EQUAL(v, INT64_MAX);
	CU_ASSERT_EQUAL(config_parse_int("9223372036854775808", &v), -ERANGE);
	CU_ASSERT_EQUAL(config_parse_int("-9223372036854775809", &v), -ERANGE);
	CU_ASSERT_EQUAL(config_parse_int(" 1", &v), -EINVAL);
	CU_ASSERT_EQUAL(config_parse_int("1 ", &v), -EINVAL);
	CU_ASSERT_EQUAL(config_parse_int("0x10", &v), -EINVAL);
	CU_ASSERT_EQUAL(config_parse_int("-", &v), -EINVAL);
	CU_ASSERT_EQUAL(config_parse_int("", &v), -EINVAL);

	CU_ASSERT_EQUAL(config_parse_duration_ms("250ms", &v), 0);
	CU_ASSERT_EQUAL(v, 250);
	CU_ASSERT_EQUAL(config_parse_duration_ms("5s", &v), 0);
	CU_ASSERT_EQUAL(v, 5000);
	CU_ASSERT_EQUAL(config_parse_duration_ms("2m", &v), 0);
	CU_ASSERT_EQUAL(v, 120000);
	CU_ASSERT_EQUAL(config_parse_duration_ms("1h", &v), 0);
	CU_ASSERT_EQUAL(v, 3600000);
	CU_ASSERT_EQUAL(config_parse_duration_ms("0", &v), 0);
	CU_ASSERT_EQUAL(v, 0);
	CU_ASSERT_EQUAL(config_parse_duration_ms("0s", &v), 0);
	CU_ASSERT_EQUAL(config_parse_duration_ms("7", &v), -EINVAL);
	CU_ASSERT_EQUAL(config_parse_duration_ms("-1s", &v), -EINVAL);
	CU_ASSERT_EQUAL(config_parse_duration_ms("1.5s", &v), -EINVAL);
	CU_ASSERT_EQUAL(config_parse_duration_ms("5 s", &v), -EINVAL);
	CU_ASSERT_EQUAL(config_parse_duration_ms("1d", &v), -EINVAL);
	CU_ASSERT_EQUAL(config_parse_duration_ms("", &v), -EINVAL);
	CU_ASSERT_EQUAL(config_parse_duration_ms("9223372036854776s", &v), -ERANGE);
}

/* ---- --print-config ------------------------------------------------------------- */

static char *print_to_string(void)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	config_print(f);
	fclose(f);
	return text;
}

static void t_print_config_format(void)
{
	declare_test_sections();
	CU_ASSERT_EQUAL(config_load_file(write_ini("print.ini", "[hello]\n\ngreeting = hey\n"), err), 0);
	CU_ASSERT_EQUAL(config_set_override("hello.tags=x,y", err), 0);
	char *text = print_to_string();
	static const char head[] = "[agent]\n"
				   "# where the agent keeps its state (type: path, default: /var/lib/fibril, "
				   "from: default)\n"
				   "state-dir = /var/lib/fibril\n";
	CU_ASSERT_EQUAL(strncmp(text, head, strlen(head)), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "# how long a module may take to start "
					    "(type: duration, default: 30s, range: 1s..1h, from: default)\n"
					    "start-timeout = 30s\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "# TCP address of the API (type: string, from: default)\n"
					    "# api-tcp-listen =\n# extra checks"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "debug = false\n\n[hello]\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "# how many greetings (type: int, default: 3, "
					    "range: 1..100, from: default)\ncount = 3\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "# labels (type: list, from: --set)\ntags = x,y\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "# (type: bool, default: true, from: default)\nenabled = true\n"));
	char from_file[PATH_MAX + 96];
	snprintf(from_file, sizeof(from_file), "# what to say (type: string, default: hello, from: %s:3)\n"
		 "greeting = hey\n", ini_path);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, from_file));
	size_t len = strlen(text);
	CU_ASSERT(len > 2 && text[len - 1] == '\n' && text[len - 2] != '\n');
	free(text);
}

/* Every declared key's effective value, to compare after a round trip. */
static char **snapshot_values(void)
{
	char **values = xcalloc(16, sizeof(*values));
	size_t n = 0;
	for (const struct fibril_config_key *k = agent_keys; k->name; k++) {
		const char *v = config_value("agent", k->name);
		values[n++] = v ? xstrdup(v) : NULL;
	}
	for (const struct fibril_config_key *k = hello_keys; k->name; k++) {
		const char *v = config_value("hello", k->name);
		values[n++] = v ? xstrdup(v) : NULL;
	}
	return values;
}

static void assert_snapshot_unchanged(char **values)
{
	char **now = snapshot_values();
	for (size_t i = 0; i < 16; i++) {
		if (!values[i] || !now[i]) {
			CU_ASSERT_PTR_EQUAL(values[i], now[i]);
		} else {
			CU_ASSERT_STRING_EQUAL(values[i], now[i]);
		}
		free(values[i]);
		free(now[i]);
	}
	free(values);
	free(now);
}

static void t_print_config_parses_back(void)
{
	assert_valid("[agent]\nstart-timeout = 2m\nlog-level = warn\n"
		     "[hello]\ngreeting = hi ; there\ntags = a, b\noffset = -3\n");
	CU_ASSERT_EQUAL(config_set_override("agent.api-tcp-listen=127.0.0.1:9876", err), 0);
	CU_ASSERT_EQUAL(config_set_override("hello.mood=", err), 0);
	char **before = snapshot_values();

	char printed[PATH_MAX];
	snprintf(printed, sizeof(printed), "%s/printed.ini", test_dir);
	FILE *f = fopen(printed, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	config_print(f);
	fclose(f);

	declare_test_sections();
	CU_ASSERT_EQUAL(config_load_file(printed, err), 0);
	CU_ASSERT_EQUAL(config_validate_all(err), 0);
	assert_snapshot_unchanged(before);
	assert_value("hello", "mood", "");
	assert_value("agent", "api-tcp-listen", "127.0.0.1:9876");
}

/* ---- GET /v1/config ---------------------------------------------------------- */

static struct json_object *json_key(struct json_object *root, size_t section, size_t key)
{
	struct json_object *sections, *keys;
	CU_ASSERT_FATAL(json_object_object_get_ex(root, "sections", &sections));
	struct json_object *s = json_object_array_get_idx(sections, section);
	CU_ASSERT_FATAL(json_object_object_get_ex(s, "keys", &keys));
	return json_object_array_get_idx(keys, key);
}

static const char *json_field(struct json_object *obj, const char *name)
{
	struct json_object *field;
	CU_ASSERT_FATAL(json_object_object_get_ex(obj, name, &field));
	return field ? json_object_get_string(field) : NULL;
}

static void t_json_shape(void)
{
	assert_valid("[hello]\ncount = 5\n");
	CU_ASSERT_EQUAL(config_set_override("agent.debug=yes", err), 0);
	struct json_object *root = config_to_json();
	struct json_object *sections;
	CU_ASSERT_FATAL(json_object_object_get_ex(root, "sections", &sections));
	CU_ASSERT_EQUAL(json_object_array_length(sections), 2);
	struct json_object *agent = json_object_array_get_idx(sections, 0);
	CU_ASSERT_STRING_EQUAL(json_field(agent, "name"), "agent");

	struct json_object *state_dir = json_key(root, 0, 0);
	CU_ASSERT_STRING_EQUAL(json_field(state_dir, "name"), "state-dir");
	CU_ASSERT_STRING_EQUAL(json_field(state_dir, "type"), "path");
	CU_ASSERT_STRING_EQUAL(json_field(state_dir, "value"), "/var/lib/fibril");
	CU_ASSERT_STRING_EQUAL(json_field(state_dir, "default"), "/var/lib/fibril");
	CU_ASSERT_STRING_EQUAL(json_field(state_dir, "origin"), "default");
	CU_ASSERT_STRING_EQUAL(json_field(state_dir, "help"), "where the agent keeps its state");

	struct json_object *listen = json_key(root, 0, 3);
	CU_ASSERT_PTR_NULL(json_field(listen, "value"));
	CU_ASSERT_PTR_NULL(json_field(listen, "default"));
	CU_ASSERT_STRING_EQUAL(json_field(json_key(root, 0, 4), "origin"), "--set");
	CU_ASSERT_STRING_EQUAL(json_field(json_key(root, 0, 4), "type"), "bool");

	struct json_object *count = json_key(root, 1, 0);
	char origin[PATH_MAX + 16];
	snprintf(origin, sizeof(origin), "%s:2", ini_path);
	CU_ASSERT_STRING_EQUAL(json_field(count, "origin"), origin);
	CU_ASSERT_STRING_EQUAL(json_field(count, "value"), "5");
	CU_ASSERT_STRING_EQUAL(json_field(count, "type"), "int");
	CU_ASSERT_STRING_EQUAL(json_field(json_key(root, 1, 2), "type"), "list");
	CU_ASSERT_STRING_EQUAL(json_field(json_key(root, 1, 4), "type"), "duration");
	CU_ASSERT_STRING_EQUAL(json_field(json_key(root, 1, 1), "type"), "string");
	CU_ASSERT_PTR_NULL(json_field(json_key(root, 1, 3), "help"));
	json_object_put(root);
}

/* ---- SDK getters ---------------------------------------------------------------- */

static void t_getters(void)
{
	char name[] = "hello";
	struct fibril_module hello = {.name = name};
	assert_valid("[agent]\nstart-timeout = 2m\ndebug = on\n"
		     "[hello]\ncount = 12\nenabled = no\n");
	CU_ASSERT_EQUAL(config_set_override("hello.interval=250ms", err), 0);
	CU_ASSERT_EQUAL(fibril_config_int(&hello, "count"), 12);
	CU_ASSERT_FALSE(fibril_config_bool(&hello, "enabled"));
	CU_ASSERT_EQUAL(fibril_config_duration_ms(&hello, "interval"), 250);
	CU_ASSERT_STRING_EQUAL(fibril_config_string(&hello, "greeting"), "hello");
	CU_ASSERT_PTR_NULL(fibril_config_string(&hello, "tags"));
	CU_ASSERT_EQUAL(fibril_config_int(&hello, "offset"), 0);
	CU_ASSERT_EQUAL(fibril_config_int(&hello, "greeting"), 0); /* not a number */
	CU_ASSERT_FALSE(fibril_config_bool(&hello, "no-such-key"));
	CU_ASSERT_EQUAL(fibril_config_duration_ms(&hello, "no-such-key"), 0);
	/* NULL module: the [agent] section */
	CU_ASSERT_EQUAL(fibril_config_duration_ms(NULL, "start-timeout"), 120000);
	CU_ASSERT_TRUE(fibril_config_bool(NULL, "debug"));
	CU_ASSERT_STRING_EQUAL(fibril_config_get("agent", "state-dir"), "/var/lib/fibril");
	CU_ASSERT_STRING_EQUAL(fibril_config_get("hello", "count"), "12");
	CU_ASSERT_PTR_NULL(fibril_config_get("nowhere", "count"));
}

FIBRIL_TEST_MAIN("config", make_test_dir, remove_test_dir,
		 FIBRIL_TEST(t_valid_file_all_types),
		 FIBRIL_TEST(t_defaults_without_file),
		 FIBRIL_TEST(t_empty_lists_and_zero_durations),
		 FIBRIL_TEST(t_unknown_section),
		 FIBRIL_TEST(t_unknown_key),
		 FIBRIL_TEST(t_wrong_types),
		 FIBRIL_TEST(t_out_of_range),
		 FIBRIL_TEST(t_check_callback),
		 FIBRIL_TEST(t_duplicate_key),
		 FIBRIL_TEST(t_syntax_errors),
		 FIBRIL_TEST(t_overlong_lines),
		 FIBRIL_TEST(t_failed_load_keeps_nothing),
		 FIBRIL_TEST(t_missing_file),
		 FIBRIL_TEST(t_indent_comments_crlf),
		 FIBRIL_TEST(t_two_files),
		 FIBRIL_TEST(t_dropins_in_name_order),
		 FIBRIL_TEST(t_dropins_without_main_file),
		 FIBRIL_TEST(t_dropin_errors_name_the_file),
		 FIBRIL_TEST(t_set_override_precedence),
		 FIBRIL_TEST(t_set_errors),
		 FIBRIL_TEST(t_file_errors_come_before_set_errors),
		 FIBRIL_TEST(t_validate_one_section),
		 FIBRIL_TEST(t_section_present),
		 FIBRIL_TEST(t_dynamic_section),
		 FIBRIL_TEST(t_declare_refusals),
		 FIBRIL_TEST(t_parse_helpers),
		 FIBRIL_TEST(t_print_config_format),
		 FIBRIL_TEST(t_print_config_parses_back),
		 FIBRIL_TEST(t_json_shape),
		 FIBRIL_TEST(t_getters))
