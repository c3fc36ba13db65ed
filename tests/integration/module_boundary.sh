#!/usr/bin/env bash
# tests/integration/module_boundary.sh - modules talk to the host only
# through the SDK headers: no source under modules/ includes anything from
# host/ (by path, by climbing out with "../", or by a quoted name that only
# host/ holds), and no module's build puts host/ on its include path. A
# helper both sides need belongs in the SDK (e.g. <fibril/compat.h>) or, for
# modules only, in modules/common.
. "$top_srcdir/tests/lib/common.sh"

cd "$top_srcdir"
mapfile -t sources < <(find modules -name '*.[ch]' | sort)
check "there are module sources to look at (${#sources[@]})" test "${#sources[@]}" -gt 20

# 1. an include naming host/ or climbing out of the module's folder
bad=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<][^">]*(host/|\.\./)' "${sources[@]}" || true)
[ -z "$bad" ] || printf '%s\n' "$bad"
check "no module includes host/ or climbs out with ../" test -z "$bad"

# 2. a quoted include whose name only host/ has (found through an -I)
module_headers=$(find modules bpf -name '*.h' -printf '%f\n' | sort -u)
bad=""
for h in host/*.h; do
	name=$(basename "$h")
	grep -qx "$name" <<<"$module_headers" && continue
	hits=$(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]$name[\">]" "${sources[@]}" || true)
	bad="$bad$hits"
done
[ -z "$bad" ] || printf '%s\n' "$bad"
check "no module includes a header only host/ holds" test -z "$bad"

# 3. no module's build flags put host/ on the include path
bad=$( {
	grep -nE -- '-I[^ ]*host\b' modules/*/Makefile.inc
	grep -nE '^(MODULE_C|MODCOMMON_|[a-z_]+_la_C(PP)?FLAGS)' Makefile.am | grep -v '^[0-9]*:libfibril' |
		grep -E -- '-I[^ ]*host\b'
} || true)
[ -z "$bad" ] || printf '%s\n' "$bad"
check "no module build adds host/ to its include path" test -z "$bad"

finish
