#!/usr/bin/env bash
# tests/integration/vendor_ipam.sh - what a vendor shipping its own IPAM mode
# does: `make install` fibril into a DESTDIR, build sdk/examples/vendor-ipam
# out of tree with its own plain Makefile against the installed SDK
# (pkg-config fibril-sdk only), put it next to the installed ipam-api (and
# ipam-cluster-pool, or a stand-in when that is not installed), and show
# that two ipam modes are refused as ambiguous until [providers] ipam =
# vendor-ipam chooses; then allocate through the API and the installed CLI.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "the agent only loads root-owned modules; run as root"

dest=$WORK/dest
make -C "$top_builddir" install DESTDIR="$dest" >"$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; exit 1; }
pc=$(find "$dest" -name fibril-sdk.pc)
check "fibril-sdk.pc is installed" test -n "$pc"
pcdir=$(dirname "$pc")
pkgvar() { PKG_CONFIG_LIBDIR="$pcdir" pkg-config --variable="$1" fibril-sdk; }
libdir=$(pkgvar libdir)
moduledir=$(pkgvar moduledir)
includedir=$(pkgvar includedir)
check "the SDK headers include ipam.h and ipalloc.h" test -f "$dest$includedir/fibril/ipam.h" -a -f "$dest$includedir/fibril/ipalloc.h"
[ -f "$dest$moduledir/ipam-api.so" ] || skip_or_fail "ipam-api is not installed (configured without it?)"
agent=$(find "$dest" -path '*/sbin/fibril-agent' -type f)
cli_bin=$(find "$dest" -path '*/bin/fibril' -type f)

# ---- the vendor's build: a copy of the example, its Makefile, the installed SDK ----

vendor=$WORK/vendor
cp -r "$top_srcdir/sdk/examples/vendor-ipam" "$vendor"
chmod -R u+w "$vendor"
rm -f "$vendor/vendor-ipam.so"
vmake() { PKG_CONFIG_LIBDIR="$pcdir" PKG_CONFIG_SYSROOT_DIR="$dest" make -C "$vendor" "$@"; }
if vmake CFLAGS="-O2 -Wall -Wextra -Wformat=2 -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Werror" \
	>"$WORK/vendor.log" 2>&1; then
	pass "vendor-ipam builds out of tree against the installed SDK"
else
	fail "vendor-ipam builds out of tree against the installed SDK"
	cat "$WORK/vendor.log"
	finish
fi
check "the build used only the installed headers" contains "$(cat "$WORK/vendor.log")" "-I$dest$includedir"
check "the module exports exactly fibril_module_entry" \
	test "$(nm -D --defined-only "$vendor/vendor-ipam.so" | awk '{print $3}')" = fibril_module_entry
check "it binds the address helpers at FIBRIL_1.2" contains "$(nm -D "$vendor/vendor-ipam.so")" "fibril_ip_parse@FIBRIL_1.2"
# The Makefile reads moduledir without the sysroot; DESTDIR places it.
vmake install DESTDIR="$dest" >"$WORK/vinstall.log" 2>&1 || cat "$WORK/vinstall.log"
check "make install puts vendor-ipam.so in the SDK's module directory" \
	test "$(stat -c %a "$dest$moduledir/vendor-ipam.so" 2>/dev/null)" = 644

# ---- the module directory: vendor-ipam, the installed ipam-api, a second mode ----

vmods=$WORK/vendor-modules
mkdir -p "$vmods"
chmod 0755 "$vmods"
install -m 0644 "$vendor/vendor-ipam.so" "$vmods/vendor-ipam.so"
install -m 0644 "$dest$moduledir/ipam-api.so" "$vmods/ipam-api.so"
printf 'c1/eth0 10.0.3.7\nc2/eth0 10.0.3.8\n' >"$WORK/table"
VENDOR=(--set "vendor-ipam.table=$WORK/table" --set vendor-ipam.cidr=10.0.3.0/24)

AGENT="$agent"
CLI="$cli_bin"
export LD_LIBRARY_PATH="$dest$libdir"

