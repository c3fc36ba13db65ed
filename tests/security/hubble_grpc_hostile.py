#!/usr/bin/python3
# tests/security/hubble_grpc_hostile.py - hostile clients of hubble-lite's
# gRPC socket (driven by hubble_grpc_hostile.sh): bytes that are not
# HTTP/2, a request message past grpc-max-message, messages that are not
# protobuf, a method that does not exist, more connections than
# grpc-max-connections, a connection that never says anything. Prints
# PASS:/FAIL: per promise; exit 1 on a failure.
# Usage: hubble_grpc_hostile.py SOCKET MAX_CONNECTIONS
import socket
import sys
import time

import grpc

path, max_conns = sys.argv[1], int(sys.argv[2])
failed = 0


def check(what, ok, detail=""):
    global failed
    print(("PASS: " if ok else "FAIL: ") + what + (" (%s)" % detail if detail else ""), flush=True)
    failed += not ok


def raw_call(method, body, timeout=10):
    """A unary call with raw bytes: (code name, details) or ("OK", reply)."""
    ch = grpc.insecure_channel("unix://" + path, options=[("grpc.max_send_message_length", -1)])
    try:
        call = ch.unary_unary(method, request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)
        return "OK", call(body, timeout=timeout)
    except grpc.RpcError as e:
        return e.code().name, e.details()
    finally:
        ch.close()


def closed_within(s, seconds):
    """The server closes s (EOF or reset) within seconds; reads what comes."""
    s.settimeout(seconds)
    end = time.time() + seconds
    try:
        while time.time() < end:
            if not s.recv(65536):
                return True
    except (socket.timeout, BlockingIOError):
        return False
    except OSError:
        return True
    return False


def server_ok():
    code, _ = raw_call("/observer.Observer/ServerStatus", b"")
    return code == "OK"


# not HTTP/2 at all: an HTTP/1 request, then noise
s = socket.socket(socket.AF_UNIX)
s.connect(path)
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)) * 64)
check("bytes that are not HTTP/2: the server closes the connection", closed_within(s, 5))
s.close()

# the HTTP/2 preface, then a frame with a garbage header
s = socket.socket(socket.AF_UNIX)
s.connect(path)
s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x04\x01\x05\x00\x00\x00\x01\xff\xff\xff\xff")
check("a HEADERS frame of garbage: the server ends the connection", closed_within(s, 5))
s.close()

code, detail = raw_call("/observer.Observer/GetFlows", b"\x0a" + b"\xff" * (1 << 20))
check("a 1 MiB request message: RESOURCE_EXHAUSTED naming the limit", code == "RESOURCE_EXHAUSTED"
      and "grpc-max-message" in str(detail), "%s: %s" % (code, detail))
code, detail = raw_call("/observer.Observer/GetFlows", b"\xff\xff\xff\xff\xff")
check("GetFlows with bytes that are not protobuf: INVALID_ARGUMENT", code == "INVALID_ARGUMENT",
      "%s: %s" % (code, detail))
code, detail = raw_call("/observer.Observer/ServerStatus", b"\x0a\x05abc")
check("ServerStatus with a truncated message: INVALID_ARGUMENT", code == "INVALID_ARGUMENT",
      "%s: %s" % (code, detail))
code, detail = raw_call("/observer.Observer/GetAgentEvents", b"")
check("a method not served: UNIMPLEMENTED", code == "UNIMPLEMENTED", "%s: %s" % (code, detail))
code, detail = raw_call("/../../etc/passwd", b"")
check("a path that is no method: UNIMPLEMENTED", code == "UNIMPLEMENTED", "%s: %s" % (code, detail))

# more connections than the limit: the ones past it are closed at once
held = []
for _ in range(max_conns * 4):
    c = socket.socket(socket.AF_UNIX)
    c.connect(path)
    held.append(c)
time.sleep(1)  # sleep: the agent accepts the backlog on its next loop turns
refused = sum(1 for c in held if closed_within(c, 0.2))
check("%d connections with a limit of %d: the rest are closed at once" % (len(held), max_conns),
      refused >= len(held) - max_conns, "%d closed" % refused)
for c in held:
    c.close()
time.sleep(1)  # sleep: the agent notices the closed connections on its next loop turns
check("once they are gone, a client is served again", server_ok())

# a connection that never sends anything is closed after grpc-idle-timeout (2s here)
s = socket.socket(socket.AF_UNIX)
s.connect(path)
t0 = time.time()
gone = closed_within(s, 8)
check("a silent connection is closed after the idle timeout", gone and time.time() - t0 >= 1.5,
      "after %.1f s" % (time.time() - t0))
s.close()
check("the server still answers", server_ok())
sys.exit(1 if failed else 0)
