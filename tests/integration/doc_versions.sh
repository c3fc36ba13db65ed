#!/usr/bin/env bash
# tests/integration/doc_versions.sh - the version numbers the docs cite
# agree with <fibril/version.h> and the version script
# (scripts/check-doc-versions.py), and the check itself catches a stale one:
# a copy of the docs citing an older "current" host, and a range of symbol
# nodes that stops short, each fail it.
. "$top_srcdir/tests/lib/common.sh"

rc=0
out=$(python3 "$top_srcdir/scripts/check-doc-versions.py" "$top_srcdir" 2>&1) || rc=$?
echo "$out"
check "every version the docs cite matches the tree" test "$rc" -eq 0

# the check fails on what it is for: a scratch tree with the real version
# files and one stale doc
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
out=$(python3 "$top_srcdir/scripts/check-doc-versions.py" "$scratch" 2>&1) || true
check "a stale 'current' version is named" contains "$out" 'docs/a.md:1: "the current (1.4) host"'
check "a range of symbol nodes that stops short is named" contains "$out" "docs/b.md:1: the range of symbol nodes ends at FIBRIL_1.5"
check "a version from the future is named" contains "$out" 'docs/c.md:1: "SDK 1.99" is newer'
finish
