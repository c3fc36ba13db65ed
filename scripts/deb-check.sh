#!/usr/bin/env bash
# scripts/deb-check.sh [TARBALL] - CI stage for the Debian packages (issue
# 13): builds the binary packages from the release tarball (default: the one
# `make dist`/distcheck left in build/gcc) plus debian/, then checks them:
# lintian (errors fail, remaining tags listed), dpkg-deb -c contents, that
# each module package's Depends match its module's `requires` as the agent
# reports them, and that the agent + a module set unpacked into a scratch
# root passes `fibril-agent --check`, while an ambiguous set (two IPAM
# modes) is named by the postinst check and resolved by a drop-in.
# Everything happens under build/deb.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$top" log -1 --format=%ct 2>/dev/null || date +%s)}
cd "$top"
tarball=${1:-$(ls build/gcc/fibril-*.tar.gz 2>/dev/null | head -1)}
[ -n "$tarball" ] && [ -f "$tarball" ] || { echo "deb-check: no release tarball (run make dist first)"; exit 1; }
work=$top/build/deb
# As a build daemon builds (issue 25): as an unprivileged user (root's CI
# makes one: fibril-build) in a group-writable tree (umask 002, as gbp and
# `git archive` leave it), with the package's own tests (no nocheck: what
# debian/rules runs must pass without root); then the same source again,
# with the next version, in another directory (the upgrade of
# deb-clean-root-test.sh; a build path leaking into a conffile shows there).
builder=$(id -un)
if [ "$(id -u)" -eq 0 ]; then
	id fibril-build >/dev/null 2>&1 || useradd --system --user-group --home-dir /nonexistent \
		--shell /usr/sbin/nologin fibril-build
	builder=fibril-build
fi
as_builder() {
	if [ "$(id -u)" -eq 0 ]; then
		setpriv --reuid=fibril-build --regid=fibril-build --init-groups env HOME="$work" "$@"
	else
		"$@"
	fi
}
# unpack SUBDIR VERSION : the tarball and debian/ into $work/SUBDIR, owned by
# the builder, group-writable (the .debs land there too, beside the source);
# VERSION (when set) a new changelog entry
unpack() {
	local dir=$work/$1
	mkdir -p "$dir"
	[ "$(id -u)" -ne 0 ] || chown fibril-build:fibril-build "$dir"
	(umask 002 && tar -C "$dir" -xzf "$tarball" && cp -a debian "$(echo "$dir"/fibril-*/)" &&
		chmod -R g+w "$dir")
	if [ -n "${2:-}" ]; then
		local s
		s=$(echo "$dir"/fibril-*/)
		{
			printf 'fibril (%s) unstable; urgency=medium\n\n  * Rebuild (deb-check: the upgrade test).\n\n' "$2"
			printf ' -- fibril maintainers <fibril@example.org>  %s\n\n' "$(date -R -u -d @"${SOURCE_DATE_EPOCH:-$(date +%s)}")"
			cat "$s/debian/changelog"
		} >"$s/debian/changelog.new" && mv "$s/debian/changelog.new" "$s/debian/changelog"
	fi
	[ "$(id -u)" -ne 0 ] || chown -R fibril-build:fibril-build "$dir"
}
# build SUBDIR OPTIONS : dpkg-buildpackage as the builder; the .debs land in $work/SUBDIR
build() {
	local s
	s=$(echo "$work/$1"/fibril-*/)
	(cd "$s" && umask 002 && as_builder env DEB_BUILD_OPTIONS="$2 noautodbgsym parallel=${JOBS:-2}" \
		dpkg-buildpackage -b -uc -us) >"$work/$1.build.log" 2>&1
}
if [ "${DEB_CHECK_REUSE:-}" != 1 ]; then
	rm -rf "$work"
	mkdir -p "$work"
	chmod 0755 "$work" # root's: the scratch root below holds modules the agent loads
	unpack v1
fi
src=$(echo "$work"/v1/fibril-*/)
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "PASS: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }

