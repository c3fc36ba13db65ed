#!/usr/bin/env bash
# tests/integration/config_dropins.sh - config drop-ins as a packager uses
# them: FILE.d/*.conf beside the --config file are read in name order after
# it (later files override earlier ones, dpkg leftovers are ignored),
# --print-config names the file:line, --set or default of every value, and
# a bad drop-in is refused with a one-line error naming its file and line.
. "$top_srcdir/tests/lib/common.sh"

mods=$WORK/mods
build_module "$mods" alpha
conf=$WORK/fibril.conf
dropins=$conf.d
mkdir -p "$dropins"

cat >"$conf" <<'INI'
[agent]
log-level = warn
[alpha]
count = 2
tick = 7s
INI
# a module package's commented defaults: nothing set
cat >"$dropins/50-alpha.conf" <<'INI'
# Defaults of the alpha module.
[alpha]
# count = 1
INI
cat >"$dropins/90-local.conf" <<'INI'
[alpha]
count = 40
INI
cat >"$dropins/10-site.conf" <<'INI'
[alpha]

count = 30
degraded = site
INI
# dpkg's copies and other names are not read
printf '[alpha]\ncount = 99\n' >"$dropins/90-local.conf.dpkg-dist"
printf '[alpha]\ncount = 98\n' >"$dropins/90-local.conf.dpkg-old"
printf 'garbage\n' >"$dropins/README"

run_agent "$mods" --config "$conf" --print-config
check "--print-config with drop-ins succeeds" test "$RC" -eq 0
check "the last drop-in wins" contains "$OUT" "from: $dropins/90-local.conf:2)
count = 40"
check "an earlier drop-in's own key stays" contains "$OUT" "from: $dropins/10-site.conf:4)
degraded = site"
check "the main file's key no drop-in sets stays" contains "$OUT" "from: $conf:5)
tick = 7s"
check "defaults say so" contains "$OUT" "from: default)
fail-start = false"
check "dpkg-dist/dpkg-old copies are not read" bash -c '! grep -q "count = 9[89]" <<<"$1"' _ "$OUT"

run_agent "$mods" --config "$conf" --set alpha.count=5 --print-config
check "--set wins over every drop-in" contains "$OUT" "from: --set)
count = 5"

# the running agent serves the same origins
start_agent "$mods" --config "$conf"
check "/v1/config reports the drop-in that set a value" python3 - "$(api http://x/v1/config)" "$dropins" <<'PY'
import json, sys
doc, dropins = json.loads(sys.argv[1]), sys.argv[2]
sec = {s["name"]: {k["name"]: k for k in s["keys"]} for s in doc["sections"]}
assert sec["alpha"]["count"]["value"] == "40", sec["alpha"]["count"]
assert sec["alpha"]["count"]["origin"] == dropins + "/90-local.conf:2", sec["alpha"]["count"]
assert sec["agent"]["log-level"]["value"] == "warn"
PY
stop_agent TERM

# bad drop-ins: one line naming the file and line; nothing starts
expect_refused() {
	local what=$1 expected=$2
	run_agent "$mods" --config "$conf"
	local lines
	lines=$(printf '%s\n' "$OUT" | wc -l)
	if [ "$RC" -ne 0 ] && contains "$OUT" "$expected" && [ "$lines" -eq 1 ] && [ ! -e "$WORK/fibril.sock" ]; then
		pass "$what"
	else
		fail "$what (rc=$RC, $lines lines): $OUT"
	fi
}
printf '[alpha]\ncount = 1\n\ncount = 2\n' >"$dropins/60-dup.conf"
expect_refused "a key twice in one drop-in" "fibril-agent: $dropins/60-dup.conf:4: [alpha] key 'count' already set at line 2"
rm "$dropins/60-dup.conf"
printf '[alpha]\ncount = 500\n' >"$dropins/60-range.conf"
expect_refused "a bad value in a drop-in" "fibril-agent: $dropins/60-range.conf:2: [alpha] count: 500 is out of range 1..100"
rm "$dropins/60-range.conf"
printf '[alhpa]\n' >"$dropins/60-typo.conf"
expect_refused "an unknown section in a drop-in" "fibril-agent: $dropins/60-typo.conf:1: unknown section [alhpa] (did you mean [alpha]?)"
rm "$dropins/60-typo.conf"
# a removed (not purged) module package leaves its drop-in, which the admin
# may have edited: Debian's normal state must not stop the next start
printf '[ipam-k8s-podcidr]\nsome-key = 1\n' >"$dropins/50-ipam-k8s-podcidr.conf"
run_agent "$mods" --config "$conf" --check
check "a removed module's edited drop-in: --check passes (exit $RC)" test "$RC" -eq 0
check "  and warns, naming the file and the section" contains "$OUT" \
	"$dropins/50-ipam-k8s-podcidr.conf:1: unknown section [ipam-k8s-podcidr]; no loaded module has this section, its settings are ignored"
rm "$dropins/50-ipam-k8s-podcidr.conf"
printf '[alpha]\nnot a key value line\n' >"$dropins/60-syntax.conf"
expect_refused "a syntax error in a drop-in" "fibril-agent: $dropins/60-syntax.conf:2: syntax error"
rm "$dropins/60-syntax.conf"

# an explicit --config must exist even when its drop-ins do (the default
# path need not; tests/unit/test_config covers reading its drop-ins alone)
rm "$conf"
run_agent "$mods" --config "$conf" --check
check "an explicit --config that is missing is still an error" contains "$OUT" "$conf: No such file or directory"

finish
