#!/usr/bin/env python3
"""CTranslate2's side of tests/bench/decode_ct2.sh (docs/performance.md,
"Decoding speed against CTranslate2").

    ct2_decode.py prep CKPT DATA SPLIT SENTENCES WORK
    ct2_decode.py run MODEL_DIR WORK BEAM LENGTH_PENALTY THREADS BATCH MAX_LEN_A OUT
    ct2_decode.py table CSV BLEU_TSV OUTPUTS

prep (.venv-hf) writes WORK/src.jsonl, the split's stored source pieces,
one JSON list a line, cut to the checkpoint's max_len - 1 as `translate`
cuts them, and WORK/positions (the decoder's positions, as
model_positions() in src/model.c); with SENTENCES > 0, WORK/data.h5, a copy
of DATA whose SPLIT holds only its first SENTENCES pairs, so that both
engines read the same sentences.

run (.venv-hf) loads the model (timed apart) and translates WORK/src.jsonl
with translate_batch as `translate` does: longest first, batches of BATCH
sentences, at most source + MAX_LEN_A output tokens (a batch gets its
longest source's limit: translate_batch takes one), PAD and BOS never
produced, EOS allowed from the first step.  Prints one line "ct2: load_s L
decode_s D sentences N tokens T compute_type C"; only the translate_batch
calls are in D (pieces in, pieces out); the outputs are detokenised after.

table (standard library) prints the markdown table of the medians from the
CSV the shell script writes."""

import csv
import json
import os
import shutil
import statistics
import sys
import time

MODULE_DIR = os.path.dirname(os.path.abspath(__file__))


def analysis():
    sys.path.insert(0, os.path.join(MODULE_DIR, "..", "..", "analysis"))
    import common
    import hf_export
    return common, hf_export


def subset(data, split, n, out):
    """A copy of data whose split holds its first n pairs (ids, offsets,
    n_pairs; the other attributes are left as they were)."""
    import h5py

    shutil.copyfile(data, out)
    with h5py.File(out, "r+") as f:
        g = f[f"splits/{split}"]
        for side in ("src", "tgt"):
            off = g[f"{side}_offsets"][: n + 1]
            ids = g[f"{side}_ids"][: int(off[-1])]
            for name, arr in ((f"{side}_offsets", off), (f"{side}_ids", ids)):
                del g[name]
                g.create_dataset(name, data=arr)
        g.attrs["n_pairs"] = n


def prep(ckpt, data, split, sentences, work):
    common, hf_export = analysis()
    cfg = hf_export.read_checkpoint(ckpt)[0]
    pieces = hf_export.read_vocab(data)[0]
    with common.open_h5(data) as f:
        if f"splits/{split}/src_offsets" not in f:
            raise common.AnalysisError(data, f"no split {split!r}")
        off = f[f"splits/{split}/src_offsets"][:]
        ids = f[f"splits/{split}/src_ids"][:]
    n = len(off) - 1 if sentences <= 0 else min(sentences, len(off) - 1)
    if sentences > 0:
        subset(data, split, n, os.path.join(work, "data.h5"))
    max_len = int(cfg["max_len"])
    learned = cfg.get("positional", "sinusoid") == "learned"
    with open(os.path.join(work, "src.jsonl"), "w", encoding="utf-8") as f:
        for i in range(n):
            s = ids[off[i]: off[i + 1]][: max_len - 1]
            f.write(json.dumps([pieces[t] for t in s], ensure_ascii=False) + "\n")
    with open(os.path.join(work, "positions"), "w") as f:
        f.write(f"{max_len if learned else 2 * max_len}\n")
    print(f"prep: {n} sentences of {split}")
    return 0


def batches(src, batch):
    """Indices longest first (ties in input order, as translate's
    cmp_len_desc), in chunks of batch; empty sources are left out (their
    output is an empty line, as translate's)."""
    order = sorted((i for i, s in enumerate(src) if s), key=lambda i: (-len(src[i]), i))
    return [order[k: k + batch] for k in range(0, len(order), batch)]


