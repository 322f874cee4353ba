#!/usr/bin/env python3
"""Export a checkpoint to a Hugging Face Transformers MarianMT directory.

    .venv-hf/bin/python analysis/hf_export.py CKPT.h5 DATA.h5 OUT_DIR

writes OUT_DIR/{config.json, model.safetensors, generation_config.json,
source.spm, target.spm, vocab.json, tokenizer_config.json,
special_tokens_map.json, README.md (the model card)}, all at once (built
in a temporary directory, then renamed) and readable as a plain open()
would make them (0666 less the umask), which MarianMTModel.from_pretrained(OUT_DIR) and
MarianTokenizer.from_pretrained(OUT_DIR) load offline.  DATA.h5 is the
dataset the model was trained on: it holds the SentencePiece model and the
vocabulary (the checkpoint holds only their fingerprint, vocab_hash).
docs/hf-export.md has the mapping and what differs."""

import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (ArgumentParser, AnalysisError, attr_str, check_output_dir, dataset_pieces, main_wrapper,  # noqa: E402
                    open_h5, temp_dir_beside, umask)
import hf_card  # noqa: E402
import hf_marian as hm  # noqa: E402


def read_checkpoint(path):
    """(config dict, config text, {attr: value}, {name: array}) of one of our checkpoints."""
    import h5py

    with open_h5(path) as f:
        if attr_str(f, "format") != "transformer-checkpoint":
            raise AnalysisError(path, "not a transformer checkpoint (no format=\"transformer-checkpoint\" attribute)")
        text = attr_str(f, "config", "")
        cfg = dict(l.split(" = ", 1) for l in text.splitlines() if " = " in l)
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        if not isinstance(f.get("params"), h5py.Group):
            raise AnalysisError(path, "missing group params")
        params, sums = {}, {}
        def read(name, obj):
            if isinstance(obj, h5py.Dataset):
                params[name] = obj[()]
                if "checksum" in obj.attrs:   # absent in older files, as src/checkpoint.c allows
                    sums[name] = int(obj.attrs["checksum"])
        f["params"].visititems(read)
    for name, want in sums.items():   # as the C loader does: a damaged file stops here
        if hm.checksum64(np.ascontiguousarray(params[name], dtype="<f4").tobytes()) != want:
            raise AnalysisError(path, f"tensor params/{name} fails its checksum (the file is damaged)")
    hm.check_sizes(path, cfg)
    hm.check_shapes(path, cfg, params)
    return cfg, text, attrs, params


def read_vocab(path):
    """(pieces, SentencePiece model bytes, dataset file) of a dataset (docs/dataset.md)."""
    with open_h5(path) as f:
        pieces = dataset_pieces(f, path)
        if not hasattr(f.get("vocab/spm_model"), "shape"):
            raise AnalysisError(path, "missing dataset vocab/spm_model")
        spm = f["vocab/spm_model"][:].tobytes()
        lengths = None
        for split in ("dev", "train"):
            if f"splits/{split}/tgt_offsets" in f:
                lengths = np.diff(f[f"splits/{split}/tgt_offsets"][:]) + 1   # + EOS
                break
    return pieces, spm, lengths


def check_architecture(path, cfg):
    """Refuse what MarianMT cannot express, in one line."""
    d, h = int(cfg["d_model"]), int(cfg["n_heads"])
    for key in ("d_k", "d_v"):
        if int(cfg[key]) * h != d:
            raise AnalysisError(path, f"{key} = {cfg[key]} with n_heads = {h} is not d_model/n_heads = {d}/{h}: "
                                f"MarianMT's attention has head_dim = d_model/heads (Table 3 rows B cannot be exported)")
    if cfg.get("positional", "sinusoid") != "sinusoid":
        raise AnalysisError(path, f"positional = {cfg['positional']}: MarianMT's positions are fixed sinusoids "
                            f"(row E cannot be exported)")


def hf_length_penalty(alpha, lengths):
    """HF's beam score is logP / |Y|^lp, ours logP / ((5+|Y|)/6)^alpha (GNMT).
    They cannot be equal; lp = alpha * L/(5+L) gives both the same slope
    d log(penalty) / d log|Y| at |Y| = L, the mean reference length (EOS
    included) of the dev split: near that length they rank alike."""
    if alpha == 0 or lengths is None or len(lengths) == 0:
        return alpha, None
    L = float(np.mean(lengths))
    return round(alpha * L / (5.0 + L), 4), L


