#!/usr/bin/env bash
# Export to CTranslate2 (analysis/ct2_export.py, docs/ct2-export.md), offline.
# A tiny model is trained on a generated word-for-word task (as in
# test_hf_export); tests/ct2_check.py translates the dev set with
# ctranslate2.Translator: greedy identical to `translate` on every sentence,
# beam 4 identical on at least half and every other sentence named
# (search or length penalty) from CTranslate2's own scores.  d_k != d_model/h
# and a run without ctranslate2 are one-line errors.  Skipped where
# .venv-hf has no ctranslate2 (analysis/requirements-hf.txt has it).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$TOP"
ct2_python
W=$(mktemp -d /tmp/test_ct2_export.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1

word_model "$W"
cp "$W/dev.en" "$W/dev.src"
for run in "greedy.txt beam=1 len_alpha=0" "beam.txt beam=4 len_alpha=0.6"; do
    set -- $run
    "$BIN" translate --checkpoint "$CK" --data "$W/d.h5" --split dev --output "$W/$1" max_len_a=5 threads=1 \
        "${@:2}" >"$W/$1.log" 2>&1 || fail "translate $run: $(tail -2 "$W/$1.log")"
done

"$PY" analysis/ct2_export.py "$CK" "$W/d.h5" "$W/ct2" >"$W/export.log" 2>&1 || fail "export: $(cat "$W/export.log")"
ok "$(head -1 "$W/export.log")"
# the length penalty the export maps our alpha 0.6 to (as hf_export.py does)
lp=$(grep -o 'length_penalty [0-9.]*' "$W/export.log" | cut -d' ' -f2)
[ -n "$lp" ] || fail "the export names no length_penalty: $(cat "$W/export.log")"
"$PY" tests/ct2_check.py "$W/ct2" "$W" "$lp" >"$W/check.log" 2>"$W/check.err" \
    || { cat "$W/check.log"; fail "ct2_check (above; stderr: $(tail -3 "$W/check.err"))"; }
cat "$W/check.log"

# a checkpoint with a head mask (config mask_heads): CTranslate2 has no head
# gates, so the export zeroes the masked heads' W_o columns, the same
# function: CTranslate2's NLL of dev (score_batch) is eval's
train_masked_model "$W/masked" "$W/d.h5" $WORD_ARCH
"$PY" analysis/ct2_export.py "$CKM" "$W/d.h5" "$W/ct2_masked" >"$W/export_masked.log" 2>&1 \
    || fail "export masked: $(cat "$W/export_masked.log")"
"$PY" - "$W/ct2_masked" "$W/d.h5" "$MASKED_NLL" <<'EOF' \
    || fail "mask_heads: CTranslate2's model is not the checkpoint's"
import sys, ctranslate2, h5py
tr, f, ours = ctranslate2.Translator(sys.argv[1], intra_threads=1), h5py.File(sys.argv[2], "r"), float(sys.argv[3])
g, L, pieces = f["splits/dev"], int(f.attrs["max_len"]), [p.decode() for p in f["vocab/pieces"][()]]
so, si, to, ti = (g[k][:].tolist() for k in ("src_offsets", "src_ids", "tgt_offsets", "tgt_ids"))
text = lambda ids, off, k: [pieces[i] for i in ids[off[k]:off[k + 1]]]   # noqa: E731
pairs = [(text(si, so, k), text(ti, to, k)) for k in range(len(so) - 1)]
pairs = [(s, t) for s, t in pairs if len(s) < L and len(t) < L]   # eval skips over-long pairs
lp = [r.log_probs for r in tr.score_batch([s for s, _ in pairs], [t for _, t in pairs])]
nll = -sum(map(sum, lp)) / sum(map(len, lp))
print(f"mask_heads: CTranslate2's dev NLL per token {nll:.4f}, eval's {ours}")
assert abs(nll - ours) < 2e-4
EOF
ok "mask_heads: CTranslate2's dev NLL per token = eval's (the masked heads' W_o columns exported as 0)"

"$BIN" train data="$W/d.h5" $WORD_ARCH d_k=4 d_v=8 train_steps=1 threads=1 run_dir="$W/rowb" >"$W/rowb.log" 2>&1 \
    || fail "train row B: $(tail -2 "$W/rowb.log")"
expect_error 2 "^error: .*d_k = 4 with n_heads = 4 is not d_model/n_heads" \
    "$PY" analysis/ct2_export.py "$(ls "$W"/rowb/ckpt_*.h5 | tail -1)" "$W/d.h5" "$W/ct2_rowb"
[ ! -e "$W/ct2_rowb" ] || fail "a refused export left $W/ct2_rowb"
cp "$CK" "$W/no_w1.h5"   # a tensor missing (read_checkpoint, shared with hf_export.py)
"$PY" -c "import sys, h5py; del h5py.File(sys.argv[1], 'r+')['params/decoder/layer_01/ffn/W_1']" "$W/no_w1.h5"
expect_error 2 "^error: .*no_w1.h5: checkpoint lacks params/decoder/layer_01/ffn/W_1" \
    "$PY" analysis/ct2_export.py "$W/no_w1.h5" "$W/d.h5" "$W/ct2_no_w1"
[ ! -e "$W/ct2_no_w1" ] || fail "a refused export left $W/ct2_no_w1"
if [ -x .venv/bin/python ] && ! .venv/bin/python -c "import ctranslate2" 2>/dev/null; then
    expect_error 2 "^error: ctranslate2: not installed" .venv/bin/python analysis/ct2_export.py "$CK" "$W/d.h5" "$W/ct2_novenv"
fi
echo "ok: test_ct2_export"
