#!/usr/bin/env bash
# tests/integration/flows_web.sh - hubble-lite's web page in a real
# browser: Debian's headless Chromium driven by python3-selenium and
# chromium-driver (tests/integration/flows_web.py), in the node namespace
# against the agent's TCP listener (127.0.0.1 there). The page loads from
# GET /flows, goes live on /v1/flows/stream, shows the rows and the service
# map's edges of traffic between pods a and b (UDP allowed and dropped by
# policy, TCP to a dead port), narrows both to the dropped flows when the
# verdict filter is applied, and shows a bad filter's error. Screenshots are
# kept in $top_builddir/test-artifacts/flows_web/. The page is also served
# on the unix socket.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/cni/lib.sh"
. "$top_srcdir/tests/lib/flowpods.sh"

for f in /usr/bin/chromium /usr/bin/chromedriver; do
	[ -x "$f" ] || skip_or_fail "$f is not installed (scripts/deps.sh: chromium, chromium-driver)"
done
/usr/bin/python3 -c 'import selenium' 2>/dev/null || skip_or_fail "python3-selenium is not installed"

flowpods_start --set datapath.policy-verdict-events=false # the edge counts below: packets, not verdicts
SHOTS=$top_builddir/test-artifacts/flows_web
rm -rf "$SHOTS"
mkdir -p "$SHOTS"

PAGE=$(api -sS -D "$WORK/page.head" http://x/flows)
check "GET /flows on the unix socket: the page (text/html, no external asset)" \
	test "$(grep -ci '^content-type: text/html' "$WORK/page.head")" = 1 -a \
	"$(grep -c '<title>fibril flows</title>' <<<"$PAGE")" = 1 -a \
	"$(grep -Ec '(src|href)="(https?:)?//' <<<"$PAGE")" = 0

# the browser and its driver in the node namespace, where the listener is
ip netns exec "$NODE_NS" /usr/bin/python3 "$top_srcdir/tests/integration/flows_web.py" \
	"http://127.0.0.1:$TCP_PORT/flows" "$WORK/browser.ready" "$SHOTS" "$WORK/chromium-profile" \
	>"$WORK/browser.out" 2>"$WORK/browser.err" &
BROWSER=$!
BG+=($BROWSER)
wait_alive "$BROWSER" 60 test -e "$WORK/browser.ready" || true
check "the browser opened the page and its stream" test -e "$WORK/browser.ready"
udp b a 7000 5
udp b a 7001 3
check "a -> b TCP 82 is refused (nobody listens)" test "$(tcp_dead a b 82)" = refused
rc=0
wait "$BROWSER" || rc=$?
while read -r line; do
	case $line in
	PASS:*) pass "browser: ${line#PASS: }" ;;
	FAIL:*) fail "browser: ${line#FAIL: }" ;;
	esac
done <"$WORK/browser.out"
check "the browser test ran to its end (exit $rc)" test "$rc" = 0
[ "$rc" = 0 ] || grep -v '^#[0-9]' "$WORK/browser.err" | head -20
check "screenshots saved in $SHOTS" test -s "$SHOTS/1-all-flows.png" -a -s "$SHOTS/2-dropped.png"
finish
