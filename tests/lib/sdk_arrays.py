#!/usr/bin/env python3
# tests/lib/sdk_arrays.py - the SDK's array rule, checked in the headers: an
# array of structs that crosses the boundary through a count and a pointer
# or an offset (`nfoos` / `n_foos` beside `foos`) must carry its element size
# in the same struct (a field `foo_sz`), or a reader built against another
# SDK reads every element after the first at the wrong place. Arrays of
# scalars (double, char *) cannot grow; arrays inside the struct (`foos[N]`)
# are covered by the struct's own sz. Prints one line per violation naming
# the header, the struct and the field; exits 1 if there is any.
# Usage: sdk_arrays.py HEADER...
import re
import sys

SCALARS = {'char', 'double', 'float', 'int', 'unsigned', 'long', 'short', 'bool', 'size_t',
           'uint8_t', 'uint16_t', 'uint32_t', 'uint64_t', 'int8_t', 'int16_t', 'int32_t', 'int64_t'}


def fields(body):
    """(type, name, is_pointer, is_array) for each plain declaration in a struct body."""
    body = re.sub(r'/\*.*?\*/', '', body, flags=re.S)
    body = re.sub(r'//[^\n]*', '', body)
    out = []
    for decl in body.split(';'):
        decl = ' '.join(decl.split())
        if not decl or '(' in decl or '{' in decl:
            continue
        m = re.match(r'^(?P<type>(?:const )?(?:struct |enum )?[A-Za-z_][A-Za-z0-9_]*(?: const)?)'
                     r'(?P<rest>.*)$', decl)
        if not m:
            continue
        for part in m.group('rest').split(','):
            part = part.strip()
            pm = re.match(r'^(?P<stars>[\s*]*(?:const\s*)?[\s*]*)(?P<name>[A-Za-z_][A-Za-z0-9_]*)'
                          r'(?P<dims>(?:\[[^\]]*\])*)', part)
            if pm:
                out.append((m.group('type'), pm.group('name'), '*' in pm.group('stars'),
                            bool(pm.group('dims'))))
    return out


def check(path):
    text = open(path).read()
    bad = []
    for sm in re.finditer(r'struct\s+(\w+)\s*\{(.*?)\n\};', text, re.S):
        sname, body = sm.group(1), sm.group(2)
        fs = fields(body)
        by_name = {f[1]: f for f in fs}
        for _, name, _, _ in fs:
            cm = re.match(r'^n_?([a-z][a-z0-9_]*s)$', name)
            if not cm or cm.group(1) not in by_name:
                continue
            arr = cm.group(1)
            atype, _, is_ptr, is_array = by_name[arr]
            base = atype.replace('const ', '').replace(' const', '').strip()
            if is_array:
                continue  # inside the struct: its sz covers it
            if is_ptr and not base.startswith('struct '):
                continue  # scalars cannot grow
            if not is_ptr and base not in SCALARS:
                continue
            if base.split()[-1] in SCALARS and is_ptr:
                continue
            elem = arr[:-1]
            if not any(f[1] in (elem + '_sz', arr + '_sz', elem + '_size') for f in fs):
                bad.append(f'{path}: struct {sname}: array `{arr}` ({name} elements) has no '
                           f'element size (expected a field `{elem}_sz`)')
    return bad


def main():
    bad = []
    for p in sys.argv[1:]:
        bad += check(p)
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
