#!/bin/bash
# tests/integration/cli.sh - the fibril CLI against a real fibril-agent
# running the sample "hello" module: every command in table and JSON output,
# table alignment, and the error paths (agent not running, HTTP errors, usage
# errors). Run by `make check` (needs top_builddir and top_srcdir); prints
# "PASS: ..." per check and exits 1 if any failed, 77 (skip) when not root.
set -euo pipefail

: "${top_builddir:?run from make check}" "${top_srcdir:?run from make check}"
FIBRIL=$top_builddir/fibril
AGENT=$top_builddir/fibril-agent
HELLO_SO=$top_builddir/.libs/hello.so
. "$top_srcdir/tests/lib/wait.sh"

if [[ $(id -u) != 0 ]]; then
	echo "SKIP: the agent only loads root-owned modules; run as root"
	[[ ${CI:-} == true ]] && { echo "FAIL: CI runs as root; not skipping"; exit 1; }
	exit 77
fi
if [[ ! -f $HELLO_SO ]]; then
	echo "SKIP: $HELLO_SO not built (configured without the hello module?)"
	[[ ${CI:-} == true ]] && { echo "FAIL: CI builds every module; not skipping"; exit 1; }
	exit 77
fi
for f in "$FIBRIL" "$AGENT"; do
	[[ -x $f ]] || { echo "FAIL: $f is not built"; exit 1; }
done

tmp=$(mktemp -d)
moddir=$(mktemp -d)
chmod 0755 "$moddir"
install -m 0644 "$HELLO_SO" "$moddir/hello.so"
mkdir "$tmp/run" "$tmp/state"
SOCK=$tmp/run/fibril.sock
BPFFS=/sys/fs/bpf/fibril-cli-test-$$
OUT=$tmp/out
ERR=$tmp/err
agent_pid=

cleanup() {
	local rc=$?
	if [[ -n $agent_pid ]] && kill -0 "$agent_pid" 2>/dev/null; then
		kill -TERM "$agent_pid" 2>/dev/null || true
		wait_gone "$agent_pid" 5 || true
		kill -KILL "$agent_pid" 2>/dev/null || true
		wait "$agent_pid" 2>/dev/null || true
	fi
	if ((rc != 0)) && [[ -f $tmp/agent.log ]]; then
		echo "--- agent log:"
		sed 's/^/  /' "$tmp/agent.log"
	fi
	rm -rf "$tmp" "$moddir"
	[[ -e $BPFFS ]] && rm -rf "$BPFFS"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- helpers -----------------------------------------------------------------

passed=0 failed=0 last=

# run ARGS...: runs fibril ARGS, output in $OUT/$ERR, exit status in $rc.
run() {
	last="fibril $*"
	rc=0
	"$FIBRIL" "$@" >"$OUT" 2>"$ERR" || rc=$?
}

# check WHAT CONDITION: evaluates the shell CONDITION (about the last run).
check() {
	if eval "$2"; then
		echo "PASS: $1"
		passed=$((passed + 1))
	else
		echo "FAIL: $1"
		echo "  condition: $2"
		echo "  command:   $last (exit $rc)"
		sed 's/^/  stdout: /' "$OUT"
		sed 's/^/  stderr: /' "$ERR"
		failed=$((failed + 1))
	fi
}

rc_is() { [[ $rc == "$1" ]]; }
has() { grep -Eq -- "$1" "$OUT"; }
err_has() { grep -Eq -- "$1" "$ERR"; }
nlines() { [[ $(wc -l <"$1") == "$2" ]]; }
no_stderr() { [[ ! -s $ERR ]]; }

# json_ok EXPR: stdout is JSON and the python EXPR about it (d) holds.
json_ok() {
	python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)' "$OUT" "$1"
}

# raw PATH: the agent's own reply to GET PATH, as compact JSON (no CLI).
raw() {
	python3 - "$SOCK" "$1" <<'EOF'
import http.client, json, socket, sys
class Conn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(sys.argv[1])
c = Conn("localhost", timeout=10)
c.request("GET", sys.argv[2])
print(json.dumps(json.loads(c.getresponse().read()), sort_keys=True))
EOF
}

