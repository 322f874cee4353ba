#!/usr/bin/env python3
"""Attention maps from an HDF5 attention file (docs/attention.md): heatmaps
labelled with the tokens, per-head statistics, and their evolution over
training from the probe maps written during training.

Commands:
  heatmap FILE    one head (--head H) or a grid of all heads of a layer
  stats FILE      per-head statistics, a table of heads by layer and a figure
  evolution FILE  the statistics against training step (probe file)
  summary FILE --out SUMMARY [--align SILVER]
                  per head, the mean, s.d. and count over sentences of every
                  statistic (a sweep run's committed attention: docs/attention.md);
                  with --align, the AER of every cross-attention head and layer
                  average against silver word links (silver_align.py)
  compare SWEEP_DIR
                  the summaries of a Table 3 sweep (SWEEP_DIR/attention/<run>.h5)
                  by row: tables (.md, .csv) and figures of per-layer and per-head
                  statistics with 95% t intervals over seeds, and each row's
                  change in one statistic against its change in dev NLL (Spearman);
                  the AER of each row's best head and layer averages, if scored

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
  attention.py compare docs/results-multi30k/sweep --kind cross --stat entropy
"""

import argparse
import glob
import math
import os
import re

import numpy as np

from common import (ArgumentParser, AnalysisError, pyplot, as_strings, attr_str, check_outputs, figure_paths, h5_array, main_wrapper,
                    open_h5, output_not_input, paper_style, savefig, write_atomic)

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
             "index": int(g.attrs["index"]) if "index" in g.attrs else None,
             "src_tokens": _tokens(g, "src_tokens"), "tgt_tokens": _tokens(g, "tgt_tokens"),
             "tgt_out_tokens": _tokens(g, "tgt_out_tokens")}
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
    """Read an attention file: {'steps': {step or None: [sentence, ...]},
    'format', 'split'}.  A map file has one entry None; a probe file one per
    /step_<N> group."""
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
        split = attr_str(f, "split", "")
    if kind and not kind.startswith("transformer-attention"):
        raise AnalysisError(path, f"not an attention file (format '{kind}')")
    if not steps:
        raise AnalysisError(path, "not an attention file (no groups with encoder_self/decoder_self/cross maps)")
    return {"steps": dict(sorted(steps.items(), key=lambda kv: -1 if kv[0] is None else kv[0])), "format": kind,
            "split": split}


def load_maps(path):
    """(sentences, split) of a `transformer attention` file (as load reads
    them; not a training probe), refused in one line if it is no such file."""
    data = load(path)
    if data["format"] != "transformer-attention" or None not in data["steps"]:
        raise AnalysisError(path, f"not a `transformer attention` file (format '{data['format']}')")
    return data["steps"][None], data["split"]


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


def sentence_stats(path, sents):
    """Statistics of every sentence: dict kind -> stat -> [sentences, layers, heads]."""
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
    return {kind: {k: np.stack(v) for k, v in acc[kind]["vals"].items()} for kind in KINDS if kind in acc}


