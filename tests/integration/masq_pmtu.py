#!/usr/bin/env python3
# tests/integration/masq_pmtu.py - a path-MTU probe from a pod (run by
# tests/integration/masq_pmtu.sh): a UDP socket connected to HOST:PORT
# with "don't fragment" (IP_PMTUDISC_DO / IPV6_PMTUDISC_DO) sends SIZE
# bytes until the kernel has learnt a smaller path MTU from an ICMP
# Fragmentation Needed / Packet Too Big (a send fails with EMSGSIZE);
# prints "pmtu <mtu>" and exits 0, or "pmtu none" and exits 1 after
# TRIES sends 0.5 s apart.
import errno
import socket
import sys
import time

IP_MTU_DISCOVER, IP_PMTUDISC_DO, IP_MTU = 10, 2, 14
IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO, IPV6_MTU = 23, 2, 24


def main(host, port, size, tries):
    v6 = ":" in host
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    if v6:
        s.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO)
    else:
        s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    s.connect((host, port))
    for _ in range(tries):
        try:
            s.send(b"P" * size)
        except OSError as e:
            if e.errno == errno.EMSGSIZE:
                mtu = s.getsockopt(socket.IPPROTO_IPV6, IPV6_MTU) if v6 else \
                    s.getsockopt(socket.IPPROTO_IP, IP_MTU)
                print("pmtu %d" % mtu)
                return 0
            raise
        time.sleep(0.5)  # sleep: the route learns the PMTU from an ICMP error, between probes
    print("pmtu none")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
