#!/usr/bin/env bash
# make gpu-test: the CUDA backend on a real GPU against the CPU backend.
#  1. every op (tests/cuda/test_cuda_kernels.c built against the real backend)
#  2. a whole training step, 1 rank; 2 ranks (NCCL with >= 2 GPUs, else the
#     MPI fallback: two ranks on one GPU, allowed by TRANSFORMER_SHARE_GPU=1,
#     cannot share an NCCL communicator)
#  3. `transformer train device=cuda` against device=cpu, 6 steps, losses;
#     precision=tf32 and bf16 runs must train (final loss near fp32's).
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
# nvidia-smi under a time limit: a wedged driver would hold it for the call's whole budget
nvsmi() { timeout -k 5 20 nvidia-smi "$@"; }
nvsmi -L >/dev/null 2>&1 || fail "gpu-test: no GPU (nvidia-smi -L failed or timed out)"
ngpu=$(nvsmi -L | wc -l)
echo "GPUs: $(nvsmi --query-gpu=name,driver_version --format=csv,noheader | head -1) x $ngpu"
bin/gpu/test_cuda_kernels || fail "ops on the GPU differ from the CPU backend"
bin/gpu/test_cuda_step || fail "training step on the GPU differs from the CPU backend (1 rank)"
if [ "$ngpu" -ge 2 ]; then
    mpirun -np 2 bin/gpu/test_cuda_step || fail "training step, 2 ranks with NCCL"
else
    mpirun -np 2 -x TRANSFORMER_SHARE_GPU=1 bin/gpu/test_cuda_step allreduce=mpi || fail "training step, 2 ranks (MPI fallback, allreduce=mpi)"
fi
args="n_layers=2 d_model=64 d_ff=128 n_heads=4 d_k=16 d_v=16 train_steps=6 log_steps=1 max_tokens=600 synth_train=2000 synth_dev=32 warmup=50 threads=4"
cpu=$("$BIN" train $args device=cpu | grep -E "^(step|dev final)")
echo "$cpu"
for prec in fp32 tf32 bf16; do
    gpu=$("$BIN" train $args device=cuda precision=$prec | grep -E "^(step|dev final)") || fail "device=cuda precision=$prec failed"
    echo "--- precision=$prec"; echo "$gpu"
    python3 - "$cpu" "$gpu" "$prec" <<'PY' || fail "device=cuda precision=$prec losses off"
import re, sys
f = lambda s: [float(x) for x in re.findall(r"loss_ls ([0-9.]+)", s)]
a, b, prec = f(sys.argv[1]), f(sys.argv[2]), sys.argv[3]
tol = {"fp32": 1e-4, "tf32": 2e-2, "bf16": 5e-2}[prec]
assert len(a) == len(b) == 7, (a, b)
worst = max(abs(x - y) / x for x, y in zip(a, b))
print("precision %s: worst relative loss difference to the CPU %.2e (tolerance %.0e)" % (prec, worst, tol))
assert worst <= tol
PY
done
ok "gpu-test passed"
