#!/usr/bin/env python3
# tests/security/egw_relay.py - the ends of egw_relay.sh (Debian's scapy:
# run by /usr/bin/python3).
#   world ADDR PORT LOG      in the world: a UDP socket on ADDR:PORT; every
#                            datagram is logged "<payload> <source>";
#                            LOG.ready once it listens
#   send HOST PORT PAYLOAD   from a pod: one UDP datagram, nothing awaited
#   l2 IFACE DSTMAC SRC DST PORT PAYLOAD COUNT
#                            a forged frame on IFACE to DSTMAC (the gateway
#                            node's underlay MAC): IPv4 SRC (a selected
#                            pod's address) -> DST (the world), UDP to PORT,
#                            COUNT times
#   vxlan NODE VNI SRC DST PORT PAYLOAD COUNT
#                            the same packet inside VXLAN (UDP 8472) to the
#                            node NODE, the VNI VNI (the pod's identity),
#                            the outer source this namespace's own address
import socket
import sys


def world(addr, port, log):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    open(log + ".ready", "w").close()
    while True:
        data, peer = s.recvfrom(2048)
        with open(log, "a") as f:
            f.write("%s %s\n" % (data.decode(errors="replace"), peer[0]))


def inner(src, dst, port, payload):
    from scapy.all import IP, UDP, Raw
    return IP(src=src, dst=dst, ttl=64) / UDP(sport=41000, dport=port) / Raw(payload.encode())


def main(argv):
    cmd = argv[1]
    if cmd == "world":
        world(argv[2], int(argv[3]), argv[4])
    elif cmd == "send":
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(argv[4].encode(), (argv[2], int(argv[3])))
    elif cmd == "l2":
        from scapy.all import Ether, sendp, conf
        conf.verb = 0
        iface, dmac, src, dst, port, payload, count = argv[2:9]
        sendp(Ether(dst=dmac) / inner(src, dst, int(port), payload), iface=iface, count=int(count))
    elif cmd == "vxlan":
        from scapy.all import Ether, IP, UDP, send, conf, L3RawSocket
        from scapy.layers.vxlan import VXLAN
        conf.verb = 0
        conf.L3socket = L3RawSocket  # the kernel routes it, picks the source
        node, vni, src, dst, port, payload, count = argv[2:9]
        frame = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / inner(src, dst, int(port), payload)
        send(IP(dst=node) / UDP(sport=50001, dport=8472) / VXLAN(vni=int(vni), flags=0x08) / frame,
             count=int(count))
    else:
        sys.exit("egw_relay.py: unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
