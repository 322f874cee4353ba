"""Equivalence of an exported MarianMT directory with our model (run by
tests/test_hf_export.sh under .venv-hf).

    hf_check.py HF_DIR DATA.h5 WORK

WORK holds what the shell test made with bin/transformer: eval_<split>.txt
(the `eval` line of each one-sentence split s0, s1, ... and of dev),
greedy.txt (translate beam=1 len_alpha=0) and beam.txt (beam=4 len_alpha=0),
both with max_len_a = MAX_LEN_A, and plain.txt (translate's defaults).  Checks, in order, and prints one 'ok:' line
per check or exits 1 with 'FAIL: ...':
  tokenizer: MarianTokenizer's ids of each dev source = the dataset's + EOS;
  log-probabilities: per sentence, the teacher-forced NLL of Marian equals
    ours (eval, printed to 4 decimals) within NLL_TOL per token;
  greedy outputs identical on every dev sentence;
  beam 4 with alpha = 0 identical on every dev sentence;
  defaults a user gets: the export's max_length is our rule's, no
    max_new_tokens; a plain generate() and pipeline (no arguments) on the
    dev sources and a long one raise no warning but sacremoses', agree with
    each other, and against plain.txt (translate's defaults: beam 4, alpha
    0.6, max_len_a 50) at least half are identical and every other sentence
    is named (search, length penalty) from the model's own scores;
  save_pretrained of the loaded model warns about max_length alone, if at all;
and reports (not asserted): agreement of beam 4 with our GNMT alpha 0.6 and
the exported length_penalty, and the effect of LayerNorm eps 1e-6 vs 1e-5."""

import sys
import warnings

import h5py
import numpy as np
import torch
from transformers import MarianMTModel, MarianTokenizer

NLL_TOL = 2e-4      # per token: eval prints 4 decimals (5e-5), fp32 sums in another order
MAX_LEN_A = 5       # the shell test's max_len_a: also passed to generate() as max_new_tokens


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def field(line, key):
    w = line.split()
    return w[w.index(key) + 1]


def read_split(f, name):
    g = f[f"splits/{name}"]
    so, si, to, ti = g["src_offsets"][:], g["src_ids"][:], g["tgt_offsets"][:], g["tgt_ids"][:]
    return [(si[so[i]:so[i + 1]].tolist(), ti[to[i]:to[i + 1]].tolist()) for i in range(len(so) - 1)]


