#!/usr/bin/env python3
"""Table 3 of "Attention Is All You Need" from a sweep directory.

Reads every SWEEP_DIR/results/<row>.h5 (docs/results.md) and the row configs
(input/table3/*.cfg by default), so rows whose job has not finished are listed
as pending rather than dropped; a pending row shows the settings it will run
with: its config with the sweep's overrides (SWEEP_DIR/sweep.env: STEPS,
SHRINK, EXTRA, ...) applied as jobs/table3-stages.sh applies them.  Writes PREFIX.md, PREFIX.csv, PREFIX.tex and
a plot PREFIX.{png,pdf} (default PREFIX: SWEEP_DIR/table3).

As in the paper, the Markdown and LaTeX tables show a row's hyperparameters
only where they differ from the base row (the base row shows all of them);
the CSV has every value.  Beside our dev PPL, BLEU and parameter count are
the paper's numbers and the difference (ours - paper).  BLEU comes twice:
sacreBLEU (13a), the standard score to report, and tokenised BLEU (Moses
tokens, multi-bleu.perl: analysis/bleu.py), the paper's kind, which alone is
compared with the paper's BLEU.

Example:
  table3.py sweeps/2026-11-23 --configs input/table3
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

from common import AnalysisError, pyplot, fmt_num, main_wrapper, paper_style, savefig, write_atomic
from row_result import cfg_float, parse_config_text, read_result

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


def row_sort_key(name):
    """base first, then (A)..(E) in order with numeric suffixes, big last, others alphabetically."""
    if name == "base":
        return (0, "", 0, name)
    m = re.fullmatch(r"base-seed(\d+)", name)
    if m:  # SEEDS: base with other seeds, right after base
        return (0, "", int(m.group(1)), name)
    if name == "big":
        return (3, "", 0, name)
    m = re.fullmatch(r"([A-Za-z]+)(\d*)(.*)", name)
    if m:
        return (1, m.group(1).upper(), int(m.group(2) or 0), m.group(3))
    return (2, name, 0, name)


def row_group(name):
    if name in ("base", "big"):
        return name
    if re.fullmatch(r"base-seed\d+", name):
        return "base"
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
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise AnalysisError(p, e.strerror or "cannot read") from None
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


def sweep_overrides(env, cfg, origin="config"):
    """The key=value overrides a sweep element gives a row with config cfg:
    table3_overrides of jobs/table3-stages.sh, in the same order (later wins)."""
    ovr = []
    if env.get("STEPS"):
        ovr.append(("train_steps", env["STEPS"]))
    ovr += scaled_schedule(env, cfg)
    if env.get("MAX_TOKENS"):
        ovr.append(("max_tokens", env["MAX_TOKENS"]))
    if env.get("UPDATE_FREQ"):
        ovr.append(("update_freq", env["UPDATE_FREQ"]))
    if env.get("MAX_TOKENS") or env.get("UPDATE_FREQ") or env.get("BATCH_TOKENS"):
        ovr.append(("batch_tokens", env.get("BATCH_TOKENS") or "0"))
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


def load_rows(sweep, configs_dir):
    """All rows: dict name -> record with hyper (all keys), numbers and status.
    A row without a result gets its config with the sweep's overrides."""
    rows = {}
    env = read_sweep_env(sweep)
    cfg_files = sorted(glob.glob(os.path.join(configs_dir, "*.cfg"))) if configs_dir else []
    for p in cfg_files:
        try:
            with open(p, encoding="utf-8") as f:
                cfg = parse_config_text(f.read(), p)
        except OSError as e:
            raise AnalysisError(p, e.strerror or "cannot read") from None
        cfg.update(sweep_overrides(env, cfg, p))
        name = cfg.get("row") or os.path.splitext(os.path.basename(p))[0]
        rows[name] = {
            "row": name, "status": "pending", "cfg": cfg, "source": p,
            "params": None, "train_steps": None, "dev_ppl": math.nan, "dev_bleu": math.nan, "dev_bleu_tok": math.nan,
            "dev_loss": math.nan, "wall_seconds": math.nan,
            "paper_ppl": cfg_float(cfg, "paper_ppl"), "paper_bleu": cfg_float(cfg, "paper_bleu"),
            "paper_params_m": cfg_float(cfg, "paper_params_m"), "message": "",
        }
    planned = {k: r["cfg"].get("train_steps") for k, r in rows.items()}
    res_dir = os.path.join(sweep, "results")
    for p in sorted(glob.glob(os.path.join(res_dir, "*.h5"))):
        r = read_result(p)
        r["source"] = p
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


