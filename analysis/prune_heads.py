#!/usr/bin/env python3
"""Pruning curves of attention heads, from the file of `transformer heads`.

Michel, Levy and Neubig (2019), section 4: heads are pruned in order of
least importance, a tenth of all heads at a time, and BLEU and perplexity
are measured at each level on --split, which must not be the split the
importance was estimated on (`transformer heads` defaults to a sample of
training pairs, as Michel et al. do). The order is the global ranking of
the layer-normalised importance (their section 4.1); with --per-kind, also
one curve per attention kind (encoder self, decoder self, encoder-decoder),
each pruning that kind's heads alone. --min-per-layer K keeps K heads in
every layer (Michel et al.'s code has the option; without it the last
cross-attention layer can go whole). The same levels in random orders give
the baseline band. At each level BLEU is compared with the unpruned model
by paired bootstrap resampling (Koehn 2004) on the same sentences. With
--single, also BLEU and PPL with each single head masked (their section
3). Every measurement is `transformer eval` and `transformer translate` of
the checkpoint with `mask_heads=`.

The results go into HEADS.h5 (docs/attention.md), replacing earlier curves
of the same name and keeping the others:
  /prune/importance/{fraction, n_pruned, bleu, ppl, order, sacrebleu, d_bleu, d_bleu_lo, d_bleu_hi, d_bleu_p}
  /prune/importance_raw/...   (--score raw: ordered by importance not normalised per layer)
  /prune/importance_{enc,dec_self,cross}/...   (--per-kind: that kind's heads alone)
  /prune/random_K/...   (K = 0 .. random_orders - 1)
  each curve's attributes: split, min_per_layer, kind (all or one)
  /single/{bleu, ppl}   [kind, layer, head], and the unmasked values as attributes

Usage: analysis/prune_heads.py HEADS.h5 [--split dev] [--random-orders 3] [--single]
           [--score norm|raw] [--per-kind] [--min-per-layer 0] [--bin bin/transformer]
           [--launcher "mpirun -np 2"] [--beam 4]
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ArgumentParser, AnalysisError, attr_str, check_output, h5_atomic, int_at_least, main_wrapper, open_h5  # noqa: E402

KINDS = ("enc", "dec_self", "cross")


def read_heads(path, score="importance_norm"):
    """(attrs dict, the score [3, N, h]) of a `transformer heads` file."""
    with open_h5(path) as f:
        if attr_str(f, "format") != "transformer-heads":
            raise AnalysisError(path, "not a file of 'transformer heads' (attribute format)")
        attrs = {k: attr_str(f, k) for k in ("checkpoint", "data", "split", "mask_heads")}
        try:
            imp = np.stack([f[k][score][()] for k in KINDS])
        except KeyError as e:
            raise AnalysisError(path, f"missing dataset {e}") from None
    if not os.path.exists(attrs["checkpoint"]):
        raise AnalysisError(path, f"its checkpoint {attrs['checkpoint']} (the path given to 'transformer heads') "
                                  "is not found from this directory: run from where heads ran")
    if attrs["mask_heads"]:
        raise AnalysisError(path, f"was measured with mask_heads={attrs['mask_heads']}: prune from the full model")
    return attrs, imp


def mask_spec(heads):
    """mask_heads value for a list of (kind, layer, head): kind:layer:h1+h2"""
    by_layer = {}
    for k, l, h in sorted(heads):
        by_layer.setdefault((k, l), []).append(h)
    return ",".join(f"{KINDS[k]}:{l}:" + "+".join(map(str, hs)) for (k, l), hs in sorted(by_layer.items()))


class Runner:
    """Runs eval and translate of one checkpoint with a head mask."""

    def __init__(self, a, attrs, workdir):
        self.cmd = shlex.split(a.launcher) + [a.bin]
        self.attrs = attrs
        self.split = a.split
        self.done = {}
        self.work = workdir
        self.keys = [f"beam={a.beam}"] + (a.keys or [])
        self.ref = os.path.join(workdir, "ref.txt")
        self.refs = None

    def _run(self, args, mask):
        cmd = self.cmd + args + ["--checkpoint", self.attrs["checkpoint"], "--data", self.attrs["data"],
                                 "--split", self.split] + self.keys + [f"mask_heads={mask}"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:   # checked up front (check_commands); removed since
            raise AnalysisError(cmd[0], e.strerror or str(e)) from None
        if p.returncode:
            last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise AnalysisError(" ".join(args[:1]), f"exit {p.returncode}: {last}")
        return p.stdout

    def ppl(self, mask):
        out = self._run(["eval"], mask)
        m = re.search(r"^eval \S+ .*\bppl ([0-9.eE+-]+|inf|nan)", out, re.M)
        if not m:
            raise AnalysisError("eval", f"no ppl in its output: {out.strip()[:200]}")
        return float(m.group(1))

    def bleu(self, mask):
        """(tokenised BLEU, sacreBLEU's per-sentence statistics) of the translation with mask"""
        from bleu import read_lines, scores, sentence_stats

        hyp = os.path.join(self.work, "hyp.txt")
        extra = ["--reference", self.ref] if self.refs is None else []
        self._run(["translate", "--output", hyp] + extra, mask)
        if self.refs is None:
            self.refs = read_lines(self.ref)
        lang = "de" if self.attrs["data"] != "synthetic" else "en"
        hyps = read_lines(hyp)
        return scores(hyps, [self.refs], lang=lang)[2].score, sentence_stats(hyps, [self.refs])

    def measure(self, heads):
        """(tokenised BLEU, sentence statistics, PPL) with heads masked; each
        mask measured once (every curve starts from the unpruned model)"""
        mask = mask_spec(heads)
        if mask not in self.done:
            self.done[mask] = self.bleu(mask) + (self.ppl(mask),)
        return self.done[mask]


def prunable(order, min_per_layer, shape):
    """order without the heads that would leave their layer (kind, layer)
    with fewer than min_per_layer heads: they are never pruned"""
    left = {}
    out = []
    for k, l, h in order:
        n = left.get((k, l), shape[2])
        if n > min_per_layer:
            left[(k, l)] = n - 1
            out.append((k, l, h))
    return out


def curve(runner, order, n_levels, label, min_per_layer=0, shape=None):
    """BLEU and PPL with the first round(f * n) heads of order masked, f = 0,
    1/n_levels, ... (n = len(order)), never below min_per_layer heads per
    layer (a level then prunes all it may); Δ BLEU against level 0 by paired
    bootstrap on the same sentences.  'order' in the result is the sequence
    pruned (without the heads min_per_layer keeps)."""
    from stats import bleu_from_stats, paired_bootstrap

    n = len(order)
    allowed = prunable(order, min_per_layer, shape) if min_per_layer else order
    fractions = np.arange(n_levels) / n_levels
    rows, base = [], None
    for f in fractions:
        k = min(int(round(f * n)), len(allowed))
        b, st, p = runner.measure(allowed[:k])
        base = st if base is None else base
        d = paired_bootstrap(st, base)
        rows.append((k, b, p, float(bleu_from_stats(st.sum(axis=0))), d["diff"], d["lo"], d["hi"], d["p"]))
        print(f"{label}: {k:4d} of {n} heads pruned ({f:.0%}): BLEU {b:6.2f}  PPL {p:10.3f}  "
              f"Δ sacreBLEU {d['diff']:+.2f} [{d['lo']:+.2f}, {d['hi']:+.2f}]", flush=True)
    cols = list(zip(*rows))
    return {"fraction": fractions, "n_pruned": np.array(cols[0]), "bleu": np.array(cols[1]), "ppl": np.array(cols[2]),
            "sacrebleu": np.array(cols[3]), "d_bleu": np.array(cols[4]), "d_bleu_lo": np.array(cols[5]),
            "d_bleu_hi": np.array(cols[6]), "d_bleu_p": np.array(cols[7]),
            "order": np.array(allowed, dtype=np.int64).reshape(-1, 3)}


def single_head(runner, shape):
    """BLEU and PPL with each head masked alone, [kind, layer, head]"""
    bleu, ppl = np.zeros(shape), np.zeros(shape)
    for k, l, h in np.ndindex(*shape):
        bleu[k, l, h], _, ppl[k, l, h] = runner.measure([(k, l, h)])
        print(f"single: {KINDS[k]}:{l}:{h} masked: BLEU {bleu[k, l, h]:6.2f}  PPL {ppl[k, l, h]:8.3f}", flush=True)
    return bleu, ppl


def save(path, curves, single, base, attrs=None):
    """Write the curves into HEADS.h5 (replacing earlier ones), through a temporary copy."""
    with h5_atomic(path, copy_from=path) as f:
        g = f.require_group("prune")
        for name, c in curves.items():
            if name in g:
                del g[name]
            gc = g.create_group(name)
            for k, v in c.items():
                if k == "kind":
                    gc.attrs[k] = v
                else:
                    gc[k] = v
            for k, v in (attrs or {}).items():
                gc.attrs[k] = v
        if single is not None:
            if "single" in f:
                del f["single"]
            s = f.create_group("single")
            s["bleu"], s["ppl"] = single
            s.attrs["bleu_unmasked"], s.attrs["ppl_unmasked"] = base
            s.attrs["kinds"] = ",".join(KINDS)


def build_parser():
    ap = ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("heads", metavar="HEADS.h5", help="file of 'transformer heads'")
    ap.add_argument("--split", default="dev",
                    help="split the curves are scored on (default dev); never the one importance was measured on")
    ap.add_argument("--levels", type=int_at_least(1), default=10, help="pruning levels: 0, 1/L, ... (default 10: steps of 10%%)")
    ap.add_argument("--score", choices=("norm", "raw"), default="norm",
                    help="order by importance normalised per layer (norm, Michel et al.; curve 'importance') "
                         "or by raw importance (raw; curve 'importance_raw')")
    ap.add_argument("--per-kind", action="store_true",
                    help="also one curve per attention kind, pruning that kind's heads alone")
    ap.add_argument("--min-per-layer", type=int_at_least(0), default=0, help="heads every layer keeps (default 0)")
    ap.add_argument("--random-orders", type=int_at_least(0), default=3, help="random orders for the baseline (default 3)")
    ap.add_argument("--seed", type=int_at_least(0), default=1, help="seed of the random orders (default 1)")
    ap.add_argument("--single", action="store_true", help="also mask each head alone")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bin",
                                                  "transformer"), help="the transformer binary")
    ap.add_argument("--launcher", default="", help="prefix of every command, e.g. 'mpirun -np 2'")
    ap.add_argument("--beam", type=int_at_least(1), default=4, help="beam size of the BLEU translations (default 4)")
    ap.add_argument("keys", nargs="*", help="key=value for eval and translate (threads, max_tokens, ...)")
    return ap


