#!/usr/bin/env bash
# tests/integration/install_default_conf.sh - what a newcomer's `make
# install` does (issue 26): it prints no libtool warnings (the relinking of
# each module is expected), and installs the default config the README's
# Running section names, $(sysconfdir)/fibril/fibril.conf: every [agent] key
# commented out with its default, a file the agent reads as it is. An admin's
# changed file survives a second install and an uninstall; an unchanged one
# goes with the uninstall.
. "$top_srcdir/tests/lib/common.sh"

dest=$WORK/dest
make -C "$top_builddir" install DESTDIR="$dest" >"$WORK/install.out" 2>"$WORK/install.err" ||
	{ cat "$WORK/install.out" "$WORK/install.err"; fail "make install"; finish; }
check "make install prints no libtool warning ($(grep -c 'libtool: warning' "$WORK/install.err" || true) lines)" \
	eval '! grep -q "libtool: warning" "$WORK/install.err"'
sysconfdir=$(sed -n "s|^sysconfdir = ||p" "$top_builddir/Makefile")
prefix=$(sed -n "s|^prefix = ||p" "$top_builddir/Makefile")
sysconfdir=${sysconfdir//'${prefix}'/$prefix}
conf=$dest$sysconfdir/fibril/fibril.conf
check "the default config is installed ($sysconfdir/fibril/fibril.conf)" test -f "$conf"
check "  with its drop-in directory fibril.conf.d/" test -d "$dest$sysconfdir/fibril/fibril.conf.d"
check "  it is an [agent] section, every key commented out" \
	eval 'grep -qx "\[agent\]" "$conf" && ! grep -Eq "^[a-z-]+ *=" "$conf" && grep -Eq "^# socket = /" "$conf"'
keys=$("$AGENT" --config /dev/null --untrusted-module-dir --print-config --set "agent.module-dir=$WORK" 2>/dev/null |
	awk '/^\[/ { on = ($0 == "[agent]") } on && /^[a-z-]+ *=/ { sub(/ *=.*/, ""); print }')
missing=""
for k in $keys; do grep -q "^# $k = " "$conf" || missing="$missing $k"; done
check "  every [agent] key the agent has is in it (missing:${missing:- none})" test -z "$missing"
check "  each shown with its default, not this build's values (module-dir)" \
	grep -q "^# module-dir = $prefix/lib" "$conf"
out=$("$AGENT" --config "$conf" --untrusted-module-dir --print-config --set "agent.module-dir=$WORK" 2>&1) &&
	rc=0 || rc=$?
check "the agent reads it as it is" test "$rc" = 0
check "  and every value comes from its default" \
	eval '! grep -q "from: $conf" <<<"$out"'

echo "# the admin's" >>"$conf"
make -C "$top_builddir" install DESTDIR="$dest" >/dev/null 2>&1
check "a second install keeps the admin's changed file" grep -qx "# the admin's" "$conf"
make -C "$top_builddir" uninstall DESTDIR="$dest" >/dev/null 2>&1
check "uninstall keeps it too" grep -qx "# the admin's" "$conf"
rm -f "$conf"
make -C "$top_builddir" install DESTDIR="$dest" >/dev/null 2>&1
make -C "$top_builddir" uninstall DESTDIR="$dest" >/dev/null 2>&1
check "uninstall removes an unchanged one" test ! -e "$conf"
finish
