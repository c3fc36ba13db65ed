#!/usr/bin/env bash
# tests/integration/module_boundary.sh - modules talk to the host only
# through the SDK headers: no source under modules/ includes anything from
# host/ or lib/ (by path, by climbing out with "../", or by a quoted name
# that only host/ or lib/ holds), and no module's build puts host/ or lib/
# on its include path. A helper both sides need belongs in the SDK (e.g.
# <fibril/compat.h>) or, for modules only, in modules/common.
# And the library inside libfibril (lib/) does not depend on the daemon
# (host/): the dependency goes host -> lib, so no source under lib/
# includes a host/ header, and lib/'s build does not put host/ on its
# include path.
. "$top_srcdir/tests/lib/common.sh"

cd "$top_srcdir"
mapfile -t sources < <(find modules -name '*.[ch]' | sort)
check "there are module sources to look at (${#sources[@]})" test "${#sources[@]}" -gt 20

# 1. an include naming host/ or lib/ or climbing out of the module's folder
bad=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<][^">]*(host/|lib/|\.\./)' "${sources[@]}" || true)
[ -z "$bad" ] || printf '%s\n' "$bad"
check "no module includes host/ or lib/ or climbs out with ../" test -z "$bad"

# 2. a quoted include whose name only host/ or lib/ has (found through an -I)
module_headers=$(find modules bpf -name '*.h' -printf '%f\n' | sort -u)
bad=""
for h in host/*.h lib/*.h; do
	name=$(basename "$h")
	grep -qx "$name" <<<"$module_headers" && continue
	hits=$(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]$name[\">]" "${sources[@]}" || true)
	bad="$bad$hits"
done
[ -z "$bad" ] || printf '%s\n' "$bad"
check "no module includes a header only host/ or lib/ holds" test -z "$bad"

# 3. no module's build flags put host/ or lib/ on the include path (by -I,
# or by the variables that carry those -I: HOST_CPPFLAGS, LIB_CPPFLAGS)
internal_inc='-I[^ ]*(host|/lib)\b|\$\((HOST|LIB)_CPPFLAGS\)'
bad=$( {
	grep -nE -- "$internal_inc" modules/*/Makefile.inc
	grep -nE '^(MODULE_C|MODCOMMON_|[a-z_]+_la_C(PP)?FLAGS)' Makefile.am | grep -v '^[0-9]*:libfibril' |
		grep -E -- "$internal_inc"
} || true)
[ -z "$bad" ] || printf '%s\n' "$bad"
check "no module build adds host/ or lib/ to its include path" test -z "$bad"

# ---- lib/ does not depend on host/ --------------------------------------------
mapfile -t lib_sources < <(find lib -name '*.[ch]' | sort)
check "there are lib/ sources to look at (${#lib_sources[@]})" test "${#lib_sources[@]}" -gt 5

# 4. an include naming host/ or climbing out of lib/
bad=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<][^">]*(host/|\.\./)' "${lib_sources[@]}" || true)
[ -z "$bad" ] || printf '%s\n' "$bad"
check "nothing in lib/ includes host/ or climbs out with ../" test -z "$bad"

# 5. a quoted include whose name only host/ has (internal.h, api_internal.h ...)
lib_headers=$(find lib -name '*.h' -printf '%f\n' | sort -u)
bad=""
for h in host/*.h; do
	name=$(basename "$h")
	grep -qx "$name" <<<"$lib_headers" && continue
	hits=$(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]$name[\">]" "${lib_sources[@]}" || true)
	bad="$bad$hits"
done
[ -z "$bad" ] || printf '%s\n' "$bad"
check "nothing in lib/ includes a header only host/ holds" test -z "$bad"

# 6. lib/'s build flags do not put host/ on the include path
lib_flags=$(grep -E '^(libfibril_lib_la_C(PP)?FLAGS|LIB_CPPFLAGS)' Makefile.am)
check "lib/'s build flags are where this test looks (libfibril_lib_la_CFLAGS)" \
	grep -q '^libfibril_lib_la_CFLAGS' <<<"$lib_flags"
bad=$(grep -E -- '-I[^ ]*host\b|\$\(HOST_CPPFLAGS\)' <<<"$lib_flags" || true)
[ -z "$bad" ] || printf '%s\n' "$bad"
check "lib/'s build does not add host/ to its include path" test -z "$bad"

finish
