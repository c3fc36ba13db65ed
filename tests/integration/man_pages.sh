#!/usr/bin/env bash
# tests/integration/man_pages.sh - the manual pages (docs/man/*: the one
# source of each, installed as is) stay true to the programs: each renders
# with no groff warning, fibril-agent(8) documents every option of
# `fibril-agent --help`, fibril(8) every command of `fibril --help`,
# fibril.conf(5) every [agent] key of `--print-config`, fibril-cni(8) every
# configuration key the plugin reads, and fibril-sdk(7) the pkg-config
# variables it names.
. "$top_srcdir/tests/lib/common.sh"
command -v groff >/dev/null || skip_or_fail "groff is not installed (apt-get install groff-base)"
man=$top_srcdir/docs/man
# text DIR/PAGE: the page as plain text, one long line per paragraph, no
# hyphenation or adjustment, so that grep finds what it says
text() { groff -man -Tascii -rLL=400n -rHY=0 -P-cbou "$1" 2>/dev/null; }
for page in "$man"/*.[1-8]; do
	warn=$(groff -man -ww -z "$page" 2>&1)
	check "$(basename "$page") renders without groff warnings${warn:+: $warn}" test -z "$warn"
done
says() { # says PAGE-TEXT WORD...: every word is in the page
	local t=$1 w missing=""
	shift
	for w in "$@"; do grep -qF -- "$w" <<<"$t" || missing="$missing $w"; done
	[ -z "$missing" ] || { echo "  not in the page:$missing"; return 1; }
}
tags() { # tags PAGE-TEXT WORD...: every word begins an entry (a .TP tag) of the page
	local t=$1 w missing=""
	shift
	for w in "$@"; do grep -qE -- "^ +([a-z./-]+, )*$w( |,|\$)" <<<"$t" || missing="$missing $w"; done
	[ -z "$missing" ] || { echo "  no entry in the page for:$missing"; return 1; }
}
agent_opts=$("$AGENT" --help 2>&1 | grep -o -- '--[a-z-]*' | sort -u)
check "fibril-agent(8) documents every option of --help" says "$(text "$man/fibril-agent.8")" $agent_opts
cli_cmds=$("$CLI" --help 2>&1 | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && /^  [a-z]/ { print $1 }' | sort -u)
check "fibril(8) has an entry for every command of fibril --help ($(echo $cli_cmds))" tags "$(text "$man/fibril.8")" $cli_cmds
check "fibril(8) documents the global options" says "$(text "$man/fibril.8")" --socket --output
mods=$WORK/mods
mkdir -p "$mods"
: >"$WORK/empty.conf"
agent_keys=$("$AGENT" --config "$WORK/empty.conf" --set agent.module-dir="$mods" --print-config 2>/dev/null |
	sed -n '/^\[agent\]/,/^\[/p' | awk '/^[a-z-]+ =/ { print $1 }')
[ -n "$agent_keys" ] || fail "--print-config printed no [agent] key"
check "fibril.conf(5) has an entry for every [agent] key ($(echo $agent_keys))" tags "$(text "$man/fibril.conf.5")" $agent_keys
cni_keys=$(grep -o 'invalid("[a-z-]*"' "$top_srcdir/cni/netconf.c" | sed 's/invalid("\(.*\)"/\1/' | sort -u)
check "fibril-cni(8) documents the configuration keys ($(echo $cni_keys))" says "$(text "$man/fibril-cni.8")" $cni_keys
pc_vars=$(sed -n 's/^\([a-z_]*\)=.*/\1/p' "$top_srcdir/sdk/fibril-sdk.pc.in" | grep -E 'moduledir|abi_minor')
check "fibril-sdk(7) names the SDK's pkg-config variables ($(echo $pc_vars))" says "$(text "$man/fibril-sdk.7")" $pc_vars
finish