def _nan_reduce(fn, v, **kw):
    """fn (np.nanmean, np.nanstd) over axis 0 without the all-NaN warning (NaN stays NaN)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(v, axis=0, **kw)


def file_stats(path, sents):
    """Statistics averaged over sentences: dict kind -> stat -> [layers, heads]."""
    return {kind: {k: _nan_reduce(np.nanmean, v) for k, v in st.items()}
            for kind, st in sentence_stats(path, sents).items()}


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
    check_outputs([prefix + ".csv"] + figure_paths(prefix))   # all before the first is written
    write_atomic(prefix + ".csv", "\n".join(csv) + "\n")
    return savefig(fig, prefix) + [prefix + ".csv"]


# ---------------------------------------------------------------- cross-attention as alignment
def word_groups(tokens):
    """Positions of each word of SentencePiece pieces ('▁' starts a word), the
    special tokens left out: list of lists.  Tokens without any '▁' (the
    synthetic task's ids) are one word each."""
    pieced = any("▁" in t for t in tokens)
    words = []
    for i, t in enumerate(tokens):
        if t in SPECIAL:
            continue
        if not words or not pieced or t.startswith("▁"):
            words.append([i])
        else:
            words[-1].append(i)
    return words


def alignment_links(cross, src_tokens, tgt_out_tokens):
    """Word alignment of one cross-attention head [T, S] (Garg et al. 2019's
    argmax rule): the rows of the decoder positions that predict a target
    word's pieces (tgt_out_tokens) averaged, the columns of a source word's
    pieces summed, and each target word linked to the source word of the
    largest weight (the first on a tie).  Returns {(target word, source word)}."""
    cross = np.asarray(cross, float)
    tw, sw = word_groups(tgt_out_tokens), word_groups(src_tokens)
    if not tw or not sw:
        return set()
    words = np.stack([cross[rows].mean(axis=0) for rows in tw])              # [target words, S]
    per_src = np.stack([words[:, cols].sum(axis=1) for cols in sw], axis=1)  # [target words, source words]
    return {(t, int(s)) for t, s in enumerate(per_src.argmax(axis=1))}


def aer(links, sure, possible=None):
    """Alignment error rate (Och and Ney 2003): 1 - (|A∩S| + |A∩P|) / (|A| + |S|),
    P ⊇ S (default P = S: one silver reference, as eflomal's links are).
    Over a corpus, pass the union of (sentence, t, s) links."""
    a, s = set(links), set(sure)
    p = s | set(possible or ())
    if not a and not s:
        return 0.0
    return 1.0 - (len(a & s) + len(a & p)) / (len(a) + len(s))


def config_max_len(config):
    """max_len of a maps file's `config` attribute ('key = value' lines), or None."""
    for line in (config or "").splitlines():
        k, _, v = line.partition("=")
        if k.strip() == "max_len" and v.strip().isdigit():
            return int(v)
    return None


def _kept_words(n_maps, n_silver, positions, max_len):
    """Words of a side the maps keep: all of them, or, where the pair was cut
    at max_len positions (batch_build keeps max_len - 1 pieces and </s>),
    the first n_maps (the last possibly cut); None if that does not explain it."""
    if n_maps == n_silver or (n_maps < n_silver and max_len is not None and positions == max_len):
        return n_maps
    return None


def _sample_silver(align_path, silver, maps_path, sents, index, split, max_len=None):
    """The silver links of each sentence of a maps file, after checking that
    they are of the same split and the same words (a file of another dataset,
    split or word tokenisation is refused); of a pair cut at max_len, the
    links between the words the maps keep."""
    if silver["split"] != split:
        raise AnalysisError(align_path, f"links of split '{silver['split']}', the maps ({maps_path}) are of "
                                        f"split '{split}'")
    out = []
    for s, i in zip(sents, index):
        if s["src_tokens"] is None or s["tgt_out_tokens"] is None:
            raise AnalysisError(maps_path, f"sentence {s['name']}: no src_tokens or tgt_out_tokens to merge into words")
        if int(i) not in silver["sentences"]:
            raise AnalysisError(align_path, f"no links of sentence {int(i)} of split '{split}' ({maps_path})")
        n_src, n_tgt, links = silver["sentences"][int(i)]
        have = len(word_groups(s["src_tokens"])), len(word_groups(s["tgt_out_tokens"]))
        ks = _kept_words(have[0], n_src, len(s["src_tokens"]), max_len)
        kt = _kept_words(have[1], n_tgt, len(s["tgt_out_tokens"]), max_len)
        if ks is None or kt is None:
            raise AnalysisError(align_path, f"sentence {int(i)}: {n_src} source and {n_tgt} target words, the maps "
                                            f"({maps_path}) have {have[0]} and {have[1]}: another dataset or tokenisation")
        out.append({(t, w) for t, w in links if t < kt and w < ks})
    return out


def _tagged(k, links):
    """Links of sentence k, for a corpus-level AER over the union."""
    return {(k, t, s) for t, s in links}


def sample_aer(maps_path, align_path, sents, index, split, max_len=None):
    """AER against the silver links (silver_align.py) of every cross-attention
    head [L, H] and of each layer's heads averaged [L] (Garg et al. 2019
    align with a layer's average), over all sentences pooled (Och and Ney's
    corpus AER: every sentence weighs by its links, not equally)."""
    import silver_align

    silver = silver_align.load_silver(align_path)
    gold = _sample_silver(align_path, silver, maps_path, sents, index, split, max_len)
    L, H = sents[0]["maps"]["cross"].shape[:2]
    heads = [[set() for _ in range(H)] for _ in range(L)]
    layers = [set() for _ in range(L)]
    sure = set()
    for k, (s, links) in enumerate(zip(sents, gold)):
        cross = s["maps"]["cross"]
        if len(s["tgt_out_tokens"]) != cross.shape[2]:
            raise AnalysisError(maps_path, f"sentence {s['name']}: cross has {cross.shape[2]} query positions but "
                                           f"{len(s['tgt_out_tokens'])} tgt_out_tokens")
        sure |= _tagged(k, links)
        for l in range(L):
            layers[l] |= _tagged(k, alignment_links(cross[l].mean(axis=0), s["src_tokens"], s["tgt_out_tokens"]))
            for h in range(H):
                heads[l][h] |= _tagged(k, alignment_links(cross[l, h], s["src_tokens"], s["tgt_out_tokens"]))
    return {"head": np.array([[aer(a, sure) for a in row] for row in heads]),
            "layer": np.array([aer(a, sure) for a in layers]), "silver": silver, "n_links": len(sure)}


# ---------------------------------------------------------------- per-run summaries
SUMMARY_FORMAT = "transformer-attention-summary"
SUMMARY_VERSION = 1
# provenance copied from the maps file (docs/attention.md)
SUMMARY_ATTRS = ("checkpoint", "checkpoint_step", "data", "split", "mode", "sample", "config", "n_layers", "n_heads")


SILVER_ATTRS = ("aligner", "eflomal_version", "model_name", "iterations", "n_samplers", "null_prior",
                "symmetrisation", "trained_on", "reference")


def _write_alignment(g, align_path, al):
    """The summary's /alignment group: AER of the cross-attention heads."""
    a = g.create_group("alignment")
    a["aer_head"] = al["head"]
    a["aer_layer"] = al["layer"]
    a.attrs["silver"] = align_path
    a.attrs["silver_digest"] = al["silver"]["digest"]
    a.attrs["n_links"] = al["n_links"]
    a.attrs["rule"] = ("each target word linked to the source word of the largest attention (pieces merged "
                       "to words; attention.alignment_links); aer_layer: the layer's heads averaged first")
    for k in SILVER_ATTRS:
        if k in al["silver"]["attrs"]:
            a.attrs["silver_" + k] = al["silver"]["attrs"][k]


def _write_summary(out, path, run, per, attrs, index, alignment=None, align_path=None):
    """The summary file (docs/attention.md), written whole under a temporary name."""
    from common import h5_atomic

    with h5_atomic(out) as g:
        g.attrs["format"] = SUMMARY_FORMAT
        g.attrs["summary_version"] = SUMMARY_VERSION
        g.attrs["source"] = path
        g.attrs["run"] = run or os.path.splitext(os.path.basename(out))[0]
        g.attrs["stats"] = ",".join(STATS)
        g.attrs["n_sentences"] = len(index)
        for k, v in attrs.items():
            g.attrs[k] = v
        g["sentence_index"] = index
        for kind, st in per.items():
            v = np.stack([st[k] for k in STATS], axis=1)          # [sentences, stats, layers, heads]
            g[f"{kind}/mean"] = _nan_reduce(np.nanmean, v)
            g[f"{kind}/sd"] = _nan_reduce(np.nanstd, v, ddof=1) if len(v) > 1 else np.full(v.shape[1:], np.nan)
            g[f"{kind}/count"] = np.isfinite(v).sum(axis=0).astype(np.int32)
        if alignment is not None:
            _write_alignment(g, align_path, alignment)


def summarize_maps(path, out, run=None, align=None):
    """Write OUT: per head, the mean, s.d. and count over the sentences of a
    `transformer attention` file of every statistic (the committed form of a
    sweep run's maps: docs/attention.md), and with align (a silver_align.py
    file) the AER of the cross-attention heads; through a temporary, renamed."""
    sents, _ = load_maps(path)
    per = sentence_stats(path, sents)
    with open_h5(path) as f:
        attrs = {k: f.attrs[k] for k in SUMMARY_ATTRS if k in f.attrs}
        index = np.asarray(f["sentence_index"][()], np.int64) if "sentence_index" in f else None
        split = attr_str(f, "split", "")
        config = attr_str(f, "config", "")
    if index is None or len(index) != len(sents):
        raise AnalysisError(path, "no /sentence_index with one entry per sentence group")
    alignment = None
    if align is not None:
        if "cross" not in per:
            raise AnalysisError(path, "no cross maps to align")
        alignment = sample_aer(path, align, sents, index, split, config_max_len(config))
    try:
        _write_summary(out, path, run, per, attrs, index, alignment, align)
    except OSError as e:
        raise AnalysisError(out, f"cannot write: {e.strerror or e}") from None
    return [out]


def load_summary(path):
    """A summary file: {'run', 'index', 'attrs', 'mean': {kind: {stat: [L, H]}}}."""
    with open_h5(path) as f:
        if attr_str(f, "format", "") != SUMMARY_FORMAT:
            raise AnalysisError(path, f"not an attention summary (format '{attr_str(f, 'format', '')}', "
                                      f"expected '{SUMMARY_FORMAT}')")
        names = attr_str(f, "stats", "").split(",")
        if "sentence_index" not in f or set(names) != set(STATS) or "n_layers" not in f.attrs or "n_heads" not in f.attrs:
            raise AnalysisError(path, f"attention summary without sentence_index, n_layers, n_heads or the "
                                      f"statistics {','.join(STATS)}")
        L, H = summary_sizes(path, f)
        out = {"path": path, "run": attr_str(f, "run", ""), "index": h5_array(f, path, "sentence_index", (None,), True),
               "data": attr_str(f, "data", ""), "split": attr_str(f, "split", ""), "L": L, "H": H, "mean": {}}
        for kind in KINDS:
            if kind not in f:
                continue
            m = h5_array(f, path, f"{kind}/mean", (len(names), L, H))
            out["mean"][kind] = {s: m[names.index(s)] for s in STATS}
        out["aer"] = _load_alignment(path, f, L, H)
    return out


def summary_sizes(path, f):
    """(n_layers, n_heads) of a summary file: positive integers, else the
    one-line error (a damaged attribute was a ValueError or TypeError)."""
    try:
        L, H = (int(np.asarray(f.attrs[k]).reshape(-1)[0]) for k in ("n_layers", "n_heads"))
    except (TypeError, ValueError, IndexError):
        L = H = 0
    if L < 1 or H < 1:
        raise AnalysisError(path, "attributes n_layers and n_heads are not positive integers")
    return L, H


def _load_alignment(path, f, L, H):
    """A summary's /alignment group (summary --align), or None."""
    if "alignment" not in f:
        return None
    a = f["alignment"]
    head, layer = h5_array(a, path, "aer_head", (L, H)), h5_array(a, path, "aer_layer", (L,))
    return {"head": head, "layer": layer, "digest": attr_str(a, "silver_digest", ""),
            "silver": attr_str(a, "silver", "")}


# ---------------------------------------------------------------- across the rows of a sweep
def sweep_rows(sweep, configs):
    """The sweep's rows as the Table 3 protocol counts them (table3.py,
    compare.py): list of {'row', 'used': run names, 'nll_of': {run name: dev
    NLL}, 'failed': run names, 'seed_of': {run name: matched seed}}."""
    import compare as C
    import table3 as T3

    runs = T3.load_rows(sweep, configs)
    groups = C.group_runs(runs)
    rows = [C.row_summary(n, groups[n]) for n in sorted(groups, key=T3.logical_sort_key)]
    return [{"row": s["row"], "used": [r["row"] for r in s["used"]],
             "nll_of": {r["row"]: v for r, v in zip(s["used"], s["nlls"])},
             "failed": [r["row"] for r in s["failed"]],
             "seed_of": {r["row"]: k for k, r in C.matched_runs(s).items()}} for s in rows]


def seed_interval(v):
    """Mean over seeds (axis 0) and its 95% t interval; lo = hi = NaN for one seed."""
    import stats

    v = np.asarray(v, float)
    n = np.isfinite(v).sum(axis=0)
    mean = _nan_reduce(np.nanmean, v)
    half = np.full(np.shape(mean), np.nan)
    if v.shape[0] > 1:
        sd = _nan_reduce(np.nanstd, v, ddof=1)
        q = np.array([stats.t_quantile(0.5 + stats.LEVEL / 2, k - 1) if k > 1 else np.nan
                      for k in np.ravel(n)]).reshape(np.shape(n))
        half = np.where(n > 1, q * sd / np.sqrt(np.maximum(n, 1)), np.nan)
    return mean, mean - half, mean + half


def read_sweep_summaries(sweep, configs):
    """Rows with their runs' summaries: list of {'row', 'runs', 'L', 'H', 'nll_of',
    'mean': {kind: {stat: [seeds, L, H]}}} and notes on what was left out.  Every
    summary must be of the same sentences of the same data."""
    adir = os.path.join(sweep, "attention")
    files = sorted(glob.glob(os.path.join(adir, "*.h5")))
    if not files:
        raise AnalysisError(adir, "no attention summaries (*.h5): the sweep's runs wrote none "
                                  "(jobs/table3-stages.sh, stage attention)")
    summ = {os.path.splitext(os.path.basename(p))[0]: load_summary(p) for p in files}
    first = summ[min(summ)]
    for name, s in summ.items():
        if not np.array_equal(s["index"], first["index"]) or s["split"] != first["split"]:
            raise AnalysisError(s["path"], f"a sample other than {first['path']}'s (split {s['split']}, "
                                           f"{len(s['index'])} sentences): rows are compared on the same sentences")
    rows, notes = [], []
    all_rows = sweep_rows(sweep, configs)
    for r in all_rows:
        have = [n for n in r["used"] if n in summ]
        missing = [n for n in r["used"] if n not in summ]
        if missing:
            notes.append(f"{r['row']}: no attention summary for {', '.join(missing)}")
        if r["failed"]:
            notes.append(f"{r['row']}: left out (failed verdict or status): {', '.join(r['failed'])}")
        if not have:
            continue
        shapes = {(summ[n]["L"], summ[n]["H"]) for n in have}
        if len(shapes) > 1:
            raise AnalysisError(summ[have[0]]["path"], f"row {r['row']}: its runs differ in layers x heads: {sorted(shapes)}")
        kinds = [k for k in KINDS if all(k in summ[n]["mean"] for n in have)]
        rows.append({"row": r["row"], "runs": have, "nll_of": r["nll_of"], "L": shapes.pop()[0], "H": summ[have[0]]["H"],
                     "seed_of": r["seed_of"],
                     "mean": {k: {s: np.stack([summ[n]["mean"][k][s] for n in have]) for s in STATS} for k in kinds}})
    _check_same_silver(summ)
    for r in rows:
        _row_aer(r, summ, notes)
    stray = set(summ) - {n for r in all_rows for n in r["used"] + r["failed"]}
    if stray:
        notes.append("summaries of no run in results/ (no result file, or not done): " + ", ".join(sorted(stray)))
    if not rows:
        raise AnalysisError(adir, "no summary belongs to a usable run of the sweep's results/*.h5")
    return rows, notes, first


def _check_same_silver(summ):
    """Every AER of a comparison must be against the same silver links."""
    scored = [s for _, s in sorted(summ.items()) if s["aer"] is not None]
    for s in scored[1:]:
        if s["aer"]["digest"] != scored[0]["aer"]["digest"]:
            raise AnalysisError(s["path"], f"AER against other silver links ({s['aer']['silver']}, digest "
                                           f"{s['aer']['digest']}) than {scored[0]['path']}'s "
                                           f"({scored[0]['aer']['digest']}): rows are compared on the same links")


def _row_aer(row, summ, notes):
    """A row's AER per seed: 'aer_head' [seeds, L, H] and 'aer_layer' [seeds, L]
    of the runs whose summary has it (None if none has)."""
    have = [n for n in row["runs"] if summ[n]["aer"] is not None]
    if len(have) < len(row["runs"]):
        notes.append(f"{row['row']}: no AER for {', '.join(n for n in row['runs'] if n not in have)} "
                     "(summary written without --align)")
    row["aer_runs"] = have
    row["aer_head"] = np.stack([summ[n]["aer"]["head"] for n in have]) if have else None
    row["aer_layer"] = np.stack([summ[n]["aer"]["layer"] for n in have]) if have else None


def best_head_aer(row):
    """Per seed, the AER of its best head (the lowest of all its cross-attention
    heads; which head that is may differ between seeds): [seeds]."""
    v = row["aer_head"]
    return v.reshape(len(v), -1).min(axis=1)


def aer_levels(row):
    """(layer, head, per-seed AER) of a row: each layer's average ('layer_average'),
    every head, and the best head of any layer ('all', 'best')."""
    if row.get("aer_head") is None:
        return []
    out = [("all", "best", best_head_aer(row))]
    for l in range(row["aer_layer"].shape[1]):
        out.append((l, "layer_average", row["aer_layer"][:, l]))
        out += [(l, h, row["aer_head"][:, l, h]) for h in range(row["aer_head"].shape[2])]
    return out


def aer_markdown(rows):
    """The AER table: per row, the best head and each layer's average, each the
    mean over seeds [95% t interval]."""
    have = [r for r in rows if r.get("aer_head") is not None]
    if not have:
        return []
    Lmax = max(r["aer_layer"].shape[1] for r in have)
    out = ["## Cross-attention as alignment\n",
           "Alignment error rate (Och and Ney 2003; lower = closer) of attention-derived word alignments (each "
           "target word linked to the source word of the largest attention, subword pieces merged to words; "
           "Garg et al. 2019) against eflomal's symmetrised links (silver_align.py; docs/attention.md). "
           "**Agreement with a statistical aligner, not with human alignments.** Best head: per seed the lowest "
           "AER of any head (the head may differ between seeds; in parentheses the head, layer:head, of the "
           "lowest mean). Layer l: its heads' attention averaged, then aligned.\n",
           "| row | seeds | best head | " + " | ".join(f"layer {l}" for l in range(Lmax)) + " |",
           "|:--|--:|--:|" + "--:|" * Lmax]
    for r in have:
        m = _nan_reduce(np.nanmean, r["aer_head"])
        l, h = np.unravel_index(np.argmin(m), m.shape)
        best = _cell(*(x[0] for x in seed_interval(best_head_aer(r)[:, None]))) + f" ({l}:{h})"
        layers = [_cell(*(x[0] for x in seed_interval(r["aer_layer"][:, [l]]))) if l < r["aer_layer"].shape[1]
                  else "–" for l in range(Lmax)]
        out.append(f"| {r['row']} | {len(r['aer_runs'])} | {best} | " + " | ".join(layers) + " |")
    return out + [""]


def _cell(m, lo, hi, digits=3):
    if not np.isfinite(m):
        return "–"
    return f"{m:.{digits}f}" + (f" [{lo:.{digits}f}, {hi:.{digits}f}]" if np.isfinite(lo) else "")


def compare_levels(row):
    """(layer, head, kind, stat, per-seed values) of a row: every head, every
    layer's mean over heads ('mean'), and the mean over all heads ('all')."""
    out = []
    for kind, st in row["mean"].items():
        for s, v in st.items():                                   # v: [seeds, L, H]
            out.append(("all", "mean", kind, s, _nan_reduce(np.nanmean, np.moveaxis(v.reshape(len(v), -1), 1, 0))))
            for l in range(v.shape[1]):
                out.append((l, "mean", kind, s, _nan_reduce(np.nanmean, np.moveaxis(v[:, l], 1, 0))))
                for h in range(v.shape[2]):
                    out.append((l, h, kind, s, v[:, l, h]))
    return out


def compare_csv(rows):
    """Long CSV: one line per row, kind, layer, head (or mean), statistic."""
    lines = ["row,runs,kind,layer,head,stat,mean,lo,hi,per_seed"]
    num = lambda x: "" if not np.isfinite(x) else f"{float(x):.6g}"
    for r in rows:
        for l, h, kind, s, v in compare_levels(r):
            m, lo, hi = seed_interval(np.asarray(v)[:, None])
            lines.append(f"{r['row']},{len(r['runs'])},{kind},{l},{h},{s},{num(m[0])},{num(lo[0])},{num(hi[0])},"
                         + " ".join(num(x) for x in v))
        for l, h, v in aer_levels(r):
            m, lo, hi = seed_interval(np.asarray(v)[:, None])
            lines.append(f"{r['row']},{len(r['aer_runs'])},cross,{l},{h},aer,{num(m[0])},{num(lo[0])},{num(hi[0])},"
                         + " ".join(num(x) for x in v))
    return "\n".join(lines) + "\n"


def overall(row, kind, stat):
    """A row's statistic, mean over every head, per seed: [seeds] (NaN if the row lacks the kind)."""
    if kind not in row["mean"]:
        return np.full(len(row["runs"]), np.nan)
    v = row["mean"][kind][stat]
    return _nan_reduce(np.nanmean, np.moveaxis(v.reshape(len(v), -1), 1, 0))


def delta_vs_nll(rows, kind, stat):
    """(rows other than base with both numbers, Δ statistic vs base, Δ dev NLL,
    Spearman ρ, its permutation p).  Both Δ are paired over matched seeds, the
    mean of row − base of the same seed, as Table 3's converged protocol
    compares dev NLL (table3.py); a row's seeds without a pair are not used."""
    import stats

    base = next((r for r in rows if r["row"] == "base"), None)
    if base is None:
        return [], [], [], math.nan, math.nan
    pts = []
    for r in rows:
        if r is base:
            continue
        ds = paired_delta(r, base, lambda x: (x["runs"], overall(x, kind, stat)))["diff"]
        dn = paired_delta(r, base, lambda x: (x["runs"], [x["nll_of"][n] for n in x["runs"]]))["diff"]
        if np.isfinite(ds) and np.isfinite(dn):
            pts.append((r["row"], ds, dn))
    if len(pts) < 2:
        return [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts], math.nan, math.nan
    names, ds, dn = map(list, zip(*pts))
    return names, ds, dn, stats.spearman(ds, dn), stats.spearman_permutation_p(ds, dn)


def by_seed(row, runs, values):
    """{matched seed: value} of a row's runs (values in the order of runs),
    finite values only; a run that is not its seed's first is left out."""
    return {row["seed_of"][n]: float(v) for n, v in zip(runs, values) if n in row["seed_of"] and np.isfinite(v)}


def paired_delta(row, base, runs_values):
    """Row − base over their matched seeds (seed s of a row starts from base's
    seed s: initialisation and data order; protocol.md), as Table 3's dev NLL
    is compared: stats.paired_t_interval of the differences, with n (pairs).
    runs_values(r) gives (run names, per-run values) of row r."""
    import stats

    a, b = by_seed(row, *runs_values(row)), by_seed(base, *runs_values(base))
    d = [a[k] - b[k] for k in sorted(set(a) & set(b))]
    return dict(stats.paired_t_interval(d) if d else {"diff": math.nan, "lo": math.nan, "hi": math.nan}, n=len(d))


def paired_markdown(rows):
    """Per kind, each row's Δ statistic (mean over all heads) against base,
    paired over matched seeds; then the best head's AER the same way."""
    base = next((r for r in rows if r["row"] == "base"), None)
    others = [r for r in rows if r is not base]
    if base is None or not others:
        return []
    cell = lambda t: f"{t['diff']:+.3f}" + (f" [{t['lo']:+.3f}, {t['hi']:+.3f}]" if np.isfinite(t["lo"]) else "") \
        if np.isfinite(t["diff"]) else "–"
    out = ["## Δ against base, paired over matched seeds\n",
           "Row − base of the same seed (the same initialisation and data order), mean over the pairs with the "
           "95% paired t interval, as the dev NLL of Table 3 is compared; one pair has no interval. Statistic: "
           "the mean over all heads. Descriptive, none corrected.\n"]
    for kd in KINDS:
        have = [r for r in others if kd in r["mean"] and kd in base["mean"]]
        if not have:
            continue
        out += [f"{KIND_TITLE[kd]}:\n", "| row | pairs | " + " | ".join(STAT_TITLE[s] for s in STATS) + " |",
                "|:--|--:|" + "--:|" * len(STATS)]
        for r in have:
            ts = [paired_delta(r, base, lambda x: (x["runs"], overall(x, kd, s))) for s in STATS]
            out.append(f"| {r['row']} | {max(t['n'] for t in ts)} | " + " | ".join(cell(t) for t in ts) + " |")
        out.append("")
    have = [r for r in others if r.get("aer_head") is not None]
    if have and base.get("aer_head") is not None:
        out += ["Best head's AER (per seed its lowest-AER cross-attention head):\n", "| row | pairs | Δ AER |",
                "|:--|--:|--:|"]
        for r in have:
            t = paired_delta(r, base, lambda x: (x["aer_runs"], best_head_aer(x)))
            out.append(f"| {r['row']} | {t['n']} | {cell(t)} |")
        out.append("")
    return out


def rho_markdown(rows):
    """Spearman ρ of Δ statistic vs Δ dev NLL for every kind and statistic,
    with its permutation p and Holm's correction over all of them."""
    import stats

    cells = {(kd, s): delta_vs_nll(rows, kd, s) for kd in KINDS for s in STATS}
    keys = [k for k, v in cells.items() if np.isfinite(v[4])]
    holm = dict(zip(keys, stats.holm([cells[k][4] for k in keys]))) if keys else {}
    out = ["## Δ statistic against Δ dev NLL\n",
           "Spearman ρ over the rows (n rows, two-sided permutation p). Both Δ are row − base of the same seed, "
           "the mean over the matched pairs (as Table 3's converged protocol compares dev NLL); statistic = mean "
           f"over all heads. Exploratory: {len(keys)} ρ, so Holm's correction over them is given below.\n",
           "| kind | " + " | ".join(STAT_TITLE[s] for s in STATS) + " |", "|:--|" + "--:|" * len(STATS)]
    for kd in KINDS:
        row = []
        for s in STATS:
            names, _, _, rho, p = cells[(kd, s)]
            row.append("–" if not np.isfinite(rho) else f"{rho:+.2f} (n={len(names)}, p {p:.3f})")
        out.append(f"| {KIND_TITLE[kd]} | " + " | ".join(row) + " |")
    if keys:
        k = min(keys, key=lambda k: cells[k][4])
        out.append(f"\nSmallest p: {STAT_TITLE[k[1]]} of {KIND_TITLE[k[0]]}, ρ {cells[k][3]:+.2f}, p {cells[k][4]:.3f}, "
                   f"Holm-adjusted over the {len(keys)} ρ: {holm[k]:.3f}.")
    return out


def compare_markdown(sweep, rows, notes, first, kind, stat):
    """Per kind: a table of rows x statistics (mean over all heads) and one of
    rows x layers x statistics, each [95% t interval over the seeds]; then
    Spearman ρ of Δ statistic vs Δ dev NLL for every kind and statistic."""
    out = [f"# Attention across the rows of {sweep}\n",
           f"{len(first['index'])} sentences of split `{first['split']}` (the same for every run: "
           "indices in each summary's /sentence_index). Each run: per head, the mean over the sentences. "
           "Per row: mean over its healthy seeds with the 95% t interval over seeds [lo, hi]; a row with one "
           "seed has no interval. Entropy in nats, distance in positions, the others shares of attention weight.\n"]
    for kd in KINDS:
        have = [r for r in rows if kd in r["mean"]]
        if not have:
            continue
        out.append(f"## {KIND_TITLE[kd]}\n\nMean over all heads:\n")
        out.append("| row | seeds | " + " | ".join(STAT_TITLE[s] for s in STATS) + " |")
        out.append("|:--|--:|" + "--:|" * len(STATS))
        for r in have:
            cells = [_cell(*(x[0] for x in seed_interval(overall(r, kd, s)[:, None]))) for s in STATS]
            out.append(f"| {r['row']} | {len(r['runs'])} | " + " | ".join(cells) + " |")
        out.append("\nPer layer (mean over the layer's heads):\n")
        out.append("| row | layer | " + " | ".join(STAT_TITLE[s] for s in STATS) + " |")
        out.append("|:--|--:|" + "--:|" * len(STATS))
        for r in have:
            for l in range(r["L"]):
                cells = [_cell(*(x[0] for x in seed_interval(_nan_reduce(np.nanmean, np.moveaxis(r["mean"][kd][s][:, l], 1, 0))[:, None])))
                         for s in STATS]
                out.append(f"| {r['row']} | {l} | " + " | ".join(cells) + " |")
        out.append("")
    out += aer_markdown(rows)
    out += paired_markdown(rows)
    out += rho_markdown(rows)
    out.append(f"\nFigure: {STAT_TITLE[stat]} of {KIND_TITLE[kind]} (`--kind`, `--stat`).\n")
    if notes:
        out.append("Left out:\n\n" + "\n".join(f"- {n}" for n in notes) + "\n")
    return "\n".join(out)


def compare_layers_figure(rows, prefix):
    """Per kind (rows of panels) and statistic (columns): each row's per-layer
    mean over heads, interval over seeds as error bars, layers side by side."""
    paper_style()
    plt = pyplot()
    kinds = [k for k in KINDS if any(k in r["mean"] for r in rows)]
    fig, axes = plt.subplots(len(kinds), len(STATS), figsize=(len(STATS) * 2.3 + 0.6, len(kinds) * 1.9 + 0.8),
                             squeeze=False, sharex=True)
    Lmax = max(r["L"] for r in rows)
    colors = [plt.get_cmap("viridis")(0.85 * l / max(Lmax - 1, 1)) for l in range(Lmax)]
    x = np.arange(len(rows))
    for i, kd in enumerate(kinds):
        for j, s in enumerate(STATS):
            ax = axes[i, j]
            for l in range(Lmax):
                pts = []
                for k, r in enumerate(rows):
                    if kd in r["mean"] and l < r["L"]:
                        v = _nan_reduce(np.nanmean, np.moveaxis(r["mean"][kd][s][:, l], 1, 0))
                        m, lo, hi = (a[0] for a in seed_interval(v[:, None]))
                        pts.append((k, m, lo, hi))
                pts = [p for p in pts if np.isfinite(p[1])]
                if not pts:
                    if l == 0:
                        ax.text(0.5, 0.5, "n/a", transform=ax.transAxes, ha="center", va="center", color="0.5")
                    continue
                k, m, lo, hi = map(np.array, zip(*pts))
                off = (l - (Lmax - 1) / 2) * 0.6 / max(Lmax, 1)
                err = np.where(np.isfinite(lo), [m - lo, hi - m], 0.0)
                ax.errorbar(k + off, m, yerr=err, fmt="o", ms=2.5, lw=0.8, capsize=1.5, color=colors[l],
                            label=f"layer {l}")
            if i == 0:
                ax.set_title(STAT_TITLE[s])
            if j == 0:
                ax.set_ylabel(KIND_TITLE[kd].replace(" attention", "").replace("-attention", ""))
            ax.set_xticks(x)
            ax.set_xticklabels([r["row"] for r in rows], rotation=90, fontsize=6)
            ax.tick_params(labelsize=6)
    hnd, lab = axes[0, 0].get_legend_handles_labels()
    fig.legend(hnd, lab, loc="upper center", ncol=min(len(lab), 8), frameon=False, bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return [(fig, prefix)]


def compare_heads_figure(rows, kind, stat, prefix):
    """One statistic of one kind: every head of every row (mean over seeds), a
    column of dots per row coloured by layer; the row's mean over heads as a bar."""
    paper_style()
    plt = pyplot()
    have = [r for r in rows if kind in r["mean"]]
    if not have:
        raise AnalysisError(prefix, f"no row has {kind} maps")
    fig, ax = plt.subplots(figsize=(max(3.2, 0.42 * len(have) + 1.2), 2.6))
    Lmax = max(r["L"] for r in have)
    colors = [plt.get_cmap("viridis")(0.85 * l / max(Lmax - 1, 1)) for l in range(Lmax)]
    for k, r in enumerate(have):
        v = _nan_reduce(np.nanmean, r["mean"][kind][stat])      # [L, H]
        for l in range(r["L"]):
            jit = np.linspace(-0.25, 0.25, r["H"]) if r["H"] > 1 else np.zeros(1)
            ax.scatter(k + jit, v[l], s=5, color=colors[l], label=f"layer {l}" if k == 0 else None, zorder=3)
        ax.hlines(np.nanmean(v), k - 0.32, k + 0.32, color="0.2", lw=1.0, zorder=4)
    ax.set_xticks(range(len(have)))
    ax.set_xticklabels([r["row"] for r in have], rotation=90, fontsize=7)
    ax.set_ylabel(STAT_TITLE[stat])
    ax.set_title(f"{KIND_TITLE[kind]}: {STAT_TITLE[stat]} per head\n(dots: mean over seeds; bar: mean over heads)",
                 fontsize=7)
    ax.legend(fontsize=6, frameon=False, loc="best")
    fig.tight_layout()
    return [(fig, prefix)]


def compare_scatter(rows, kind, stat, prefix):
    """Each row's Δ statistic (mean over all heads, vs base) against its Δ dev NLL, with Spearman ρ."""
    paper_style()
    plt = pyplot()
    names, ds, dn, rho, _ = delta_vs_nll(rows, kind, stat)
    fig, ax = plt.subplots(figsize=(3.6, 3.0))
    ax.axhline(0, color="0.7", lw=0.6)
    ax.axvline(0, color="0.7", lw=0.6)
    ax.scatter(ds, dn, s=12, color="C0", zorder=3)
    for n, x, y in zip(names, ds, dn):
        ax.annotate(n, (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
    ax.set_xlabel(f"Δ {STAT_TITLE[stat]} vs base ({KIND_TITLE[kind]})")
    ax.set_ylabel("Δ dev NLL vs base (nats)")
    ax.set_title(f"Spearman ρ = {rho:+.2f} (n = {len(names)} rows)" if np.isfinite(rho)
                 else f"Spearman ρ: n/a (n = {len(names)} rows)", fontsize=8)
    if not names:
        ax.text(0.5, 0.5, "no row with both (needs base's attention)", transform=ax.transAxes, ha="center",
                fontsize=7, color="0.4")
    fig.tight_layout()
    return [(fig, prefix)]


def compare_sweep(sweep, configs, prefix, kind, stat, plot=True):
    """attention.py compare: the table (.md, .csv) and figures of a sweep."""
    if not os.path.isdir(sweep):
        raise AnalysisError(sweep, "no such sweep directory")
    if configs is not None and not os.path.isdir(configs):   # was read as "no configs", exit 0
        raise AnalysisError(configs, "--configs: no such config directory")
    if configs is None:
        d = os.path.join(sweep, "configs")
        configs = d if os.path.isdir(d) else None
    rows, notes, first = read_sweep_summaries(sweep, configs)
    # every output is made before the first is written: a failure leaves the earlier set whole
    texts = {prefix + ".md": compare_markdown(sweep, rows, notes, first, kind, stat), prefix + ".csv": compare_csv(rows)}
    figs = []
    if plot:
        figs += compare_layers_figure(rows, prefix + "_layers")
        figs += compare_heads_figure(rows, kind, stat, prefix + f"_heads_{kind}_{stat}")
        figs += compare_scatter(rows, kind, stat, prefix + f"_dnll_{kind}_{stat}")
    check_outputs(list(texts) + [p for _, pre in figs for p in figure_paths(pre)])   # every name too
    for path, text in texts.items():
        write_atomic(path, text)
    return list(texts) + [p for fig, pre in figs for p in savefig(fig, pre)]


# ---------------------------------------------------------------- CLI
def build_parser():
    p = ArgumentParser(prog="attention.py", description=__doc__.split("\n\n")[0],
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
    m = sub.add_parser("summary", help="per-head statistics over the sentences of a maps file, to a small HDF5 file")
    m.add_argument("file", metavar="ATTN_H5")
    m.add_argument("--out", metavar="SUMMARY_H5", required=True, help="output file (written through a temporary)")
    m.add_argument("--run", help="the run's name (default: the output's file name)")
    m.add_argument("--align", metavar="SILVER_H5",
                   help="silver word alignment of the split (silver_align.py): adds the AER of the cross-attention heads")
    c = sub.add_parser("compare", help="statistics by row of a Table 3 sweep (SWEEP_DIR/attention/*.h5)")
    c.add_argument("sweep", metavar="SWEEP_DIR")
    c.add_argument("--configs", help="row configs (default: SWEEP_DIR/configs)")
    c.add_argument("--kind", choices=KINDS, default="cross", help="kind of the per-head figure and the scatter")
    c.add_argument("--stat", choices=STATS, default="entropy", help="statistic of the per-head figure and the scatter")
    c.add_argument("--out", metavar="PREFIX", help="output prefix (default: SWEEP_DIR/attention-compare)")
    c.add_argument("--no-plot", action="store_true", help="tables only")
    e = sub.add_parser("evolution", help="statistics against training step, from a probe file")
    e.add_argument("file", metavar="PROBE_H5")
    e.add_argument("--out", metavar="PREFIX", default="attn_evolution", help="output prefix (default: attn_evolution)")
    return p


def main(argv):
    a = build_parser().parse_args(argv)
    if a.cmd == "compare":
        return _print(compare_sweep(a.sweep, a.configs, a.out or os.path.join(a.sweep, "attention-compare"),
                                    a.kind, a.stat, not a.no_plot))
    if a.cmd == "summary":
        output_not_input("attention.py summary", "--out", a.out, a.file, a.align)
        return _print(summarize_maps(a.file, a.out, a.run, a.align))
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
        check_outputs([a.out + ".md", a.out + ".csv"] + figure_paths(a.out))   # all before the first is written
        write_atomic(a.out + ".md", head + md)
        write_atomic(a.out + ".csv", csv)
        outs = [a.out + ".md", a.out + ".csv"]
        outs += stats_figure(st, a.out, f"per-head attention statistics ({name}, {len(sents)} sentences)")
    else:
        outs = evolution(a.file, data, a.out)
    return _print(outs)


def _print(outs):
    for p in outs:
        print(p)
    return 0


if __name__ == "__main__":
    main_wrapper(main)
