#!/usr/bin/env python3
# tests/bench/lb_restart_probe.py - the prober and the backend of
# tests/bench/bench_lb_k8s_restart.sh (issue 23: refusals while an agent
# with 10,000 Kubernetes Services is killed and restarted).
#
#   serve PORT
#       accept TCP connections on every address of this netns (an "any IP"
#       local route gives a backend pod a whole prefix) and close them at
#       once; one thread, so thousands of connections a second cost little.
#   probe TARGETS RATE
#       TCP connect() to the ADDR:PORT lines of TARGETS round-robin, RATE
#       connects a second, each with a 0.5 s timeout, until SIGTERM or
#       SIGINT; then one JSON line: attempted, refused (every failed
#       connect: refused, unreachable, timed out), refused_targets (how many
#       targets refused at least once), longest_ms (the longest time one
#       target refused: its first failed connect to its next success, or to
#       the end of the run) and span_ms (first refusal to last, all targets).
import json
import selectors
import signal
import socket
import sys
import time


def serve(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(4096)
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ)
    s.setblocking(False)
    while True:
        sel.select()
        while True:
            try:
                c, _ = s.accept()
            except BlockingIOError:
                break
            c.close()


def probe(targets_file, rate):
    targets = []
    with open(targets_file) as f:
        for line in f:
            line = line.strip()
            if line:
                host, port = line.rsplit(":", 1)
                targets.append((host, int(port)))
    if not targets:
        sys.exit("probe: no targets in " + targets_file)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    attempted = refused = 0
    failing_since = [None] * len(targets)  # first failed connect of the current run of failures
    ever_refused = set()
    longest = 0.0
    first_refusal = last_refusal = None
    interval = 1.0 / rate
    next_at = time.monotonic()
    i = 0
    while not stop:
        now = time.monotonic()
        if now < next_at:
            time.sleep(next_at - now)  # sleep: the probe rate
            continue
        next_at += interval
        if next_at < now - 1.0:  # fell behind by a second: do not burst to catch up
            next_at = now
        t = i % len(targets)
        i += 1
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(0.5)
        t0 = time.monotonic()
        try:
            s.connect(targets[t])
            ok = True
        except OSError:
            ok = False
        finally:
            s.close()
        attempted += 1
        if ok:
            if failing_since[t] is not None:
                longest = max(longest, t0 - failing_since[t])
                failing_since[t] = None
            continue
        refused += 1
        ever_refused.add(t)
        if failing_since[t] is None:
            failing_since[t] = t0
        if first_refusal is None:
            first_refusal = t0
        last_refusal = time.monotonic()
    end = time.monotonic()
    for since in failing_since:
        if since is not None:
            longest = max(longest, end - since)
    span = (last_refusal - first_refusal) if first_refusal is not None else 0.0
    print(json.dumps({"attempted": attempted, "refused": refused,
                      "refused_targets": len(ever_refused), "targets": len(targets),
                      "longest_ms": round(longest * 1e3, 1), "span_ms": round(span * 1e3, 1)}),
          flush=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "probe":
        probe(sys.argv[2], float(sys.argv[3]))
    else:
        sys.exit("usage: lb_restart_probe.py serve PORT | probe TARGETS RATE")


if __name__ == "__main__":
    main()
