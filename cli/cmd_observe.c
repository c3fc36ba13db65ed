/* cli/cmd_observe.c - `fibril observe`: the flows hubble-lite keeps (GET
 * /v1/flows), with the filter flags `hubble observe` users know, printed as
 * compact lines (default), a table, Hubble's dict, Hubble's JSON lines
 * (-o json / jsonpb / -j: what `hubble observe -o json` prints, from the
 * agent's format=hubble) or fibril's own flat JSON lines (-o flat);
 * with -f/--follow, the flows as they come (the websocket stream
 * /v1/flows/stream with the same filters, cli/ws.c).
 * It takes its own options (the global getopt would refuse the filter
 * flags), so main() hands it the whole command line. */

#include <curl/curl.h>
#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json.h>

#include "cli.h"
#include "../modules/common/icmp_names.h"

enum observe_format { OUT_COMPACT, OUT_TABLE, OUT_JSON, OUT_DICT, OUT_FLAT };

/* How flows are printed and which the client itself picks (the filters
 * the agent does not hold: the node name, --first). */
static struct {
	bool print_node;        /* --print-node-name */
	const char *time_format; /* --time-format: Hubble's layout names */
	bool color;             /* --color always, or auto on a terminal */
	const char *node_glob;  /* --node-name PATTERN ("" any) */
	long first;             /* --first N: the first N matching flows, 0 all */
	long printed;
	const char *node;       /* the answer's node_name */
} view = {.time_format = "RFC3339Nano"};

static const char observe_usage[] =
	"Usage: fibril [--socket PATH] observe [FILTERS] [-o compact|table|dict|json|jsonpb|flat]\n"
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
	"  --protocol tcp|udp|icmp|icmpv6|sctp|N\n"
	"  --verdict FORWARDED|DROPPED|ERROR|AUDIT|REDIRECTED|TRACED|TRANSLATED\n"
	"  --drop-reason NAME, --drop-reason-desc NAME\n"
	"                               fibril's (policy-denied) or Hubble's (POLICY_DENIED)\n"
	"  -t, --type TYPE              drop, trace, trace:to-endpoint (...), policy-verdict,\n"
	"                               capture, l7, trace-sock, agent, debug\n"
	"  --traffic-direction ingress|egress, --tcp-flags SYN[,ACK]\n"
	"  --ip-version v4|v6|none, -4, --ipv4, -6, --ipv6\n"
	"  --node-name PATTERN          the node's name (wildcards: n*)\n"
	"  --not                        the next filter leaves out what it matches (all the\n"
	"                               --not filters together: a flow matching them all)\n"
	"  --since TIME, --until TIME   RFC 3339 UTC, 30s/5m/2h/1d ago, or Unix seconds\n"
	"  --last N                     the last N matching flows\n"
	"  --first N                    the first (oldest) N matching flows\n"
	"  --all                        every matching flow the agent keeps (the default)\n"
	"  -f, --follow                 keep printing new flows as they come (with\n"
	"                               --last N or --since: those first)\n"
	"  -o, --output FORMAT          compact (default), table, dict, json or jsonpb\n"
	"                               (Hubble's JSON lines), flat (fibril's JSON lines)\n"
	"  -j                           -o json\n"
	"  --print-node-name            the node's name on each flow\n"
	"  --time-format NAME           RFC3339Nano (default), RFC3339, RFC3339Milli,\n"
	"                               RFC3339Micro, StampMilli, RFC1123Z\n"
	"  --color auto|always|never    colour the verdict (auto: on a terminal)\n"
	"  --input-file FILE            print the flows of FILE (Hubble's JSON lines, as\n"
	"                               -o json writes them; - for stdin), not the agent's\n";

