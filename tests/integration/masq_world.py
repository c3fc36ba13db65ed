#!/usr/bin/env python3
# tests/integration/masq_world.py - the "world" end of the masquerading
# tests (tests/integration/masq.sh): a server outside the cluster that
# tells each client the address it saw, and the client a pod runs.
#   serve PORT LOG   TCP and UDP on PORT (every address of the namespace):
#                    each answers "SEEN <source address>"; ICMP echo
#                    requests seen (a raw socket) are logged "icmp <source>";
#                    every UDP datagram "udp <source>"; every TCP peer
#                    "tcp <source>"
#   probe HOST PORT  from a pod: one TCP exchange and one UDP exchange;
#                    prints "tcp SEEN <addr>" and "udp SEEN <addr>", exits 1
#                    when either failed
#   send HOST PORT   one UDP datagram, no answer awaited
import select
import socket
import sys
import threading


def log(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")


def serve(port, path):
    fam = socket.AF_INET6
    tcp = socket.socket(fam, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    tcp.bind(("::", port))
    tcp.listen(128)
    udp = socket.socket(fam, socket.SOCK_DGRAM)
    udp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    udp.bind(("::", port))
    icmp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    icmp6 = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)

    def plain(addr):
        return addr[7:] if addr.startswith("::ffff:") else addr

    def answer(conn, peer):
        try:
            conn.settimeout(5)
            conn.recv(100)
            conn.sendall(("SEEN " + peer + "\n").encode())
        except OSError:
            pass
        conn.close()

    log(path, "ready")
    while True:
        r, _, _ = select.select([tcp, udp, icmp, icmp6], [], [])
        for s in r:
            if s is tcp:
                conn, addr = tcp.accept()
                peer = plain(addr[0])
                log(path, "tcp " + peer)
                threading.Thread(target=answer, args=(conn, peer), daemon=True).start()
            elif s is udp:
                data, addr = udp.recvfrom(65535)
                peer = plain(addr[0])
                log(path, "udp %s %d" % (peer, len(data)))
                try:  # a source the world has no route to (not masqueraded)
                    udp.sendto(("SEEN " + peer + "\n").encode(), addr)
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


def send(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    socket.socket(fam, socket.SOCK_DGRAM).sendto(b"hello", (host, port))
    return 0


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "serve":
        serve(int(sys.argv[2]), sys.argv[3])
    elif cmd == "probe":
        sys.exit(probe(sys.argv[2], int(sys.argv[3])))
    elif cmd == "send":
        sys.exit(send(sys.argv[2], int(sys.argv[3])))
    sys.exit(2)
