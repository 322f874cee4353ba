"""The model card (README.md) of a Hugging Face export (analysis/hf_export.py):
what a user of the directory needs and cannot read from config.json: the
architecture in the paper's terms, the training data and steps, the scores
with their sacreBLEU signatures, how to load and translate, where the result
differs from ours, and the license of the data."""

import os

from common import as_strings, attr_str, open_h5


def split_sizes(data):
    """[(split, sentence pairs)] of a dataset file (docs/dataset.md)."""
    with open_h5(data) as f:
        names = as_strings(f.attrs["split_names"]) if "split_names" in f.attrs else sorted(f.get("splits", {}))
        return [(n, len(f[f"splits/{n}/src_offsets"]) - 1) for n in names if f"splits/{n}/src_offsets" in f]


def dataset_origin(data):
    with open_h5(data) as f:
        return attr_str(f, "command", "(not recorded)"), attr_str(f, "created", "(not recorded)")


def architecture(cfg, attrs):
    N, d, dff, h = (cfg[k] for k in ("n_layers", "d_model", "d_ff", "n_heads"))
    return (f"Transformer (Vaswani et al., 2017) encoder-decoder: {N} + {N} layers, d_model {d}, d_ff {dff}, "
            f"{h} heads, post-norm, ReLU, sinusoidal positions, one embedding matrix shared by encoder, decoder "
            f"and output layer (scaled by sqrt(d_model)), vocabulary of {cfg['vocab_size']} SentencePiece pieces "
            f"shared by both languages; {int(attrs.get('param_count', 0)):,} parameters. Sources of up to "
            f"{int(cfg['max_len']) - 1} pieces (+ EOS); trained with dropout {float(cfg.get('dropout', 0.1)):g} and "
            f"label smoothing {float(cfg.get('label_smoothing', 0.1)):g}.")


def training(args, attrs):
    cmd, created = dataset_origin(args.data)
    sizes = ", ".join(f"{n} {k:,} pairs" for n, k in split_sizes(args.data))
    steps = int(attrs.get("step", 0))
    secs = float(attrs.get("elapsed_seconds", 0.0))
    return (f"- Data: `{os.path.basename(args.data)}` ({sizes}), made {created} by `{cmd}`.\n"
            f"- Steps: {steps:,} ({int(attrs.get('ranks', 1))} rank(s) x update_freq "
            f"{int(attrs.get('update_freq', 1))}, {secs / 3600:.2f} h of training), seed {attrs.get('seed', '?')}; "
            f"checkpoint `{os.path.basename(args.checkpoint)}` (program version {attrs.get('version', '?')}).")


def scores(args):
    if not args.bleu:
        return "Not given at export (`hf_export.py --bleu SPLIT=TEXT`).\n"
    rows = [b.split("=", 1) for b in args.bleu]
    return "| split | sacreBLEU (signature) |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)


def usage(args, gen):
    name = os.path.basename(os.path.abspath(args.out_dir))
    return f"""```python
from transformers import MarianMTModel, MarianTokenizer, pipeline

translate = pipeline("translation", model="{name}")
print(translate("A man rides a bike.")[0]["translation_text"])

tok = MarianTokenizer.from_pretrained("{name}")
model = MarianMTModel.from_pretrained("{name}")
batch = tok(["A man rides a bike."], return_tensors="pt", padding=True, truncation=True)
print(tok.batch_decode(model.generate(**batch), skip_special_tokens=True))
```

`generation_config.json` holds the decoding we use: beam {gen['num_beams']}, `length_penalty`
{gen['length_penalty']}, `early_stopping = "never"`, `max_length` {gen['max_length']}. `truncation=True`
cuts a source to the tokenizer's `model_max_length` as our `translate` does; without it a longer
source is translated in full (the tokenizer warns), and one over twice that length fails (positions).
"""


def differences(cfg, alpha, L):
    match = f" matched to ours near |Y| = {L:.1f}" if L else ""
    return f"""- Length penalty: ours is GNMT's ((5+|Y|)/6)^{alpha}; transformers divides by |Y|^length_penalty,{match}.
- Output length: ours allows source length + {cfg.get('max_len_a', 50)} pieces per sentence; transformers has one `max_length`
  per call, that of the longest source.
- Beam search: transformers drops an EOS ranked below the beam and scores its forced EOS 0.
- LayerNorm epsilon: transformers' Marian uses 1e-5 (ours is the checkpoint's `ln_eps`).
- Tokenizer: MarianTokenizer applies Moses punctuation normalisation when `sacremoses` is installed;
  ours is SentencePiece alone.
"""


def model_card(args, cfg, attrs, gen, alpha, L):
    lic = args.data_license or "not recorded: the training data's license applies (state it with --data-license)"
    return f"""---
language: [{args.source_lang}, {args.target_lang}]
library_name: transformers
pipeline_tag: translation
tags: [marian, transformer]
license: other
---

# {args.source_lang}→{args.target_lang} Transformer

Exported from `bin/transformer` by `analysis/hf_export.py` as a `MarianMTModel` (docs/hf-export.md).

## Architecture

{architecture(cfg, attrs)}

## Training

{training(args, attrs)}

## Evaluation

{scores(args)}
## How to load and translate

{usage(args, gen)}
## Where transformers differs from our `translate`

{differences(cfg, alpha, L)}
## License of the data

{lic}
"""