def run(model_dir, work, beam, lp, threads, batch, max_len_a, out):
    import ctranslate2
    import sentencepiece

    src = [json.loads(line) for line in open(os.path.join(work, "src.jsonl"), encoding="utf-8")]
    positions = int(open(os.path.join(work, "positions")).read())
    t0 = time.perf_counter()
    tr = ctranslate2.Translator(model_dir, device="cpu", inter_threads=1, intra_threads=int(threads))
    load = time.perf_counter() - t0
    hyps = [[] for _ in src]
    t0 = time.perf_counter()
    for b in batches(src, int(batch)):
        # our rule per sentence: min(source + max_len_a, positions - 1)
        limit = max(min(len(src[i]) + int(max_len_a), positions - 1) for i in b)
        res = tr.translate_batch([src[i] for i in b], beam_size=int(beam), length_penalty=float(lp),
                                 max_decoding_length=limit, min_decoding_length=0, max_input_length=0,
                                 suppress_sequences=[["<pad>"], ["<s>"]])
        for i, r in zip(b, res):
            hyps[i] = r.hypotheses[0]
    decode = time.perf_counter() - t0
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(model_dir, "sentencepiece.model"))
    with open(out, "w", encoding="utf-8") as f:
        for h in hyps:
            f.write(sp.decode_pieces(h) + "\n")
    print(f"ct2: load_s {load:.4f} decode_s {decode:.4f} sentences {len(src)} "
          f"tokens {sum(len(h) for h in hyps)} compute_type {tr.compute_type}")
    return 0


def spread(xs, fmt):
    """'median (min-max)' of xs; the median alone for one value."""
    m = fmt.format(statistics.median(xs))
    return m if len(xs) == 1 else f"{m} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def same_lines(a, b):
    try:
        with open(a, encoding="utf-8") as fa, open(b, encoding="utf-8") as fb:
            la, lb = fa.read().splitlines(), fb.read().splitlines()
    except OSError:
        return "-"
    return f"{sum(x == y for x, y in zip(la, lb))} of {len(la)}"


def table(csv_path, bleu_tsv, outputs):
    """Markdown rows: per beam, threads and engine, the median sentences/s
    and target tokens/s over the repeats, and CT2/ours as the median of the
    per-repeat ratios (each CT2 run against the ours run just before it)."""
    rows = list(csv.DictReader(open(csv_path, encoding="utf-8")))
    bleu = dict(line.rstrip("\n").split("\t", 1) for line in open(bleu_tsv, encoding="utf-8") if "\t" in line)
    runs = {}
    for r in rows:
        runs.setdefault((r["beam"], r["threads"], r["engine"]), {})[r["repeat"]] = r
    print("| beam | threads | engine | sentences/s | target tokens/s | CT2 / ours | sacreBLEU | same output as ours |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for (beam, th, eng), reps in runs.items():
        sps = [float(r["sentences"]) / float(r["decode_s"]) for r in reps.values()]
        tps = [float(r["target_tokens"]) / float(r["decode_s"]) for r in reps.values()]
        ours = runs.get((beam, th, "ours"), {})
        ratio = [float(ours[k]["decode_s"]) / float(r["decode_s"]) for k, r in reps.items() if k in ours]
        name = f"{eng}-b{beam}-t{th}"
        print(f"| {beam} | {th} | {eng} | {spread(sps, '{:.1f}')} | {spread(tps, '{:.0f}')} | "
              f"{'-' if eng == 'ours' else spread(ratio, '{:.2f}')} | {bleu.get(name, '-')} | "
              f"{'-' if eng == 'ours' else same_lines(f'{outputs}/{name}.txt', f'{outputs}/ours-b{beam}-t{th}.txt')} |")
    return 0


def main(argv):
    cmd, args = (argv[0], argv[1:]) if argv else ("", [])
    if cmd == "prep" and len(args) == 5:
        return prep(args[0], args[1], args[2], int(args[3]), args[4])
    if cmd == "run" and len(args) == 8:
        return run(*args)
    if cmd == "table" and len(args) == 3:
        return table(*args)
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "prep":
        analysis()[0].main_wrapper(main)
    sys.exit(main(sys.argv[1:]))