def _diff(a, b):
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return math.nan
    return a - b


def numbers(r):
    pm = r["params"] / 1e6 if r.get("params") is not None else math.nan
    return {
        "ppl": r["dev_ppl"], "paper_ppl": r["paper_ppl"], "d_ppl": _diff(r["dev_ppl"], r["paper_ppl"]),
        # the paper's BLEU is tokenised BLEU: compare ours of the same kind
        "bleu": r["dev_bleu"], "bleu_tok": r["dev_bleu_tok"], "paper_bleu": r["paper_bleu"],
        "d_bleu": _diff(r["dev_bleu_tok"], r["paper_bleu"]),
        "params_m": pm, "paper_params_m": r["paper_params_m"], "d_params_m": _diff(pm, r["paper_params_m"]),
    }


def _signed(x, digits):
    return "–" if not math.isfinite(x) else f"{x:+.{digits}f}"


NUM_COLS = [  # (numbers key, Markdown header, digits, signed)
    ("ppl", "PPL (dev)", 2, False), ("paper_ppl", "paper", 2, False), ("d_ppl", "Δ", 2, True),
    ("bleu", "sacreBLEU (dev)", 1, False), ("bleu_tok", "tok. BLEU (dev)", 1, False),
    ("paper_bleu", "paper", 1, False), ("d_bleu", "Δ tok.", 1, True),
    ("params_m", "params ×10⁶", 1, False), ("paper_params_m", "paper", 0, False), ("d_params_m", "Δ", 1, True),
]


def _num_cells(r):
    n = numbers(r)
    cells = []
    for key, _, dg, signed in NUM_COLS:
        if r["status"] != "done" and not key.startswith("paper"):
            cells.append(r["status"] if key in ("ppl", "bleu") else "")
            continue
        v = n[key]
        if key in ("params_m", "d_params_m") and math.isfinite(v) and 0 < abs(v) < 1:
            # scaled-down sweeps: tiny models keep 3 significant digits
            cells.append(f"{v:+.3g}" if signed else f"{v:.3g}")
        else:
            cells.append(_signed(v, dg) if signed else fmt_num(v, dg))
    return cells


def seed_spread(rows):
    """The base row over its seeds (SEEDS: rows base, base-seed2, ...): a note
    with mean, sample standard deviation and range of dev PPL and BLEU, the
    spread that a row's difference from base must exceed to mean anything."""
    runs = [r for r in rows if row_group(r["row"]) == "base" and r["status"] == "done"]
    if len(runs) < 2:
        return ""
    parts = []
    for key, name, dg in (("dev_ppl", "dev PPL", 2), ("dev_bleu_tok", "tok. BLEU", 1), ("dev_bleu", "sacreBLEU", 1)):
        v = np.array([r[key] for r in runs], dtype=float)
        v = v[np.isfinite(v)]
        if len(v) >= 2:
            parts.append(f"{name} {v.mean():.{dg}f} ± {v.std(ddof=1):.{dg}f} "
                         f"(range {v.min():.{dg}f}–{v.max():.{dg}f})")
    if not parts:
        return ""
    return (f"\nSeed spread: base over {len(runs)} seeds ({', '.join(r['row'] for r in runs)}): "
            + "; ".join(parts) + " (mean ± sample s.d.).\n")


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


