#!/usr/bin/env bash
# The GEMM shape sweep of issue 32 (docs/gpu-model.md section 7): every
# GEMM shape class of the base and big steps at the paper's batch (610
# sentences of 41 tokens, 25,010 per step), each timed through the
# backend's own cuBLAS/cuBLASLt call, the median of REPS repeats, beside
# the model's prediction, into one CSV.
#   tests/gpu/gemm_sweep.sh GPU_MODEL_BIN OUT.csv [REPS] [key=value ...]
# GPU_MODEL_BIN: bin/gpu/gpu_model on a GPU, bin/tests/gpu_model on the
# emulator (a dry run: every shape, the emulator's times).
set -eu
[ $# -ge 2 ] || { echo "error: usage: $0 GPU_MODEL_BIN OUT.csv [REPS] [key=value ...]" >&2; exit 2; }
bin=$1 out=$2 reps=${3:-20}
shift $(($# < 3 ? $# : 3))
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for m in base big; do
    "$bin" --model "$m" --batch 610 --len 41 precision=bf16 "$@" --gemm-sweep "$tmp/$m.csv" --reps "$reps" |
        grep '^gemm-sweep:'
done
{ cat "$tmp/base.csv"; tail -n +2 "$tmp/big.csv"; } > "$out"
echo "gemm-sweep: $(($(wc -l < "$out") - 1)) shape classes of base and big: $out"
