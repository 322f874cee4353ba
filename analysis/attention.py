#!/usr/bin/env python3
"""Attention maps from an HDF5 attention file (docs/attention.md): heatmaps
labelled with the tokens, per-head statistics, and their evolution over
training from the probe maps written during training.

Commands:
  heatmap FILE    one head (--head H) or a grid of all heads of a layer
  stats FILE      per-head statistics, a table of heads by layer and a figure
  evolution FILE  the statistics against training step (probe file)

Statistics of a head, each averaged over the query positions of a sentence
and then over sentences (rows with no keys are skipped):
  entropy    -sum_j p_ij ln p_ij  (nats; 0 for a one-hot row, ln n for uniform over n keys)
  distance   sum_j p_ij |i - j|   (mean attention distance in positions)
  diagonal   p_ii                 (attention on the same position)
  previous   p_i,i-1              (on the previous token)
  next       p_i,i+1              (on the next token)
  eos        sum of p_ij over keys j that are the end-of-sentence token

Examples:
  attention.py heatmap attn.h5 --sentence 0 --kind encoder_self --layer 4
  attention.py heatmap attn.h5 --sentence 0 --kind cross --layer 5 --head 2
  attention.py stats attn.h5 --out figs/heads
  attention.py evolution runs/base/attention_probe.h5 --out figs/evolution
"""

import argparse
import math
import os
import re

import numpy as np

from common import AnalysisError, pyplot, as_strings, attr_str, main_wrapper, open_h5, paper_style, savefig, write_atomic

KINDS = ("encoder_self", "decoder_self", "cross")
KIND_TITLE = {"encoder_self": "encoder self-attention", "decoder_self": "decoder self-attention",
              "cross": "encoder-decoder attention"}
STATS = ("entropy", "distance", "diagonal", "previous", "next", "eos")
STAT_TITLE = {"entropy": "entropy (nats)", "distance": "mean distance", "diagonal": "on diagonal",
              "previous": "on previous", "next": "on next", "eos": "on EOS"}
EOS_TOKENS = ("</s>", "<eos>", "<EOS>", "EOS", "[SEP]")
STEP_RE = re.compile(r"^step_0*(\d+)$")


# ---------------------------------------------------------------- reading
def _tokens(g, name):
    """Token strings stored as a dataset or an attribute of group g (None if absent)."""
    if name in g:
        return as_strings(g[name][()])
    if name in g.attrs:
        return as_strings(g.attrs[name])
    return None


def _sentence_groups(root, prefix=""):
    """Groups below root holding at least one map dataset: list of (path, group)."""
    import h5py

    out = []
    for name in root:
        obj = root[name]
        if not isinstance(obj, h5py.Group):
            continue
        if any(k in obj and isinstance(obj[k], h5py.Dataset) for k in KINDS):
            out.append((prefix + name, obj))
        elif not STEP_RE.match(name):
            out += _sentence_groups(obj, prefix + name + "/")
    return out


def _sort_key(path):
    last = path.rsplit("/", 1)[-1]
    return (0, int(last), path) if last.isdigit() else (1, 0, path)


def _read_maps(path, g, s):
    for k in KINDS:
        if k in g:
            a = np.asarray(g[k][()], dtype=np.float64)
            if a.ndim != 4:
                raise AnalysisError(path, f"{g.name}/{k}: expected [layers, heads, Tq, Tk], got shape {a.shape}")
            s["maps"][k] = a


def _read_sentences(path, root):
    """Sentence groups below root.  A sentence's 'greedy' subgroup (maps
    teacher-forced on the model's own translation) becomes s['greedy'], a
    sentence of its own with the parent's source tokens and encoder maps."""
    sents = []
    for p, g in sorted(_sentence_groups(root), key=lambda t: _sort_key(t[0])):
        s = {"name": p.rsplit("/", 1)[-1], "path": p, "maps": {},
             "src_tokens": _tokens(g, "src_tokens"), "tgt_tokens": _tokens(g, "tgt_tokens")}
        _read_maps(path, g, s)
        if "greedy" in g:
            gr = {"name": s["name"], "is_greedy": True, "path": p + "/greedy", "maps": {},
                  "src_tokens": s["src_tokens"], "tgt_tokens": _tokens(g["greedy"], "tgt_tokens")}
            _read_maps(path, g["greedy"], gr)
            if "encoder_self" in s["maps"]:
                gr["maps"]["encoder_self"] = s["maps"]["encoder_self"]
            s["greedy"] = gr
        sents.append(s)
    return sents


