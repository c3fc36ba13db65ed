#!/usr/bin/env python3
# tests/integration/egress_gateway.py - the pod's side of the egress
# gateway tests (tests/integration/egress_gateway.sh,
# tests/bench/bench_egw_failover.sh), against masq_world.py's server
# (which answers each TCP line "SEEN <the source address it saw> <line>"):
#   seen HOST PORT   one new TCP connection (1 s timeout); prints the
#                    address the world saw, or "FAILED <why>"; exits 1 then
#   until HOST PORT EXPECT SINCE LIMIT
#                    a new TCP connection every 20 ms (each with a 150 ms
#                    timeout: a connection through a dead gateway fails,
#                    it does not hang the loop) until one is seen as
#                    EXPECT; SINCE is the wall-clock time (seconds since the
#                    epoch) the clock starts from. Prints "moved SECONDS
#                    tries=N failed=F other=O" (O: answers seen as another
#                    address), or "timeout ..." after LIMIT seconds (exit 1)
#   spray HOST PORT SECONDS
#                    a UDP datagram every millisecond for SECONDS (the world
#                    logs each one's source: a gap of a millisecond in the
#                    egress path shows as another address)
import socket
import sys
import time


def seen(host, port, timeout):
    try:
        c = socket.create_connection((host, port), timeout=timeout)
        c.settimeout(timeout)
        c.sendall(b"egw\n")
        words = c.recv(200).decode().split()
        c.close()
    except OSError as e:
        return None, str(e)
    if len(words) < 2 or words[0] != "SEEN":
        return None, "unexpected answer %r" % words
    return words[1], ""


def until(host, port, expect, since, limit):
    tries = failed = other = 0
    while time.time() - since < limit:
        tries += 1
        addr, why = seen(host, port, 0.15)
        if addr == expect:
            print("moved %.3f tries=%d failed=%d other=%d" % (time.time() - since, tries, failed, other))
            return 0
        if addr is None:
            failed += 1
        else:
            other += 1
        time.sleep(0.02)  # sleep: the pace of the probes, one per 20 ms
    print("timeout after %.1f s tries=%d failed=%d other=%d" % (limit, tries, failed, other))
    return 1


def spray(host, port, seconds):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        try:
            s.sendto(b"spray", (host, port))
            n += 1
        except OSError:
            pass
        time.sleep(0.001)  # sleep: the spray's pace, one datagram per millisecond
    print("sprayed %d" % n)
    return 0


def main():
    cmd = sys.argv[1]
    if cmd == "seen":
        addr, why = seen(sys.argv[2], int(sys.argv[3]), 1.0)
        print(addr if addr else "FAILED " + why)
        return 0 if addr else 1
    if cmd == "until":
        return until(sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5]), float(sys.argv[6]))
    if cmd == "spray":
        return spray(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    print("usage: seen HOST PORT | until HOST PORT EXPECT SINCE LIMIT | spray HOST PORT SECONDS",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
