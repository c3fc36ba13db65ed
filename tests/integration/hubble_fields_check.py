# tests/integration/hubble_fields_check.py - every key of each JSON line on
# stdin (fibril observe -o json) is a field of Hubble's message at that
# place (tests/integration/hubble_flow_fields.txt), and enum values are
# Hubble's. Prints the first offence and exits 1; else the number of lines.
import json, sys

fields = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if line and not line.startswith("#"):
        msg, name = line.split()
        fields.setdefault(msg, set()).add(name)

# the message type of a field's value (messages only)
child = {("GetFlowsResponse", "flow"): "Flow", ("Flow", "IP"): "IP", ("Flow", "l4"): "Layer4",
         ("Flow", "source"): "Endpoint", ("Flow", "destination"): "Endpoint",
         ("Flow", "event_type"): "CiliumEventType", ("Flow", "source_service"): "Service",
         ("Flow", "destination_service"): "Service", ("Layer4", "TCP"): "TCP",
         ("Layer4", "UDP"): "UDP", ("Layer4", "SCTP"): "SCTP", ("Layer4", "ICMPv4"): "ICMPv4",
         ("Layer4", "ICMPv6"): "ICMPv6", ("TCP", "flags"): "TCPFlags",
         ("GetFlowsResponse", "lost_events"): "LostEvent"}
for d in ("egress_allowed_by", "ingress_allowed_by", "egress_denied_by", "ingress_denied_by"):
    child[("Flow", d)] = "Policy"
enums = {("Flow", "verdict"): {"VERDICT_UNKNOWN", "FORWARDED", "DROPPED", "ERROR", "AUDIT", "REDIRECTED", "TRACED", "TRANSLATED"},
         ("Flow", "Type"): {"UNKNOWN_TYPE", "L3_L4", "L7", "SOCK"},
         ("Flow", "traffic_direction"): {"TRAFFIC_DIRECTION_UNKNOWN", "INGRESS", "EGRESS"},
         ("IP", "ipVersion"): {"IP_NOT_USED", "IPv4", "IPv6"},
         ("LostEvent", "source"): {"UNKNOWN_LOST_EVENT_SOURCE", "PERF_EVENT_RING_BUFFER", "OBSERVER_EVENTS_QUEUE", "HUBBLE_RING_BUFFER"},
         ("Flow", "trace_observation_point"): {"UNKNOWN_POINT", "TO_PROXY", "TO_HOST", "TO_STACK", "TO_OVERLAY", "TO_ENDPOINT", "FROM_ENDPOINT", "FROM_PROXY", "FROM_HOST", "FROM_STACK", "FROM_OVERLAY", "FROM_NETWORK", "TO_NETWORK"}}

def walk(msg, obj, where):
    for k, v in obj.items():
        if k not in fields.get(msg, ()):
            sys.exit(f"{where}.{k}: not a field of Hubble's {msg}")
        e = enums.get((msg, k))
        if e and v not in e:
            sys.exit(f"{where}.{k}: {v!r} is not a value of Hubble's enum")
        if (msg, k) == ("LostEvent", "num_events_lost") and not (isinstance(v, str) and v.isdigit()):
            sys.exit(f"{where}.{k}: {v!r} is not protojson's uint64 (a string of digits)")
        sub = child.get((msg, k))
        if sub:
            for item in (v if isinstance(v, list) else [v]):
                if not isinstance(item, dict):
                    sys.exit(f"{where}.{k}: expected a {sub} object")
                walk(sub, item, f"{where}.{k}")

n = 0
for line in sys.stdin:
    if line.strip():
        walk("GetFlowsResponse", json.loads(line), "")
        n += 1
print(n)
