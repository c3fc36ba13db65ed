#!/usr/bin/env bash
# tests/bench/bench_nat_gc.sh - masquerading's GC cost (as root, by hand or
# from `make bench`; never by make check): one pass over a dp_nat of
# 100,000 and 1,000,000 entries (half as many flows, 10% of them idle),
# the per-entry walk beside the batch pass the module makes on the worker
# pool (bench_nat_gc compare: time and bpf() calls, same run). Nothing is
# asserted but that both passes removed the same entries.
# Environment: top_builddir (as make sets it).
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "bench_nat_gc: run as root (BPF maps)" >&2; exit 1; }
GC=$top_builddir/tests/bench/bench_nat_gc
[ -x "$GC" ] || { echo "bench_nat_gc: $GC is not built (make bench builds it)" >&2; exit 1; }
for n in 100000 1000000; do "$GC" compare "$n" 10; done
