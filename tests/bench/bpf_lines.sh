#!/usr/bin/env bash
# tests/bench/bpf_lines.sh - a line-level profile of fibril's BPF programs
# (as root, by hand, beside a benchmark that drives traffic, e.g.
# `SETUPS=native-bpf SECS=20 REPEAT=1 tests/bench/bench_crossnode.sh` in
# another shell): records every CPU with `perf record -g` for SECONDS,
# takes each loaded fibril_* tc program's line table (bpf_jitlines: the JIT
# addresses of its source lines), and prints per program how many samples
# ran in it and at which source lines (a helper's time counts at the line
# that called it). This machine's bpftool has no disassembler, so `bpftool
# prog dump jited linum` cannot do it. Needs perf (Debian's linux-perf).
# Usage: bpf_lines.sh [SECONDS (10)] [TOP (20)]; environment: top_srcdir
# (default: this script's tree), CC.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
SECS=${1:-10}
TOP=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "bpf_lines: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (perf -a, BPF program info)"
for tool in perf bpftool python3; do
	command -v "$tool" >/dev/null || die "$tool is not installed"
done
WORK=$(mktemp -d /tmp/fibril-bpf-lines.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
${CC:-cc} -std=gnu11 -O2 -Wall -Wextra -o "$WORK/bpf_jitlines" "$here/bpf_jitlines.c" -lbpf ||
	die "cannot build bpf_jitlines"
n=0
while read -r id name; do
	"$WORK/bpf_jitlines" "$id" >"$WORK/jit.$name.$id" 2>"$WORK/jit.err" || die "$(cat "$WORK/jit.err")"
	n=$((n + 1))
done < <(bpftool prog show | sed -n 's/^\([0-9]*\): sched_cls  name \(fibril_[a-z_]*\).*/\1 \2/p')
[ "$n" -gt 0 ] || die "no fibril program is loaded (start the benchmark first)"
perf record -a -g -o "$WORK/perf.data" -- sleep "$SECS" >/dev/null 2>&1 || die "perf record failed" # sleep: the window
perf script -i "$WORK/perf.data" -F ip,sym >"$WORK/perf.txt" 2>/dev/null || die "perf script failed"
python3 "$here/bpf_lines.py" "$WORK/perf.txt" "$WORK"/jit.* --top "$TOP"
