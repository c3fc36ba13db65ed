#!/usr/bin/env python3
# tests/bench/bpf_lines.py - the source lines a perf profile's samples ran
# in fibril's BPF programs (run by tests/bench/bpf_lines.sh): reads
# `perf script -F ip,sym` of a `perf record -g` file and the bpf_jitlines
# dumps taken while it ran; each sample counts once, at the line of its
# innermost frame inside a fibril program (so a helper's time counts at
# the line that called it). Prints, per program, its samples and its
# busiest lines. Usage: bpf_lines.py PERF-SCRIPT-OUTPUT JITLINES-DUMP... [--top N]
import bisect
import collections
import sys


def load_dump(path):
    with open(path) as f:
        rows = f.read().splitlines()
    if not rows or not rows[0].startswith("ksym "):
        return None
    name = path.rsplit(".", 2)[-2] if path.count(".") >= 2 else path
    addrs, labels = [], []
    for row in rows[1:]:
        addr, rest = row.split(" ", 1)
        addrs.append(int(addr, 16))
        labels.append(rest.split(" ", 1)[1])
    return (int(rows[0].split()[1], 16), name, addrs, labels)


def main():
    args = sys.argv[1:]
    top = 20
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i:i + 2]
    if len(args) < 2:
        sys.exit("usage: bpf_lines.py PERF-SCRIPT-OUTPUT JITLINES-DUMP... [--top N]")
    tables = sorted(t for t in (load_dump(p) for p in args[1:]) if t)
    starts = [t[0] for t in tables]
    lines = collections.defaultdict(collections.Counter)
    total = collections.Counter()
    samples = 0
    with open(args[0]) as f:
        text = f.read()
    for sample in text.split("\n\n"):
        frames = [r.split() for r in sample.strip().split("\n") if r.strip()]
        if not frames:
            continue
        samples += 1
        for fr in frames:
            if len(fr) < 2 or not fr[1].startswith("bpf_prog_") or "_fibril_" not in fr[1]:
                continue
            ip = int(fr[0], 16)
            i = bisect.bisect_right(starts, ip) - 1
            if i < 0:
                break
            _, name, addrs, labels = tables[i]
            j = bisect.bisect_right(addrs, ip) - 1
            if j < 0:
                break
            lines[name][labels[j]] += 1
            total[name] += 1
            break
    print("samples %d; in fibril's programs %d" % (samples, sum(total.values())))
    for name in sorted(total, key=lambda n: -total[n]):
        print("%s %d" % (name, total[name]))
        for label, n in lines[name].most_common(top):
            print("  %6d  %s" % (n, label[:140]))


if __name__ == "__main__":
    main()
