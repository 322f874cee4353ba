#!/usr/bin/env bash
# CUDA backend under the CPU emulator (cuda/emu/): the whole training step
# with 2 MPI ranks against the CPU backend (tests/cuda/test_cuda_step.c), a
# short `transformer train device=cuda` run whose losses must match
# device=cpu, the same with precision=bf16 and an 80-step bf16 run, and
# device=cuda without a GPU failing with one error line.  The 2-rank step
# and the 8-step run also with the kernels contracted into FMA as nvcc does.
set -u
. "$(dirname "$0")/lib.sh"
EMU=$TOP/bin/tests/emu-transformer
STEP=$TOP/bin/tests/test_cuda_step
need_emulator "$EMU" "$STEP"
export OMP_NUM_THREADS=1
# two emulated GPUs: the 2-rank runs below take one each (one rank per GPU)
export CUDA_EMU_DEVICES=2

# The runs after the first vary one path the positional encoding does not
# reach (the allreduce, the attention kernels, the GEMM epilogues): each
# with one encoding (positional=), sinusoid and learned in turn.
# (big-scores: and an fp16 step whose attention scores pass 65504 before
# the 1/sqrt(d_k) scale, test_cuda_step.c check_big_scores)
out=$(mpirun -np 2 "$STEP" big-scores) && echo "$out" | grep -q "^ok   ranks 2 fp16, scores up to" \
    || fail "2-rank training step: CUDA (emulated, NCCL) differs from CPU: $(echo "$out" | grep -v '^ok' | head -5)"
# (the whole output first: grep -q closing the pipe early would abort mpirun)
out=$(mpirun -np 2 "$STEP" allreduce=mpi positional=sinusoid) && echo "$out" | grep -q "ok   ranks 2" \
    || fail "2-rank training step with the MPI fallback (allreduce=mpi) differs from CPU"
out=$(mpirun -np 2 -x TRANSFORMER_NCCL=0 "$STEP" positional=learned) && echo "$out" | grep -q "ok   ranks 2" \
    || fail "2-rank training step with the MPI fallback (TRANSFORMER_NCCL=0) differs from CPU"
ok "2-rank training step: CUDA (emulated) = CPU (loss, every gradient, parameters after Adam)"
# the same with the emulated kernels contracted into FMA as nvcc's default
# --fmad=true emits them (Makefile EMU_FMA_FLAGS; measured: the same worst
# errors within 10%, e.g. fp32 gradients 1.37e-06 vs 1.45e-06)
HAVE_FMA=$(grep -m1 -ow fma /proc/cpuinfo)
if [ -n "$HAVE_FMA" ]; then
    out=$(mpirun -np 2 "$TOP/bin/tests/emu-step-fma" 2>&1) \
        || fail "2-rank training step, kernels with FMA: CUDA (emulated) differs from CPU: $(echo "$out" | grep -v '^ok' | head -5)"
    ok "2-rank training step with FMA-contracted kernels: CUDA (emulated) = CPU"
else
    echo "skip: this CPU has no FMA: the 2-rank step with FMA-contracted kernels (emu-step-fma) is not run"
fi

# the attention core: the fused kernels (cuda/attention.cuh) with
# TRANSFORMER_ATTENTION=fused, the batched GEMMs and separate softmax with
# =gemm (the default: its 2-rank step is the one above): each step equals
# the CPU's (fp32, bf16, fp16), each runs what it names (the step's
# declared calls) with its declared costs
out=$(mpirun -np 2 -x TRANSFORMER_ATTENTION=fused "$STEP" positional=learned) && echo "$out" | grep -q "ok   ranks 2" \
    || fail "2-rank training step with TRANSFORMER_ATTENTION=fused differs from CPU: $out"
out=$(TRANSFORMER_ATTENTION=fused "$TOP/bin/tests/test_cuda_costs" 2>&1) && echo "$out" | grep -q " attention_forward .* calls" \
    && echo "$out" | grep -q " attention_backward .* calls" && ! echo "$out" | grep -q " softmax_forward .* calls" \
    || fail "the training step does not run the fused attention kernels: $out"
out=$(TRANSFORMER_ATTENTION=gemm "$TOP/bin/tests/test_cuda_costs" 2>&1) && echo "$out" | grep -q " softmax_forward .* calls" \
    && ! echo "$out" | grep -q " attention_forward .* calls" \
    || fail "TRANSFORMER_ATTENTION=gemm: not the GEMM path, or its declared costs differ from the counted ones: $out"
