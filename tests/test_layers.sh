#!/usr/bin/env bash
# The layer rule of docs/design.md, read from the #include lines of src/:
# - every file of src/ is in exactly one layer of the table in design.md
#   ("## Layers"), and includes only files of its own layer or of layers
#   above it (a quoted include resolves as the compiler does: the including
#   file's folder first, then src/);
# - a command (src/cmd/) includes no other command's header: main.c alone
#   includes them all, to dispatch;
# - a library file (src/*) includes no command header.
# LAYERS_SRC and LAYERS_DOC name another tree and page (the planted-defect
# check in the commit that added this test).
. "$(dirname "$0")/lib.sh"

SRC=${LAYERS_SRC:-$TOP/src}
DOC=${LAYERS_DOC:-$TOP/docs/design.md}
python3 - "$SRC" "$DOC" <<'EOF' || fail "the layer rule of docs/design.md does not hold (lines above)"
import os, re, sys

src, doc = sys.argv[1], sys.argv[2]
bad = []

# the table under "## Layers": | layer | files | owns |, top to bottom
layer_of, names, text = {}, [], open(doc).read()
m = re.search(r"^## Layers\n(.*?)(?=^## )", text, re.S | re.M)
if not m:
    sys.exit(f"{doc}: no '## Layers' section")
for row in m.group(1).splitlines():
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    if len(cells) < 3 or cells[0] in ("layer", "") or set(cells[0]) <= set("-: "):
        continue
    names.append(cells[0])
    for f in re.findall(r"`([^`]+)`", cells[1]):
        if f.endswith("/"):
            continue                      # cuda/: not under src/
        base, _, ext = f.rpartition(".")
        exts = ext.split("/") if base else []
        for e in exts or [""]:
            name = f"{base}.{e}" if base else f
            if name in layer_of:
                bad.append(f"{doc}: {name} is in two layers ({names[layer_of[name]]}, {cells[0]})")
            layer_of[name] = len(names) - 1
if not names:
    sys.exit(f"{doc}: the Layers table has no rows")

files = []
for d, _, fs in os.walk(src):
    files += [os.path.relpath(os.path.join(d, f), src) for f in fs if f.endswith((".c", ".h"))]
cmd = lambda f: f.startswith("cmd/")

def resolve(frm, inc):
    """the file a quoted include names: the including file's folder, then src/"""
    here = os.path.normpath(os.path.join(os.path.dirname(frm), inc))
    if os.path.exists(os.path.join(src, here)):
        return here
    return os.path.normpath(inc) if os.path.exists(os.path.join(src, inc)) else None

def key(f):
    """the name a file has in the table: src/cmd/ files as cmd/NAME"""
    return f

edges = 0
for f in sorted(files):
    if key(f) not in layer_of:
        bad.append(f"src/{f}: in no layer of {doc}'s table")
        continue
    mine = layer_of[key(f)]
    for n, line in enumerate(open(os.path.join(src, f)), 1):
        m = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
        if not m:
            continue
        to = resolve(f, m.group(1))
        if to is None or to.startswith(".."):
            continue                      # outside src/ (cuda/, system)
        edges += 1
        stem = lambda p: os.path.splitext(p)[0]
        if cmd(to) and not cmd(f):
            bad.append(f"src/{f}:{n}: the library includes the command header src/{to}")
        elif cmd(to) and cmd(f) and f != "cmd/main.c" and stem(to) != stem(f):
            bad.append(f"src/{f}:{n}: a command includes another command's header src/{to}")
        elif key(to) in layer_of and layer_of[key(to)] > mine:
            bad.append(f"src/{f}:{n}: {names[mine]} includes src/{to} of the lower layer {names[layer_of[key(to)]]}")
for f in sorted(set(layer_of) - set(files)):
    bad.append(f"{doc}: {f} is in the Layers table but not in src/")
for b in bad:
    print("error:", b)
print(f"{len(files)} files, {edges} includes, {len(names)} layers")
sys.exit(1 if bad else 0)
EOF
ok "the layer rule of docs/design.md holds for every #include in src/"
