# tests/bench/bench_lib.sh - setup shared by the benches that run real
# agents in network namespaces (bench_rss.sh, bench_endpoints.sh); sourced
# after tests/lib/common.sh ($WORK, cleanup) with BENCH_NAME set (the
# prefix of error messages):
#   bench_die MSG...                 the message on stderr, exit 1
#   bench_require TOOL...            root, and each tool installed
#   bench_require_modules SO...      each module built under $top_builddir
#   bench_find_agent                 AGENT_BIN: the real fibril-agent (not
#                                    libtool's wrapper: a shell start would be
#                                    in every timing and $! not the agent);
#                                    exports LD_LIBRARY_PATH for its libfibril
#   bench_install_modules DIR SO...  root-owned copies the agent will load
#   bench_kill_netns NS...           kill the agents whose pids are in
#                                    $WORK/*.pid and every process in the
#                                    namespaces, then delete them (with the
#                                    veths and routes in them)

bench_die() { echo "${BENCH_NAME:-bench}: $*" >&2; exit 1; }

bench_require() {
	local tool
	[ "$(id -u)" = 0 ] || bench_die "run as root (network namespaces, BPF)"
	for tool in "$@"; do command -v "$tool" >/dev/null || bench_die "$tool is not installed"; done
}

bench_require_modules() {
	local so
	for so in "$@"; do
		[ -f "$top_builddir/.libs/$so.so" ] || bench_die "$so.so is not built (make -C $top_builddir $so.la)"
	done
}

bench_find_agent() {
	local f
	AGENT_BIN=""
	for f in "$top_builddir/fibril-agent" "$top_builddir/.libs/lt-fibril-agent" "$top_builddir/.libs/fibril-agent"; do
		if [ -f "$f" ] && [ "$(head -c 4 "$f" | tr -d '\177')" = ELF ]; then AGENT_BIN=$f; break; fi
	done
	[ -n "$AGENT_BIN" ] || bench_die "no fibril-agent binary under $top_builddir (make fibril-agent)"
	export LD_LIBRARY_PATH="$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

bench_install_modules() {
	local dir=$1 so
	shift
	mkdir -p "$dir"
	chmod 0755 "$dir"
	for so in "$@"; do install -m 0644 "$top_builddir/.libs/$so.so" "$dir/"; done
}

bench_kill_netns() {
	local f p ns
	for f in "$WORK"/*.pid; do
		[ -f "$f" ] || continue
		p=$(cat "$f")
		[ -n "$p" ] && kill -KILL "$p" 2>/dev/null
	done
	for ns in "$@"; do
		[ -e "/run/netns/$ns" ] || continue
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
	done
	for ns in "$@"; do
		[ -e "/run/netns/$ns" ] && ip netns del "$ns" 2>/dev/null
	done
	return 0
}
