#!/usr/bin/env python3
"""tests/lib/lbnet.py - the traffic of tests/integration/lb.sh and the lb
benchmark: backends that answer with their name, and clients that talk to a
service address and report which backend answered.

  serve NAME PORT            TCP and UDP on PORT (IPv4 and IPv6): each line
                             (TCP) or datagram (UDP) is answered with NAME
  tcp ADDR PORT N            N connections, one line each; prints JSON
                             {"backends": {name: count}, "peers": [...],
                              "errors": {errno name: count}, "max_s": ...}
  udp ADDR PORT N            N requests from one unconnected socket
                             (sendto/recvfrom); same JSON, "peers" are the
                             addresses recvfrom reported
  tcpsrc ADDR PORT N         as tcp, but asks each backend which source
                             address it sees ("src?"); JSON adds
                             "sources": {address: count}
  hold ADDR PORT FILE        one long connection: a line every 0.1 s,
                             appends "ok NAME" / "error WHY" to FILE until
                             killed or the connection fails
"""
import errno
import json
import socket
import sys
import threading
import time


def serve(name, port):
    reply = (name + "\n").encode()

    def tcp_conn(c):
        with c:
            peer = c.getpeername()[0]
            if peer.startswith("::ffff:"):
                peer = peer[7:]
            f = c.makefile("rb")
            for line in f:
                try:
                    c.sendall(("%s %s\n" % (name, peer)).encode() if line.strip() == b"src?" else reply)
                except OSError:
                    return

    def tcp():
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("::", port))
        s.listen(512)
        while True:
            c, _ = s.accept()
            threading.Thread(target=tcp_conn, args=(c,), daemon=True).start()

    def udp():
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind(("::", port))
        while True:
            _, peer = s.recvfrom(2048)
            s.sendto(reply, peer)

    threading.Thread(target=udp, daemon=True).start()
    tcp()


def fmt(peer):
    return ("[%s]:%d" if ":" in peer[0] else "%s:%d") % peer[:2]


def add(d, k):
    d[k] = d.get(k, 0) + 1


def tcp(addr, port, n, src=False):
    out = {"backends": {}, "peers": [], "errors": {}, "max_s": 0.0}
    if src:
        out["sources"] = {}
    for _ in range(n):
        t0 = time.monotonic()
        try:
            with socket.create_connection((addr, port), timeout=3) as c:
                peer = fmt(c.getpeername())
                if peer not in out["peers"]:
                    out["peers"].append(peer)
                c.sendall(b"src?\n" if src else b"hi\n")
                name = c.makefile("rb").readline().decode().strip()
                if src:
                    name, _, seen = name.partition(" ")
                    add(out["sources"], seen or "?")
                add(out["backends"], name or "?")
        except OSError as e:
            add(out["errors"], errno.errorcode.get(e.errno, str(e)) if e.errno else type(e).__name__)
        out["max_s"] = max(out["max_s"], time.monotonic() - t0)
    print(json.dumps(out))


def udp(addr, port, n):
    out = {"backends": {}, "peers": [], "errors": {}, "max_s": 0.0}
    s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    for _ in range(n):
        try:
            s.sendto(b"q", (addr, port))
            data, peer = s.recvfrom(2048)
            p = fmt(peer)
            if p not in out["peers"]:
                out["peers"].append(p)
            add(out["backends"], data.decode().strip())
        except OSError as e:
            add(out["errors"], errno.errorcode.get(e.errno, str(e)) if e.errno else type(e).__name__)
    print(json.dumps(out))


def hold(addr, port, path):
    with open(path, "a", buffering=1) as log:
        try:
            c = socket.create_connection((addr, port), timeout=3)
            f = c.makefile("rb")
            while True:
                c.sendall(b"hi\n")
                line = f.readline().decode().strip()
                if not line:
                    log.write("error closed\n")
                    return
                log.write("ok %s\n" % line)
                time.sleep(0.1)  # sleep: paces the held connection's exchanges (one every 100 ms)
        except OSError as e:
            log.write("error %s\n" % (errno.errorcode.get(e.errno, str(e)) if e.errno else e))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    elif cmd == "tcp":
        tcp(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "tcpsrc":
        tcp(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), src=True)
    elif cmd == "udp":
        udp(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "hold":
        hold(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit("usage: lbnet.py serve|tcp|udp|hold ...")