# The second ipam mode is the installed ipam-cluster-pool; when it is not
# installed (or does not provide ipam), a stand-in built from the test module.
other=ipam-cluster-pool
if [ -f "$dest$moduledir/ipam-cluster-pool.so" ]; then
	install -m 0644 "$dest$moduledir/ipam-cluster-pool.so" "$vmods/ipam-cluster-pool.so"
	run_agent "$vmods" "${VENDOR[@]}" --check
	case $OUT in
	*"ambiguous capability 'ipam'"*) ;;
	*)
		note_or_fail "the installed ipam-cluster-pool does not provide ipam; a stand-in does: $(echo "$OUT" | head -1)"
		rm -f "$vmods/ipam-cluster-pool.so"
		other="other-ipam"
		;;
	esac
else
	echo "NOTE: ipam-cluster-pool is not installed; a stand-in provides the second ipam"
	other="other-ipam"
fi
[ "$other" = ipam-cluster-pool ] || build_module "$vmods" other-ipam provides=ipam sdk="$dest$includedir"

# ---- two ipam modes and no choice ---------------------------------------------------

run_agent "$vmods" "${VENDOR[@]}"
check "without [providers] ipam the agent refuses two ipam modes" contains "$OUT" "ambiguous capability 'ipam'"
check "  naming both" contains "$OUT" "vendor-ipam ($vmods/vendor-ipam.so)"
check "  and how to choose" contains "$OUT" "choose one with [providers] ipam = NAME"
check "  exit 1" test "$RC" = 1

# ---- [providers] ipam = vendor-ipam: allocate through curl and the installed CLI ----

start_agent "$vmods" --set providers.ipam=vendor-ipam "${VENDOR[@]}"
modules=$(api http://x/v1/modules)
check "the installed agent loads the vendor module" contains "$modules" "\"file\":\"$vmods/vendor-ipam.so\""
check "vendor-ipam and ipam-api run; $other lost the choice and is not started" python3 - "$modules" "$other" <<'PY'
import json, sys
mods = {m["name"]: m for m in json.loads(sys.argv[1])["modules"]}
assert mods["vendor-ipam"]["state"] == "running" and mods["vendor-ipam"]["provides"] == ["ipam"], mods
assert mods["ipam-api"]["state"] == "running" and mods["ipam-api"]["requires"] == ["ipam"], mods
assert mods["ipam-api"]["after"] == ["vendor-ipam"], mods["ipam-api"]
assert mods[sys.argv[2]]["state"] != "running", mods[sys.argv[2]]
PY

code=$(api -X POST -o "$WORK/body" -w '%{http_code}' 'http://x/v1/ipam?owner=c1/eth0')
check "curl: POST /v1/ipam allocates from the vendor's table" test "$code:$(cat "$WORK/body")" = \
	'201:{"owner":"c1/eth0","addresses":[{"family":"ipv4","address":"10.0.3.7","cidr":"10.0.3.0/24","gateway":"10.0.3.1"}]}'
code=$(api -X POST -o "$WORK/body" -w '%{http_code}' 'http://x/v1/ipam?family=ipv6&owner=c1/eth0')
check "curl: the error names the chosen ipam mode" test "$code:$(cat "$WORK/body")" = \
	'400:{"error":"family ipv6 is not offered by the ipam mode (vendor-ipam)","code":400}'
fib() { "$CLI" --socket "$WORK/fibril.sock" "$@"; }
check "the installed CLI allocates a given address" contains "$(fib ipam allocate --ip 10.0.3.8 c2/eth0)" "10.0.3.8  ipv4"
check "the installed CLI lists both" test "$(fib ipam list | sed -n 2,3p)" = "10.0.3.7  c1/eth0
10.0.3.8  c2/eth0"
check "the installed CLI shows the IPAM line" contains "$(fib status)" "IPAM:       2/2 allocated from 10.0.3.0/24"
check "the installed CLI releases by owner" test "$(fib ipam release --owner c1/eth0)" = "released 10.0.3.7"
check "the installed CLI releases an address" test "$(fib -o json ipam release 10.0.3.8 | tr -d ' \n')" = '{"released":["10.0.3.8"]}'
stop_agent TERM

finish
