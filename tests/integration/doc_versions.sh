#!/usr/bin/env bash
# tests/integration/doc_versions.sh - the version numbers the docs cite
# agree with <fibril/version.h> and the version script, and every
# repository path they cite exists (scripts/check-doc-versions.py); and the
# check itself catches a stale one: a copy of the docs citing an older
# "current" host, a range of symbol nodes that stops short, a version from
# the future, and paths that are not in the tree each fail it, naming
# FILE:LINE, while existing paths, globs that match, generated files the
# Makefiles name and placeholders pass.
. "$top_srcdir/tests/lib/common.sh"

rc=0
out=$(python3 "$top_srcdir/scripts/check-doc-versions.py" "$top_srcdir" 2>&1) || rc=$?
echo "$out"
check "every version and path the docs cite matches the tree" test "$rc" -eq 0

# the check fails on what it is for: a scratch tree with the real version
# files and stale docs beside good ones
scratch=$WORK/tree
mkdir -p "$scratch/sdk/include/fibril" "$scratch/docs"
cp "$top_srcdir/sdk/include/fibril/version.h" "$scratch/sdk/include/fibril/"
for map in lib/libfibril.map sdk/libfibril.map host/libfibril.map; do
	[ -f "$top_srcdir/$map" ] && break
done
mkdir -p "$scratch/$(dirname "$map")"
cp "$top_srcdir/$map" "$scratch/$map"
printf 'Modules built against 1.0 run on the current (1.4) host.\n' >"$scratch/docs/a.md"
printf 'Symbols: `FIBRIL_1.0` ... `FIBRIL_1.5`.\n' >"$scratch/docs/b.md"
printf 'Needs SDK 1.99.\n' >"$scratch/docs/c.md"
printf 'The loader is `host/no_such_loader.c`.\nSee modules/gone/README.md and `cli/cmd_*.nope`.\n' >"$scratch/docs/d.md"
printf '%s\n' 'The headers: `sdk/include/fibril/version.h`, sdk/include/fibril/*.h.' \
	'Generated: `bpf/made.skel.h`; built: `tests/bench/prog`; placeholders: `modules/NAME/`, modules/<name>/.' \
	'Not repository paths: /usr/lib/cni, $(prefix)/lib/cni, ../docs/none.md.' >"$scratch/docs/e.md"
mkdir -p "$scratch/tests/bench" "$scratch/host" "$scratch/modules" "$scratch/cli" "$scratch/bpf"
: >"$scratch/tests/bench/prog.c"
printf 'bpf/made.skel.h: bpf/made.bpf.o\n' >"$scratch/Makefile.am"
rc=0
out=$(python3 "$top_srcdir/scripts/check-doc-versions.py" "$scratch" 2>&1) || rc=$?
echo "$out"
check "a stale 'current' version is named" contains "$out" 'docs/a.md:1: "the current (1.4) host"'
check "a range of symbol nodes that stops short is named" contains "$out" "docs/b.md:1: the range of symbol nodes ends at FIBRIL_1.5"
check "a version from the future is named" contains "$out" 'docs/c.md:1: "SDK 1.99" is newer'
check "a path not in the tree is named" contains "$out" "docs/d.md:1: host/no_such_loader.c: no such file"
check "a plain path not in the tree is named" contains "$out" "docs/d.md:2: modules/gone/README.md: no such file"
check "a glob that matches nothing is named" contains "$out" "docs/d.md:2: cli/cmd_*.nope: no such file"
check "existing paths, matching globs, generated and built files, placeholders pass" \
	test "$(printf '%s\n' "$out" | grep -c '^docs/e.md:')" -eq 0
check "the stale scratch tree fails the check" test "$rc" -eq 1
finish
