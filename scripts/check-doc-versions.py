#!/usr/bin/env python3
# scripts/check-doc-versions.py - the version numbers and the repository
# paths the docs cite agree with the tree.
# Versions: <fibril/version.h> (FIBRIL_ABI_MAJOR/MINOR, and a history line
# for every minor up to the current one) and the version script
# (libfibril.map: the FIBRIL_1.N symbol nodes). Checked, in every Markdown
# file, manual page and SDK header of the tree:
#   - a cited symbol node FIBRIL_1.N exists in the version script;
#   - a range "FIBRIL_1.0 ... FIBRIL_1.N" ends at the newest node;
#   - "SDK 1.N", "ABI 1.N", "host 1.N", "1.N host", "minor N" are not newer
#     than the current minor (history may be cited, the future may not);
#   - a claim about the present ("the current (1.N) host", "this 1.N SDK",
#     "the host is at 1.N", "ABI now 1.N") names the current minor.
# Paths: every repository path a Markdown file cites (a word starting with a
# top-level directory of the tree, "host/loader.c", "tests/bench/run.sh",
# in backticks or plain) exists in the tree, or is a program built from a
# source of that name (tests/bench/bench_bus from bench_bus.c), or is named
# by the Makefiles (a generated file such as bpf/fibril_dp.skel.h). A glob
# (cli/cmd_*.c) must match something; a placeholder (modules/NAME/,
# modules/<name>/) is not checked.
# Prints FILE:LINE: what is wrong, one line each; exits 1 if anything is.
# Usage: check-doc-versions.py [TOP_SRCDIR]
import glob
import os
import re
import sys

top = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
problems = []


def read(path):
    with open(os.path.join(top, path), errors='replace') as f:
        return f.read()


version_h = read('sdk/include/fibril/version.h')
major = int(re.search(r'^#define FIBRIL_ABI_MAJOR (\d+)', version_h, re.M).group(1))
minor = int(re.search(r'^#define FIBRIL_ABI_MINOR (\d+)', version_h, re.M).group(1))
for n in range(minor + 1):
    if not re.search(r'^ \*\s+%d - ' % n, version_h, re.M):
        problems.append(f'sdk/include/fibril/version.h: the minor history has no line for {n}')

map_path = None
for cand in ('lib/libfibril.map', 'sdk/libfibril.map', 'host/libfibril.map'):
    if os.path.exists(os.path.join(top, cand)):
        map_path = cand
        break
if not map_path:
    print('check-doc-versions: no libfibril.map found under ' + top)
    sys.exit(1)
nodes = set(int(m) for m in re.findall(r'^FIBRIL_%d\.(\d+)\s*\{' % major, read(map_path), re.M))
newest = max(nodes)
if newest > minor:
    problems.append(f'{map_path}: node FIBRIL_{major}.{newest} is newer than the ABI minor {minor}')

docs = []
for d, dirs, files in os.walk(top):
    dirs[:] = [x for x in dirs if x not in ('.git', 'build', 'node_modules', 'compat', 'autom4te.cache')]
    for f in files:
        rel = os.path.relpath(os.path.join(d, f), top)
        if f.endswith('.md') or re.search(r'docs/man/.*\.[0-9]$', rel) or \
                rel.startswith('sdk/include/fibril/'):
            docs.append(rel)

M = str(major)
cite_node = re.compile(r'FIBRIL_' + M + r'\.(\d+)')
node_range = re.compile(r'FIBRIL_' + M + r'\.0\W{1,12}(?:\.\.\.|…|to|-)\W{0,4}FIBRIL_' + M + r'\.(\d+)')
cite_minor = re.compile(r'\b(?:SDK|ABI|host|minor) \(?' + M + r'\.(\d+)\b|\b' + M +
                        r'\.(\d+) host\b|\bminor (\d+)\b')
present = re.compile(r'\b(?:the current|this|currently) \(?' + M + r'\.(\d+)\)? (?:host|SDK|ABI)\b|'
                     r'\b(?:host|SDK|ABI|tree) (?:is )?(?:now|at|currently) \(?' + M + r'\.(\d+)\b')

