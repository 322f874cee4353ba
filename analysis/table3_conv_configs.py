#!/usr/bin/env python3
"""The converged Table 3's sweep configs, from the pilot's choice.

Writes OUT/<ROW>.cfg (default OUT: input/table3-m30k-conv) for base′ and the
rows of docs/results-multi30k/converged/protocol.md, "Sweep": the 13 rows of
the 8-epoch table, scaled as there (each row's change against base′ is read
from input/table3-m30k/<ROW>.cfg), and A2, A3, B2, C2; OUT/seeds.txt (3
matched seeds a row: jobs/table3-stages.sh adds ROW-seed2 and ROW-seed3 with
seed = 2 and 3, so seed s of every row is base's seed s); OUT/order.txt (the
protocol's order of the runs); and the learning-rate check's configs (base,
C1, C3, C4, C6, C7, seed 1, at half and twice the peak) in
OUT/lr-check/half/ and OUT/lr-check/twice/, one sweep each. Every row has
the pilot's stopping rule and the chosen P_drop, peak rate and step cap; the
D rows vary P_drop around the chosen value (the protocol's "D rows").

The setting comes from the pilot (--pilot SWEEP: analysis/table3_conv_pilot.py's
choice; refused while nothing is chosen) or is given (--dropout, --peak, --cap).

Examples:
  table3_conv_configs.py --pilot docs/results-multi30k/converged/pilot
  table3_conv_configs.py --dropout 0.1 --peak 2e-3 --cap 35400 --out /tmp/conv
"""

import argparse
import math
import os

from common import ArgumentParser, AnalysisError, check_outputs, main_wrapper, write_atomic
from row_result import parse_config_text
from table3_conv_pilot import EVAL_STEPS, d_rows, fmt_drop, fmt_rate, pilot_state, setting_name

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROTOCOL = "docs/results-multi30k/converged/protocol.md"
SEEDS = 3
# the 8-epoch table's rows (their change read from input/table3-m30k) and
# the rows it left out, scaled as the protocol states
EIGHT_EPOCH_ROWS = ("A1", "A4", "B1", "C1", "C3", "C4", "C6", "C7", "D1", "D2", "D3", "D4", "E")
ADDED = {"A2": {"n_heads": "4", "d_k": "32", "d_v": "32"},
         "A3": {"n_heads": "16", "d_k": "8", "d_v": "8"},
         "B2": {"d_k": "8"},
         "C2": {"n_layers": "2"}}
DESCRIBE = {
    "base": "base′: N=3, d_model 128, d_ff 512, h=8, d_k=d_v=16 (the paper's base at 1/4 width, 1/2 depth)",
    "A1": "one head of d_k = d_v = d_model (paper: h=1, d_k=512)",
    "A2": "4 heads, d_k = d_v = 32 (paper: h=4, d_k=128): between A1 and base",
    "A3": "16 heads, d_k = d_v = 8 (paper: h=16, d_k=32)",
    "A4": "32 heads, d_k = d_v = 4 (paper: h=32, d_k=16; the same h x d_k = d_model)",
    "B1": "d_k = 4, a quarter of base's (paper: 16 of 64)",
    "B2": "d_k = 8, half of base's (paper: 32 of 64)",
    "C1": "N=1, a third of base's depth (paper: 2 of 6)",
    "C2": "N=2, two thirds of base's depth (paper: 4 of 6)",
    "C3": "N=4, 4/3 of base's depth (paper: 8 of 6)",
    "C4": "d_model 64, d_k = d_v = 8: half of base's width (paper: 256, d_k 32)",
    "C6": "d_ff 256, half of base's (paper: 1024 of 2048)",
    "C7": "d_ff 1024, twice base's (paper: 4096)",
    "D3": "eps_ls 0 (paper: 0.0)",
    "D4": "eps_ls 0.2 (paper: 0.2)",
    "E": "learned positional embeddings (paper: E)",
}
LR_CHECK_ROWS = ("base", "C1", "C3", "C4", "C6", "C7")
LR_CHECK = (("half", 0.5), ("twice", 2.0))
# the keys a row may change (architecture and regularisation); every other
# key of an 8-epoch row must equal its base's, or the row changes more
MODEL_KEYS = ("n_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v", "positional", "vocab_size", "max_len",
              "ln_eps", "dropout", "label_smoothing")
