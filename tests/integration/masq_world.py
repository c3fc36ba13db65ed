#!/usr/bin/env python3
# tests/integration/masq_world.py - the "world" end of the masquerading
# tests (tests/integration/masq.sh): a server outside the cluster that
# tells each client the address it saw, and the client a pod runs.
#   serve PORT LOG [ADDR...]
#                    TCP on PORT (every address), UDP on PORT of each ADDR
#                    (a socket each: an answer leaves from the address the
#                    datagram came to, as a NAT needs; no ADDR: the wildcard):
#                    each answers "SEEN <source address>"; ICMP echo
#                    requests seen (a raw socket) are logged "icmp <source>";
#                    every UDP datagram "udp <source>"; every TCP peer
#                    "tcp <source>"
#                    (each line or datagram is answered "SEEN <source> <it>")
#   probe HOST PORT  from a pod: one TCP exchange and one UDP exchange;
#                    prints "tcp SEEN <addr> hello" and "udp SEEN <addr>
#                    hello", exits 1 when either failed
#   send HOST PORT   one UDP datagram, no answer awaited
#   big HOST PORT SIZE
#                    one UDP datagram of SIZE bytes (fragments on a 1500
#                    MTU) starting "BIG"; the server answers it whole,
#                    after "SEEN <source> " (fragments the other way);
#                    prints "big SEEN <addr> <bytes back>", exits 1 unless
#                    the answer carries the datagram unchanged
#   clients HOST PORT N SECONDS NAME
#                    N clients at once, each a TCP connection and a UDP
#                    socket of its own, each sending its own tokens
#                    (NAME-i-k) for SECONDS and checking that every answer
#                    is its own token, from one unchanging address; prints
#                    "ok NAME-i" or "FAIL NAME-i why" per client, exits 1
#                    when any failed
import select
import socket
import sys
import threading


def log(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")


def serve(port, path, addrs):
    fam = socket.AF_INET6
    tcp = socket.socket(fam, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    tcp.bind(("::", port))
    tcp.listen(128)
    udps = []
    for a in addrs or ["::"]:
        u = socket.socket(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_DGRAM)
        if a == "::":
            u.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        u.bind((a, port))
        udps.append(u)
    icmp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    icmp6 = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)

    def plain(addr):
        return addr[7:] if addr.startswith("::ffff:") else addr

    def answer(conn, peer):
        try:
            conn.settimeout(30)
            f = conn.makefile("rb")
            for line in f:
                conn.sendall(("SEEN %s %s\n" % (peer, line.decode().strip())).encode())
        except OSError:
            pass
        conn.close()

    log(path, "ready")
    while True:
        r, _, _ = select.select([tcp, icmp, icmp6] + udps, [], [])
        for s in r:
            if s is tcp:
                conn, addr = tcp.accept()
                peer = plain(addr[0])
                log(path, "tcp " + peer)
                threading.Thread(target=answer, args=(conn, peer), daemon=True).start()
            elif s in udps:
                udp = s
                data, addr = udp.recvfrom(65535)
                peer = plain(addr[0])
                log(path, "udp %s %d" % (peer, len(data)))
                if data.startswith(b"BIG"):
                    answer_dgram = ("SEEN %s " % peer).encode() + data
                else:
                    answer_dgram = ("SEEN %s %s\n" % (peer, data.decode(errors="replace").strip()[:64])).encode()
                try:  # a source the world has no route to (not masqueraded)
                    udp.sendto(answer_dgram, addr)
                except OSError:
                    pass
            elif s is icmp:
                data, addr = icmp.recvfrom(65535)
                ihl = (data[0] & 15) * 4
                if len(data) > ihl and data[ihl] == 8:
                    log(path, "icmp " + addr[0])
            else:
                data, addr = icmp6.recvfrom(65535)
                if data and data[0] == 128:
                    log(path, "icmp " + addr[0].split("%")[0])


def probe(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    ok = True
    try:
        c = socket.create_connection((host, port), timeout=5)
        c.sendall(b"hello\n")
        print("tcp " + c.recv(100).decode().strip())
        c.close()
    except OSError as e:
        print("tcp FAILED %s" % e)
        ok = False
    u = socket.socket(fam, socket.SOCK_DGRAM)
    u.settimeout(2)
    for _ in range(3):
        try:
            u.sendto(b"hello", (host, port))
            print("udp " + u.recv(100).decode().strip())
            break
        except OSError:
            continue
    else:
        print("udp FAILED no answer")
        ok = False
    return 0 if ok else 1


def client(host, port, seconds, name, results):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    import time
    seen = None
    try:
        c = socket.create_connection((host, port), timeout=5)
        f = c.makefile("rb")
        u = socket.socket(fam, socket.SOCK_DGRAM)
        u.settimeout(2)
        end = time.monotonic() + seconds
        k = 0
        while True:
            token = "%s-%d" % (name, k)
            c.sendall((token + "\n").encode())
            got = f.readline().decode().split()
            if len(got) != 3 or got[0] != "SEEN" or got[2] != token:
                raise RuntimeError("tcp answer %r to %s" % (got, token))
            if seen is None:
                seen = got[1]
            if got[1] != seen:
                raise RuntimeError("tcp seen as %s then %s" % (seen, got[1]))
            for _ in range(5):
                u.sendto(token.encode(), (host, port))
                try:
                    ans = u.recv(200).decode().split()
                except socket.timeout:
                    continue
                if len(ans) != 3 or ans[2] != token:
                    raise RuntimeError("udp answer %r to %s" % (ans, token))
                break
            else:
                raise RuntimeError("udp: no answer to %s" % token)
            k += 1
            if time.monotonic() >= end:
                break
            time.sleep(0.2)  # sleep: the client paces its requests over the test's span
        c.close()
        results.append("ok %s seen=%s exchanges=%d" % (name, seen, k + 1))
    except Exception as e:  # any failure is this client's verdict
        results.append("FAIL %s %s" % (name, e))


def clients(host, port, n, seconds, name):
    results = []
    threads = [threading.Thread(target=client, args=(host, port, seconds, "%s-%d" % (name, i), results))
               for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in sorted(results):
        print(r)
    return 0 if len(results) == n and all(r.startswith("ok") for r in results) else 1


def big(host, port, size):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    u = socket.socket(fam, socket.SOCK_DGRAM)
    u.settimeout(2)
    payload = b"BIG" + bytes((i * 7) % 251 for i in range(size - 3))
    for _ in range(3):
        u.sendto(payload, (host, port))
        try:
            ans = u.recv(65535)
        except socket.timeout:
            continue
        head, _, rest = ans.partition(b" ")
        addr, _, body = rest.partition(b" ")
        ok = head == b"SEEN" and body == payload
        print("big SEEN %s %d%s" % (addr.decode(errors="replace"), len(body), "" if ok else " MISMATCH"))
        return 0 if ok else 1
    print("big FAILED no answer")
    return 1


def send(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    socket.socket(fam, socket.SOCK_DGRAM).sendto(b"hello", (host, port))
    return 0


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "serve":
        serve(int(sys.argv[2]), sys.argv[3], sys.argv[4:])
    elif cmd == "probe":
        sys.exit(probe(sys.argv[2], int(sys.argv[3])))
    elif cmd == "clients":
        sys.exit(clients(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]))
    elif cmd == "big":
        sys.exit(big(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    elif cmd == "send":
        sys.exit(send(sys.argv[2], int(sys.argv[3])))
    sys.exit(2)
