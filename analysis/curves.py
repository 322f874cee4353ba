#!/usr/bin/env python3
"""Training curves of one or more runs, from RUN_DIR/metrics.h5 (docs/metrics.md):
training loss, learning rate, dev perplexity and throughput, against optimizer
steps and against wall time, several runs in one figure.

Writes PREFIX_steps.{png,pdf} and PREFIX_time.{png,pdf} (default PREFIX:
curves in the current directory).

Example:
  curves.py runs/base runs/A1 runs/A2 --labels base "h=1" "h=4" --out figs/curves
"""

import argparse
import os

import numpy as np

from common import ArgumentParser, AnalysisError, check_outputs, figure_paths, main_wrapper, open_h5, paper_style, pyplot, savefig

# series -> (group, accepted dataset names): the layout of docs/metrics.md is
# /train/{step,loss,lr,tokens_per_s,elapsed_s,tokens} and /dev/{step,loss,ppl,tokens,elapsed_s};
# a flat layout (step, loss, ..., dev_step, dev_ppl at the root) is read too.
SERIES = {
    "step": ("train", ("step",)),
    "loss": ("train", ("loss",)),
    "lr": ("train", ("lr",)),
    "tokens_per_s": ("train", ("tokens_per_s",)),
    "elapsed": ("train", ("elapsed_s", "elapsed")),
    "tokens": ("train", ("tokens",)),   # target tokens per interval (NaN: not logged)
    "dev_step": ("dev", ("step",)),
    "dev_loss": ("dev", ("loss",)),
    "dev_ppl": ("dev", ("ppl",)),
    "dev_elapsed": ("dev", ("elapsed_s", "elapsed")),
}


def _find(f, group, names):
    import h5py

    cands = []
    if group in f and isinstance(f[group], h5py.Group):
        cands += [f[group].get(n) for n in names]
    prefix = "" if group == "train" else group + "_"
    cands += [f.get(prefix + n) for n in names]
    for obj in cands:
        if isinstance(obj, h5py.Dataset) and len(obj.shape) == 1:
            return np.asarray(obj[()], dtype=np.float64)
    return None


def read_metrics(path):
    """Read a metrics.h5 into a dict of 1-D float arrays (missing series are empty).
    Raises AnalysisError if the file is not a training metrics log."""
    with open_h5(path) as f:
        if _find(f, "train", ("step",)) is None:
            raise AnalysisError(path, "not a training metrics log (no 1-D dataset train/step)")
        out = {}
        for k, (g, names) in SERIES.items():
            v = _find(f, g, names)
            out[k] = v if v is not None else np.zeros(0)
    n = len(out["step"])
    for k in ("loss", "lr", "tokens_per_s", "elapsed", "tokens"):
        if len(out[k]) not in (0, n):
            raise AnalysisError(path, f"train/{k} has {len(out[k])} entries but train/step has {n}")
    nd = len(out["dev_step"])
    for k in ("dev_loss", "dev_ppl", "dev_elapsed"):
        if len(out[k]) not in (0, nd):
            raise AnalysisError(path, f"dev/{k[4:]} has {len(out[k])} entries but dev/step has {nd}")
    if nd and not len(out["dev_elapsed"]) and n and len(out["elapsed"]):
        # wall time of each dev evaluation: interpolate the training clock
        out["dev_elapsed"] = np.interp(out["dev_step"], out["step"], out["elapsed"])
    return out


def metrics_path(run):
    """RUN_DIR/metrics.h5, or RUN itself when it is a file."""
    p = run if os.path.isfile(run) else os.path.join(run, "metrics.h5")
    if not os.path.exists(p):
        raise AnalysisError(run, "no metrics.h5 in this run directory")
    return p


def _perplexity_axis(ax, ys):
    """A log y axis where the values ys span at least a decade, labelled 2, 3,
    5, 10, 20 ...; else a linear one. A log axis within one decade can have no
    labelled tick at all (perplexities 1.08 to 1.5 meet neither 1, 2 nor 10)."""
    v = np.concatenate([np.asarray(y, float).ravel() for y in ys]) if ys else np.zeros(0)
    v = v[np.isfinite(v) & (v > 0)]
    if len(v) and v.max() >= 10 * v.min():
        ax.set_yscale("log")
        _plain_log_ticks(ax)


def _plain_log_ticks(ax):
    """Log axis labelled 2, 3, 5, 10, 20 ... instead of 2x10^0 notation."""
    from matplotlib.ticker import FuncFormatter

    def major(v, _):
        return f"{v:g}"

    def minor(v, _):
        if v <= 0:
            return ""
        mant = v / 10 ** np.floor(np.log10(v) + 1e-9)
        return f"{v:g}" if round(mant) in (2, 3, 5) and abs(mant - round(mant)) < 1e-6 else ""

    ax.yaxis.set_major_formatter(FuncFormatter(major))
    ax.yaxis.set_minor_formatter(FuncFormatter(minor))


