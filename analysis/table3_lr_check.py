#!/usr/bin/env python3
"""The converged Table 3's learning-rate check (issue 42; protocol.md,
"Learning-rate sensitivity"): base, C1, C3, C4, C6 and C7, seed 1 each, at
half and twice the chosen peak rate, read beside the same rows' seed-1 runs
at the chosen rate (the main sweep).

For each row and rate: Δ best dev NLL (nats) of the row's run against base's
run at the same rate, and whether the row's sign against base holds at all
three rates. One seed per rate gives a sign, not a test: the main sweep's
pooled interval (analysis/table3.py) says how large a Δ seed noise makes, and
a sign that changes while every Δ lies inside ±band (0.04 nats, the
protocol's) is reported as such, not as a reversal.

The three sweeps are directories of result files as jobs/run-local.sh table3
writes them (SWEEP/results/<run>.h5, docs/results.md); by default the check's
two sit beside the main one as SWEEP-lr-half and SWEEP-lr-twice
(protocol.md). A run that has not finished is shown as waiting, a failed one
as failed; nothing is concluded for a row until its six runs (base's three
and its own three) are in.

Writes PREFIX.md (default SWEEP-lr-check.md) and prints it.

Example:
  table3_lr_check.py docs/results-multi30k/converged/sweep
"""

import argparse
import math
import os

from common import ArgumentParser, AnalysisError, main_wrapper, write_atomic
from compare import is_failed, nll, usable
from table3 import load_rows

ROWS = ("C1", "C3", "C4", "C6", "C7")   # the depth and width rows (issue 42)
RATES = ("half", "chosen", "twice")
BAND = 0.04                             # nats: the protocol's primary band


def seed1_runs(sweep):
    """{row: run record} of the seed-1 runs (bare row names) of a sweep
    directory; {} where it has no results yet."""
    if not os.path.isdir(os.path.join(sweep, "results")):
        return {}
    return {r["row"]: r for r in load_rows(sweep, None) if r["row"] in ("base",) + ROWS}


def run_state(r):
    """'done', 'failed' or 'waiting' for a run record (or None)."""
    if r is None:
        return "waiting"
    if is_failed(r):
        return "failed"
    return "done" if usable(r) else "waiting"


def lr_peak(r):
    try:
        return float(r["cfg"].get("lr_peak"))
    except (TypeError, ValueError):
        return math.nan


def deltas(sweeps):
    """{row: {rate: (Δ or NaN, why)}}: the row's best dev NLL minus base's at
    each rate; why is '' for a Δ, else what it waits for."""
    out = {}
    for row in ROWS:
        out[row] = {}
        for rate in RATES:
            runs = sweeps[rate]
            states = {name: run_state(runs.get(name)) for name in ("base", row)}
            bad = [f"{n} {s}" for n, s in states.items() if s != "done"]
            out[row][rate] = (math.nan, ", ".join(bad)) if bad else (nll(runs[row]) - nll(runs["base"]), "")
    return out


def verdict(ds):
    """Whether the row's sign against base holds over the three rates."""
    if any(math.isnan(d) for d, _ in ds.values()):
        return "waiting"
    signs = {rate: math.copysign(1, d) for rate, (d, _) in ds.items()}
    if len(set(signs.values())) == 1:
        return "holds"
    flips = [rate for rate in ("half", "twice") if signs[rate] != signs["chosen"]]
    inside = all(abs(d) <= BAND for d, _ in ds.values())
    return f"flips at {' and '.join(flips)}" + (f" (every Δ within ±{BAND}: inside the band)" if inside else "")


def rate_label(sweeps, rate):
    r = sweeps[rate].get("base")
    lr = lr_peak(r) if r is not None else math.nan
    return f"{rate} ({lr:g})" if math.isfinite(lr) else rate


def to_markdown(sweeps, table):
    head = ["row"] + [f"Δ NLL vs base at {rate_label(sweeps, rate)}" for rate in RATES] + ["sign"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in ROWS:
        cells = [f"{d:+.3f}" if math.isfinite(d) else f"– ({why})" for d, why in table[row].values()]
        lines.append("| " + " | ".join([row] + cells + [verdict(table[row])]) + " |")
    return ("Learning-rate check (protocol.md, \"Learning-rate sensitivity\"): seed 1 of each row, "
            "Δ best dev NLL (nats) of the row's run against base's at the same peak rate; "
            "one seed per rate, so a sign, not a test.\n\n" + "\n".join(lines) + "\n")


def build_parser():
    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", help="the main sweep's directory (its seed-1 runs are the chosen rate's)")
    p.add_argument("--half", help="the half-rate sweep (default SWEEP-lr-half)")
    p.add_argument("--twice", help="the twice-rate sweep (default SWEEP-lr-twice)")
    p.add_argument("--out", metavar="PREFIX", help="write PREFIX.md (default SWEEP-lr-check)")
    return p


def main(argv=None):
    a = build_parser().parse_args(argv)
    sweep = a.sweep.rstrip("/")
    if not os.path.isdir(sweep):
        raise AnalysisError(sweep, "not a directory")
    for opt, d in (("--half", a.half), ("--twice", a.twice)):
        # a default sweep not yet made is waiting; one the user named is a typo
        if d is not None and not os.path.isdir(d):
            raise AnalysisError(d, f"{opt}: no such sweep directory")
    dirs = {"half": a.half or sweep + "-lr-half", "chosen": sweep, "twice": a.twice or sweep + "-lr-twice"}
    sweeps = {rate: seed1_runs(d) for rate, d in dirs.items()}
    text = to_markdown(sweeps, deltas(sweeps))
    write_atomic((a.out or sweep + "-lr-check") + ".md", text)
    print(text, end="")


if __name__ == "__main__":
    main_wrapper(main)