def load(path):
    """Read an attention file: {'steps': {step or None: [sentence, ...]}}.  A map
    file has one entry None; a probe file one per /step_<N> group."""
    with open_h5(path) as f:
        steps = {}
        for name in f:
            m = STEP_RE.match(name)
            if m:
                s = _read_sentences(path, f[name])
                if s:
                    steps[int(m.group(1))] = s
        top = _read_sentences(path, f)
        if top:
            steps[None] = top
        kind = attr_str(f, "format", "")
    if kind and not kind.startswith("transformer-attention"):
        raise AnalysisError(path, f"not an attention file (format '{kind}')")
    if not steps:
        raise AnalysisError(path, "not an attention file (no groups with encoder_self/decoder_self/cross maps)")
    return {"steps": dict(sorted(steps.items(), key=lambda kv: -1 if kv[0] is None else kv[0])), "format": kind}


def axis_tokens(sent, kind):
    """(query tokens, key tokens) of a map kind; None where the file has none."""
    src, tgt = sent["src_tokens"], sent["tgt_tokens"]
    return {"encoder_self": (src, src), "decoder_self": (tgt, tgt), "cross": (tgt, src)}[kind]


def _check_tokens(path, sent, kind):
    a = sent["maps"][kind]
    q, k = axis_tokens(sent, kind)
    for toks, n, axis in ((q, a.shape[2], "query"), (k, a.shape[3], "key")):
        if toks is not None and len(toks) != n:
            raise AnalysisError(path, f"sentence {sent['name']}: {kind} has {n} {axis} positions but "
                                      f"{len(toks)} tokens")


# ---------------------------------------------------------------- statistics
def head_stats(a, key_tokens=None):
    """Statistics of every head of one map a [layers, heads, Tq, Tk]: dict stat -> [layers, heads]."""
    a = np.asarray(a, dtype=np.float64)
    L, H, Tq, Tk = a.shape
    rowsum = a.sum(axis=3)
    valid = rowsum > 0                                  # [L, H, Tq]
    nvalid = np.maximum(valid.sum(axis=2), 1)

    def mean_rows(v, rows=None):
        m = valid if rows is None else valid & rows[None, None, :]
        n = m.sum(axis=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, (v * m).sum(axis=2) / np.maximum(n, 1), np.nan)

    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(a > 0, a * np.log(np.where(a > 0, a, 1.0)), 0.0)
    i = np.arange(Tq)[:, None]
    j = np.arange(Tk)[None, :]
    out = {
        "entropy": mean_rows(-plogp.sum(axis=3)),
        "distance": mean_rows((a * np.abs(i - j)).sum(axis=3)),
    }
    q = np.arange(Tq)
    diag = np.zeros((L, H, Tq))
    prev = np.zeros((L, H, Tq))
    nxt = np.zeros((L, H, Tq))
    has_d, has_p, has_n = q < Tk, (q >= 1) & (q - 1 < Tk), q + 1 < Tk
    diag[..., has_d] = a[..., q[has_d], q[has_d]]
    prev[..., has_p] = a[..., q[has_p], q[has_p] - 1]
    nxt[..., has_n] = a[..., q[has_n], q[has_n] + 1]
    out["diagonal"] = mean_rows(diag, has_d)
    out["previous"] = mean_rows(prev, has_p)
    out["next"] = mean_rows(nxt, has_n)
    if key_tokens is not None:
        eos = np.array([t in EOS_TOKENS for t in key_tokens])
        out["eos"] = mean_rows(a[..., eos].sum(axis=3)) if eos.any() else np.full((L, H), np.nan)
    else:
        out["eos"] = np.full((L, H), np.nan)
    del nvalid
    return out


def file_stats(path, sents):
    """Statistics averaged over sentences: dict kind -> stat -> [layers, heads]."""
    acc = {}
    for s in sents:
        for kind, a in s["maps"].items():
            _check_tokens(path, s, kind)
            st = head_stats(a, axis_tokens(s, kind)[1])
            d = acc.setdefault(kind, {"shape": a.shape[:2], "vals": {k: [] for k in STATS}})
            if a.shape[:2] != d["shape"]:
                raise AnalysisError(path, f"sentence {s['name']}: {kind} has {a.shape[:2]} layers x heads, "
                                          f"others {d['shape']}")
            if kind == "decoder_self":
                st["next"] = np.full_like(st["next"], np.nan)  # 0 by the causal mask: not a property of the head
            for k in STATS:
                d["vals"][k].append(st[k])
    out = {}
    for kind in KINDS:
        if kind in acc:
            with np.errstate(invalid="ignore"):
                import warnings

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    out[kind] = {k: np.nanmean(np.stack(v), axis=0) for k, v in acc[kind]["vals"].items()}
    return out


