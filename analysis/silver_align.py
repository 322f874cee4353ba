#!/usr/bin/env python3
"""A silver word alignment of a dataset split: eflomal (Östling and
Tiedemann 2016, "Efficient word alignment with Markov Chain Monte Carlo")
trained on the training pairs plus the split's, run in both directions and
symmetrised with grow-diag-final-and (Koehn et al. 2005).  The reference
against which `attention.py summary --align` scores cross-attention
(docs/attention.md): agreement with a statistical aligner, not with human
alignments, which Multi30k does not have.

Words are the dataset's SentencePiece pieces merged at '▁' (attention.py's
word_groups), the same words that attention.py merges the pieces of the
maps into, so that a silver link and an attention link name the same words.

Example:
  silver_align.py data/multi30k-v2000.h5 --split dev --out docs/results-multi30k/silver-align-dev.h5
"""

import argparse
import datetime
import hashlib
import math
import os
import sys
import tempfile

import numpy as np

import attention as A
from common import (ArgumentParser, AnalysisError, attr_str, dataset_pieces, dataset_split, finite_float, h5_atomic, int_at_least, main_wrapper,
                    open_h5, output_not_input, split_ids)

SILVER_FORMAT = "transformer-silver-alignment"
SILVER_VERSION = 1
BYTE_PIECE_LEN = len("<0x00>")


# ---------------------------------------------------------------- words of a dataset
def piece_word(pieces):
    """One word's text from its pieces: '▁' dropped, byte-fallback pieces
    (<0xC3>) decoded, never empty or with white space (eflomal splits lines
    on white space, and a lost word would shift every later index)."""
    raw = b""
    for p in pieces:
        if len(p) == BYTE_PIECE_LEN and p.startswith("<0x") and p.endswith(">"):
            raw += bytes([int(p[3:5], 16)])
        else:
            raw += p.replace("▁", "").encode()
    word = "_".join(raw.decode("utf-8", errors="replace").split())
    return word or "▁"


def sentence_words(pieces):
    """The words of one sentence's pieces, as attention.word_groups merges them."""
    return [piece_word([pieces[i] for i in g]) for g in A.word_groups(pieces)]


def dataset_words(path, split):
    """(source sentences, target sentences) of a split of a dataset file
    (docs/data.md), each a list of words."""
    with open_h5(path) as f:
        pieces = dataset_pieces(f, path)
        g = dataset_split(f, path, split)
        out = []
        for side in ("src", "tgt"):
            ids, off = split_ids(path, g, side, len(pieces))
            out.append([sentence_words([pieces[t] for t in ids[off[k]:off[k + 1]]]) for k in range(len(off) - 1)])
    return out[0], out[1]