def ranked(imp):
    """every head (kind, layer, head), least important first; ties broken by
    position, so the order is reproducible"""
    return [tuple(int(x) for x in np.unravel_index(i, imp.shape)) for i in np.argsort(imp.reshape(-1), kind="stable")]


def all_curves(a, runner, imp, name):
    """the importance curve(s) and the random baseline, by name"""
    order = ranked(imp)
    run = lambda o, label: curve(runner, o, a.levels, label, a.min_per_layer, imp.shape)  # noqa: E731
    curves = {name: dict(run(order, name), kind="all")}
    if a.per_kind:
        for k, kind in enumerate(KINDS):
            curves[f"{name}_{kind}"] = dict(run([x for x in order if x[0] == k], f"{name} {kind}"), kind=kind)
    rng = np.random.default_rng(a.seed)
    for r in range(a.random_orders):
        perm = [order[i] for i in rng.permutation(len(order))]
        curves[f"random_{r}"] = dict(run(perm, f"random {r}"), kind="all")
    return curves


def check_commands(a):
    """The launcher and binary, checked before the first curve runs (an
    unparsable --launcher, a --bin that is no program or a launcher not
    on PATH were tracebacks, some after minutes of curves)."""
    try:
        words = shlex.split(a.launcher)
    except ValueError as e:
        raise AnalysisError("--launcher", f"cannot parse {a.launcher!r}: {e}") from None
    if words and shutil.which(words[0]) is None:
        raise AnalysisError("--launcher", f"{words[0]}: no such command")
    if not os.path.isfile(a.bin) or not os.access(a.bin, os.X_OK):
        why = "no such file" if not os.path.exists(a.bin) else "not an executable file"
        raise AnalysisError(a.bin, f"--bin: {why}")