# ---------------------------------------------------------------- selection
def use_greedy(path, sents):
    """The sentences' maps teacher-forced on the model's greedy translations."""
    if not all("greedy" in s for s in sents):
        raise AnalysisError(path, "no greedy maps (write them with transformer attention --greedy)")
    return [s["greedy"] for s in sents]


def pick_step(path, data, step):
    steps = data["steps"]
    if step is None:
        key = None if None in steps else max(k for k in steps if k is not None)
    else:
        if step not in steps:
            have = ", ".join(str(k) for k in steps if k is not None) or "none"
            raise AnalysisError(path, f"no maps of step {step} (steps: {have})")
        key = step
    return key, steps[key]


def pick_sentence(path, sents, which):
    if which is None:
        return sents[0]
    for s in sents:
        if s["name"] == str(which) or s["path"] == str(which):
            return s
        if str(which).isdigit() and s["name"].isdigit() and int(s["name"]) == int(which):
            return s  # '42' finds /sentences/000042
    names = [s["name"] for s in sents]
    shown = ", ".join(names[:10]) + (" ..." if len(names) > 10 else "")
    raise AnalysisError(path, f"no sentence '{which}' (sentences: {shown})")


def pick_map(path, sent, kind, layer):
    if kind not in sent["maps"]:
        raise AnalysisError(path, f"sentence {sent['name']} has no {kind} maps (has: {', '.join(sent['maps'])})")
    a = sent["maps"][kind]
    if not 0 <= layer < a.shape[0]:
        raise AnalysisError(path, f"layer {layer} out of range: {kind} has layers 0..{a.shape[0] - 1}")
    _check_tokens(path, sent, kind)
    return a


# ---------------------------------------------------------------- figures
SPECIAL = ("<s>", "</s>", "<pad>", "<unk>", "<bos>", "<eos>")


def display_tokens(toks):
    """Tokens as shown on the axes: SentencePiece word starts lose their
    '▁' (drawn as a block by most fonts); pieces continuing a word get a
    leading '##' so the segmentation stays visible."""
    if toks is None or not any("▁" in t for t in toks):
        return toks
    out = []
    for t in toks:
        if t in SPECIAL:
            out.append(t)
        elif t.startswith("▁"):
            out.append(t[1:] or "␣")
        else:
            out.append("##" + t)
    return out


def _labels(toks, n):
    return list(display_tokens(toks)) if toks is not None else [str(i) for i in range(n)]


