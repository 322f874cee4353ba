#!/usr/bin/env python3
"""Export a checkpoint to a CTranslate2 model directory.

    python analysis/ct2_export.py CKPT.h5 DATA.h5 OUT_DIR [--quantization int8]

writes OUT_DIR/{model.bin, config.json, shared_vocabulary.json} (CTranslate2's
own files, through its TransformerSpec) and OUT_DIR/sentencepiece.model (the
dataset's, to make the pieces ctranslate2.Translator takes).  CTranslate2's
Marian converter assumes opus-mt's conventions (the decoder starts from a
zero embedding, pad last), so this builds the spec from our checkpoint
directly: post-norm, ReLU, one embedding matrix scaled by sqrt(d_model) for
encoder, decoder and output, and the positional table in our own layout (sin
on even, cos on odd dimensions: CTranslate2 adds a stored table, so no
permutation is needed, unlike MarianMT).  Needs the ctranslate2 package
(CPU wheels on PyPI); docs/ct2-export.md."""

import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (ArgumentParser, AnalysisError, check_output_dir, main_wrapper, make_public,  # noqa: E402
                    temp_dir_beside, umask)
from hf_export import check_vocab, hf_length_penalty, read_checkpoint, read_vocab  # noqa: E402
import hf_marian as hm  # noqa: E402


def ctranslate2_specs():
    try:
        from ctranslate2.specs import common_spec, transformer_spec
    except ImportError:
        raise AnalysisError("ctranslate2", "not installed: pip install ctranslate2 (CPU wheels on PyPI; "
                            "docs/ct2-export.md)") from None
    return common_spec, transformer_spec


def check_model(path, cfg):
    """What TransformerSpec cannot express, in one line."""
    d, h = int(cfg["d_model"]), int(cfg["n_heads"])
    for key in ("d_k", "d_v"):
        if int(cfg[key]) * h != d:
            raise AnalysisError(path, f"{key} = {cfg[key]} with n_heads = {h} is not d_model/n_heads = {d}/{h}: "
                                f"CTranslate2's heads are d_model/heads wide (Table 3 rows B cannot be exported)")


def position_table(cfg, params):
    """Our positional vectors, as many as our decoder uses: sinusoids to
    2 x max_len (src/model.c positional_sinusoids, float64 then float32),
    or the learned table of row E (max_len)."""
    d, n = int(cfg["d_model"]), int(cfg["max_len"])
    if cfg.get("positional", "sinusoid") == "learned":
        return np.asarray(params["positional_embedding"], np.float32)
    j = np.arange(d)
    a = np.arange(2 * n)[:, None] / np.power(10000.0, (j & ~1) / d)[None, :]
    return np.where(j % 2 == 1, np.cos(a), np.sin(a)).astype(np.float32)


def set_attention(spec, p, self_attention):
    """Our W_q, W_k, W_v, W_o (no biases, section 3.2.2): CTranslate2 fuses
    Q, K, V for self-attention and K, V for encoder-decoder attention."""
    if self_attention:
        spec.linear[0].weight = np.concatenate([p["W_q"], p["W_k"], p["W_v"]])
    else:
        spec.linear[0].weight = p["W_q"]
        spec.linear[1].weight = np.concatenate([p["W_k"], p["W_v"]])
    spec.linear[-1].weight = p["W_o"]


def set_norm(spec, p):
    spec.gamma, spec.beta = p["gamma"], p["beta"]


def set_ffn(spec, p, norm):
    spec.linear_0.weight, spec.linear_0.bias = p["W_1"], p["b_1"].reshape(-1)
    spec.linear_1.weight, spec.linear_1.bias = p["W_2"], p["b_2"].reshape(-1)
    set_norm(spec.layer_norm, norm)


def group(params, prefix):
    """{leaf: float32 array} of the tensors under prefix/ of our checkpoint."""
    n = len(prefix) + 1
    return {k[n:]: np.asarray(v, np.float32) for k, v in params.items() if k.startswith(prefix + "/")}


