#!/usr/bin/env python3
# tests/security/health_flood.py - the attacker of health_responder_flood.sh:
# from a pod, hold COUNT idle TCP connections to TARGET:PORT, spread over
# the source addresses given, never sending a byte (MODE idle) or one byte
# of a request that never ends (MODE slow); a connection the server closes
# is opened again at once. Runs for SECONDS, then writes a JSON
# summary to OUT: the most connections established at once (as the pod sees
# them) and how many connects succeeded in all.
import errno, json, resource, selectors, socket, sys, time

target, port, count, seconds, out, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), sys.argv[5], sys.argv[6]
sources = sys.argv[7:]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 256), hard))
sel = selectors.DefaultSelector()
state = {}  # socket -> [source, established]
stats = {"connects": 0, "established_max": 0, "closed_by_server": 0}
established = 0


def open_one(src):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    s.bind((src, 0))
    try:
        s.connect((target, port))
    except BlockingIOError:
        pass
    except OSError:
        s.close()
        return
    state[s] = [src, False]
    sel.register(s, selectors.EVENT_WRITE)


def close_one(s):
    global established
    if state[s][1]:
        established -= 1
    src = state.pop(s)[0]
    sel.unregister(s)
    s.close()
    return src


for i in range(count):
    open_one(sources[i % len(sources)])
end = time.monotonic() + seconds
while time.monotonic() < end:
    for key, ev in sel.select(timeout=0.2):
        s = key.fileobj
        src, est = state[s]
        if not est:
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                open_one(close_one(s))
                continue
            state[s][1] = True
            established += 1
            stats["connects"] += 1
            stats["established_max"] = max(stats["established_max"], established)
            if mode == "slow":
                try:
                    s.send(b"G")
                except OSError:
                    pass
            sel.modify(s, selectors.EVENT_READ)
            continue
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if not data:  # the server closed it: take the slot again
            stats["closed_by_server"] += 1
            open_one(close_one(s))
with open(out, "w") as f:
    json.dump(stats, f)