t0=$(date +%s)
if [ "${DEB_CHECK_REUSE:-}" != 1 ] && ! build v1 ""; then
	tail -60 "$work/v1.build.log"
	echo "deb-check: dpkg-buildpackage as $builder FAILED"
	exit 1
fi
echo "dpkg-buildpackage as $builder (unit tests included): $(($(date +%s) - t0)) s"
grep -E '^# (TOTAL|PASS|FAIL):' "$work/v1.build.log" | sed 's/^/  package build tests: /' | head -3 || true
mv "$work"/v1/*.deb "$work"/ 2>/dev/null || true
rm -rf "$work/root"
debs=("$work"/*.deb)
echo "packages (size in bytes):"
for d in "${debs[@]}"; do printf '  %-50s %8d\n' "$(basename "$d")" "$(stat -c %s "$d")"; done

# lintian: errors fail; warnings and below are listed
if command -v lintian >/dev/null; then
	# Suppressed: initial-upload-closes-no-bugs (the changelog's first entry
	# closes no ITP bug: these packages are not uploaded to Debian). Every
	# other tag, info, pedantic and experimental ones included, is listed
	# here; the overridden ones are justified beside their override
	# (debian/*.lintian-overrides). An error or a warning fails.
	lintian --tag-display-limit 0 --display-info --pedantic --display-experimental --suppress-tags initial-upload-closes-no-bugs \
		$(ls "$work"/*.deb | grep -v -- -dbgsym_) 2>&1 | grep -v 'running with root privileges' >"$work/lintian.log" || true
	sed 's/^/  lintian: /' "$work/lintian.log"
	check "lintian reports no errors and no warnings" bash -c '! grep -qE "^(E|W): " "$1"' _ "$work/lintian.log"
else
	fail "lintian is not installed"
fi

contents() { dpkg-deb -c "$work/$1"_*.deb | awk '{print $6}' | sed 's|^\./|/|'; }
has() { grep -qx -- "$2" <<<"$1" || { echo "  $3 lacks $2"; return 1; }; }
agent_files=$(contents fibril-agent)
check "fibril-agent has the agent, CLI, unit and config" bash -c '
	for f in /usr/sbin/fibril-agent /usr/bin/fibril /lib/systemd/system/fibril-agent.service \
		/etc/fibril/fibril.conf /etc/fibril/fibril.conf.d/ /usr/lib/fibril/check-config; do
		grep -qx -- "$f" <<<"$1" || { echo "  missing $f"; exit 1; }; done' _ "$agent_files"
check "fibril-agent has no module" bash -c '! grep -q "/fibril/modules/.*\.so$" <<<"$1"' _ "$agent_files"
check "fibril-cni installs into /usr/lib/cni" has "$(contents fibril-cni)" /usr/lib/cni/fibril-cni fibril-cni
check "libfibril1 has the soname" bash -c 'grep -q "/libfibril.so.1$" <<<"$1"' _ "$(contents libfibril1)"
check "libfibril-dev has headers, .pc and examples" bash -c '
	grep -q "/usr/include/fibril/module.h$" <<<"$1" && grep -q "/fibril-sdk.pc$" <<<"$1" &&
	grep -q "/usr/share/doc/libfibril-dev/examples/vendor-ipam/vendor_ipam.c$" <<<"$1"' _ "$(contents libfibril-dev)"
check "libfibril1's symbols file lists the versioned SDK symbols" bash -c '
	dpkg-deb -e "$1" "$2/libfibril1.control" && grep -q "fibril_module_name@FIBRIL_1.0" "$2/libfibril1.control/symbols"' \
	_ "$(ls "$work"/libfibril1_*.deb)" "$work"

# the scratch root: every package unpacked (no maintainer scripts run)
root=$work/root
mkdir -p "$root"
for d in "${debs[@]}"; do dpkg -x "$d" "$root"; done
moddir=$(echo "$root"/usr/lib/*/fibril/modules)
libdir=${moddir%/fibril/modules}
cat >"$work/agent" <<SH
#!/bin/sh
# the unpacked agent, reading the unpacked /etc/fibril and modules
exec env LD_LIBRARY_PATH="$libdir" "$root/usr/sbin/fibril-agent" --config "$root/etc/fibril/fibril.conf" \
	--set agent.module-dir="$moddir" "\$@"
