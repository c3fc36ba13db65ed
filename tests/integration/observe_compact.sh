#!/usr/bin/env bash
# tests/integration/observe_compact.sh - `fibril observe -o compact` prints
# Hubble's line: "TIME: SRC (ID) ARROW DST (ID) TYPE VERDICT (SUMMARY)" (ARROW
# "->", "<-" with the ends swapped for a reply, "<>" when the flow does not
# say whether it is a reply), reserved identities by name, with
# Hubble's TYPE column (hubble/pkg/printer GetFlowType): a trace's
# observation point (to-endpoint, to-stack), a drop's reason in Cilium's
# words (Policy denied, Policy denied by denylist, Invalid source ip), a
# policy verdict as "policy-verdict:<match type> <DIRECTION>" with ALLOWED
# or DENIED, and Hubble's "TCP Flags: SYN, ACK". The flows are Hubble's
# JSON lines (observe_compact.jsonl) replayed with --input-file; the
# expected lines (observe_compact.txt) are what Hubble's printer writes for
# them, worked out from its source (cilium/cilium hubble/pkg/printer/
# printer.go, pkg/monitor/api/drop.go and types.go). No agent, no root.
. "$top_srcdir/tests/lib/common.sh"

IN="$top_srcdir/tests/integration/observe_compact.jsonl"
WANT="$top_srcdir/tests/integration/observe_compact.txt"
# Hubble's default time layout (fibril's default is RFC 3339)
"$CLI" observe --input-file "$IN" --time-format StampMilli -o compact >"$WORK/got.txt" 2>"$WORK/err.txt" || true
n=0
while IFS= read -r want; do
	n=$((n + 1))
	got=$(sed -n "${n}p" "$WORK/got.txt")
	check "line $n is Hubble's: $want" test "$got" = "$want"
	[ "$got" = "$want" ] || echo "    got:  $got"
done <"$WANT"
check "nothing more, nothing on stderr" test "$(wc -l <"$WORK/got.txt")" = "$n" -a ! -s "$WORK/err.txt"
check "the default output is compact" test "$("$CLI" observe --input-file "$IN" --time-format StampMilli)" = "$(cat "$WORK/got.txt")"
check "-o dict: TYPE and VERDICT of the policy verdict as Hubble's" \
	grep -Fxq "       TYPE: policy-verdict:L3-L4 INGRESS" <<<"$("$CLI" observe --input-file "$IN" -o dict)"

finish
