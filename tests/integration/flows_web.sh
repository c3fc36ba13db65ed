#!/usr/bin/env bash
# tests/integration/flows_web.sh - hubble-lite's web page in a real
# browser: Debian's headless Chromium driven by python3-selenium and
# chromium-driver (tests/integration/flows_web.py, which measures the drawn
# page with flows_web_layout.js), in the node namespace against the agent's
# TCP listener (127.0.0.1 there). The page loads from GET /flows (and its
# scripts /flows.js, /flowmap.js), goes live on /v1/flows/stream, shows the
# rows (event type apart from direction, times with their zone) and the
# service map's edges of traffic between pods a and b (UDP allowed and
# dropped by policy, TCP to a dead port). Fed a cluster's worth of flows,
# its map keeps its promises at 1400x900, 1280x800 and 1920x1080 and in each
# grouping: no boxes overlap, no edge runs through a box it does not
# connect or lies on another, nothing is clipped, no table cell is cut.
# Noise (ARP, link-local, multicast) is hidden by default and shown on
# request, a row opens the detail panel (labels, identity, policy rule,
# reason), pause holds flows back, an old flow makes it say "N s behind",
# lost_events are shown; the verdict filter narrows rows and edges, a bad
# filter's error is shown. Screenshots: $top_builddir/test-artifacts/
# flows_web/ (the log names the directory). The page is also served on
# the unix socket.
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
for js in flows.js flowmap.js; do
	SCRIPT=$(api -sS -D "$WORK/js.head" "http://x/$js")
	# (the SVG namespace is a name, not a fetch)
	check "GET /$js: a script (text/javascript, no external URL)" \
		test "$(grep -ci '^content-type: text/javascript' "$WORK/js.head")" = 1 -a -n "$SCRIPT" -a \
		"$(grep -Eo 'https?://[^"]*' <<<"$SCRIPT" | grep -cvx 'http://www.w3.org/2000/svg')" = 0
done

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
check "the browser test ran to its end (exit $rc)" test "$rc" = 0 ||
	{ grep -v '^#[0-9]' "$WORK/browser.err" | head -20 || true; }
echo "# screenshots in $(cd "$SHOTS" && pwd):"
ls "$SHOTS" | sed 's/^/#   /'
check "screenshots saved in $SHOTS (1400x900 and 1920x1080)" test -s "$SHOTS/1400x900-map.png" -a \
	-s "$SHOTS/1400x900-detail.png" -a -s "$SHOTS/1920x1080-map.png" -a -s "$SHOTS/2-dropped.png"
finish