for rel in sorted(docs):
    text = read(rel)
    # roff and Markdown line breaks inside a phrase: join lines for ranges
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f'{rel}:{lineno}'
        for m in cite_node.finditer(line):
            n = int(m.group(1))
            if line[:m.start()].endswith('no '):
                continue  # "no FIBRIL_1.8 node": says the node does not exist
            if n not in nodes:
                problems.append(f'{where}: FIBRIL_{M}.{n} is not a node of {map_path} '
                                f'(nodes: {", ".join(f"FIBRIL_{M}.{x}" for x in sorted(nodes))})')
        for m in node_range.finditer(line):
            n = int(m.group(1))
            if n != newest:
                problems.append(f'{where}: the range of symbol nodes ends at FIBRIL_{M}.{n}; '
                                f'the newest is FIBRIL_{M}.{newest}')
        for m in cite_minor.finditer(line):
            n = int(next(g for g in m.groups() if g is not None))
            if n > minor:
                problems.append(f'{where}: "{m.group(0)}" is newer than the current ABI '
                                f'{M}.{minor}')
        for m in present.finditer(line):
            n = int(next(g for g in m.groups() if g is not None))
            if n != minor:
                problems.append(f'{where}: "{m.group(0)}" names {M}.{n} as the present; '
                                f'<fibril/version.h> is at {M}.{minor}')

# ---- paths ------------------------------------------------------------------
# Paths under the top-level directories of the tree checked; a directory
# the tree does not have is not checked (the tarball ships no debian/).
TOP_DIRS = {d for d in os.listdir(top) if os.path.isdir(os.path.join(top, d)) and
            not d.startswith('.') and d not in ('build', 'autom4te.cache', 'node_modules')}
# a path starts a word: not after a letter, a digit, '/', '.', '$', '~' or '-'
# (so /usr/lib/cni, $(prefix)/lib and ../docs are not repository paths)
cite_path = re.compile(r'(?<![\w./$~-])((?:' + '|'.join(sorted(map(re.escape, TOP_DIRS))) +
                       r')/[\w.+\-/*<>{}]*)')
# an all-caps word that is not a file name's stem (README.md, API.md) is a
# placeholder: modules/NAME/, tests/fuzz/fuzz_NAME
placeholder = re.compile(r'[<>{}]|\.\.\.|(?<![A-Za-z0-9])[A-Z][A-Z0-9]*(?![A-Za-z0-9.])')
built_exts = ('.c', '.cpp', '.sh', '.py')

makefiles = ''
for d, dirs, files in os.walk(top):
    dirs[:] = [x for x in dirs if x not in ('.git', 'build', 'node_modules', 'autom4te.cache')]
    for f in files:
        if f in ('Makefile.am', 'Makefile.inc'):
            with open(os.path.join(d, f), errors='replace') as fh:
                makefiles += fh.read()


def path_exists(path):
    full = os.path.join(top, path)
    if '*' in path:
        return bool(glob.glob(full))
    if os.path.exists(full) or any(os.path.exists(full + e) for e in built_exts):
        return True
    bare = path.rstrip('/')
    return bool(re.search(r'(?<![\w/.-])' + re.escape(bare) + r'(?![\w.-])', makefiles))


npaths = 0
for rel in sorted(x for x in docs if x.endswith('.md')):
    for lineno, line in enumerate(read(rel).splitlines(), 1):
        for m in cite_path.finditer(line):
            path = m.group(1).rstrip('.,:;')
            if placeholder.search(path):
                continue
            npaths += 1
            if not path_exists(path):
                problems.append(f'{rel}:{lineno}: {path}: no such file or directory in the tree')

for p in problems:
    print(p)
print(f'check-doc-versions: ABI {major}.{minor}, symbol nodes up to FIBRIL_{major}.{newest}, '
      f'{len(docs)} files read, {npaths} paths cited, {len(problems)} problems')
sys.exit(1 if problems else 0)
