/* cli/observe_type.c - the TYPE and VERDICT columns of `fibril observe`'s
 * compact, table and dict views, as Hubble's printer writes them
 * (hubble/pkg/printer: GetFlowType, getVerdict): a trace's observation
 * point ("to-endpoint", "to-stack"), a drop's reason in Cilium's words
 * ("Policy denied", "Invalid source ip"), a policy verdict as
 * "policy-verdict:<match type> <DIRECTION>" with ALLOWED / DENIED. Reads
 * the flat flow (the agent's, or one made from Hubble's JSON lines). */
#include "cli.h"

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

/* Cilium's texts of its drop reasons (pkg/monitor/api/drop.go), the
 * DropReason numbers of Hubble's flow.proto. */
static const struct {
	unsigned code;
	const char *text;
} drop_texts[] = {
	{0, "Success"}, {2, "Invalid packet"},
	{130, "Invalid source mac"}, {131, "Invalid destination mac"},
	{132, "Invalid source ip"}, {133, "Policy denied"}, {134, "Invalid packet"},
	{135, "CT: Truncated or invalid header"}, {136, "Fragmentation needed"},
	{137, "CT: Unknown L4 protocol"}, {138, "CT: Can't create entry from packet"},
	{139, "Unsupported L3 protocol"}, {140, "Missed tail call"},
	{141, "Error writing to packet"}, {142, "Unknown L4 protocol"},
	{143, "Unknown ICMPv4 code"}, {144, "Unknown ICMPv4 type"},
	{145, "Unknown ICMPv6 code"}, {146, "Unknown ICMPv6 type"},
	{147, "Error retrieving tunnel key"}, {148, "Error retrieving tunnel options"},
	{149, "Invalid Geneve option"}, {150, "Unknown L3 target address"},
	{151, "Stale or unroutable IP"}, {152, "No matching local container found"},
	{153, "Error while correcting L3 checksum"}, {154, "Error while correcting L4 checksum"},
	{155, "CT: Map insertion failed"}, {156, "Invalid IPv6 extension header"},
	{157, "IP fragmentation not supported"}, {158, "Service backend not found"},
	{160, "No tunnel/encapsulation endpoint (datapath BUG!)"}, {161, "NAT 46/64 not enabled"},
	{162, "Reached EDT rate-limiting drop horizon"}, {163, "Unknown connection tracking state"},
	{164, "Local host is unreachable"},
	{165, "No configuration available to perform policy decision"},
	{166, "Unsupported L2 protocol"}, {167, "No mapping for NAT masquerade"},
	{168, "Unsupported protocol for NAT masquerade"}, {169, "FIB lookup failed"},
	{170, "Encapsulation traffic is prohibited"}, {171, "Invalid identity"},
	{172, "Unknown sender"}, {173, "NAT not needed"}, {174, "Is a ClusterIP"},
	{175, "First logical datagram fragment not found"}, {176, "Forbidden ICMPv6 message"},
	{177, "Denied by LB src range check"}, {178, "Socket lookup failed"},
	{179, "Socket assign failed"}, {180, "Proxy redirection not supported for protocol"},
	{181, "Policy denied by denylist"}, {182, "VLAN traffic disallowed by VLAN filter"},
	{183, "Incorrect VNI from VTEP"}, {184, "Failed to update or lookup TC buffer"},
	{185, "No SID was found for the IP address"}, {186, "SRv6 state was removed during tail call"},
	{187, "L3 translation from IPv4 to IPv6 failed (NAT46)"},
	{188, "L3 translation from IPv6 to IPv4 failed (NAT64)"},
	{189, "Authentication required"}, {190, "No conntrack map found"},
	{191, "No nat map found"}, {192, "Invalid ClusterID"},
	{193, "Unsupported packet protocol for DSR encapsulation"}, {194, "No egress gateway found"},
	{195, "Traffic is unencrypted"}, {196, "TTL exceeded"}, {197, "No node ID found"},
	{198, "Rate limited"},
};

/* Cilium's PolicyMatchType names (pkg/monitor/api/types.go) */
static const char *match_type_name(double m)
{
	static const char *const names[] = {"none", "L3-Only", "L3-L4", "L4-Only", "all"};
	return m >= 0 && m < 5 ? names[(int)m] : "unknown";
}

char *observe_type_text(struct json_object *flow)
{
	const char *type = jstr(flow, "type");
	if (type && !strcmp(type, "drop")) {
		double code = 0;
		jnum(flow, "drop_reason", &code);
		for (size_t i = 0; i < sizeof(drop_texts) / sizeof(drop_texts[0]); i++)
			if (drop_texts[i].code == (unsigned)code)
				return xasprintf("%s", drop_texts[i].text);
		return xasprintf("%.0f", code); /* as Hubble: the number */
	}
	if (type && !strcmp(type, "policy-verdict")) {
		double match = 0;
		jnum(flow, "policy_match_type", &match);
		struct json_object *pol = jget(flow, "policy", json_type_object);
		const char *dir = pol && jstr(pol, "direction") ? jstr(pol, "direction")
								: jstr(flow, "traffic_direction");
		char up[16] = "UNKNOWN";
		if (dir && strlen(dir) < sizeof(up)) {
			size_t i = 0;
			for (; dir[i]; i++)
				up[i] = (char)(dir[i] >= 'a' && dir[i] <= 'z' ? dir[i] - 32 : dir[i]);
			up[i] = '\0';
		}
		return xasprintf("policy-verdict:%s %s", match_type_name(match), up);
	}
	/* a trace: where the packet went (Hubble's TraceObservationPoint, in
	 * Cilium's words: TO_STACK is "to-stack"); without one, the program
	 * that saw it */
	const char *point = jstr(flow, "trace_observation_point");
	const char *seen = jstr(flow, "observation_point");
	const char *dir = jstr(flow, "traffic_direction");
	char *out = xasprintf("%s", point ? point : seen ? seen
					 : !dir ? "?" : !strcmp(dir, "ingress") ? "to-endpoint" : "from-endpoint");
	for (char *c = out; *c; c++)
		*c = *c == '_' ? '-' : (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
	return out;
}

const char *observe_verdict_text(struct json_object *flow)
{
	const char *verdict = jstr(flow, "verdict") ? jstr(flow, "verdict") : "?";
	const char *type = jstr(flow, "type");
	if (!type || strcmp(type, "policy-verdict"))
		return verdict;
	if (!strcmp(verdict, "FORWARDED") || !strcmp(verdict, "REDIRECTED"))
		return "ALLOWED";
	if (!strcmp(verdict, "DROPPED") || !strcmp(verdict, "ERROR"))
		return "DENIED";
	if (!strcmp(verdict, "AUDIT"))
		return "AUDITED";
	return verdict;
}
