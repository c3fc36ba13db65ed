#!/usr/bin/env bash
# tests/integration/loader_refusals.sh - every refusal of the module loader
# and the graph: each bad module directory makes fibril-agent exit non-zero
# with one line naming the file (or modules) and the reason, and start
# nothing. Also --graph and --graph=dot on a good set.
. "$top_srcdir/tests/lib/common.sh"

# expect_refusal DESCRIPTION MODULEDIR EXPECTED-TEXT [agent args...]
expect_refusal() {
	local what=$1 dir=$2 text=$3
	shift 3
	run_agent "$dir" --check "$@"
	local lines
	lines=$(printf '%s\n' "$OUT" | grep -c . || true)
	if [ "$RC" -ne 0 ] && contains "$OUT" "$text" && [ "$lines" -eq 1 ] && ! contains "$OUT" "OK" >/dev/null; then
		pass "$what"
	else
		fail "$what (rc=$RC, $lines lines): $OUT"
	fi
}

# A good set, for --graph.
good=$WORK/good
build_module "$good" base provides=kvstore
build_module "$good" middle provides=ipam requires=kvstore
build_module "$good" top requires=ipam wants=kvstore,absent
run_agent "$good" --graph
check "--graph prints the start order" test "$RC" -eq 0
check "--graph orders base, middle, top" test "$(printf '%s\n' "$OUT" | grep -E '^ +[0-9]+\.' | awk '{print $2}' | tr '\n' ' ')" = "base middle top "
run_agent "$good" --graph=dot
check "--graph=dot prints a digraph with labelled edges" contains "$OUT" '"middle" -> "base" [label="kvstore"]'
check "--graph=dot marks wants as dashed" contains "$OUT" '"top" -> "base" [label="kvstore", style=dashed]'
run_agent "$good" --check
check "a good set passes --check" test "$RC" -eq 0

# ABI major mismatch.
d=$WORK/abi-major
build_module "$d" major cflags="-DTM_DESC_EXTRA=,.abi_major=2"
expect_refusal "ABI major mismatch" "$d" "module $d/major.so: ABI major mismatch: built for ABI 2.$FIBRIL_ABI_MINOR, host provides 1.$FIBRIL_ABI_MINOR"

# Module built for a newer minor than the host.
d=$WORK/abi-minor
NEWER_MINOR=$((FIBRIL_ABI_MINOR + 1))
build_module "$d" minor cflags="-DTM_DESC_EXTRA=,.abi_minor=$NEWER_MINOR"
expect_refusal "newer minor than the host" "$d" "module $d/minor.so: built for ABI 1.$NEWER_MINOR, newer than the host's 1.$FIBRIL_ABI_MINOR"

# Build signature mismatch.
d=$WORK/signature
build_module "$d" sig cflags="-DTM_DESC_EXTRA=,.signature=\"fibril:1:ilp32:4\""
expect_refusal "build signature mismatch" "$d" "build signature 'fibril:1:ilp32:4' does not match"

# Missing entry symbol: a shared object that is not a fibril module.
d=$WORK/nosym
mkdir -p "$d"
echo 'int not_a_module(void) { return 1; }' >"$WORK/nosym.c"
$CC -shared -fPIC -o "$d/nosym.so" "$WORK/nosym.c"
chmod 0644 "$d/nosym.so"
expect_refusal "missing entry symbol" "$d" "module $d/nosym.so: missing entry symbol 'fibril_module_entry'"

# Duplicate module name in two files.
d=$WORK/dup
build_module "$d" twin
build_module "$d" twin file=twin-copy.so
expect_refusal "duplicate module name" "$d" "module $d/twin.so: duplicate module name 'twin' (already loaded from $d/twin-copy.so)"

# A module file not owned by root.
d=$WORK/owner
build_module "$d" owned
chown 65534 "$d/owned.so"
expect_refusal "module file not root-owned" "$d" "module file $d/owned.so: owned by uid 65534, expected root (uid 0)"

# A group-writable module file.
d=$WORK/gw
build_module "$d" gw
chmod 0664 "$d/gw.so"
expect_refusal "group-writable module file" "$d" "module file $d/gw.so: mode 0664 is group-writable"

# A world-writable module directory.
d=$WORK/ww
build_module "$d" ww
chmod 0777 "$d"
expect_refusal "world-writable module directory" "$d" "module directory $d: mode 0777 is world-writable"

# A module directory not owned by root.
d=$WORK/dirowner
build_module "$d" fine
chown 65534 "$d"
expect_refusal "module directory not root-owned" "$d" "module directory $d: owned by uid 65534"

# A module listed in [agent] modules that is not there.
d=$WORK/listed
build_module "$d" present
expect_refusal "listed module missing" "$d" "module 'absent' listed in [agent] modules: $d/absent.so not found" --set agent.modules=present,absent

