#!/usr/bin/env python3
"""Figures and tables of head importance, from the file of `transformer heads`
(with the curves of analysis/prune_heads.py, if it ran).

  heatmap  importance, raw and normalised per layer, per kind,
           layers x heads                                           -> PREFIX_importance.{png,pdf}
  curve    BLEU and PPL against the fraction of heads pruned, importance
           order and random orders                                  -> PREFIX_pruning.{png,pdf}
  table    the 10 most and 10 least important heads (raw importance)
           with their confidence and positional fractions                      -> PREFIX_table.{md,csv}
  all      all three

Usage: analysis/heads.py {heatmap,curve,table,all} HEADS.h5 --out PREFIX [--top 10]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (ArgumentParser, AnalysisError, attr_str, check_outputs, figure_paths, int_at_least, main_wrapper,  # noqa: E402
                    open_h5, pyplot, savefig, write_atomic)

KINDS = ("enc", "dec_self", "cross")
KIND_TITLE = {"enc": "encoder self-attention", "dec_self": "decoder self-attention",
              "cross": "encoder-decoder attention"}
FIELDS = ("importance", "importance_norm", "confidence", "frac_prev", "frac_next", "frac_self")


def load(path):
    """dict: FIELD -> [3, N, h] arrays, 'attrs', and 'curves' / 'single' when present"""
    with open_h5(path) as f:
        if attr_str(f, "format") != "transformer-heads":
            raise AnalysisError(path, "not a file of 'transformer heads' (attribute format)")
        d = {}
        for k in FIELDS:
            missing = [f"{kind}/{k}" for kind in KINDS if kind not in f or k not in f[kind]]
            if missing:
                raise AnalysisError(path, f"missing dataset {missing[0]}")
            try:
                d[k] = np.stack([np.asarray(f[kind][k][()], float) for kind in KINDS])
            except (ValueError, TypeError):
                raise AnalysisError(path, f"{k} of {', '.join(KINDS)}: not numbers of one shape") from None
        d["attrs"] = {k: attr_str(f, k) for k in ("checkpoint", "split", "data")}
        d["curves"] = {name: {k: g[k][()] for k in g} for name, g in f["prune"].items()} if "prune" in f else {}
        d["curve_split"] = "/".join(sorted({str(g.attrs.get("split", "")) for g in f["prune"].values()} - {""})
                                    ) if "prune" in f else ""
        try:
            d["single"] = {k: f["single"][k][()] for k in ("bleu", "ppl")} if "single" in f else None
        except KeyError as e:
            raise AnalysisError(path, f"missing dataset single/{e.args[0]}") from None
    check_shapes(path, d)
    return d


def check_shapes(path, d):
    """A damaged file (a dataset deleted or of another shape) is named here,
    before any figure, not by a KeyError or ValueError while drawing."""
    shape = d["importance"].shape
    for k in FIELDS:
        if d[k].shape != shape or len(shape) != 3:
            raise AnalysisError(path, f"{k} has shape {d[k].shape[1:]}, expected layers x heads as importance")
    for k, v in (d["single"] or {}).items():
        if v.shape != shape:
            raise AnalysisError(path, f"single/{k} has shape {v.shape}, expected {shape}")
    for name, c in d["curves"].items():
        for k in ("fraction", "bleu", "ppl"):
            if k not in c:
                raise AnalysisError(path, f"missing dataset prune/{name}/{k}")
            if c[k].ndim != 1 or len(c[k]) != len(c["fraction"]):
                raise AnalysisError(path, f"prune/{name}/{k} has shape {c[k].shape}, expected "
                                          f"({len(c['fraction'])},) as prune/{name}/fraction")
    rand = [c for n, c in d["curves"].items() if n.startswith("random_")]
    if any(not np.array_equal(c["fraction"], rand[0]["fraction"]) for c in rand):
        raise AnalysisError(path, "the random_* curves have different fractions")


def _heat_row(axes, values, title, label, fig):
    """one heatmap per kind (layers x heads) on a shared colour scale"""
    N, h = values.shape[1:]
    vmax = float(values.max()) if values.size and values.max() > 0 else 1.0
    for ax, k, kind in zip(axes, range(3), KINDS):
        im = ax.imshow(values[k], cmap="viridis", vmin=0, vmax=vmax, aspect="auto")
        ax.set_title(f"{KIND_TITLE[kind]}: {title}", fontsize=8)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_xticks(range(h))
        ax.set_yticks(range(N))
        for l in range(N):
            for j in range(h):
                v = values[k, l, j]
                ax.text(j, l, f"{v:.3g}", ha="center", va="center", fontsize=6,
                        color="white" if v < 0.6 * vmax else "black")
    fig.colorbar(im, ax=axes, shrink=0.8, label=label)


def heatmap(d, prefix):
    """raw importance (comparable across layers and kinds) above the
    importance normalised per layer (Michel et al.'s pruning score)"""
    plt = pyplot()
    N, h = d["importance"].shape[1:]
    fig, axes = plt.subplots(2, 3, figsize=(3 + 1.65 * h, 0.9 * N + 4.2), constrained_layout=True)
    _heat_row(axes[0], d["importance"], "importance", "mean |dL/dξ| (L: NLL per target token)", fig)
    _heat_row(axes[1], d["importance_norm"], "normalised per layer", "importance / l2 norm of its layer", fig)
    fig.suptitle(f"Head importance on {d['attrs']['split']} (Michel et al. 2019)", fontsize=10)
    return [(fig, prefix + "_importance")]


def curve(d, prefix, path):
    if not d["curves"]:
        raise AnalysisError(path, "no pruning curves: run analysis/prune_heads.py on it first")
    plt = pyplot()
    fig, (ax_b, ax_p) = plt.subplots(1, 2, figsize=(9, 3.6), constrained_layout=True)
    rand = [c for n, c in sorted(d["curves"].items()) if n.startswith("random_")]
    split = d["curve_split"] or "dev"
    for ax, key, label in ((ax_b, "bleu", f"{split} BLEU (tokenised)"), (ax_p, "ppl", f"{split} perplexity")):
        if rand:
            x = rand[0]["fraction"] * 100
            ys = np.stack([c[key] for c in rand])
            ax.fill_between(x, ys.min(0), ys.max(0), color="tab:gray", alpha=0.25, lw=0)
            ax.plot(x, ys.mean(0), "o--", color="tab:gray", ms=3, label=f"random order (mean, range of {len(rand)})")
        for name, color, what in (("importance", "tab:blue", "normalised per layer"),
                                  ("importance_raw", "tab:orange", "raw"),
                                  ("importance_enc", "tab:green", "encoder self only, % of its heads"),
                                  ("importance_dec_self", "tab:red", "decoder self only, % of its heads"),
                                  ("importance_cross", "tab:purple", "enc-dec only, % of its heads")):
            if name in d["curves"]:
                c = d["curves"][name]
                ax.plot(c["fraction"] * 100, c[key], "o-", color=color, ms=4,
                        label=f"least important first ({what})")
        ax.set_xlabel("heads pruned (% of all heads)")
        ax.set_ylabel(label)
        if key == "ppl":
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Pruning attention heads (Michel et al. 2019, section 4)", fontsize=10)
    return [(fig, prefix + "_pruning")]


def table_rows(d, top):
    """the top most and least important heads by raw importance, which
    compares heads across layers (the normalised score cannot: every layer
    has norm 1)"""
    imp = d["importance"]
    flat = np.argsort(-imp.reshape(-1), kind="stable")
    top = min(top, flat.size // 2)   # the two ends never share a head
    pick = list(flat[:top]) + list(flat[::-1][:top])
    rows = []
    for rank, i in enumerate(pick):
        k, l, h = np.unravel_index(i, imp.shape)
        r = {"group": "most" if rank < top else "least", "head": f"{KINDS[k]}:{l}:{h}"}
        for f in FIELDS:
            r[f] = float(d[f][k, l, h])
        if d["single"] is not None:
            r["bleu_masked"] = float(d["single"]["bleu"][k, l, h])
        rows.append(r)
    return rows


def table(d, prefix, top):
    rows = table_rows(d, top)
    cols = ["group", "head"] + list(FIELDS) + (["bleu_masked"] if d["single"] is not None else [])
    fmt = lambda v: v if isinstance(v, str) else f"{v:.3f}"  # noqa: E731
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]
    csv = [",".join(cols)] + [",".join(fmt(r[c]) for c in cols) for r in rows]
    return [(prefix + "_table.md", "\n".join(md) + "\n"), (prefix + "_table.csv", "\n".join(csv) + "\n")]


def main(argv):
    ap = ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("heatmap", "curve", "table", "all"))
    ap.add_argument("heads", metavar="HEADS.h5")
    ap.add_argument("--out", required=True, help="output prefix, e.g. runs/base/figs/heads")
    ap.add_argument("--top", type=int_at_least(1), default=10, help="heads at each end of the table (default 10)")
    a = ap.parse_args(argv)
    d = load(a.heads)
    # figures and tables are all made before the first is written: "all"
    # wrote the heatmap, then failed on the curves and left a mixed set
    figs, texts = [], []
    if a.what in ("heatmap", "all"):
        figs += heatmap(d, a.out)
    if a.what in ("curve", "all") and (d["curves"] or a.what == "curve"):
        figs += curve(d, a.out, a.heads)
    if a.what in ("table", "all"):
        texts += table(d, a.out, a.top)
    # and every output name checked: a FIFO as the last was found after the figures were written
    check_outputs([p for _, prefix in figs for p in figure_paths(prefix)] + [path for path, _ in texts])
    out = []
    for fig, prefix in figs:
        out += savefig(fig, prefix)
    for path, text in texts:
        write_atomic(path, text)
        out.append(path)
    for p in out:
        print(p)
    return 0


if __name__ == "__main__":
    main_wrapper(main)