def _draw(ax, m, qlab, klab, cmap, show_x=True, show_y=True, fontsize=None):
    im = ax.imshow(m, cmap=cmap, vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
    Tq, Tk = m.shape
    fs = fontsize or max(4.0, min(8.0, 200.0 / max(Tq, Tk)))
    ax.set_xticks(range(Tk))
    ax.set_yticks(range(Tq))
    ax.set_xticklabels(klab if show_x else [], rotation=90, fontsize=fs)
    ax.set_yticklabels(qlab if show_y else [], fontsize=fs)
    ax.tick_params(length=0, pad=1.5)
    ax.grid(False)
    for sp in ax.spines.values():
        sp.set_visible(False)
    return im


def heatmap(path, sent, kind, layer, head, prefix, cmap="Blues", step=None):
    """Draw heatmap_figure() and save it as PREFIX.{png,pdf}."""
    return savefig(heatmap_figure(path, sent, kind, layer, head, cmap, step), prefix)


def heatmap_figure(path, sent, kind, layer, head, cmap="Blues", step=None):
    """One head (head = int) or a grid of all heads (head = None) of a layer,
    the query tokens down the rows and the key tokens along the columns."""
    paper_style()
    plt = pyplot()
    a = pick_map(path, sent, kind, layer)
    L, H, Tq, Tk = a.shape
    q, k = axis_tokens(sent, kind)
    qlab, klab = _labels(q, Tq), _labels(k, Tk)
    where = f"sentence {sent['name'].lstrip('0') or '0'}" + (", greedy output" if sent.get("is_greedy") else "") + \
        (f", step {step}" if step is not None else "")
    cell = 0.16  # inches per token
    if head is not None:
        if not 0 <= head < H:
            raise AnalysisError(path, f"head {head} out of range: {kind} has heads 0..{H - 1}")
        w = max(2.8, Tk * cell + 1.6)
        h = max(2.4, Tq * cell + 1.2)
        fig, ax = plt.subplots(figsize=(w, h))
        im = _draw(ax, a[layer, head], qlab, klab, cmap)
        ax.set_title(f"{KIND_TITLE[kind]}, layer {layer}, head {head}\n({where})")
        ax.set_xlabel("key" + (" (source)" if kind != "decoder_self" else " (target)"))
        ax.set_ylabel("query" + (" (target)" if kind != "encoder_self" else " (source)"))
        cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
        cb.set_label("attention weight")
        cb.outline.set_visible(False)
    else:
        ncol = min(4, H)
        nrow = math.ceil(H / ncol)
        # panels of at most 3.5 in: a grid of 8 heads stays a page wide
        scale = min(1.0, 3.5 / (max(Tq, Tk) * cell * 0.8))
        pw = max(1.8, Tk * cell * 0.8 * scale)
        ph = max(1.6, Tq * cell * 0.8 * scale)
        fig, axes = plt.subplots(nrow, ncol, figsize=(ncol * pw + 1.4, nrow * ph + 1.0), squeeze=False)
        fs = max(3.0, min(7.0, 0.8 * 72.0 * max(pw, ph) / max(Tq, Tk)))  # about one token per label height
        for hh in range(nrow * ncol):
            ax = axes[hh // ncol, hh % ncol]
            if hh >= H:
                ax.axis("off")
                continue
            im = _draw(ax, a[layer, hh], qlab, klab, cmap, show_x=hh // ncol == nrow - 1 or hh + ncol >= H,
                       show_y=hh % ncol == 0, fontsize=fs)
            ax.set_title(f"head {hh}", fontsize=8, pad=2)
        fig.suptitle(f"{KIND_TITLE[kind]}, layer {layer}, all {H} heads ({where})", fontsize=9)
        fig.supxlabel("key" + (" (source)" if kind != "decoder_self" else " (target)"), fontsize=8)
        fig.supylabel("query" + (" (target)" if kind != "encoder_self" else " (source)"), fontsize=8)
        fig.tight_layout(rect=(0, 0, 0.93, 1))
        cax = fig.add_axes((0.945, 0.25, 0.012, 0.5))
        cb = fig.colorbar(im, cax=cax)
        cb.set_label("attention weight", fontsize=8)
        cb.outline.set_visible(False)
        cb.ax.tick_params(labelsize=7)
    return fig


def stats_table(stats):
    """Markdown and CSV of per-head statistics, heads grouped by layer."""
    md = []
    rows = []
    for kind in KINDS:
        if kind not in stats:
            continue
        st = stats[kind]
        L, H = st["entropy"].shape
        md.append(f"### {KIND_TITLE[kind]}\n")
        md.append("| layer | head | " + " | ".join(STAT_TITLE[s] for s in STATS) + " |")
        md.append("|--:|--:|" + "--:|" * len(STATS))
        for l in range(L):
            for h in range(H):
                vals = [st[s][l, h] for s in STATS]
                md.append(f"| {l} | {h} | " + " | ".join("–" if not np.isfinite(v) else f"{v:.3f}" for v in vals) + " |")
                rows.append([kind, l, h] + vals)
            vals = [np.nanmean(st[s][l]) if np.isfinite(st[s][l]).any() else np.nan for s in STATS]
            md.append(f"| **{l}** | mean | " + " | ".join("–" if not np.isfinite(v) else f"**{v:.3f}**" for v in vals) + " |")
        md.append("")
    csv = "kind,layer,head," + ",".join(STATS) + "\n"
    csv += "".join(f"{r[0]},{r[1]},{r[2]}," + ",".join("" if not np.isfinite(v) else repr(float(v)) for v in r[3:]) + "\n"
                   for r in rows)
    return "\n".join(md), csv


def stats_figure(stats, prefix, title):
    """A grid: one row per attention kind, one column per statistic, each a layers x heads heatmap."""
    paper_style()
    plt = pyplot()
    kinds = [k for k in KINDS if k in stats]
    L, H = stats[kinds[0]]["entropy"].shape
    pw, ph = max(1.25, 0.2 * H + 0.4), max(1.0, 0.2 * L + 0.5)
    fig, axes = plt.subplots(len(kinds), len(STATS), figsize=(len(STATS) * pw + 0.8, len(kinds) * ph + 0.9),
                             squeeze=False)
    emax = max(np.nanmax(stats[k]["entropy"]) for k in kinds)
    dmax = max(np.nanmax(stats[k]["distance"]) for k in kinds)
    for r, kind in enumerate(kinds):
        for c, s in enumerate(STATS):
            ax = axes[r, c]
            v = stats[kind][s]
            vmax = emax if s == "entropy" else dmax if s == "distance" else 1.0
            cmap = "magma_r" if s in ("entropy", "distance") else "Blues"
            im = ax.imshow(v, cmap=cmap, vmin=0, vmax=vmax if vmax > 0 else 1, aspect="auto",
                           interpolation="nearest")
            if not np.isfinite(v).any():
                ax.text(0.5, 0.5, "n/a", transform=ax.transAxes, ha="center", va="center", color="0.5", fontsize=7)
            elif L * H <= 64:  # small grids: the value in each cell
                norm = im.norm
                for (l, h), val in np.ndenumerate(v):
                    if np.isfinite(val):
                        dark = norm(val) > 0.55
                        ax.text(h, l, f"{val:.2f}" if val < 10 else f"{val:.1f}", ha="center", va="center",
                                fontsize=5.5 if H <= 8 else 4.5, color="white" if dark else "0.15")
            ax.grid(False)
            ax.set_xticks(range(H))
            ax.set_yticks(range(L))
            ax.tick_params(length=0, labelsize=6)
            if r == len(kinds) - 1:
                ax.set_xlabel("head", fontsize=7)
            else:
                ax.set_xticklabels([])
            if c == 0:
                ax.set_ylabel(f"{KIND_TITLE[kind].replace(' attention', '').replace('-attention', '')}\nlayer",
                              fontsize=7)
            else:
                ax.set_yticklabels([])
            if r == 0:
                ax.set_title(STAT_TITLE[s], fontsize=8)
            if r == len(kinds) - 1 or s in ("entropy", "distance"):
                pass
            for sp in ax.spines.values():
                sp.set_visible(False)
            if r == len(kinds) - 1:
                cb = fig.colorbar(im, ax=axes[:, c].tolist(), orientation="horizontal", fraction=0.05, pad=0.12 if len(kinds) > 1 else 0.25,
                                  aspect=12)
                cb.ax.tick_params(labelsize=6)
                cb.outline.set_visible(False)
    fig.suptitle(title, fontsize=9)
    return savefig(fig, prefix)


def evolution(path, data, prefix):
    """Statistics against training step: per layer the mean over heads (line)
    and the range over heads (band); CSV of every head."""
    plt = pyplot()

    steps = sorted(k for k in data["steps"] if k is not None)
    if len(steps) < 1:
        raise AnalysisError(path, "not a probe file (no /step_<N> groups with attention maps)")
    per = {s: file_stats(path, data["steps"][s]) for s in steps}
    kinds = [k for k in KINDS if all(k in per[s] for s in steps)]
    if not kinds:
        raise AnalysisError(path, "no attention kind is present at every probe step")
    paper_style()
    fig, axes = plt.subplots(len(kinds), len(STATS), figsize=(len(STATS) * 2.0 + 0.6, len(kinds) * 1.75 + 0.7),
                             squeeze=False, sharex=True)
    x = np.array(steps, dtype=float)
    csv = ["step,kind,layer,head," + ",".join(STATS)]
    for r, kind in enumerate(kinds):
        L, H = per[steps[0]][kind]["entropy"].shape
        if L <= 10:
            colors = [plt.get_cmap("tab10")(l) for l in range(L)]
        else:
            colors = [plt.get_cmap("viridis")(0.9 * l / (L - 1)) for l in range(L)]
        for c, s in enumerate(STATS):
            ax = axes[r, c]
            v = np.stack([per[st][kind][s] for st in steps])  # [S, L, H]
            for l in range(L):
                if not np.isfinite(v[:, l]).any():
                    continue
                import warnings

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    ax.fill_between(x, np.nanmin(v[:, l], axis=1), np.nanmax(v[:, l], axis=1), color=colors[l],
                                    alpha=0.10, linewidth=0)
                    ax.plot(x, np.nanmean(v[:, l], axis=1), color=colors[l], label=f"layer {l}",
                            marker="o" if len(steps) < 8 else None, markersize=2.5)
            if not np.isfinite(v).any():
                ax.text(0.5, 0.5, "n/a", transform=ax.transAxes, ha="center", va="center", color="0.5")
                ax.set_yticks([])
            if r == 0:
                ax.set_title(STAT_TITLE[s])
            if c == 0:
                ax.set_ylabel(KIND_TITLE[kind].replace(" attention", "").replace("-attention", ""))
            if r == len(kinds) - 1:
                ax.set_xlabel("training step")
            ax.tick_params(labelsize=7)
        for st in steps:
            for l in range(L):
                for h in range(H):
                    vals = [per[st][kind][s][l, h] for s in STATS]
                    csv.append(f"{st},{kind},{l},{h}," + ",".join("" if not np.isfinite(v) else repr(float(v))
                                                                 for v in vals))
    hnd, lab = axes[0, 0].get_legend_handles_labels()
    fig.legend(hnd, lab, loc="upper center", ncol=min(len(lab), 8), frameon=False, bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.text(0.5, -0.01, "lines: mean over the heads of a layer; bands: range over heads", ha="center",
             fontsize=7, color="0.3")
    write_atomic(prefix + ".csv", "\n".join(csv) + "\n")
    return savefig(fig, prefix) + [prefix + ".csv"]


# ---------------------------------------------------------------- CLI
def build_parser():
    p = argparse.ArgumentParser(prog="attention.py", description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    h = sub.add_parser("heatmap", help="heatmap of one head, or of all heads of a layer")
    h.add_argument("file", metavar="ATTN_H5")
    h.add_argument("--sentence", help="sentence group name (default: the first)")
    h.add_argument("--kind", choices=KINDS, default="encoder_self")
    h.add_argument("--layer", type=int, default=0, help="layer, from 0 (default 0)")
    h.add_argument("--head", type=int, help="head, from 0 (default: a grid of all heads)")
    h.add_argument("--step", type=int, help="probe file: the training step (default: the last)")
    h.add_argument("--greedy", action="store_true", help="the maps on the model's own (greedy) translation")
    h.add_argument("--cmap", default="Blues", help="matplotlib colour map (default: Blues)")
    h.add_argument("--out", metavar="PREFIX", help="output prefix (default: attn_<kind>_s<sentence>_l<layer>[_h<head>])")
    s = sub.add_parser("stats", help="per-head statistics: table of heads by layer (Markdown, CSV) and figure")
    s.add_argument("file", metavar="ATTN_H5")
    s.add_argument("--step", type=int, help="probe file: the training step (default: the last)")
    s.add_argument("--greedy", action="store_true", help="the maps on the model's own (greedy) translations")
    s.add_argument("--out", metavar="PREFIX", default="attn_stats", help="output prefix (default: attn_stats)")
    e = sub.add_parser("evolution", help="statistics against training step, from a probe file")
    e.add_argument("file", metavar="PROBE_H5")
    e.add_argument("--out", metavar="PREFIX", default="attn_evolution", help="output prefix (default: attn_evolution)")
    return p


def main(argv):
    a = build_parser().parse_args(argv)
    data = load(a.file)
    if a.cmd == "heatmap":
        step, sents = pick_step(a.file, data, a.step)
        if a.greedy:
            sents = use_greedy(a.file, sents)
        sent = pick_sentence(a.file, sents, a.sentence)
        pyplot()
        import matplotlib

        if a.cmap not in matplotlib.colormaps:
            raise AnalysisError("--cmap", f"unknown colour map '{a.cmap}'")
        prefix = a.out or f"attn_{a.kind}_s{sent['name']}_l{a.layer}" + (f"_h{a.head}" if a.head is not None else "")
        outs = heatmap(a.file, sent, a.kind, a.layer, a.head, prefix, a.cmap, step)
    elif a.cmd == "stats":
        step, sents = pick_step(a.file, data, a.step)
        if a.greedy:
            sents = use_greedy(a.file, sents)
        st = file_stats(a.file, sents)
        md, csv = stats_table(st)
        name = os.path.basename(a.file) + (f", step {step}" if step is not None else "")
        head = (f"# Attention heads of {name}\n\nAveraged over {len(sents)} sentence(s). "
                "Entropy in nats; distance in positions; the others are shares of attention weight.\n\n")
        write_atomic(a.out + ".md", head + md)
        write_atomic(a.out + ".csv", csv)
        outs = [a.out + ".md", a.out + ".csv"]
        outs += stats_figure(st, a.out, f"per-head attention statistics ({name}, {len(sents)} sentences)")
    else:
        outs = evolution(a.file, data, a.out)
    for p in outs:
        print(p)
    return 0


if __name__ == "__main__":
    main_wrapper(main)
