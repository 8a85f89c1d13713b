#!/usr/bin/env bash
# The environment variables against docs/environment.md (TAP):
#   1-2  the library's table (lib/core/env.c: name, values and default, meaning) and the
#        docs' library table hold the same rows, word for word;
#   3    nothing in lib/ or cuda/ reads the environment except lib/core/env.c;
#   4-5  every DLT_*/DLTRAIN_* variable the examples, tests and the Python binding read is in
#        the docs' second table, and nothing there is read nowhere.
src="$1"
exec python3 - "$src" <<'PY'
import os, re, subprocess, sys
src = sys.argv[1]
n = 0
def tap(ok, msg, detail=()):
    global n
    n += 1
    print(("ok %d - %s" if ok else "not ok %d - %s") % (n, msg))
    for d in detail:
        print("# " + d)

# ---- the table in lib/core/env.c: per row, its adjacent string literals joined ----
text = open(os.path.join(src, "lib/core/env.c")).read()
body = text[text.index("dlt__env_table[DLT__ENV_N] = {"):]
body = body[:body.index("\n};")]
lit = re.compile(r'"((?:[^"\\]|\\.)*)"')
table = {}
for row in re.split(r"\n\s*\[DLT__ENV_[A-Z0-9_]+\] = \{", body)[1:]:
    groups, last = [], None
    for m in lit.finditer(row):
        s = re.sub(r"\\(.)", r"\1", m.group(1))
        if last is not None and row[last:m.start()].strip() == "":
            groups[-1] += s
        else:
            groups.append(s)
        last = m.end()
    name, values, meaning = groups[0], groups[1], groups[2]
    table[name] = (values, meaning)

# ---- docs/environment.md: the library table, then the others ----
doc = open(os.path.join(src, "docs/environment.md")).read()
lib_part, _, other_part = doc.partition("## Examples, tests and the Python binding")
row = re.compile(r"^\| `(DLT[A-Z0-9_]*)` \| (.*) \| (.*) \|$", re.M)
docs = {m.group(1): (m.group(2), m.group(3)) for m in row.finditer(lib_part)}

missing = [k for k in table if k not in docs]
differ = [k for k in table if k in docs and docs[k] != table[k]]
tap(bool(table) and not missing and not differ,
    "every variable of lib/core/env.c is in docs/environment.md with its values and meaning (%d)" % len(table),
    ["missing: " + k for k in missing] + ["differs: %s: docs %r, table %r" % (k, docs[k], table[k]) for k in differ])
stale = [k for k in docs if k not in table]
tap(bool(docs) and not stale, "every variable of the docs' library table is in lib/core/env.c",
    ["not in the table: " + k for k in stale])

readers = []
for d in ("lib", "cuda"):
    for root, _, files in os.walk(os.path.join(src, d)):
        for f in files:
            if f.endswith((".c", ".h", ".cu", ".cuh")):
                p = os.path.join(root, f)
                rel = os.path.relpath(p, src)
                if rel == "lib/core/env.c":
                    continue
                for i, line in enumerate(open(p, errors="replace"), 1):
                    if re.search(r"\b(getenv|secure_getenv)\s*\(", line):
                        readers.append("%s:%d" % (rel, i))
tap(not readers, "lib/ and cuda/ read the environment only through lib/core/env.c", readers)

pat = re.compile(r'getenv\("(DLT[A-Z0-9_]*)"\)|os\.environ(?:\.get\(|\[)"(DLT[A-Z0-9_]*)"|_from_env\("(DLT[A-Z0-9_]*)"')
used = set()
for d in ("examples", "tests", "bindings/python"):
    for root, _, files in os.walk(os.path.join(src, d)):
        for f in files:
            if f.endswith((".c", ".h", ".py")):
                for m in pat.finditer(open(os.path.join(root, f), errors="replace").read()):
                    used.add(next(g for g in m.groups() if g))
used -= set(table)
other = {m.group(1) for m in re.finditer(r"^\| `(DLT[A-Z0-9_]*)` \|", other_part, re.M)}
tap(bool(used) and not (used - other),
    "every variable the examples, tests and binding read is documented (%d)" % len(used),
    sorted(used - other))
tap(bool(other) and not (other - used), "every variable of the docs' second table is read somewhere",
    sorted(other - used))
print("1..%d" % n)
PY