def teacher_forced_logprobs(model, src, tgt, eos, bos):
    """log P(y_i | y_<i, x) for y = tgt + EOS, decoder input BOS + tgt."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([src + [eos]]), decoder_input_ids=torch.tensor([[bos] + tgt]))
    lp = torch.log_softmax(out.logits[0].double(), dim=-1)
    y = torch.tensor(tgt + [eos])
    return lp[torch.arange(len(y)), y].numpy(), out.logits[0]


def check_tokenizer(tok, srcs, dev):
    for i, (text, (src, _)) in enumerate(zip(srcs, dev)):
        ids = tok(text)["input_ids"]
        if ids != src + [tok.eos_token_id]:
            fail(f"tokenizer: dev source {i}: MarianTokenizer {ids}, dataset {src} + EOS")
    print(f"ok: MarianTokenizer gives the dataset's ids (+ EOS) on all {len(srcs)} dev sources")


def check_logprobs(model, work, sents, cfg):
    worst = 0.0
    for k, (src, tgt) in enumerate(sents):
        if len(src) + 1 > cfg["max_len"] or len(tgt) + 1 > cfg["max_len"]:
            continue   # eval skips over-long pairs
        line = open(f"{work}/eval_s{k}.txt").read()
        ours, n = float(field(line, "nll")), int(field(line, "tokens"))
        lp, _ = teacher_forced_logprobs(model, src, tgt, cfg["eos"], cfg["bos"])
        if n != len(lp):
            fail(f"sentence {k}: eval counted {n} tokens, Marian {len(lp)}")
        hf = -lp.mean()
        worst = max(worst, abs(hf - ours))
        if abs(hf - ours) > NLL_TOL:
            fail(f"sentence {k}: NLL per token ours {ours:.4f}, Marian {hf:.6f} (tolerance {NLL_TOL})")
    print(f"ok: teacher-forced NLL per token, {len(sents)} sentences: max |Marian - ours| = {worst:.2e} "
          f"(<= {NLL_TOL}; ours printed to 4 decimals)")


def spm_text(tok, ids):
    """SentencePiece's own decoding, as spm_decode (ours) does it: MarianTokenizer's
    decode() strips the text, a trailing "\u2581" piece included."""
    return tok.spm_target.decode([i for i in ids if i not in (tok.pad_token_id, tok.eos_token_id, 1)])


def generate(model, tok, text, n_src, **kw):
    b = tok([text], return_tensors="pt")
    with torch.no_grad():
        # our maximum output L = source tokens + max_len_a, then only EOS:
        # HF's forced EOS (generation_config.json) at the token L + 1
        out = model.generate(**b, max_new_tokens=n_src + MAX_LEN_A + 1, **kw)
    return spm_text(tok, out[0].tolist())


def reference_beam(model, src, L, K, hf_rules, eos=2, bos=1, pad=0):
    """Beam search with alpha = 0 on Marian's log-probabilities, written from
    the rules of docs/translate.md (src/decode.c), or with hf_rules the two
    places where transformers' beam search (4.40, BeamSearchScorer) differs:
    an EOS extension ranked K or lower among the 2K candidates is dropped, not
    finished; at the maximum length its forced EOS scores 0, not log P(EOS)."""
    with torch.no_grad():
        enc = model.get_encoder()(input_ids=torch.tensor([src + [eos]])).last_hidden_state
        live, best, best_y = [(0.0, [])], -np.inf, None
        for t in range(L + 1):
            dec = torch.tensor([[bos] + y for _, y in live])
            logits = model(encoder_outputs=(enc.expand(len(live), -1, -1),), decoder_input_ids=dec).logits[:, -1]
            lp = torch.log_softmax(logits, dim=-1).double().numpy()
            cand = []
            for j, (sc, y) in enumerate(live):
                cand.append((sc + (0.0 if hf_rules and t == L else lp[j, eos]), j, eos))
                if t < L:
                    cand += [(sc + lp[j, v], j, v) for v in range(len(lp[j])) if v not in (pad, bos, eos)]
            cand.sort(key=lambda c: -c[0])
            nxt = []
            for rank, (sc, j, v) in enumerate(cand[:2 * K]):
                if v == eos:
                    if not (hf_rules and rank >= K) and sc > best:
                        best, best_y = sc, live[j][1]
                elif len(nxt) < K:
                    nxt.append((sc, live[j][1] + [v]))
            live = nxt
            if not live or best >= max(sc for sc, _ in live):   # exact early stop (alpha = 0)
                break
    return best_y


def compare_outputs(model, tok, srcs, dev, ours_file, what, **kw):
    ours = open(ours_file, encoding="utf-8").read().splitlines()
    diff = [i for i, (t, (s, _)) in enumerate(zip(srcs, dev)) if generate(model, tok, t, len(s), **kw) != ours[i]]
    return ours, diff


def check_beam(model, tok, srcs, dev, work):
    """Beam 4, alpha 0: ours = our rules on Marian's network on every
    sentence; HF's generate = HF's rules on every sentence; so ours = HF's
    generate wherever the two rule sets choose alike, and only there may
    they differ."""
    ours = open(f"{work}/beam.txt", encoding="utf-8").read().splitlines()
    same = explained = 0
    for i, (text, (src, _)) in enumerate(zip(srcs, dev)):
        L = len(src) + MAX_LEN_A
        r_ours = spm_text(tok, reference_beam(model, src, L, 4, False))
        r_hf = spm_text(tok, reference_beam(model, src, L, 4, True))
        hf = generate(model, tok, text, len(src), num_beams=4, length_penalty=0.0, early_stopping="never")
        if r_ours != ours[i]:
            fail(f"beam 4, alpha 0, dev sentence {i}: ours {ours[i]!r}, our rules on Marian {r_ours!r}")
        if r_hf != hf:
            fail(f"beam 4, alpha 0, dev sentence {i}: generate {hf!r}, HF's rules on Marian {r_hf!r}")
        if hf == ours[i]:
            same += 1
        elif r_ours != r_hf:
            explained += 1
        else:
            fail(f"beam 4, alpha 0, dev sentence {i}: generate {hf!r}, ours {ours[i]!r}, same rules")
    print(f"ok: beam 4 (alpha 0) on {len(srcs)} dev sentences: ours = our rules on Marian on all, "
          f"generate = HF's rules on Marian on all; generate = ours on {same}, the {explained} others "
          f"differ by HF's rules (EOS ranked >= beam dropped; forced EOS scored 0)")


class Captured:
    """Every Python warning and every transformers log record of WARNING or
    above raised inside the block, as text."""

    def __enter__(self):
        import logging

        import transformers

        self.messages, self._w = [], warnings.catch_warnings(record=True)
        self.records = self._w.__enter__()
        warnings.simplefilter("always")
        self.handler = logging.Handler(logging.WARNING)
        self.handler.emit = lambda r: self.messages.append(r.getMessage())
        self.logger = transformers.logging.get_logger()
        self.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        self._w.__exit__(*exc)
        self.messages += [str(w.message) for w in self.records]

    def unexpected(self):
        # sacremoses is left out on purpose (requirements-hf.txt)
        return [m for m in self.messages if "sacremoses" not in m]


def rule_max_length(max_len, max_len_a):
    """docs/translate.md: at most source + max_len_a tokens, then EOS, the
    decoder within 2 x max_len positions; for the longest source (max_len - 1),
    in transformers' count (decoder start token included), which may not pass
    the positions (max_position_embeddings) without a warning."""
    return min(min(max_len - 1 + max_len_a, 2 * max_len - 1) + 2, 2 * max_len)


def check_settings(model, tok, max_len):
    gc, want = model.generation_config, rule_max_length(max_len, 50)
    got = {"generation max_length": gc.max_length, "config max_length": model.config.max_length,
           "max_new_tokens": gc.max_new_tokens, "num_beams": gc.num_beams, "model_max_length": tok.model_max_length,
           "forced_eos_token_id in config.json": model.config.forced_eos_token_id}
    ref = {"generation max_length": want, "config max_length": want, "max_new_tokens": None, "num_beams": 4,
           "model_max_length": max_len, "forced_eos_token_id in config.json": None}
    if got != ref:
        fail(f"export settings {got}, expected {ref}")
    print(f"ok: export defaults: max_length {want} (source + 50, capped by positions) in generation_config.json "
          f"and config.json, no max_new_tokens, beam 4, tokenizer model_max_length {max_len}")


def long_source(tok, max_len):
    """A source of 18 or more pieces that the model still takes whole: 4.40's
    pipeline warned on those when config.json had no max_length."""
    words = "a big red dog sees the small cat and the blue house".split()
    text = ""
    for k in range(1, 200):
        cand = " ".join(words[i % len(words)] for i in range(k)) + "."
        if len(tok.spm_source.encode(cand)) + 1 >= max_len:   # tok() would warn
            break
        text = cand
    if len(tok.spm_source.encode(text)) + 1 < 18:
        fail(f"no long source under max_len {max_len}")
    return text


def plain_runs(hf_dir, texts):
    """What a user gets: from_pretrained, generate() with no arguments, and
    pipeline("translation") on a list; any warning but sacremoses' fails."""
    from transformers import pipeline

    with Captured() as cap:
        tok = MarianTokenizer.from_pretrained(hf_dir)
        model = MarianMTModel.from_pretrained(hf_dir).eval()
        with torch.no_grad():
            ids = [model.generate(**tok(t, return_tensors="pt"))[0].tolist() for t in texts]
        piped = [r["translation_text"] for r in pipeline("translation", model=hf_dir)(texts)]
    if cap.unexpected():
        fail(f"plain generate()/pipeline warned: {cap.unexpected()}")
    decoded = [tok.decode(i, skip_special_tokens=True) for i in ids]
    diff = [k for k, (a, b) in enumerate(zip(decoded, piped)) if a != b]
    if diff:
        fail(f"pipeline differs from generate() on {len(diff)} of {len(texts)}, first {texts[diff[0]]!r}")
    return tok, model, ids


