#!/usr/bin/python3
# tests/integration/hubble_grpc_proto.py - checks fibril's copy of Hubble's
# Observer API (modules/hubble-lite/proto/*.proto) field by field against
# Hubble's names and numbers in hubble_proto_reference.txt: every service
# method, message field (name, number, type, repeated) and enum value that
# fibril's files keep must be Hubble's; trimming is allowed, changing is
# not. The .proto files are compiled by Debian's grpc_tools protoc into a
# descriptor set, so the check reads what protoc reads.
# Usage: hubble_grpc_proto.py PROTO_DIR REFERENCE WORKDIR
import os
import subprocess
import sys

from google.protobuf import descriptor_pb2

proto_dir, ref_path, work = sys.argv[1:4]
FD = descriptor_pb2.FieldDescriptorProto
SCALAR = {v: k[len("TYPE_"):].lower() for k, v in FD.Type.items()}


def load_reference(path):
    ref, cur = {}, None
    for line in open(path):
        if not line.strip() or line.startswith("#"):
            continue
        if not line.startswith(" "):
            kind, name = line.split()
            cur = ref.setdefault(name, {"kind": kind, "items": {}})
            continue
        words = line.split()
        if cur["kind"] == "service":
            cur["items"][words[1]] = (words[2], words[3], len(words) > 4 and words[4] == "stream")
        elif cur["kind"] == "message":
            cur["items"][words[0]] = (int(words[1]), " ".join(words[2:]))
        else:
            cur["items"][words[0]] = int(words[1])
    return ref


def main():
    ref = load_reference(ref_path)
    out = os.path.join(work, "fibril-hubble.desc")
    files = [os.path.relpath(os.path.join(d, f), proto_dir)
             for d, _, fs in os.walk(proto_dir) for f in fs if f.endswith(".proto")]
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + proto_dir,
                    "--include_imports", "--descriptor_set_out=" + out] + sorted(files), check=True)
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(open(out, "rb").read())
    errors, checked = [], 0

    def check(what, cond, msg):
        nonlocal checked
        checked += 1
        if not cond:
            errors.append("%s: %s" % (what, msg))

    def walk_messages(prefix, msgs):
        for m in msgs:
            name = prefix + "." + m.name
            r = ref.get(name)
            check(name, r is not None and r["kind"] == "message", "no such message in Hubble's API")
            if r:
                for f in m.field:
                    want = r["items"].get(f.name)
                    typ = f.type_name.lstrip(".") if f.type_name else SCALAR[f.type]
                    if f.label == FD.LABEL_REPEATED:
                        typ = "repeated " + typ
                    check(name + "." + f.name, want is not None, "no such field in Hubble's " + name)
                    if want:
                        check(name + "." + f.name, want == (f.number, typ),
                              "is %d %s, Hubble's is %d %s" % (f.number, typ, want[0], want[1]))
            walk_messages(name, m.nested_type)
            walk_enums(name, m.enum_type)

    def walk_enums(prefix, enums):
        for e in enums:
            name = prefix + "." + e.name
            r = ref.get(name)
            check(name, r is not None and r["kind"] == "enum", "no such enum in Hubble's API")
            for v in e.value if r else []:
                check(name + "." + v.name, r["items"].get(v.name) == v.number,
                      "is %d, Hubble's is %s" % (v.number, r["items"].get(v.name)))

    for f in fds.file:
        walk_messages(f.package, f.message_type)
        walk_enums(f.package, f.enum_type)
        for s in f.service:
            name = f.package + "." + s.name
            r = ref.get(name)
            check(name, r is not None and r["kind"] == "service", "no such service in Hubble's API")
            for m in s.method if r else []:
                want = r["items"].get(m.name)
                got = (m.input_type.lstrip("."), m.output_type.lstrip("."), m.server_streaming)
                check(name + "/" + m.name, want == got, "is %s, Hubble's is %s" % (got, want))
    for e in errors:
        print("FAIL: " + e)
    print("%d checks, %d differ from Hubble's API" % (checked, len(errors)))
    return 1 if errors or checked < 100 else 0


sys.exit(main())
