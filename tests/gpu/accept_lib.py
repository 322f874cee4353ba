#!/usr/bin/env python3
"""CPU-side checks and report writing of tests/gpu/accept.sh (make gpu-accept).

Standard library only (the GPU machine has python3 but no project venv),
except h5same, which needs h5py (the GPU machine's python3 has it).
Each subcommand prints one line per finding and exits 0 when the check
passes, 1 when it fails, 2 on unusable input; tests/test_gpu_accept.sh runs
them on logs of device=cpu runs.

  header KEY=VALUE...          the Markdown lines that open every summary
  devloss REF_LOG LOG TOL      'dev final' loss of LOG within relative TOL of REF_LOG's
  losses LOG1 LOG2 N REL       first N step losses agree to relative REL (+ half a printed unit)
  params P0 P1 P2 UPD          raw float32 dumps: |P2-P1| <= UPD of the update |P1-P0|
  same A B                     number of identical lines of two text files ('K of N')
  h5same A B GROUP...           every dataset under the GROUPs of two HDF5 files
                               bitwise equal (dtype, shape, bytes): h5diff where it is missing
  stage OUT NAME STATUS AUX LOG write OUT/NAME.md: AUX/env.md (the header), the verdict,
                               AUX/NAME.checks, AUX/NAME.tables.md, the tail of LOG
  index OUT AUX STAGE...       write OUT/summary.md from the summaries OUT/STAGE.md
"""
import array
import math
import os
import re
import sys

STEP = re.compile(r"^step (\d+) loss_ls (\S+) ")
DEV_FINAL = re.compile(r"^dev final loss_ls (\S+) nll \S+ ppl (\S+)")
STAGE_NAME = re.compile(r"^[a-z0-9_]+$")


def die(msg):
    print("error: accept_lib: " + msg, file=sys.stderr)
    sys.exit(2)