def to_markdown(rows, env=None):
    shown = shown_hyper(rows)
    head = ["row"] + [h for _, h, _, _ in HYPER] + [h for _, h, _, _ in NUM_COLS]
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join([":--"] + ["--:"] * (len(head) - 1)) + "|"]
    for r, s in zip(rows, shown):
        cells = [r["row"]] + [_fmt_hyper(k, s[k]) for k, *_ in HYPER] + _num_cells(r)
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {r['row']}: {r['status']}: {r['message']}" for r in rows if r["status"] == "failed" and r["message"]]
    out = "\n".join(lines) + "\n"
    out += ("\nDev PPL per wordpiece and dev BLEU (beam search, no checkpoint averaging); the paper's "
            "numbers are on newstest2013 (Table 3 of Vaswani et al. 2017). sacreBLEU: 13a, mixed case, the "
            "standard score to report; tok. BLEU: Moses-tokenised, compounds split, multi-bleu.perl "
            "(analysis/bleu.py), the paper's kind of BLEU. Δ = ours − paper, for BLEU tok. BLEU − paper; "
            "empty hyperparameter cells equal the base row.\n")
    out += sweep_note(env or {}) + seed_spread(rows)
    if notes:
        out += "\nFailed rows:\n" + "\n".join(notes) + "\n"
    return out


def to_csv(rows):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["row", "status"] + [k for k, *_ in HYPER] +
               ["dev_ppl", "paper_ppl", "diff_ppl", "dev_bleu", "dev_bleu_tok", "paper_bleu", "diff_bleu",
                "params", "params_m", "paper_params_m", "diff_params_m", "dev_loss", "wall_seconds", "message"])

    def c(x):
        if x is None:
            return ""
        if isinstance(x, float):
            return "" if not math.isfinite(x) else repr(x)
        return str(x)

    for r in rows:
        n = numbers(r)
        w.writerow([r["row"], r["status"]] + [c(r["hyper"][k]) for k, *_ in HYPER] +
                   [c(n["ppl"]), c(n["paper_ppl"]), c(n["d_ppl"]), c(n["bleu"]), c(n["bleu_tok"]), c(n["paper_bleu"]),
                    c(n["d_bleu"]), c(r.get("params")), c(n["params_m"]), c(n["paper_params_m"]),
                    c(n["d_params_m"]), c(r.get("dev_loss")), c(r.get("wall_seconds")), r.get("message", "")])
    return buf.getvalue()


def _tex_escape(s):
    return re.sub(r"([&%$#_{}])", r"\\\1", s).replace("–", "--")


def to_latex(rows):
    shown = shown_hyper(rows)
    ncols = 1 + len(HYPER) + len(NUM_COLS)
    lines = [
        "% Table 3 (Vaswani et al. 2017) reproduced; generated by analysis/table3.py",
        "% needs \\usepackage{booktabs}",
        "\\begin{tabular}{l" + "c" * len(HYPER) + "|rrr|rrrr|rrr}",
        "\\toprule",
        " & " + " & ".join(h for _, _, h, _ in HYPER) +
        " & \\multicolumn{3}{c|}{PPL (dev)} & \\multicolumn{4}{c|}{BLEU (dev)} & \\multicolumn{3}{c}{params $\\times 10^6$} \\\\",
        # sacreBLEU 13a is the standard score; Delta BLEU compares the
        # tokenised BLEU (multi-bleu.perl) with the paper's, which is of that kind
        " & " * (len(HYPER)) + " & ours & paper & $\\Delta$" +
        " & sacre & tok. & paper & $\\Delta$ tok." + " & ours & paper & $\\Delta$" + " \\\\",
        "\\midrule",
    ]
    prev = None
    for r, s in zip(rows, shown):
        g = row_group(r["row"])
        if prev is not None and g != prev:
            lines.append("\\midrule")
        label = f"({g})" if g not in ("base", "big") and g != prev else ("" if g == prev else g)
        if g not in ("base", "big"):
            label = f"({g}) {r['row']}" if g != prev else r["row"]
        prev = g
        cells = [_tex_escape(label)] + [_tex_escape(_fmt_hyper(k, s[k])) for k, *_ in HYPER]
        cells += [_tex_escape(x) if x else "" for x in _num_cells(r)]
        cells = [c.replace("pending", "\\emph{pending}").replace("failed", "\\emph{failed}") for c in cells]
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", ""]
    assert all(l.count("&") in (0, ncols - 1) for l in lines if l.endswith("\\\\") and "multicolumn" not in l)
    return "\n".join(lines)


