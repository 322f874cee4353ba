#!/usr/bin/env python3
"""Write (or read back) the result file of one Table 3 row: SWEEP/results/<row>.h5.

The sweep job calls this once per row after training and dev evaluation (and
may call it with --status pending before, or --status failed on an error).
The format is documented in docs/results.md.  The file is written to a
temporary name, fsynced and renamed, so a reader never sees half a file.

Examples:
  row_result.py --out SWEEP/results/A1.h5 --config input/table3/A1.cfg \\
      --set train_steps=200 --params 4473344 --metrics RUN/metrics.h5 \\
      --dev-bleu 12.3 --dev-bleu-tok 12.9 --status done
  row_result.py --out SWEEP/results/A1.h5 --config input/table3/A1.cfg \\
      --status failed --message "train exited 2: bad key"
  row_result.py --show SWEEP/results/A1.h5
"""

import argparse
import math
import os
import sys
import time

import numpy as np

from common import AnalysisError, attr_float, attr_str, h5_atomic, main_wrapper, open_h5

FORMAT = "transformer-row-result"
FORMAT_VERSION = 1
STATUSES = ("done", "failed", "pending")
# numeric attributes: name -> (type, meaning); NaN (or -1 for integers) = not known
NUMERIC = {
    "params": (np.int64, "exact parameter count (transformer params)"),
    "train_steps": (np.int64, "optimizer steps trained"),
    "dev_loss": (np.float64, "dev label-smoothed loss per target token"),
    "dev_ppl": (np.float64, "dev perplexity per target wordpiece (unsmoothed)"),
    "dev_bleu": (np.float64, "dev sacreBLEU, 13a, mixed case (beam search, no checkpoint averaging)"),
    "dev_bleu_tok": (np.float64, "dev tokenised BLEU: Moses tokens, multi-bleu.perl (the paper's kind)"),
    "wall_seconds": (np.float64, "training wall time in seconds"),
    "paper_ppl": (np.float64, "the paper's Table 3 dev PPL for this row"),
    "paper_bleu": (np.float64, "the paper's Table 3 dev BLEU for this row"),
    "paper_params_m": (np.float64, "the paper's Table 3 parameters x 10^6"),
}