expect_error 2 "error: device=cuda: TRANSFORMER_ATTENTION 'flash' is not fused or gemm" \
    env TRANSFORMER_ATTENTION=flash "$EMU" train device=cuda train_steps=1
ok "training step: TRANSFORMER_ATTENTION=fused the fused kernels, =gemm the GEMM path, both = CPU"

# cuBLASLt without an algorithm for the fused feed-forward epilogues
# (cuda/emu/cublaslt_emu.cc), with the ReLU mask on (TRANSFORMER_RELU_MASK=1):
# every one refused, NCCL; the forward's only
# (its ReLU mask never written: the backward must not read it), MPI
# fallback.  fp32, bf16 and fp16 each; the model's d_ff = 50 also puts
# biases off 16-byte boundaries (LT_ALIGN)
for mode_ar in 1:nccl:sinusoid forward:mpi:learned; do
    IFS=: read -r mode ar pe <<< "$mode_ar"
    out=$(mpirun -np 2 -x CUDA_EMU_LT_NO_EPILOGUE=$mode -x TRANSFORMER_RELU_MASK=1 "$STEP" allreduce=$ar positional=$pe) \
        && echo "$out" | grep -q "ok   ranks 2" \
        || fail "2-rank training step with CUDA_EMU_LT_NO_EPILOGUE=$mode differs from CPU: $out"
done
ok "2-rank training step without cuBLASLt epilogues (all, forward only) = CPU"
# the unfused path declares the costs of what it runs (docs/gpu-model.md)
out=$(CUDA_EMU_LT_NO_EPILOGUE=1 "$TOP/bin/tests/test_cuda_costs" 2>&1) \
    || fail "declared costs without cuBLASLt epilogues differ from the counted ones: $(echo "$out" | grep FAIL | head -3)"
ok "declared costs without cuBLASLt epilogues = counted (fp32, bf16, fp16)"
# TRANSFORMER_RELU_MASK (cuda/device.cuh): =0 (the default) keeps no ReLU
# mask and runs the unfused GEMM + masking pass, =1 the cuBLASLt bit-mask
# and DRELU matmul: each = CPU, its declared costs = counted, and =0's
# linear_relu_backward moves fewer bytes (no mask read) than =1's DRELU
# matmul; a bad value refused
out=$(mpirun -np 2 -x TRANSFORMER_RELU_MASK=1 "$STEP" positional=sinusoid) && echo "$out" | grep -q "ok   ranks 2" \
    || fail "2-rank training step with TRANSFORMER_RELU_MASK=1 differs from CPU: $out"
relu_bytes() { "$TOP/bin/tests/test_cuda_costs" 2>&1 | awk '$1 == "fp32" && $2 == "linear_relu_backward" { print $6 }'; }
b0=$(relu_bytes) b1=$(TRANSFORMER_RELU_MASK=1 relu_bytes)
out=$(TRANSFORMER_RELU_MASK=1 "$TOP/bin/tests/test_cuda_costs" 2>&1) && [ -n "$b0" ] && [ -n "$b1" ] && [ "$b0" -lt "$b1" ] \
    || fail "TRANSFORMER_RELU_MASK=1: costs not as counted, or =0 (default) reads a mask ($b0 vs $b1 bytes): $out"
expect_error 2 "error: device=cuda: TRANSFORMER_RELU_MASK 'x' is not 0 or 1" \
    env TRANSFORMER_RELU_MASK=x "$EMU" train device=cuda train_steps=1
ok "TRANSFORMER_RELU_MASK=1: the DRELU matmul = CPU; the default =0 moves $b0 bytes, not $b1; 'x' refused"

# a short `train` on 2 ranks, device=cuda (emulated) against device=cpu:
# the losses of every step, and the checkpoint and attention maps the run
# writes from device memory
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
# same_losses OUT_REF OUT NAME N RTOL [MIN_DROP]: the "step N loss_ls" and
# "dev final loss_ls" lines of two train outputs: N of them each, every pair within
# RTOL relative; with MIN_DROP, the 4th loss of OUT is below MIN_DROP x its first
same_losses() {
    python3 - "$@" <<'PY'
import re, sys
ref, out, name, n, rtol = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
def losses(s):
    return [float(x) for x in re.findall(r"^(?:step \d+|dev final) loss_ls ([0-9.]+)", s, re.M)]
a, b = losses(ref), losses(out)
print("cpu ", a); print(name, b)
assert len(a) == n and len(a) == len(b), "expected %d loss lines" % n
assert all(abs(x - y) <= rtol * abs(x) for x, y in zip(a, b))
if len(sys.argv) > 6:
    assert b[3] < float(sys.argv[6]) * b[0], "the loss did not fall"
PY
}

