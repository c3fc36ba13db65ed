#!/usr/bin/env python3
# tests/integration/masq_crr.py - the two ends of masq_crr.sh: new TCP
# connections one after another through masquerading (netperf's TCP_CRR).
#   serve PORT LOG   TCP server: each connection's byte is echoed, then the
#                    server closes first (the TIME_WAIT stays on this side,
#                    the world's); logs "peer ADDR PORT" per connection
#   crr HOST PORT SECS
#                    from a pod: connect, one byte there and back, the
#                    server's FIN, close, again, for SECS seconds; prints
#                    "connections=N slow=M ports=P" (slow: a connection that
#                    took over 0.5 s, a SYN retransmitted; ports: distinct
#                    local ports used); exits 1 when a connection failed
#   once HOST PORT SPORT
#                    one exchange from local port SPORT; exits 1 on failure
import socket
import sys
import time


def serve(port, path):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(512)
    with open(path, "a", buffering=1) as log:
        log.write("ready\n")
        while True:
            c, peer = srv.accept()
            try:
                b = c.recv(1)
                if b:
                    c.sendall(b)
                log.write("peer %s %d\n" % peer)
            except OSError:
                pass
            c.close()


def exchange(host, port, sport=0):
    c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if sport:
        c.bind(("0.0.0.0", sport))
    c.settimeout(10)
    c.connect((host, port))
    local = c.getsockname()[1]
    c.sendall(b"x")
    if c.recv(1) != b"x":
        raise OSError("no echo")
    while c.recv(64):  # the server's FIN
        pass
    c.close()
    return local


def crr(host, port, secs):
    n = slow = 0
    ports = set()
    end = time.monotonic() + secs
    while time.monotonic() < end:
        t = time.monotonic()
        try:
            ports.add(exchange(host, port))
        except OSError as e:
            print("connection %d failed: %s" % (n + 1, e))
            return 1
        n += 1
        if time.monotonic() - t > 0.5:
            slow += 1
    print("connections=%d slow=%d ports=%d" % (n, slow, len(ports)))
    return 0


def main():
    a = sys.argv[1:]
    if len(a) == 3 and a[0] == "serve":
        serve(int(a[1]), a[2])
    elif len(a) == 4 and a[0] == "crr":
        return crr(a[1], int(a[2]), float(a[3]))
    elif len(a) == 4 and a[0] == "once":
        exchange(a[1], int(a[2]), int(a[3]))
        return 0
    else:
        print("usage: masq_crr.py serve PORT LOG | crr HOST PORT SECS | once HOST PORT SPORT",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