def marian_config(cfg, text, attrs, vocab_size):
    N, d = int(cfg["n_layers"]), int(cfg["d_model"])
    positions = 2 * int(cfg["max_len"])   # sinusoids extrapolate: the decoder runs to 2 x max_len (docs/translate.md)
    extra = {"config": text, "ln_eps": float(cfg.get("ln_eps", 1e-6)),
             "attrs": {k: (int(v) if isinstance(v, (np.integer,)) else float(v) if isinstance(v, np.floating) else v)
                       for k, v in attrs.items() if k not in ("config",)}}
    return {
        "architectures": ["MarianMTModel"], "model_type": "marian",
        "vocab_size": vocab_size, "decoder_vocab_size": vocab_size, "d_model": d,
        "encoder_layers": N, "decoder_layers": N,
        "encoder_attention_heads": int(cfg["n_heads"]), "decoder_attention_heads": int(cfg["n_heads"]),
        "encoder_ffn_dim": int(cfg["d_ff"]), "decoder_ffn_dim": int(cfg["d_ff"]),
        "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
        "activation_function": "relu", "max_position_embeddings": positions, "scale_embedding": True,
        "dropout": float(cfg.get("dropout", 0.1)), "attention_dropout": 0.0, "activation_dropout": 0.0,
        "init_std": 0.02, "use_cache": True, "is_encoder_decoder": True,
        "pad_token_id": hm.PAD, "eos_token_id": hm.EOS, "decoder_start_token_id": hm.BOS, "bos_token_id": hm.BOS,
        "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
        "torch_dtype": "float32", hm.EXTRA_KEY: extra,
        # the one generation key here: transformers 4.40's TranslationPipeline
        # checks inputs against config.max_length (default 20, a warning per
        # sentence of 18 tokens or more), not the generation config's
        "max_length": max_length(cfg),
        # MarianConfig's default is 0, a generation setting save_pretrained
        # warns about: ours is in generation_config.json
        "forced_eos_token_id": None,
    }


def max_output(cfg, src_tokens):
    """decode_max_out of src/decode.c: output tokens before the final EOS."""
    return min(src_tokens + int(cfg.get("max_len_a", 50)), 2 * int(cfg["max_len"]) - 1)


def max_length(cfg):
    """transformers' max_length (decoder tokens, start token included) for
    our rule, output <= source + max_len_a tokens then EOS: one limit per
    call, so that of the longest source (max_len - 1).  Capped by the
    positions (2 x max_len), as transformers warns past them; binding only
    where max_len_a >= max_len (ours then allows one token more)."""
    return min(max_output(cfg, int(cfg["max_len"]) - 1) + 2, 2 * int(cfg["max_len"]))


def generation_config(cfg, lengths):
    alpha = round(float(cfg.get("len_alpha", 0.6)), 6)   # stored as float32 text
    lp, L = hf_length_penalty(alpha, lengths)
    g = {
        "decoder_start_token_id": hm.BOS, "eos_token_id": hm.EOS, "pad_token_id": hm.PAD,
        # ours allows only EOS at the maximum length L (src/decode.c): HF's
        # forced EOS at max_length - 1, max_length = start + L + EOS
        "forced_eos_token_id": hm.EOS, "max_length": max_length(cfg),
        # ours extends by every token but PAD and BOS (docs/translate.md)
        "bad_words_ids": [[hm.PAD], [hm.BOS]],
        "num_beams": int(cfg.get("beam", 4)), "length_penalty": lp,
        # "never": stop only when no live hypothesis can win, like our exact
        # early termination
        "early_stopping": "never",
        "num_return_sequences": 1,
    }
    return g, alpha, L


def tensors(cfg, params):
    N, d, V = int(cfg["n_layers"]), int(cfg["d_model"]), int(cfg["vocab_size"])
    perm = hm.model_dim_permutation(d)
    out = {}
    for ours, hf, how in hm.tensor_map(N):   # present and shaped: read_checkpoint
        out[hf] = hm.to_marian(params[ours].astype(np.float32), how, perm)
    # the tied copies Marian's state dict also names (tie_word_embeddings)
    for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
        out[name] = out["model.shared.weight"].copy()
    for name in hm.marian_zero_biases(N):
        out[name] = np.zeros(d, np.float32)
    out["final_logits_bias"] = np.zeros((1, V), np.float32)
    return out


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False, allow_nan=False)   # NaN is not JSON
        f.write("\n")


