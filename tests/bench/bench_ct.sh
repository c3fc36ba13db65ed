#!/usr/bin/env bash
# tests/bench/bench_ct.sh - issue 22's conntrack figures (as root, by hand or
# from `make bench`; never by make check), the reference and this tree side
# by side in one run: the datapath's BPF object of BASE_REF (default main,
# taken with git archive and compiled with the same clang flags; or a
# ready object in BASE_OBJ) and this build's bpf/fibril_dp.bpf.o, both run
# by tests/bench/bench_ct_prog (BPF_PROG_RUN):
#   (a) ns per packet of the paths the per-point conntrack entries and the
#       quota check touch (established flows, replies, new flows);
#   (b) pod a's established flows under a deny-all ingress, through a flood
#       of 3 x the TCP table in new flows from pod f and then from outside:
#       how many still get their replies (goal: all), at the flood's rate.
# Environment: top_srcdir, top_builddir; optional BASE_REF, BASE_OBJ,
# REPEAT (100000).
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "bench_ct: run as root (BPF, a network namespace)" >&2; exit 1; }
PROG=$top_builddir/tests/bench/bench_ct_prog
NEW=$top_builddir/bpf/fibril_dp.bpf.o
[ -x "$PROG" ] || { echo "bench_ct: $PROG is not built (make bench builds it)" >&2; exit 1; }
[ -f "$NEW" ] || { echo "bench_ct: $NEW is not built" >&2; exit 1; }
TMP=$(mktemp -d /tmp/bench_ct.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
BASE=${BASE_OBJ:-}
if [ -z "$BASE" ]; then
	ref=${BASE_REF:-main}
	git -C "$top_srcdir" archive "$ref" bpf | tar -x -C "$TMP" ||
		{ echo "bench_ct: cannot take bpf/ of $ref from git (set BASE_OBJ)" >&2; exit 1; }
	clang -O2 -g -target bpf "-I/usr/include/$(gcc -print-multiarch 2>/dev/null)" -I"$TMP/bpf" \
		-c "$TMP/bpf/fibril_dp.bpf.c" -o "$TMP/base.o"
	BASE=$TMP/base.o
	echo "reference: bpf/ of $ref ($(git -C "$top_srcdir" rev-parse --short "$ref"))"
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PROG" "$BASE" "$NEW" "${REPEAT:-100000}"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
