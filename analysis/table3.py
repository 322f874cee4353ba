#!/usr/bin/env python3
"""Table 3 of "Attention Is All You Need" from a sweep directory.

Reads every SWEEP_DIR/results/<run>.h5 (docs/results.md) and the row configs
(input/table3/*.cfg by default), so rows whose job has not finished are listed
as pending rather than dropped; a pending row shows the settings it will run
with: its config with the sweep's overrides (SWEEP_DIR/sweep.env: STEPS,
SHRINK, EXTRA, ...) applied as jobs/table3-stages.sh applies them.  Writes
PREFIX.md, PREFIX.csv (per run), PREFIX-rows.csv (per row), PREFIX.tex and a
figure PREFIX.{png,pdf} (default PREFIX: SWEEP_DIR/table3).

The runs of a row (X, X-seed2, ..., X-rerun) make one row of the table.  Its
failed runs (verdict diverged, stuck or unstable: analysis/verdict.py) are
shown and left out; the rest give the row's mean dev NLL (nats) and its
difference from base with a 95% interval from the seeds, the paper's
direction against ours, a paired bootstrap of held-out BLEU against base,
Holm-corrected p-values and the rank correlation with the paper
(analysis/compare.py, analysis/stats.py; docs/results.md states the rules).
As in the paper, the Markdown and LaTeX tables show a row's hyperparameters
only where they differ from the base row.  The figure has the dev NLL
curves, one panel per group, failed runs dashed.

--protocol converged applies the converged protocol's analysis plan
(docs/results-multi30k/converged/protocol.md): Δ against base by paired
differences over matched seeds with a pooled variance (two-way model, its
degrees of freedom stated), the row's paired t interval beside it, a
seed-level BLEU test beside the bootstrap, agreement by Holm-corrected
p-values at bands 0.03, 0.04 and 0.05 nats, ρ with a permutation p and a
bootstrap interval, each run's best and stop steps, and the Δ over training
(PREFIX-delta.csv and PREFIX-delta.{png,pdf}).

Examples:
  table3.py sweeps/2026-11-23 --configs input/table3
  table3.py docs/results-multi30k/converged/sweep --protocol converged
"""

import argparse
import csv
import glob
import io
import math
import os
import re
import shlex

import numpy as np

import stats
from common import (ArgumentParser, AnalysisError, check_outputs, figure_paths, fmt_num, main_wrapper, paper_style, pyplot,
                    savefig, write_atomic)
import compare
from compare import PAPER_EQUIV_NATS, base_spread_note, is_failed, mean_bleu, nll, split_run, summarize
from row_result import NUMERIC, STRINGS, cfg_float, parse_config_text, read_result, read_text

# Table 3 hyperparameter columns: (config key, Markdown header, LaTeX header, kind)
HYPER = [
    ("n_layers", "N", "$N$", "int"),
    ("d_model", "d_model", r"$d_{\text{model}}$", "int"),
    ("d_ff", "d_ff", r"$d_{\text{ff}}$", "int"),
    ("n_heads", "h", "$h$", "int"),
    ("d_k", "d_k", "$d_k$", "int"),
    ("d_v", "d_v", "$d_v$", "int"),
    ("dropout", "P_drop", r"$P_{\text{drop}}$", "float"),
    ("label_smoothing", "eps_ls", r"$\epsilon_{ls}$", "float"),
    ("positional", "pos. emb.", "pos. emb.", "str"),
    ("train_steps", "train steps", "train steps", "steps"),
]
DEFAULT_CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "input", "table3")


def logical_sort_key(name):
    """base first, then (A)..(E) in order with numeric suffixes, big last, others alphabetically."""
    if name == "base":
        return (0, "", 0, name)
    if name == "big":
        return (3, "", 0, name)
    m = re.fullmatch(r"([A-Za-z]+)(\d*)(.*)", name)
    if m:
        return (1, m.group(1).upper(), int(m.group(2) or 0), m.group(3))
    return (2, name, 0, name)


def row_sort_key(name):
    """Runs in the order of their rows; within a row by seed (X, X-seed2,
    ...), a rerun (X-rerun, X-seed2-rerun) right after its run."""
    row, seed, rerun = split_run(name)
    return logical_sort_key(row) + (seed, rerun)


def row_group(name):
    """The paper's group of a row or run: base, A..E, big (seeds and reruns in their row's)."""
    name = split_run(name)[0]
    if name in ("base", "big"):
        return name
    m = re.match(r"[A-Za-z]+", name)
    return m.group(0).upper() if m else name


def _norm(key, v):
    """A config value normalised for comparison and display."""
    if v is None:
        return None
    if key == "positional":
        return {"sinusoid": "sinusoid", "sinusoidal": "sinusoid", "learned": "learned"}.get(v, v)
    try:
        f = float(v)
    except ValueError:
        return v
    return int(f) if f == int(f) and key != "dropout" and key != "label_smoothing" else f


def _fmt_steps(n):
    if n is None:
        return ""
    n = int(n)
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}K"
    if n >= 1000:
        return f"{n / 1000:.1f}K"
    return str(n)