PANELS = [
    # (key, x of train or dev, y label, log y where the values span a decade)
    ("loss", "train", "training loss (label-smoothed)", False),
    ("lr", "train", "learning rate", False),
    ("dev_ppl", "dev", "dev perplexity", True),
    ("tokens_per_s", "train", "throughput (target tokens/s)", False),
]


def plot(runs, labels, xaxis, prefix, smooth=1):
    """Draw plot_figure() and save it as PREFIX.{png,pdf}."""
    return savefig(plot_figure(runs, labels, xaxis, smooth), prefix)


def plot_figure(runs, labels, xaxis, smooth=1):
    """One 2x2 figure of all runs against xaxis ('step' or 'time')."""
    paper_style()
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(7.0, 4.8), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, kind, ylabel, logy) in zip(axes.flat, PANELS):
        drawn = False
        ys = []
        for i, (m, lab) in enumerate(zip(runs, labels)):
            if kind == "train":
                x = m["step"] if xaxis == "step" else m["elapsed"]
            else:
                x = m["dev_step"] if xaxis == "step" else m["dev_elapsed"]
            y = m[key]
            if len(y) == 0 or len(x) != len(y):
                continue
            if xaxis == "time":
                x = x / 3600.0 if np.nanmax(x) > 3 * 3600 else x / 60.0 if np.nanmax(x) > 180 else x
            if smooth > 1 and kind == "train" and key != "lr" and len(y) >= smooth:
                k = np.ones(smooth) / smooth
                y = np.convolve(y, k, mode="valid")
                x = x[smooth - 1:]
            style = dict(color=colors[i % len(colors)], label=lab)
            if kind == "dev" or len(y) < 3:
                style.update(marker="o", markersize=3)
            ax.plot(x, y, **style)
            ys.append(y)
            drawn = True
        ax.set_ylabel(ylabel)
        if logy and drawn:
            _perplexity_axis(ax, ys)
        if key == "lr":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
        if not drawn:
            ax.text(0.5, 0.5, "not logged", transform=ax.transAxes, ha="center", va="center", color="0.5")
    if xaxis == "step":
        xl = "optimizer step"
    else:
        mx = max((np.nanmax(m["elapsed"]) for m in runs if len(m["elapsed"])), default=0)
        xl = "wall time (h)" if mx > 3 * 3600 else "wall time (min)" if mx > 180 else "wall time (s)"
    for ax in axes[1]:
        ax.set_xlabel(xl)
    handles, labs = axes.flat[0].get_legend_handles_labels()
    if not handles:
        for ax in axes.flat:
            handles, labs = ax.get_legend_handles_labels()
            if handles:
                break
    if len(runs) > 1 or labels[0]:
        fig.legend(handles, labs, loc="upper center", ncol=min(len(labs), 5), frameon=False,
                   bbox_to_anchor=(0.5, 1.04))
    fig.tight_layout()
    return fig


def build_parser():
    p = ArgumentParser(
        prog="curves.py",
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directory holding metrics.h5 (or the file)")
    p.add_argument("--labels", nargs="+", help="legend label per run (default: directory names)")
    p.add_argument("--out", default="curves", metavar="PREFIX", help="output prefix (default: curves)")
    p.add_argument("--x", choices=("step", "time", "both"), default="both", help="x axis (default: both)")
    p.add_argument("--smooth", type=int, default=1, metavar="K",
                   help="moving average over K logged points for loss and throughput (default 1: none)")
    return p


def main(argv):
    a = build_parser().parse_args(argv)
    if a.labels and len(a.labels) != len(a.runs):
        raise AnalysisError("--labels", f"{len(a.labels)} labels for {len(a.runs)} runs")
    if a.smooth < 1:
        raise AnalysisError("--smooth", "must be >= 1")
    runs = [read_metrics(metrics_path(r)) for r in a.runs]
    for r, m in zip(a.runs, runs):
        if len(m["step"]) == 0:
            raise AnalysisError(metrics_path(r), "no training steps logged yet")
    labels = a.labels or [os.path.basename(os.path.normpath(r if os.path.isdir(r) else os.path.dirname(r) or "."))
                          for r in a.runs]
    xs = ("step", "time") if a.x == "both" else (a.x,)
    prefixes = {x: f"{a.out}_{'steps' if x == 'step' else 'time'}" for x in xs}
    # every figure's names checked before the first is written
    check_outputs(p for prefix in prefixes.values() for p in figure_paths(prefix))
    out = []
    for x, prefix in prefixes.items():
        out += plot(runs, labels, x, prefix, a.smooth)
    for p in out:
        print(p)
    return 0


if __name__ == "__main__":
    main_wrapper(main)
