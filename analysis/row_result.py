#!/usr/bin/env python3
"""Write (or read back) the result file of one Table 3 row: SWEEP/results/<row>.h5.

The sweep job calls this once per row after training and dev evaluation (and
may call it with --status pending before, or --status failed on an error).
The format is documented in docs/results.md.  The file is written to a
temporary name, fsynced and renamed, so a reader never sees half a file.

Examples:
  row_result.py --out SWEEP/results/A1.h5 --config input/table3/A1.cfg \\
      --set train_steps=200 --params 4473344 --metrics RUN/metrics.h5 \\
      --dev-bleu 12.3 --dev-bleu-tok 12.9 --status done
  row_result.py --out SWEEP/results/A1.h5 --config input/table3/A1.cfg \\
      --metrics RUN/metrics.h5 --hyp-set dev.final DEV.hyp DEV.ref \\
      --hyp-set test2016.avg5 T16.hyp T16.ref --compute device=cpu --compute threads=1
  row_result.py --out SWEEP/results/A1.h5 --config input/table3/A1.cfg \\
      --status failed --message "train exited 2: bad key"
  row_result.py --show SWEEP/results/A1.h5
  row_result.py --verdict SWEEP/results/A1.h5     # prints e.g. "healthy dev NLL ..."
"""

import argparse
import math
import os
import re
import sys
import time

import numpy as np

from common import ArgumentParser, AnalysisError, attr_float, attr_str, h5_atomic, main_wrapper, open_h5, output_not_input

FORMAT = "transformer-row-result"
FORMAT_VERSION = 2  # 2: curves, hypotheses, held-out BLEU, compute, verdict; 1 is still read
STATUSES = ("done", "failed", "pending")
# numeric attributes: name -> (type, meaning); NaN (or -1 for integers) = not known
NUMERIC = {
    "params": (np.int64, "exact parameter count (transformer params)"),
    "train_steps": (np.int64, "optimizer steps trained"),
    "dev_loss": (np.float64, "dev label-smoothed loss per target token"),
    "dev_ppl": (np.float64, "dev perplexity per target wordpiece (unsmoothed)"),
    "dev_bleu": (np.float64, "dev sacreBLEU, 13a, mixed case (beam search, no checkpoint averaging)"),
    "dev_bleu_tok": (np.float64, "dev tokenised BLEU: Moses tokens, multi-bleu.perl (the paper's kind)"),
    "wall_seconds": (np.float64, "training wall time in seconds"),
    "paper_ppl": (np.float64, "the paper's Table 3 dev PPL for this row"),
    "paper_bleu": (np.float64, "the paper's Table 3 dev BLEU for this row"),
    "paper_params_m": (np.float64, "the paper's Table 3 parameters x 10^6"),
    # version 2: compute (--compute and the metrics log)
    "tokens_seen": (np.float64, "target tokens trained on (sum over the log of tokens/s x interval)"),
    "epochs": (np.float64, "tokens_seen / target tokens per epoch"),
    "matrix_params": (np.int64, "parameters of the matrix products (layers and output projection)"),
    "train_flops": (np.float64, "training FLOPs: 6 matrix_params tokens + attention (docs/results.md)"),
    "threads": (np.int64, "threads per rank"),
    "ranks": (np.int64, "MPI ranks"),
    "peak_lr": (np.float64, "peak learning rate"),
    "warmup": (np.int64, "warmup updates"),
    "eval_seconds": (np.float64, "decoding / evaluation wall time in seconds"),
    "unigram_nll": (np.float64, "dev NLL of the training targets' unigram model (the plateau)"),
    "stop_step": (np.int64, "step where early stopping (patience) ended the run; -1: it did not"),
    "best_step": (np.int64, "step of the best dev evaluation (the trainer's best_step)"),
}
# version 2 string attributes: name -> meaning ('' = not known)
STRINGS = {
    "host_cpu": "CPU model",
    "device": "cpu or the GPU's name",
    "precision": "the training precision: fp32, tf32, bf16 or fp16 (--compute, else the config's, else fp32)",
    "lr_rule": "the learning-rate rule of the sweep, in words",
    "verdict": "healthy, diverged, stuck or unstable (analysis/verdict.py); unknown without curves",
    "verdict_reason": "why, in one line",
    "stopped_by": "how training ended: patience (early stopping) or train_steps; '' unknown",
    "bleu_signature": "sacreBLEU signature of every BLEU in the file",
    "reported_checkpoint": "the checkpoint of the dev and 'final' scores: best (keep_best) or final; '' final",
}
# --compute KEY=VALUE: key -> type; the attributes above plus the inputs of the derived ones
COMPUTE_KEYS = {"host_cpu": str, "device": str, "precision": str, "lr_rule": str, "reported_checkpoint": str,
                "threads": int, "ranks": int,
                "peak_lr": float, "warmup": int, "wall_seconds": float, "eval_seconds": float,
                "epoch_tokens": float, "tokens_seen": float, "mean_len": float, "unigram_nll": float}
