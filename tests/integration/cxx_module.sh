#!/usr/bin/env bash
# tests/integration/cxx_module.sh - a vendor can write a module in C++:
# every SDK header compiles on its own as C++17 and C++20 with g++ and
# clang++ (-Wall -Wextra -Wpedantic -Werror), and tests/modules/cxxmod.cpp,
# built each of those four ways, loads in the agent, reads its config (also
# through a deprecated alias), serves its route and summary, and exports
# only fibril_module_entry, constant-initialised like a C descriptor. C
# source compatibility is covered by every C module (`.requires`,
# FIBRIL_LIST) still building.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "needs root (the agent loads root-owned modules only)"
compilers=()
for cxx in "${CXX:-g++}" clang++; do
	command -v "$cxx" >/dev/null && compilers+=("$cxx")
done
[ ${#compilers[@]} = 2 ] || skip_or_fail "g++ and clang++ are both needed (have: ${compilers[*]:-none})"

for cxx in "${compilers[@]}"; do
	for std in c++17 c++20; do
		bad=""
		for h in "$top_srcdir"/sdk/include/fibril/*.h; do
			printf '#include <fibril/%s>\n' "$(basename "$h")" |
				"$cxx" -std="$std" -x c++ -fsyntax-only -Wall -Wextra -Wpedantic -Werror \
					-I"$top_srcdir/sdk/include" - >"$WORK/hdr.log" 2>&1 ||
				{ bad="$bad $(basename "$h")"; cat "$WORK/hdr.log"; }
		done
		check "$cxx -std=$std: every SDK header compiles alone as C++" test -z "$bad"
		printf '#include <fibril/fibril.h>\nint main(void) { return 0; }\n' >"$WORK/c.c"
	done
done
check "the headers still compile as C11 (C source compatibility)" \
	"$CC" -std=c11 -fsyntax-only -Wall -Wextra -Wpedantic -Werror -I"$top_srcdir/sdk/include" "$WORK/c.c"

for cxx in "${compilers[@]}"; do
	for std in c++17 c++20; do
		what="$(basename "$cxx") -std=$std"
		mods=$WORK/mods-$(basename "$cxx")-$std
		mkdir -p "$mods"
		chmod 0755 "$mods"
		if ! "$cxx" -std="$std" -shared -fPIC -fvisibility=hidden -fvisibility-inlines-hidden \
			-Wall -Wextra -Werror -I"$top_srcdir/sdk/include" -o "$mods/cxxmod.so" \
			"$top_srcdir/tests/modules/cxxmod.cpp" -L"$top_builddir/.libs" -lfibril; then
			fail "$what: cxxmod.cpp builds with -Wall -Wextra -Werror"
			continue
		fi
		pass "$what: cxxmod.cpp builds with -Wall -Wextra -Werror"
		chmod 0644 "$mods/cxxmod.so"
		sec=$(readelf -sW "$mods/cxxmod.so" | awk '$8 == "fibril_module_entry" && !s {print $7; s = 1}')
		sec=$(readelf -SW "$mods/cxxmod.so" | sed 's/\[ */[/' | awk -v i="[$sec]" '$1 == i {print $2}')
		check "$what: the descriptor is constant data ($sec), read before any code runs" \
			test "$sec" = .data.rel.ro
		exported=$(nm -D --defined-only "$mods/cxxmod.so" | awk '$2 ~ /[A-Z]/ && $2 != "W" && $2 != "V" && $2 != "U" {print $3}')
		check "$what: it exports fibril_module_entry (strong symbols)" test "$exported" = fibril_module_entry
		start_agent "$mods" --set "cxxmod.salutation=hi $std"
		r=$(api http://x/v1/cxx/hello || true)
		check "$what: the agent loads and starts it; its route answers with its config" \
			contains "$r" "\"greeting\":\"hi $std\""
		check "$what: FIBRIL_SERVICE_HAS works in C++" contains "$r" '"kvstore_has_txn":true'
		api http://x/v1/cxx/hello >/dev/null || true
		check "$what: its summary hook runs" contains "$(api http://x/v1/status)" '2 hellos'
		check "$what: it stops cleanly" stop_agent TERM
	done
done

finish
