#!/usr/bin/env python3
# tests/lib/ipam_journal.py - what an IPAM store's journal holds, as the next
# run replays it (<fibril/journal.h>: <dir>/allocations.snap then
# allocations.journal, 16-byte header, records [u32 len][u32 crc][payload],
# "+<address> <owner>" or "-<address>"): prints "address=owner" lines,
# sorted. Records are taken by their framing (a torn tail ends the file).
#   ipam_journal.py STATE-DIR [ADDRESS]   with ADDRESS: its owner, exit 1 if free
import os
import struct
import sys


def records(path):
    try:
        data = open(path, "rb").read()
    except FileNotFoundError:
        return None, []
    gen = struct.unpack_from("<Q", data, 8)[0] if len(data) >= 16 else 0
    out, off = [], 16
    while len(data) - off >= 8:
        n = struct.unpack_from("<I", data, off)[0]
        if len(data) - off - 8 < n:
            break
        out.append(data[off + 8:off + 8 + n].decode())
        off += 8 + n
    return gen, out


def state(d):
    snap_gen, snap = records(os.path.join(d, "allocations.snap"))
    j_gen, journal = records(os.path.join(d, "allocations.journal"))
    recs = list(snap)
    if j_gen is not None and (snap_gen is None or j_gen >= snap_gen):
        recs += journal
    held = {}
    for r in recs:
        if r[0] == "+":
            addr, _, owner = r[1:].partition(" ")
            held[addr] = owner
        else:
            held.pop(r[1:], None)
    return held


held = state(sys.argv[1])
if len(sys.argv) > 2:
    if sys.argv[2] not in held:
        sys.exit(1)
    print(held[sys.argv[2]])
else:
    for a in sorted(held):
        print(a + "=" + held[a])
