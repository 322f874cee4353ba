#!/usr/bin/env python3
"""Pruning curves of several models (seeds), side by side: the summary of
issue #34 (docs/attention.md).

Reads the files of `transformer heads` after analysis/prune_heads.py ran on
each (the same levels, split and options), and writes
  PREFIX_seeds.{png,pdf}  Δ sacreBLEU against each unpruned model, mean and
                          seed range: the importance order (all heads), one
                          curve per attention kind, and the random band
  PREFIX_seeds.md         per curve and seed: the largest fraction pruned
                          that costs less than 1 BLEU, read two ways (the
                          estimate, and the paired bootstrap's 95% interval)

"Costs less than 1 BLEU" at a level: Δ > -1 (estimate) or the interval's
lower end > -1 (interval: confidently less than 1 BLEU lost). The safe
fraction is the largest level at which it holds, with every lower level.

Usage: analysis/heads_seeds.py HEADS1.h5 HEADS2.h5 ... --out PREFIX [--label NAME ...]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (ArgumentParser, AnalysisError, check_outputs, figure_paths, h5_array, main_wrapper, open_h5,  # noqa: E402
                    pyplot, savefig, write_atomic)

KINDS = ("enc", "dec_self", "cross")
CURVE_TITLE = {"importance": "importance order, all heads", "importance_enc": "encoder self only",
               "importance_dec_self": "decoder self only", "importance_cross": "encoder-decoder only"}
COLOR = {"importance": "tab:blue", "importance_enc": "tab:green", "importance_dec_self": "tab:red",
         "importance_cross": "tab:purple"}
NEEDED = ("fraction", "n_pruned", "sacrebleu", "d_bleu", "d_bleu_lo", "d_bleu_hi")


def load_curves(path):
    """{curve name: {field: array}} and the curves' split of one heads file"""
    with open_h5(path) as f:
        if "prune" not in f:
            raise AnalysisError(path, "no pruning curves: run analysis/prune_heads.py on it first")
        curves, splits = {}, set()
        for name, g in f["prune"].items():
            if all(k in g for k in NEEDED):
                # one length for all: a damaged curve failed in np.stack while drawing
                n = len(h5_array(g, path, "fraction", shape=(None,)))
                curves[name] = {k: h5_array(g, path, k, shape=(n,)) for k in NEEDED}
                splits.add(str(g.attrs.get("split", "")))
    if "importance" not in curves:
        raise AnalysisError(path, "no 'importance' curve with Δ BLEU (prune_heads.py of this version)")
    return curves, "/".join(sorted(splits))


def safe_fraction(c, key):
    """largest fraction whose level, and every lower one, loses less than 1
    BLEU: key 'd_bleu' (the estimate) or 'd_bleu_lo' (the interval's end)"""
    ok = np.asarray(c[key]) > -1
    n = int(np.argmin(ok)) if not ok.all() else len(ok)
    return float(c["fraction"][n - 1]) if n else float("nan")


def check_levels(runs):
    """every file has the same levels of each curve it shares with the first"""
    first = runs[0][1]
    for path, curves, _ in runs[1:]:
        for name, c in curves.items():
            if name in first and not np.array_equal(c["fraction"], first[name]["fraction"]):
                raise AnalysisError(path, f"curve '{name}' has other levels than {runs[0][0]}'s")


def plot(runs, prefix, split):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4), constrained_layout=True)
    rand = [c for _, curves, _ in runs for n, c in curves.items() if n.startswith("random_")]
    if rand:
        ys = np.stack([c["d_bleu"] for c in rand])
        x = rand[0]["fraction"] * 100
        ax.fill_between(x, ys.min(0), ys.max(0), color="tab:gray", alpha=0.25, lw=0,
                        label=f"random orders (range of {len(rand)})")
    for name, title in CURVE_TITLE.items():
        cs = [curves[name] for _, curves, _ in runs if name in curves]
        if not cs:
            continue
        ys = np.stack([c["d_bleu"] for c in cs])
        x = cs[0]["fraction"] * 100
        ax.plot(x, ys.mean(0), "o-", color=COLOR[name], ms=3, label=f"{title} (mean of {len(cs)})")
        ax.fill_between(x, ys.min(0), ys.max(0), color=COLOR[name], alpha=0.15, lw=0)
    ax.axhline(-1, color="k", lw=0.8, ls=":")
    ax.set_xlabel("heads pruned (% of the curve's heads)")
    ax.set_ylabel(f"Δ sacreBLEU vs unpruned ({split})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle("Pruning heads, least important first (Michel et al. 2019), per seed", fontsize=10)
    out = savefig(fig, prefix + "_seeds")
    plt.close(fig)
    return out


def table(runs, labels):
    """markdown: per curve, per seed, the safe fraction (estimate / interval)"""
    names = [n for n in CURVE_TITLE if any(n in curves for _, curves, _ in runs)]
    head = ["curve"] + [f"{lab} (est. / 95% CI)" for lab in labels] + ["mean (est. / CI)"]
    lines = ["| " + " | ".join(head) + " |", "|:--|" + "--:|" * (len(head) - 1)]
    for name in names:
        cells, est, ci = [], [], []
        for _, curves, _ in runs:
            if name not in curves:
                cells.append("–")
                continue
            e, i = safe_fraction(curves[name], "d_bleu"), safe_fraction(curves[name], "d_bleu_lo")
            est.append(e)
            ci.append(i)
            cells.append(f"{e:.0%} / {i:.0%}")
        mean = f"{np.nanmean(est):.0%} / {np.nanmean(ci):.0%}" if est else "–"
        lines.append("| " + " | ".join([CURVE_TITLE[name]] + cells + [mean]) + " |")
    return "\n".join(lines) + "\n"


def main(argv):
    ap = ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("heads", nargs="+", metavar="HEADS.h5")
    ap.add_argument("--out", required=True, help="output prefix")
    ap.add_argument("--label", nargs="*", help="one name per file (default: the file names)")
    a = ap.parse_args(argv)
    labels = a.label or [os.path.splitext(os.path.basename(p))[0] for p in a.heads]
    if len(labels) != len(a.heads):
        raise AnalysisError("arguments", f"{len(labels)} labels for {len(a.heads)} files")
    runs = [(p,) + load_curves(p) for p in a.heads]
    check_levels(runs)
    split = "/".join(sorted({s for *_, s in runs}))
    # both outputs' names checked, and the table built, before the figure is written
    check_outputs(figure_paths(a.out + "_seeds") + [a.out + "_seeds.md"])
    md = (f"Safe pruning fraction: the largest share of the curve's heads pruned, least important first, "
          f"at which BLEU on {split} (and at every smaller share) is less than 1 below the unpruned "
          f"model's: by the estimate / by the lower end of the paired bootstrap's 95% interval.\n\n")
    md += table(runs, labels)
    out = plot(runs, a.out, split)
    write_atomic(a.out + "_seeds.md", md)
    for p in out + [a.out + "_seeds.md"]:
        print(p)
    return 0


if __name__ == "__main__":
    main_wrapper(main)
