#!/usr/bin/env bash
# Data pipeline figures on Multi30k (make bench):
#  1. input/prepare.sh multi30k end to end (validation, spm_train, spm_encode,
#     HDF5 write), wall time;
#  2. loader time per step (batchplan_global + batch_build, what train.c does
#     per micro-batch) against the training step time of a small model on the
#     same dataset, same max_tokens: must stay under 2%;
#  3. the long learning run: dev perplexity of a d_model 256, 3+3 layer model
#     after STEPS steps against the unigram baseline (tests/test_data_learn.sh
#     is the short version).
set -u
. "$(dirname "$0")/../lib.sh"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$TOP"
t0=$(date +%s.%N)
VOCAB=8000 MAX_LEN=128 input/prepare.sh multi30k "" "$W/m.h5" >"$W/prep.log" 2>&1 || { cat "$W/prep.log"; exit 1; }
t1=$(date +%s.%N)
tail -1 "$W/prep.log"
printf 'prepare multi30k end to end: %.1f s\n' "$(echo "$t1 - $t0" | bc)"

mpicc -O2 -std=c11 -D_GNU_SOURCE -Isrc $(pkg-config --cflags hdf5-openmpi) tests/bench/loader_time.c src/dataset.c \
    src/batch.c src/batcher.c src/util.c -o "$W/loader_time" $(pkg-config --libs hdf5-openmpi) -lm || exit 1
MT=${MAX_TOKENS:-2048}
lt=$("$W/loader_time" "$W/m.h5" "$MT" 128 2000) || exit 1
echo "loader: $lt"
per_us=$(echo "$lt" | awk '{print $6}')

STEPS=${STEPS:-20}
ARCH="vocab_size=8000 max_len=128 d_model=256 d_ff=1024 n_heads=4 d_k=64 d_v=64 n_layers=3"
"$BIN" train data="$W/m.h5" $ARCH max_tokens=$MT train_steps=$STEPS log_steps=$STEPS warmup=4000 >"$W/train.log" 2>&1 \
    || { cat "$W/train.log"; exit 1; }
grep '^step' "$W/train.log"
step_s=$(awk -v n=$STEPS '/^step/ { e=$NF; sub("s","",e) } END { print e / n }' "$W/train.log")
ratio=$(awk -v a="$per_us" -v b="$step_s" 'BEGIN { printf "%.4f", 100 * a * 1e-6 / b }')
echo "train step: ${step_s} s; loader per step: ${per_us} us = ${ratio}% of a step (bound 2%)"
awk -v r="$ratio" 'BEGIN { exit !(r < 2) }' || { echo "loader is too slow"; exit 1; }

if [ "${LONG:-0}" = 1 ]; then
    ARCH="d_model=256 d_ff=1024 n_heads=4 d_k=64 d_v=64 n_layers=3" STEPS=${LONG_STEPS:-2000} bash tests/test_data_learn.sh
fi
echo "command: make bench BENCH=bench_data   (LONG=1 for the learning run)"
