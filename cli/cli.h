/* cli/cli.h - what the fibril CLI's files share: options (cli/fibril.c),
 * the output helpers, JSON accessors and the aligned-table printer
 * (cli/output.c), the request helpers that talk to the agent's socket
 * (cli/client.c). Each command lives in its own file (cli/cmd_*.c) and is
 * dispatched from run() in fibril.c. */
#ifndef FIBRIL_CLI_H
#define FIBRIL_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <json.h>

enum { EXIT_FAIL = 1, EXIT_USAGE = 2 };
/* cli/remote.c's options: their getopt values, how many, CA files at most */
enum { REMOTE_OPT_BASE = 3000, REMOTE_NOPTS = 6, REMOTE_MAX_CA = 8 };

struct cli_options {
	const char *socket;
	bool json; /* -o json */
	/* ipam options: --family, --ip, --owner (NULL when not given) */
	const char *family, *ip, *owner;
	const char *src, *dst, *dport; /* `fibril policy trace` */
	const char *file;              /* -f, --file: `fibril service apply` */
	bool all; /* `fibril ipcache list --all` */
	/* a remote agent (cli/remote.c; `fibril observe`): --server, --tls... */
	const char *server;
	bool tls;
	const char *tls_ca_files[REMOTE_MAX_CA];
	size_t n_tls_ca;
	const char *tls_cert, *tls_key, *tls_server_name;
};
extern struct cli_options opt;