def parse_config_text(text, origin="config"):
    """Parse `key = value` lines ('#' starts a comment), as src/config.c does.
    Returns an ordered dict key -> value string."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" not in line:
            raise AnalysisError(f"{origin}:{n}", f"expected 'key = value', got '{line}'")
        k, v = line.split("=", 1)
        k, v = k.strip(), v.strip()
        if not k:
            raise AnalysisError(f"{origin}:{n}", "empty key")
        out[k] = v
    return out


def config_to_text(cfg):
    return "".join(f"{k} = {v}\n" for k, v in cfg.items())


def cfg_float(cfg, key):
    """A numeric config value, NaN when absent or 0 (the config's 'no paper number')."""
    try:
        v = float(cfg[key])
    except (KeyError, ValueError):
        return float("nan")
    return v if v != 0 else float("nan")


def read_result(path):
    """Read a row result file into a dict (raises AnalysisError if it is not one)."""
    with open_h5(path) as f:
        if attr_str(f, "format") != FORMAT:
            raise AnalysisError(path, f"not a Table 3 row result (no attribute format='{FORMAT}')")
        r = {"path": path, "format_version": int(attr_float(f, "format_version", 0))}
        for k in ("row", "status", "config", "message", "created"):
            r[k] = attr_str(f, k, "")
        for k, (t, _) in NUMERIC.items():
            v = attr_float(f, k)
            if t is np.int64:
                v = int(v) if math.isfinite(v) and v >= 0 else None
            r[k] = v
    if r["status"] not in STATUSES:
        raise AnalysisError(path, f"status '{r['status']}' is not one of {', '.join(STATUSES)}")
    if not r["row"]:
        raise AnalysisError(path, "attribute 'row' is empty")
    r["cfg"] = parse_config_text(r["config"], f"{path}:config")
    return r


def write_result(path, attrs):
    """Write attrs (str / int / float values) as root attributes of a new HDF5
    file at path, atomically."""
    import h5py

    with h5_atomic(path) as f:
        for k, v in attrs.items():
            if isinstance(v, str):
                f.attrs.create(k, v, dtype=h5py.string_dtype("utf-8"))
            else:
                f.attrs[k] = v


def from_metrics(path):
    """Last training step, elapsed time and last dev loss/PPL from a run's metrics.h5."""
    from curves import read_metrics

    m = read_metrics(path)
    out = {}
    if len(m["step"]):
        out["train_steps"] = int(m["step"][-1])
    if len(m["elapsed"]):
        out["wall_seconds"] = float(m["elapsed"][-1])
    if len(m["dev_ppl"]):
        out["dev_ppl"] = float(m["dev_ppl"][-1])
    if len(m["dev_loss"]):
        out["dev_loss"] = float(m["dev_loss"][-1])
    return out


def bleu_scores(hyp_path, ref_path, lang="de"):
    """BLEU of detokenised hypothesis lines against one reference file, both
    kinds of analysis/bleu.py: (sacreBLEU 13a, tokenised BLEU, sacreBLEU signature)."""
    from bleu import scores

    def lines(p):
        try:
            with open(p, encoding="utf-8") as f:
                return [l.rstrip("\n") for l in f]
        except OSError as e:
            raise AnalysisError(p, e.strerror or "cannot read") from None

    h, r = lines(hyp_path), lines(ref_path)
    if len(h) != len(r):
        raise AnalysisError(hyp_path, f"{len(h)} lines but the reference {ref_path} has {len(r)}")
    sacre, sig, tok = scores(h, [r], lang=lang)
    return float(sacre.score), float(tok.score), sig


def show(path):
    r = read_result(path)
    print(f"{path}: row {r['row']} status {r['status']}")
    for k in NUMERIC:
        print(f"  {k:15s} {r[k]}")
    if r["message"]:
        print(f"  message         {r['message']}")
    return 0


def build_parser():
    p = argparse.ArgumentParser(
        prog="row_result.py",
        description="Write the HDF5 result file of one Table 3 sweep row (docs/results.md), "
                    "or print one with --show.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2],
    )
    p.add_argument("--show", metavar="F", help="print the result file F and exit")
    p.add_argument("--out", metavar="F", help="result file to write (SWEEP/results/<row>.h5)")
    p.add_argument("--row", help="row name (default: the config's 'row' key, else the config file's name)")
    p.add_argument("--config", metavar="CFG", help="the row's config file (its text is stored)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="a command-line override the run used (e.g. train_steps=200); repeatable")
    p.add_argument("--status", choices=STATUSES, default="done")
    p.add_argument("--message", default="", help="why a row failed (one line)")
    p.add_argument("--params", type=int, help="exact parameter count ('params N' of transformer params)")
    p.add_argument("--steps", type=int, dest="train_steps", help="training steps done")
    p.add_argument("--dev-loss", type=float)
    p.add_argument("--dev-ppl", type=float)
    p.add_argument("--dev-bleu", type=float, help="dev sacreBLEU (13a)")
    p.add_argument("--dev-bleu-tok", type=float, help="dev tokenised BLEU (Moses tokens, multi-bleu.perl)")
    p.add_argument("--wall", type=float, dest="wall_seconds", help="training wall time, seconds")
    p.add_argument("--metrics", metavar="METRICS_H5",
                   help="take steps, wall time and the last dev loss/PPL from the run's metrics.h5 "
                        "(explicit options win)")
    p.add_argument("--hyp", help="decoded dev translations (one per line): dev sacreBLEU and tokenised "
                                 "BLEU by analysis/bleu.py")
    p.add_argument("--ref", help="dev references (one per line), with --hyp")
    p.add_argument("--lang", default="de", help="target language of the Moses tokenizer (default: de)")
    p.add_argument("--paper-ppl", type=float)
    p.add_argument("--paper-bleu", type=float)
    p.add_argument("--paper-params-m", type=float)
    return p


def main(argv):
    a = build_parser().parse_args(argv)
    if a.show:
        return show(a.show)
    if not a.out:
        raise AnalysisError("row_result.py", "--out (or --show) is required")
    cfg = {}
    if a.config:
        try:
            with open(a.config, encoding="utf-8") as f:
                cfg = parse_config_text(f.read(), a.config)
        except OSError as e:
            raise AnalysisError(a.config, e.strerror or "cannot read") from None
    for s in a.set:
        if "=" not in s:
            raise AnalysisError("--set", f"'{s}' is not KEY=VALUE")
        k, v = s.split("=", 1)
        cfg[k.strip()] = v.strip()
    row = a.row or cfg.get("row") or (os.path.splitext(os.path.basename(a.config))[0] if a.config else "")
    if not row:
        raise AnalysisError("row_result.py", "no row name: give --row or a --config with a 'row' key")
    cfg.setdefault("row", row)

    vals = {k: (-1 if t is np.int64 else float("nan")) for k, (t, _) in NUMERIC.items()}
    if "train_steps" in cfg:
        try:
            vals["train_steps"] = int(float(cfg["train_steps"]))
        except ValueError:
            pass
    for k in ("paper_ppl", "paper_bleu", "paper_params_m"):
        vals[k] = cfg_float(cfg, k)
    if a.metrics:
        try:
            vals.update(from_metrics(a.metrics))
        except AnalysisError as e:
            if a.status == "done":
                raise
            # recording a failure must not fail on the failed run's log
            print(f"warning: {e.thing}: {e.problem} (ignored for a {a.status} row)", file=sys.stderr)
    sig = ""
    if a.hyp or a.ref:
        if not (a.hyp and a.ref):
            raise AnalysisError("row_result.py", "--hyp and --ref go together")
        vals["dev_bleu"], vals["dev_bleu_tok"], sig = bleu_scores(a.hyp, a.ref, a.lang)
    for k in NUMERIC:
        v = getattr(a, k, None)
        if v is not None:
            vals[k] = v
    for k, (t, _) in NUMERIC.items():
        vals[k] = t(vals[k])
        if t is np.float64 and math.isinf(vals[k]):
            raise AnalysisError(f"--{k.replace('_', '-')}", "value is infinite")
    if a.status == "done" and not math.isfinite(vals["dev_ppl"]):
        raise AnalysisError("row_result.py", "status done needs the dev PPL (--dev-ppl or --metrics)")

    attrs = {
        "format": FORMAT,
        "format_version": np.int32(FORMAT_VERSION),
        "row": row,
        "status": a.status,
        "message": a.message.replace("\n", " "),
        "config": config_to_text(cfg),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if sig:
        attrs["bleu_signature"] = sig
    attrs.update(vals)
    write_result(a.out, attrs)
    return 0


if __name__ == "__main__":
    main_wrapper(main)
