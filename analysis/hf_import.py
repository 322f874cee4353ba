#!/usr/bin/env python3
"""Import a Hugging Face MarianMT directory into one of our checkpoints.

    .venv-hf/bin/python analysis/hf_import.py HF_DIR CKPT.h5

reads HF_DIR/{config.json, model.safetensors (or its shards), vocab.json,
source.spm} and writes CKPT.h5
(docs/checkpoint.md, has_adam = 0, like an average), which `eval`,
`translate`, `attention` and `heads` read.  A directory written by
hf_export.py comes back bitwise (parameters, config and run state); a
Marian model trained elsewhere is taken where it is an architecture this
model has, else refused in one line (docs/hf-export.md).  Everything is
checked before anything is written, and a refusal leaves no file."""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ArgumentParser, AnalysisError, check_output, main_wrapper, output_not_input  # noqa: E402
import hf_marian as hm  # noqa: E402

# attribute types of checkpoint.c (checkpoint_write)
I64 = ("format_version", "step", "ranks", "update_freq", "data_position", "batches_per_epoch", "param_count",
       "has_adam", "loss_scale_good_steps", "loss_scale_skipped")
U64 = ("seed", "batch_plan_hash", "vocab_hash")
F64 = ("elapsed_seconds", "loss_scale")
# keys of MarianConfig that MarianMTModel never reads (checked in 4.40.2 and
# current): its layers are post-norm whatever they say, so a model trained
# with them in transformers is our architecture
IGNORED_KEYS = ("normalize_before", "add_final_layer_norm", "normalize_embedding")
SIZE_KEYS = ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
             "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings")
# our config keys and the config.json keys that must agree: the heads and
# d_ff too (more heads of the same d_model have the same tensor shapes)
SAME_SIZES = (("n_layers", "encoder_layers"), ("d_model", "d_model"), ("vocab_size", "vocab_size"),
              ("n_heads", "encoder_attention_heads"), ("d_ff", "encoder_ffn_dim"))
POSITIONS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
# stored sinusoids may have been computed in float32 (rounding of pos/10000^x
# up to 512 positions: ~3e-5) or stored in bf16 (2^-8 of 1); perturbed or
# trained positions differ by far more
POSITION_TOL = {"F32": 1e-4, "F16": 1e-3, "BF16": 8e-3}


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
    """The Marian configurations this model has; anything else is one line.
    Returns notes on keys transformers ignores."""
    if c.get("model_type") != "marian":
        refuse(d, f"model_type {c.get('model_type')!r}, not 'marian'")
    for key in SIZE_KEYS:
        v = c.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise AnalysisError(os.path.join(d, "config.json"), f"{key} = {v!r}, not a positive integer")
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
    return [f"config.json's {k} = {c[k]} ignored, as transformers' MarianMTModel ignores it (post-norm, "
            f"no extra LayerNorms)" for k in IGNORED_KEYS if c.get(k)]