def _fmt_hyper(key, v):
    if v is None:
        return ""
    if key == "train_steps":
        return _fmt_steps(v)
    if key == "positional":
        return "learned" if v == "learned" else "sinusoid" if v == "sinusoid" else str(v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


SWEEP_SHRUNK = ("d_model", "d_ff", "d_k", "d_v")  # the keys SHRINK divides


def read_sweep_env(sweep):
    """The sweep-wide overrides SWEEP/sweep.env records (NAME=value lines that
    jobs/table3-stages.sh writes with printf %q); {} without the file."""
    p = os.path.join(sweep, "sweep.env")
    if not os.path.exists(p):
        return {}
    text = read_text(p)
    env = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        try:
            words = shlex.split(value)
        except ValueError as e:
            raise AnalysisError(f"{p}:{n}", f"cannot parse '{line}': {e}") from None
        if not eq or not re.fullmatch(r"[A-Z_]+", name) or len(words) > 1:
            raise AnalysisError(f"{p}:{n}", f"expected NAME=value, got '{line}'")
        env[name] = words[0] if words else ""
    return env


PAPER_STEPS = 100000  # the base row's training steps: a sweep with fewer scales its schedule


def scaled_schedule(env, cfg):
    """table3_schedule of jobs/table3-stages.sh: WARMUP, else for STEPS below
    the paper's 100000 a warmup of STEPS/5 with the paper's peak rate
    (lr_factor x sqrt(warmup / config warmup))."""
    if env.get("WARMUP"):
        return [("warmup", env["WARMUP"])]
    steps = int(env["STEPS"]) if env.get("STEPS", "").isdigit() else None
    if steps is None or steps >= PAPER_STEPS:
        return []
    w = max(int(steps / 5 + 0.5), 1)
    f = float(cfg.get("lr_factor") or 1) * math.sqrt(w / float(cfg.get("warmup") or 4000))
    return [("warmup", str(w)), ("lr_factor", f"{f:.6g}")]


def sweep_layout(env, cfg):
    """The batch-layout overrides of table3_layout (jobs/table3-stages.sh):
    GPUS_PER_ROW ranks, the global batch BATCH_TOKENS or the row's
    batch_tokens, micro-batches of MAX_TOKENS or global / ranks tokens."""
    r = int(env.get("GPUS_PER_ROW") or 1)
    g = int(env.get("BATCH_TOKENS") or cfg.get("batch_tokens") or 0)
    mt, uf = env.get("MAX_TOKENS"), env.get("UPDATE_FREQ")
    if uf:
        m = mt or (str(-(-g // (r * int(uf)))) if g > 0 else cfg.get("max_tokens") or "2048")
        return [("max_tokens", m), ("update_freq", uf), ("batch_tokens", "0")]
    if g > 0:
        return [("max_tokens", mt or str(-(-g // r))), ("batch_tokens", str(g))]
    return [("max_tokens", mt)] if mt else []


def sweep_overrides(env, cfg, origin="config"):
    """The key=value overrides a sweep element gives a row with config cfg:
    table3_overrides of jobs/table3-stages.sh, in the same order (later wins)."""
    ovr = []
    if env.get("STEPS"):
        ovr.append(("train_steps", env["STEPS"]))
    ovr += scaled_schedule(env, cfg)
    ovr += sweep_layout(env, cfg)
    if env.get("DATA"):
        ovr.append(("data", env["DATA"]))
    shrink = env.get("SHRINK", "")
    if shrink and shrink != "1":
        for k in SWEEP_SHRUNK:
            if cfg.get(k):
                try:
                    ovr.append((k, str(max(int(cfg[k]) // int(shrink), 1))))
                except ValueError:
                    raise AnalysisError(origin, f"SHRINK={shrink} cannot divide {k} = {cfg[k]}") from None
    for w in env.get("EXTRA", "").split():
        k, eq, v = w.partition("=")
        if eq:
            ovr.append((k, v))
    return ovr


def judge_from_run_dir(r, sweep):
    """A result file without curves (format 1) whose run directory is still
    there: its curves and verdict from SWEEP/runs/<run>/metrics.h5, judged
    as row_result.py would have (the plateau from the config's dataset)."""
    from row_result import compute_attrs, data_path, dataset_facts, from_metrics, verdict_of

    m = os.path.join(sweep, "runs", r["row"], "metrics.h5")
    if r["curves"] or r["verdict"] or r["status"] == "pending" or not os.path.isfile(m):
        return
    try:
        got, curves = from_metrics(m)
    except AnalysisError:
        return
    data = data_path(r["cfg"], None)
    uni = dataset_facts(data).get("unigram_nll") if data else None
    for k, v in compute_attrs(r["cfg"], {}, got, data)[0].items():  # tokens, epochs, FLOPs where missing
        if k in ("tokens_seen", "epochs", "train_flops") and not math.isfinite(r.get(k, math.nan)):
            r[k] = v
    r["curves"] = curves
    r["verdict"], why = verdict_of(curves, r["cfg"], uni, r["message"], got.get("stop_step"), got.get("best_step"))
    r["verdict_reason"] = f"{why} (judged by table3.py from runs/{r['row']}/metrics.h5)"


def check_numbers(cfg, origin):
    """The numeric columns of a config are numbers: "train_steps = abc"
    failed in int() while the table was formatted."""
    for key, _, _, kind in HYPER:
        v = cfg.get(key)
        if kind != "str" and isinstance(_norm(key, v), str):
            raise AnalysisError(origin, f"{key} = {v}: not a number")


def load_rows(sweep, configs_dir):
    """All rows: dict name -> record with hyper (all keys), numbers and status.
    A row without a result gets its config with the sweep's overrides."""
    rows = {}
    env = read_sweep_env(sweep)
    cfg_files = sorted(glob.glob(os.path.join(configs_dir, "*.cfg"))) if configs_dir else []
    for p in cfg_files:
        cfg = parse_config_text(read_text(p), p)
        cfg.update(sweep_overrides(env, cfg, p))
        check_numbers(cfg, p)
        name = cfg.get("row") or os.path.splitext(os.path.basename(p))[0]
        rows[name] = dict({k: (None if t is np.int64 else math.nan) for k, (t, _) in NUMERIC.items()},
                          **{k: "" for k in STRINGS})
        rows[name].update({
            "row": name, "status": "pending", "cfg": cfg, "source": p, "message": "",
            "paper_ppl": cfg_float(cfg, "paper_ppl"), "paper_bleu": cfg_float(cfg, "paper_bleu"),
            "paper_params_m": cfg_float(cfg, "paper_params_m"), "curves": {}, "hyp_sets": [], "bleu": {},
        })
    planned = {k: r["cfg"].get("train_steps") for k, r in rows.items()}
    res_dir = os.path.join(sweep, "results")
    for p in sorted(glob.glob(os.path.join(res_dir, "*.h5"))):
        r = read_result(p)
        r["source"] = p
        judge_from_run_dir(r, sweep)
        for k in ("paper_ppl", "paper_bleu", "paper_params_m"):  # the stored config's, if the attribute is NaN
            if not math.isfinite(r[k]):
                r[k] = cfg_float(r["cfg"], k)
        if r["row"] in rows:
            # the paper's numbers of the config are the fallback for a result without them
            for k in ("paper_ppl", "paper_bleu", "paper_params_m"):
                if not math.isfinite(r[k]):
                    r[k] = rows[r["row"]][k]
            if not r["cfg"]:
                r["cfg"] = rows[r["row"]]["cfg"]
        rows[r["row"]] = r
    for name, r in rows.items():
        hyper = {}
        check_numbers(r["cfg"], r["source"])
        for key, *_ in HYPER:
            hyper[key] = _norm(key, r["cfg"].get(key))
        # steps: planned = the row config's value with the sweep's overrides
        # (a sweep may scale all rows down); shown = the steps actually
        # trained once the row is done
        r["planned_steps"] = _norm("train_steps", planned.get(name, r["cfg"].get("train_steps")))
        if r.get("train_steps") is not None and r["status"] == "done":
            hyper["train_steps"] = r["train_steps"]
        r["hyper"] = hyper
    return [rows[k] for k in sorted(rows, key=row_sort_key)]


def shown_hyper(rows):
    """Per row, the hyperparameter values to display: all for base, else only
    those that differ from base (None = same as base)."""
    base = next((r for r in rows if r["row"] == "base"), None)
    out = []
    for r in rows:
        if base is None or r is base:
            out.append(dict(r["hyper"]))
            continue
        d = {}
        for key, *_ in HYPER:
            v, b = r["hyper"][key], base["hyper"][key]
            if key == "train_steps":
                both_done = r["status"] == "done" and base["status"] == "done"
                differs = (r["planned_steps"] != base["planned_steps"]) or (both_done and v != b)
            else:
                differs = v != b
            d[key] = v if differs and v is not None else None
        out.append(d)
    return out


def _signed(x, digits):
    return "–" if x is None or not math.isfinite(x) else f"{x:+.{digits}f}"


def _interval(d, lo, hi, digits):
    """'+0.200 [+0.150, +0.250]'; without an interval the difference alone."""
    if not math.isfinite(d):
        return "–"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return _signed(d, digits)
    return f"{_signed(d, digits)} [{_signed(lo, digits)}, {_signed(hi, digits)}]"


def _p(p):
    if p is None or not math.isfinite(p):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def run_label(r):
    """A run's verdict as the tables show it: the verdict, else its status."""
    if r["status"] != "done":
        return r["status"]
    return r.get("verdict") or "done"


def runs_cell(s):
    """Every run of a row: its dev NLL, ✗ and the verdict where it failed
    (left out of the statistics), 'rerun' on a rerun."""
    parts = []
    for r in s["runs"]:
        _, seed, rerun = split_run(r["row"])
        v = fmt_num(nll(r), 3) if r["status"] == "done" else r["status"]
        if is_failed(r):
            v += f" ✗{run_label(r)}" if r["status"] == "done" else " ✗"
        parts.append(("rerun " if rerun else "") + v)
    return ", ".join(parts)


def _params(r):
    pm = r["params"] / 1e6 if r.get("params") is not None else math.nan
    return f"{pm:.3g}" if math.isfinite(pm) and 0 < pm < 1 else fmt_num(pm, 1)


COMPARE_COLS = ["runs", "dev NLL", "PPL", "per run (nats)", "Δ NLL vs base [95% CI]", "p", "p Holm",
                "paper Δ", "paper", "ours", "agree", "≈ bound", "params ×10⁶"]


def compare_cells(s):
    """The cells of COMPARE_COLS of one row summary."""
    mark = "†" if s["pooled"] else ""
    if s["row"] == "base":
        delta = "(reference)"
    else:
        delta = _interval(s["d_nll"], s["lo"], s["hi"], 3) + mark
    return [f"{s['n']}/{len(s['runs'])}", fmt_num(s["mean_nll"], 3),
            fmt_num(math.exp(s["mean_nll"]) if math.isfinite(s["mean_nll"]) else math.nan, 2),
            runs_cell(s), delta, _p(s["p"]), _p(s.get("p_holm")), _signed(s["paper_d"], 3),
            s["paper_dir"], s["ours_dir"], s["agree"],
            fmt_num(s["equiv"], 3), _params(s["runs"][0])]


HELD_OUT = ("dev.final", "test2016.final", "test2016.avg5", "test2017.final", "test2017.avg5")
BLEU_COLS = list(HELD_OUT) + ["len ratio", "BP", "Δ BLEU vs base [95% CI]", "on", "p", "p Holm"]


def bleu_cells(s):
    cells = [fmt_num(mean_bleu(s["used"], k), 1) for k in HELD_OUT]
    cells += [fmt_num(s.get("len_ratio", math.nan), 3), fmt_num(s.get("bp", math.nan), 3)]
    if s["row"] == "base":
        return cells + ["(reference)", "", "", ""]
    return cells + [_interval(s["d_bleu"], s["bleu_lo"], s["bleu_hi"], 2), s["bleu_set"] or "–",
                    _p(s["bleu_p"]), _p(s.get("bleu_p_holm"))]


RUN_COLS = ["run", "seed", "verdict", "dev NLL", "steps", "tokens ×10⁶", "epochs", "FLOPs ×10¹⁵",
            "wall (min)", "eval (min)", "device", "threads × ranks"]


def run_cells(r):
    _, seed, rerun = split_run(r["row"])

    def num(k, scale=1.0, digits=2):
        v = r.get(k)
        return fmt_num(v / scale if v is not None and math.isfinite(v) else math.nan, digits)

    flops = r.get("train_flops")
    flops = f"{flops / 1e15:.3g}" if flops is not None and math.isfinite(flops) else "–"

    tr = f"{r.get('threads') or '?'} × {r.get('ranks') or '?'}" if r.get("threads") or r.get("ranks") else "–"
    seed = r.get("cfg", {}).get("seed") or seed  # the config's seed (a rerun has the next one)
    return [r["row"], f"{seed}{' (rerun)' if rerun else ''}", run_label(r), fmt_num(nll(r), 3),
            str(r.get("train_steps") or "–"), num("tokens_seen", 1e6), num("epochs"), flops,
            num("wall_seconds", 60, 1), num("eval_seconds", 60, 1), r.get("device") or "–", tr]


def md_table(head, lines, first_left=1):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join([":--"] * first_left + ["--:"] * (len(head) - first_left)) + "|"]
    out += ["| " + " | ".join(c) + " |" for c in lines]
    return "\n".join(out) + "\n"


def compare_table(summaries, cols=COMPARE_COLS, cells=compare_cells):
    """Markdown: one line per row, hyperparameters where they differ from base."""
    reps = [s["runs"][0] for s in summaries]
    shown = shown_hyper(reps)
    head = ["row"] + [h for _, h, _, _ in HYPER] + cols
    lines = [[s["row"] + (" ✗" if s["failed"] else "")] + [_fmt_hyper(k, h[k]) for k, *_ in HYPER] + cells(s)
             for s, h in zip(summaries, shown)]
    return md_table(head, lines)


# the converged protocol: the pooled interval in the Δ column, the row's paired t interval beside it
CONVERGED_COLS = (COMPARE_COLS[:4] + ["Δ NLL vs base, pooled [95% CI]", "p", "p Holm", "pairs",
                                      "paired t [95% CI]"] + COMPARE_COLS[7:])


def _paired_cells(c, digits):
    """[pooled interval, p, p Holm, pairs, paired t interval] of a paired_comparison."""
    pooled, paired = c["pooled"], c["paired"]
    return [_interval(pooled["diff"], pooled["lo"], pooled["hi"], digits), _p(pooled["p"]),
            _p(pooled.get("p_holm")), str(c["n"]) + (f" ({c['unmatched']} unmatched)" if c.get("unmatched") else ""),
            _interval(paired["diff"], paired["lo"], paired["hi"], digits)]


def converged_cells(s):
    """The cells of CONVERGED_COLS of one row summary."""
    c = compare_cells(s)
    paired = ["(reference)", "", "", "", ""] if s["row"] == "base" else _paired_cells(s["paired_nll"], 3)
    return c[:4] + paired + c[7:]


SEED_BLEU_COLS = [compare.BLEU_SET, "Δ BLEU vs base, pooled [95% CI]", "p", "p Holm", "pairs", "paired t [95% CI]"]


def seed_bleu_table(summaries):
    """The seed-level BLEU test: one line per row."""
    lines = [[s["row"], fmt_num(mean_bleu(s["used"], compare.BLEU_SET), 1)] +
             (["(reference)", "", "", "", ""] if s["row"] == "base" else _paired_cells(s["paired_bleu"], 2))
             for s in summaries]
    return md_table(["row"] + SEED_BLEU_COLS, lines)


def band_table(overall):
    """Agreement counts at each band of compare.BANDS."""
    lines = [[f"{b:.2f}" + (" (primary)" if b == PAPER_EQUIV_NATS else "")] +
             [str(overall["bands"][b][k]) for k in compare.AGREEMENTS] for b in compare.BANDS]
    return md_table(["band (nats)"] + list(compare.AGREEMENTS), lines)


def pool_note(pool, what):
    """The pooled variance in words: its s.d., df and what it was estimated from."""
    if not pool or not pool["df"]:
        return f"{what}: no pooled variance (needs two rows with every one of base's seeds)."
    return (f"{what}: residual s.d. {math.sqrt(pool['var']):.4g} of the two-way model (row + seed) over the "
            f"{pool['rows']} rows with all of base's {pool['seeds']} seeds, "
            f"(R − 1)(S − 1) = {pool['df']} degrees of freedom.")


def converged_note(overall):
    """Under the converged table: the pooled variances, the rank correlation
    with its tests, the agreement counts and the band's sensitivity."""
    o = overall
    rho = (f"{fmt_num(o['spearman'], 2)}, permutation p {_p(o['spearman_p'])} ({stats.PERMUTATIONS} permutations), "
           f"95% bootstrap interval over rows [{fmt_num(o['spearman_lo'], 2)}, {fmt_num(o['spearman_hi'], 2)}]")
    out = ("\n" + pool_note(o["pools"]["nll"], "Δ dev NLL") + " " + pool_note(o["pools"]["bleu"], "Δ BLEU") + "\n"
           f"\nSpearman rank correlation of our Δ dev NLL with the paper's Δ (ln PPL) over the "
           f"{o['n_ranked']} rows with both: {rho}.\n"
           f"\nAgreement with the paper (ours: up/down where the Holm-corrected p < {compare.ALPHA}, else ≈; "
           f"where the paper is ≈, |Δ| ≤ band, ours agrees when its pooled interval lies within ±band), "
           f"by band:\n\n" + band_table(o))
    spread = base_spread_note(o["base"])
    return out + ("\n" + spread + "\n" if spread else "") + noise_note(o["noise"])


def noise_note(n):
    """The pairing's premise (compare.order_noise), where pairs exist."""
    if not n["n_same"] and not n["n_across"]:
        return ""
    return (f"\nData order in the dev noise: the dev NLL's fluctuations (each evaluation less the centred mean of "
            f"{compare.NOISE_WINDOW}, from update {compare.NOISE_FROM_STEP}) correlate r = "
            f"{fmt_num(n['same_seed'], 2)} on average between two rows' runs of one seed ({n['n_same']} pairs: "
            f"the same data order and initial draw) and r = {fmt_num(n['across_seeds'], 2)} between two seeds of "
            f"one row ({n['n_across']} pairs). Pairing by seed cancels the shared part.\n")


def overall_note(overall, summaries):
    """Under the comparison table: the rank correlation, agreement counts and footnotes."""
    rho, n = overall["spearman"], overall["n_ranked"]
    a = overall["agree"]
    out = (f"\nSpearman rank correlation of our Δ dev NLL with the paper's Δ (ln PPL) over the {n} rows "
           f"with both: {fmt_num(rho, 2)}. Agreement with the paper's direction: {a['yes']} yes, "
           f"{a['sign']} same sign but not significant, {a['no (n.s.)']} opposite sign but not significant, "
           f"{a['no']} no, {a['open']} open (the paper ≈, ours not significant, but our interval wider than "
           f"±{PAPER_EQUIV_NATS} nats: neither shown). Where the paper is ≈ (|Δ| ≤ {PAPER_EQUIV_NATS} nats), "
           f"ours agrees when its whole interval lies within ±{PAPER_EQUIV_NATS} nats, significant or not.\n")
    spread = base_spread_note(overall["base"])
    if spread:
        out += "\n" + spread + "\n"
    if any(s["pooled"] for s in summaries):
        out += ("\n† one healthy seed: the interval takes the row's seed spread to be base's (Welch's "
                "interval needs two seeds on each side).\n")
    return out


def sweep_note(env):
    """The sweep's overrides (SWEEP/sweep.env) in words: a scaled-down table
    must say how it was scaled."""
    said = [f"{k}={env[k]}" for k in ("SHRINK", "STEPS", "WARMUP", "MAX_TOKENS", "UPDATE_FREQ",
                                      "BATCH_TOKENS", "SEEDS", "DATA", "EXTRA") if env.get(k)]
    if not said:
        return ""
    out = "\nSweep overrides (sweep.env): " + ", ".join(f"`{x}`" for x in said) + "."
    if env.get("SHRINK", "1") != "1":
        out += f" d_model, d_ff, d_k and d_v of every row are divided by {env['SHRINK']}."
    if env.get("WARMUP"):
        out += f" Every row warms up over {env['WARMUP']} steps (eq. 3)."
    elif env.get("STEPS", "").isdigit() and int(env["STEPS"]) < PAPER_STEPS:
        w = max(int(int(env["STEPS"]) / 5 + 0.5), 1)
        out += (f" Learning rate (eq. 3): warmup over {w} steps (a fifth of the run), lr_factor "
                f"{math.sqrt(w / 4000):.4g}, so that the peak rate is the paper's for each row's d_model.")
    return out + "\n"


CONVERGED_STATISTICS = (
    "- Statistics (analysis/stats.py, analysis/compare.py; the converged protocol's analysis plan): Δ dev NLL = "
    "the mean over matched seeds (the config's seed; a rerun, trained with seed + 100, stands for its run's seed "
    "and its pair is counted unmatched) of the row's run minus base's, 95% interval t_df · "
    "√(2σ²/S) with σ² the residual variance of the two-way model (row + seed) over the rows with all of base's "
    "seeds, df = (R − 1)(S − 1), S the row's pairs; the row's own paired t interval (df = pairs − 1) beside it; "
    "the same for BLEU ({bleu}) beside the bootstrap; Holm's correction over the rows' pooled p-values; "
    "ours up/down where the Holm p < {alpha}; paper ≈ where |Δ| ≤ {band} nats (agreement also at {bands}); "
    "Spearman's ρ with a permutation p ({perms} permutations) and a percentile bootstrap interval over the rows "
    "({perms} resamples, seed {seed}); BLEU bootstrap: {resamples} resamples over sentences and seeds "
    "(Clark et al. 2011).")


def protocol_note(runs, summaries, env, converged=False):
    """The protocol as the files record it: lr rule, seeds, verdict rules
    with thresholds, the statistics, the sacreBLEU signature."""
    import verdict as V

    rules = sorted({r.get("lr_rule") or "" for r in runs} - {""})
    peaks = sorted({f"peak {r['peak_lr']:g}, warmup {r.get('warmup') or '?'}" for r in runs
                    if r.get("peak_lr") is not None and math.isfinite(r["peak_lr"])})
    seeds = sorted({len(s["runs"]) for s in summaries})
    sigs = sorted({r.get("bleu_signature") or "" for r in runs} - {""})
    # the converged sweep's reruns train with seed + 100 (compare.pair_seed), not the next seed
    rerun = f"seed + {compare.RERUN_SEED_OFFSET}" if converged else "the next seed"
    out = ["", "Protocol:",
           f"- Learning rate: {'; '.join(rules) if rules else 'not recorded in the result files'}"
           + (f" ({'; '.join(peaks)})" if peaks else "") + ".",
           f"- Runs per row: {', '.join(map(str, seeds))} (seeds and reruns); a failed run is rerun once with "
           f"{rerun} (row `<row>-rerun`), both are shown, the statistics use the healthy one.",
           f"- Verdicts (analysis/verdict.py): diverged = non-finite loss, final dev NLL > its minimum + "
           f"{V.DIVERGE_DEV_NATS} nats, or training loss > its minimum + {V.DIVERGE_TRAIN_NATS}; stuck = dev NLL "
           f"at {V.STUCK_FRACTION:.0%} of the run less than {V.STUCK_NATS_BELOW_PLATEAU} nats below the unigram "
           f"plateau; unstable = in the last {V.UNSTABLE_FRACTION:.0%} a dev NLL rise > {V.UNSTABLE_DEV_NATS} "
           f"nats over its running minimum with the training loss rising > {V.UNSTABLE_TRAIN_NATS}.",
           f"- Statistics (analysis/stats.py): Δ dev NLL = mean ln PPL of the row's healthy seeds − base's, "
           "95% Welch t interval, p of Welch's t test; BLEU: paired bootstrap resampling (Koehn 2004, "
           f"{stats.BOOTSTRAP_RESAMPLES} resamples, seed {stats.BOOTSTRAP_SEED}) of the mean BLEU of the row's "
           "healthy seeds − base's on the same sentences (test2016 avg5, else final), each resample drawing "
           "the sentences (paired) and each row's seeds, percentile interval; Holm's correction over the rows' "
           "comparisons (p Holm), the intervals are not corrected; "
           f"paper direction ≈ where |Δ| ≤ {PAPER_EQUIV_NATS} nats (and E, A3), ours ≈ where "
           "the interval contains 0; ≈ bound: no difference larger than this (nats).",
           "- sacreBLEU signature: " + (" / ".join(f"`{s}`" for s in sigs) if sigs else "none recorded") + "."]
    if converged:  # the Statistics line
        out[-2] = CONVERGED_STATISTICS.format(
            bleu=compare.BLEU_SET, alpha=compare.ALPHA, band=PAPER_EQUIV_NATS, seed=stats.BOOTSTRAP_SEED,
            bands=", ".join(f"{b:g}" for b in compare.BANDS), perms=stats.PERMUTATIONS,
            resamples=stats.BOOTSTRAP_RESAMPLES)
    return "\n".join(out) + "\n" + sweep_note(env or {})


STOP_COLS = ["best step", "stop step", "stopped by", "converged"]


def stop_cells(r):
    """Where a run's dev minimum was, where and why it stopped, whether it converged."""
    return [str(r["best_step"]) if r.get("best_step") is not None else "–",
            str(r["stop_step"]) if r.get("stop_step") is not None else "–",
            r.get("stopped_by") or "–", compare.convergence(r)]


def runs_table(runs, converged=False):
    """Every run, a rerun right after its run: verdict and compute (and,
    converged, how it stopped)."""
    lines = [run_cells(r) + (stop_cells(r) if converged else []) for r in runs]
    out = md_table(RUN_COLS + (STOP_COLS if converged else []), lines, first_left=3)
    why = {r["row"]: (r.get("message") if r["status"] == "failed" else r.get("verdict_reason")) or "" for r in runs}
    bad = [f"- {r['row']}: {run_label(r)}: {why[r['row']]}".rstrip(": ") for r in runs if is_failed(r)]
    host = sorted({r.get("host_cpu") or "" for r in runs} - {""})
    if host:
        out += "\nHost CPU: " + "; ".join(host) + ".\n"
    prec = {}
    for r in runs:
        if r.get("precision"):
            prec.setdefault(r["precision"], []).append(r["row"])
    if prec:
        out += "\nTraining precision: " + "; ".join(f"{p} ({', '.join(rows)})" for p, rows in sorted(prec.items())) + ".\n"
    if bad:
        out += "\nFailed runs:\n" + "\n".join(bad) + "\n"
    return out


def to_markdown(runs, summaries, overall, env=None, converged=False):
    if converged:
        out = ("Rows against base (dev set, log space; best dev checkpoint; paired over matched seeds):\n\n" +
               compare_table(summaries, CONVERGED_COLS, converged_cells) + converged_note(overall))
    else:
        out = "Rows against base (dev set, log space):\n\n" + compare_table(summaries) + overall_note(overall, summaries)
    # under the converged protocol the ".final" sets are the best dev checkpoint's
    # (jobs/table3-stages.sh stage_checkpoint) and the average ends at it
    ckpts = ("best dev checkpoint and the average of the last 5 up to it" if converged
             else "final checkpoint and the average of the last 5")
    out += (f"\nHeld-out BLEU (sacreBLEU 13a, mean over the healthy seeds; {ckpts}); length ratio "
            "(hypothesis/reference tokens) and brevity penalty BP on the bootstrap's set; Δ against base (mean over the seeds) by paired bootstrap over the sentences "
            "and the seeds:\n\n")
    out += md_table(["row"] + BLEU_COLS, [[s["row"]] + bleu_cells(s) for s in summaries])
    if converged:
        out += (f"\nSeed-level test of BLEU ({compare.BLEU_SET}): the row minus base over matched seeds, "
                "pooled variance as for the dev NLL, the row's paired t interval beside:\n\n" +
                seed_bleu_table(summaries))
    out += "\nRuns (verdict and compute):\n\n" + runs_table(runs, converged)
    return out + protocol_note(runs, summaries, env, converged)


RUN_CSV = (["row", "seed", "rerun", "status", "verdict", "verdict_reason"] + [k for k, *_ in HYPER] +
           ["dev_ppl", "dev_nll", "paper_ppl", "dev_bleu", "dev_bleu_tok", "paper_bleu", "params", "params_m",
            "paper_params_m", "dev_loss", "tokens_seen", "epochs", "matrix_params", "train_flops", "wall_seconds",
            "eval_seconds", "device", "threads", "ranks", "host_cpu", "lr_rule", "peak_lr", "warmup"] +
           [f"bleu_{k}" for k in HELD_OUT] + ["message"])


CSV_DIGITS = 6  # significant digits of a float in the CSVs (see _csv)


def _csv(x):
    """A CSV cell.  Floats at CSV_DIGITS significant digits, the precision
    the table means: full precision would carry the last-place rounding of
    numpy's SIMD sums, which differ between CPUs (issue 41), so a rebuilt
    CSV could differ from the committed one on another machine.  Whole
    floats (token counts, seconds) are written whole."""
    if x is None:
        return ""
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if not math.isfinite(x):
            return ""
        if x == int(x) and abs(x) < 1e15:
            return repr(x)
        return format(x, f".{CSV_DIGITS}g")
    if isinstance(x, np.integer):
        return str(int(x))
    return str(x)


STOP_CSV = ["best_step", "stop_step", "stopped_by", "converged"]


def to_csv(runs, converged=False):
    """One line per run, every value (converged: how it stopped)."""
    cols = RUN_CSV + (STOP_CSV if converged else [])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in runs:
        _, seed, rerun = split_run(r["row"])
        vals = dict(r, seed=seed, rerun=int(rerun), verdict=r.get("verdict") or "", dev_nll=nll(r),
                    params_m=r["params"] / 1e6 if r.get("params") is not None else None, **r["hyper"])
        vals.update({f"bleu_{k}": r.get("bleu", {}).get(k, (math.nan,))[0] for k in HELD_OUT})
        vals["converged"] = compare.convergence(r)
        w.writerow([_csv(vals.get(k)) for k in cols])
    return buf.getvalue()


ROW_CSV = ["row", "n_runs", "n_used", "mean_nll", "nlls", "d_nll", "lo", "hi", "p", "p_holm", "pooled",
           "paper_ppl", "paper_d", "paper_dir", "ours_dir", "agree", "equiv", "bleu_set", "d_bleu", "bleu_lo",
           "bleu_hi", "bleu_p", "bleu_p_holm", "len_ratio", "bp"] + [f"bleu_{k}" for k in HELD_OUT]


# the converged protocol's columns: pairs and the paired t interval of the
# dev NLL; the seed-level BLEU test (pooled and paired t); the agreement at each band
PAIRED_CSV = ["pairs", "pt_lo", "pt_hi", "pt_p", "sbleu_pairs", "sbleu_d", "sbleu_lo", "sbleu_hi", "sbleu_p",
              "sbleu_p_holm", "sbleu_pt_lo", "sbleu_pt_hi", "sbleu_pt_p"] + [f"agree_{b:g}" for b in compare.BANDS]


def paired_csv_values(s):
    """The PAIRED_CSV values of a row summary ({} for base)."""
    if "paired_nll" not in s:
        return {}
    n, b = s["paired_nll"], s["paired_bleu"]
    out = {"pairs": n["n"], "pt_lo": n["paired"]["lo"], "pt_hi": n["paired"]["hi"], "pt_p": n["paired"]["p"],
           "sbleu_pairs": b["n"], "sbleu_d": b["pooled"]["diff"], "sbleu_lo": b["pooled"]["lo"],
           "sbleu_hi": b["pooled"]["hi"], "sbleu_p": b["pooled"]["p"], "sbleu_p_holm": b["pooled"]["p_holm"],
           "sbleu_pt_lo": b["paired"]["lo"], "sbleu_pt_hi": b["paired"]["hi"], "sbleu_pt_p": b["paired"]["p"]}
    out.update({f"agree_{band:g}": a for band, a in s["agree_at"].items()})
    return out


def converged_comments(overall):
    """The converged protocol's overall figures as CSV comment lines."""
    o, out = overall, []
    out.append(f"# spearman_p {_csv(o['spearman_p'])} permutations {stats.PERMUTATIONS}; "
               f"bootstrap 95% [{_csv(o['spearman_lo'])}, {_csv(o['spearman_hi'])}]")
    for name, pool in o["pools"].items():
        out.append(f"# pooled {name} var {_csv(pool['var'])} df {pool['df']} rows {pool['rows']} seeds {pool['seeds']}")
    for b, counts in o["bands"].items():
        out.append(f"# band {b:g} " + " ".join(f"{k.replace(' ', '')}={v}" for k, v in counts.items()))
    return "".join(line + "\n" for line in out)


def to_rows_csv(summaries, overall, converged=False):
    """One line per row: the statistics; the rank correlation in a comment
    line (converged: the paired columns and comment lines of the overall
    figures after it)."""
    cols = ROW_CSV + (PAIRED_CSV if converged else [])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for s in summaries:
        vals = dict(s, n_runs=len(s["runs"]), n_used=s["n"], nlls=" ".join(f"{v:.6f}" for v in s["nlls"]),
                    pooled=int(s["pooled"]), **paired_csv_values(s))
        vals.update({f"bleu_{k}": mean_bleu(s["used"], k) for k in HELD_OUT})
        w.writerow([_csv(vals.get(k)) for k in cols])
    buf.write(f"# spearman {_csv(overall['spearman'])} over {overall['n_ranked']} rows\n")
    if converged:
        buf.write(converged_comments(overall))
    return buf.getvalue()


def _tex_escape(s):
    s = s.replace("≈", "$\\approx$").replace("✗", "$\\times$").replace("†", "$^\\dagger$").replace("<", "$<$")
    return re.sub(r"([&%#_{}])", r"\\\1", s).replace("–", "--").replace("Δ", "$\\Delta$")


def to_latex(summaries):
    """The comparison table (hyperparameters, dev NLL, Δ with interval,
    directions, test2016 BLEU and its Δ)."""
    shown = shown_hyper([s["runs"][0] for s in summaries])
    head = [h for _, _, h, _ in HYPER] + ["NLL", r"$\Delta$ NLL [95\% CI]", "paper", "ours", "agree",
                                          "BLEU", r"$\Delta$ BLEU [95\% CI]", "$p$"]
    lines = ["% Table 3 (Vaswani et al. 2017) reproduced; generated by analysis/table3.py",
             "% needs \\usepackage{booktabs}",
             "\\begin{tabular}{l" + "c" * len(HYPER) + "|rrccc|rrr}", "\\toprule",
             " & " + " & ".join(head) + " \\\\", "\\midrule"]
    prev = None
    for s, h in zip(summaries, shown):
        g = row_group(s["row"])
        if prev is not None and g != prev:
            lines.append("\\midrule")
        prev = g
        c = compare_cells(s)
        b = bleu_cells(s)
        bleu = b[2] if b[2] != "–" else b[1]
        cells = [s["row"] + (" ✗" if s["failed"] else "")] + [_fmt_hyper(k, h[k]) for k, *_ in HYPER]
        cells += [c[1], c[4], c[8], c[9], c[10], bleu, b[5], b[7]]
        lines.append(" & ".join(_tex_escape(x) for x in cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", ""]
    return "\n".join(lines)


def curve_panels(runs):
    """Panel title -> runs: base, then each group (A)..(E), big, others."""
    panels = {}
    for r in runs:
        g = row_group(split_run(r["row"])[0])
        panels.setdefault(g, []).append(r)
    return panels


def _draw_run(ax, r, color, label):
    c = r.get("curves") or {}
    x, y = c.get("dev_step", ()), c.get("dev_nll", ())
    if len(x) == 0 or len(x) != len(y):
        return False
    style = "--" if is_failed(r) else "-"
    ax.plot(x, np.where(np.isfinite(y), y, np.nan), style, color=color, label=label, marker="o", markersize=2)
    return True


def plot_curves(runs):
    """Per-row dev NLL curves, one panel per group (base's healthy runs in
    grey in every panel), failed runs dashed. Returns the figure."""
    paper_style()
    plt = pyplot()
    panels = curve_panels(runs)
    ncols = min(3, len(panels))
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.6 * ncols + 0.6, 2.2 * nrows + 0.4), sharex=True,
                             sharey=True, squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    base = [r for r in panels.get("base", []) if not is_failed(r)]
    for ax, (g, members) in zip(axes.flat, panels.items()):
        drawn = False
        if g != "base":
            for i, r in enumerate(base):
                drawn |= _draw_run(ax, r, "0.7", "base" if i == 0 else None)
        rows = list(dict.fromkeys(split_run(r["row"])[0] for r in members))
        labelled = set()
        for r in members:  # a row's seeds share its colour; a failed run has its own label
            row = split_run(r["row"])[0]
            key = row if not is_failed(r) else r["row"] + " failed"
            label = None if key in labelled else row if not is_failed(r) else f"{r['row']} ({run_label(r)})"
            labelled.add(key)
            drawn |= _draw_run(ax, r, colors[rows.index(row) % len(colors)], label)
        ax.set_title(f"({g})" if len(g) == 1 else g)  # the paper's groups (A)..(E)
        if drawn:
            ax.legend(frameon=False, fontsize=6)
        else:
            ax.text(0.5, 0.5, "no curves stored", transform=ax.transAxes, ha="center", va="center", color="0.5")
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("optimizer step")
    for ax in axes[:, 0]:
        ax.set_ylabel("dev NLL (nats)")
    fig.tight_layout()
    return fig


def delta_curves(summaries):
    """{row: (steps, mean Δ dev NLL against base, pairs)} of every row with
    a matched pair that has curves (compare.delta_curve)."""
    base = next((s for s in summaries if s["row"] == "base"), None)
    if base is None:
        return {}
    curves = {s["row"]: compare.delta_curve(s, base) for s in summaries if s is not base}
    return {row: c for row, c in curves.items() if len(c[0])}


def to_delta_csv(curves):
    """One line per row and dev evaluation: the Δ over training."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["row", "step", "pairs", "d_nll"])
    for row, (steps, d, pairs) in curves.items():
        for x, y in zip(steps, d):
            w.writerow([row, _csv(int(x)), pairs, _csv(y)])
    return buf.getvalue()


def plot_delta(curves, band=PAPER_EQUIV_NATS):
    """Δ dev NLL against base over training, one panel per group, ±band
    shaded (the paper's ≈). Returns the figure."""
    paper_style()
    plt = pyplot()
    panels = {}
    for row in curves:
        panels.setdefault(row_group(row), []).append(row)
    ncols = min(3, max(len(panels), 1))
    nrows = max((len(panels) + ncols - 1) // ncols, 1)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.6 * ncols + 0.6, 2.2 * nrows + 0.4), sharex=True,
                             sharey=True, squeeze=False)
    for ax, (g, rows) in zip(axes.flat, panels.items()):
        ax.axhspan(-band, band, color="0.9", lw=0)
        ax.axhline(0, color="0.6", lw=0.5)
        for row in rows:
            steps, d, pairs = curves[row]
            ax.plot(steps, d, "-", marker="o", markersize=2, label=f"{row} ({pairs} seed{'' if pairs == 1 else 's'})")
        ax.set_title(f"({g})" if len(g) == 1 else g)
        ax.legend(frameon=False, fontsize=6)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("optimizer step")
    for ax in axes[:, 0]:
        ax.set_ylabel("Δ dev NLL vs base (nats)")
    fig.tight_layout()
    return fig


def build_parser():
    p = ArgumentParser(
        prog="table3.py",
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("sweep", metavar="SWEEP_DIR", help="sweep directory holding results/<row>.h5")
    p.add_argument("--configs", metavar="DIR",
                   help="row configs (*.cfg) listing every row (default: SWEEP_DIR/configs, else "
                        "input/table3 of this checkout, if present)")
    p.add_argument("--out", metavar="PREFIX", help="output prefix (default: SWEEP_DIR/table3)")
    p.add_argument("--no-plot", action="store_true", help="write the tables only")
    p.add_argument("--protocol", choices=("8-epoch", "converged"), default="8-epoch",
                   help="the statistics: 8-epoch (default: Welch intervals over seeds, the committed "
                        "8-epoch table) or converged (docs/results-multi30k/converged/protocol.md: paired "
                        "differences over matched seeds with a pooled variance, seed-level BLEU test, Holm "
                        "agreement at bands 0.03/0.04/0.05, ρ's permutation p and bootstrap interval, how "
                        "each run stopped, and PREFIX-delta.{csv,png,pdf}: Δ dev NLL over training)")
    return p


def outputs(a, rows, summaries, overall, prefix):
    """({path: text}, [(figure, prefix)]) of every output, nothing written."""
    converged = a.protocol == "converged"
    texts = {prefix + ".md": to_markdown(rows, summaries, overall, read_sweep_env(a.sweep), converged),
             prefix + ".csv": to_csv(rows, converged),
             prefix + "-rows.csv": to_rows_csv(summaries, overall, converged),
             prefix + ".tex": to_latex(summaries)}
    figs, deltas = [], {}
    if converged:
        deltas = delta_curves(summaries)
        texts[prefix + "-delta.csv"] = to_delta_csv(deltas)
    if not a.no_plot:
        if deltas:
            figs.append((plot_delta(deltas), prefix + "-delta"))
        figs.append((plot_curves(rows), prefix))
    return texts, figs


def known_outputs(a, prefix):
    """The outputs that outputs() makes for any rows: their names can be
    refused before the table is computed (the delta figure, made only where
    there are curves, is checked with the rest before the first write)."""
    paths = [prefix + e for e in (".md", ".csv", "-rows.csv", ".tex")]
    if a.protocol == "converged":
        paths.append(prefix + "-delta.csv")
    return paths + ([] if a.no_plot else figure_paths(prefix))


# what a sweep directory holds, one of them at least (docs/jobs.md)
SWEEP_MARKS = ("results", "configs", "rows.txt", "sweep.env")


def main(argv):
    a = build_parser().parse_args(argv)
    if not os.path.isdir(a.sweep):
        raise AnalysisError(a.sweep, "no such sweep directory")
    # a sweep has results/ (its rows' result files) and configs/, rows.txt
    # and sweep.env (frozen at its first start); a folder with none of them
    # (an empty one, a sweep's parent) would get a table of every row
    # pending from the checkout's configs, written into it
    if not any(os.path.exists(os.path.join(a.sweep, m)) for m in SWEEP_MARKS):
        raise AnalysisError(a.sweep, "not a sweep directory (no results/, configs/, rows.txt or sweep.env; "
                                     "jobs/submit-table3.sh or jobs/run-local.sh table3 makes one)")
    if a.configs is not None and not os.path.isdir(a.configs):
        raise AnalysisError(a.configs, "no such config directory")
    configs = a.configs
    if configs is None:  # the sweep's own copy of the configs, else this checkout's
        for d in (os.path.join(a.sweep, "configs"), DEFAULT_CONFIGS):
            if os.path.isdir(d):
                configs = d
                break
    rows = load_rows(a.sweep, configs)
    if not rows:
        raise AnalysisError(a.sweep, "no results/*.h5 and no row configs: nothing to tabulate")
    prefix = a.out or os.path.join(a.sweep, "table3")
    converged = a.protocol == "converged"
    check_outputs(known_outputs(a, prefix))   # before the seconds of scoring the runs
    summaries, overall = summarize(rows, logical_sort_key, converged)
    texts, figs = outputs(a, rows, summaries, overall, prefix)
    # every table and figure is made, and every output name checked, before
    # the first is written: a bad input found late (a run without curves),
    # or a last output that is a symbolic link, left a mixed old/new set
    check_outputs(list(texts) + [p for _, fig_prefix in figs for p in figure_paths(fig_prefix)])
    outs = []
    for path, text in texts.items():
        write_atomic(path, text)
        outs.append(path)
    for fig, fig_prefix in figs:
        outs += savefig(fig, fig_prefix)
    for p in outs:
        print(p)
    done = sum(r["status"] == "done" for r in rows)
    bad = sum(r.get("verdict") in ("diverged", "stuck", "unstable") for r in rows)
    print(f"table3: {len(rows)} rows ({done} done, {sum(r['status'] == 'pending' for r in rows)} pending, "
          f"{sum(r['status'] == 'failed' for r in rows)} failed; {bad} with a failure verdict)")
    return 0


if __name__ == "__main__":
    main_wrapper(main)