def seq_logp(model, src, y, eos=2, bos=1):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([src + [eos]]), decoder_input_ids=torch.tensor([[bos] + y]))
    lp = torch.log_softmax(out.logits[0].double(), dim=-1)
    return float(lp[torch.arange(len(y) + 1), torch.tensor(y + [eos])].sum())


def classify(model, src, ours, hf, alpha, lp):
    """Why `generate` (HF's search, |Y|^lp) and ours (our search, GNMT's
    ((5+|Y|)/6)^alpha) chose differently, from both outputs' log-probabilities
    under the model: one search missed what its own score prefers
    ('search'), or the two penalties rank two lengths differently
    ('length penalty').  |Y| counts EOS in both.  Same length and each
    output preferred by its own score cannot happen: 'unexplained'."""
    a, b = seq_logp(model, src, ours), seq_logp(model, src, hf)
    na, nb = len(ours) + 1, len(hf) + 1
    gnmt = lambda s, n: s / ((5 + n) / 6) ** alpha   # noqa: E731
    hfs = lambda s, n: s / n ** lp   # noqa: E731
    tol = 1e-6 * (abs(a) + abs(b) + 1)
    if gnmt(b, nb) > gnmt(a, na) + tol or hfs(a, na) > hfs(b, nb) + tol:
        return "search"
    return "length penalty" if na != nb else "unexplained"