# ---------------------------------------------------------------- eflomal
def eflomal_iterations(n_sentences, length):
    """eflomal's own default numbers of IBM1, HMM and fertility iterations
    (its align(): about 5000 / sqrt(sentences), scaled by --length): computed
    here so that the file records them."""
    iters = max(2, int(round(length * 5000 / math.sqrt(n_sentences))))
    return max(2, iters // 4), max(1, iters // 4), iters


def read_links(path):
    """eflomal's links file: one line per sentence of 'i-j' (source i, target j)."""
    with open(path) as f:
        return [{tuple(int(x) for x in p.split("-")) for p in line.split()} for line in f]


def run_eflomal(src, tgt, settings):
    """Forward and reverse links of eflomal on sentence pairs (lists of words):
    two lists of sets of (source, target) word positions."""
    import eflomal

    if not src or any(not s for s in src) or any(not t for t in tgt):
        raise AnalysisError("eflomal", "every sentence needs at least one word")
    aligner = eflomal.Aligner(model=settings["model"], n_samplers=settings["n_samplers"],
                              null_prior=settings["null_prior"], n_iterations=settings["iterations"])
    with tempfile.TemporaryDirectory(prefix="silver-align.") as d:
        fwd, rev = os.path.join(d, "fwd"), os.path.join(d, "rev")
        aligner.align([" ".join(s) + "\n" for s in src], [" ".join(t) + "\n" for t in tgt],
                      links_filename_fwd=fwd, links_filename_rev=rev, quiet=True)
        return read_links(fwd), read_links(rev)


NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def grow_diag_final_and(fwd, rev):
    """Symmetrise two directional alignments (sets of (source, target)) as
    Koehn et al. 2005 and Moses/atools do: start from the intersection, grow
    into neighbouring (diagonals included) points of the union that align a
    word not yet aligned, then add points of either direction whose words
    are both unaligned.  High precision from the intersection, recall from
    the union."""
    union, links = fwd | rev, set(fwd & rev)
    src_done, tgt_done = {s for s, _ in links}, {t for _, t in links}

    def add(p):
        links.add(p)
        src_done.add(p[0])
        tgt_done.add(p[1])

    grown = True
    while grown:
        grown = False
        for s, t in sorted(links):
            for ds, dt in NEIGHBOURS:
                p = (s + ds, t + dt)
                if p in union and p not in links and (p[0] not in src_done or p[1] not in tgt_done):
                    add(p)
                    grown = True
    for direction in (fwd, rev):
        for p in sorted(direction):
            if p[0] not in src_done and p[1] not in tgt_done:
                add(p)
    return links


# ---------------------------------------------------------------- the silver file
def write_silver(out, index, src, tgt, links, attrs):
    """The silver file (docs/attention.md): per sentence of the split (its
    index in /sentence_index) its word counts and its links as (target word,
    source word), the order of attention.alignment_links; through a temporary."""
    offsets = np.cumsum([0] + [len(l) for l in links]).astype(np.int64)
    flat = np.array([p for l in links for p in sorted(l)], np.int16).reshape(-1, 2)
    try:
        with h5_atomic(out) as g:
            g.attrs["format"] = SILVER_FORMAT
            g.attrs["format_version"] = SILVER_VERSION
            for k, v in attrs.items():
                g.attrs[k] = v
            g["sentence_index"] = np.asarray(index, np.int64)
            g["src_words"] = np.array([len(s) for s in src], np.int32)
            g["tgt_words"] = np.array([len(t) for t in tgt], np.int32)
            g["link_offsets"] = offsets
            g.create_dataset("links", data=flat, compression="gzip", shuffle=True)
    except OSError as e:
        raise AnalysisError(out, f"cannot write: {e.strerror or e}") from None
    return [out]


def file_digest(path):
    """The first 16 hex digits of the file's SHA-256: which silver file a
    summary was scored against (compare refuses to mix two)."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def load_silver(path):
    """A silver file: {'split', 'attrs', 'digest', 'sentences': {index: (source
    words, target words, {(target word, source word)})}}."""
    with open_h5(path) as f:
        if attr_str(f, "format", "") != SILVER_FORMAT:
            raise AnalysisError(path, f"not a silver alignment file (format '{attr_str(f, 'format', '')}', "
                                      f"expected '{SILVER_FORMAT}')")
        need = ("sentence_index", "src_words", "tgt_words", "link_offsets", "links")
        if any(k not in f for k in need):
            raise AnalysisError(path, f"silver alignment file without {', '.join(k for k in need if k not in f)}")
        idx, ns, nt = (np.asarray(f[k][()]) for k in need[:3])
        off, links = np.asarray(f["link_offsets"][()]), np.asarray(f["links"][()]).reshape(-1, 2)
        attrs = {k: f.attrs[k] for k in f.attrs}
    if not (len(idx) == len(ns) == len(nt) == len(off) - 1) or off[-1] != len(links):
        raise AnalysisError(path, "silver alignment file with inconsistent sentence_index, word counts and offsets")
    sentences = {}
    for k, i in enumerate(idx):
        pairs = {(int(t), int(s)) for t, s in links[off[k]:off[k + 1]]}
        if any(not (0 <= t < nt[k] and 0 <= s < ns[k]) for t, s in pairs):
            raise AnalysisError(path, f"sentence {int(i)}: a link outside its {nt[k]} target and {ns[k]} source words")
        sentences[int(i)] = (int(ns[k]), int(nt[k]), pairs)
    return {"split": str(attrs.get("split", "")), "attrs": attrs, "digest": file_digest(path), "sentences": sentences}


# ---------------------------------------------------------------- command
def silver_align(data, split, train_split, out, settings, argv):
    """Align train + split with eflomal and write the split's symmetrised links."""
    import eflomal  # noqa: F401  (fail before reading anything if it is missing)
    from importlib.metadata import version

    train_src, train_tgt = dataset_words(data, train_split)
    src, tgt = dataset_words(data, split)
    n = len(train_src) + len(src)
    settings = dict(settings, iterations=settings["iterations"] or eflomal_iterations(n, settings["length"]))
    fwd, rev = run_eflomal(train_src + src, train_tgt + tgt, settings)
    if len(fwd) != n or len(rev) != n:
        raise AnalysisError("eflomal", f"{len(fwd)} and {len(rev)} lines of links for {n} sentence pairs")
    links = [{(t, s) for s, t in grow_diag_final_and(f, r)} for f, r in zip(fwd[-len(src):], rev[-len(src):])]
    ibm1, hmm, fert = settings["iterations"]
    attrs = {
        "data": data, "split": split, "trained_on": f"{train_split} ({len(train_src)} pairs) + {split} ({len(src)} pairs)",
        "aligner": "eflomal", "eflomal_version": version("eflomal"), "model": settings["model"],
        "model_name": {1: "IBM1", 2: "IBM1+HMM", 3: "IBM1+HMM+fertility"}[settings["model"]],
        "iterations": f"ibm1 {ibm1}, hmm {hmm}, fertility {fert}", "n_samplers": settings["n_samplers"],
        "null_prior": settings["null_prior"], "lowercase": "yes (eflomal lowercases words)",
        "symmetrisation": "grow-diag-final-and (silver_align.grow_diag_final_and)",
        "seed": "none: eflomal seeds its samplers from /dev/urandom (no seed option); a rerun differs slightly",
        "words": "SentencePiece pieces merged at the word-start marker (attention.word_groups)",
        "links": "(target word, source word), 0-based, target = the dataset's tgt side",
        "reference": "agreement with a statistical aligner, not with human alignments",
        "command": "silver_align.py " + " ".join(argv),
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return write_silver(out, range(len(src)), src, tgt, links, attrs)


def build_parser():
    p = ArgumentParser(prog="silver_align.py", description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", metavar="DATA_H5", help="dataset file (transformer prepare)")
    p.add_argument("--split", default="dev", help="the split whose links are written (default dev)")
    p.add_argument("--train-split", default="train", help="the pairs eflomal also learns from (default train)")
    p.add_argument("--out", required=True, metavar="SILVER_H5", help="output file (written through a temporary)")
    p.add_argument("--model", type=int, choices=(1, 2, 3), default=3, help="1 IBM1, 2 +HMM, 3 +fertility (default 3)")
    p.add_argument("--samplers", type=int_at_least(1), default=3, help="independent samplers, averaged (default 3)")
    p.add_argument("--null-prior", type=finite_float(low=0, high=1), default=0.2,
                   help="prior probability of a NULL link (default 0.2)")
    p.add_argument("--length", type=finite_float(above=0), default=1.0,
                   help="iterations relative to eflomal's default (default 1)")
    p.add_argument("--iterations", type=int_at_least(0), nargs=3, metavar=("IBM1", "HMM", "FERT"),
                   help="iterations of each model (default: eflomal's, from the number of sentences)")
    return p


def main(argv):
    a = build_parser().parse_args(argv)
    if a.split == a.train_split:
        raise AnalysisError("--split", f"'{a.split}' is also the training split")
    output_not_input("silver_align.py", "--out", a.out, a.data)
    try:
        import eflomal  # noqa: F401
    except ImportError:
        raise AnalysisError("eflomal", "not installed (pip install -r analysis/requirements.txt)") from None
    settings = {"model": a.model, "n_samplers": a.samplers, "null_prior": a.null_prior, "length": a.length,
                "iterations": tuple(a.iterations) if a.iterations else None}
    for p in silver_align(a.data, a.split, a.train_split, a.out, settings, argv):
        print(p)
    return 0


if __name__ == "__main__":
    main_wrapper(main)
