"""analysis/bleu.py against an independent from-scratch corpus BLEU (Papineni
et al. 2002: clipped n-gram precisions 1..4, geometric mean, brevity penalty)
on the tokenised strings, and sacreBLEU's known edge cases."""
import math
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bleu  # noqa: E402
from conftest import script  # noqa: E402


def plain_bleu(hyps, refs):
    match = [0] * 4
    total = [0] * 4
    hl = rl = 0
    for h, r in zip(hyps, refs):
        h, r = h.split(), r.split()
        hl += len(h)
        rl += len(r)
        for n in range(1, 5):
            hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            rc = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            match[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
            total[n - 1] += max(len(h) - n + 1, 0)
    if min(match) == 0:
        return 0.0
    logp = sum(math.log(m / t) for m, t in zip(match, total)) / 4
    bp = 1.0 if hl > rl else math.exp(1 - rl / hl)
    return 100 * bp * math.exp(logp)


HYP = ["Ein Mann fährt Fahrrad auf einer Straße.", "Zwei Kinder spielen im Schnee-Park.",
       "Eine Frau in einem roten Kleid singt.", "Ein Hund läuft über die grüne Wiese."]
REF = ["Ein Mann fährt auf einer Straße Fahrrad.", "Zwei Kinder spielen im Schnee-Park.",
       "Eine Frau in einem roten Kleid singt auf der Bühne.", "Ein brauner Hund rennt über die Wiese."]


def test_tokenised_bleu_equals_plain_implementation():
    s, sig, t = bleu.scores(HYP, [REF])
    hyp_t = [bleu.paper_tokenise(h) for h in HYP]
    ref_t = [bleu.paper_tokenise(r) for r in REF]
    assert "##AT##-##AT##" in hyp_t[1]
    assert abs(t.score - plain_bleu(hyp_t, ref_t)) < 1e-9
    assert "tok:13a" in sig and "version:" in sig
    assert 0 < s.score < 100


def test_tokenisation_is_moses_not_13a():
    # tokenizer.perl -l de (default escaping), then get_ende_bleu.sh's compound
    # split: German abbreviations stay whole, apostrophes are split and escaped,
    # quotes and ampersands escaped; 13a would give "Dr . ", "z . B ." and "geht's"
    line = 'Herr Dr. Müller geht\'s z.B. zum "Schnee-Park" & mehr.'
    assert bleu.paper_tokenise(line) == ("Herr Dr. Müller geht &apos; s z.B. zum &quot; Schnee ##AT##-##AT## Park "
                                         "&quot; &amp; mehr .")
    assert bleu.paper_tokenise("Dr. Müller", lowercase=True) == "dr. müller"


def test_identity_is_100_and_cli_prints_signature(tmp_path):
    h = tmp_path / "h.txt"
    h.write_text("\n".join(REF) + "\n", encoding="utf-8")
    out = script("bleu.py", h, h).stdout
    assert out.startswith("sacreBLEU 100.00") and "signature: nrefs:1|case:mixed" in out
    assert "tokenised BLEU 100.00" in out


def test_line_count_mismatch_is_one_line_error(tmp_path):
    h = tmp_path / "h.txt"
    r = tmp_path / "r.txt"
    h.write_text("a\nb\n")
    r.write_text("a\n")
    script("bleu.py", h, r, expect=2)   # (one 'error: ' line)


def test_errors_name_the_file_at_fault(tmp_path):
    """A missing, binary or short reference is named itself, not the
    hypothesis (which was named for every problem, with a Python errno
    message)."""
    h = tmp_path / "h.txt"
    r = tmp_path / "r.txt"
    h.write_text("a\nb\n")
    r.write_text("a\nb\n")
    (tmp_path / "bin.h5").write_bytes(b"\x89HDF\r\n\x1a\n")
    (tmp_path / "short.txt").write_text("a\n")
    cases = [
        ([h, tmp_path / "none.txt"], f"error: {tmp_path}/none.txt: No such file or directory"),
        ([h, tmp_path / "bin.h5"], f"error: {tmp_path}/bin.h5: not UTF-8 text (invalid start byte at byte 0)"),
        ([h, r, tmp_path / "short.txt"],
         f"error: {tmp_path}/short.txt: 1 reference lines but 2 hypothesis lines ({h})"),
        ([tmp_path, r], f"error: {tmp_path}: Is a directory"),
    ]
    for args, want in cases:
        p = script("bleu.py", *args, expect=2)
        assert p.stderr == want + "\n", p.stderr