def check_plain(hf_dir, srcs, dev, work, max_len):
    """Plain generate() and pipeline against `translate` with its defaults
    (beam 4, alpha 0.6, max_len_a 50), differences named and counted."""
    texts = srcs + [None]
    tok0 = MarianTokenizer.from_pretrained(hf_dir)
    texts[-1] = long_source(tok0, max_len)
    tok, model, ids = plain_runs(hf_dir, texts)
    check_settings(model, tok, max_len)
    ours = open(f"{work}/plain.txt", encoding="utf-8").read().splitlines()
    alpha, lp = 0.6, model.generation_config.length_penalty
    kinds = {}
    for k, (src, _) in enumerate(dev):
        hf = [i for i in ids[k] if i not in (0, 1, 2)]
        if spm_text(tok, ids[k]) == ours[k]:
            kinds["identical"] = kinds.get("identical", 0) + 1
            continue
        if len(hf) > len(src) + 50:
            kind = "longer than source + 50"
        else:
            mine = tok.spm_target.encode(ours[k])
            kind = classify(model, src, mine, hf, alpha, lp) if spm_text(tok, mine) == ours[k] else "re-segmented"
        kinds[kind] = kinds.get(kind, 0) + 1
    n = len(dev)
    if kinds.get("unexplained") or kinds.get("identical", 0) * 2 < n:
        fail(f"plain generate() vs translate (beam 4, alpha 0.6) on {n} dev sentences: {kinds}")
    print(f"ok: plain generate() and pipeline on {len(texts)} sources (one of {len(tok(texts[-1])['input_ids'])} "
          f"pieces) warning-free, pipeline = generate() on all; vs translate's defaults on {n} dev sentences: "
          + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))


def check_save_warnings(hf_dir, work):
    """save_pretrained of the loaded model: 4.40 warns about generation keys
    in config.json; max_length is the one kept there (for its pipeline)."""
    import transformers

    model = MarianMTModel.from_pretrained(hf_dir)
    with Captured() as cap:
        model.save_pretrained(f"{work}/resaved")
    extra = [m for m in cap.unexpected() if "max_length" not in m.split("Non-default generation parameters:")[-1]
             or "forced_eos" in m]
    if extra:
        fail(f"save_pretrained warned about more than max_length: {extra}")
    print(f"info: save_pretrained of the loaded model (transformers {transformers.__version__}): "
          f"{len(cap.unexpected())} warning(s)" + (", naming only max_length" if cap.unexpected() else ""))


def eps_effect(model, dev, cfg):
    """max |logit| change when Marian's LayerNorm eps 1e-5 is set to our 1e-6."""
    base = [teacher_forced_logprobs(model, s, t, cfg["eos"], cfg["bos"])[1] for s, t in dev]
    for m in model.modules():
        if isinstance(m, torch.nn.LayerNorm):
            m.eps = 1e-6
    new = [teacher_forced_logprobs(model, s, t, cfg["eos"], cfg["bos"])[1] for s, t in dev]
    for m in model.modules():
        if isinstance(m, torch.nn.LayerNorm):
            m.eps = 1e-5
    d = max(float((a - b).abs().max()) for a, b in zip(base, new))
    scale = max(float(a.abs().max()) for a in base)
    return d, scale


def main(hf_dir, data, work):
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*sacremoses.*")   # deliberately absent (requirements-hf.txt)
    warnings.filterwarnings("ignore", message=".*length_penalty.*")   # beam-only flags in greedy calls
    tok = MarianTokenizer.from_pretrained(hf_dir)
    model = MarianMTModel.from_pretrained(hf_dir).eval()
    c = model.config
    with h5py.File(data, "r") as f:
        dev = read_split(f, "dev")
        n_s = sum(1 for k in f["splits"] if k.startswith("s") and k[1:].isdigit())
        sents = [read_split(f, f"s{k}")[0] for k in range(n_s)]
        max_len = int(f.attrs["max_len"])
    cfg = {"eos": c.eos_token_id, "bos": c.decoder_start_token_id, "max_len": max_len}
    srcs = open(f"{work}/dev.src", encoding="utf-8").read().splitlines()
    check_tokenizer(tok, srcs, dev)
    check_logprobs(model, work, sents, cfg)
    _, diff = compare_outputs(model, tok, srcs, dev, f"{work}/greedy.txt", "greedy", num_beams=1)
    if diff:
        fail(f"greedy: {len(diff)} of {len(srcs)} outputs differ, first dev sentence {diff[0]}")
    print(f"ok: greedy outputs identical on all {len(srcs)} dev sentences")
    check_beam(model, tok, srcs, dev, work)
    lp = model.generation_config.length_penalty
    _, diff = compare_outputs(model, tok, srcs, dev, f"{work}/beam06.txt", "beam06", num_beams=4)
    print(f"info: beam 4, ours GNMT alpha 0.6 vs Marian length_penalty {lp} (generation_config.json): "
          f"{len(srcs) - len(diff)} of {len(srcs)} outputs identical")
    check_plain(hf_dir, srcs, dev, work, max_len)
    check_save_warnings(hf_dir, work)
    d, scale = eps_effect(model, dev, cfg)
    print(f"info: LayerNorm eps 1e-6 (ours) instead of 1e-5 (Marian): max |delta logit| {d:.2e} "
          f"over the dev set (logits up to {scale:.1f})")


if __name__ == "__main__":
    main(*sys.argv[1:4])
