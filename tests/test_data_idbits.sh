#!/usr/bin/env bash
# 16-bit ids (docs/dataset.md): prepare stores the ids as uint16 when the
# vocabulary fits (here 500 pieces) and as int32 with --id-bits 32, and
# both files of the same corpus give bitwise the same training: the same
# loss on every step and the same parameters after it (--dump-params), on
# one rank and on two.  The batches widen the 16-bit ids of the pairs they
# take (batch_build), so nothing else may differ.
set -u
. "$(dirname "$0")/lib.sh"
command -v spm_train >/dev/null || skip "no spm_train (Debian package sentencepiece)"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
text_corpus 3000 1 "$W/train.en" "$W/train.xx"
text_corpus 200 2 "$W/dev.en" "$W/dev.xx"
P=(prepare --split train "$W/train.en" "$W/train.xx" --split dev "$W/dev.en" "$W/dev.xx" vocab_size=500 max_len=32)
"$BIN" "${P[@]}" --out "$W/d16.h5" >"$W/p16.log" 2>&1 || fail "prepare: $(tail -2 "$W/p16.log")"
"$BIN" "${P[@]}" --out "$W/d32.h5" --id-bits 32 >"$W/p32.log" 2>&1 || fail "prepare --id-bits 32: $(tail -2 "$W/p32.log")"
h5dump -H -d /splits/train/src_ids "$W/d16.h5" | grep -q H5T_STD_U16LE || fail "vocab 500: ids not stored as uint16"
h5dump -H -d /splits/train/src_ids "$W/d32.h5" | grep -q H5T_STD_I32LE || fail "--id-bits 32: ids not stored as int32"
h5dump -a /id_bits "$W/d16.h5" | grep -q "(0): 16" || fail "id_bits attribute is not 16"
for s in src tgt; do
    cmp -s <(ids "$W/d16.h5" /splits/train/${s}_ids) <(ids "$W/d32.h5" /splits/train/${s}_ids) || fail "$s ids differ"
done
ok "the same ids stored in 16 bits ($(stat -c %s "$W/d16.h5") bytes) and 32 bits ($(stat -c %s "$W/d32.h5") bytes)"

A=(train vocab_size=500 max_len=32 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16 n_layers=1 max_tokens=256
   train_steps=8 warmup=4 log_steps=1 eval_steps=4 seed=3 threads=1)
losses() { awk '/^step / || /^dev / { for (i = 1; i < NF; i++) if ($i == "loss_ls" || $i == "nll") printf "%s %s ", $1, $(i + 1); print "" }' "$1"; }
for np in 1 2; do
    for b in 16 32; do
        mpirun -np $np "$BIN" "${A[@]}" data="$W/d$b.h5" --dump-params "$W/p$b.$np.bin" >"$W/t$b.$np.log" 2>&1 \
            || fail "train on the $b-bit file, $np ranks: $(tail -3 "$W/t$b.$np.log")"
    done
    losses "$W/t16.$np.log" >"$W/l16"; losses "$W/t32.$np.log" >"$W/l32"
    [ "$(grep -c step "$W/l16")" -ge 8 ] || fail "$np ranks: fewer than 8 step lines"
    cmp -s "$W/l16" "$W/l32" || { diff "$W/l16" "$W/l32" | head; fail "$np ranks: the losses differ"; }
    cmp -s "$W/p16.$np.bin" "$W/p32.$np.bin" || fail "$np ranks: the parameters after training differ"
    ok "$np rank(s): 16-bit and 32-bit datasets give the same $(grep -c step "$W/l16") losses and the same parameters ($(stat -c %s "$W/p16.$np.bin") bytes)"
done
