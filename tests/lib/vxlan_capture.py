#!/usr/bin/env python3
"""tests/lib/vxlan_capture.py - a capture of the underlay for the tunnel
tests, run inside the underlay namespace (ip netns exec): an AF_PACKET
socket on every interface sees each frame the nodes send, and this sums
them up until STOPFILE exists (or 120 s pass), then writes OUT (JSON):

  {"vxlan": [[outer-src, outer-dst, vni, inner-src, inner-dst, proto, n], ...],
   "plain": [[src, dst, proto, n], ...], "plain6": [[src, dst, next-header, n], ...],
   "fragments": N}

"vxlan": IPv4 or IPv6 UDP to PORT (default 8472) whose payload is a VXLAN header
(flags 0x08, the VNI valid) and an inner Ethernet/IPv4 or Ethernet/IPv6
frame (proto: the IPv6 next header); "plain": every other IPv4 packet;
"plain6": every other IPv6 packet; "fragments": the IPv4
packets that were fragments (MF set or an offset) and the IPv6 ones with a
fragment header (an encapsulated frame
too large for the underlay; a veth carries GSO packets whole, so lengths
say nothing here, fragments do). Frames the namespace itself sends
(PACKET_OUTGOING) are skipped: each frame is counted where it enters the
underlay.

usage: vxlan_capture.py OUT STOPFILE [PORT]"""
import json
import os
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def ip4(b):
    return socket.inet_ntoa(b)


def ip6(b):
    return socket.inet_ntop(socket.AF_INET6, b)


def inner_of(frame, v):
    """The VXLAN header at v and the inner frame after it: (vni, inner-src,
    inner-dst, proto), or None."""
    inner = v + 8
    if len(frame) < inner + 34 or not frame[v] & 0x08:
        return None
    vni = struct.unpack("!I", frame[v + 4:v + 8])[0] >> 8
    itype = struct.unpack("!H", frame[inner + 12:inner + 14])[0]
    ih = inner + 14
    if itype == 0x0800:
        return (vni, ip4(frame[ih + 12:ih + 16]), ip4(frame[ih + 16:ih + 20]), frame[ih + 9])
    if itype == 0x86DD and len(frame) >= ih + 40:
        return (vni, ip6(frame[ih + 8:ih + 24]), ip6(frame[ih + 24:ih + 40]), frame[ih + 6])
    return None


def main():
    out, stopfile = sys.argv[1], sys.argv[2]
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 8472
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.settimeout(0.1)
    vx, plain, plain6 = {}, {}, {}
    fragments = 0
    ready = stopfile + ".ready"
    open(ready, "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(stopfile) and time.monotonic() < deadline:
        try:
            frame, addr = s.recvfrom(65535)
        except socket.timeout:
            continue
        if addr[2] == PACKET_OUTGOING or len(frame) < 34:
            continue
        etype = struct.unpack("!H", frame[12:14])[0]
        if etype == 0x86DD and len(frame) >= 54:
            src, dst = ip6(frame[22:38]), ip6(frame[38:54])
            l4 = 54
            if frame[20] == 17 and len(frame) >= l4 + 8 and struct.unpack("!H", frame[l4 + 2:l4 + 4])[0] == port:
                r = inner_of(frame, l4 + 8)
                if r:
                    k = (src, dst) + r
                    vx[k] = vx.get(k, 0) + 1
                    continue
            if frame[20] == 44:
                fragments += 1
            k = (src, dst, frame[20])
            plain6[k] = plain6.get(k, 0) + 1
            continue
        if etype != 0x0800:
            continue
        ihl = (frame[14] & 0x0F) * 4
        proto = frame[23]
        if struct.unpack("!H", frame[20:22])[0] & 0x3FFF:
            fragments += 1
        src, dst = ip4(frame[26:30]), ip4(frame[30:34])
        l4 = 14 + ihl
        if proto == 17 and len(frame) >= l4 + 8 and struct.unpack("!H", frame[l4 + 2:l4 + 4])[0] == port:
            r = inner_of(frame, l4 + 8)
            if r:
                k = (src, dst) + r
                vx[k] = vx.get(k, 0) + 1
                continue
        k = (src, dst, proto)
        plain[k] = plain.get(k, 0) + 1
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"vxlan": [list(k) + [n] for k, n in vx.items()],
                   "plain": [list(k) + [n] for k, n in plain.items()],
                   "plain6": [list(k) + [n] for k, n in plain6.items()],
                   "fragments": fragments}, f)
    os.rename(tmp, out)


if __name__ == "__main__":
    main()