def plot(rows, prefix):
    """Dev PPL and BLEU per row: ours (bars) vs the paper (markers)."""
    paper_style()
    plt = pyplot()
    names = [r["row"] for r in rows]
    x = np.arange(len(rows))
    fig, axes = plt.subplots(2, 1, figsize=(max(5.0, 0.34 * len(rows) + 1.5), 4.6), sharex=True)
    for ax, key, pkey, ylabel in ((axes[0], "dev_ppl", "paper_ppl", "dev PPL"),
                                  (axes[1], "dev_bleu_tok", "paper_bleu", "dev BLEU\n(tokenised)")):
        ours = np.array([r[key] if r["status"] == "done" else np.nan for r in rows], dtype=float)
        paper = np.array([r[pkey] for r in rows], dtype=float)
        ax.bar(x, np.nan_to_num(ours, nan=0.0), width=0.6, color="#3b6ea5", label="ours", zorder=2)
        ax.plot(x, paper, linestyle="none", marker="D", markersize=4, color="#c44e52",
                label="paper (Table 3)", zorder=3)
        ax.set_ylabel(ylabel)
        ax.grid(axis="x", visible=False)
        vals = np.concatenate([ours[np.isfinite(ours)], paper[np.isfinite(paper)]])
        top = vals.max() if len(vals) else 1.0
        ax.set_ylim(0, top * 1.15)
        for i, r in enumerate(rows):
            if r["status"] == "done" and not math.isfinite(ours[i]):
                ax.text(i, top * 0.03, "n/a", rotation=90, ha="center", va="bottom", fontsize=7, color="0.35")
        # separators between the paper's row groups
        for i in range(1, len(rows)):
            if row_group(names[i]) != row_group(names[i - 1]):
                ax.axvline(i - 0.5, color="0.8", linewidth=0.6, zorder=1)
    # the paper's group labels (A)..(E) above the groups
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or row_group(names[i]) != row_group(names[start]):
            g = row_group(names[start])
            axes[0].text((start + i - 1) / 2, 1.02, g if g in ("base", "big") else f"({g})",
                         transform=axes[0].get_xaxis_transform(), ha="center", va="bottom", fontsize=8)
            start = i
    h, l = axes[0].get_legend_handles_labels()
    order = [l.index("ours"), l.index("paper (Table 3)")]
    axes[0].legend([h[k] for k in order], [l[k] for k in order], loc="lower left", frameon=False, ncol=2,
                   bbox_to_anchor=(0.0, 1.09))
    axes[1].set_xticks(x)
    rot = len(rows) > 12
    labels = [n if r["status"] == "done" else f"{n} ({r['status']})" if rot else f"{n}\n{r['status']}"
              for n, r in zip(names, rows)]
    axes[1].set_xticklabels(labels, rotation=45 if rot else 0, ha="right" if rot else "center",
                            rotation_mode="anchor" if rot else "default")
    for t, r in zip(axes[1].get_xticklabels(), rows):
        if r["status"] != "done":  # rows without our numbers: grey, italic
            t.set_color("0.45")
            t.set_fontstyle("italic")
    axes[1].set_xlim(-0.6, len(rows) - 0.4)
    fig.tight_layout()
    return savefig(fig, prefix)


def build_parser():
    p = argparse.ArgumentParser(
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
    return p


def main(argv):
    a = build_parser().parse_args(argv)
    if not os.path.isdir(a.sweep):
        raise AnalysisError(a.sweep, "no such sweep directory")
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
    write_atomic(prefix + ".md", to_markdown(rows, read_sweep_env(a.sweep)))
    write_atomic(prefix + ".csv", to_csv(rows))
    write_atomic(prefix + ".tex", to_latex(rows))
    outs = [prefix + e for e in (".md", ".csv", ".tex")]
    if not a.no_plot:
        outs += plot(rows, prefix)
    for p in outs:
        print(p)
    done = sum(r["status"] == "done" for r in rows)
    print(f"table3: {len(rows)} rows ({done} done, "
          f"{sum(r['status'] == 'pending' for r in rows)} pending, {sum(r['status'] == 'failed' for r in rows)} failed)")
    return 0


if __name__ == "__main__":
    main_wrapper(main)
