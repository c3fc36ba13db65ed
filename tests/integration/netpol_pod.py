#!/usr/bin/env python3
"""tests/integration/netpol_pod.py - one pod of the network policy
conformance test (netpol_conformance.sh), run inside the pod's network
namespace with `ip netns exec`:

  netpol_pod.py CONTROL_SOCKET [--serve PORT,...]

serves TCP and UDP on each PORT (TCP answers "ok\\n" and closes, UDP echoes
the datagram), and answers probe requests on a Unix socket (a file, so the
test driver reaches it from any namespace): one JSON line
{"probes": [[ip, port, "tcp"|"udp"], ...], "timeout": s, "source": ip|null}
gets one JSON line [true|false, ...], every probe run at once in its own
thread (a dropped probe costs its timeout, not more). Stdlib only."""
import json
import os
import socket
import sys
import threading


def bound(port, kind):
    srv = socket.socket(socket.AF_INET, kind)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    if kind == socket.SOCK_STREAM:
        srv.listen(512)
    return srv


def serve_tcp(srv):
    while True:
        conn, _ = srv.accept()
        try:
            conn.sendall(b"ok\n")
        except OSError:
            pass
        conn.close()


def serve_udp(srv):
    while True:
        data, peer = srv.recvfrom(64)
        try:
            srv.sendto(data, peer)
        except OSError:
            pass


def probe_one(ip, port, proto, timeout, source):
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(socket.AF_INET, kind)
    s.settimeout(timeout)
    try:
        if source:
            s.bind((source, 0))
        if proto == "tcp":
            s.connect((ip, port))
            return s.recv(3) == b"ok\n"
        token = os.urandom(8)
        s.connect((ip, port))
        s.send(token)
        return s.recv(64) == token
    except OSError:
        return False
    finally:
        s.close()


def handle(conn):
    with conn:
        f = conn.makefile("rwb")
        for line in f:
            req = json.loads(line)
            probes = req["probes"]
            out = [False] * len(probes)

            def run(i, p):
                out[i] = probe_one(p[0], int(p[1]), p[2], float(req.get("timeout", 1.0)),
                                   req.get("source"))

            threads = [threading.Thread(target=run, args=(i, p)) for i, p in enumerate(probes)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            f.write((json.dumps(out) + "\n").encode())
            f.flush()


def main():
    args = sys.argv[1:]
    control = args.pop(0)
    ports = []
    while args:
        opt = args.pop(0)
        if opt == "--serve":
            ports = [int(p) for p in args.pop(0).split(",") if p]
        else:
            sys.exit("unknown option " + opt)
    for p in ports:
        threading.Thread(target=serve_tcp, args=(bound(p, socket.SOCK_STREAM),), daemon=True).start()
        threading.Thread(target=serve_udp, args=(bound(p, socket.SOCK_DGRAM),), daemon=True).start()
    try:
        os.unlink(control)
    except FileNotFoundError:
        pass
    ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ctl.bind(control + ".tmp")
    ctl.listen(16)
    os.rename(control + ".tmp", control)  # ready once the name exists
    while True:
        conn, _ = ctl.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