def write_tokenizer(out, pieces, spm, cfg, args):
    for name in ("source.spm", "target.spm"):   # one shared vocabulary (section 5.1)
        with open(os.path.join(out, name), "wb") as f:
            f.write(spm)
    write_json(os.path.join(out, "vocab.json"), {p: i for i, p in enumerate(pieces)})
    write_json(os.path.join(out, "tokenizer_config.json"), {
        "tokenizer_class": "MarianTokenizer", "source_lang": args.source_lang, "target_lang": args.target_lang,
        "unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>",
        "model_max_length": int(cfg["max_len"]), "separate_vocabs": False, "sp_model_kwargs": {}})
    write_json(os.path.join(out, "special_tokens_map.json"),
               {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"})


def check_vocab(data, cfg, attrs, pieces):
    """The dataset's vocabulary is the checkpoint's: its size, then its
    fingerprint (else the exports' own errors blamed the output)."""
    V = int(cfg["vocab_size"])
    if len(pieces) != V:
        raise AnalysisError(data, f"vocabulary of {len(pieces)} pieces, the checkpoint's model has {V}")
    if "vocab_hash" in attrs and int(attrs["vocab_hash"]) != hm.vocab_hash(pieces):
        raise AnalysisError(data, "its vocabulary is not the checkpoint's (vocab_hash differs)")


def check_inputs(args):
    """(cfg, text, attrs, params, pieces, spm, lengths, dataset info), all checked."""
    cfg, text, attrs, params = read_checkpoint(args.checkpoint)
    check_architecture(args.checkpoint, cfg)
    hm.check_finite(args.checkpoint, cfg)
    params = hm.apply_head_mask(args.checkpoint, cfg, params)   # Marian has no head gates
    pieces, spm, lengths = read_vocab(args.data)
    check_vocab(args.data, cfg, attrs, pieces)
    hm.check_special_pieces(args.data, pieces)
    check_output_dir(args.out_dir)
    for b in args.bleu:
        if "=" not in b:
            raise AnalysisError("--bleu", f"{b!r} is not SPLIT=TEXT")
    return cfg, text, attrs, params, pieces, spm, lengths


def write_files(d, args, cfg, text, attrs, params, pieces, spm, lengths):
    """Every file of the export into directory d; returns the generation config."""
    V = int(cfg["vocab_size"])
    hm.safetensors_numpy().save_file(tensors(cfg, params), os.path.join(d, "model.safetensors"),
                                     metadata={"format": "pt"})
    write_json(os.path.join(d, "config.json"), marian_config(cfg, text, attrs, V))
    gen, alpha, L = generation_config(cfg, lengths)
    write_json(os.path.join(d, "generation_config.json"), gen)
    write_tokenizer(d, pieces, spm, cfg, args)
    with open(os.path.join(d, "README.md"), "w", encoding="utf-8") as f:
        f.write(hf_card.model_card(args, cfg, attrs, gen, alpha, L))
    return gen, alpha, L


def publish(tmp, out_dir):
    """Give tmp's files the mode a plain open() gives (save_file and mkdtemp
    make them 0600/0700: a colleague could not read them) and rename tmp to
    out_dir."""
    mask = umask()
    for name in os.listdir(tmp):
        os.chmod(os.path.join(tmp, name), 0o666 & ~mask)
    os.chmod(tmp, 0o777 & ~mask)
    if os.path.isdir(out_dir):
        os.rmdir(out_dir)   # checked empty
    os.rename(tmp, out_dir)


def export(args):
    hm.safetensors_numpy()
    cfg, text, attrs, params, pieces, spm, lengths = check_inputs(args)
    tmp = temp_dir_beside(args.out_dir)
    try:
        gen, alpha, L = write_files(tmp, args, cfg, text, attrs, params, pieces, spm, lengths)
        publish(tmp, args.out_dir)
    except OSError as e:
        raise AnalysisError(args.out_dir, f"cannot write: {e.strerror}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    eps = float(cfg.get("ln_eps", 1e-6))
    print(f"hf_export: {args.out_dir}: MarianMT, {int(cfg['n_layers'])} layers, d_model {cfg['d_model']}, "
          f"vocab {cfg['vocab_size']}; beam {gen['num_beams']}, length_penalty {gen['length_penalty']} "
          f"(ours: GNMT alpha {alpha}" + (f", matched at |Y| = {L:.1f}" if L else "") + f"), "
          f"max_length {gen['max_length']}")
    if abs(eps - hm.MARIAN_LN_EPS) > 1e-6 * hm.MARIAN_LN_EPS:
        print(f"hf_export: note: LayerNorm eps is {eps:g} here, {hm.MARIAN_LN_EPS:g} in Marian (not configurable): "
              f"logits differ slightly (docs/hf-export.md)")
    return 0


def main(argv):
    ap = ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help="our checkpoint (docs/checkpoint.md)")
    ap.add_argument("data", help="the dataset the model was trained on: its SentencePiece model and vocabulary")
    ap.add_argument("out_dir", help="the Hugging Face directory to write (new or empty)")
    ap.add_argument("--source-lang", default="en")
    ap.add_argument("--target-lang", default="de")
    ap.add_argument("--bleu", action="append", default=[], metavar="SPLIT=TEXT",
                    help="a score for the model card, e.g. 'test2016=29.09 (nrefs:1|case:mixed|...)': "
                         "sacreBLEU's score and signature as analysis/bleu.py prints them (repeatable)")
    ap.add_argument("--data-license", default=None,
                    help="the license of the training data, for the model card (e.g. Multi30k's)")
    return export(ap.parse_args(argv))


if __name__ == "__main__":
    main_wrapper(main)
