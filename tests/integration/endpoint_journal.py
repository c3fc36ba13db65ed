#!/usr/bin/env python3
# tests/integration/endpoint_journal.py - reads the endpoint module's state
# (<state-dir>/endpoint/endpoints.snap + endpoints.journal, the framing of
# <fibril/journal.h>) for the endpoint tests:
#   endpoint_journal.py DIR        {"ID": record, ...} of every live endpoint
#   endpoint_journal.py DIR ID     that endpoint's newest record (exit 1: none)
#   endpoint_journal.py DIR --count  the number of live endpoints
# A torn tail is ignored, as the agent's replay does.
import json, os, struct, sys

def records(path, magic):
    try:
        data = open(path, "rb").read()
    except FileNotFoundError:
        return None, []
    if len(data) < 16 or data[:8] != magic:
        sys.exit(f"{path}: not a fibril journal file")
    gen = struct.unpack_from("<Q", data, 8)[0]
    out, off = [], 16
    while len(data) - off >= 8:
        n, _crc = struct.unpack_from("<II", data, off)
        if len(data) - off - 8 < n:
            break
        out.append(json.loads(data[off + 8:off + 8 + n]))
        off += 8 + n
    return gen, out

def state(d):
    live = {}
    sgen, snap = records(os.path.join(d, "endpoints.snap"), b"FBSNAP01")
    jgen, jrecs = records(os.path.join(d, "endpoints.journal"), b"FBJRNL01")
    if sgen is not None and jgen is not None and jgen < sgen:
        jrecs = []
    for r in snap + jrecs:
        if r.get("deleted"):
            live.pop(r["id"], None)
        else:
            live[r["id"]] = r
    return live

live = state(sys.argv[1])
if len(sys.argv) > 2 and sys.argv[2] == "--count":
    print(len(live))
elif len(sys.argv) > 2:
    r = live.get(int(sys.argv[2]))
    if r is None:
        sys.exit(1)
    print(json.dumps(r, separators=(",", ":")))
else:
    print(json.dumps({str(k): v for k, v in sorted(live.items())}, separators=(",", ":")))