OWN_KEYS = ("row", "seed", "paper_ppl", "paper_bleu", "paper_params_m")  # a row's own, not a change
# a config's sections: (comment, keys); values not from the rows are the
# pilot configs' (input/table3-m30k-conv/pilot/*.cfg)
FIXED = {"warmup": "800", "adam_beta1": "0.9", "adam_beta2": "0.98", "adam_eps": "1e-9",
         "data": "data/multi30k-v2000.h5   # VOCAB=2000 MAX_LEN=128 input/prepare.sh multi30k \"\" data/multi30k-v2000.h5",
         "max_tokens": "2000", "batch_tokens": "0", "update_freq": "1", "log_steps": "100",
         "eval_steps": str(EVAL_STEPS), "patience": "8", "patience_delta": "0.001", "threads": "1",
         "ckpt_steps": "300", "ckpt_minutes": "30", "keep_ckpts": "5", "keep_best": "1",
         "beam": "4", "len_alpha": "0.6", "max_len_a": "50"}
SECTIONS = (
    ("architecture: base′ (input/table3-m30k/base.cfg) with the row's change, scaled as the 8-epoch\n"
     "# table scales it (input/table3-m30k/<row>.cfg), or as the protocol states (A2, A3, B2, C2)",
     ("n_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v", "positional", "vocab_size", "max_len", "ln_eps")),
    ("regularisation and optimiser (section 5.3, 5.4); seed: ROW-seedS get seed = S (seeds.txt)",
     ("dropout", "label_smoothing", "lr_peak", "warmup", "adam_beta1", "adam_beta2", "adam_eps", "seed")),
    ("training: 2000-token batches on one rank (about 325 updates an epoch); a dev evaluation every\n"
     "# 300 updates; stop after 8 evaluations without lowering the best dev NLL by more than 0.001\n"
     "# nats; train_steps is the sweep's cap, not a budget: a run that reaches it has not converged",
     ("data", "max_tokens", "batch_tokens", "update_freq", "train_steps", "log_steps", "eval_steps", "patience",
      "patience_delta", "threads")),
    ("checkpoints: at every evaluation; the best kept and reported, the last 5 up to it averaged (6.1)",
     ("ckpt_steps", "ckpt_minutes", "keep_ckpts", "keep_best")),
    ("decoding (section 6.1)", ("beam", "len_alpha", "max_len_a")),
)


def read_cfg(path):
    try:
        with open(path, encoding="utf-8") as f:
            return parse_config_text(f.read(), path)
    except OSError as e:
        raise AnalysisError(path, e.strerror or str(e)) from None


def eight_epoch_change(row, source):
    """A row's change against base′ as the 8-epoch table scaled it: the
    model keys where input/table3-m30k/<row>.cfg differs from its base.cfg
    (refused where any other key differs: the row would change more)."""
    base, cfg = read_cfg(os.path.join(source, "base.cfg")), read_cfg(os.path.join(source, f"{row}.cfg"))
    other = sorted(k for k in (set(base) | set(cfg)) - set(MODEL_KEYS) - set(OWN_KEYS) if base.get(k) != cfg.get(k))
    if other:
        raise AnalysisError(os.path.join(source, f"{row}.cfg"), f"differs from base.cfg in {', '.join(other)}, "
                            "not only in the row's architecture or regularisation")
    change = {k: cfg[k] for k in MODEL_KEYS if cfg.get(k) != base.get(k)}
    if not change:
        raise AnalysisError(os.path.join(source, f"{row}.cfg"), "no change against base.cfg")
    return change


