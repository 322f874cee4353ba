#!/usr/bin/env bash
# CUDA Graphs of the training step (cuda/graph.cuh, cuda/step_graph.cuh) on
# the CUDA emulator: a run with cuda_graphs=1 ends with parameters bitwise
# equal to the same run with cuda_graphs=0, and logs the same losses, in
# fp32 (1 rank; with head gates and the attention probe; with the fused
# attention kernels), bf16 (1 rank with the tensor-core attention; 2 ranks, NCCL and the MPI fallback; 2 ranks with
# update_freq 2), fp16 across loss-scale skips and growths, and across a
# checkpoint and resume; each run replayed graphs (its "cuda graphs:" line).
# The emulator replays exactly what a capture recorded, so a kernel argument
# that changes between steps and is not in the step's key would show here as
# different parameters; the backend's own check stops such a run first (a
# planted one below).  The capture rules themselves: test_cuda_graphs_planted.
set -u
. "$(dirname "$0")/lib.sh"
EMU=$TOP/bin/tests/emu-transformer
need_emulator "$EMU"
export OMP_NUM_THREADS=1 CUDA_EMU_DEVICES=2
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
# 40 pairs in batches of at most 160 tokens: a few shapes, each seen again
# within the 12 steps
A="n_layers=1 d_model=24 d_ff=40 n_heads=2 d_k=8 d_v=12 train_steps=12 log_steps=1 max_tokens=160 synth_train=40
   synth_dev=8 max_len=14 warmup=10 threads=1 ckpt_minutes=0 device=cuda"

# NAME LAUNCHER ARGS...: the run with and without graphs, the same parameters and losses
same_run() {
    local name=$1 launch=$2; shift 2
    rm -rf $W/rd-g $W/rd-n
    $launch "$EMU" train $A "$@" cuda_graphs=1 run_dir=$W/rd-g --dump-params $W/g.bin > $W/g.log 2>&1 ||
        fail "$name, graphs: $(tail -3 $W/g.log)"
    $launch "$EMU" train $A "$@" cuda_graphs=0 run_dir=$W/rd-n --dump-params $W/n.bin > $W/n.log 2>&1 ||
        fail "$name, no graphs: $(tail -3 $W/n.log)"
    cmp -s $W/g.bin $W/n.bin || fail "$name: parameters with cuda_graphs=1 differ from cuda_graphs=0"
    diff <(step_losses $W/g.log) <(step_losses $W/n.log) > $W/diff.txt || fail "$name: losses differ: $(head -4 $W/diff.txt)"
    local st replayed
    st=$(grep -m1 '^cuda graphs: ' $W/g.log) || fail "$name: no 'cuda graphs:' line"
    replayed=$(awk '{ print $3 }' <<< "$st")
    [ "$replayed" -gt 0 ] || fail "$name: no step replayed: $st"
    grep -q '^cuda graphs: ' $W/n.log && fail "$name: cuda_graphs=0 reports graphs"
    ok "$name: cuda_graphs=1 = cuda_graphs=0 bitwise ($st)"
}
one() { "$@"; }
two() { mpirun -np 2 -x CUDA_EMU_DEVICES "$@"; }

same_run "fp32, 1 rank" one
# head gates (a masked head: the gate ops in every attention block) and the
# attention maps of 4 dev pairs every 4 steps, taken between graph steps
same_run "fp32, 1 rank, a masked head, attention probe" one mask_heads=enc:0:1 attn_steps=4
for s in 4 8 12; do
    h5diff $W/rd-g/attention_probe.h5 $W/rd-n/attention_probe.h5 /step_0000000$s /step_0000000$s > $W/diff.txt 2>&1 ||
        h5diff $W/rd-g/attention_probe.h5 $W/rd-n/attention_probe.h5 /step_000000$s /step_000000$s > $W/diff.txt 2>&1 ||
        fail "the attention probe of step $s with cuda_graphs=1 differs from cuda_graphs=0: $(head -3 $W/diff.txt)"
done
ok "attention probe between graph steps: the same maps at steps 4, 8, 12"
TRANSFORMER_ATTENTION=fused same_run "fp32, 1 rank, fused attention kernels" one
# bf16: the tensor-core kernels, whose forward keeps row statistics and whose
# backward recomputes P from them (the model records which, per layer)
TRANSFORMER_ATTENTION=fused same_run "bf16, 1 rank, tensor-core attention, P recomputed" one precision=bf16
same_run "bf16, 2 ranks, NCCL" two precision=bf16
same_run "bf16, 2 ranks, MPI on host copies" two precision=bf16 allreduce=mpi
same_run "bf16, 2 ranks, update_freq 2" two precision=bf16 update_freq=2

# fp16: planted overflows skip steps 3 and 7 (the loss scale halves: a new
# key) and the scale doubles after 3 good steps
TRANSFORMER_GRAD_INF=0:3 same_run "fp16, 1 rank, a loss-scale skip" one precision=fp16 loss_scale_window=3
grep -q 'skipped 1' $W/g.log || fail "fp16: no skipped step in the log: $(step_losses $W/g.log | tail -3)"

# checkpoint and resume: 6 steps, then resumed to 12, with graphs; against
# 12 uninterrupted steps without
"$EMU" train $A precision=bf16 train_steps=6 ckpt_steps=6 run_dir=$W/res > $W/r1.log 2>&1 || fail "first half: $(tail -3 $W/r1.log)"
"$EMU" train $A precision=bf16 ckpt_steps=6 run_dir=$W/res --dump-params $W/r.bin > $W/r2.log 2>&1 ||
    fail "resumed half: $(tail -3 $W/r2.log)"
grep -q '^cuda graphs: [1-9]' $W/r2.log || fail "the resumed run replayed no graph: $(grep 'cuda graphs' $W/r2.log)"
"$EMU" train $A precision=bf16 cuda_graphs=0 --dump-params $W/u.bin > $W/u.log 2>&1 || fail "uninterrupted: $(tail -3 $W/u.log)"
cmp -s $W/r.bin $W/u.bin || fail "resumed with graphs: parameters differ from 12 uninterrupted steps without"
ok "bf16: 6 steps + 6 resumed with graphs = 12 steps without, bitwise"

# a replayed step whose calls differ from its capture ends the run with one
# line: planted by TRANSFORMER_GRAPH_STALE=1, which passes the dropout step
# by value (the graph would replay the step of its capture)
expect_error 1 "error: cuda graphs: segment 0 of a replayed step differs from its capture" \
    env TRANSFORMER_GRAPH_STALE=1 "$EMU" train $A
ok "a planted stale argument (the dropout step by value) is caught at its first replay"
