#!/usr/bin/env python3
"""Import a Hugging Face MarianMT directory into one of our checkpoints.

    .venv-hf/bin/python analysis/hf_import.py HF_DIR CKPT.h5

reads HF_DIR/{config.json, model.safetensors, vocab.json} and writes CKPT.h5
(docs/checkpoint.md, has_adam = 0, like an average), which `eval`,
`translate`, `attention` and `heads` read.  A directory written by
hf_export.py comes back bitwise (parameters, config and run state); a
Marian model trained elsewhere is taken where it is an architecture this
model has, else refused in one line (docs/hf-export.md)."""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import AnalysisError, main_wrapper  # noqa: E402
import hf_marian as hm  # noqa: E402

# attribute types of checkpoint.c (checkpoint_write)
I64 = ("format_version", "step", "ranks", "update_freq", "data_position", "batches_per_epoch", "param_count",
       "has_adam", "loss_scale_good_steps", "loss_scale_skipped")
U64 = ("seed", "batch_plan_hash", "vocab_hash")
F64 = ("elapsed_seconds", "loss_scale")


def read_json(d, name):
    path = os.path.join(d, name)
    if not os.path.isfile(path):
        raise AnalysisError(d, f"no {name} (not a Hugging Face model directory?)")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise AnalysisError(path, f"unreadable JSON: {e}") from None


def refuse(d, what):
    raise AnalysisError(d, f"{what}: no architecture of this model (docs/hf-export.md)")


def check_marian(d, c):
    """The Marian configurations this model has; anything else is one line."""
    if c.get("model_type") != "marian":
        refuse(d, f"model_type {c.get('model_type')!r}, not 'marian'")
    act = c.get("activation_function", "gelu")
    if act != "relu":
        refuse(d, f"activation_function {act!r} (ours is ReLU, eq. 2)")
    checks = [
        (c.get("encoder_layers") == c.get("decoder_layers"), "encoder and decoder depths differ"),
        (c.get("encoder_ffn_dim") == c.get("decoder_ffn_dim"), "encoder and decoder d_ff differ"),
        (c.get("encoder_attention_heads") == c.get("decoder_attention_heads"), "encoder and decoder heads differ"),
        (c.get("scale_embedding", False), "embeddings not scaled by sqrt(d_model) (section 3.4)"),
        (c.get("share_encoder_decoder_embeddings", True) and c.get("tie_word_embeddings", True),
         "separate source/target/output embeddings (ours are one matrix, section 3.4)"),
        (c.get("decoder_vocab_size") in (None, c.get("vocab_size")), "separate target vocabulary"),
        (not c.get("normalize_before", False), "pre-norm layers (ours are post-norm)"),
        (not c.get("add_final_layer_norm", False) and not c.get("normalize_embedding", False),
         "extra LayerNorms"),
        (c.get("d_model", 0) % max(1, c.get("encoder_attention_heads", 1)) == 0, "d_model not a multiple of heads"),
    ]
    for ok, why in checks:
        if not ok:
            refuse(d, why)
    ids = {"pad_token_id": hm.PAD, "eos_token_id": hm.EOS, "decoder_start_token_id": hm.BOS}
    for key, want in ids.items():
        if c.get(key) != want:
            raise AnalysisError(d, f"{key} = {c.get(key)}, ours is {want} (pad 0, BOS = decoder start 1, EOS 2, unk 3): "
                                f"a vocabulary in another order is not supported")