def read_lines(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError as e:
        die("%s: %s" % (path, e.strerror))


def step_losses(path):
    """[(step, loss as printed)] of a training log's 'step' lines"""
    return [(int(m.group(1)), m.group(2)) for m in map(STEP.match, read_lines(path)) if m]


def cmd_header(args):
    kv = dict(a.split("=", 1) for a in args if "=" in a)
    order = [("gpu", "GPU"), ("driver", "driver"), ("cuda", "CUDA"), ("nccl", "NCCL"),
             ("commit", "commit"), ("date", "date"), ("host", "host")]
    for k, label in order:
        print("- %s: %s" % (label, kv.get(k) or "unknown"))
    return 0


def h5_datasets(f, group):
    """{path: dataset} of every dataset under GROUP (or GROUP itself)"""
    import h5py
    obj = f.get(group)
    if obj is None:
        return None
    if isinstance(obj, h5py.Dataset):
        return {group: obj}
    found = {}
    obj.visititems(lambda name, o: found.__setitem__(group + "/" + name, o) if isinstance(o, h5py.Dataset) else None)
    return found


def cmd_h5same(a, b, *groups):
    """bitwise equality of the datasets under GROUPS (h5diff -q A B /G /G)"""
    try:
        import h5py
    except ImportError as e:
        print("FAIL: %s has no h5py (%s) and there is no h5diff: set ACCEPT_H5PY to a Python with h5py"
              % (sys.executable, e))
        return 1
    bad, count = [], 0
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        for g in groups:
            da, db = h5_datasets(fa, g), h5_datasets(fb, g)
            if da is None or db is None:
                bad.append("%s missing in %s" % (g, a if da is None else b))
                continue
            bad += ["%s only in %s" % (n, a if n in da else b) for n in sorted(set(da) ^ set(db))]
            for n in sorted(set(da) & set(db)):
                x, y = da[n][()], db[n][()]
                count += 1
                if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                    bad.append("%s differs" % n)
    for line in bad[:5]:
        print(line)
    verdict = "PASS" if not bad and count else "FAIL"
    print("%s: %d of %d datasets under %s bitwise equal (h5py)"
          % (verdict, count - len([x for x in bad if x.endswith("differs")]), count, ", ".join(groups)))
    return 0 if verdict == "PASS" else 1


def dev_final(path):
    for line in read_lines(path):
        m = DEV_FINAL.match(line)
        if m:
            return float(m.group(1))
    return None


def cmd_devloss(ref_log, log, tol):
    tol = float(tol)
    r, x = dev_final(ref_log), dev_final(log)
    if r is None or x is None:
        print("FAIL: no 'dev final' line in %s" % (ref_log if r is None else log))
        return 1
    if not (math.isfinite(r) and math.isfinite(x) and r > 0):
        print("FAIL: dev loss not finite: %s vs %s" % (x, r))
        return 1
    rel = abs(x - r) / r
    verdict = "PASS" if rel <= tol else "FAIL"
    print("%s: dev loss %.4f vs %.4f (reference), relative difference %.2e (tolerance %.0e)"
          % (verdict, x, r, rel, tol))
    return 0 if rel <= tol else 1


def cmd_losses(log1, log2, n, rel):
    n, rel = int(n), float(rel)
    a, b = step_losses(log1)[:n], step_losses(log2)[:n]
    if len(a) < n or len(b) < n:
        print("FAIL: need %d logged steps in each log, got %d and %d" % (n, len(a), len(b)))
        return 1
    bad, worst = 0, 0.0
    for (sa, x), (sb, y) in zip(a, b):
        x, y = float(x), float(y)
        d = abs(x - y)
        worst = max(worst, d / abs(x) if x else d)
        if sa != sb or d > rel * abs(x) + 5e-7:
            bad += 1
            print("step %d: %s vs %s" % (sa, x, y))
    verdict = "PASS" if not bad else "FAIL"
    print("%s: %d of %d step losses agree to relative %.0e (+ half a printed unit; worst %.1e)"
          % (verdict, n - bad, n, rel, worst))
    return 0 if not bad else 1


def read_f32(path):
    v = array.array("f")
    try:
        with open(path, "rb") as f:
            v.frombytes(f.read())
    except (OSError, ValueError) as e:
        die("%s: %s" % (path, e))
    if sys.byteorder != "little":
        v.byteswap()
    return v


def cmd_params(p0, p1, p2, upd):
    """Two runs that should take the same steps: their parameters differ by at
    most UPD of how far the steps moved them.  Scale-free: a defect (a
    gradient not averaged, one rank's batch lost) is of the order of the
    update itself, rounding far below it whatever the learning rate."""
    upd = float(upd)
    z, a, b = read_f32(p0), read_f32(p1), read_f32(p2)
    if not (len(z) == len(a) == len(b) > 0):
        print("FAIL: parameter dumps differ in size: %d %d %d" % (len(z), len(a), len(b)))
        return 1
    d = n = u = 0.0
    for x0, x1, x2 in zip(z, a, b):
        d += (x1 - x2) ** 2
        n += x1 * x1
        u += (x1 - x0) ** 2
    if not (math.isfinite(d) and math.isfinite(n) and n > 0):
        print("FAIL: parameters not finite")
        return 1
    r, ru, moved = math.sqrt(d / n), math.sqrt(d / u) if u > 0 else math.inf, math.sqrt(u / n)
    ok = ru <= upd and moved > 1e-5
    print("%s: %d parameters, %.2e of the update apart (bound %.0e); relative difference %.2e, "
          "update %.2e of the parameters" % ("PASS" if ok else "FAIL", len(a), ru, upd, r, moved))
    return 0 if ok else 1


def cmd_same(a, b):
    x, y = read_lines(a), read_lines(b)
    same = sum(1 for p, q in zip(x, y) if p == q)
    print("%d of %d" % (same, max(len(x), len(y))))
    return 0


def cmd_stage(out, name, status, aux, log):
    """OUT/NAME.md: the environment header, the verdict, the checks, the log's tail"""
    head, checks = os.path.join(aux, "env.md"), os.path.join(aux, name + ".checks")
    extra = os.path.join(aux, name + ".tables.md")
    lines = ["# gpu-accept stage %s: %s" % (name, status), ""]
    lines += read_lines(head) if os.path.exists(head) else ["- GPU: unknown"]
    lines += ["", "## Checks", ""]
    got = [c for c in read_lines(checks) if c.strip()] if os.path.exists(checks) else []
    lines += got or ["- (none ran)"]
    if os.path.exists(extra) and os.path.getsize(extra):
        lines += ["", "## Figures", ""] + read_lines(extra)
    tail = read_lines(log)[-25:] if os.path.exists(log) else []
    lines += ["", "## Last lines of the raw log (logs/%s.log in logs.tgz)" % name, "", "```"] + tail + ["```", ""]
    with open(os.path.join(out, name + ".md"), "w") as f:
        f.write("\n".join(lines))
    return 0


def cmd_index(out, aux, *stages):
    head = os.path.join(aux, "env.md")
    lines = ["# gpu-accept summary", ""]
    lines += read_lines(head) if os.path.exists(head) else []
    lines += ["", "| stage | result | summary |", "|---|---|---|"]
    bad = 0
    for s in stages:
        if not STAGE_NAME.match(s):
            die("index: not a stage name: %s" % s)
        p = os.path.join(out, s + ".md")
        first = read_lines(p)[0] if os.path.exists(p) else "missing: MISSING"
        status = first.split(": ", 1)[1] if ": " in first else "?"
        bad += status != "PASS"
        lines.append("| %s | %s | %s.md |" % (s, status, s))
    lines.append("")
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(lines))
    return 1 if bad else 0


CMDS = {"header": (cmd_header, None), "devloss": (cmd_devloss, 3),
        "losses": (cmd_losses, 4), "params": (cmd_params, 4), "same": (cmd_same, 2),
        "h5same": (cmd_h5same, -3), "stage": (cmd_stage, 5), "index": (cmd_index, -2)}


def main(argv):
    if len(argv) < 2 or argv[1] not in CMDS:
        die("usage: accept_lib.py {%s} ARGS..." % ",".join(CMDS))
    fn, nargs = CMDS[argv[1]]
    args = argv[2:]
    if nargs is None:
        return fn(args)
    if nargs < 0:   # at least -nargs
        if len(args) < -nargs:
            die("%s takes at least %d arguments, got %d" % (argv[1], -nargs, len(args)))
        return fn(*args)
    if len(args) != nargs:
        die("%s takes %d arguments, got %d" % (argv[1], nargs, len(args)))
    return fn(*args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
