/* cli/cmd_observe.c - `fibril observe`: the flows hubble-lite keeps (GET
 * /v1/flows), with the filter flags `hubble observe` users know, printed as
 * compact lines (default), a table, or JSON lines (-o compact|table|json);
 * with -f/--follow, the flows as they come (the websocket stream
 * /v1/flows/stream with the same filters, cli/ws.c).
 * It takes its own options (the global getopt would refuse the filter
 * flags), so main() hands it the whole command line. */

#include <curl/curl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include "cli.h"

enum observe_format { OUT_COMPACT, OUT_TABLE, OUT_JSON };

static const char observe_usage[] =
	"Usage: fibril [--socket PATH] observe [FILTERS] [-o compact|table|json]\n"
	"\n"
	"The flows the agent's hubble-lite module keeps, oldest first. Filters of\n"
	"different flags are ANDed; a flag given twice matches either value.\n"
	"\n"
	"  --pod [NS/]POD, --from-pod, --to-pod\n"
	"  -n, --namespace NS, --from-namespace, --to-namespace\n"
	"  -l, --label KEY[=VALUE], --from-label, --to-label\n"
	"  --ip ADDR|CIDR, --from-ip, --to-ip\n"
	"  --identity N, --from-identity, --to-identity\n"
	"  --port N, --from-port, --to-port\n"
	"  --service [NS/]NAME, --from-service, --to-service\n"
	"                               the service a flow's end is a frontend or\n"
	"                               backend of (the lb module's services)\n"
	"  --protocol tcp|udp|icmp|icmpv6|N\n"
	"  --verdict FORWARDED|DROPPED, --drop-reason NAME, -t, --type drop|trace|policy-verdict\n"
	"  --since TIME, --until TIME   RFC 3339 UTC, 30s/5m/2h/1d ago, or Unix seconds\n"
	"  --last N                     the last N matching flows\n"
	"  -f, --follow                 keep printing new flows as they come (with\n"
	"                               --last N or --since: those first)\n"
	"  -o, --output FORMAT          compact (default), table or json (JSON lines)\n";

