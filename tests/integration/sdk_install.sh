#!/usr/bin/env bash
# tests/integration/sdk_install.sh - what a packager and a vendor do: `make
# install` into a DESTDIR, check the layout, build the example module out of
# tree with its own plain Makefile against the installed SDK (pkg-config
# fibril-sdk only), and load it into the installed agent.
. "$top_srcdir/tests/lib/common.sh"

dest=$WORK/dest
make -C "$top_builddir" install DESTDIR="$dest" >"$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; exit 1; }
pc=$(find "$dest" -name fibril-sdk.pc)
check "fibril-sdk.pc is installed" test -n "$pc"
pcdir=$(dirname "$pc")
pkg() { PKG_CONFIG_LIBDIR="$pcdir" PKG_CONFIG_SYSROOT_DIR="$dest" pkg-config "$@" fibril-sdk; }
pkgvar() { PKG_CONFIG_LIBDIR="$pcdir" pkg-config --variable="$1" fibril-sdk; }
libdir=$(pkgvar libdir)
moduledir=$(pkgvar moduledir)
includedir=$(pkgvar includedir)
check "SDK headers are installed under include/fibril" test -f "$dest$includedir/fibril/fibril.h" -a -f "$dest$includedir/fibril/module.h"
check "libfibril.so.1 is installed" test -e "$dest$libdir/libfibril.so.1"
check "modules install to \$(libdir)/fibril/modules" test "$moduledir" = "$libdir/fibril/modules" -a -f "$dest$moduledir/hello.so"
agent=$(find "$dest" -path '*/sbin/fibril-agent' -type f)
check "fibril-agent is installed in sbin" test -n "$agent"
check "fibril is installed in bin" test -n "$(find "$dest" -path '*/bin/fibril' -type f)"
# the ABI in one place: <fibril/version.h> -> the .pc's abi_minor and Version
# and the library's file name (libfibril.so.1.MINOR.0) all agree with it
check "the .pc's abi_minor is the headers' FIBRIL_ABI_MINOR ($FIBRIL_ABI_MINOR)" \
	test "$(pkgvar abi_minor)" = "$FIBRIL_ABI_MINOR"
check "the .pc's Version is the library's (libfibril.so.$(pkg --modversion))" \
	test -f "$dest$libdir/libfibril.so.$(pkg --modversion)" -a "$(pkg --modversion)" = "1.$FIBRIL_ABI_MINOR.0"
check "the .pc gives only SDK flags" test "$(pkg --cflags | sed "s/ *$//")" = "-I$dest$includedir -fvisibility=hidden"

# The vendor's build: a copy of the example, its own Makefile, the installed SDK.
cp -r "$top_srcdir/sdk/examples/hello" "$WORK/vendor"
chmod -R u+w "$WORK/vendor"
rm -f "$WORK/vendor/hello.so"
if PKG_CONFIG_LIBDIR="$pcdir" PKG_CONFIG_SYSROOT_DIR="$dest" make -C "$WORK/vendor" \
	CFLAGS="-O2 -Wall -Wextra -Werror -Wno-unused-parameter" >"$WORK/vendor.log" 2>&1; then
	pass "the example builds out of tree against the installed SDK"
else
	fail "the example builds out of tree against the installed SDK"
	cat "$WORK/vendor.log"
fi
check "the vendor build used only the installed headers" contains "$(cat "$WORK/vendor.log")" "-I$dest$includedir"
check "the vendor module exports exactly fibril_module_entry" test "$(nm -D --defined-only "$WORK/vendor/hello.so" | awk '{print $3}')" = fibril_module_entry

# Load it into the installed agent.
vmods=$WORK/vendor-modules
mkdir -p "$vmods"
install -m 0644 "$WORK/vendor/hello.so" "$vmods/hello.so"
AGENT="$agent"
export LD_LIBRARY_PATH="$dest$libdir"
start_agent "$vmods" --set hello.greeting=howdy
check "the installed agent loads the vendor module" contains "$(api http://x/v1/modules)" "\"file\":\"$vmods/hello.so\""
check "the vendor module serves its route" contains "$(api 'http://x/v1/hello?name=vendor')" '"greeting":"howdy, vendor"'
check "the installed CLI talks to the installed agent" contains "$("$(find "$dest" -path '*/bin/fibril' -type f)" --socket "$WORK/fibril.sock" modules)" "hello"
stop_agent TERM

finish