def foreign_config(c):
    """Our config text for a Marian model this exporter did not write."""
    d, h = int(c["d_model"]), int(c["encoder_attention_heads"])
    keys = {"n_layers": c["encoder_layers"], "d_model": d, "d_ff": c["encoder_ffn_dim"], "n_heads": h,
            "d_k": d // h, "d_v": d // h, "vocab_size": c["vocab_size"],
            # sinusoids extrapolate; our decoder runs to 2 x max_len positions
            "max_len": max(2, int(c.get("max_position_embeddings", 512)) // 2),
            "positional": "sinusoid", "ln_eps": repr(hm.MARIAN_LN_EPS), "dropout": c.get("dropout", 0.1)}
    return "".join(f"{k} = {v}\n" for k, v in keys.items())


def weight_files(d):
    """{file: [tensor names or None for all]}: model.safetensors, or the
    shards that model.safetensors.index.json names (save_pretrained of a
    model over max_shard_size)."""
    single, index = os.path.join(d, "model.safetensors"), "model.safetensors.index.json"
    if os.path.isfile(single):
        return {single: None}
    if not os.path.isfile(os.path.join(d, index)):
        if any(os.path.isfile(os.path.join(d, f)) for f in ("pytorch_model.bin", "pytorch_model.bin.index.json")):
            raise AnalysisError(d, "only pytorch_model.bin (a pickle, not read here): save it again with "
                                "save_pretrained(..., safe_serialization=True)")
        raise AnalysisError(d, f"no model.safetensors or {index}")
    idx, path = read_json(d, index), os.path.join(d, index)
    wmap = idx.get("weight_map") if isinstance(idx, dict) else None
    if not isinstance(wmap, dict) or not all(isinstance(v, str) for v in wmap.values()):
        raise AnalysisError(path, "no weight_map of tensor name -> shard file")
    shards = {}
    for name, shard in wmap.items():
        if os.path.basename(shard) != shard or not os.path.isfile(os.path.join(d, shard)):
            raise AnalysisError(path, f"{name}: shard {shard!r} is not a file of {d}")
        shards.setdefault(os.path.join(d, shard), []).append(name)
    return shards


def read_weights(d, wanted):
    """{Marian name: float32 array} of the names in `wanted` found in the
    directory's safetensors file(s), and the notes to print on upcasts."""
    t, dtypes = {}, {}
    for path, names in weight_files(d).items():
        got, dt = hm.read_safetensors(path, wanted if names is None else [n for n in names if n in wanted])
        if names is not None and len(got) < len([n for n in names if n in wanted]):
            missing = sorted(set(names) & set(wanted) - set(got))[0]
            raise AnalysisError(path, f"lacks {missing}, which the index puts there")
        t.update(got)
        dtypes.update(dt)
    low = sorted({v for v in dtypes.values() if v != "F32"})
    notes = [f"{', '.join(x.lower() for x in low)} weights upcast to float32 (exact)"] if low else []
    return t, dtypes, notes


def check_positions(d, t, dtypes, c, cfg):
    """Stored positional tables must be Marian's sinusoids (which are ours
    permuted): transformers uses stored ones, ours are computed."""
    dm = int(cfg["d_model"])
    for name in POSITIONS:
        if name not in t:
            continue
        want = hm.marian_sinusoids(c["max_position_embeddings"], dm)
        if t[name].shape != want.shape:
            refuse(d, f"{name} has shape {list(t[name].shape)}, Marian's sinusoids {list(want.shape)}")
        err = float(np.max(np.abs(t[name] - want), initial=0.0))
        if err > POSITION_TOL[dtypes[name]]:
            refuse(d, f"{name} is not the sinusoids (max difference {err:.3g}): learned or altered "
                   f"positions, which transformers uses and ours cannot")


def load_tensors(d, c, cfg):
    """Our parameters from the directory's weights, and notes to print."""
    N = int(cfg["n_layers"])
    tied = ["model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"]
    zero = hm.marian_zero_biases(N) + ["final_logits_bias"]
    wanted = {hf for _, hf, _ in hm.tensor_map(N)} | set(tied) | set(zero) | set(POSITIONS)
    t, dtypes, notes = read_weights(d, wanted)
    if "model.shared.weight" not in t and "model.encoder.embed_tokens.weight" in t:
        t["model.shared.weight"] = t["model.encoder.embed_tokens.weight"]
    E = t.get("model.shared.weight")
    for name in tied:
        if name in t and E is not None and not np.array_equal(t[name], E):
            refuse(d, f"{name} differs from model.shared.weight (untied embeddings)")
    for name in zero:
        if name in t and np.any(t[name] != 0):
            refuse(d, f"{name} is not zero (our attention and output layer have no biases)")
    check_positions(d, t, dtypes, c, cfg)
    perm = hm.model_dim_permutation(int(cfg["d_model"]))
    params = {}
    for ours, hf, how in hm.tensor_map(N):
        if hf not in t:
            raise AnalysisError(d, f"its weights lack {hf}")
        want = hm.expected_shape(ours, cfg)
        if tuple(t[hf].shape) != want:
            raise AnalysisError(d, f"{hf} has shape {list(t[hf].shape)}, config.json says {list(want)}")
        params[ours] = hm.from_marian(t[hf], how, perm)
    return params, notes


def vocab_pieces(d, V):
    vocab = read_json(d, "vocab.json")
    pieces = [None] * V
    for p, i in vocab.items() if isinstance(vocab, dict) else ():
        if isinstance(i, int) and 0 <= i < V:
            pieces[i] = p
    if any(p is None for p in pieces):
        raise AnalysisError(os.path.join(d, "vocab.json"), f"does not name every id 0..{V - 1}")
    hm.check_special_pieces(os.path.join(d, "vocab.json"), pieces)
    return pieces


def spm_pieces(path):
    """The pieces of a SentencePiece model file, in id order, and its bytes."""
    try:
        import sentencepiece
    except ImportError:
        raise AnalysisError("sentencepiece", "not installed: run this with .venv-hf/bin/python") from None
    with open(path, "rb") as f:
        model = f.read()
    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(model)
    except (RuntimeError, OSError, TypeError):
        raise AnalysisError(path, "not a SentencePiece model") from None
    return [sp.IdToPiece(i) for i in range(sp.GetPieceSize())], model


def check_spm(d, pieces, needed):
    """source.spm's bytes, after checking that its ids are vocab.json's:
    `translate --input` encodes with spm_encode --output_format=id, which
    gives SentencePiece's ids; transformers' tokenizer maps pieces through
    vocab.json.  Only where the two agree do both feed the model alike."""
    src, tgt = os.path.join(d, "source.spm"), os.path.join(d, "target.spm")
    if not os.path.isfile(src):
        if needed:
            raise AnalysisError(d, "no source.spm: --data-out needs the SentencePiece model")
        return None
    sp, model = spm_pieces(src)
    if len(sp) != len(pieces):
        raise AnalysisError(src, f"{len(sp)} pieces, vocab.json {len(pieces)}: our ids are SentencePiece's")
    bad = [i for i, (a, b) in enumerate(zip(sp, pieces)) if a != b]
    if bad:
        i = bad[0]
        raise AnalysisError(os.path.join(d, "vocab.json"), f"{len(bad)} ids differ from source.spm's, first id {i}: "
                            f"{pieces[i]!r}, SentencePiece's {sp[i]!r} (our ids are SentencePiece's)")
    if os.path.isfile(tgt):
        with open(tgt, "rb") as f:
            if f.read() != model:
                refuse(d, "source.spm and target.spm differ (ours is one shared vocabulary, section 5.1)")
    return model


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
    """Our checkpoint layout (src/checkpoint.c) at `path` (a temporary name)."""
    import h5py

    with h5py.File(path, "w") as f:
        for k, v in attrs.items():
            write_attr(f, k, v)
        f.attrs["config"] = text
        for name, w in params.items():
            w = np.ascontiguousarray(w, dtype="<f4")
            if w.ndim == 2 and w.shape[1] == 1:
                w = w.reshape(-1)
            ds = f.create_dataset(f"params/{name}", data=w, dtype="<f4")
            ds.attrs.create("checksum", np.uint64(hm.checksum64(w.tobytes())), dtype=np.uint64)


def write_vocab_dataset(path, hf_dir, pieces, spm, max_len):
    """A dataset file with the vocabulary and SentencePiece model only
    (docs/dataset.md, no splits) at `path` (a temporary name): what
    `translate --input` needs beside the checkpoint of a model trained
    elsewhere (`attention` reads a split, so not from this file)."""
    import datetime

    import h5py

    with h5py.File(path, "w") as f:
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


def write_all(outputs):
    """[(path, writer(tmp_path))]: every file under a temporary name beside
    its own, then all renamed: a failure leaves none of them behind."""
    tmps = []
    # never a symbolic link, device or FIFO (common.check_output)
    outputs = [(check_output(path), writer) for path, writer in outputs]
    try:
        for path, writer in outputs:
            tmps.append((f"{path}.tmp{os.getpid()}", path))
            writer(tmps[-1][0])
        for tmp, path in tmps:
            os.replace(tmp, path)
    except OSError as e:
        # name the output, not its temporary name
        path = dict(tmps).get(e.filename, e.filename or tmps[-1][1])
        raise AnalysisError(path, f"cannot write: {e.strerror}") from None
    finally:
        for tmp, _ in tmps:
            if os.path.exists(tmp):
                os.unlink(tmp)


def our_config(d, c):
    """(config text, config dict, the export's entry or None)."""
    extra = c.get(hm.EXTRA_KEY)
    try:
        text = extra["config"] if extra else foreign_config(c)
    except (KeyError, TypeError, ValueError):
        raise AnalysisError(os.path.join(d, "config.json"), "sizes missing or not numbers") from None
    where = os.path.join(d, "config.json") + (f" ({hm.EXTRA_KEY})" if extra else "")
    if not isinstance(text, str) or extra and not isinstance(extra.get("attrs", {}), dict):
        raise AnalysisError(where, "config is not text or attrs not an object")
    cfg = dict(l.split(" = ", 1) for l in text.splitlines() if " = " in l)
    hm.check_sizes(where, cfg)
    hm.check_finite(where, cfg)   # "ln_eps = nan" made a checkpoint every command refuses
    for ours, key in SAME_SIZES:   # transformers runs config.json's, the checkpoint would run the entry's
        if int(cfg[ours]) != c.get(key):
            raise AnalysisError(where, f"{ours} = {cfg[ours]}, config.json's {key} = {c.get(key)}: they disagree")
    return text, cfg, extra


def run_attrs(d, extra, params, pieces):
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
    return attrs


def check_outputs(d, outputs):
    """Refuse an output that is a directory (the error named its temporary
    file) or any file of the Hugging Face directory: "hf_import.py HF
    HF/model.safetensors" replaced the weights it had just read."""
    inputs = [os.path.join(d, n) for n in os.listdir(d)]
    for opt, out in outputs:
        if out and os.path.isdir(out):
            raise AnalysisError(out, "is a directory")
        if out:
            output_not_input("hf_import.py", opt, out, *[p for p in inputs if os.path.isfile(p)])


def do_import(args):
    """Everything is read and checked before anything is written."""
    d = args.hf_dir
    if not os.path.isdir(d):
        raise AnalysisError(d, "no such directory")
    if args.data_out and os.path.abspath(args.data_out) == os.path.abspath(args.checkpoint):
        raise AnalysisError(args.data_out, "is also the checkpoint to write")
    check_outputs(d, [("the checkpoint to write", args.checkpoint), ("--data-out", args.data_out)])
    c = read_json(d, "config.json")
    if not isinstance(c, dict):
        raise AnalysisError(os.path.join(d, "config.json"), "not a JSON object")
    notes = check_marian(d, c)
    text, cfg, extra = our_config(d, c)
    N, dm, V = int(cfg["n_layers"]), int(cfg["d_model"]), int(cfg["vocab_size"])
    params, weight_notes = load_tensors(d, c, cfg)
    pieces = vocab_pieces(d, V)
    spm = check_spm(d, pieces, bool(args.data_out))
    attrs = run_attrs(d, extra, params, pieces)
    outputs = [(args.checkpoint, lambda p: write_checkpoint(p, text, attrs, params))]
    if args.data_out:
        outputs.append((args.data_out, lambda p: write_vocab_dataset(p, d, pieces, spm, int(cfg["max_len"]))))
    write_all(outputs)
    print(f"hf_import: {args.checkpoint}: {N} layers, d_model {dm}, vocab {V}, {attrs['param_count']} parameters"
          + ("" if extra else f" (a foreign Marian model: ln_eps = {hm.MARIAN_LN_EPS:g}, step 0)"))
    for note in notes + weight_notes:
        print(f"hf_import: note: {note}")
    return 0


def main(argv):
    ap = ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("hf_dir", help="a MarianMT directory (config.json, model.safetensors, vocab.json)")
    ap.add_argument("checkpoint", help="the checkpoint to write")
    ap.add_argument("--data-out", metavar="DATA.h5",
                    help="also write a dataset file holding only the vocabulary and SentencePiece model "
                         "(for `translate --input` with a model trained elsewhere)")
    return do_import(ap.parse_args(argv))


if __name__ == "__main__":
    main_wrapper(main)
