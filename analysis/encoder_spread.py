#!/usr/bin/env python3
"""How far a model's encoder keeps the source positions apart.

    .venv/bin/python analysis/encoder_spread.py CKPT.h5 DATA.h5 [--split dev]
        [--sentences N] [--check ATTENTION.h5]

For each of the first N sentences of SPLIT (default: dev, 100): the
encoder's states after the embedding and after each sublayer, and per
decoder layer the keys of the encoder-decoder attention (the reference
target teacher-forced), by np_model.py's float64 forward of the
checkpoint.  Prints their spread across positions, the mean over positions
of ||x_i - mean x|| over the mean ||x_i||, averaged over the sentences.  A
spread near 0 is rank collapse (Dong et al. 2021): every position carries
the same vector, so the decoder's cross-attention is uniform whatever its
queries and reads only an average of the source (docs/attention.md, C3 of
the converged sweep).

--check ATTENTION.h5, a `transformer attention` file of the same
checkpoint: its sentences are used instead, and their cross-attention maps
must equal this forward's to 1e-4 (else exit 1): the diagnostic runs the
model that the C code ran."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (ArgumentParser, AnalysisError, check_dataset, dataset_split, int_at_least,  # noqa: E402
                    main_wrapper, open_h5, split_ids)
import attention as A  # noqa: E402
from hf_export import read_checkpoint  # noqa: E402
from np_model import NumpyTransformer  # noqa: E402

CHECK_TOL = 1e-4


def spread(x):
    """Mean over positions of ||x_i - mean x||, over the mean ||x_i|| (0: all positions alike)."""
    norms = np.linalg.norm(x, axis=-1).mean()
    return float(np.linalg.norm(x - x.mean(-2, keepdims=True), axis=-1).mean() / norms) if norms > 0 else 0.0


def read_pairs(path, split, indices, cfg, clip=False):
    """(source ids + EOS, BOS + target ids) of the split's pairs at indices
    (docs/dataset.md), each side cut to cfg's max_len - 1 ids as
    src/batch.c cuts them, every id within cfg's vocabulary; clip: indices
    past the split's end are left out."""
    with open_h5(path) as f:
        check_dataset(f, path)
        g = dataset_split(f, path, split)
        (si, so), (ti, to) = (split_ids(path, g, side, int(cfg["vocab_size"])) for side in ("src", "tgt"))
        bos, eos = int(f.attrs.get("bos_id", 1)), int(f.attrs.get("eos_id", 2))
    n = len(so) - 1
    indices = [i for i in indices if i < n] if clip else indices
    bad = [i for i in indices if not 0 <= i < n]
    if bad:
        raise AnalysisError(path, f"split '{split}' has {n} pairs: no pair {bad[0]}")
    cut = lambda ids, off, i: ids[off[i]:off[i + 1]][:int(cfg["max_len"]) - 1].astype(np.int64)
    return [(np.append(cut(si, so, i), eos), np.insert(cut(ti, to, i), 0, bos)) for i in indices]


def check_maps(path, file_maps, model_maps):
    """The largest |difference| between this forward's cross maps and an attention file's
    ([(pair index, maps)], attention_sentences); exit 1 past CHECK_TOL."""
    worst = 0.0
    for (index, ours), maps in zip(file_maps, model_maps):
        if ours.shape != maps.shape:
            raise AnalysisError(path, f"sentence {index}: cross maps {ours.shape}, this forward {maps.shape}")
        worst = max(worst, float(np.abs(ours - maps).max()))
    if worst > CHECK_TOL:
        raise AnalysisError(path, f"cross-attention differs from this forward by {worst:.3g} (> {CHECK_TOL:g}): "
                                  "not this checkpoint's file, or np_model.py does not mirror the C model")
    return worst


def attention_sentences(path):
    """(split, [(pair index, cross maps [N, h, T, S])]) of a `transformer
    attention` file, read by attention.load_maps."""
    sents, split = A.load_maps(path)
    for s in sents:
        if s["index"] is None or "cross" not in s["maps"]:
            raise AnalysisError(path, f"sentence {s['path']}: no index attribute or no cross maps")
    return split or "dev", [(s["index"], s["maps"]["cross"]) for s in sents]


def measure(model, pairs):
    """(spread per encoder stage [1 + 2N], key spread per decoder layer [N], cross maps per pair [N, h, T, S])."""
    stages, keys, maps = [], [], []
    for src, tgt in pairs:
        trace = []
        dec = model.decode(tgt, model.encode(src, trace))
        stages.append([spread(x) for x in trace])
        keys.append([spread(k) for k in dec["cross_keys"]])
        maps.append(np.stack(dec["cross"]))
    return np.mean(stages, axis=0), np.mean(keys, axis=0), maps


def report(ckpt, n, split, stages, keys, checked):
    names = ["embedding"] + [f"layer {l} {s}" for l in range(len(keys)) for s in ("attention", "ffn")]
    print(f"encoder_spread: {ckpt}: {n} sentences of split {split}"
          + (f"; cross-attention equal to the attention file's within {checked:.1e}" if checked is not None else ""))
    print("encoder state spread across positions (mean ||x_i - mean x|| / mean ||x_i||):")
    for name, v in zip(names, stages):
        print(f"  {name:<20} {v:.3f}")
    print("cross-attention key spread per decoder layer: " + " ".join(f"{v:.3f}" for v in keys))


def main(argv):
    ap = ArgumentParser(prog="encoder_spread.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help="our checkpoint (docs/checkpoint.md)")
    ap.add_argument("data", help="the dataset the model was trained on (docs/dataset.md)")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--sentences", type=int_at_least(1), default=100,
                    help="the first N pairs (default 100, at most the split's)")
    ap.add_argument("--check", metavar="ATTENTION.h5", help="a `transformer attention` file of this checkpoint")
    a = ap.parse_args(argv)
    cfg, _, _, params = read_checkpoint(a.checkpoint)
    if a.check:
        split, named = attention_sentences(a.check)
    else:
        split, named = a.split, [(i, None) for i in range(a.sentences)]
    pairs = read_pairs(a.data, split, [i for i, _ in named], cfg, clip=not a.check)
    stages, keys, maps = measure(NumpyTransformer(cfg, params), pairs)
    checked = check_maps(a.check, named, maps) if a.check else None
    report(a.checkpoint, len(pairs), split, stages, keys, checked)
    return 0


if __name__ == "__main__":
    main_wrapper(main)
