#!/usr/bin/env python3
# tests/security/masq_spoof.py - the three ends of masq_spoofed_reply.sh
# (Debian's scapy: run by /usr/bin/python3).
#   world ADDR PORT OUT        in the world: one UDP datagram on ADDR:PORT,
#                              its source ("ADDR PORT", the masquerade
#                              mapping as the world sees it) written to OUT,
#                              answered "LEGIT" from ADDR:PORT (the genuine
#                              reply); OUT.ready once it listens
#   pod HOST PORT SECS OUT     in the pod: a UDP socket sends "HELLO" to
#                              HOST:PORT (the mapping), then for SECS a raw
#                              socket on eth0 counts every frame carrying
#                              "SPOOF-" and every one carrying "LEGIT";
#                              writes "spoof=N legit=M ports=..." to OUT
#   attack NODE NATPORT WORLD PORT OTHER MIN MAX IFACE
#                              in the world: UDP and TCP packets carrying
#                              "SPOOF-..." to NODE:NATPORT from WORLD with a
#                              wrong source port, from OTHER with the right
#                              one and from OTHER with a wrong one, and to
#                              200 ports of MIN..MAX from WORLD:PORT (the
#                              live mapping's own destination); prints the
#                              count sent
import random
import socket
import sys
import time


def world(addr, port, out):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    open(out + ".ready", "w").close()  # bound: the pod may send
    data, peer = s.recvfrom(2048)
    with open(out, "w") as f:
        f.write("%s %d\n" % peer)
    time.sleep(1)  # sleep: the pod's sniffer is up before the genuine reply
    s.sendto(b"LEGIT", peer)


def pod(host, port, secs, out):
    raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    raw.bind(("eth0", 0))
    raw.settimeout(0.2)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("0.0.0.0", 0))
    u.sendto(b"HELLO", (host, port))
    spoof = legit = 0
    ports = set()
    end = time.monotonic() + secs
    while time.monotonic() < end:
        try:
            frame = raw.recv(65535)
        except socket.timeout:
            continue
        if b"SPOOF-" in frame:
            spoof += 1
            # IPv4 behind a 14-byte Ethernet header: the L4 destination port
            ihl = (frame[14] & 0xF) * 4
            ports.add(int.from_bytes(frame[14 + ihl + 2:14 + ihl + 4], "big"))
        elif b"LEGIT" in frame:
            legit += 1
    with open(out, "w") as f:
        f.write("spoof=%d legit=%d ports=%s\n" % (spoof, legit, sorted(ports)))


def attack(node, natport, world_addr, port, other, lo, hi, iface):
    from scapy.all import IP, TCP, UDP, Raw, sendp, Ether, conf  # noqa: E402
    conf.verb = 0
    pkts = []
    wrong = port + 1 if port < 65535 else port - 1
    for src, sport, tag in ((world_addr, wrong, "wrong-port"), (other, port, "other-addr"),
                            (other, wrong, "other-both")):
        pkts.append(IP(src=src, dst=node) / UDP(sport=sport, dport=natport) / Raw(b"SPOOF-" + tag.encode()))
        pkts.append(IP(src=src, dst=node) / TCP(sport=sport, dport=natport, flags="S", seq=1) /
                    Raw(b"SPOOF-tcp-" + tag.encode()))
        pkts.append(IP(src=src, dst=node) / TCP(sport=sport, dport=natport, flags="A", seq=1, ack=1) /
                    Raw(b"SPOOF-tcpack-" + tag.encode()))
    for p in random.sample(range(lo, hi + 1), min(200, hi - lo + 1)):
        if p == natport:
            continue
        pkts.append(IP(src=world_addr, dst=node) / UDP(sport=port, dport=p) / Raw(b"SPOOF-sweep"))
        pkts.append(IP(src=world_addr, dst=node) / TCP(sport=port, dport=p, flags="S") / Raw(b"SPOOF-sweep"))
    # to the node's MAC: the world's neighbour entry, resolved by the kernel
    from scapy.all import getmacbyip  # noqa: E402
    mac = getmacbyip(node)
    sendp([Ether(dst=mac) / p for p in pkts], iface=iface)
    print(len(pkts))


def main():
    a = sys.argv[1:]
    if len(a) == 4 and a[0] == "world":
        world(a[1], int(a[2]), a[3])
    elif len(a) == 5 and a[0] == "pod":
        pod(a[1], int(a[2]), float(a[3]), a[4])
    elif len(a) == 9 and a[0] == "attack":
        attack(a[1], int(a[2]), a[3], int(a[4]), a[5], int(a[6]), int(a[7]), a[8])
    else:
        print("usage: see the header", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
