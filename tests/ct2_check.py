"""Equivalence of a CTranslate2 export (analysis/ct2_export.py) with our
`translate` (run by tests/test_ct2_export.sh).

    ct2_check.py CT2_DIR WORK LENGTH_PENALTY

WORK holds dev.src and what the shell test made with bin/transformer:
greedy.txt (beam=1 len_alpha=0 max_len_a=5) and beam.txt (beam=4
len_alpha=0.6 max_len_a=5).  CTranslate2 gets each sentence alone with our
length rule (max_decoding_length = source pieces + 5; PAD and BOS
suppressed, as src/decode.c never extends by them).  Asserts: greedy
identical on every sentence; beam 4 identical on at least half, every other
sentence named from CTranslate2's own scores of both outputs (score_batch):
'search' (one search's output scores below the other's under its own
rule: beam search errors, CTranslate2's stopping after `beam` finished
hypotheses) or 'length penalty' (at different lengths, each output wins
under its own penalty: ours ((5+|Y|)/6)^alpha, CTranslate2's |Y|^lp)."""

import sys

import ctranslate2
import sentencepiece as spm

MAX_LEN_A = 5
ALPHA = 0.6


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def translate(tr, sp, srcs, **kw):
    out = []
    for s in srcs:
        t = sp.encode(s, out_type=str)
        r = tr.translate_batch([t], max_decoding_length=len(t) + MAX_LEN_A,
                               suppress_sequences=[["<pad>"], ["<s>"]], **kw)
        out.append(r[0].hypotheses[0])
    return out


def classify(tr, src, ours, theirs, lp):
    """'search', 'length penalty' or 'unexplained' (see the module's text);
    |Y| counts EOS in both scores."""
    a, b = (sum(r.log_probs) for r in tr.score_batch([src, src], [ours, theirs]))
    na, nb = len(ours) + 1, len(theirs) + 1
    gnmt = lambda s, n: s / ((5 + n) / 6) ** ALPHA   # noqa: E731
    ct2 = lambda s, n: s / n ** lp   # noqa: E731
    tol = 1e-5 * (abs(a) + abs(b) + 1)
    if gnmt(b, nb) > gnmt(a, na) + tol or ct2(a, na) > ct2(b, nb) + tol:
        return "search"
    return "length penalty" if na != nb else "unexplained"


def main(ct2_dir, work, lp):
    lp = float(lp)
    sp = spm.SentencePieceProcessor(model_file=f"{ct2_dir}/sentencepiece.model")
    tr = ctranslate2.Translator(ct2_dir, device="cpu", inter_threads=1, intra_threads=1)
    srcs = open(f"{work}/dev.src", encoding="utf-8").read().splitlines()
    greedy = open(f"{work}/greedy.txt", encoding="utf-8").read().splitlines()
    out = [sp.decode_pieces(h) for h in translate(tr, sp, srcs, beam_size=1)]
    diff = [i for i, (a, b) in enumerate(zip(out, greedy)) if a != b]
    if diff:
        fail(f"greedy: {len(diff)} of {len(srcs)} differ, first dev sentence {diff[0]}: "
             f"CTranslate2 {out[diff[0]]!r}, ours {greedy[diff[0]]!r}")
    print(f"ok: greedy: CTranslate2 = translate on all {len(srcs)} dev sentences")
    ours = open(f"{work}/beam.txt", encoding="utf-8").read().splitlines()
    hyps = translate(tr, sp, srcs, beam_size=4, length_penalty=lp)
    kinds = {}
    for i, (s, h) in enumerate(zip(srcs, hyps)):
        if sp.decode_pieces(h) == ours[i]:
            kind = "identical"
        else:
            mine = sp.encode(ours[i], out_type=str)
            kind = classify(tr, sp.encode(s, out_type=str), mine, h, lp) \
                if sp.decode_pieces(mine) == ours[i] else "re-segmented"
        kinds[kind] = kinds.get(kind, 0) + 1
    if kinds.get("unexplained") or kinds.get("identical", 0) * 2 < len(srcs):
        fail(f"beam 4, ours alpha {ALPHA} vs CTranslate2 length_penalty {lp}: {kinds}")
    print(f"ok: beam 4 (ours GNMT alpha {ALPHA}, CTranslate2 length_penalty {lp}) on {len(srcs)} dev sentences: "
          + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main(*sys.argv[1:4])