def set_layers(spec, params, cfg):
    for side, layers in (("encoder", spec.encoder.layer), ("decoder", spec.decoder.layer)):
        for i, layer in enumerate(layers):
            g = f"{side}/layer_{i:02d}"
            set_attention(layer.self_attention, group(params, f"{g}/self_attention"), True)
            set_norm(layer.self_attention.layer_norm, group(params, f"{g}/self_attention_norm"))
            if side == "decoder":
                set_attention(layer.attention, group(params, f"{g}/cross_attention"), False)
                set_norm(layer.attention.layer_norm, group(params, f"{g}/cross_attention_norm"))
            set_ffn(layer.ffn, group(params, f"{g}/ffn"), group(params, f"{g}/ffn_norm"))


def build_spec(cfg, params, pieces):
    common_spec, transformer_spec = ctranslate2_specs()
    spec = transformer_spec.TransformerSpec.from_config(
        int(cfg["n_layers"]), int(cfg["n_heads"]), pre_norm=False, activation=common_spec.Activation.RELU)
    E = np.asarray(params["shared_embedding"], np.float32)
    table = position_table(cfg, params)
    for part in (spec.encoder, spec.decoder):
        emb = part.embeddings[0] if isinstance(part.embeddings, list) else part.embeddings
        emb.weight = E   # one matrix, section 3.4; scaled by sqrt(d_model) (scale_embeddings)
        part.scale_embeddings = True
        part.position_encodings.encodings = table
    spec.decoder.projection.weight = E
    spec.decoder.start_from_zero_embedding = False   # ours starts from BOS's embedding
    set_layers(spec, params, cfg)
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.add_source_eos = True   # our sources end with EOS (docs/dataset.md)
    spec.config.layer_norm_epsilon = float(cfg.get("ln_eps", 1e-6))
    return spec


def export(args):
    cfg, _, attrs, params = read_checkpoint(args.checkpoint)
    check_model(args.checkpoint, cfg)
    hm.check_finite(args.checkpoint, cfg)   # ln_eps = nan was written as NaN: config.json CTranslate2 cannot parse
    params = hm.apply_head_mask(args.checkpoint, cfg, params)   # CTranslate2 has no head gates
    pieces, spm, lengths = read_vocab(args.data)
    check_vocab(args.data, cfg, attrs, pieces)
    hm.check_special_pieces(args.data, pieces)   # CTranslate2 finds <s>, </s>, <unk> by name
    check_output_dir(args.out_dir)
    spec = build_spec(cfg, params, pieces)
    tmp = temp_dir_beside(args.out_dir)
    try:
        spec.validate()
        spec.optimize(quantization=args.quantization)
        spec.save(tmp)
        with open(os.path.join(tmp, "sentencepiece.model"), "wb") as f:
            make_public(f.fileno())
            f.write(spm)
        for name in os.listdir(tmp):
            os.chmod(os.path.join(tmp, name), 0o666 & ~umask())
        os.chmod(tmp, 0o777 & ~umask())
        if os.path.isdir(args.out_dir):
            os.rmdir(args.out_dir)
        os.rename(tmp, args.out_dir)
    except (OSError, ValueError) as e:
        raise AnalysisError(args.out_dir, f"cannot write: {e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # CTranslate2's length penalty is |Y|^lp, as transformers': the same mapping of our alpha
    alpha = round(float(cfg.get("len_alpha", 0.6)), 6)
    lp, L = hf_length_penalty(alpha, lengths)
    print(f"ct2_export: {args.out_dir}: CTranslate2 Transformer, {cfg['n_layers']} layers, d_model {cfg['d_model']}, "
          f"vocab {len(pieces)}, {args.quantization or 'float32'}; translate_batch with beam_size "
          f"{int(cfg.get('beam', 4))}, length_penalty {lp} (ours: GNMT alpha {alpha}"
          + (f", matched at |Y| = {L:.1f}" if L else "") + ")")
    return 0


def main(argv):
    ap = ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help="our checkpoint (docs/checkpoint.md)")
    ap.add_argument("data", help="the dataset the model was trained on: its SentencePiece model and vocabulary")
    ap.add_argument("out_dir", help="the CTranslate2 directory to write (new or empty)")
    ap.add_argument("--quantization", default=None, choices=["int8", "int8_float32", "int16", "float16", "bfloat16"],
                    help="CTranslate2's weight type (default float32, the checkpoint's)")
    return export(ap.parse_args(argv))


if __name__ == "__main__":
    main_wrapper(main)