/* "fibril: <message>" on stderr. */
void print_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the message and a pointer to `fibril help`; returns EXIT_USAGE. */
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *xrealloc(void *p, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Copies with control characters replaced (safe to print); clean_ndup
 * copies at most n bytes. */
char *clean_dup(const char *s);
char *clean_ndup(const char *s, size_t n);

/* An aligned text table: table_row takes exactly ncols strings (NULL: "-"). */
struct table {
	size_t ncols, nrows, cap;
	char **cells; /* row-major, owned */
};
void table_init(struct table *t, size_t ncols);
void table_row(struct table *t, ...);
void table_print(const struct table *t);
void table_free(struct table *t);

/* observe_type.c: a flat flow's TYPE column as Hubble's printer writes it
 * ("to-endpoint", "Policy denied", "policy-verdict:none INGRESS"; malloc'd)
 * and its VERDICT (ALLOWED / DENIED for a policy verdict). */
char *observe_type_text(struct json_object *flow);
const char *observe_verdict_text(struct json_object *flow);

/* JSON accessors: NULL / false when the key is missing or of another type. */
struct json_object *jget(struct json_object *o, const char *key, enum json_type type);
const char *jstr(struct json_object *o, const char *key);
bool jnum(struct json_object *o, const char *key, double *out);
const char *fmt_int(struct json_object *o, const char *key, char *buf, size_t len);
/* o[key] (Unix seconds) in RFC 3339 UTC, or "-". */
const char *fmt_time(struct json_object *o, const char *key, char *buf, size_t len);
const char *fmt_ms(struct json_object *o, const char *key, char *buf, size_t len);
/* A JSON array of strings joined with ","; malloc'd ("-" when empty). */
char *join_list(struct json_object *o, const char *key);
/* A policy rule as the agent names it (the "rule" of `policy trace`, the
 * "policy" of a flow): "CiliumNetworkPolicy ns/name ingressDeny[0]";
 * "rule N" when only its ID is known, NULL when o names none. malloc'd. */
char *policy_rule_text(struct json_object *o);
struct json_object *jarray_of_objects(struct json_object *o, const char *key);
void print_json(struct json_object *o);

/* One request to the agent: path is relative to /v1/ ("endpoint/12").
 * 0 with the parsed reply in *json (caller puts it), or -1 after printing
 * the error (agent unreachable, or its error reply and status). */
int request(const char *method, const char *path, struct json_object **json);
int get(const char *path, struct json_object **json);
/* The request whatever its status: 0 with the parsed reply in *json and the
 * HTTP status in *http_status, or -1 after printing why. */
int fetch(const char *method, const char *path, struct json_object **json, long *http_status);
/* fetch()/request() with a JSON request body. */
int fetch_body(const char *method, const char *path, const char *body, size_t body_len,
	       struct json_object **json, long *http_status);
int request_body(const char *method, const char *path, const char *body, size_t len,
		 struct json_object **json);
/* A file's (or stdin's, "-") whole text, at most max bytes; 0 or -1 after
 * printing "<what>: <why>". */
int read_input(const char *what, const char *path, size_t max, char **data, size_t *len);
/* "fibril: <error> (HTTP <code>)" from an error reply. */
void report_http_error(struct json_object *reply, long status);
/* Runs the request and hands the reply to render, or prints it with -o
 * json; returns the exit status. */
int show_request(const char *method, const char *path, int (*render)(struct json_object *));
int show(const char *path, int (*render)(struct json_object *));
/* s escaped for a URL path segment or query value; malloc'd. */
char *url_escape(const char *s);

/* A websocket stream of the agent (cli/ws.c): path_and_query is absolute
 * ("/v1/flows/stream?verdict=DROPPED"). Each text message goes to
 * on_message (non-zero stops). Returns 0 when the agent closed the stream,
 * 1 when on_message stopped it, -1 after printing why it failed. */
int ws_follow(const char *socket_path, const char *path_and_query,
	      int (*on_message)(const char *text, size_t len, void *ud), void *ud);
/* The same in two steps: the upgrade (the socket, or -1 after printing
 * why), then the messages until the close (ws_read closes fd; a read
 * timeout set on fd ends it like a close). ws_read reads in batches: a
 * 1 MiB buffer, and a pause of 2 ms after a read that emptied the socket,
 * so a busy stream costs a few hundred reads a second and the agent's
 * writes wake no reader (the first message after a quiet spell is read at
 * once; the pause adds at most 2 ms to the others). */
int ws_connect(const char *socket_path, const char *path_and_query);
int ws_read(int fd, const char *what, int (*on_message)(const char *text, size_t len, void *ud),
	    void *ud);

/* A stream's connection (cli/ws.c over cli/remote.c's transports): reads
 * and writes as read(2)/write(2); why, set on a remote agent's connection,
 * explains a failure of the transport itself in one line (a TLS refusal)
 * or returns NULL. */
struct ws_conn {
	int fd;
	void *tls; /* SSL * of cli/remote.c, NULL on a plain socket */
	ssize_t (*read)(struct ws_conn *c, void *buf, size_t len);
	ssize_t (*write)(struct ws_conn *c, const void *buf, size_t len);
	void (*close)(struct ws_conn *c);
	const char *(*why)(struct ws_conn *c);
};
/* The upgrade on c (Host: host): 0, or -1 after printing why. */
int ws_upgrade(struct ws_conn *c, const char *host, const char *path_and_query);
/* ws_read on c; closes it. */
int ws_read_conn(struct ws_conn *c, const char *what,
		 int (*on_message)(const char *text, size_t len, void *ud), void *ud);

/* cli/remote.c: Hubble's flags for a remote agent. remote_longopts() (vals
 * from REMOTE_OPT_BASE) go into a command's getopt table; remote_option
 * takes one (0, or EXIT_USAGE after the message; arg is split in place);
 * remote_check_options refuses what does not go together. With
 * opt.server set, client.c's requests go to it (remote_curl_setup: the
 * URL, NULL after printing why; remote_report_curl_error explains a
 * failed transfer) and remote_follow reads a stream from it. */
struct option;
const struct option *remote_longopts(void); /* REMOTE_NOPTS of them */
extern const char remote_usage[]; /* their lines of a command's help */
int remote_option(int c, char *arg);
int remote_check_options(void);
struct curl_slist;
char *remote_curl_setup(void *curl, const char *path, struct curl_slist **hdrs);
void remote_report_curl_error(int curl_code, const char *errbuf, long os_errno);
int remote_follow(const char *path_and_query, int (*on_message)(const char *text, size_t len, void *ud),
		  void *ud);

/* cli/help.c: one command's help (`fibril help CMD`, `fibril CMD --help`);
 * the module that serves an API path ("/v1/service/3", "service"), NULL
 * for the host's own; how to enable a module, for error messages. */
int print_command_help(const char *name);
const char *module_serving_path(const char *path);
const char *module_enable_hint(void);
/* cli/client.c: whether GET /v1/modules lists the module (true when the
 * agent cannot tell). */
bool module_is_loaded(const char *name);
/* The command at most two edits from word ("did you mean"), or NULL. */
const char *closest_command(const char *word);

/* Commands in their own files: argc/argv start after the group name. */
int cmd_endpoint(int argc, char **argv);  /* cli/cmd_endpoint.c */
int cmd_identity(int argc, char **argv);  /* cli/cmd_endpoint.c */
int cmd_k8s(int argc, char **argv);       /* cli/cmd_k8s.c */
int cmd_map(int argc, char **argv);       /* cli/cmd_map.c */
int cmd_ipam(int argc, char **argv);      /* cli/cmd_ipam.c */
int cmd_node(int argc, char **argv);      /* cli/cmd_node.c */
int cmd_ipcache(int argc, char **argv);   /* cli/cmd_ipcache.c */
int cmd_policy(int argc, char **argv);    /* cli/cmd_policy.c */
int cmd_service(int argc, char **argv);   /* cli/cmd_service.c */
int cmd_health(int argc, char **argv);    /* cli/cmd_health.c */
int cmd_version(void);                    /* cli/cmd_version.c */
int cmd_observe_main(int argc, char **argv, int cmd_index); /* cli/cmd_observe.c: all of argv */
/* Renderers of a reply that takes no arguments (run() calls show()). */
int render_status(struct json_object *st);     /* cli/cmd_status.c */
int render_modules(struct json_object *reply); /* cli/cmd_modules.c */
int render_config(struct json_object *reply);  /* cli/cmd_config.c */

#endif