args="n_layers=1 d_model=24 d_ff=40 n_heads=2 d_k=8 d_v=12 train_steps=8 log_steps=1 max_tokens=160 synth_train=300
      synth_dev=8 max_len=14 warmup=10 threads=1 ckpt_steps=8 attn_steps=4 ckpt_minutes=0"
out_cpu=$(mpirun -np 2 "$EMU" train $args device=cpu run_dir=$W/cpu 2>&1) || fail "device=cpu run failed: $out_cpu"
out_gpu=$(mpirun -np 2 "$EMU" train $args device=cuda run_dir=$W/cuda 2>&1) || fail "device=cuda (emulated) run failed: $out_gpu"
echo "$out_gpu" | grep -q "backend cuda" || fail "device=cuda did not use the CUDA backend: $out_gpu"
# 8 step lines and the dev line
same_losses "$out_cpu" "$out_gpu" cuda 9 2e-4 || fail "losses of device=cuda (emulated) differ from device=cpu"
ok "8 training steps on 2 ranks: device=cuda (emulated) losses = device=cpu"
# the same 8 steps with FMA-contracted kernels (measured: every printed
# loss equal to device=cpu's, where the build without FMA differs in the
# 7th digit at step 3: 3.301155 vs 3.301156)
if [ -n "$HAVE_FMA" ]; then
    out_fma=$(mpirun -np 2 "$TOP/bin/tests/emu-transformer-fma" train $args device=cuda run_dir=$W/fma 2>&1) \
        || fail "device=cuda (emulated, FMA) run failed: $out_fma"
    same_losses "$out_cpu" "$out_fma" cuda-fma 9 2e-4 || fail "losses of device=cuda with FMA-contracted kernels differ from device=cpu"
    ok "8 training steps on 2 ranks: device=cuda (emulated, FMA-contracted kernels) losses = device=cpu"
