#!/usr/bin/env bash
# precision=fp16 learns as fp32 does: 200 steps of the synthetic reversal
# task (input/synthetic-test.cfg, 1 layer, strings of 3-5 symbols) with
# device=cuda precision=fp16 under the CUDA emulator -- fp16 activations and
# GEMM inputs, dynamic loss scaling (loss_scale=auto) -- against the same
# run on the CPU backend in fp32, made here on the same machine (the
# trajectories depend on the OpenBLAS kernel, so no figure is hard-coded).
# Measured 2026-11-28 (code of adb50f9, TRANSFORMER_RELU_MASK=0 the
# default), seeds 1-4, OpenBLAS Cooperlake / Haswell kernels: fp16's dev
# nll / fp32's 0.955 0.879 0.948 0.919 / 1.120 0.857 1.049 0.923 (at most
# 1.12); greedy exact match fp32 0.22-0.39, fp16 0.16-0.48, fp16 minus
# fp32 from -0.20 to +0.20: at 200 steps the exact match moves between
# the two precisions as much as between seeds, so it is not compared
# between them (the Haswell kernel put seed 1 at 0.36 against 0.16).
# Chance is ~1e-4 and an untrained model's nll ~2.4.  Asserted: fp16's dev
# nll at most 1.4x fp32's, its exact match at least 0.05 (4 of 64
# sentences; a model that does not decode scores 0), and no step skipped (nothing
# overflows at the initial scale on this task).  Also: on an emulated
# sm_75 (CUDA_EMU_CC=75) bf16 and tf32 are refused in one line suggesting
# fp16, and fp16 trains; on sm_70 the same where the build has sm_70, else
# every precision is refused in one line naming CUDA_ARCH.
set -u
. "$(dirname "$0")/lib.sh"
EMU=$TOP/bin/tests/emu-transformer
[ -f "${CUDA_HOME:-/usr/local/cuda}/include/cublas_v2.h" ] || skip "no CUDA headers (the emulator needs them)"
[ -x "$EMU" ] || fail "$EMU missing (make tests)"
export OMP_NUM_THREADS=1
A="--config $TOP/input/synthetic-test.cfg threads=1 n_layers=1 train_steps=200 log_steps=50 synth_dev=64
   max_tokens=64 synth_max_len=5 max_len=8"
t0=$SECONDS
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
out32=$("$BIN" train $A device=cpu run_dir=$W/r 2>&1) || fail "fp32 run: $out32"
out16=$("$EMU" train $A device=cuda precision=fp16 2>&1) || fail "fp16 run (emulated): $out16"
echo "$out16"
echo "$out16" | grep -q "backend cuda-fp16" || fail "precision=fp16 did not use the fp16 backend"
echo "$out16" | grep -Eq '^step 200 loss_ls [0-9.]+ .* loss_scale 1024 skipped 0$' \
    || fail "step 200: expected loss_scale 1024 and 0 skipped steps: $(echo "$out16" | grep '^step 200')"
nll32=$(echo "$out32" | field '^dev final' nll) nll16=$(echo "$out16" | field '^dev final' nll)
em32=$(echo "$out32" | awk '/^dev greedy exact match/ { print $5 }')
em16=$(echo "$out16" | awk '/^dev greedy exact match/ { print $5 }')
[ -n "$nll32" ] && [ -n "$nll16" ] && [ -n "$em32" ] && [ -n "$em16" ] || fail "no dev results"
awk -v a="$nll32" -v b="$nll16" 'BEGIN { exit !(b <= 1.4 * a) }' || fail "fp16 dev nll $nll16 is more than 1.4x fp32's $nll32"
awk -v b="$em16" 'BEGIN { exit !(b >= 0.05) }' \
    || fail "fp16 greedy exact match $em16 (fp32: $em32): below 0.05 (4 of 64 sentences)"
ok "200 steps: fp16 (emulated) dev nll $nll16, exact match $em16; fp32 $nll32, $em32 ($((SECONDS - t0)) s)"
# beam search in fp16 (fp16 key/value caches and log-probabilities) from the
# fp32 run's checkpoint translates as the CPU does: exact match within 2 of
# 16 sentences (measured: the same outputs)
tr() { local bin=$1; shift
       "$bin" translate --checkpoint $W/r/ckpt_00000200.h5 --data synthetic --split dev synth_dev=16 \
       --output $W/out.txt "$@" 2>&1 | awk '/exact match/ { print $4 }'; }
t32=$(tr "$BIN") t16=$(tr "$EMU" device=cuda precision=fp16)
[ -n "$t32" ] && [ -n "$t16" ] || fail "translate printed no exact match (fp32 '$t32', fp16 '$t16')"
awk -v a="$t32" -v b="$t16" 'BEGIN { exit !(b >= a - 0.125) }' || fail "fp16 translate exact match $t16, CPU $t32"
ok "beam search in fp16 (emulated): exact match $t16, CPU fp32 $t32"

# on an emulated T4 (compute capability 7.5) bf16 and tf32 are refused at
# start-up with a line that suggests fp16; fp16 trains
for p in bf16 tf32; do
    expect_error 2 "error: device=cuda: precision=$p needs compute capability 8.0 or newer, .* is 7.5: use precision=fp16" \
        env CUDA_EMU_CC=75 "$EMU" train device=cuda precision=$p train_steps=1
done
out=$(CUDA_EMU_CC=75 "$EMU" train $A device=cuda precision=fp16 train_steps=2 synth_dev=2 2>&1) || fail "fp16 on sm_75: $out"
ok "sm_75 (emulated): fp16 trains"
# on an emulated V100 (7.0): a build without sm_70 (CUDA 13's nvcc: CUDA_ARCH
# = 75 80 90) has no kernel for it, said in one line at start-up (the
# emulator's rule CC fails every launch as the GPU would); with sm_70
# (a CUDA 12 nvcc) fp16 trains and bf16 is refused as on the T4
arch=$(make -s --no-print-directory -C "$TOP" print-cuda-arch)
if echo " $arch " | grep -q ' 70 '; then
    expect_error 2 "error: device=cuda: precision=bf16 needs compute capability 8.0 or newer, .* is 7.0" \
        env CUDA_EMU_CC=70 "$EMU" train device=cuda precision=bf16 train_steps=1
    out=$(CUDA_EMU_CC=70 "$EMU" train $A device=cuda precision=fp16 train_steps=2 synth_dev=2 2>&1) || fail "fp16 on sm_70: $out"
    ok "sm_70 (emulated, CUDA_ARCH = $arch): fp16 trains"
else
    for p in fp16 bf16; do
        expect_error 2 "^error: device=cuda: GPU 0 (.*) is compute capability 7.0, and this build has no kernel for it (CUDA_ARCH = $arch)" \
            env CUDA_EMU_CC=70 "$EMU" train device=cuda precision=$p train_steps=1
    done
fi