# same_json PATH: stdout is the same JSON as the agent's reply to PATH.
same_json() {
	[[ $(python3 -c 'import json, sys
print(json.dumps(json.load(open(sys.argv[1])), sort_keys=True))' "$OUT") == "$(raw "$1")" ]]
}

# aligned HEADER_START [skip-indented]: the table in stdout whose header line
# starts with HEADER_START has every row's cells starting at the header's
# column offsets (a space before, text at the offset). Indented rows (status's
# health components) are skipped with skip-indented.
aligned() {
	python3 - "$OUT" "$1" "${2:-}" <<'EOF'
import re, sys
lines = open(sys.argv[1]).read().split("\n")
head = next(i for i, l in enumerate(lines) if l.startswith(sys.argv[2] + " "))
cols = [m.start() for m in re.finditer(r"\S+", lines[head])]
rows = []
for l in lines[head + 1:]:
    if not l or re.match(r"^\d+ entr(y|ies)$", l):
        break
    if l.startswith("  ") and sys.argv[3]:
        continue
    rows.append(l)
if not rows or len(cols) < 2:
    sys.exit("no rows or columns")
for l in rows:
    for c in cols[1:]:
        if len(l) <= c or l[c - 1] != " " or l[c] == " ":
            sys.exit("misaligned at column %d: %r" % (c, l))
EOF
}

# table_rows HEADER_START [skip-indented]: number of rows under that header.
table_rows() {
	awk -v h="$1 " -v skip="${2:-}" 'index($0, h) == 1 { t = 1; next }
		t && (/^$/ || /^[0-9]+ entr/) { exit }
		t && !(skip && /^  /) { n++ } END { print n + 0 }' "$OUT"
}

# ---- start the agent -----------------------------------------------------------

echo "# fibril.conf for cli.sh: everything comes from --set" >"$tmp/fibril.conf"
"$AGENT" --config "$tmp/fibril.conf" \
	--set agent.module-dir="$moddir" \
	--set agent.socket="$SOCK" \
	--set agent.run-dir="$tmp/run" \
	--set agent.state-dir="$tmp/state" \
	--set agent.bpffs-dir="$BPFFS" \
	>"$tmp/agent.log" 2>&1 &
agent_pid=$!

rc=0
wait_alive "$agent_pid" 10 test -S "$SOCK" || rc=$?
[[ $rc != 2 ]] || { echo "FAIL: the agent exited during startup"; exit 1; }
[[ -S $SOCK ]] || { echo "FAIL: no agent socket $SOCK after 10 s"; exit 1; }
# The socket may come up before the modules have started: wait for ready.
wait_quiet 10 "$FIBRIL" --socket "$SOCK" health || true

version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"$/\1/p' "$top_builddir/config.h")

# ---- status -------------------------------------------------------------------

run --socket "$SOCK" status
check "status exits 0 with nothing on stderr" 'rc_is 0 && no_stderr'
check "status header: version, state running, uptime, health ok" \
	'has "^Version: +[0-9]" && has "^State: +running$" && has "^Uptime: +[0-9.]+" && has "^Health: +ok$"'
check "status table header" 'has "^NAME +STATE +HEALTH +INIT +START +SUMMARY/MESSAGE$"'
check "status shows module hello running and ok, with timings" \
	'has "^hello +running +ok +[0-9]+\.[0-9]{2}ms +[0-9]+\.[0-9]{2}ms"'
check "status table is aligned" 'aligned NAME skip-indented'
cp "$OUT" "$tmp/status.txt"

run --socket "$SOCK" -o json status
check "status -o json parses and has the documented fields" \
	'rc_is 0 && json_ok "all(k in d for k in (\"version\", \"state\", \"uptime_seconds\", \"health\", \"bootstrap\", \"modules\"))"'
check "status -o json: hello is running with health and timings" \
	'json_ok "any(m[\"name\"] == \"hello\" and m[\"state\"] == \"running\" and m[\"health\"][\"level\"] == \"ok\" and \"init_ms\" in m[\"timings\"] for m in d[\"modules\"])"'
check "status -o json is pretty-printed" '[[ $(wc -l <"$OUT") -gt 5 ]]'
# Each health component of hello is listed under it, indented.
comps=$(python3 -c 'import json, sys
for m in json.load(open(sys.argv[1]))["modules"]:
    if m["name"] == "hello":
        for c in m["health"].get("components", []): print(c["name"])' "$OUT")
cp "$tmp/status.txt" "$OUT"
for c in $comps; do
	check "status lists hello's health component $c indented" 'has "^  $c +[a-z]+"'
done
nmods=$(python3 -c 'import json, sys; print(len(json.loads(sys.argv[1])["modules"]))' "$(raw /v1/status)")
check "status has a row per module ($nmods)" '[[ $(table_rows NAME skip-indented) == "$nmods" ]]'

# ---- modules ------------------------------------------------------------------

run --socket "$SOCK" modules
check "modules exits 0" 'rc_is 0 && no_stderr'
check "modules table header" 'has "^NAME +VERSION +ABI +ORDER +STATE +PROVIDES +REQUIRES +WANTS +FILE$"'
check "modules shows hello: ABI, order 0, running, its file" \
	'has "^hello +[^ ]+ +[0-9]+\.[0-9]+ +0 +running +.*hello\.so$"'
check "modules table is aligned" 'aligned NAME'

run --output json --socket "$SOCK" modules
check "modules --output json has the documented fields" \
	'rc_is 0 && json_ok "all(all(k in m for k in (\"name\", \"version\", \"abi\", \"file\", \"provides\", \"requires\", \"wants\", \"order\", \"state\")) for m in d[\"modules\"]) and any(m[\"name\"] == \"hello\" for m in d[\"modules\"])"'
check "modules -o json is the agent's reply" 'same_json /v1/modules'

# ---- config -------------------------------------------------------------------

run --socket "$SOCK" config
check "config exits 0" 'rc_is 0 && no_stderr'
check "config table header" 'has "^SECTION +KEY +VALUE +ORIGIN$"'
check "config shows agent.socket as set by --set" "has '^agent +socket +$SOCK +--set\$'"
check "config table is aligned" 'aligned SECTION'
nkeys=$(python3 -c 'import json, sys; print(sum(len(s["keys"]) for s in json.loads(sys.argv[1])["sections"]))' "$(raw /v1/config)")
check "config lists every key ($nkeys)" '[[ $(table_rows SECTION) == "$nkeys" ]]'
nullkey=$(python3 -c 'import json, sys
for s in json.loads(sys.argv[1])["sections"]:
    for k in s["keys"]:
        if k["value"] is None: print(s["name"], k["name"]); sys.exit()' "$(raw /v1/config)")
if [[ -n $nullkey ]]; then
	check "config shows a null value (${nullkey/ /.}) as -" "has '^${nullkey%% *} +${nullkey#* } +- +'"
fi

run -o json --socket "$SOCK" config
check "config -o json has sections with keys" \
	'rc_is 0 && json_ok "all(all(k in key for k in (\"name\", \"value\", \"origin\")) for s in d[\"sections\"] for key in s[\"keys\"])"'
check "config -o json is the agent's reply" 'same_json /v1/config'

# ---- maps ----------------------------------------------------------------------

run --socket "$SOCK" map list
check "map list exits 0" 'rc_is 0 && no_stderr'
nmaps=$(python3 -c 'import json, sys; print(len(json.loads(sys.argv[1])["maps"]))' "$(raw /v1/map)")
if ((nmaps == 0)); then
	check "map list with no maps says so" 'has "^No maps\.$" && nlines "$OUT" 1'
else
	check "map list table has a row per map" \
		'has "^NAME +TYPE +KEY +VALUE +MAX +ENTRIES +OWNER +ORIGIN$" && [[ $(table_rows NAME) == "$nmaps" ]]'
	check "map list table is aligned" 'aligned NAME'
fi

run --socket "$SOCK" -o json map list
check "map list -o json is the agent's reply" 'rc_is 0 && json_ok "isinstance(d[\"maps\"], list)" && same_json /v1/map'

if ((nmaps > 0)); then
	map=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["maps"][0]["name"])' "$(raw /v1/map)")
	nent=$(python3 -c 'import json, sys; print(len(json.loads(sys.argv[1])["entries"]))' "$(raw "/v1/map/$map")")
	run --socket "$SOCK" map dump "$map"
	check "map dump $map lists its $nent entries" \
		'rc_is 0 && has "^$nent entr(y|ies)$" && [[ $(table_rows KEY) == "$nent" ]]'
	((nent == 0)) || check "map dump table is aligned" 'aligned KEY'
	run --socket "$SOCK" -o json map dump "$map"
	check "map dump -o json has name and entries" \
		'rc_is 0 && json_ok "d[\"name\"] == \"$map\" and isinstance(d[\"entries\"], list)"'
fi

run --socket "$SOCK" map dump nosuch
check "map dump nosuch exits 1 with one line naming the map" \
	'rc_is 1 && nlines "$ERR" 1 && err_has "^fibril: .*nosuch.*\(HTTP 404\)$" && [[ ! -s $OUT ]]'
run --socket "$SOCK" -o json map dump nosuch
check "map dump nosuch -o json also exits 1" 'rc_is 1 && err_has nosuch'

# ---- health, version, help ----------------------------------------------------

run --socket "$SOCK" health
check "health prints ok and exits 0" 'rc_is 0 && [[ $(cat "$OUT") == ok ]] && no_stderr'
run --socket "$SOCK" -o json health
check "health -o json is {\"status\": \"ok\"}" 'rc_is 0 && json_ok "d == {\"status\": \"ok\"}"'

agent_version=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["version"])' "$(raw /v1/status)")
run --socket "$SOCK" version
check "version shows the CLI ($version) and agent ($agent_version) versions" \
	'rc_is 0 && has "^fibril +$version$" && has "^agent +$agent_version$"'
run --socket "$SOCK" -o json version
check "version -o json" 'rc_is 0 && json_ok "d == {\"client\": \"$version\", \"agent\": \"$agent_version\"}"'

for h in help --help; do
	run "$h"
	check "$h lists every command" \
		'rc_is 0 && has "^Usage: fibril" && has " status " && has " modules " && has " config " && has " map list " && has " map dump NAME " && has " health " && has " version " && has " help "'
done

# ---- socket selection and errors ---------------------------------------------------

FIBRIL_SOCKET=$SOCK run health
check "FIBRIL_SOCKET selects the socket" 'rc_is 0 && [[ $(cat "$OUT") == ok ]]'
FIBRIL_SOCKET=/nonexistent run --socket "$SOCK" health
check "--socket overrides FIBRIL_SOCKET" 'rc_is 0'
FIBRIL_SOCKET=/nonexistent run status
check "FIBRIL_SOCKET=/nonexistent: not running" 'rc_is 1 && err_has "/nonexistent"'

run --socket /nonexistent status
check "--socket /nonexistent: exit 1, one line saying not running" \
	'rc_is 1 && nlines "$ERR" 1 && err_has "not running" && err_has "No such file or directory" && [[ ! -s $OUT ]]'
run --socket /nonexistent version
check "version without an agent still prints the CLI version" 'rc_is 0 && has "^fibril +$version$"'

run --socket "$SOCK" frobnicate
check "unknown command exits 2 with one line naming it" 'rc_is 2 && nlines "$ERR" 1 && err_has frobnicate'
run --socket "$SOCK" -o yaml status
check "unknown output format exits 2" 'rc_is 2 && nlines "$ERR" 1 && err_has yaml'
run --socket "$SOCK" --frob status
check "unknown option exits 2" 'rc_is 2 && nlines "$ERR" 1 && err_has --frob'
run --socket "$SOCK" map dump
check "map dump without a name exits 2" 'rc_is 2 && nlines "$ERR" 1'
run --socket "$SOCK" status extra
check "extra argument exits 2" 'rc_is 2 && nlines "$ERR" 1 && err_has extra'
run
check "no command exits 2" 'rc_is 2 && nlines "$ERR" 1'

# Last: once the agent is gone, the CLI says so.
kill -TERM "$agent_pid"
wait "$agent_pid" || true
agent_pid=
run --socket "$SOCK" status
check "after the agent stopped: exit 1, one line saying not running" \
	'rc_is 1 && nlines "$ERR" 1 && err_has "not running"'

echo "$passed passed, $failed failed"
((failed == 0))
