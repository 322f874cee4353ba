#!/usr/bin/env bash
# Decoding throughput on Multi30k test2016 (1,000 sentences): sentences/s and
# target tokens/s for beam 1 and beam 4 (incremental decoding with cached
# keys/values), and the speed-up of incremental greedy decoding over greedy
# decoding by full recomputation of the decoder each step (src/greedy.c), and
# the same decoding in PyTorch (tests/bench/torch_decode.py: same checkpoint,
# batches and search), all measured side by side in this run, with how many
# outputs agree.
#   CKPT  checkpoint (default: runs/multi30k/average.h5, else the newest
#         runs/multi30k/ckpt_*.h5, else a model of input/multi30k.cfg trained
#         here for BENCH_STEPS steps: its outputs, and so the speed, are then
#         less representative than a trained model's)
#   DATA  dataset (default data/multi30k.h5, prepared if missing)
#   THREADS thread counts to run (default "1 2"), BATCH sentences per batch (default 64)
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
cd "$TOP"
DATA=${DATA:-data/multi30k.h5}
THREADS=${THREADS:-1 2}
BATCH=${BATCH:-64}
W=$(mktemp -d /tmp/bench_decode.XXXXXX)
trap 'rm -rf "$W"' EXIT
[ -f "$DATA" ] || input/prepare.sh multi30k "$SHARED_DATA" "$DATA" >"$W/prep.log"
if [ -z "${CKPT:-}" ]; then
    if [ -f runs/multi30k/average.h5 ]; then CKPT=runs/multi30k/average.h5
    elif ls runs/multi30k/ckpt_*.h5 >/dev/null 2>&1; then CKPT=$(ls runs/multi30k/ckpt_*.h5 | tail -1)
    else
        echo "no trained Multi30k checkpoint: training input/multi30k.cfg for ${BENCH_STEPS:=300} steps first"
        "$BIN" train --config input/multi30k.cfg data="$DATA" train_steps="$BENCH_STEPS" run_dir="$W/run" \
            eval_steps=0 threads="${THREADS##* }" >"$W/train.log"
        CKPT=$(ls "$W"/run/ckpt_*.h5 | tail -1)
    fi
fi
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
# PyTorch's thread settings (see bench_cpu_train.sh): OpenBLAS threads pinned,
# passive OpenMP waiting (its best here: greedy with 2 threads 43 -> 145
# sentences/s)
TORCH_ENV=${TORCH_ENV:-OMP_WAIT_POLICY=PASSIVE}
have_torch=1
$TORCH_PY -c "import torch, h5py" 2>/dev/null || { have_torch=0; echo "(PyTorch or h5py not found for $TORCH_PY: install python3-torch python3-h5py; ours only)"; }
$TORCH_PY -c "import h5py; f = h5py.File('$DATA', 'r'); open('$W/spm.model', 'wb').write(f['vocab/spm_model'][()].tobytes())" 2>/dev/null \
    || have_torch=0
echo "checkpoint $CKPT, data $DATA, test2016, batches of $BATCH sentences, threads: $THREADS"
run() {   # name threads extra args... -> "time sentences/s tokens/s"
    local name=$1 th=$2; shift 2
    "$BIN" translate --checkpoint "$CKPT" --data "$DATA" --split test2016 --output "$W/$name.txt" \
        --batch-size "$BATCH" threads="$th" "$@" >"$W/$name.log"
    local line; line=$(grep '^translate:' "$W/$name.log")
    echo "$line" | sed -E 's/.* in ([0-9.]+)s: ([0-9.]+) sentences\/s, ([0-9]+) target tokens\/s.*/\1 \2 \3/'
}
# the same checkpoint, sentences, batches and search in PyTorch
# (tests/bench/torch_decode.py); its ids are detokenised with the dataset's
# SentencePiece model, as translate does, so the outputs can be compared
torch_run() {   # name threads beam -> "time sentences/s tokens/s"
    local name=$1 th=$2 K=$3
    [ $have_torch = 1 ] || { echo "0 0 0"; return; }
    env $TORCH_ENV OPENBLAS_NUM_THREADS=$th OMP_NUM_THREADS=$th MKL_NUM_THREADS=$th $TORCH_PY tests/bench/torch_decode.py \
        "$CKPT" "$DATA" test2016 --beam "$K" --batch "$BATCH" --threads "$th" --out "$W/$name.ids" >"$W/$name.log"
    spm_decode --model="$W/spm.model" --input_format=id <"$W/$name.ids" >"$W/$name.txt"
    sed -E 's/.* in ([0-9.]+) s: ([0-9.]+) sentences\/s, ([0-9]+) target tokens\/s.*/\1 \2 \3/' "$W/$name.log"
}
same() { paste -d '\t' "$W/$1.txt" "$W/$2.txt" | awk -F '\t' '$1 == $2' | wc -l; }
n_lines=0
printf '%-8s %-6s %11s %13s %11s %7s %14s\n' threads beam "ours sent/s" "torch sent/s" "ours/torch" tok/s "same outputs"
for th in $THREADS; do
    for K in 4 1; do
        read -r _ s_o k_o < <(run "ours-$th-$K" "$th" beam=$K)
        read -r _ s_t _ < <(torch_run "torch-$th-$K" "$th" "$K")
        n_lines=$(wc -l <"$W/ours-$th-$K.txt")
        printf '%-8s %-6s %11.1f %13.1f %11.2f %7.0f %14s\n' "$th" "$K" "$s_o" "$s_t" \
            "$(echo "if ($s_t > 0) $s_o / $s_t else 0" | bc -l)" "$k_o" \
            "$([ $have_torch = 1 ] && echo "$(same "ours-$th-$K" "torch-$th-$K") of $n_lines" || echo -)"
    done
done
th=${THREADS##* }
read -r t1 s1 k1 < <(run beam1 "$th" beam=1)
read -r tr sr kr < <(run recompute "$th" --recompute)
echo "greedy, $th threads: incremental (K/V caches) $s1 sentences/s, full recomputation of the decoder each step $sr sentences/s:" \
     "speed-up $(echo "scale=2; $tr / $t1" | bc)x"
# (they can differ only where a sentence reaches its maximum length: the
# recomputation reference uses one maximum per batch, decode.c one per sentence)
echo "greedy outputs identical (incremental vs recomputation): $(same beam1 recompute) of $(wc -l <"$W/beam1.txt") lines"
echo "command: CKPT=$CKPT DATA=$DATA THREADS=\"$THREADS\" BENCH=decode make bench"