# Unresolved hard dependency: the whole chain is named.
d=$WORK/unresolved
build_module "$d" app requires=ipam
build_module "$d" ipam-mode provides=ipam requires=kvstore
expect_refusal "unresolved dependency names the chain" "$d" "unresolved dependency: app -> ipam-mode -> 'kvstore' (no loaded module provides 'kvstore'"

# A cycle names every module in it.
d=$WORK/cycle
build_module "$d" aa provides=a requires=c
build_module "$d" bb provides=b requires=a
build_module "$d" cc provides=c requires=b
expect_refusal "cycle names every module" "$d" "dependency cycle: aa -> cc -> bb -> aa"

# Two providers of one capability and no choice.
d=$WORK/ambiguous
build_module "$d" pool-a provides=ipam
build_module "$d" pool-b provides=ipam
expect_refusal "ambiguous capability" "$d" "ambiguous capability 'ipam': provided by pool-a ($d/pool-a.so) and pool-b ($d/pool-b.so)"

# ... and the config choosing one resolves it; the other is not started.
run_agent "$d" --graph --set providers.ipam=pool-b
check "[providers] chooses between two providers" test "$RC" -eq 0
check "the chosen provider is started" contains "$OUT" "1. pool-b"
check "the other provider is not started" contains "$OUT" "not started: pool-a"
expect_refusal "[providers] naming a non-provider" "$d" "[providers] ipam = nosuch, but no such module is loaded" --set providers.ipam=nosuch

# The descriptor is read from the file before any code of the module runs:
# a constructor that would crash, or write a file, never runs in a module
# refused for its ABI or signature.
d=$WORK/ctor-crash
build_module "$d" ctorcrash cflags="-DTM_DESC_EXTRA=,.abi_major=2 -DTM_CTOR_CRASH"
expect_refusal "bad ABI major: refused before its crashing constructor runs" "$d" \
	"module $d/ctorcrash.so: ABI major mismatch: built for ABI 2.$FIBRIL_ABI_MINOR, host provides 1.$FIBRIL_ABI_MINOR"
check "... the agent exited 1, not of its constructor's crash (rc=$RC)" test "$RC" -eq 1
d=$WORK/ctor-file
build_module "$d" ctorfile cflags="-DTM_DESC_EXTRA=,.abi_minor=$NEWER_MINOR -DTM_CTOR_FILE=\"$WORK/ctor-ran\""
expect_refusal "newer minor: refused before its constructor runs" "$d" \
	"module $d/ctorfile.so: built for ABI 1.$NEWER_MINOR, newer than the host's 1.$FIBRIL_ABI_MINOR"
check "... its constructor never wrote its file" test ! -e "$WORK/ctor-ran"
d=$WORK/ctor-sig
build_module "$d" ctorsig cflags="-DTM_DESC_EXTRA=,.signature=\"fibril:1:ilp32:4\" -DTM_CTOR_FILE=\"$WORK/ctor-ran\""
expect_refusal "bad signature: refused before its constructor runs" "$d" "build signature 'fibril:1:ilp32:4' does not match"
check "... its constructor never wrote its file" test ! -e "$WORK/ctor-ran"
# ... while a good module's constructor does run (after the checks).
d=$WORK/ctor-good
build_module "$d" ctorgood cflags="-DTM_CTOR_FILE=\"$WORK/ctor-ran\""
run_agent "$d" --check
check "a good module with a constructor loads (rc=$RC)" test "$RC" -eq 0
check "... and its constructor ran" test -e "$WORK/ctor-ran"

# A symlinked module file is refused (opened with O_NOFOLLOW).
d=$WORK/symlink
build_module "$WORK/elsewhere" linked
mkdir -p "$d"
ln -s "$WORK/elsewhere/linked.so" "$d/linked.so"
expect_refusal "symlinked module file" "$d" "module file $d/linked.so: is a symbolic link, expected the file itself"

# A module directory inside a group-writable directory is refused; a sticky
# one (like /tmp, above every test's work dir) is fine.
d=$WORK/gwparent/mods
build_module "$d" inner
chmod 0775 "$WORK/gwparent"
expect_refusal "group-writable parent directory" "$d" \
	"module directory $d: parent directory $WORK/gwparent: mode 0775 is group-writable"
chmod 1777 "$WORK/gwparent"
run_agent "$d" --check
check "a sticky world-writable parent is accepted (rc=$RC)" test "$RC" -eq 0
chmod 0755 "$WORK/gwparent"
chown 65534 "$WORK/gwparent"
expect_refusal "parent directory not root-owned" "$d" \
	"module directory $d: parent directory $WORK/gwparent: owned by uid 65534, expected root (uid 0)"

# Nothing was started by any refusal: no socket was ever created.
check "no refusal opened the API socket" test ! -e "$WORK/fibril.sock"

finish
