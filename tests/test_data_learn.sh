#!/usr/bin/env bash
# Training on real Multi30k learns: after a short run a small Transformer's
# dev perplexity (per wordpiece, no label smoothing, EOS included) is well
# below the unigram baseline of the dev targets, i.e. the perplexity of the
# training-target unigram distribution (add-one smoothed, EOS counted) on the
# dev targets -- computed here from the ids in the dataset file itself.
# (No label smoothing or dropout: a short run measures learning, not
# regularisation.)  The long run: LONG=1 tests/bench/bench_data.sh.
set -u
. "$(dirname "$0")/lib.sh"
need_multi30k   # sets M (tests/lib.sh): shared data, a download, or a skip
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
V=2000
"$BIN" prepare --out "$W/m.h5" --split train "$M/train.en" "$M/train.de" --split dev "$M/val.en" "$M/val.de" \
    vocab_size=$V max_len=64 || fail "prepare"

# unigram baseline from the dataset's target ids
ids "$W/m.h5" /splits/train/tgt_ids >"$W/train.ids"
ids "$W/m.h5" /splits/dev/tgt_ids >"$W/dev.ids"
n_train=$(h5dump -a /splits/train/n_pairs "$W/m.h5" | awk '/\(0\)/ {print $2}')
n_dev=$(h5dump -a /splits/dev/n_pairs "$W/m.h5" | awk '/\(0\)/ {print $2}')
uni=$(awk -v V=$V -v ntr="$n_train" -v ndev="$n_dev" '
    NR==FNR { c[$1]++; n++; next }
    { s += log((c[$1] + 1) / (n + ntr + V)); m++ }
    END { s += ndev * log((ntr + 1) / (n + ntr + V)); m += ndev; printf "%.3f", exp(-s / m) }' \
    "$W/train.ids" "$W/dev.ids")
echo "unigram dev perplexity: $uni"

t0=$(date +%s)
ARCH=${ARCH:-d_model=64 d_ff=256 n_heads=4 d_k=16 d_v=16 n_layers=2}
"$BIN" train data="$W/m.h5" vocab_size=$V max_len=64 $ARCH \
    max_tokens=1024 train_steps=${STEPS:-120} warmup=60 log_steps=20 seed=5 \
    label_smoothing=0 dropout=0 >"$W/train.log" 2>&1 || { cat "$W/train.log"; fail "train"; }
cat "$W/train.log"
ppl=$(field '^dev final' ppl "$W/train.log")
[ -n "$ppl" ] || fail "no dev perplexity in the log"
echo "dev perplexity after training: $ppl (unigram $uni), $(( $(date +%s) - t0 ))s"
awk -v p="$ppl" -v u="$uni" 'BEGIN { exit !(p < 0.6 * u) }' || fail "dev perplexity $ppl is not well below the unigram baseline $uni"
ok "dev perplexity $ppl < 0.6 x unigram $uni"
