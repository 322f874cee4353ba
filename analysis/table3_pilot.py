#!/usr/bin/env python3
"""The pilot of a scaled Table 3: which learning-rate setting to train every row with.

Reads the result files of a pilot sweep (SWEEP_DIR/results/*.h5, docs/results.md):
the base row trained with several (peak rate, warmup) settings, each with several
seeds.  For every setting it prints the seeds' final dev NLL, their spread, the
verdicts (analysis/verdict.py) and the step at which each seed left the plateau (its
dev NLL first STUCK_NATS_BELOW_PLATEAU below the unigram NLL), and picks the setting
the protocol asks for (docs/results-multi30k.md): every seed healthy and the seeds'
final dev NLLs within --tol nats of each other, then the lowest mean final dev NLL.
Writes PREFIX.md and a figure PREFIX.{png,pdf} of the dev NLL curves (default
PREFIX: SWEEP_DIR/pilot).  The converged protocol's pilot has a rule of its
own: analysis/table3_conv_pilot.py.

Example:
  table3_pilot.py docs/results-multi30k/pilot --tol 0.05
"""

import argparse
import glob
import math
import os

import numpy as np

from common import (ArgumentParser, AnalysisError, check_outputs, figure_paths, finite_float, main_wrapper, pyplot, savefig,
                    write_atomic)
from compare import dev_curve, stored_dev_curve
from row_result import read_result
from verdict import STUCK_NATS_BELOW_PLATEAU


def setting_of(r):
    """(peak rate, warmup) of a run: lr_peak and warmup of its config, or
    eq. 3's peak lr_factor d_model^-0.5 warmup^-0.5 (3 significant digits)."""
    cfg = r["cfg"]
    try:
        w = int(cfg["warmup"])
        if float(cfg.get("lr_peak", 0)) > 0:
            return float(cfg["lr_peak"]), w
        peak = float(cfg.get("lr_factor", 1)) / math.sqrt(float(cfg["d_model"]) * w)
        return float(f"{peak:.3g}"), w
    except (KeyError, ValueError):
        raise AnalysisError(r["path"], "a pilot run needs warmup and d_model (and lr_peak or lr_factor)") from None


def left_plateau(r):
    """First dev step whose NLL is STUCK_NATS_BELOW_PLATEAU below the unigram NLL."""
    c, u = r["curves"], r.get("unigram_nll")
    if not c or u is None or not math.isfinite(u):
        return None
    below = np.flatnonzero(c["dev_nll"] <= u - STUCK_NATS_BELOW_PLATEAU)
    return int(c["dev_step"][below[0]]) if len(below) else None


def final_nll(r, last):
    """Mean dev NLL of the run's last `last` dev evaluations: one evaluation
    moves by about 0.05 nats from one to the next late in a pilot run."""
    nll = dev_curve(r)[1]  # one value per step (compare.dev_curve)
    return float(np.mean(nll[-last:]))


def settings(runs):
    """{(peak, warmup): [runs sorted by seed]}"""
    out = {}
    for r in runs:
        out.setdefault(setting_of(r), []).append(r)
    for v in out.values():
        v.sort(key=lambda r: int(r["cfg"].get("seed", 1)))
    return dict(sorted(out.items()))


def summarize(cell, tol, last):
    nlls = [final_nll(r, last) for r in cell]
    healthy = all(r["verdict"] == "healthy" for r in cell)
    spread = max(nlls) - min(nlls)
    return {"nlls": nlls, "mean": float(np.mean(nlls)), "spread": spread, "healthy": healthy,
            "ok": healthy and len(cell) > 1 and spread <= tol,
            "verdicts": [r["verdict"] or "?" for r in cell], "left": [left_plateau(r) for r in cell],
            "steps": [r["train_steps"] for r in cell]}


def choose(summaries):
    ok = [(s["mean"], k) for k, s in summaries.items() if s["ok"]]
    return min(ok)[1] if ok else None


def to_markdown(summaries, chosen, tol, last):
    out = [f"| peak rate | warmup | seeds | dev NLL per seed (mean of the last {last} evaluations) | spread | left the plateau at step | verdicts |",
           "|---:|---:|---:|---|---:|---|---|"]
    for (p, w), s in summaries.items():
        mark = " **(chosen)**" if (p, w) == chosen else ""
        out.append(f"| {p:g}{mark} | {w} | {len(s['nlls'])} | {' / '.join(f'{x:.3f}' for x in s['nlls'])} "
                   f"| {s['spread']:.3f} | {' / '.join(str(x) if x else 'never' for x in s['left'])} "
                   f"| {', '.join(s['verdicts'])} |")
    rule = (f"Rule: every seed healthy and the seeds' dev NLLs within {tol:g} nats, then the lowest "
            f"mean; leaving the plateau = dev NLL {STUCK_NATS_BELOW_PLATEAU:g} nats below the unigram NLL.")
    pick = (f"Chosen: peak {chosen[0]:g}, warmup {chosen[1]}." if chosen else
            "No setting meets the rule.")
    return "\n".join(out) + "\n\n" + rule + "\n" + pick + "\n"


def plot(groups):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, ((p, w), cell) in enumerate(groups.items()):
        for j, r in enumerate(cell):
            c = r["curves"]
            ax.plot(c["dev_step"], c["dev_nll"], color=f"C{i}", ls="-" if j == 0 else "--",
                    label=f"peak {p:g}, warmup {w}" if j == 0 else None)
    u = next((r["unigram_nll"] for cell in groups.values() for r in cell
              if r.get("unigram_nll") and math.isfinite(r["unigram_nll"])), None)
    if u:
        ax.axhline(u, color="grey", lw=0.8, ls=":", label="unigram NLL")
    ax.set_xlabel("step")
    ax.set_ylabel("dev NLL (nats per piece)")
    ax.legend(fontsize=8)
    return fig


def build_parser():
    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", help="pilot sweep directory (its results/*.h5)")
    p.add_argument("--tol", type=finite_float(low=0), default=0.05,
                   help="largest spread of the seeds' final dev NLL (nats)")
    p.add_argument("--out", help="output prefix (default SWEEP/pilot)")
    p.add_argument("--last", type=int, default=3, help="dev evaluations averaged per seed (default 3)")
    p.add_argument("--no-plot", action="store_true")
    return p


def main(argv):
    a = build_parser().parse_args(argv)
    files = sorted(glob.glob(os.path.join(a.sweep, "results", "*.h5")))
    if not files:
        raise AnalysisError(a.sweep, "no results/*.h5")
    runs = [r for r in map(read_result, files) if r["status"] == "done"]
    for r in runs:   # without a dev curve the summary failed with a KeyError
        if not r["curves"]:
            raise AnalysisError(r["path"], "no curves (a result file of format version 2 is needed)")
        stored_dev_curve(r)
    groups = settings(runs)
    if a.last < 1:
        raise AnalysisError("--last", f"{a.last}: not a positive count")
    summaries = {k: summarize(v, a.tol, a.last) for k, v in groups.items()}
    chosen = choose(summaries)
    md = to_markdown(summaries, chosen, a.tol, a.last)
    prefix = a.out or os.path.join(a.sweep, "pilot")
    # the figure is made, and every output name checked, before the table
    # is written: a failure leaves neither
    fig = None if a.no_plot else plot(groups)
    check_outputs([prefix + ".md"] + ([] if fig is None else figure_paths(prefix)))
    write_atomic(prefix + ".md", md)
    print(md, end="")
    if fig is not None:
        savefig(fig, prefix)
    return 0


if __name__ == "__main__":
    main_wrapper(main)