fi
# (the files' root attributes hold the config text, device= included, and timings)
for fo in ckpt_00000008.h5:/params ckpt_00000008.h5:/adam_m ckpt_00000008.h5:/adam_v \
          attention_probe.h5:/step_00000004/sentences attention_probe.h5:/step_00000008/sentences; do
    f=${fo%%:*} o=${fo#*:}
    [ -f $W/cuda/$f ] || fail "device=cuda wrote no $f"
    # values within 2e-4; the tensors' exact checksums (docs/checkpoint.md) differ with them
    skip=$(h5ls -r $W/cpu/$f$o | awk -v o=$o '$2 == "Dataset" { print "--exclude-attribute", o $1 }')
    h5diff -d 2e-4 $skip $W/cpu/$f $W/cuda/$f $o $o > $W/diff.txt || fail "$f $o of device=cuda differs from device=cpu: $(head -5 $W/diff.txt)"
done
ok "checkpoint (parameters, Adam moments) and attention probe of device=cuda (emulated) = device=cpu within 2e-4"

# precision=bf16 (bf16 activations and GEMM inputs, fp32 master weights and
# Adam state), the same 2-rank run (gradient sums through MPI: allreduce=mpi): losses within 1e-2 of device=cpu (bf16
# rounding; measured ~5e-4), and the attention maps, downloaded from bf16
# storage, within 0.1 at step 4 (after 4 Adam steps at lr up to 2.6e-2 the
# two runs' weights have drifted apart; measured < 5e-2)
out_bf=$(mpirun -np 2 "$EMU" train $args device=cuda precision=bf16 allreduce=mpi run_dir=$W/bf16 2>&1) || fail "device=cuda precision=bf16 (emulated) run failed: $out_bf"
echo "$out_bf" | grep -q "backend cuda-bf16" || fail "precision=bf16 did not use the bf16 backend: $out_bf"
same_losses "$out_cpu" "$out_bf" bf16 9 1e-2 || fail "losses of device=cuda precision=bf16 (emulated) differ from device=cpu"
h5diff -d 0.1 $W/cpu/attention_probe.h5 $W/bf16/attention_probe.h5 /step_00000004/sentences /step_00000004/sentences > $W/diff.txt \
    || fail "attention probe of precision=bf16 differs from device=cpu: $(head -5 $W/diff.txt)"
ok "8 training steps on 2 ranks: device=cuda precision=bf16 (emulated) losses within 1e-2 of device=cpu, attention maps within 0.1"

# 80 steps of the synthetic reversal task (1 layer; the emulator runs ~5
# steps/s): the bf16 run learns as the fp32 CPU run does, every logged loss
# and the dev loss within 3e-2 (measured < 1e-2), and the loss falls by a
# fifth or more between steps 20 and 80
args80="--config $TOP/input/synthetic-test.cfg threads=1 n_layers=1 max_tokens=96 train_steps=80 log_steps=20 synth_dev=16 ckpt_minutes=0"
out_cpu=$("$EMU" train $args80 device=cpu run_dir=$W/cpu80 2>&1) || fail "device=cpu 80-step run failed: $out_cpu"
out_bf=$("$EMU" train $args80 device=cuda precision=bf16 run_dir=$W/bf80 2>&1) || fail "device=cuda precision=bf16 80-step run failed: $out_bf"
# 4 step lines and the dev line; the loss falls by a fifth from step 20 to 80
same_losses "$out_cpu" "$out_bf" bf16 5 3e-2 0.8 \
    || fail "80 steps of device=cuda precision=bf16 (emulated) do not track device=cpu"
ok "80 steps of synthetic reversal: device=cuda precision=bf16 (emulated) losses track device=cpu within 3e-2"

expect_error 2 "error: device=cuda: no usable CUDA device" env CUDA_EMU_DEVICES=0 "$EMU" train device=cuda train_steps=1
# more node-local ranks than GPUs, or two ranks on one GPU, is refused with
# one line; ranks that each see only their own GPU (Slurm --gpus-per-task=1:
# CUDA_VISIBLE_DEVICES per rank, one device each) train
expect_error 2 "rank 2 on host .*: node-local rank 2 but only 2 GPUs visible; run one rank per GPU" \
    mpirun -np 3 "$EMU" train $args device=cuda run_dir=$W/ranks3
expect_error 2 "rank 1 on host .*: node-local rank 1 would share its GPU (1 visible) with node-local rank 0; run one rank per GPU" \
    mpirun -np 2 -x CUDA_EMU_DEVICES=1 "$EMU" train $args device=cuda run_dir=$W/shared
out=$(mpirun -np 2 -x CUDA_EMU_DEVICES=1 sh -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$0" "$@"' \
      "$EMU" train $args train_steps=2 device=cuda run_dir=$W/bound 2>&1) || fail "2 ranks bound to one GPU each failed: $out"
ok "2 ranks, each bound to its own GPU (one visible device each), train"

# an NCCL error while the allreduce runs (a peer or the network failing:
# emulated from the 3rd allreduce on) is polled and fatal, one line
expect_error 1 "error: nccl: rank [01]: asynchronous error in the gradient allreduce: remote process exited" \
    mpirun -np 2 -x CUDA_EMU_NCCL_ASYNC_ERROR=3 "$EMU" train $args device=cuda run_dir=$W/ncclerr

# a device too small for the activations (300 kB: the parameters and Adam
# state fit, the activations of the first batch do not): one line naming
# the buffer and its size, exit 1
expect_error 1 "error: cuda: out of device memory allocating [a-z0-9_>-]* of layer 0 ([0-9]* bytes)" \
    env CUDA_EMU_MEMORY=300000 "$EMU" train $args device=cuda run_dir=$W/oom
# the same for beam search's key/value caches (200 sentences x beam 4 in one batch)
expect_error 1 "error: decode: out of device memory allocating [0-9]* bytes (batch of [0-9]* hypotheses, up to [0-9]* output positions; a smaller --batch-size needs less)" \
    env CUDA_EMU_MEMORY=1000000 "$EMU" translate --checkpoint "$(ls $W/cpu/ckpt_*.h5 | tail -1)" --data synthetic --split dev \
    --output $W/oom.txt --batch-size 200 synth_dev=200 device=cuda
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    expect_error 2 "error: device=cuda" "$BIN" train device=cuda train_steps=1
fi
# inference takes the device the job has, not the checkpoint's or the
# defaults, and says which: the (emulated) GPU where one is visible, else
# the CPU in fp32 even for a checkpoint trained in bf16
ck=$(ls $W/bf16/ckpt_*.h5 | tail -1)
out=$("$EMU" translate --checkpoint "$ck" --data synthetic --split dev --output $W/dev.txt synth_dev=4 threads=1 2>&1) ||
    fail "translate on the emulated GPU: $out"
grep -q '^translate: device cuda, precision fp32 (a GPU is visible; device=cpu for the CPU)' <<< "$out" ||
    fail "translate did not take the visible GPU: $out"
out=$(CUDA_EMU_DEVICES=0 "$EMU" eval --checkpoint "$ck" --data synthetic synth_dev=4 threads=1 2>&1) ||
    fail "eval of a bf16 checkpoint without a GPU: $out"
grep -q '^eval: device cpu, precision fp32 (no GPU is visible to this build)' <<< "$out" ||
    fail "eval without a GPU did not fall back to the CPU: $out"
out=$("$EMU" eval --checkpoint "$ck" --data synthetic synth_dev=4 threads=1 device=cpu 2>&1) || fail "eval device=cpu: $out"
grep -q '^eval: device cpu, precision fp32 (device= on the command line)' <<< "$out" || fail "eval device=cpu: $out"
ok "translate/eval: the visible (emulated) GPU by default, the CPU in fp32 without one, device= wins; each says which"

# ThreadSanitizer on the emulator's pthread backend: a missing barrier is a
# reported data race; the same kernel with its barrier is clean
PT=$TOP/bin/tests/emu-planted-tsan
# (TSan keeps a few shadow cells per word, so whether it sees a race depends
# on the interleaving: the planted race must be reported in one of 5 runs)
caught=0
for attempt in 1 2 3 4 5; do
    err=$("$PT" race 2>&1); rc=$?
    if [ $rc -ne 0 ] && echo "$err" | grep -q "ThreadSanitizer: data race" && echo "$err" | grep -q "k_neighbour"; then
        caught=1; break
    fi
done
[ $caught = 1 ] || fail "TSan did not report the planted missing-barrier race in 5 runs (last exit $rc)"
ok "TSan reports the planted missing __syncthreads() as a data race in k_neighbour"
"$PT" norace >/dev/null 2>&1 || fail "TSan reports a race in the correct kernel (emulator machinery?)"
ok "TSan is silent on the kernel with its barrier"
# the pthread backend's own scheduling: launches of alternating block sizes,
# every worker woken between a launch's set-up and its first block (a legal
# spurious wake-up); each thread of each block runs exactly once, and TSan
# sees no race in the machinery (before the fix, 16 of 20 rounds went wrong)
out=$(CUDA_EMU_SPURIOUS_WAKEUPS=1 "$PT" launches 2>&1) || fail "pthread backend, spurious wake-ups: $out"
ok "pthread backend under spurious wake-ups: $(tail -n 1 <<< "$out")"

# the CUDA backend's allreduce watchdog (allreduce=mpi, host staging): rank 1
# stopped at step 3, rank 0 ends the job after allreduce_timeout seconds.  (The
# NCCL path polls the same check between cudaEventQuery calls; the emulated
# NCCL is a blocking MPI_Allreduce, so only a GPU shows that one.)
wd="train_steps=100000 log_steps=1 threads=1 synth_train=500 synth_dev=20 max_tokens=256 n_layers=1 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16"
t0=$SECONDS
CUDA_EMU_DEVICES=2 TRANSFORMER_FAIL_AT=1:3:STOP timeout -s KILL 30 mpirun -np 2 -x CUDA_EMU_DEVICES \
    "$EMU" train $wd device=cuda allreduce=mpi allreduce_timeout=2 > "$W/wd.out" 2> "$W/wd.err" &&
    fail "device=cuda, a stopped peer: the job exited 0"
grep -q '^error: rank 0: the MPI gradient allreduce made no progress for 2 s (allreduce_timeout)' "$W/wd.err" ||
    fail "device=cuda: no watchdog line: $(cat "$W/wd.err")"
ok "device=cuda allreduce=mpi: a stopped peer ends the job after $((SECONDS - t0)) s: $(grep -m1 '^error: rank 0' "$W/wd.err")"

# the allreduce path is said at start-up (a build without NCCL would say so)
for ar in auto:nccl mpi:mpi; do
    out=$(CUDA_EMU_DEVICES=2 mpirun -np 2 -x CUDA_EMU_DEVICES "$EMU" train $wd train_steps=1 device=cuda \
          allreduce=${ar%%:*} 2>&1) || fail "allreduce=${ar%%:*}: $out"
    echo "$out" | grep -q "^allreduce path: ${ar#*:} " || fail "allreduce=${ar%%:*}: no 'allreduce path: ${ar#*:}' line: $out"
done
ok "start-up line: allreduce=auto -> nccl, allreduce=mpi -> mpi on host copies"