/* Query keys, in the order of the long options below (index = val - 1000). */
static const char *const keys[] = {
	"pod", "from-pod", "to-pod", "namespace", "from-namespace", "to-namespace",
	"label", "from-label", "to-label", "ip", "from-ip", "to-ip",
	"identity", "from-identity", "to-identity", "port", "from-port", "to-port",
	"protocol", "verdict", "drop-reason", "type", "since", "until", "last",
	"service", "from-service", "to-service",
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static char *append_query(char *q, const char *key, const char *value)
{
	char *v = url_escape(value);
	char *n = xasprintf("%s%s%s=%s", q ? q : "", q ? "&" : "", key, v);
	free(v);
	free(q);
	return n;
}

/* "ns/pod:port (ID:n)" or "ip:port (identity)", then " (service ns/name)"
 * when the end is a frontend or backend of a service */
static char *endpoint_text(struct json_object *flow, const char *side, const char *ipkey,
			   const char *portkey)
{
	struct json_object *p = jget(flow, side, json_type_object);
	struct json_object *ip = jget(flow, "IP", json_type_object);
	struct json_object *l4 = jget(flow, "l4", json_type_object);
	const char *pod = p ? jstr(p, "pod_name") : NULL;
	const char *addr = ip ? jstr(ip, ipkey) : NULL;
	double port = 0, id = 0, identity = 0;
	bool has_port = l4 && jnum(l4, portkey, &port);
	if (p) {
		jnum(p, "ID", &id);
		jnum(p, "identity", &identity);
	}
	char portbuf[16] = "";
	if (has_port)
		snprintf(portbuf, sizeof(portbuf), ":%.0f", port);
	char *who = pod ? xasprintf("%s/%s", jstr(p, "namespace") ? jstr(p, "namespace") : "", pod)
			: xasprintf("%s", addr ? addr : "?");
	char *out = id > 0 ? xasprintf("%s%s (ID:%.0f)", who, portbuf, id)
			   : xasprintf("%s%s (identity:%.0f)", who, portbuf, identity);
	free(who);
	struct json_object *svc = jget(flow, !strcmp(side, "source") ? "source_service"
								    : "destination_service",
				       json_type_object);
	const char *sname = svc ? jstr(svc, "name") : NULL;
	if (sname) {
		const char *sns = jstr(svc, "namespace");
		char *with = xasprintf("%s (service %s%s%s)", out, sns && *sns ? sns : "",
				       sns && *sns ? "/" : "", sname);
		free(out);
		out = with;
	}
	return out;
}

static char *summary_text(struct json_object *flow)
{
	struct json_object *l4 = jget(flow, "l4", json_type_object);
	const char *proto = l4 ? jstr(l4, "protocol") : NULL;
	const char *flags = l4 ? jstr(l4, "flags") : NULL;
	const char *reason = jstr(flow, "drop_reason_desc");
	char *s = flags && *flags ? xasprintf("%s Flags: %s", proto ? proto : "?", flags)
				  : xasprintf("%s", proto ? proto : "L3");
	if (reason) {
		char *t = xasprintf("%s, reason: %s", s, reason);
		free(s);
		s = t;
	}
	struct json_object *pol = jget(flow, "policy", json_type_object);
	const char *match = pol ? jstr(pol, "match") : NULL;
	if (match) {
		char *rule = policy_rule_text(pol);
		const char *dir = jstr(pol, "direction") ? jstr(pol, "direction") : "?";
		char *t = !strcmp(match, "default-deny")
				  ? xasprintf("%s, policy: default deny (%s: no rule allows it)", s, dir)
				  : xasprintf("%s, policy: %s (%s) by %s", s, match, dir, rule ? rule : "an unknown rule");
		free(rule);
		free(s);
		s = t;
	}
	return s;
}

/* Widths of the table's columns in follow mode (rows come one by one). */
static const int follow_widths[] = {31, 31, 31, 14, 10};

static void render_flow(struct json_object *f, enum observe_format fmt, struct table *t)
{
	if (fmt == OUT_JSON) {
		puts(json_object_to_json_string_ext(f, JSON_C_TO_STRING_PLAIN |
						       JSON_C_TO_STRING_NOSLASHESCAPE));
		return;
	}
	char *src = endpoint_text(f, "source", "source", "source_port");
	char *dst = endpoint_text(f, "destination", "destination", "destination_port");
	char *sum = summary_text(f);
	const char *dir = jstr(f, "traffic_direction");
	const char *type = !dir ? "?" : !strcmp(dir, "ingress") ? "to-endpoint" : "from-endpoint";
	const char *verdict = jstr(f, "verdict") ? jstr(f, "verdict") : "?";
	char *tm = clean_dup(jstr(f, "time") ? jstr(f, "time") : "?");
	if (fmt == OUT_TABLE && t)
		table_row(t, tm, src, dst, type, verdict, sum);
	else if (fmt == OUT_TABLE)
		printf("%-*s %-*s %-*s %-*s %-*s %s\n", follow_widths[0], tm, follow_widths[1], src,
		       follow_widths[2], dst, follow_widths[3], type, follow_widths[4], verdict, sum);
	else
		printf("%s: %s -> %s %s %s (%s)\n", tm, src, dst, type, verdict, sum);
	free(tm);
	free(src);
	free(dst);
	free(sum);
}

static int render_flows(struct json_object *reply, enum observe_format fmt)
{
	struct json_object *flows = jarray_of_objects(reply, "flows");
	if (!flows)
		return EXIT_FAIL;
	size_t n = json_object_array_length(flows);
	struct table t;
	if (fmt == OUT_TABLE) {
		table_init(&t, 6);
		table_row(&t, "TIMESTAMP", "SOURCE", "DESTINATION", "TYPE", "VERDICT", "SUMMARY");
	}
	for (size_t i = 0; i < n; i++)
		render_flow(json_object_array_get_idx(flows, i), fmt, fmt == OUT_TABLE ? &t : NULL);
	if (fmt == OUT_TABLE) {
		table_print(&t);
		table_free(&t);
	}
	double lost = 0;
	if (fmt != OUT_JSON && jnum(reply, "lost", &lost) && lost > 0)
		fprintf(stderr, "fibril: %.0f event(s) lost before they became flows\n", lost);
	return 0;
}

struct follow_state {
	enum observe_format fmt;
	int status; /* exit status once the stream ends */
};

/* One websocket message: one or more JSON lines (flows, lost notices, or
 * the agent's refusal of the filter). */
static int follow_message(const char *text, size_t len, void *ud)
{
	struct follow_state *st = ud;
	const char *p = text, *end = text + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		struct json_tokener *tok = json_tokener_new();
		struct json_object *o = json_tokener_parse_ex(tok, p, (int)n);
		json_tokener_free(tok);
		struct json_object *lost = o ? jget(o, "lost_events", json_type_object) : NULL;
		double nlost = 0;
		if (!o || !json_object_is_type(o, json_type_object)) {
			print_error("the flow stream sent a line that is not a JSON object");
		} else if (jstr(o, "error")) {
			print_error("%s", jstr(o, "error"));
			st->status = EXIT_FAIL;
			json_object_put(o);
			return 1;
		} else if (lost && jnum(lost, "num_events_lost", &nlost)) {
			const char *src = jstr(lost, "source");
			if (st->fmt == OUT_JSON)
				render_flow(o, st->fmt, NULL);
			fprintf(stderr, "fibril: %.0f flow(s) lost (%s)\n", nlost,
				src && !strcmp(src, "SLOW_READER") ? "this reader was too slow" :
								     "the datapath's events were lost");
		} else {
			render_flow(o, st->fmt, NULL);
		}
		json_object_put(o);
		p = nl ? nl + 1 : end;
	}
	fflush(stdout);
	return ferror(stdout) ? (st->status = EXIT_FAIL, 1) : 0;
}