CURVES = ("train_step", "train_loss", "train_lr", "dev_step", "dev_loss", "dev_nll")


def parse_config_text(text, origin="config"):
    """Parse `key = value` lines ('#' starts a comment), as src/config.c does.
    Returns an ordered dict key -> value string."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" not in line:
            raise AnalysisError(f"{origin}:{n}", f"expected 'key = value', got '{line}'")
        k, v = line.split("=", 1)
        k, v = k.strip(), v.strip()
        if not k:
            raise AnalysisError(f"{origin}:{n}", "empty key")
        out[k] = v
    return out


def config_to_text(cfg):
    return "".join(f"{k} = {v}\n" for k, v in cfg.items())


def cfg_float(cfg, key):
    """A numeric config value, NaN when absent or 0 (the config's 'no paper number')."""
    try:
        v = float(cfg[key])
    except (KeyError, ValueError):
        return float("nan")
    return v if v != 0 else float("nan")


def read_result(path):
    """Read a row result file into a dict (raises AnalysisError if it is not one).
    Version 2 adds curves (dict of arrays), hyp_sets (names), bleu (name ->
    (sacreBLEU, tokenised BLEU)) and the STRINGS; a version 1 file reads
    with them empty."""
    with open_h5(path) as f:
        if attr_str(f, "format") != FORMAT:
            raise AnalysisError(path, f"not a Table 3 row result (no attribute format='{FORMAT}')")
        r = {"path": path, "format_version": int(attr_float(f, "format_version", 0))}
        for k in ("row", "status", "config", "message", "created"):
            r[k] = attr_str(f, k, "")
        for k, (t, _) in NUMERIC.items():
            v = attr_float(f, k)
            if t is np.int64:
                v = int(v) if math.isfinite(v) and v >= 0 else None
            r[k] = v
        for k in STRINGS:
            r[k] = attr_str(f, k, "")
        r["curves"] = {k: np.asarray(f["curves"][k][()], float) for k in CURVES
                       if "curves" in f and k in f["curves"]}
        r["hyp_sets"] = sorted(f["hyps"]) if "hyps" in f else []
        r["bleu"] = {k[5:]: (attr_float(f, k), attr_float(f, "bleu_tok_" + k[5:])) for k in f.attrs
                     if k.startswith("bleu_") and not k.startswith("bleu_tok_") and k != "bleu_signature"}
    if r["status"] not in STATUSES:
        raise AnalysisError(path, f"status '{r['status']}' is not one of {', '.join(STATUSES)}")
    if not r["row"]:
        raise AnalysisError(path, "attribute 'row' is empty")
    r["cfg"] = parse_config_text(r["config"], f"{path}:config")
    return r


def testset_of(name):
    """The test set of a hypothesis set name: 'test2016.avg5' -> 'test2016'."""
    return name.split(".", 1)[0]


def lines_to_bytes(lines):
    return np.frombuffer("\n".join(lines).encode("utf-8"), dtype=np.uint8)


def bytes_to_lines(ds):
    b = np.asarray(ds[()], dtype=np.uint8).tobytes()
    return b.decode("utf-8").split("\n") if b else []


def read_hyp_set(path, name):
    """(hypothesis lines, reference lines) of hypothesis set name in a version 2 file."""
    with open_h5(path) as f:
        if f"hyps/{name}" not in f:
            raise AnalysisError(path, f"no hypothesis set '{name}'")
        ref = f.get(f"refs/{testset_of(name)}")
        return bytes_to_lines(f[f"hyps/{name}"]), (bytes_to_lines(ref) if ref is not None else [])


def write_result(path, attrs, curves=None, texts=None):
    """Write attrs (str / int / float values) as root attributes of a new HDF5
    file at path, atomically; curves (name -> 1-D array) as gzip float32
    datasets /curves/NAME, texts (HDF5 path -> lines) as gzip UTF-8 byte
    datasets (lines joined by newlines: HDF5 compresses no variable-length
    strings, whose characters live in a heap the filters never see)."""
    import h5py

    with h5_atomic(path) as f:
        for k, v in attrs.items():
            if isinstance(v, str):
                f.attrs.create(k, v, dtype=h5py.string_dtype("utf-8"))
            else:
                f.attrs[k] = v
        for k, v in (curves or {}).items():
            f.create_dataset(f"curves/{k}", data=np.asarray(v, np.float32), compression="gzip",
                             chunks=True if len(v) else None)
        for k, lines in (texts or {}).items():
            data = lines_to_bytes(lines)
            ds = f.create_dataset(k, data=data, compression="gzip" if len(data) else None,
                                  chunks=True if len(data) else None)
            ds.attrs["lines"] = np.int64(len(lines))
            ds.attrs.create("encoding", "utf-8 lines joined by \\n", dtype=h5py.string_dtype("utf-8"))


def logged_tokens(path, n):
    """/train/tokens of a metrics log (target tokens per interval, logged
    since 03612f5; NaN in rows an older version logged), or None."""
    import h5py

    with h5py.File(path, "r") as f:
        ds = f.get("train/tokens")
        if not isinstance(ds, h5py.Dataset) or ds.shape != (n,):
            return None
        return np.asarray(ds[()], dtype=np.float64)


def tokens_seen(m, logged=None):
    """Target tokens trained on: the sum of the logged tokens per interval;
    where they are not logged, tokens/s times the interval's length (the
    trainer divides the interval's tokens by that time, src/train.c
    log_progress); NaN without either."""
    tps, el = m["tokens_per_s"], m["elapsed"]
    if len(tps) and len(el) == len(tps):
        est = tps * np.maximum(np.diff(np.concatenate([[0.0], el])), 0.0)
    else:
        est = np.full(len(m["step"]), np.nan)
    if logged is not None and len(logged) == len(est):
        est = np.where(np.isfinite(logged), logged, est)
    return float(np.sum(est)) if len(est) and np.all(np.isfinite(est)) else float("nan")


def curves_of(m):
    """The curves stored in a version 2 file, from read_metrics()'s series."""
    with np.errstate(divide="ignore", invalid="ignore"):
        nll = np.log(m["dev_ppl"])
    return {"train_step": m["step"], "train_loss": m["loss"], "train_lr": m["lr"],
            "dev_step": m["dev_step"], "dev_loss": m["dev_loss"], "dev_nll": nll}


def from_metrics(path):
    """(numbers, curves) from a run's metrics.h5: last training step,
    elapsed time, last dev loss/PPL and the target tokens trained on."""
    from curves import read_metrics

    m = read_metrics(path)
    out = {}
    if len(m["step"]):
        out["train_steps"] = int(m["step"][-1])
    if len(m["elapsed"]):
        out["wall_seconds"] = float(m["elapsed"][-1])
    if len(m["dev_ppl"]):
        out["dev_ppl"] = float(m["dev_ppl"][-1])
    if len(m["dev_loss"]):
        out["dev_loss"] = float(m["dev_loss"][-1])
    out["tokens_seen"] = tokens_seen(m, logged_tokens(path, len(m["step"])))
    out.update(how_it_ended(path))
    return out, curves_of(m)


def how_it_ended(path):
    """The trainer's root attributes of metrics.h5 (docs/metrics.md):
    stopped_by, stop_step (kept only for a stop by patience), best_step."""
    import h5py

    with h5py.File(path, "r") as f:
        a = dict(f.attrs)
    out = {}
    if "stopped_by" in a:
        out["stopped_by"] = str(a["stopped_by"].decode() if isinstance(a["stopped_by"], bytes) else a["stopped_by"])
        if out["stopped_by"] == "patience" and "stop_step" in a:
            out["stop_step"] = int(a["stop_step"])
    if "best_step" in a:
        out["best_step"] = int(a["best_step"])
    return out


def read_text(p):
    """A text file's contents; unreadable or not UTF-8 is the one-line error."""
    try:
        with open(p, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise AnalysisError(p, e.strerror or "cannot read") from None
    except UnicodeDecodeError as e:
        raise AnalysisError(p, f"not UTF-8 text (byte {e.start})") from None


def read_text_lines(p):
    """The lines of a hypothesis or reference file; an empty one is refused
    (sacreBLEU failed on it with an IndexError)."""
    lines = read_text(p).split("\n")   # not splitlines(): \f or \x85 inside a line is no break
    if lines[-1] == "":
        lines.pop()
    if not lines:
        raise AnalysisError(p, "empty: no lines to score")
    return lines


def bleu_of_lines(h, r, lang="de", origin="hypotheses"):
    """(sacreBLEU 13a, tokenised BLEU, sacreBLEU signature) of hypothesis
    lines h against reference lines r, both kinds of analysis/bleu.py."""
    from bleu import scores

    if len(h) != len(r):
        raise AnalysisError(origin, f"{len(h)} lines but the reference has {len(r)}")
    sacre, sig, tok = scores(h, [r], lang=lang)
    return float(sacre.score), float(tok.score), sig


def bleu_scores(hyp_path, ref_path, lang="de"):
    """bleu_of_lines() of two files."""
    h, r = read_text_lines(hyp_path), read_text_lines(ref_path)
    if len(h) != len(r):
        raise AnalysisError(hyp_path, f"{len(h)} lines but the reference {ref_path} has {len(r)}")
    return bleu_of_lines(h, r, lang, hyp_path)


def hyp_sets(sets, lang):
    """--hyp-set NAME HYP REF ...: (attributes bleu_NAME / bleu_tok_NAME, the
    signature, texts {hyps/NAME, refs/TESTSET: lines})."""
    attrs, texts, sig = {}, {}, ""
    for name, hyp, ref in sets:
        if not re.fullmatch(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)?", name):
            raise AnalysisError("--hyp-set", f"'{name}' is not a name like test2016.avg5")
        if f"hyps/{name}" in texts:
            raise AnalysisError("--hyp-set", f"'{name}' given twice")
        h, r = read_text_lines(hyp), read_text_lines(ref)
        key = f"refs/{testset_of(name)}"
        if key in texts and texts[key] != r:
            raise AnalysisError(ref, f"references of {testset_of(name)} differ from those given before")
        attrs[f"bleu_{name}"], attrs[f"bleu_tok_{name}"], sig = bleu_of_lines(h, r, lang, hyp)
        texts[f"hyps/{name}"], texts[key] = h, r
    return attrs, sig, texts


def parse_compute(items):
    """--compute KEY=VALUE ... -> dict key -> typed value."""
    out = {}
    for s in items:
        k, eq, v = s.partition("=")
        k = k.strip()
        if not eq or k not in COMPUTE_KEYS:
            raise AnalysisError("--compute", f"'{s}' is not KEY=VALUE with KEY one of {', '.join(COMPUTE_KEYS)}")
        if not v.strip() or (k in ("threads", "ranks") and v.strip() in ("0", "unknown")) or v.strip() == "unknown":
            continue  # KEY=, threads=0, KEY=unknown: not known (a job script passes what it could find out)
        try:
            out[k] = COMPUTE_KEYS[k](v.strip()) if COMPUTE_KEYS[k] is not int else int(float(v))
        except ValueError:
            kind = "an integer" if COMPUTE_KEYS[k] is int else "a number"
            raise AnalysisError("--compute", f"{k}: '{v}' is not {kind}") from None
    return out


def cfg_int(cfg, key, default=None):
    try:
        return int(float(cfg[key]))
    except (KeyError, ValueError):
        return default


def matrix_params(cfg):
    """Parameters of the matrix products per target token: per layer the
    attention projections (Q, K: d_model h d_k each, V: d_model h d_v, output
    h d_v d_model; the decoder has two attention blocks) and the FFN (2
    d_model d_ff), and the output projection d_model V. None without the keys."""
    k = [cfg_int(cfg, x) for x in ("n_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v", "vocab_size")]
    if None in k:
        return None
    n, d, ff, h, dk, dv, vocab = k
    attn, ffn = d * h * (2 * dk + dv) + h * dv * d, 2 * d * ff
    return n * (attn + ffn) + n * (2 * attn + ffn) + d * vocab


def train_flops(cfg, tokens, mean_len):
    """6 x matrix_params x tokens (forward and backward of every matrix
    product, Kaplan et al. 2020) plus the attention products: per target
    token 18 N h (d_k + d_v) L (QK^T and AV of the encoder self-, decoder
    self- and cross-attention, source length taken equal to the target
    length L, times 3 for the backward pass); NaN without the inputs."""
    pm = matrix_params(cfg)
    if pm is None or not math.isfinite(tokens):
        return float("nan")
    n, h, dk, dv = (cfg_int(cfg, x) for x in ("n_layers", "n_heads", "d_k", "d_v"))
    attn = 18.0 * n * h * (dk + dv) * mean_len if math.isfinite(mean_len) else 0.0
    return (6.0 * pm + attn) * tokens


def dataset_facts(path):
    """From the run's dataset file (docs/dataset.md): the training targets'
    tokens per epoch and mean length (with EOS), and the dev NLL of their
    unigram model (add-0.5 counts): the plateau of docs/results.md. {} if the
    file cannot be read."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            tr, ntr = f["splits/train/tgt_ids"][()], len(f["splits/train/tgt_offsets"]) - 1
            dv, ndv = f["splits/dev/tgt_ids"][()], len(f["splits/dev/tgt_offsets"]) - 1
            vocab, eos = int(f.attrs["vocab_size"]), int(f.attrs.get("eos_id", 2))
    except (OSError, KeyError, ValueError):
        return {}
    counts = np.bincount(tr, minlength=vocab)[:vocab].astype(float) + 0.5
    counts[eos] += ntr
    p = counts / counts.sum()
    dev_nll = -(np.log(p[dv]).sum() + ndv * np.log(p[eos])) / (len(dv) + ndv)
    return {"epoch_tokens": float(len(tr) + ntr), "mean_len": (len(tr) + ntr) / max(ntr, 1),
            "unigram_nll": float(dev_nll)}


def data_path(cfg, given):
    """The dataset file: --data, else the config's data key (relative to the
    working directory, else to this checkout).  A --data that is not a
    dataset is refused (it was ignored: the compute attributes went unknown
    without a word); the config's key stays a best effort."""
    if given:
        if not os.path.isfile(given):
            raise AnalysisError(given, "no such file" if not os.path.exists(given) else "not a file")
        if not dataset_facts(given):
            raise AnalysisError(given, "not a dataset file with train and dev splits (docs/dataset.md)")
        return given
    d = cfg.get("data", "")
    if not d:
        return None
    for p in (d, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", d)):
        if os.path.isfile(p):
            return p
    return None


def compute_attrs(cfg, comp, vals, data):
    """The compute attributes: --compute values, tokens seen, epochs, FLOPs."""
    facts = dataset_facts(data) if data else {}
    facts.update(comp)
    out = {k: comp[k] for k in ("threads", "ranks", "peak_lr", "warmup", "wall_seconds", "eval_seconds",
                                "tokens_seen", "unigram_nll") if k in comp}
    if "unigram_nll" in facts:
        out["unigram_nll"] = facts["unigram_nll"]
    tokens = out.get("tokens_seen", vals.get("tokens_seen", float("nan")))
    out["tokens_seen"] = tokens
    out["epochs"] = tokens / facts["epoch_tokens"] if facts.get("epoch_tokens") else float("nan")
    out["matrix_params"] = matrix_params(cfg) or -1
    out["train_flops"] = train_flops(cfg, tokens, facts.get("mean_len", float("nan")))
    strings = {k: str(comp.get(k, "")) for k in ("host_cpu", "device", "lr_rule", "reported_checkpoint")}
    # the trainer's default precision is fp32 (src/config.c)
    strings["precision"] = str(comp.get("precision") or cfg.get("precision") or "fp32")
    return out, strings


def verdict_of(curves, cfg, unigram_nll, message="", stop_step=None, best_step=None):
    """(verdict, reason) of the curves (analysis/verdict.py).  The trainer
    stops at a non-finite loss before logging it (src/train.c): a failed
    run whose message says so diverged, whatever its curves show.  A run
    that early stopping ended (stop_step) is judged over the steps it ran;
    best_step: the trainer's (a fall of more than patience_delta)."""
    from verdict import verdict

    if "not finite" in message:
        return "diverged", message
    if not curves:
        return "unknown", "no curves (no --metrics)"
    stopped = stop_step if stop_step is not None and stop_step > 0 else None
    return verdict(curves, unigram_nll, cfg_int(cfg, "train_steps"), stopped, best_step)


def show(path):
    r = read_result(path)
    print(f"{path}: row {r['row']} status {r['status']} (format version {r['format_version']})")
    for k in NUMERIC:
        print(f"  {k:15s} {r[k]}")
    for k in STRINGS:
        if r[k]:
            print(f"  {k:15s} {r[k]}")
    for name, (sacre, tok) in sorted(r["bleu"].items()):
        print(f"  bleu {name:15s} sacreBLEU {sacre:.2f} tokenised {tok:.2f}")
    for k, v in r["curves"].items():
        print(f"  curve {k:14s} {len(v)} points")
    if r["message"]:
        print(f"  message         {r['message']}")
    return 0


def verdict_line(path):
    """'VERDICT reason' of the result file: the stored verdict, else (a
    version 1 file) judged from its curves."""
    r = read_result(path)
    v, why = r["verdict"], r["verdict_reason"]
    if not v:
        v, why = verdict_of(r["curves"], r["cfg"], r["unigram_nll"], stop_step=r["stop_step"],
                            best_step=r.get("best_step"))
    return f"{v} {why}"


def show_verdict(path):
    """--verdict: one line 'VERDICT reason'."""
    print(verdict_line(path))
    return 0


def show_state(path):
    """--state: one line 'STATUS STOPPED_BY TRAIN_STEPS VERDICT reason' of the
    result file for the sweep's job scripts (jobs/table3-stages.sh
    row_state): what they ask of a row in one start of Python, where one a
    field cost 0.3 s each; '-' for a field the file lacks, and for a verdict
    that cannot be judged (no curves)."""
    with open_h5(path) as f:
        fields = [attr_str(f, k) or "-" for k in ("status", "stopped_by")]
        steps = f.attrs.get("train_steps")
        fields.append("-" if steps is None else str(int(steps)))
    try:
        fields.append(verdict_line(path))
    except AnalysisError:
        fields.append("-")
    print(" ".join(fields))
    return 0


def not_negative(t):
    """An argparse type: t(text) that is not negative (NaN, "not known", and
    inf, refused later, pass): "--dev-ppl -3" was stored as given."""
    def parse(text):
        try:
            v = t(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: not a number") from None
        if v < 0:
            raise argparse.ArgumentTypeError(f"{v}: must not be negative")
        return v
    return parse


def build_parser():
    p = ArgumentParser(
        prog="row_result.py",
        description="Write the HDF5 result file of one Table 3 sweep row (docs/results.md), "
                    "or print one with --show or its failure verdict with --verdict.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2],
    )
    p.add_argument("--show", metavar="F", help="print the result file F and exit")
    p.add_argument("--verdict", metavar="F", help="print 'VERDICT reason' of the result file F and exit")
    p.add_argument("--state", metavar="F", help="print 'STATUS STOPPED_BY TRAIN_STEPS VERDICT reason' of the "
                                               "result file F ('-': not in it) and exit (for the job scripts)")
    p.add_argument("--out", metavar="F", help="result file to write (SWEEP/results/<row>.h5)")
    p.add_argument("--row", help="row name (default: the config's 'row' key, else the config file's name)")
    p.add_argument("--config", metavar="CFG", help="the row's config file (its text is stored)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="a command-line override the run used (e.g. train_steps=200); repeatable")
    p.add_argument("--status", choices=STATUSES, default="done")
    p.add_argument("--message", default="", help="why a row failed (one line)")
    p.add_argument("--params", type=not_negative(int), help="exact parameter count ('params N' of transformer params)")
    p.add_argument("--steps", type=not_negative(int), dest="train_steps", help="training steps done")
    p.add_argument("--dev-loss", type=not_negative(float))
    p.add_argument("--dev-ppl", type=not_negative(float))
    p.add_argument("--dev-bleu", type=not_negative(float), help="dev sacreBLEU (13a)")
    p.add_argument("--dev-bleu-tok", type=not_negative(float),
                   help="dev tokenised BLEU (Moses tokens, multi-bleu.perl)")
    p.add_argument("--wall", type=not_negative(float), dest="wall_seconds", help="training wall time, seconds")
    p.add_argument("--metrics", metavar="METRICS_H5",
                   help="take steps, wall time, the last dev loss/PPL, tokens seen and the curves "
                        "(stored, and judged: verdict) from the run's metrics.h5 (explicit options win)")
    p.add_argument("--hyp", help="decoded dev translations (one per line): dev sacreBLEU and tokenised "
                                 "BLEU by analysis/bleu.py; the same as --hyp-set dev.final HYP REF")
    p.add_argument("--ref", help="dev references (one per line), with --hyp")
    p.add_argument("--hyp-set", nargs=3, action="append", default=[], metavar=("NAME", "HYP", "REF"),
                   help="translations HYP of a test set with references REF, stored with both BLEUs as "
                        "NAME (TESTSET.CHECKPOINT: dev.final, test2016.final, test2016.avg5, ...); repeatable")
    p.add_argument("--compute", metavar="KEY=VALUE", action="append", default=[],
                   help="compute facts of the run: " + ", ".join(COMPUTE_KEYS) + "; repeatable")
    p.add_argument("--data", metavar="DATA_H5",
                   help="the run's dataset file (default: the config's data key): epoch size, mean "
                        "length and the unigram plateau")
    p.add_argument("--lang", default="de", help="target language of the Moses tokenizer (default: de)")
    p.add_argument("--paper-ppl", type=float)
    p.add_argument("--paper-bleu", type=float)
    p.add_argument("--paper-params-m", type=float)
    return p


def load_config(a):
    """The row's config (file plus --set overrides) and its name."""
    cfg = {}
    if a.config:
        cfg = parse_config_text(read_text(a.config), a.config)
    for s in a.set:
        if "=" not in s:
            raise AnalysisError("--set", f"'{s}' is not KEY=VALUE")
        k, v = s.split("=", 1)
        cfg[k.strip()] = v.strip()
    row = a.row or cfg.get("row") or (os.path.splitext(os.path.basename(a.config))[0] if a.config else "")
    if not row:
        raise AnalysisError("row_result.py", "no row name: give --row or a --config with a 'row' key")
    cfg.setdefault("row", row)
    return cfg, row


def metrics_values(a):
    """(numbers, curves) of --metrics; a failed or pending row ignores an unreadable log."""
    if not a.metrics:
        return {}, {}
    try:
        return from_metrics(a.metrics)
    except AnalysisError as e:
        if a.status == "done":
            raise
        # recording a failure must not fail on the failed run's log
        print(f"warning: {e.thing}: {e.problem} (ignored for a {a.status} row)", file=sys.stderr)
        return {}, {}


def typed_numbers(vals, a):
    """The NUMERIC attributes, explicit options over computed values, typed and checked."""
    for k in NUMERIC:
        v = getattr(a, k, None)
        if v is not None:
            vals[k] = v
    for k, (t, _) in NUMERIC.items():
        vals[k] = t(vals[k])
        if t is np.float64 and math.isinf(vals[k]):
            raise AnalysisError(f"--{k.replace('_', '-')}", "value is infinite")
    if a.status == "done" and not math.isfinite(vals["dev_ppl"]):
        raise AnalysisError("row_result.py", "status done needs the dev PPL (--dev-ppl or --metrics)")
    return vals


def main(argv):
    a = build_parser().parse_args(argv)
    if a.show:
        return show(a.show)
    if a.verdict:
        return show_verdict(a.verdict)
    if a.state:
        return show_state(a.state)
    if not a.out:
        raise AnalysisError("row_result.py", "--out (or --show, --verdict) is required")
    # "--out RUN/metrics.h5" replaced the training log with the result file
    output_not_input("row_result.py", "--out", a.out, a.config, a.metrics, a.hyp, a.ref, a.data,
                     *(p for _, hyp, ref in a.hyp_set for p in (hyp, ref)))
    cfg, row = load_config(a)
    comp = parse_compute(a.compute)
    vals = {k: (-1 if t is np.int64 else float("nan")) for k, (t, _) in NUMERIC.items()}
    vals["train_steps"] = cfg_int(cfg, "train_steps", -1)
    for k in ("paper_ppl", "paper_bleu", "paper_params_m"):
        vals[k] = cfg_float(cfg, k)
    got, curves = metrics_values(a)
    stopped_by = got.pop("stopped_by", "")
    vals.update(got)
    if a.hyp or a.ref:
        if not (a.hyp and a.ref):
            raise AnalysisError("row_result.py", "--hyp and --ref go together")
        a.hyp_set.insert(0, ["dev.final", a.hyp, a.ref])
    bleu, sig, texts = hyp_sets(a.hyp_set, a.lang)
    if "bleu_dev.final" in bleu:
        vals["dev_bleu"], vals["dev_bleu_tok"] = bleu["bleu_dev.final"], bleu["bleu_tok_dev.final"]
    extra, strings = compute_attrs(cfg, comp, vals, data_path(cfg, a.data))
    vals.update(extra)
    vals = typed_numbers(vals, a)
    strings["verdict"], strings["verdict_reason"] = verdict_of(curves, cfg, vals["unigram_nll"], a.message,
                                                               vals["stop_step"], vals.get("best_step"))
    strings["stopped_by"] = stopped_by
    strings["bleu_signature"] = sig
    attrs = {
        "format": FORMAT,
        "format_version": np.int32(FORMAT_VERSION),
        "row": row,
        "status": a.status,
        "message": a.message.replace("\n", " "),
        "config": config_to_text(cfg),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    attrs.update(strings)
    attrs.update(vals)
    attrs.update({k: np.float64(v) for k, v in bleu.items()})
    write_result(a.out, attrs, curves, texts)
    return 0


if __name__ == "__main__":
    main_wrapper(main)
