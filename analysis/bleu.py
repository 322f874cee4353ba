#!/usr/bin/env python3
"""BLEU of a translation against references, two ways.

1. sacreBLEU (Post 2018) on detokenised text, printed with its signature: the
   comparable number (default: 13a tokenisation, mixed case, exp smoothing).
2. "tokenised BLEU", the kind of number the Transformer paper reports, as
   tensor2tensor's get_ende_bleu.sh computes it: the hypothesis and references
   are tokenised with the Moses tokenizer (sacremoses, the Python port of
   tokenizer.perl: ``tokenizer.perl -l LANG``, default escaping), hyphenated
   compounds are split (``a-b`` -> ``a ##AT##-##AT## b``), and BLEU is
   computed on those tokens without smoothing, i.e. what multi-bleu.perl gives.
   It is usually a little higher than (1) and is NOT comparable across
   tokenisations; report (1), compare (2) with the paper's numbers.

Usage: analysis/bleu.py HYP REF [REF ...] [--lang de] [--lowercase] [--json]
"""
import argparse
import functools
import json
import re
import sys

import sacrebleu
from sacrebleu.metrics import BLEU
from sacremoses import MosesTokenizer

_COMPOUND = re.compile(r"(\S)-(\S)")
_MOSES = {}


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def paper_tokenise(line, lowercase=False, lang="de"):
    """Moses tokens (tokenizer.perl -l LANG) with hyphenated compounds split
    (t2t get_ende_bleu.sh)."""
    if lang not in _MOSES:
        _MOSES[lang] = MosesTokenizer(lang=lang)
    tok = _MOSES[lang].tokenize(line.strip(), return_str=True, escape=True)
    # one pass, as the perl one-liner s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g
    tok = _COMPOUND.sub(r"\1 ##AT##-##AT## \2", tok)
    return tok.lower() if lowercase else tok


def scores(hyp, refs, lowercase=False, lang="de"):
    """(sacreBLEU score object, its signature, tokenised BLEU score object)"""
    for r in refs:
        if len(r) != len(hyp):
            raise ValueError(f"{len(hyp)} hypothesis lines but {len(r)} reference lines")
    bleu = BLEU(lowercase=lowercase)
    s = bleu.corpus_score(hyp, refs)
    sig = str(bleu.get_signature())
    tok_bleu = BLEU(tokenize="none", smooth_method="none", force=True)
    t = tok_bleu.corpus_score([paper_tokenise(h, lowercase, lang) for h in hyp],
                              [[paper_tokenise(x, lowercase, lang) for x in r] for r in refs])
    return s, sig, t


def sentence_stats(hyp, refs):
    """Per-sentence sufficient statistics of sacreBLEU's BLEU (13a, mixed
    case): an (n_sentences x 10) array [hyp_len, ref_len, correct_1..4,
    total_1..4]; their column sums give the corpus BLEU (analysis/stats.py,
    bleu_from_stats), resampled by the paired bootstrap."""
    for r in refs:
        if len(r) != len(hyp):
            raise ValueError(f"{len(hyp)} hypothesis lines but {len(r)} reference lines")
    return _cached_sentence_stats(tuple(hyp), tuple(tuple(r) for r in refs)).copy()


@functools.lru_cache(maxsize=256)
def _cached_sentence_stats(hyp, refs):
    """sentence_stats by content: the same translations scored again in one
    process (a sweep's copy, another table of it) are not scored anew"""
    import numpy as np

    scorer = _cached_reference_scorer(refs)
    return np.array(scorer._extract_corpus_statistics(list(hyp), None), dtype=float)


@functools.lru_cache(maxsize=8)
def _cached_reference_scorer(refs):
    """A BLEU scorer holding the n-grams of refs: a table scores every run
    against the same test references, and tokenising them is half the cost."""
    return BLEU(references=[list(r) for r in refs])


def _error(path, problem):
    print(f"error: {path}: {problem}", file=sys.stderr)
    return 2


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hyp", help="detokenised translations, one per line")
    ap.add_argument("refs", nargs="+", help="reference file(s), line-aligned")
    ap.add_argument("--lang", default="de", help="target language of the Moses tokenizer (default: de)")
    ap.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU (both numbers)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    a = ap.parse_args(argv)
    # each problem named by its own file: a missing, binary or short
    # reference is not the hypothesis's fault
    texts = {}
    for path in (a.hyp, *a.refs):
        try:
            texts[path] = read_lines(path)
        except OSError as e:
            return _error(path, e.strerror or str(e))
        except UnicodeDecodeError as e:
            return _error(path, f"not UTF-8 text ({e.reason} at byte {e.start})")
    hyp = texts[a.hyp]
    if not hyp:   # sacreBLEU fails on no sentences with an IndexError
        return _error(a.hyp, "empty: no lines to score")
    for r in a.refs:
        if len(texts[r]) != len(hyp):
            return _error(r, f"{len(texts[r])} reference lines but {len(hyp)} hypothesis lines ({a.hyp})")
    s, sig, t = scores(hyp, [texts[r] for r in a.refs], a.lowercase, a.lang)
    if a.json:
        print(json.dumps({"sacrebleu": round(s.score, 2), "signature": sig, "tokenized_bleu": round(t.score, 2),
                          "sacrebleu_version": sacrebleu.__version__, "sentences": len(hyp)}))
    else:
        print(f"sacreBLEU {s.score:.2f}  {s}  signature: {sig}")
        print(f"tokenised BLEU {t.score:.2f}  (Moses tokens -l {a.lang}, compounds split as ##AT##-##AT##, "
              f"no smoothing: multi-bleu.perl, as the paper)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
