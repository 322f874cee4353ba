#!/usr/bin/env bash
# The held-back column sums of the CUDA backward (cuda/gemm.cuh
# k_colsum_final_list, ops.h defer_sums) on the emulator: a training run
# that holds back every LayerNorm and bias gradient's last stage and adds
# them in one launch (the default) ends with parameters and losses bitwise
# equal to the same run with each last stage a launch of its own
# (TRANSFORMER_DEFER_SUMS=0): on 1 rank (one release, before the source
# embedding's backward), with 7 layers (49 sums: the list of 48 runs early),
# on 2 ranks with NCCL and 1 KB buckets (a release before each layer's
# gradient hook: without it the emulator reports the allreduce racing the
# late sums), with update_freq 2, in fp32 and bf16, with and without CUDA
# Graphs; and deferring launches fewer column-sum kernels (gpu_model's count
# of a base′ step), so that a backend that never deferred would fail here.
set -u
. "$(dirname "$0")/lib.sh"
EMU=$TOP/bin/tests/emu-transformer
need_emulator "$EMU"
export OMP_NUM_THREADS=1 CUDA_EMU_DEVICES=2
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
A="n_layers=2 d_model=24 d_ff=40 n_heads=2 d_k=8 d_v=12 train_steps=6 log_steps=1 max_tokens=160 synth_train=40
   synth_dev=8 max_len=14 warmup=10 threads=1 ckpt_minutes=0 device=cuda"

one() { "$@"; }
two() { mpirun -np 2 -x CUDA_EMU_DEVICES -x TRANSFORMER_DEFER_SUMS "$@"; }

# NAME LAUNCHER ARGS...: the run deferring and not, the same parameters and losses
same_run() {
    local name=$1 launch=$2; shift 2
    rm -rf $W/rd-d $W/rd-n
    $launch "$EMU" train $A "$@" run_dir=$W/rd-d --dump-params $W/d.bin > $W/d.log 2>&1 ||
        fail "$name, deferred: $(tail -3 $W/d.log)"
    TRANSFORMER_DEFER_SUMS=0 $launch "$EMU" train $A "$@" run_dir=$W/rd-n --dump-params $W/n.bin > $W/n.log 2>&1 ||
        fail "$name, not deferred: $(tail -3 $W/n.log)"
    cmp -s $W/d.bin $W/n.bin || fail "$name: parameters with the column sums deferred differ from without"
    diff <(step_losses $W/d.log) <(step_losses $W/n.log) > $W/diff.txt || fail "$name: losses differ: $(head -4 $W/diff.txt)"
    ok "$name: deferred = one launch each, bitwise"
}

same_run "fp32, 1 rank" one cuda_graphs=0
same_run "fp32, 1 rank, 7 layers (49 sums)" one cuda_graphs=0 n_layers=7
TRANSFORMER_ATTENTION=fused same_run "bf16, 1 rank, fused attention, CUDA Graphs" one precision=bf16 cuda_graphs=1
same_run "fp32, 2 ranks, NCCL, 1 KB buckets (a release per layer)" two cuda_graphs=0 bucket_kb=1
same_run "bf16, 2 ranks, update_freq 2, CUDA Graphs" two precision=bf16 update_freq=2 cuda_graphs=1

# the launches: a step's column-sum finals are one launch when deferred
# (the model's gpu_model counts them from the same code: a step of base′)
M=$TOP/bin/tests/gpu_model
[ -x "$M" ] || fail "bin/tests/gpu_model missing (make tests)"
finals() { "$M" --config "$TOP/input/table3-m30k/base.cfg" --batch 140 --len 14 precision=bf16 2>&1 |
    awk '/^colsums / { print $2 }'; }
d=$(finals) n=$(TRANSFORMER_DEFER_SUMS=0 finals)
[ -n "$d" ] && [ -n "$n" ] || fail "no colsums line in gpu_model's output"
[ "$d" -lt "$n" ] || fail "column-sum launches a step: $d deferred, $n not: deferring saved none"
ok "column-sum launches a step of base′: $n one by one, $d deferred"