/* Query keys, in the order of the long options below (index = val - 1000). */
static const char *const keys[] = {
	"pod", "from-pod", "to-pod", "namespace", "from-namespace", "to-namespace",
	"label", "from-label", "to-label", "ip", "from-ip", "to-ip",
	"identity", "from-identity", "to-identity", "port", "from-port", "to-port",
	"protocol", "verdict", "drop-reason", "type", "since", "until", "last",
	"service", "from-service", "to-service", "traffic-direction", "ip-version", "tcp-flags",
	"drop-reason-desc",
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
	struct json_object *arp = jget(flow, "arp", json_type_object);
	if (!addr && arp) /* ARP: the sender's and the target's addresses */
		addr = jstr(arp, !strcmp(side, "source") ? "sender" : "target");
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
	/* as Hubble: the security identity, reserved ones by name (Cilium's
	 * reservedIdentityNames, numbered as <fibril/endpoint.h>) */
	(void)id;
	static const char *const reserved[] = {"unknown",	 "host",	   "world",
					       "unmanaged",	 "health",	   "init",
					       "remote-node",	 "kube-apiserver", "ingress",
					       "world-ipv4",	 "world-ipv6"};
	size_t nreserved = sizeof(reserved) / sizeof(reserved[0]);
	char *out = identity >= 0 && identity < (double)nreserved
			    ? xasprintf("%s%s (%s)", who, portbuf, reserved[(size_t)identity])
			    : xasprintf("%s%s (ID:%.0f)", who, portbuf, identity);
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

/* Hubble's "ICMPv4 EchoRequest"; an unnamed type keeps its numbers. */
static char *icmp_summary(const char *proto, double type, double code)
{
	bool v4 = proto && !strcmp(proto, "ICMPv4");
	const char *name = type >= 0 && type <= 255 ? icmp_type_name(v4 ? 1 : 58, (uint8_t)type) : NULL;
	return name ? xasprintf("%s %s", proto ? proto : "ICMP", name)
		    : xasprintf("%s type %.0f code %.0f", proto ? proto : "?", type, code);
}

static char *summary_text(struct json_object *flow)
{
	struct json_object *l4 = jget(flow, "l4", json_type_object);
	const char *proto = l4 ? jstr(l4, "protocol") : NULL;
	const char *flags = l4 ? jstr(l4, "flags") : NULL;
	double itype = 0, icode = 0;
	bool icmp = l4 && jnum(l4, "type", &itype);
	if (icmp)
		jnum(l4, "code", &icode);
	char spaced[96] = ""; /* Hubble's "SYN, ACK" of the agent's "SYN,ACK" */
	for (size_t i = 0, o = 0; flags && flags[i] && o + 3 < sizeof(spaced); i++) {
		spaced[o++] = flags[i];
		if (flags[i] == ',')
			spaced[o++] = ' ';
		spaced[o] = '\0';
	}
	char *s = flags && *flags ? xasprintf("%s Flags: %s", proto ? proto : "?", spaced)
		  : icmp ? icmp_summary(proto, itype, icode)
		  : xasprintf("%s", proto ? proto : jget(flow, "arp", json_type_object) ? "ARP" : "L3");
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

/* "2026-11-25T07:40:01.123456789Z" in the --time-format layout (Go's
 * layouts by name, as hubble observe takes them). */
static char *time_text(const char *rfc3339)
{
	if (!strcmp(view.time_format, "RFC3339Nano"))
		return clean_dup(rfc3339);
	struct tm tm = {0};
	const char *rest = strptime(rfc3339, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!rest)
		return clean_dup(rfc3339);
	unsigned long frac = 0;
	int digits = 0;
	if (*rest == '.')
		for (rest++; *rest >= '0' && *rest <= '9'; rest++, digits++)
			frac = frac * 10 + (unsigned long)(*rest - '0');
	while (digits < 9) {
		frac *= 10;
		digits++;
	}
	char base[64];
	const char *tf = view.time_format;
	if (!strcmp(tf, "StampMilli")) {
		strftime(base, sizeof(base), "%b %e %H:%M:%S", &tm);
		return xasprintf("%s.%03lu", base, frac / 1000000);
	}
	if (!strcmp(tf, "RFC1123Z")) {
		strftime(base, sizeof(base), "%a, %d %b %Y %H:%M:%S +0000", &tm);
		return xasprintf("%s", base);
	}
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	if (!strcmp(tf, "RFC3339Milli"))
		return xasprintf("%s.%03luZ", base, frac / 1000000);
	if (!strcmp(tf, "RFC3339Micro"))
		return xasprintf("%s.%06luZ", base, frac / 1000);
	return xasprintf("%sZ", base); /* RFC3339 */
}

static bool node_wanted(const char *node)
{
	return !view.node_glob || fnmatch(view.node_glob, node ? node : "", 0) == 0;
}

/* --first N reached: print no more */
static bool first_done(void)
{
	return view.first && view.printed >= view.first;
}

/* Whether a flow is a reply, as Hubble's is_reply: 1 yes, 0 no, -1 the
 * flow does not say. Hubble's JSON carries it; fibril's own flows know it
 * for a connection's first packet only (a policy verdict, a drop by
 * policy), as hubble-lite's Hubble JSON says (flow_hubble.c). */
static int flow_is_reply(struct json_object *f)
{
	struct json_object *is_reply = jget(f, "is_reply", json_type_boolean);
	if (is_reply)
		return json_object_get_boolean(is_reply) ? 1 : 0;
	const char *type = jstr(f, "type");
	if (type && !strcmp(type, "policy-verdict"))
		return 0;
	struct json_object *policy = jget(f, "policy", json_type_object);
	const char *verdict = jstr(f, "verdict");
	if (type && !strcmp(type, "drop") && policy && jstr(policy, "match") &&
	    (!verdict || !strcmp(verdict, "dropped") || !strcmp(verdict, "DROPPED")))
		return 0;
	return -1;
}

static void render_flow(struct json_object *f, enum observe_format fmt, struct table *t)
{
	const char *node = jstr(f, "node_name") ? jstr(f, "node_name") : view.node;
	if (!node_wanted(node) || first_done())
		return;
	view.printed++;
	if (fmt == OUT_JSON || fmt == OUT_FLAT) {
		puts(json_object_to_json_string_ext(f, JSON_C_TO_STRING_PLAIN |
						       JSON_C_TO_STRING_NOSLASHESCAPE));
		return;
	}
	char *src = endpoint_text(f, "source", "source", "source_port");
	char *dst = endpoint_text(f, "destination", "destination", "destination_port");
	int reply = flow_is_reply(f);
	const char *arrow = reply < 0 ? "<>" : reply ? "<-" : "->";
	char *left = reply > 0 ? dst : src, *right = reply > 0 ? src : dst;
	char *sum = summary_text(f);
	/* Hubble's TYPE (where a trace went, a drop's reason, a policy
	 * verdict's match) and VERDICT columns */
	char *type = observe_type_text(f);
	const char *verdict = observe_verdict_text(f);
	char *tm = time_text(jstr(f, "time") ? jstr(f, "time") : "?");
	char *nodecol = clean_dup(node ? node : "");
	const char *vcol = !view.color ? "" : !strcmp(verdict, "DROPPED") || !strcmp(verdict, "DENIED")
				  ? "\033[31m" : "\033[32m";
	const char *vend = view.color ? "\033[0m" : "";
	if (fmt == OUT_TABLE && t) {
		if (view.print_node)
			table_row(t, tm, nodecol, src, dst, type, verdict, sum);
		else
			table_row(t, tm, src, dst, type, verdict, sum);
	} else if (fmt == OUT_TABLE) {
		printf("%-*s ", follow_widths[0], tm);
		if (view.print_node)
			printf("%-*s ", follow_widths[0], nodecol);
		printf("%-*s %-*s %-*s %-*s %s\n", follow_widths[1], src,
		       follow_widths[2], dst, follow_widths[3], type, follow_widths[4], verdict, sum);
	} else if (fmt == OUT_DICT) {
		if (view.printed > 1)
			puts("------------");
		printf("  TIMESTAMP: %s\n", tm);
		if (view.print_node)
			printf("       NODE: %s\n", nodecol);
		printf("     SOURCE: %s\nDESTINATION: %s\n       TYPE: %s\n    VERDICT: %s%s%s\n"
		       "    SUMMARY: %s\n", src, dst, type, vcol, verdict, vend, sum);
	} else if (view.print_node) {
		printf("%s [%s]: %s %s %s %s %s%s%s (%s)\n", tm, nodecol, left, arrow, right, type,
		       vcol, verdict, vend, sum);
	} else {
		printf("%s: %s %s %s %s %s%s%s (%s)\n", tm, left, arrow, right, type, vcol, verdict,
		       vend, sum);
	}
	free(nodecol);
	free(tm);
	free(src);
	free(dst);
	free(sum);
	free(type);
}

static int render_flows(struct json_object *reply, enum observe_format fmt)
{
	struct json_object *flows = jarray_of_objects(reply, "flows");
	if (!flows)
		return EXIT_FAIL;
	size_t n = json_object_array_length(flows);
	view.node = jstr(reply, "node_name");
	struct table t;
	if (fmt == OUT_TABLE && view.print_node) {
		table_init(&t, 7);
		table_row(&t, "TIMESTAMP", "NODE", "SOURCE", "DESTINATION", "TYPE", "VERDICT", "SUMMARY");
	} else if (fmt == OUT_TABLE) {
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
	if (fmt != OUT_JSON && fmt != OUT_FLAT && jnum(reply, "lost", &lost) && lost > 0)
		fprintf(stderr, "fibril: %.0f event(s) lost before they became flows\n", lost);
	double sampled = 0;
	if (fmt != OUT_JSON && fmt != OUT_FLAT && jnum(reply, "sampled", &sampled) && sampled > 0)
		fprintf(stderr, "fibril: %.0f drop(s) have no flow: over the datapath's event rate limit "
				"([datapath] drop-events-rate)\n", sampled);
	return 0;
}

/* num_events_lost: a number (the flat stream) or protojson's uint64 string (Hubble's) */
static bool lost_count(struct json_object *lost, double *n)
{
	const char *text = jstr(lost, "num_events_lost");
	if (!text)
		return jnum(lost, "num_events_lost", n);
	if (!*text || strspn(text, "0123456789") != strlen(text))
		return false;
	*n = strtod(text, NULL);
	return true;
}

/* Hubble's LostEventSource for the flat stream's own names */
static const char *lost_source_hubble(const char *src)
{
	return !src ? "UNKNOWN_LOST_EVENT_SOURCE"
	       : !strcmp(src, "SLOW_READER") ? "OBSERVER_EVENTS_QUEUE"
	       : !strcmp(src, "EVENT_RATE_LIMIT") || !strcmp(src, "DATAPATH_RING") ||
			 !strcmp(src, "DATAPATH")
		       ? "PERF_EVENT_RING_BUFFER"
		       : src;
}

/* A lost_events line as hubble observe prints it in each view, then what
 * it means on stderr. */
static void print_lost(struct json_object *lost, double n, struct json_object *line,
		       enum observe_format fmt)
{
	const char *src = jstr(lost, "source");
	const char *hsrc = lost_source_hubble(src);
	double cpu = 0;
	jnum(lost, "cpu", &cpu);
	if (fmt == OUT_JSON || fmt == OUT_FLAT) {
		puts(json_object_to_json_string_ext(line, JSON_C_TO_STRING_PLAIN |
							  JSON_C_TO_STRING_NOSLASHESCAPE));
	} else if (fmt == OUT_COMPACT) {
		printf("EVENTS LOST: %s CPU(%.0f) %.0f\n", hsrc, cpu, n);
	} else if (fmt == OUT_DICT) {
		if (++view.printed > 1)
			puts("------------");
		printf("  TIMESTAMP: \n");
		if (view.print_node)
			printf("       NODE: \n");
		printf("     SOURCE: %s\n       TYPE: EVENTS LOST\n    VERDICT: \n"
		       "    SUMMARY: CPU(%.0f) - %.0f\n", hsrc, cpu, n);
		view.printed--; /* not a flow: --first counts flows */
	} else {
		printf("%-*s ", follow_widths[0], "");
		if (view.print_node)
			printf("%-*s ", follow_widths[0], "");
		printf("%-*s %-*s %-*s %-*s CPU(%.0f) - %.0f\n", follow_widths[1], hsrc,
		       follow_widths[2], "", follow_widths[3], "EVENTS LOST", follow_widths[4], "",
		       cpu, n);
	}
	fprintf(stderr, "fibril: %.0f flow(s) lost (%s)\n", n,
		!src ? "?"
		: !strcmp(src, "SLOW_READER") || !strcmp(src, "OBSERVER_EVENTS_QUEUE")
			? "this reader was too slow"
		: !strcmp(src, "EVENT_RATE_LIMIT") ? "drops over the datapath's event rate limit"
		: !strcmp(src, "DATAPATH_RING") ? "the datapath's event ring was full"
		: !strcmp(src, "PERF_EVENT_RING_BUFFER")
			? "drops over the datapath's event rate limit, or its events found no room"
			: "the datapath's events were lost");
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
		} else if (lost && lost_count(lost, &nlost)) {
			print_lost(lost, nlost, o, st->fmt);
		} else {
			render_flow(o, st->fmt, NULL);
		}
		json_object_put(o);
		p = nl ? nl + 1 : end;
	}
	if (first_done()) {
		fflush(stdout);
		return 1; /* --first N: enough */
	}
	fflush(stdout);
	return ferror(stdout) ? (st->status = EXIT_FAIL, 1) : 0;
}

static int follow(const char *query, enum observe_format fmt)
{
	struct follow_state st = {.fmt = fmt, .status = 0};
	char *path = xasprintf("/v1/flows/stream%s%s", query ? "?" : "", query ? query : "");
	if (fmt == OUT_TABLE) {
		printf("%-*s ", follow_widths[0], "TIMESTAMP");
		if (view.print_node)
			printf("%-*s ", follow_widths[0], "NODE");
		printf("%-*s %-*s %-*s %-*s %s\n", follow_widths[1], "SOURCE", follow_widths[2],
		       "DESTINATION", follow_widths[3], "TYPE", follow_widths[4], "VERDICT", "SUMMARY");
	}
	int rc = opt.server ? remote_follow(path, follow_message, &st)
			    : ws_follow(opt.socket, path, follow_message, &st);
	free(path);
	if (rc < 0)
		return EXIT_FAIL;
	if (rc == 0 && !st.status && !first_done()) {
		print_error("the agent closed the flow stream");
		return EXIT_FAIL;
	}
	return st.status;
}

/* A flow of Hubble's JSON (a GetFlowsResponse, or a bare Flow) as the
 * flat flow the compact, table and dict views print. */
static struct json_object *flat_of_hubble(struct json_object *line)
{
	struct json_object *f = jget(line, "flow", json_type_object);
	if (!f)
		f = line;
	struct json_object *o = json_object_new_object();
	static const char *const copy[] = {"time",	     "verdict",		    "IP",
					   "source",	     "destination",	    "source_service",
					   "destination_service", "is_reply",	    NULL};
	for (int i = 0; copy[i]; i++) {
		struct json_object *v;
		if (json_object_object_get_ex(f, copy[i], &v))
			json_object_object_add(o, copy[i], json_object_get(v));
	}
	const char *node = jstr(line, "node_name") ? jstr(line, "node_name") : jstr(f, "node_name");
	if (node)
		json_object_object_add(o, "node_name", json_object_new_string(node));
	const char *reason = jstr(f, "drop_reason_desc");
	if (reason)
		json_object_object_add(o, "drop_reason_desc", json_object_new_string(reason));
	/* what the TYPE column reads (observe_type.c): the monitor message
	 * type (drop 1, trace 4, policy verdict 5), a drop's reason number */
	struct json_object *et = jget(f, "event_type", json_type_object);
	double etype = 4, num;
	if (et)
		jnum(et, "type", &etype);
	json_object_object_add(o, "type", json_object_new_string(etype == 1 ? "drop"
								: etype == 5 ? "policy-verdict" : "trace"));
	if (jnum(f, "drop_reason", &num) || (etype == 1 && et && jnum(et, "sub_type", &num)))
		json_object_object_add(o, "drop_reason", json_object_new_int((int)num));
	if (jnum(f, "policy_match_type", &num))
		json_object_object_add(o, "policy_match_type", json_object_new_int((int)num));
	const char *point = jstr(f, "trace_observation_point");
	const char *dir = jstr(f, "traffic_direction");
	if (dir)
		json_object_object_add(o, "traffic_direction",
				       json_object_new_string(!strcmp(dir, "INGRESS") ? "ingress" : "egress"));
	char pt[32];
	snprintf(pt, sizeof(pt), "%s", point ? point : dir && !strcmp(dir, "INGRESS") ? "TO_ENDPOINT"
							       : "FROM_ENDPOINT");
	for (char *c = pt; *c; c++)
		*c = *c == '_' ? '-' : (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
	json_object_object_add(o, "observation_point", json_object_new_string(pt));
	struct json_object *l4 = jget(f, "l4", json_type_object), *fl = json_object_new_object();
	static const char *const protos[] = {"TCP", "UDP", "SCTP", "ICMPv4", "ICMPv6", NULL};
	for (int i = 0; l4 && protos[i]; i++) {
		struct json_object *p = jget(l4, protos[i], json_type_object);
		if (!p)
			continue;
		json_object_object_add(fl, "protocol", json_object_new_string(protos[i]));
		double port;
		if (jnum(p, "source_port", &port))
			json_object_object_add(fl, "source_port", json_object_new_int((int)port));
		if (jnum(p, "destination_port", &port))
			json_object_object_add(fl, "destination_port", json_object_new_int((int)port));
		double tc;
		if (!strncmp(protos[i], "ICMP", 4)) { /* protojson leaves type 0 out */
			json_object_object_add(fl, "type", json_object_new_int(jnum(p, "type", &tc) ? (int)tc : 0));
			json_object_object_add(fl, "code", json_object_new_int(jnum(p, "code", &tc) ? (int)tc : 0));
		}
		struct json_object *flags = jget(p, "flags", json_type_object);
		char text[64] = "";
		json_object_object_foreach(flags ? flags : fl, k, v)
		{
			if (flags && json_object_get_boolean(v) && strlen(text) + strlen(k) + 2 < sizeof(text))
				snprintf(text + strlen(text), sizeof(text) - strlen(text), "%s%s",
					 text[0] ? "," : "", k);
		}
		if (flags)
			json_object_object_add(fl, "flags", json_object_new_string(text));
	}
	json_object_object_add(o, "l4", fl);
	return o;
}

/* --input-file: Hubble's JSON lines of a file (or stdin) instead of the
 * agent's flows. */
static int replay(const char *path, enum observe_format fmt)
{
	FILE *in = strcmp(path, "-") ? fopen(path, "r") : stdin;
	if (!in) {
		print_error("observe: cannot open --input-file '%s': %s", path, strerror(errno));
		return EXIT_FAIL;
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	long lineno = 0;
	int rc = 0;
	struct table t;
	if (fmt == OUT_TABLE) {
		table_init(&t, view.print_node ? 7 : 6);
		if (view.print_node)
			table_row(&t, "TIMESTAMP", "NODE", "SOURCE", "DESTINATION", "TYPE", "VERDICT", "SUMMARY");
		else
			table_row(&t, "TIMESTAMP", "SOURCE", "DESTINATION", "TYPE", "VERDICT", "SUMMARY");
	}
	while ((n = getline(&line, &cap, in)) > 0 && !first_done()) {
		lineno++;
		if (n == 1 && line[0] == '\n')
			continue;
		struct json_object *o = json_tokener_parse(line);
		if (!o || !json_object_is_type(o, json_type_object)) {
			print_error("observe: %s line %ld is not a JSON object", path, lineno);
			json_object_put(o);
			rc = EXIT_FAIL;
			break;
		}
		if (!jget(o, "flow", json_type_object) && !jstr(o, "verdict")) {
			json_object_put(o); /* not a flow: lost events, node status */
			continue;
		}
		if (fmt == OUT_JSON || fmt == OUT_FLAT) {
			render_flow(o, fmt, NULL);
		} else {
			struct json_object *flat = flat_of_hubble(o);
			render_flow(flat, fmt, fmt == OUT_TABLE ? &t : NULL);
			json_object_put(flat);
		}
		json_object_put(o);
	}
	if (fmt == OUT_TABLE) {
		table_print(&t);
		table_free(&t);
	}
	if (ferror(in)) {
		print_error("observe: reading --input-file '%s': %s", path, strerror(errno));
		rc = EXIT_FAIL;
	}
	free(line);
	if (in != stdin)
		fclose(in);
	return rc;
}

enum { OPT_FIRST = 2000, OPT_ALL, OPT_NODE_NAME, OPT_PRINT_NODE, OPT_TIME_FORMAT, OPT_COLOR,
       OPT_INPUT_FILE, OPT_NOT };

int cmd_observe_main(int argc, char **argv, int cmd_index)
{
	static const struct option extra[] = {
		{"output", required_argument, NULL, 'o'},
		{"socket", required_argument, NULL, 's'},
		{"help", no_argument, NULL, 'h'},
		{"follow", no_argument, NULL, 'f'},
		{"first", required_argument, NULL, OPT_FIRST},
		{"all", no_argument, NULL, OPT_ALL},
		{"node-name", required_argument, NULL, OPT_NODE_NAME},
		{"print-node-name", no_argument, NULL, OPT_PRINT_NODE},
		{"time-format", required_argument, NULL, OPT_TIME_FORMAT},
		{"color", required_argument, NULL, OPT_COLOR},
		{"input-file", required_argument, NULL, OPT_INPUT_FILE},
		{"not", no_argument, NULL, OPT_NOT},
		{"ipv4", no_argument, NULL, '4'},
		{"ipv6", no_argument, NULL, '6'},
	};
	enum { NEXTRA = sizeof(extra) / sizeof(extra[0]) };
	struct option longopts[NKEYS + NEXTRA + REMOTE_NOPTS + 1];
	for (size_t i = 0; i < NKEYS; i++)
		longopts[i] = (struct option){keys[i], required_argument, NULL, (int)(1000 + i)};
	for (size_t i = 0; i < NEXTRA; i++)
		longopts[NKEYS + i] = extra[i];
	for (size_t i = 0; i < REMOTE_NOPTS; i++) /* --server, --tls... */
		longopts[NKEYS + NEXTRA + i] = remote_longopts()[i];
	longopts[NKEYS + NEXTRA + REMOTE_NOPTS] = (struct option){NULL, 0, NULL, 0};
	const char *env = getenv("FIBRIL_SOCKET");
	opt.socket = env && *env ? env : "/run/fibril/fibril.sock";
	enum observe_format fmt = OUT_COMPACT;
	bool follow_mode = false, has_last = false, has_query = false, all = false;
	bool negate = false; /* --not: the next filter leaves its flows out */
	const char *input_file = NULL, *color = "auto";
	char *query = NULL;
	int c;
	/* drop the word "observe" itself: options may come before or after it */
	for (int i = cmd_index; i < argc - 1; i++)
		argv[i] = argv[i + 1];
	argc--;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":s:o:n:l:t:hfj46", longopts, NULL)) != -1) {
		const char *key = NULL;
		if (c >= 1000 && c < 1000 + (int)NKEYS)
			key = keys[c - 1000];
		else if (c == 'n')
			key = "namespace";
		else if (c == 'l')
			key = "label";
		else if (c == 't')
			key = "type";
		else if (c == '4' || c == '6')
			key = "ip-version";
		if (key) {
			const char *value = c == '4' ? "v4" : c == '6' ? "v6" : optarg;
			if (!strcmp(key, "drop-reason-desc"))
				key = "drop-reason"; /* the agent takes Hubble's names there */
			has_last |= !strcmp(key, "last");
			has_query = true;
			if (negate) {
				if (!strcmp(key, "since") || !strcmp(key, "until") || !strcmp(key, "last")) {
					free(query);
					return usage_error("observe: --not goes before a filter, not --%s", key);
				}
				char *nk = xasprintf("not-%s", key);
				query = append_query(query, nk, value);
				free(nk);
				negate = false;
				continue;
			}
			query = append_query(query, key, value);
			continue;
		}
		if (c >= REMOTE_OPT_BASE && c < REMOTE_OPT_BASE + REMOTE_NOPTS) {
			if (remote_option(c, optarg) == 0)
				continue;
			return free(query), EXIT_USAGE;
		}
		if (negate && c != OPT_NOT) {
			free(query);
			return usage_error("observe: --not goes before a filter flag (--from-ip 10.0.0.1, ...)");
		}
		char *end = NULL;
		switch (c) {
		case 's':
			opt.socket = optarg;
			break;
		case 'j':
			fmt = OUT_JSON;
			break;
		case 'o':
			if (!strcmp(optarg, "compact"))
				fmt = OUT_COMPACT;
			else if (!strcmp(optarg, "table") || !strcmp(optarg, "tab"))
				fmt = OUT_TABLE;
			else if (!strcmp(optarg, "dict"))
				fmt = OUT_DICT;
			else if (!strcmp(optarg, "json") || !strcmp(optarg, "jsonpb"))
				fmt = OUT_JSON;
			else if (!strcmp(optarg, "flat"))
				fmt = OUT_FLAT;
			else {
				free(query);
				return usage_error("observe: unknown output format '%s' (expected compact, table, dict, json, jsonpb or flat)", optarg);
			}
			break;
		case 'f':
			follow_mode = true;
			break;
		case OPT_FIRST:
			view.first = strtol(optarg, &end, 10);
			if (!*optarg || *end || view.first < 1 || view.first > (1L << 24)) {
				free(query);
				return usage_error("observe: --first expects a count from 1 to %ld, not '%s'", 1L << 24, optarg);
			}
			break;
		case OPT_ALL:
			all = true; /* every flow the agent keeps: the default */
			break;
		case OPT_NODE_NAME:
			view.node_glob = optarg;
			break;
		case OPT_PRINT_NODE:
			view.print_node = true;
			break;
		case OPT_TIME_FORMAT: {
			static const char *const layouts[] = {"StampMilli", "RFC3339", "RFC3339Milli",
							      "RFC3339Micro", "RFC3339Nano", "RFC1123Z", NULL};
			int i = 0;
			while (layouts[i] && strcmp(layouts[i], optarg))
				i++;
			if (!layouts[i]) {
				free(query);
				return usage_error("observe: --time-format '%s' is not StampMilli, RFC3339, RFC3339Milli, RFC3339Micro, RFC3339Nano or RFC1123Z", optarg);
			}
			view.time_format = layouts[i];
			break;
		}
		case OPT_COLOR:
			if (strcmp(optarg, "auto") && strcmp(optarg, "always") && strcmp(optarg, "never")) {
				free(query);
				return usage_error("observe: --color expects auto, always or never, not '%s'", optarg);
			}
			color = optarg;
			break;
		case OPT_INPUT_FILE:
			input_file = optarg;
			break;
		case OPT_NOT:
			negate = true;
			break;
		case 'h':
			fputs(observe_usage, stdout);
			fputs(remote_usage, stdout);
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
	if (negate) {
		free(query);
		return usage_error("observe: trailing --not (it goes before a filter flag)");
	}
	view.color = !strcmp(color, "always") || (!strcmp(color, "auto") && isatty(STDOUT_FILENO));
	if (fmt == OUT_TABLE)
		view.color = false; /* as Hubble: the table is never coloured */
	if (view.first && (follow_mode || has_last || all)) {
		free(query);
		return usage_error("observe: --first goes with neither --last, --all nor --follow");
	}
	if (all && has_last) {
		free(query);
		return usage_error("observe: --all and --last exclude each other");
	}
	if (input_file) {
		free(query);
		if (has_query || follow_mode)
			return usage_error("observe: with --input-file only --first, --node-name and the output flags apply");
		return replay(input_file, fmt);
	}
	if (remote_check_options())
		return free(query), EXIT_USAGE;
	if (fmt == OUT_JSON)
		query = append_query(query, "format", "hubble");
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
