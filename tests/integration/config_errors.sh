#!/usr/bin/env bash
# tests/integration/config_errors.sh - the agent's config as an operator
# meets it: every kind of bad value is refused with FILE:LINE (or the --set
# it came from) before anything starts; --set overrides the file;
# --print-config prints the effective config with defaults and help, and
# reads back as a valid config.
. "$top_srcdir/tests/lib/common.sh"

mods=$WORK/mods
build_module "$mods" alpha
conf=$WORK/fibril.conf

# expect_config_error DESCRIPTION EXPECTED [args...] (config text on stdin)
expect_config_error() {
	local what=$1 text=$2
	shift 2
	cat >"$conf"
	run_agent "$mods" --config "$conf" "$@"
	if [ "$RC" -ne 0 ] && contains "$OUT" "$text" && [ ! -e "$WORK/fibril.sock" ]; then
		pass "$what"
	else
		fail "$what (rc=$RC): $OUT"
	fi
}

expect_config_error "unknown section with a suggestion" "$conf:3: unknown section [alhpa] (did you mean [alpha]?)" <<'INI'
[agent]
log-level = info
[alhpa]
count = 2
INI

expect_config_error "unknown key with a suggestion" "$conf:2: [agent] unknown key 'stat-dir' (did you mean 'state-dir'?)" <<'INI'
[agent]
stat-dir = /var/lib/x
INI

expect_config_error "unknown module key with a suggestion" "$conf:3: [alpha] unknown key 'cuont' (did you mean 'count'?)" <<'INI'
[alpha]

cuont = 3
INI

expect_config_error "wrong type: duration" "$conf:2: [agent] start-timeout: '5x' is not a duration" <<'INI'
[agent]
start-timeout = 5x
INI

expect_config_error "wrong type: bool" "$conf:2: [alpha] fail-start: 'maybe' is not a boolean" <<'INI'
[alpha]
fail-start = maybe
INI

expect_config_error "wrong type: path" "$conf:2: [agent] state-dir: 'relative/dir' is not an absolute path" <<'INI'
[agent]
state-dir = relative/dir
INI

expect_config_error "out of range" "$conf:2: [alpha] count: 500 is out of range 1..100" <<'INI'
[alpha]
count = 500
INI

expect_config_error "a key's own check" "$conf:2: [agent] log-level: 'loud' is not a log level" <<'INI'
[agent]
log-level = loud
INI

expect_config_error "a bad --set value names the --set" "--set alpha.count: [alpha] count: 0 is out of range 1..100" --set alpha.count=0 <<'INI'
INI

expect_config_error "a malformed --set" "--set 'alpha': expected section.key=value" --set alpha <<'INI'
INI

expect_config_error "an explicit config file that is missing" "$WORK/nope.conf" --config "$WORK/nope.conf" <<'INI'
INI

# --set overrides the file; --print-config shows value, default and help.
# (the trace file is written by the module: kept in this test's work dir)
cat >"$conf" <<INI
[alpha]
count = 7
trace = $WORK/from-file
INI
run_agent "$mods" --config "$conf" --set alpha.count=9 --print-config
check "--print-config succeeds" test "$RC" -eq 0
check "--set overrides the file" contains "$OUT" "count = 9"
check "file values are shown" contains "$OUT" "trace = $WORK/from-file"
check "help, type, default, range and origin are shown" contains "$OUT" "# a bounded integer (type: int, default: 1, range: 1..100, from: --set)"
check "agent defaults are shown" contains "$OUT" "socket-mode = 0660"
printf '%s\n' "$OUT" >"$WORK/printed.conf"
run_agent "$mods" --config "$WORK/printed.conf" --check
check "the printed config reads back as valid" test "$RC" -eq 0

# GET /v1/config reports origins.
start_agent "$mods" --config "$conf" --set alpha.count=9
check "/v1/config shows where each value came from" python3 - "$(api http://x/v1/config)" "$conf" <<'PY'
import json, sys
doc, conf = json.loads(sys.argv[1]), sys.argv[2]
sec = {s["name"]: {k["name"]: k for k in s["keys"]} for s in doc["sections"]}
assert sec["alpha"]["count"]["value"] == "9" and sec["alpha"]["count"]["origin"] == "--set", sec["alpha"]["count"]
assert sec["alpha"]["trace"]["origin"] == conf + ":3", sec["alpha"]["trace"]
assert sec["agent"]["log-level"]["origin"] == "default"
PY
stop_agent TERM

finish
