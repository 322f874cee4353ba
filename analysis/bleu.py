#!/usr/bin/env python3
"""Corpus BLEU of detokenised translations against one reference file, with
sacrebleu (13a tokenisation, as in docs/results.md); prints one line
'BLEU <score> <signature>'.

Example:
  bleu.py runs/base/dev.hyp runs/base/dev.ref
"""

import argparse

from common import main_wrapper
from row_result import sacrebleu_score


def main(argv):
    p = argparse.ArgumentParser(prog="bleu.py", description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("hyp", metavar="HYP", help="translations, one sentence per line")
    p.add_argument("ref", metavar="REF", help="references, one sentence per line")
    a = p.parse_args(argv)
    score, sig = sacrebleu_score(a.hyp, a.ref)
    print(f"BLEU {score:.2f} {sig}")
    return 0


if __name__ == "__main__":
    main_wrapper(main)
