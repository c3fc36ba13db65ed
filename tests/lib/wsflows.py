#!/usr/bin/env python3
"""tests/lib/wsflows.py - a websocket client of the agent's flow stream
(/v1/flows/stream) for the tests and the benchmark, on the unix socket or
TCP: it connects with a query, writes every JSON line it receives to a file
(one per line) and stops after --count flow lines, --idle seconds without a
message, or --timeout seconds. --slow makes it a reader that reads nothing
for --stall seconds (with a tiny receive buffer), then reads on.
--ready FILE is created once the upgrade is done; --origin sends that
Origin header (as a browser would). --count-only writes no
line but {"flows": N, "lost": M, "seconds": S} at the end (the benchmark's
followers).

  wsflows.py SOCK_OR_HOST:PORT PATH?QUERY OUT [--count N] [--idle S]
             [--timeout S] [--slow --stall S] [--ready FILE] [--count-only]
"""
import argparse
import base64
import os
import socket
import struct
import sys
import time


def connect(where, path, rcvbuf=None, origin=None):
    if ":" in where and not where.startswith("/"):
        host, port = where.rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.connect((host, int(port)))
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.connect(where)
    key = base64.b64encode(os.urandom(16)).decode()
    host = where if ":" in where and not where.startswith("/") else "localhost"
    extra = "Origin: %s\r\n" % origin if origin else ""
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n%s"
               "Sec-WebSocket-Version: 13\r\n\r\n" % (path, host, key, extra)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            raise SystemExit("the agent closed the connection before the upgrade: %r" % head)
        head += b
    if not head.startswith(b"HTTP/1.1 101"):
        raise SystemExit("upgrade refused: %r" % head.split(b"\r\n")[0])
    return s


class Reader:
    def __init__(self, s):
        self.s = s
        self.buf = b""

    def need(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.s.settimeout(min(left, 1.0))
            try:
                b = self.s.recv(1 << 16)
            except socket.timeout:
                continue
            if not b:
                raise EOFError
            self.buf += b
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def message(self, deadline):
        data = b""
        while True:
            h = self.need(2, deadline)
            op, ln = h[0] & 0x0F, h[1] & 0x7F
            if ln == 126:
                ln = struct.unpack("!H", self.need(2, deadline))[0]
            elif ln == 127:
                ln = struct.unpack("!Q", self.need(8, deadline))[0]
            payload = self.need(ln, deadline)
            if op == 8:
                raise EOFError
            if op in (9, 10):
                continue
            data += payload
            if h[0] & 0x80:
                return data.decode()


def messages(r, a):
    """The stream's text messages until --timeout, --idle or the close."""
    end = time.monotonic() + a.timeout
    while True:
        deadline = end if not a.idle else min(end, time.monotonic() + a.idle)
        try:
            yield r.message(deadline)
        except (TimeoutError, EOFError):
            return


def count_only(r, a):
    import json
    flows = lost = 0
    first = last = None
    for msg in messages(r, a):
        now = time.monotonic()
        first = first or now
        last = now
        n = msg.count("\n") + 1
        if '"lost_events"' in msg:
            for line in msg.split("\n"):
                if '"lost_events"' in line:
                    lost += json.loads(line)["lost_events"]["num_events_lost"]
                    n -= 1
        flows += n
    with open(a.out, "w") as out:
        json.dump({"flows": flows, "lost": lost, "seconds": (last - first) if first else 0}, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("where")
    ap.add_argument("path")
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--idle", type=float, default=0)
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--slow", action="store_true")
    ap.add_argument("--stall", type=float, default=5)
    ap.add_argument("--ready")
    ap.add_argument("--count-only", action="store_true")
    ap.add_argument("--origin")
    a = ap.parse_args()
    s = connect(a.where, a.path, rcvbuf=4096 if a.slow else None, origin=a.origin)
    if a.ready:
        open(a.ready, "w").close()
    if a.slow:
        time.sleep(a.stall)  # sleep: a reader that stalls this long is the case tested
    r = Reader(s)
    if a.count_only:
        count_only(r, a)
        return 0
    flows = 0
    with open(a.out, "w") as out:
        for msg in messages(r, a):
            for line in msg.split("\n"):
                out.write(line + "\n")
                if '"lost_events"' not in line and '"error"' not in line:
                    flows += 1
            out.flush()
            if a.count and flows >= a.count:
                break
    s.close()


if __name__ == "__main__":
    sys.exit(main())
