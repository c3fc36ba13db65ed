#!/usr/bin/python3
# tests/k8s/crd_schema.py - the objects in a (test) API server against the
# openAPIV3Schema of deploy/kubernetes/crds.yaml, as the real server's
# structural schema would treat them: a field the schema does not declare
# (outside x-kubernetes-preserve-unknown-fields) would be pruned - the
# agents' data silently lost - and a wrong type or a value outside an enum
# or a range would be refused. Run with Debian's python3 (PyYAML).
#
#   crd_schema.py CRDS.YAML PLURAL OBJECTS.json
#
# OBJECTS.json: a List as the server answers (items[]). Prints one line per
# problem ("ciliumendpoints default/web: status.networking.foo: unknown
# field (pruned)") and exits 1 when there is one; 2 when PLURAL has no CRD.
import json
import sys

import yaml


def check(value, schema, where, out):
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return
    typ = schema.get("type")
    if typ == "object":
        if not isinstance(value, dict):
            out.append(f"{where}: not an object")
            return
        for r in schema.get("required", []):
            if r not in value:
                out.append(f"{where}.{r}: required")
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for k, v in value.items():
            if props is not None and k in props:
                if not (where == "" and k == "metadata"):
                    check(v, props[k], f"{where}.{k}" if where else k, out)
            elif isinstance(extra, dict):
                check(v, extra, f"{where}.{k}" if where else k, out)
            elif not schema.get("x-kubernetes-preserve-unknown-fields") and props is not None:
                out.append(f"{where + '.' if where else ''}{k}: unknown field (pruned)")
    elif typ == "array":
        if not isinstance(value, list):
            out.append(f"{where}: not an array")
            return
        for i, v in enumerate(value):
            check(v, schema.get("items", {}), f"{where}[{i}]", out)
    elif typ == "string":
        if not isinstance(value, str):
            out.append(f"{where}: not a string")
    elif typ == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            out.append(f"{where}: not an integer")
            return
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{where}: below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            out.append(f"{where}: above {schema['maximum']}")
    elif typ == "boolean" and not isinstance(value, bool):
        out.append(f"{where}: not a boolean")
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r} not one of {schema['enum']}")


def main():
    crds, plural, objects = sys.argv[1], sys.argv[2], sys.argv[3]
    schema = None
    with open(crds) as f:
        for doc in yaml.safe_load_all(f):
            if doc and doc.get("kind") == "CustomResourceDefinition" and \
                    doc["spec"]["names"]["plural"] == plural:
                schema = [v for v in doc["spec"]["versions"] if v.get("storage")][0]["schema"][
                    "openAPIV3Schema"]
    if schema is None:
        print(f"{plural}: no CustomResourceDefinition in {crds}")
        sys.exit(2)
    with open(objects) as f:
        items = json.load(f).get("items") or []
    bad = 0
    for o in items:
        md = o.get("metadata") or {}
        name = f"{md.get('namespace')}/{md.get('name')}" if md.get("namespace") else md.get("name")
        out = []
        check(o, schema, "", out)
        for line in out:
            print(f"{plural} {name}: {line}")
        bad += bool(out)
    print(f"{plural}: {len(items)} object(s), {bad} not matching the schema")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