SH
chmod +x "$work/agent"

mapfile -t modules < <(awk '!/^#/ && NF {print $1}' "$src/debian/modules")
for m in "${modules[@]}"; do
	files=$(contents "fibril-module-$m")
	check "fibril-module-$m ships $m.so and its commented defaults" bash -c '
		grep -q "/fibril/modules/$2.so$" <<<"$1" && grep -qx "/etc/fibril/fibril.conf.d/50-$2.conf" <<<"$1"' _ "$files" "$m"
	check "50-$m.conf sets nothing (every line a comment)" bash -c '! grep -v "^#" "$1" | grep -q .' _ \
		"$root/etc/fibril/fibril.conf.d/50-$m.conf"
done

# Depends == requires: recomputed here from the unpacked agent's view
"$work/agent" --set agent.modules="$(IFS=,; echo "${modules[*]}")" --list-modules >"$work/modules.list"
for m in "${modules[@]}"; do
	req=$(awk -v m="$m" '$1 == m { for (i = 2; i <= NF; i++) if ($i ~ /^requires=/) print substr($i, 10) }' "$work/modules.list")
	expected=""
	for cap in ${req//,/ }; do
		alts=$(awk -v c="$cap" '{ for (i = 2; i <= NF; i++) if ($i ~ /^provides=/ && ("," substr($i, 10) ",") ~ ("," c ",")) print "fibril-module-" $1 }' \
			"$work/modules.list" | paste -sd'|' | sed 's/|/ | /g')
		expected="$expected, $alts | fibril-$cap"
	done
	depends=$(dpkg-deb -f "$work/fibril-module-${m}"_*.deb Depends)
	mod_deps=$(sed -e 's/, */\n/g' <<<"$depends" | grep '^fibril-module-' | paste -sd, | sed 's/,/, /g' || true)
	check "fibril-module-$m Depends match its requires ($req): $mod_deps" test "$mod_deps" = "${expected#, }"
	check "fibril-module-$m depends on fibril-agent" grep -q 'fibril-agent (= ' <<<"$depends"
	prov=$(awk -v m="$m" '$1 == m { for (i = 2; i <= NF; i++) if ($i ~ /^provides=/) print substr($i, 10) }' "$work/modules.list")
	want_prov=$(for cap in ${prov//,/ }; do printf 'fibril-%s\n' "$cap"; done | paste -sd, | sed 's/,/, /g')
	got_prov=$(dpkg-deb -f "$work/fibril-module-${m}"_*.deb Provides || true)
	check "fibril-module-$m Provides the virtual package of each capability it provides (${want_prov:-none})" \
		test "$got_prov" = "$want_prov"
	check "fibril-module-$m recommends nothing (its wants are Suggests)" test -z "$(dpkg-deb -f "$work/fibril-module-${m}"_*.deb Recommends)"
done

# a module set: only the unambiguous one's .so files present
run_check() { "$work/agent" --check 2>&1; }
set_modules() {
	rm -f "$moddir"/*.so
	for m in "$@"; do dpkg -x "$work/fibril-module-${m}"_*.deb "$root"; done
}
set_modules ipam-cluster-pool ipam-api kvstore-etcd datapath endpoint
out=$(run_check) && rc=0 || rc=$?
check "agent + an unambiguous module set: the config check passes ($out)" test "$rc" -eq 0
set_modules ipam-cluster-pool ipam-k8s-podcidr k8s ipam-api
out=$(FIBRIL_AGENT="$work/agent" sh "$root/usr/lib/fibril/check-config" fibril-module-ipam-k8s-podcidr 2>&1) && rc=0 || rc=$?
check "two IPAM modes: the postinst check names the ambiguity ($out)" \
	bash -c '[ "$1" -ne 0 ] && grep -q "ambiguous capability .ipam." <<<"$2" && grep -q "fibril.conf.d" <<<"$2"' _ "$rc" "$out"
printf '[providers]\nipam = ipam-k8s-podcidr\n' >"$root/etc/fibril/fibril.conf.d/90-local.conf"
out=$(run_check) && rc=0 || rc=$?
check "a [providers] drop-in resolves it ($out)" test "$rc" -eq 0
rm -f "$root/etc/fibril/fibril.conf.d/90-local.conf"

# deploy/Containerfile: every package it names was built, and the agent
# accepts its module set with the DaemonSet ConfigMap's fibril.conf (the
# image is built with buildah by scripts/deb-image-test.sh, below)
cf_modules=$(sed -n 's/^ARG MODULES="\(.*\)"$/\1/p' "$top/deploy/Containerfile")
check "deploy/Containerfile names its modules (ARG MODULES: $cf_modules)" test -n "$cf_modules"
cf_missing=""
for p in libfibril1 fibril-agent fibril-cni $(printf 'fibril-module-%s ' $cf_modules); do
	ls "$work/${p}"_*.deb >/dev/null 2>&1 || cf_missing="$cf_missing $p"
done
check "every package deploy/Containerfile installs was built${cf_missing:+ (missing:$cf_missing)}" test -z "$cf_missing"
# the figure: installed size (dpkg's Installed-Size, KiB) of the agent alone
# and with the image's modules
isize() { local t=0 p; for p in "$@"; do t=$((t + $(dpkg-deb -f "$work/${p}"_*.deb Installed-Size))); done; echo "$t"; }
[ -z "$cf_missing" ] && echo "installed size: libfibril1 + fibril-agent $(isize libfibril1 fibril-agent) KiB;" \
	"+ fibril-cni + the image's modules ($cf_modules) $(isize libfibril1 fibril-agent fibril-cni \
	$(printf 'fibril-module-%s ' $cf_modules)) KiB"
awk '/^  fibril.conf: \|/ { on = 1; next } on && /^  [^ ]/ { on = 0 } on { sub(/^    /, ""); print }' \
	"$top/deploy/kubernetes/fibril.yaml" >"$work/configmap-fibril.conf"
awk '/^  05-fibril.conflist: \|/ { on = 1; next } on && /^  [^ ]/ { on = 0 } on { sub(/^    /, ""); print }' \
	"$top/deploy/kubernetes/fibril.yaml" >"$work/configmap-05-fibril.conflist"
set_modules $cf_modules
out=$(LD_LIBRARY_PATH="$libdir" "$root/usr/sbin/fibril-agent" --config "$work/configmap-fibril.conf" \
	--set agent.module-dir="$moddir" --set agent.read-cni-conf="$work/configmap-05-fibril.conflist" \
	--check 2>&1) && rc=0 || rc=$?
check "the image's modules + the ConfigMap's fibril.conf and CNI conflist pass fibril-agent --check ($out)" test "$rc" -eq 0

# --print-config names the provider the graph resolved; the CLI's --version
set_modules ipam-cluster-pool ipam-api kvstore-etcd datapath endpoint
out=$("$work/agent" --print-config 2>&1 | grep -A3 '^ipam\|^# ipam =' || true)
check "--print-config shows the resolved ipam provider" grep -q '^# resolved: ipam-cluster-pool' <<<"$out"
version=$(dpkg-deb -f "$(ls "$work"/fibril-agent_*.deb)" Version)
out=$("$root/usr/bin/fibril" --version 2>&1) && rc=0 || rc=$?
check "fibril --version answers without an agent ($out)" bash -c '[ "$1" -eq 0 ] && grep -qx "fibril $2" <<<"$3"' _ "$rc" "${version%-*}" "$out"

# libfibril1.symbols: each symbol stamped with the version that first
# shipped its node (debian/sdk-versions), not the version being built; a
# node the table does not know is refused
syms=$(sh "$top/debian/gen-symbols" "$top/sdk/libfibril.map" "$top/debian/sdk-versions")
check "the symbols file stamps FIBRIL_1.0's symbols with 0.1.0" grep -q '^ fibril_module_name@FIBRIL_1.0 0.1.0$' <<<"$syms"
printf 'FIBRIL_1.99 {\n\tglobal:\n\t\tfibril_future;\n};\n' >"$work/future.map"
check "gen-symbols refuses a node debian/sdk-versions does not date" \
	bash -c '! sh "$1/debian/gen-symbols" "$2" "$1/debian/sdk-versions" >/dev/null 2>&1' _ "$top" "$work/future.map"

# debian/control is what debian/gen-control writes from debian/modules
check "debian/control is generated from debian/modules (debian/gen-control --check)" sh "$top/debian/gen-control" --check

# the real thing: dpkg -i / -r / --purge on this machine, the vendor module
# built out of tree (scripts/deb-install-test.sh; root only, CI runs it)
if [ "$(id -u)" -eq 0 ] && [ "${DEB_INSTALL_TEST:-1}" != 0 ]; then
	if "$top/scripts/deb-install-test.sh" "$work" "$src" 2>&1 | tee "$work/install-test.log"; then
		pass "install test (dpkg -i, remove, purge, vendor package): $(tail -1 "$work/install-test.log")"
	else
		fail "install test (dpkg -i, remove, purge, vendor package): see above"
	fi
elif [ "${CI:-}" = true ]; then
	fail "install test: needs root"
else
	echo "SKIP: install test (not root, or DEB_INSTALL_TEST=0)"
fi

# ---- the rebuild: the next version, built in another directory -----------
version=$(dpkg-deb -f "$(ls "$work"/fibril-agent_*.deb)" Version)
next=${version%-*}-$((${version##*-} + 1))
rm -rf "$work/v2"
tb=$(date +%s)
if unpack v2 "$next" && build v2 nocheck; then
	pass "the rebuild ($next, in another directory, as $builder): $(($(date +%s) - tb)) s"
else
	tail -40 "$work/v2.build.log"
	fail "the rebuild ($next, in another directory, as $builder)"
fi
# conffiles: the same bytes from both builds (a conffile that changes with
# every build prompts the admin who edited it at every upgrade)
conffiles_of() {
	local d out=$1
	rm -rf "$out"
	mkdir -p "$out"
	for d in "$2"/*.deb; do dpkg-deb -x "$d" "$out"; done
	(cd "$out" && find etc -type f | sort | xargs md5sum)
}
c1=$(conffiles_of "$work/c1" "$work")
c2=$(conffiles_of "$work/c2" "$work/v2")
check "every conffile is byte for byte the same in both builds" diff <(echo "$c1") <(echo "$c2")
check "no conffile names a build directory" bash -c '! grep -rlE "/(tmp|build|home|nonexistent)/|debian/tmp" "$1/etc"' _ "$work/c1"
check "the shipped fibril.conf shows the real module directory" \
	grep -qx "# module-dir = /usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/fibril/modules" "$work/c1/etc/fibril/fibril.conf"

# ---- a machine that has nothing: mmdebstrap's minimal root ----------------
if [ "$(id -u)" -eq 0 ] && [ "${DEB_CLEAN_ROOT_TEST:-1}" != 0 ]; then
	if "$top/scripts/deb-clean-root-test.sh" "$work" "$work/v2" 2>&1 | tee "$work/clean-root-test.log"; then
		pass "clean-root test (apt install into a minimal root, start, pod, upgrade, remove, purge): $(tail -1 "$work/clean-root-test.log")"
	else
		fail "clean-root test: see above"
	fi
	if "$top/scripts/deb-image-test.sh" "$work" 2>&1 | tee "$work/image-test.log"; then
		pass "image test (deploy/Containerfile built with buildah; agent and plugin from the image): $(tail -1 "$work/image-test.log")"
	else
		fail "image test: see above"
	fi
elif [ "${CI:-}" = true ]; then
	fail "clean-root and image tests: need root"
fi

echo "deb-check: $(($(date +%s) - t0)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