def row_changes(source, dropout):
    """{row: {key: value}}: each row's change against base′ (base: none).
    D1 and D2 take the protocol's dropout for base′'s P_drop."""
    changes = {"base": {}}
    for row in EIGHT_EPOCH_ROWS:
        changes[row] = eight_epoch_change(row, source)
    for row, p in zip(("D1", "D2"), d_rows(dropout)):
        if set(changes[row]) != {"dropout"}:
            raise AnalysisError(os.path.join(source, f"{row}.cfg"), "a D row should change dropout only")
        changes[row] = {"dropout": fmt_drop(p)}
    changes.update(ADDED)
    return changes


def base_config(source, dropout, peak, cap):
    """base′'s keys: the 8-epoch base's architecture and label smoothing,
    the pilot's schedule and stopping rule, the chosen P_drop, peak and cap."""
    base8 = read_cfg(os.path.join(source, "base.cfg"))
    wanted = SECTIONS[0][1] + ("label_smoothing",)
    missing = [k for k in wanted if k not in base8]
    if missing:
        raise AnalysisError(os.path.join(source, "base.cfg"), f"no {', '.join(missing)}")
    keys = {k: base8[k] for k in wanted}
    keys.update(FIXED, dropout=fmt_drop(dropout), lr_peak=fmt_rate(peak), seed="1", train_steps=str(cap))
    return keys


def describe(row, dropout):
    if row not in ("D1", "D2"):
        return DESCRIBE[row]
    p = d_rows(dropout)[row == "D2"]
    if row == "D1":
        return f"P_drop {fmt_drop(p)}: no dropout (paper: 0.0)"
    return f"P_drop {fmt_drop(p)}, base′'s {fmt_drop(dropout)} + {p - dropout:.1f} (paper: 0.2, base's 0.1 + 0.1)"


def config_text(row, keys, paper, header):
    """A config file: the header comment, the row, the sections, the paper's numbers."""
    lines = [f"# {h}" if h else "#" for h in header] + [f"row = {row}", ""]
    for comment, section in SECTIONS:
        lines += [f"# {comment}"] + [f"{k} = {keys[k]}" for k in section] + [""]
    lines += [f"# the paper's Table 3 row {row} (dev newstest2013, full size; 0 = not given)",
              f"paper_ppl = {paper.get('paper_ppl', '0')}", f"paper_bleu = {paper.get('paper_bleu', '0')}"]
    return "\n".join(lines) + "\n"


def header(row, desc, setting, why):
    return [f"Converged Table 3 on Multi30k, row {row}: {desc}.",
            f"Protocol: {PROTOCOL} (\"Sweep\"): base′'s schedule and",
            "stopping rule at the pilot's choice, and the row's own change against base′ only.",
            f"Setting: {setting} ({why}).",
            "Written by analysis/table3_conv_configs.py: regenerate it, do not edit it."]


def sweep_configs(a):
    """{relative path: text} of every file the generator writes."""
    changes = row_changes(a.source, a.dropout)
    base = base_config(a.source, a.dropout, a.peak, a.cap)
    setting = f"{setting_name((a.dropout, a.peak))}, step cap {a.cap}"
    files = {}
    for row, change in changes.items():
        keys = dict(base, **change)
        paper = read_cfg(os.path.join(a.paper, f"{row}.cfg"))
        files[f"{row}.cfg"] = config_text(row, keys, paper, header(row, describe(row, a.dropout), setting, a.why))
        if row not in LR_CHECK_ROWS:
            continue
        for name, factor in LR_CHECK:
            rate = fmt_rate(a.peak * factor)
            h = header(row, describe(row, a.dropout), setting, a.why) + [
                f"Learning-rate check (protocol: \"Learning-rate sensitivity\"): lr_peak {rate}, {name} the",
                f"chosen {fmt_rate(a.peak)}; seed 1 only; read against base at the same rate."]
            files[f"lr-check/{name}/{row}.cfg"] = config_text(row, dict(keys, lr_peak=rate), paper, h)
    files["seeds.txt"] = seeds_text(changes)
    files["order.txt"] = order_text(changes)
    return files


def seeds_text(changes):
    return ("# ROW N: N matched seeds of ROW (jobs/table3-stages.sh: ROW-seed2 .. ROW-seedN, with seed = 2 .. N;\n"
            f"# ROW itself has seed = 1): seed s of every row is base's seed s ({PROTOCOL}).\n"
            + "".join(f"{row} {SEEDS}\n" for row in changes))


