#!/usr/bin/env bash
# Export to Hugging Face MarianMT and import back (analysis/hf_export.py,
# analysis/hf_import.py, docs/hf-export.md), offline.  A tiny model is trained
# on a generated word-for-word task (no data files needed) with ln_eps = 1e-5,
# Marian's; tests/hf_check.py loads the export with MarianMTModel and
# MarianTokenizer and checks: the tokenizer's ids, the teacher-forced NLL of
# every sentence against `eval`, greedy and beam-4 (alpha 0) outputs against
# `translate`; what a user gets: plain generate() and pipeline warning-free
# and agreeing with translate's defaults (beam 4, alpha 0.6), the differences
# named and counted; files 0666 less the umask; a model card.  Then
# import(export(ckpt)) has the checkpoint's parameters bitwise (and config),
# and `eval` of it prints the same line; d_k != d_model/h and a swish Marian
# model are one-line errors.  Needs .venv-hf (tests/install-deps.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$TOP"
PY=$TOP/.venv-hf/bin/python
[ -x "$PY" ] || skip "no .venv-hf (bash tests/install-deps.sh creates it)"
W=$(mktemp -d /tmp/test_hf_export.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1

word_corpus "$W"
# every dev pair also as a split of its own: `eval` of it is that sentence's NLL
splits=()
for k in $(seq 0 7); do
    sed -n "$((k + 1))p" "$W/dev.en" >"$W/s$k.en"; sed -n "$((k + 1))p" "$W/dev.de" >"$W/s$k.de"
    splits+=(--split "s$k" "$W/s$k.en" "$W/s$k.de")
done
cp "$W/dev.en" "$W/dev.src"
"$BIN" prepare --out "$W/d.h5" --split train "$W/train.en" "$W/train.de" --split dev "$W/dev.en" "$W/dev.de" \
    "${splits[@]}" vocab_size=330 max_len=24 --jobs 1 >"$W/prep.log" 2>&1 || fail "prepare: $(tail -2 "$W/prep.log")"
"$BIN" train data="$W/d.h5" $WORD_ARCH d_k=8 d_v=8 train_steps=300 dropout=0 threads=1 ln_eps=1e-5 \
    run_dir="$W/run" >"$W/train.log" 2>&1 || fail "train: $(tail -2 "$W/train.log")"
CK=$(ls "$W"/run/ckpt_*.h5 | tail -1)

# ours: NLL per sentence, greedy and beam outputs
for s in dev $(seq -f 's%g' 0 7); do
    "$BIN" eval --checkpoint "$CK" --data "$W/d.h5" --split "$s" threads=1 >"$W/eval_$s.txt" 2>&1 \
        || fail "eval $s: $(cat "$W/eval_$s.txt")"
done
translate_dev() { "$BIN" translate --checkpoint "$CK" --data "$W/d.h5" --split dev --output "$W/$1" max_len_a=5 threads=1 \
    "${@:2}" >"$W/$1.log" 2>&1 || fail "translate $*: $(tail -2 "$W/$1.log")"; }
translate_dev greedy.txt beam=1 len_alpha=0
translate_dev beam.txt beam=4 len_alpha=0
translate_dev beam06.txt beam=4 len_alpha=0.6
# what a user of ours gets: translate's defaults (beam 4, alpha 0.6, max_len_a 50)
"$BIN" translate --checkpoint "$CK" --data "$W/d.h5" --split dev --output "$W/plain.txt" threads=1 >"$W/plain.log" 2>&1 \
    || fail "translate (defaults): $(tail -2 "$W/plain.log")"

SIG="nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.0"
"$PY" analysis/hf_export.py "$CK" "$W/d.h5" "$W/hf" --bleu "dev=12.34 ($SIG)" --data-license "CC BY 4.0 (generated)" \
    >"$W/export.log" 2>&1 || fail "export: $(cat "$W/export.log")"
ok "$(head -1 "$W/export.log")"
files="config.json model.safetensors generation_config.json source.spm target.spm vocab.json tokenizer_config.json
    special_tokens_map.json README.md"
for f in $files; do
    [ -s "$W/hf/$f" ] || fail "export wrote no $f"
done
[ "$(ls -A "$W/hf" | wc -l)" -eq 9 ] || fail "export wrote other files: $(ls -A "$W/hf")"
# readable by a colleague: every file 0666 less the umask, as a plain open() makes it
for mask in 022 027; do
    rm -rf "$W/hf_mask"
    (umask $mask && "$PY" analysis/hf_export.py "$CK" "$W/d.h5" "$W/hf_mask" >/dev/null) || fail "export under umask $mask"
    want=$(printf '%o' $((0666 & ~0$mask)))
    modes=$(stat -c '%a %n' "$W"/hf_mask/* | awk -v w="$want" '$1 != w')
    [ -z "$modes" ] || fail "umask $mask: files not $want: $modes"
    [ "$(stat -c %a "$W/hf_mask")" = "$(printf '%o' $((0777 & ~0$mask)))" ] || fail "umask $mask: directory mode"
done
ok "export files 644 under umask 022 and 640 under 027 (model.safetensors included), directory 755/750"
card=$(cat "$W/hf/README.md")
for want in "## Architecture" "2 + 2 layers, d_model 32, d_ff 64, 4 heads" "Steps: 300 " "| dev | 12.34 ($SIG) |" \
    'pipeline("translation"' "CC BY 4.0 (generated)" "train 1,297 pairs"; do
    grep -qF -- "$want" <<<"$card" || fail "model card lacks '$want'"
done
ok "model card: architecture, data and steps, BLEU with its signature, usage, data license"
mkdir -p "$W/full" && touch "$W/full/x"
expect_error 2 "^error: .*full: exists and is not an empty directory" "$PY" analysis/hf_export.py "$CK" "$W/d.h5" "$W/full"
[ -z "$(find "$W" -maxdepth 1 -name '.full.*')" ] || fail "a refused export left a temporary directory"
cp "$CK" "$W/bad_shape.h5"   # a tensor that does not fit its config: one line, no directory
"$PY" - "$W/bad_shape.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    w = f["params/encoder/layer_00/ffn/W_1"][()]
    del f["params/encoder/layer_00/ffn/W_1"]
    f["params/encoder/layer_00/ffn/W_1"] = w[:-1]
EOF
expect_error 2 "^error: .*bad_shape.h5: params/encoder/layer_00/ffn/W_1 has shape \[63, 32\], its config says \[64, 32\]" \
    "$PY" analysis/hf_export.py "$W/bad_shape.h5" "$W/d.h5" "$W/hf_bad"
[ ! -e "$W/hf_bad" ] || fail "a refused export left $W/hf_bad"
cp "$CK" "$W/flipped.h5"   # one weight changed in place, its checksum kept: a damaged file
"$PY" - "$W/flipped.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    d = f["params/decoder/layer_01/cross_attention/W_v"]
    w = d[()]
    w[3, 5] = -w[3, 5]
    d[...] = w
EOF
expect_error 2 "^error: .*flipped.h5: tensor params/decoder/layer_01/cross_attention/W_v fails its checksum" \
    "$PY" analysis/hf_export.py "$W/flipped.h5" "$W/d.h5" "$W/hf_flipped"
expect_error 2 "^error: .*flipped.h5: tensor params/decoder/layer_01/cross_attention/W_v fails its checksum" \
    "$BIN" eval --checkpoint "$W/flipped.h5" --data "$W/d.h5" --split dev threads=1   # as the C loader does
"$PY" tests/hf_check.py "$W/hf" "$W/d.h5" "$W" >"$W/check.log" 2>"$W/check.err" \
    || { cat "$W/check.log"; fail "hf_check (above; stderr: $(grep -v -i warn "$W/check.err" | tail -3))"; }
cat "$W/check.log"

# import(export(ckpt)) == ckpt: every parameter bitwise, the config, and eval
"$PY" analysis/hf_import.py "$W/hf" "$W/back.h5" >"$W/import.log" 2>&1 || fail "import: $(cat "$W/import.log")"
"$PY" - "$CK" "$W/back.h5" <<'EOF' || fail "round trip differs"
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a["params"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
other = []
b["params"].visititems(lambda n, o: other.append(n) if isinstance(o, h5py.Dataset) else None)
assert sorted(names) == sorted(other), "parameter names differ"
for n in names:
    x, y = a["params"][n], b["params"][n]
    assert x.shape == y.shape and x.dtype == y.dtype, n
    assert x[()].tobytes() == y[()].tobytes(), f"{n} differs"
    assert int(x.attrs["checksum"]) == int(y.attrs["checksum"]), f"{n}: checksum differs"
for k in ("config", "step", "seed", "vocab_hash", "param_count"):
    assert a.attrs[k] == b.attrs[k], k
print(f"ok: import(export(ckpt)): {len(names)} parameter tensors bitwise equal, checksums, config, step, vocab_hash")
EOF
"$BIN" eval --checkpoint "$W/back.h5" --data "$W/d.h5" --split dev threads=1 >"$W/eval_back.txt" 2>&1 \
    || fail "eval of the imported checkpoint: $(cat "$W/eval_back.txt")"
[ "$(grep '^eval' "$W/eval_back.txt")" = "$(grep '^eval' "$W/eval_dev.txt")" ] \
    || fail "eval differs: $(grep '^eval' "$W/eval_back.txt") vs $(grep '^eval' "$W/eval_dev.txt")"
ok "eval of the imported checkpoint: $(grep '^eval' "$W/eval_back.txt")"

# a Marian model trained elsewhere (config.json without our entry): the
# architecture and ln_eps 1e-5 from Marian's config, the vocabulary and
# SentencePiece model into a dataset file for `translate --input`
cp -r "$W/hf" "$W/hf_foreign"
"$PY" - "$W/hf_foreign/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1])); del c["transformer_checkpoint"]; json.dump(c, open(sys.argv[1], "w"))
EOF
"$PY" analysis/hf_import.py "$W/hf_foreign" "$W/foreign.h5" --data-out "$W/vocab.h5" >"$W/import2.log" 2>&1 \
    || fail "foreign import: $(cat "$W/import2.log")"
"$BIN" eval --checkpoint "$W/foreign.h5" --data "$W/d.h5" --split dev threads=1 >"$W/eval_foreign.txt" 2>&1 \
    || fail "eval of the foreign import: $(cat "$W/eval_foreign.txt")"
[ "$(field '^eval' nll "$W/eval_foreign.txt")" = "$(field '^eval' nll "$W/eval_dev.txt")" ] \
    || fail "foreign import: $(grep '^eval' "$W/eval_foreign.txt") vs $(grep '^eval' "$W/eval_dev.txt")"
for c in "$CK d.h5" "$W/foreign.h5 vocab.h5"; do
    set -- $c
    "$BIN" translate --checkpoint "$1" --data "$W/$2" --input "$W/dev.en" --output "$W/in_$2.txt" threads=1 \
        >"$W/in_$2.log" 2>&1 || fail "translate --input with $2: $(tail -2 "$W/in_$2.log")"
done
cmp -s "$W/in_d.h5.txt" "$W/in_vocab.h5.txt" || fail "translate --input: the foreign import differs"
ok "foreign import (Marian config only): eval nll $(field '^eval' nll "$W/eval_foreign.txt"), translate --input with its vocabulary file = the original's"

# a checkpoint with a head mask (config mask_heads): Marian has no head
# gates, so the export zeroes the masked heads' W_o columns, the same
# function: transformers' teacher-forced NLL of dev is eval's
train_masked_model "$W/masked" "$W/d.h5" $WORD_ARCH ln_eps=1e-5
"$PY" analysis/hf_export.py "$CKM" "$W/d.h5" "$W/hf_masked" >"$W/export_masked.log" 2>&1 \
    || fail "export masked: $(cat "$W/export_masked.log")"
"$PY" - "$W/hf_masked" "$W/d.h5" "$MASKED_NLL" <<'EOF' 2>/dev/null \
    || fail "mask_heads: transformers' model is not the checkpoint's"
import sys, h5py, torch
from transformers import MarianMTModel
model, f, ours = MarianMTModel.from_pretrained(sys.argv[1]), h5py.File(sys.argv[2], "r"), float(sys.argv[3])
g, L = f["splits/dev"], int(f.attrs["max_len"])
so, si, to, ti = (g[k][:].tolist() for k in ("src_offsets", "src_ids", "tgt_offsets", "tgt_ids"))
nll, n = 0.0, 0
for k in range(len(so) - 1):
    src, tgt = si[so[k]:so[k + 1]] + [2], ti[to[k]:to[k + 1]] + [2]
    if len(src) > L or len(tgt) > L:
        continue   # eval skips over-long pairs
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([[1] + tgt[:-1]])).logits[0]
    nll -= float(torch.log_softmax(logits.double(), -1)[torch.arange(len(tgt)), torch.tensor(tgt)].sum())
    n += len(tgt)
print(f"mask_heads: transformers' dev NLL per token {nll / n:.4f}, eval's {ours}")
assert abs(nll / n - ours) < 2e-4
EOF
ok "mask_heads: transformers' dev NLL per token = eval's (the masked heads' W_o columns exported as 0)"

# what Marian cannot express, and what this model does not have: one line each
"$BIN" train data="$W/d.h5" $WORD_ARCH d_k=4 d_v=8 train_steps=1 threads=1 run_dir="$W/rowb" >"$W/rowb.log" 2>&1 \
    || fail "train row B: $(tail -2 "$W/rowb.log")"
expect_error 2 "^error: .*d_k = 4 with n_heads = 4 is not d_model/n_heads" \
    "$PY" analysis/hf_export.py "$(ls "$W"/rowb/ckpt_*.h5 | tail -1)" "$W/d.h5" "$W/hf_rowb"
[ "$("$PY" analysis/hf_export.py "$(ls "$W"/rowb/ckpt_*.h5 | tail -1)" "$W/d.h5" "$W/hf_rowb" 2>&1 | wc -l)" -eq 1 ] \
    || fail "row B refusal is not one line"
"$BIN" train data="$W/d.h5" $WORD_ARCH d_k=8 d_v=8 positional=learned train_steps=1 threads=1 run_dir="$W/rowe" \
    >"$W/rowe.log" 2>&1 || fail "train row E: $(tail -2 "$W/rowe.log")"
expect_error 2 "^error: .*positional = learned: MarianMT's positions are fixed sinusoids" \
    "$PY" analysis/hf_export.py "$(ls "$W"/rowe/ckpt_*.h5 | tail -1)" "$W/d.h5" "$W/hf_rowe"
cp -r "$W/hf" "$W/hf_wide"   # a config that does not fit the tensors
sed -i 's/"encoder_ffn_dim": 64/"encoder_ffn_dim": 128/; s/"decoder_ffn_dim": 64/"decoder_ffn_dim": 128/' \
    "$W/hf_wide/config.json"
"$PY" - "$W/hf_wide/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1])); del c["transformer_checkpoint"]; json.dump(c, open(sys.argv[1], "w"))
EOF
expect_error 2 "^error: .*fc1.weight has shape \[64, 32\], config.json says \[128, 32\]" \
    "$PY" analysis/hf_import.py "$W/hf_wide" "$W/wide.h5"
cp -r "$W/hf" "$W/hf_swish"
sed -i 's/"activation_function": "relu"/"activation_function": "swish"/' "$W/hf_swish/config.json"
expect_error 2 "^error: .*activation_function 'swish'" "$PY" analysis/hf_import.py "$W/hf_swish" "$W/swish.h5"
[ ! -e "$W/swish.h5" ] || fail "a refused import left $W/swish.h5"
# run with the analysis venv (no safetensors): one line saying which venv
if [ -x .venv/bin/python ] && ! .venv/bin/python -c "import safetensors" 2>/dev/null; then
    expect_error 2 "^error: safetensors: not installed: run this with .venv-hf" \
        .venv/bin/python analysis/hf_export.py "$CK" "$W/d.h5" "$W/hf_novenv"
fi
echo "ok: test_hf_export"