def main(argv):
    a = build_parser().parse_intermixed_args(argv)
    if a.levels < 2 or a.random_orders < 0 or a.min_per_layer < 0:
        raise AnalysisError("arguments", "--levels must be >= 2, --random-orders and --min-per-layer >= 0")
    attrs, imp = read_heads(a.heads, "importance_norm" if a.score == "norm" else "importance")
    check_output(a.heads)   # the curves go into it at the end: a bad name is refused before they run
    if attrs["split"] == a.split:
        raise AnalysisError(a.heads, f"importance was estimated on split '{a.split}', the split the curves would be "
                                     "scored on: estimate it on another (transformer heads --split train) "
                                     "or score on another (--split)")
    if a.min_per_layer >= imp.shape[2]:
        raise AnalysisError("arguments", f"--min-per-layer {a.min_per_layer}: layers have {imp.shape[2]} heads")
    check_commands(a)
    name = "importance" if a.score == "norm" else "importance_raw"
    with tempfile.TemporaryDirectory() as work:
        runner = Runner(a, attrs, work)
        curves = all_curves(a, runner, imp, name)
        single = None
        if a.single:
            single = single_head(runner, imp.shape)
            base = (curves[name]["bleu"][0], curves[name]["ppl"][0])
        save(a.heads, curves, single, base if a.single else None,
             {"split": a.split, "min_per_layer": a.min_per_layer})
    print(f"prune_heads: curves written into {a.heads}")
    return 0


if __name__ == "__main__":
    main_wrapper(main)
