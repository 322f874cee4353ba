#!/usr/bin/env python3
"""Pruning curves of attention heads, from the file of `transformer heads`.

Michel, Levy and Neubig (2019), section 4: heads are pruned in order of
least importance, a tenth of all heads at a time, and dev BLEU and dev
perplexity are measured at each level. The order is the global ranking of
the layer-normalised importance (their section 4.1). The same levels in
random orders give the baseline. With --single, also BLEU and PPL with each
single head masked (their section 3). Every measurement is `transformer
eval` and `transformer translate` of the checkpoint with `mask_heads=`.

The results go into HEADS.h5 (docs/attention.md), replacing earlier curves
of the same name and keeping the others:
  /prune/importance/{fraction, n_pruned, bleu, ppl, order}
  /prune/importance_raw/...   (--score raw: ordered by importance not normalised per layer)
  /prune/random_K/...   (K = 0 .. random_orders - 1)
  /single/{bleu, ppl}   [kind, layer, head], and the unmasked values as attributes

Usage: analysis/prune_heads.py HEADS.h5 [--random-orders 3] [--single] [--score norm|raw]
           [--bin bin/transformer] [--launcher "mpirun -np 2"] [--beam 4]
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import AnalysisError, attr_str, h5_atomic, main_wrapper, open_h5  # noqa: E402

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
        self.work = workdir
        self.keys = [f"beam={a.beam}"] + (a.keys or [])
        self.ref = os.path.join(workdir, "ref.txt")
        self.refs = None

    def _run(self, args, mask):
        cmd = self.cmd + args + ["--checkpoint", self.attrs["checkpoint"], "--data", self.attrs["data"],
                                 "--split", self.attrs["split"]] + self.keys + [f"mask_heads={mask}"]
        p = subprocess.run(cmd, capture_output=True, text=True)
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
        from bleu import read_lines, scores

        hyp = os.path.join(self.work, "hyp.txt")
        extra = ["--reference", self.ref] if self.refs is None else []
        self._run(["translate", "--output", hyp] + extra, mask)
        if self.refs is None:
            self.refs = read_lines(self.ref)
        lang = "de" if self.attrs["data"] != "synthetic" else "en"
        return scores(read_lines(hyp), [self.refs], lang=lang)[2].score   # tokenised BLEU

    def measure(self, heads):
        mask = mask_spec(heads)
        return self.bleu(mask), self.ppl(mask)


def curve(runner, order, n_levels, label):
    """BLEU and PPL with the first round(f * n) heads of order masked, f = 0, 1/n_levels, ..."""
    n = len(order)
    fractions = np.arange(n_levels) / n_levels
    bleu, ppl, pruned = [], [], []
    for f in fractions:
        k = int(round(f * n))
        b, p = runner.measure(order[:k])
        bleu.append(b)
        ppl.append(p)
        pruned.append(k)
        print(f"{label}: {k:4d} of {n} heads pruned ({f:.0%}): BLEU {b:6.2f}  PPL {p:10.3f}", flush=True)
    return {"fraction": fractions, "n_pruned": np.array(pruned), "bleu": np.array(bleu), "ppl": np.array(ppl),
            "order": np.array(order, dtype=np.int64).reshape(-1, 3)}


def single_head(runner, shape):
    """BLEU and PPL with each head masked alone, [kind, layer, head]"""
    bleu, ppl = np.zeros(shape), np.zeros(shape)
    for k, l, h in np.ndindex(*shape):
        bleu[k, l, h], ppl[k, l, h] = runner.measure([(k, l, h)])
        print(f"single: {KINDS[k]}:{l}:{h} masked: BLEU {bleu[k, l, h]:6.2f}  PPL {ppl[k, l, h]:8.3f}", flush=True)
    return bleu, ppl


def save(path, curves, single, base):
    """Write the curves into HEADS.h5 (replacing earlier ones), through a temporary copy."""
    with h5_atomic(path, copy_from=path) as f:
        g = f.require_group("prune")
        for name, c in curves.items():
            if name in g:
                del g[name]
            gc = g.create_group(name)
            for k, v in c.items():
                gc[k] = v
        if single is not None:
            if "single" in f:
                del f["single"]
            s = f.create_group("single")
            s["bleu"], s["ppl"] = single
            s.attrs["bleu_unmasked"], s.attrs["ppl_unmasked"] = base
            s.attrs["kinds"] = ",".join(KINDS)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("heads", metavar="HEADS.h5", help="file of 'transformer heads'")
    ap.add_argument("--levels", type=int, default=10, help="pruning levels: 0, 1/L, ... (default 10: steps of 10%%)")
    ap.add_argument("--score", choices=("norm", "raw"), default="norm",
                    help="order by importance normalised per layer (norm, Michel et al.; curve 'importance') "
                         "or by raw importance (raw; curve 'importance_raw')")
    ap.add_argument("--random-orders", type=int, default=3, help="random orders for the baseline (default 3)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the random orders (default 1)")
    ap.add_argument("--single", action="store_true", help="also mask each head alone")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bin",
                                                  "transformer"), help="the transformer binary")
    ap.add_argument("--launcher", default="", help="prefix of every command, e.g. 'mpirun -np 2'")
    ap.add_argument("--beam", type=int, default=4, help="beam size of the BLEU translations (default 4)")
    ap.add_argument("keys", nargs="*", help="key=value for eval and translate (threads, max_tokens, ...)")
    a = ap.parse_intermixed_args(argv)
    if a.levels < 2 or a.random_orders < 0:
        raise AnalysisError("arguments", "--levels must be >= 2 and --random-orders >= 0")
    attrs, imp = read_heads(a.heads, "importance_norm" if a.score == "norm" else "importance")
    name = "importance" if a.score == "norm" else "importance_raw"
    # least important first; ties broken by position, so the order is reproducible
    order = [tuple(int(x) for x in np.unravel_index(i, imp.shape)) for i in np.argsort(imp.reshape(-1), kind="stable")]
    with tempfile.TemporaryDirectory() as work:
        runner = Runner(a, attrs, work)
        curves = {name: curve(runner, order, a.levels, name)}
        rng = np.random.default_rng(a.seed)
        for r in range(a.random_orders):
            perm = [order[i] for i in rng.permutation(len(order))]
            curves[f"random_{r}"] = curve(runner, perm, a.levels, f"random {r}")
        single = None
        if a.single:
            single = single_head(runner, imp.shape)
            base = (curves[name]["bleu"][0], curves[name]["ppl"][0])
        save(a.heads, curves, single, base if a.single else None)
    print(f"prune_heads: curves written into {a.heads}")
    return 0


if __name__ == "__main__":
    main_wrapper(main)