def foreign_config(c):
    """Our config text for a Marian model this exporter did not write."""
    d, h = int(c["d_model"]), int(c["encoder_attention_heads"])
    keys = {"n_layers": c["encoder_layers"], "d_model": d, "d_ff": c["encoder_ffn_dim"], "n_heads": h,
            "d_k": d // h, "d_v": d // h, "vocab_size": c["vocab_size"],
            # sinusoids extrapolate; our decoder runs to 2 x max_len positions
            "max_len": max(2, int(c.get("max_position_embeddings", 512)) // 2),
            "positional": "sinusoid", "ln_eps": repr(hm.MARIAN_LN_EPS), "dropout": c.get("dropout", 0.1)}
    return "".join(f"{k} = {v}\n" for k, v in keys.items())


def load_tensors(d, cfg):
    load_file = hm.safetensors_numpy().load_file

    path = os.path.join(d, "model.safetensors")
    if not os.path.isfile(path):
        raise AnalysisError(d, "no model.safetensors (a pytorch_model.bin only: save it again with safetensors)")
    t = load_file(path)
    if "model.shared.weight" not in t and "model.encoder.embed_tokens.weight" in t:
        t["model.shared.weight"] = t["model.encoder.embed_tokens.weight"]
    E = t.get("model.shared.weight")
    for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
        if name in t and E is not None and not np.array_equal(t[name], E):
            refuse(d, f"{name} differs from model.shared.weight (untied embeddings)")
    for name in hm.marian_zero_biases(int(cfg["n_layers"])) + ["final_logits_bias"]:
        if name in t and np.any(t[name] != 0):
            refuse(d, f"{name} is not zero (our attention and output layer have no biases)")
    perm = hm.model_dim_permutation(int(cfg["d_model"]))
    params = {}
    for ours, hf, how in hm.tensor_map(int(cfg["n_layers"])):
        if hf not in t:
            raise AnalysisError(path, f"lacks {hf}")
        want = hm.expected_shape(ours, cfg)
        if tuple(t[hf].shape) != want:
            raise AnalysisError(path, f"{hf} has shape {list(t[hf].shape)}, config.json says {list(want)}")
        params[ours] = hm.from_marian(np.asarray(t[hf], dtype=np.float32), how, perm)
    return params


def vocab_pieces(d, V):
    vocab = read_json(d, "vocab.json")
    pieces = [None] * V
    for p, i in vocab.items():
        if 0 <= i < V:
            pieces[i] = p
    if any(p is None for p in pieces):
        raise AnalysisError(d, f"vocab.json does not name every id 0..{V - 1}")
    for piece, i in hm.SPECIAL.items():
        if pieces[i] != piece:
            raise AnalysisError(d, f"vocab.json: id {i} is {pieces[i]!r}, ours is {piece!r}")
    return pieces


def write_attr(f, k, v):
    if isinstance(v, str):
        f.attrs[k] = v
    elif k in U64:
        f.attrs.create(k, np.uint64(int(v)), dtype=np.uint64)
    elif k in I64:
        f.attrs.create(k, np.int64(int(v)), dtype=np.int64)
    elif k in F64:
        f.attrs.create(k, np.float64(v), dtype=np.float64)
    else:
        f.attrs[k] = v


def write_checkpoint(path, text, attrs, params):
    """Our checkpoint layout (src/checkpoint.c), under a temporary name then renamed."""
    import h5py

    tmp = f"{path}.tmp{os.getpid()}"
    with h5py.File(tmp, "w") as f:
        for k, v in attrs.items():
            write_attr(f, k, v)
        f.attrs["config"] = text
        for name, w in params.items():
            w = np.ascontiguousarray(w, dtype="<f4")
            if w.ndim == 2 and w.shape[1] == 1:
                w = w.reshape(-1)
            ds = f.create_dataset(f"params/{name}", data=w, dtype="<f4")
            ds.attrs.create("checksum", np.uint64(hm.checksum64(w.tobytes())), dtype=np.uint64)
    os.replace(tmp, path)


def write_vocab_dataset(path, hf_dir, pieces, max_len):
    """A dataset file with the vocabulary and SentencePiece model only
    (docs/dataset.md, no splits): what `translate --input` and `attention`
    need beside the checkpoint of a model trained elsewhere."""
    import datetime

    import h5py

    with open(os.path.join(hf_dir, "source.spm"), "rb") as f:
        spm = f.read()
    if os.path.exists(os.path.join(hf_dir, "target.spm")):
        with open(os.path.join(hf_dir, "target.spm"), "rb") as f:
            if f.read() != spm:
                refuse(hf_dir, "source.spm and target.spm differ (ours is one shared vocabulary, section 5.1)")
    tmp = f"{path}.tmp{os.getpid()}"
    with h5py.File(tmp, "w") as f:
        f.attrs["format"] = "transformer-dataset"
        for k, v in (("format_version", 1), ("vocab_size", len(pieces)), ("max_len", max_len), ("pad_id", hm.PAD),
                     ("bos_id", hm.BOS), ("eos_id", hm.EOS), ("unk_id", hm.UNK)):
            f.attrs.create(k, np.int64(v), dtype=np.int64)
        f.attrs["split_names"] = np.array([], dtype=h5py.string_dtype())
        f.attrs["spm_options"] = f"(SentencePiece model of {os.path.abspath(hf_dir)})"
        f.attrs["command"] = "hf_import.py " + " ".join(sys.argv[1:])
        f.attrs["created"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        f.create_dataset("vocab/pieces", data=pieces, dtype=h5py.string_dtype())
        f.create_dataset("vocab/spm_model", data=np.frombuffer(spm, dtype=np.uint8))
    os.replace(tmp, path)


def do_import(args):
    d = args.hf_dir
    if not os.path.isdir(d):
        raise AnalysisError(d, "no such directory")
    c = read_json(d, "config.json")
    check_marian(d, c)
    extra = c.get(hm.EXTRA_KEY)
    if extra:
        text = extra["config"]
        cfg = dict(l.split(" = ", 1) for l in text.splitlines() if " = " in l)
    else:
        text = foreign_config(c)
        cfg = dict(l.split(" = ", 1) for l in text.splitlines())
    N, dm, V = int(cfg["n_layers"]), int(cfg["d_model"]), int(cfg["vocab_size"])
    if (N, dm, V) != (c["encoder_layers"], c["d_model"], c["vocab_size"]):
        raise AnalysisError(d, "config.json and its transformer_checkpoint entry disagree")
    params = load_tensors(d, cfg)
    pieces = vocab_pieces(d, V)
    attrs = dict(extra["attrs"]) if extra else {}
    attrs.update({"format": "transformer-checkpoint", "format_version": 1})
    if "version" not in attrs:
        attrs["version"] = f"hf_import of {os.path.basename(os.path.abspath(d))}"
    for k, v in (("step", 0), ("elapsed_seconds", 0.0), ("seed", 0), ("ranks", 1), ("update_freq", 1),
                 ("data_position", 0), ("batch_plan_hash", 0), ("batches_per_epoch", 0)):
        attrs.setdefault(k, v)
    attrs["param_count"] = sum(w.size for w in params.values())
    attrs["has_adam"] = 0
    attrs["vocab_hash"] = hm.vocab_hash(pieces)
    write_checkpoint(args.checkpoint, text, attrs, params)
    if args.data_out:
        write_vocab_dataset(args.data_out, d, pieces, int(cfg["max_len"]))
    print(f"hf_import: {args.checkpoint}: {N} layers, d_model {dm}, vocab {V}, {attrs['param_count']} parameters"
          + ("" if extra else f" (a foreign Marian model: ln_eps = {hm.MARIAN_LN_EPS:g}, step 0)"))
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("hf_dir", help="a MarianMT directory (config.json, model.safetensors, vocab.json)")
    ap.add_argument("checkpoint", help="the checkpoint to write")
    ap.add_argument("--data-out", metavar="DATA.h5",
                    help="also write a dataset file holding only the vocabulary and SentencePiece model "
                         "(for `translate --input` with a model trained elsewhere)")
    return do_import(ap.parse_args(argv))


if __name__ == "__main__":
    main_wrapper(main)
