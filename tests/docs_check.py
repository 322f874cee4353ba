#!/usr/bin/env python3
"""Checks that README.md and docs/ cite only what exists (issue 46).

    tests/docs_check.py [--root DIR] [--git DIR]

Rules, one line per finding ("FILE:LINE: ..." where a line is known):
  hash   every commit hash cited (7-12 hex digits with a letter and a digit)
         is reachable from HEAD of --git (default --root); skipped with one
         line in a clone without history or a tree that is not its own
         checkout
  path   every repository path cited (src/, tests/, docs/, analysis/, jobs/,
         input/, cuda/) is tracked by git (in a tree that is not its own
         checkout: exists), or is where .gitignore'd output goes; {a,b}
         expands, <x> and * match anything
  test   every test (tests/test_*.{sh,c}, tests/cuda/test_*, tests/slurm/
         test_*.sh, the Makefile's bin/tests/test_*, analysis/tests/test_*.py)
         is named in docs/testing.md, and every test its table lists exists
  key    every config key of src/config.c is in docs/training.md's "Config
         keys" table, and every key there is one
  hook   every TRANSFORMER_* variable read in src/, cuda/ or tests/ is in
         docs/testing.md's "Test hooks" table
Exit status 1 on any finding.  Standard library only: it runs under the
system python3, before any venv exists.
"""
import argparse
import glob
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

PATH_TOPS = ("src", "tests", "docs", "analysis", "jobs", "input", "cuda")
# a path: its top folder, then names, '/', globs, <placeholders>, {a,b}
PATH_RE = re.compile(r"(?<![\w./~$-])(?:%s)/(?:[\w.*<>+-]|\{[^}\s]*\}|/)*" % "|".join(PATH_TOPS))
HASH_RE = re.compile(r"(?<![\w/.-])[0-9a-f]{7,12}(?![\w/-])")
TEST_RE = re.compile(r"(?:[\w./-]*/)?test_\w+(?:\.(?:sh|c|cu|py))?")
KEY_RE = re.compile(r"^\s*[KE]\((\w+),", re.M)
HOOK_READ_RE = re.compile(r'getenv\("(TRANSFORMER_\w+)"\)|\$\{?(TRANSFORMER_\w+)'
                          r'|environ(?:\.get\(|\[)\s*["\'](TRANSFORMER_\w+)')


def doc_files(root):
    return [root / "README.md"] + sorted((root / "docs").rglob("*.md"))


def lines_of(path):
    return path.read_text(encoding="utf-8").splitlines()


def section(path, title):
    """(line number, text) of the lines under '## title' up to the next ## heading."""
    out, inside = [], False
    for n, line in enumerate(lines_of(path), 1):
        if line.startswith("## "):
            inside = line[3:].strip().lower().startswith(title.lower())
        elif inside:
            out.append((n, line))
    return out


def table_cells(rows, column):
    """(line number, cell text) of column `column` of the markdown table rows."""
    for n, line in rows:
        cells = line.split("|")
        if line.lstrip().startswith("|") and len(cells) > column + 1 and not set(cells[1].strip()) <= set("-: "):
            yield n, cells[column + 1]


def backticked(text):
    return re.findall(r"`([^`]+)`", text)


