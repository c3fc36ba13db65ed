#!/usr/bin/python3
# tests/integration/hubble_grpc_client.py - a client of Hubble's Observer
# API generated at run time from modules/hubble-lite/proto by Debian's
# grpc_tools (python3-grpc-tools) and run on Debian's python3-grpcio: the
# tests read hubble-lite's gRPC server with it, never with the server's
# own encoder. Each answer is printed as one JSON line (protobuf's JSON
# mapping with the proto field names); a call that fails prints
# "ERROR: CODE: details" and exits 3.
# Usage: hubble_grpc_client.py [TLS options] TARGET status|nodes|flows [...]
#   TARGET: unix:///path or host:port (TLS: --ca --cert --key --server-name)
#   flows: --number N --first --follow --max K --timeout S
#          --whitelist JSON --blacklist JSON (lists of FlowFilter as JSON)
#          --since-ago SEC --until-ago SEC
#          --slow SEC: a slow reader: reads nothing for SEC seconds after
#          the call starts (no BDP probing, so the stream's flow-control
#          window stays at HTTP/2's 64 KiB), then reads until the
#          deadline, which then ends the call without an error
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
proto_dir = os.environ.get("HUBBLE_PROTO_DIR", os.path.join(here, "../../modules/hubble-lite/proto"))
gen = tempfile.mkdtemp(prefix="hubble-grpc-py.")
try:
    for f in ("observer.proto", "flow.proto", "relay.proto"):
        shutil.copy(os.path.join(proto_dir, f), gen)
    # the well-known types: grpc_tools' own copies, not fibril's
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + gen, "--python_out=" + gen,
                    "--grpc_python_out=" + gen, "observer.proto", "flow.proto", "relay.proto"],
                   check=True)
    sys.path.insert(0, gen)
    import grpc
    from google.protobuf import json_format
    import flow_pb2
    import observer_pb2
    import observer_pb2_grpc
finally:
    shutil.rmtree(gen, ignore_errors=True)

p = argparse.ArgumentParser()
p.add_argument("--ca")
p.add_argument("--cert")
p.add_argument("--key")
p.add_argument("--server-name")
p.add_argument("target")
p.add_argument("call", choices=["status", "nodes", "flows"])
p.add_argument("--number", type=int, default=0)
p.add_argument("--first", action="store_true")
p.add_argument("--follow", action="store_true")
p.add_argument("--max", type=int, default=0, help="stop after this many answers")
p.add_argument("--timeout", type=float, default=10)
p.add_argument("--whitelist", default="[]")
p.add_argument("--blacklist", default="[]")
p.add_argument("--since-ago", type=float)
p.add_argument("--until-ago", type=float)
p.add_argument("--slow", type=float, default=0)
a = p.parse_args()


def out(msg):
    print(json_format.MessageToJson(msg, preserving_proto_field_name=True, indent=None), flush=True)


if a.ca:
    rd = lambda f: open(f, "rb").read() if f else None
    creds = grpc.ssl_channel_credentials(rd(a.ca), rd(a.key), rd(a.cert))
    opts = [("grpc.ssl_target_name_override", a.server_name)] if a.server_name else []
    channel = grpc.secure_channel(a.target, creds, opts)
else:
    channel = grpc.insecure_channel(a.target, [("grpc.http2.bdp_probe", 0)] if a.slow else [])
stub = observer_pb2_grpc.ObserverStub(channel)
try:
    if a.call == "status":
        out(stub.ServerStatus(observer_pb2.ServerStatusRequest(), timeout=a.timeout))
    elif a.call == "nodes":
        out(stub.GetNodes(observer_pb2.GetNodesRequest(), timeout=a.timeout))
    else:
        req = observer_pb2.GetFlowsRequest(number=a.number, first=a.first, follow=a.follow)
        for f in json.loads(a.whitelist):
            json_format.ParseDict(f, req.whitelist.add())
        for f in json.loads(a.blacklist):
            json_format.ParseDict(f, req.blacklist.add())
        now = time.time()
        if a.since_ago is not None:
            req.since.FromNanoseconds(int((now - a.since_ago) * 1e9))
        if a.until_ago is not None:
            req.until.FromNanoseconds(int((now - a.until_ago) * 1e9))
        n = 0
        call = stub.GetFlows(req, timeout=a.timeout)
        if a.slow:
            time.sleep(a.slow)  # sleep: the slow follower the test asks for reads late on purpose
        for resp in call:
            out(resp)
            n += 1
            if a.max and n >= a.max:
                call.cancel()
                break
except grpc.RpcError as e:
    if e.code() == grpc.StatusCode.CANCELLED and a.max:
        sys.exit(0)
    if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and a.slow:
        sys.exit(0)
    print("ERROR: %s: %s" % (e.code().name, e.details()), flush=True)
    sys.exit(3)