static int follow(const char *query, enum observe_format fmt)
{
	struct follow_state st = {.fmt = fmt, .status = 0};
	char *path = xasprintf("/v1/flows/stream%s%s", query ? "?" : "", query ? query : "");
	if (fmt == OUT_TABLE)
		printf("%-*s %-*s %-*s %-*s %-*s %s\n", follow_widths[0], "TIMESTAMP", follow_widths[1],
		       "SOURCE", follow_widths[2], "DESTINATION", follow_widths[3], "TYPE",
		       follow_widths[4], "VERDICT", "SUMMARY");
	int rc = ws_follow(opt.socket, path, follow_message, &st);
	free(path);
	if (rc < 0)
		return EXIT_FAIL;
	if (rc == 0 && !st.status) {
		print_error("the agent closed the flow stream");
		return EXIT_FAIL;
	}
	return st.status;
}

int cmd_observe_main(int argc, char **argv, int cmd_index)
{
	struct option longopts[NKEYS + 5];
	for (size_t i = 0; i < NKEYS; i++)
		longopts[i] = (struct option){keys[i], required_argument, NULL, (int)(1000 + i)};
	longopts[NKEYS] = (struct option){"output", required_argument, NULL, 'o'};
	longopts[NKEYS + 1] = (struct option){"socket", required_argument, NULL, 's'};
	longopts[NKEYS + 2] = (struct option){"help", no_argument, NULL, 'h'};
	longopts[NKEYS + 3] = (struct option){"follow", no_argument, NULL, 'f'};
	longopts[NKEYS + 4] = (struct option){NULL, 0, NULL, 0};
	const char *env = getenv("FIBRIL_SOCKET");
	opt.socket = env && *env ? env : "/run/fibril/fibril.sock";
	enum observe_format fmt = OUT_COMPACT;
	bool follow_mode = false;
	char *query = NULL;
	int c;
	/* drop the word "observe" itself: options may come before or after it */
	for (int i = cmd_index; i < argc - 1; i++)
		argv[i] = argv[i + 1];
	argc--;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":s:o:n:l:t:hf", longopts, NULL)) != -1) {
		const char *key = NULL;
		if (c >= 1000 && c < 1000 + (int)NKEYS)
			key = keys[c - 1000];
		else if (c == 'n')
			key = "namespace";
		else if (c == 'l')
			key = "label";
		else if (c == 't')
			key = "type";
		if (key) {
			query = append_query(query, key, optarg);
			continue;
		}
		switch (c) {
		case 's':
			opt.socket = optarg;
			break;
		case 'o':
			if (!strcmp(optarg, "compact"))
				fmt = OUT_COMPACT;
			else if (!strcmp(optarg, "table"))
				fmt = OUT_TABLE;
			else if (!strcmp(optarg, "json") || !strcmp(optarg, "jsonpb"))
				fmt = OUT_JSON;
			else {
				free(query);
				return usage_error("observe: unknown output format '%s' (expected compact, table or json)", optarg);
			}
			break;
		case 'f':
			follow_mode = true;
			break;
		case 'h':
			fputs(observe_usage, stdout);
			free(query);
			return 0;
		case ':':
			free(query);
			return usage_error("observe: option '%s' needs an argument", argv[optind - 1]);
		default:
			free(query);
			if (optopt)
				return usage_error("observe: unknown option '-%c'", optopt);
			return usage_error("observe: unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc) {
		free(query);
		return usage_error("observe: unexpected argument '%s'", argv[optind]);
	}
	if (curl_global_init(CURL_GLOBAL_NOTHING) != CURLE_OK) {
		free(query);
		print_error("cannot initialise libcurl");
		return EXIT_FAIL;
	}
	if (follow_mode) {
		int rc = follow(query, fmt);
		free(query);
		curl_global_cleanup();
		return rc;
	}
	char *path = xasprintf("flows%s%s", query ? "?" : "", query ? query : "");
	free(query);
	struct json_object *reply = NULL;
	int rc = get(path, &reply) ? EXIT_FAIL : render_flows(reply, fmt);
	json_object_put(reply);
	free(path);
	curl_global_cleanup();
	if (fflush(stdout) != 0 || ferror(stdout))
		return EXIT_FAIL;
	return rc;
}