# ------------------------------------------------------------------ hashes
def own_checkout(git):
    """git is the top of its own checkout, not an exported tree (perhaps
    unpacked inside another repository, whose answers are not its own)."""
    top = subprocess.run(["git", "-C", str(git), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    return top.returncode == 0 and Path(top.stdout.strip()).resolve() == Path(git).resolve()


def git_has_history(git):
    if not own_checkout(git):
        return False
    r = subprocess.run(["git", "-C", str(git), "rev-parse", "--is-shallow-repository"],
                       capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.strip() == "false" and \
        subprocess.run(["git", "-C", str(git), "rev-parse", "HEAD~1"], capture_output=True).returncode == 0


def check_hashes(root, git, rel):
    cited = []
    for f in doc_files(root):
        for n, line in enumerate(lines_of(f), 1):
            for h in HASH_RE.findall(line):
                if re.search("[a-f]", h) and re.search("[0-9]", h):
                    cited.append((rel(f), n, h))
    if not git_has_history(git):
        print("skipped: hash: %s has no history (a shallow or exported clone): %d cited hashes not checked"
              % (git, len(cited)))
        return []
    # Reachable from HEAD, not merely present: a commit rewritten by a
    # rebase stays in this clone's object store but never reaches CI's clone.
    names = "".join(h + "^{commit}\n" for _, _, h in cited)
    r = subprocess.run(["git", "-C", str(git), "cat-file", "--batch-check"],
                       input=names, capture_output=True, text=True, check=True)
    history = set(subprocess.run(["git", "-C", str(git), "rev-list", "HEAD"],
                                 capture_output=True, text=True, check=True).stdout.split())
    return ["%s:%d: hash: commit %s is not in the history" % (f, n, h)
            for (f, n, h), ans in zip(cited, r.stdout.splitlines())
            if ans.endswith("missing") or ans.split()[0] not in history]


# ------------------------------------------------------------------- paths
def expand(path):
    """The globs a cited path stands for: {a,b} alternatives; <x> and
    upper-case placeholders (ROW, RUN) as *."""
    path = re.sub(r"<[^>]*>|(?<![\w-])[A-Z][A-Z0-9_]*(?![\w-])", "*", path)
    parts = re.split(r"(\{[^}]*\})", path)
    choices = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def ignored(git, paths):
    """The paths .gitignore leaves out: where runs write (docs/results-multi30k/*/runs/)."""
    if not paths:
        return set()
    r = subprocess.run(["git", "-C", str(git), "check-ignore", "--no-index", "--stdin"],
                       input="\n".join(paths) + "\n", capture_output=True, text=True)
    return set(r.stdout.splitlines())


def tracked(git):
    """The files git tracks and the folders above them, or None where git
    is not the top of its own checkout (an exported tree: then what exists
    counts)."""
    if not own_checkout(git):
        return None
    r = subprocess.run(["git", "-C", str(git), "ls-files", "-z"], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    names = set()
    for f in filter(None, r.stdout.split("\0")):
        parts = f.split("/")
        names.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return names


def check_paths(root, git, rel):
    """Each cited path matches a tracked file or folder, or is where
    .gitignore'd output goes: a file this clone has but never committed
    would pass here and be missing from CI's clone."""
    known = tracked(git)
    def present(g):
        found = [os.path.relpath(m, root) for m in glob.glob(str(root / g))]
        return any(known is None or m in known for m in found)
    missing = []
    for f in doc_files(root):
        for n, line in enumerate(lines_of(f), 1):
            for p in PATH_RE.findall(line):
                p = p.rstrip(".:")
                if "..." in p:   # "src/..." stands for any file there
                    continue
                gone = [g for g in expand(p) if not present(g)]
                if gone:
                    missing.append((rel(f), n, gone[0]))
    skip = ignored(git, [g for _, _, g in missing])
    return ["%s:%d: path: %s %s" % (f, n, g, "is not tracked by git" if glob.glob(str(root / g)) else "does not exist")
            for f, n, g in missing if g not in skip]


# ------------------------------------------------------------------- tests
def tests_in_tree(root):
    """Test name -> its file, for every test make test or make test-slurm runs."""
    found = {}
    for pat in ("tests/test_*.sh", "tests/test_*.c", "tests/cuda/test_*.c", "tests/cuda/test_*.cu",
                "tests/slurm/test_*.sh"):
        for p in root.glob(pat):
            found[p.stem] = str(p.relative_to(root))
    for name in re.findall(r"bin/tests/(test_\w+)", (root / "Makefile").read_text()):
        found.setdefault(name, "Makefile")
    for p in root.glob("analysis/tests/test_*.py"):
        found[p.name] = str(p.relative_to(root))   # by file name: test_heads.py beside test_heads
    return found


def test_name(token):
    """The name a token of testing.md gives a test: test_x, or test_x.py for pytest files."""
    base = token.rsplit("/", 1)[-1]
    return base if base.endswith(".py") else re.sub(r"\.(sh|c|cu)$", "", base)


def check_tests(root):
    doc = root / "docs/testing.md"
    named = {test_name(t) for t in TEST_RE.findall(" ".join(backticked(doc.read_text())))}
    tree = tests_in_tree(root)
    bad = ["docs/testing.md: test: %s (%s) is not listed" % (t, tree[t]) for t in sorted(tree) if t not in named]
    rows = [(n, l) for n, l in enumerate(lines_of(doc), 1)]
    for n, cell in table_cells(rows, 1):   # the tests column of the area tables
        for tok in backticked(cell):
            for t in TEST_RE.findall(tok):
                if test_name(t) not in tree:
                    bad.append("docs/testing.md:%d: test: %s is listed but does not exist" % (n, t))
    return bad


# -------------------------------------------------------------------- keys
def check_keys(root):
    src = (root / "src/config.c").read_text()
    table = src[src.index("KEYS[] = {"):]
    keys = set(KEY_RE.findall(table[:table.index("};")]))
    documented = {}
    for n, cell in table_cells(section(root / "docs/training.md", "Config keys"), 0):
        for k in backticked(cell):
            documented.setdefault(k, n)
    if not documented:
        return ["docs/training.md: key: no '## Config keys' table"]
    bad = ["docs/training.md: key: %s (src/config.c) is not in the Config keys table" % k
           for k in sorted(keys - set(documented))]
    bad += ["docs/training.md:%d: key: %s is not a key of src/config.c" % (documented[k], k)
            for k in sorted(set(documented) - keys)]
    return bad


# ------------------------------------------------------------------- hooks
def check_hooks(root):
    read = {}
    for top in ("src", "cuda", "tests"):
        for p in sorted((root / top).rglob("*")):
            if p.is_file() and p.suffix in (".c", ".h", ".cu", ".cuh", ".cc", ".sh", ".py"):
                for m in HOOK_READ_RE.finditer(p.read_text(errors="replace")):
                    read.setdefault(next(g for g in m.groups() if g), str(p.relative_to(root)))
    table = set()
    for _, cell in table_cells(section(root / "docs/testing.md", "Test hooks"), 0):
        table |= set(re.findall(r"TRANSFORMER_\w+", cell))
    return ["docs/testing.md: hook: %s (read in %s) is not in the Test hooks table" % (v, f)
            for v, f in sorted(read.items()) if v not in table]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--git", type=Path, help="the repository whose history the hashes must be in (default: --root)")
    a = ap.parse_args()
    root = a.root.resolve()
    rel = lambda f: str(f.relative_to(root))
    bad = check_hashes(root, a.git or root, rel) + check_paths(root, a.git or root, rel) + \
        check_tests(root) + check_keys(root) + check_hooks(root)
    for b in bad:
        print(b)
    print("docs check: %d finding(s)" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