def run_name(row, seed):
    return row if seed == 1 else f"{row}-seed{seed}"


def order_text(changes):
    """The protocol's order: base's seeds, the 8-epoch rows seed by seed,
    then the added rows seed by seed."""
    runs = [run_name("base", s) for s in range(1, SEEDS + 1)]
    for group in (EIGHT_EPOCH_ROWS, tuple(ADDED)):
        runs += [run_name(row, s) for s in range(1, SEEDS + 1) for row in group if row in changes]
    return ("# The sweep's runs in the protocol's order (\"Sweep\": base's seeds, the 13 rows seed by seed, then\n"
            "# A2, A3, B2, C2), for: TABLE3_DIR=input/table3-m30k-conv jobs/run-local.sh table3 SWEEP_DIR \\\n"
            "#     $(grep -v '^#' input/table3-m30k-conv/order.txt)\n" + "".join(f"{r}\n" for r in runs))


def setting_from_pilot(a):
    """Fills a.dropout, a.peak, a.cap and a.why from the pilot's choice."""
    st = pilot_state(a.pilot)
    if st["chosen"] is None:
        raise AnalysisError(a.pilot, f"no setting chosen yet ({st['reason']}): no sweep configs")
    (a.dropout, a.peak), a.cap = st["chosen"], st["cap"]
    a.why = (f"{a.pilot.rstrip('/')}/pilot.md; the cap: 1.5 x best_step {max(st['best_steps'])} "
             f"+ 8 x {EVAL_STEPS}, rounded up to {EVAL_STEPS}")


def build_parser():
    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pilot", help="the pilot's sweep directory: its choice (analysis/table3_conv_pilot.py)")
    p.add_argument("--dropout", type=float, help="base′'s P_drop (without --pilot)")
    p.add_argument("--peak", type=float, help="the peak learning rate, lr_peak (without --pilot)")
    p.add_argument("--cap", type=int, help="the sweep's step cap, train_steps (without --pilot)")
    p.add_argument("--out", default=os.path.join(ROOT, "input", "table3-m30k-conv"), help="output directory")
    p.add_argument("--source", default=os.path.join(ROOT, "input", "table3-m30k"),
                   help="the 8-epoch table's configs (each row's change against base′)")
    p.add_argument("--paper", default=os.path.join(ROOT, "input", "table3"), help="the paper's row configs (paper_ppl, paper_bleu)")
    return p


def check_setting(a):
    given = [x is not None for x in (a.dropout, a.peak, a.cap)]
    if a.pilot and any(given):
        raise AnalysisError("--pilot", "give the pilot or --dropout/--peak/--cap, not both")
    if a.pilot:
        setting_from_pilot(a)
        return
    if not all(given):
        raise AnalysisError("setting", "give --pilot SWEEP, or all of --dropout, --peak and --cap")
    if not 0 < a.peak < math.inf or a.cap <= 0 or a.cap % EVAL_STEPS:   # "not 0 <": NaN too
        raise AnalysisError("--peak/--cap", f"peak {a.peak:g}, cap {a.cap}: a positive rate and a positive "
                            f"multiple of {EVAL_STEPS} are needed")
    d_rows(a.dropout)  # the protocol's D rows exist for it
    a.why = "given to the generator; the cap by the protocol's rule"


def main(argv):
    a = build_parser().parse_args(argv)
    check_setting(a)
    files = sweep_configs(a)
    check_outputs(os.path.join(a.out, rel) for rel in files)   # all before the first is written
    for rel, text in files.items():
        write_atomic(os.path.join(a.out, rel), text)   # makes the directories, or names the path
    print(f"{a.out}: {sum(1 for r in files if '/' not in r and r.endswith('.cfg'))} row configs, seeds.txt, "
          f"order.txt, lr-check/{{{','.join(n for n, _ in LR_CHECK)}}}/ ({setting_name((a.dropout, a.peak))}, "
          f"cap {a.cap})")
    return 0


if __name__ == "__main__":
    main_wrapper(main)
