#!/usr/bin/env bash
# make gpu-bench: training throughput of the base and big models on one GPU,
# ours (precision=bf16 and tf32) and PyTorch (bf16 autocast + torch.compile)
# side by side in the same run, each as target tokens/s and as model FLOP
# utilisation (MFU) against the bf16 GEMM peak measured here by cuBLAS.
# Fixed-shape synthetic batches of B sentences x L tokens (source and
# target), vocabulary 37000 as the paper's WMT En-De BPE.
# TORCH_COMPILE=0 skips torch.compile (saves ~1 min per model).
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
TORCH_PY=${TORCH_PY:-python3}
B=${B:-300} L=${L:-41} V=37000 STEPS=${STEPS:-10}
peak=$(bin/gpu/gemm_peak | tee /dev/stderr | awk '/bf16/ {print $6}')
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); measured bf16 GEMM peak $peak TFLOP/s"
have_torch=1
$TORCH_PY -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || { have_torch=0; echo "(no PyTorch with CUDA for $TORCH_PY: ours only)"; }

flops_per_step() {  # N d dff -> model FLOPs of one training step (fwd + bwd = 3 x fwd)
    python3 -c "
N,d,dff,B,L,V=$1,$2,$3,$B,$L,$V
mm = N*(4*d*d+2*d*dff)*B*L + N*(8*d*d+2*d*dff)*B*L + V*d*B*L   # matmul params x tokens
att = N*4*L*L*d*B*3                                             # enc self, dec self, cross
print(6*mm + 3*att)"
}

ours() {  # N d dff h precision -> tok/s
    local N=$1 d=$2 dff=$3 h=$4 prec=$5
    local cmd=("$BIN" train data=synthetic device=cuda precision=$prec n_layers=$N d_model=$d d_ff=$dff n_heads=$h
               d_k=$((d / h)) d_v=$((d / h)) vocab_size=$V synth_vocab=$((V - 4)) synth_min_len=$((L - 1))
               synth_max_len=$((L - 1)) max_len=$L max_tokens=$((B * L)) synth_train=$((B * 16)) synth_dev=8
               train_steps=$((2 + STEPS)) log_steps=2 warmup=4000)
    echo "  ours: ${cmd[*]}" >&2
    "${cmd[@]}" | tee /dev/stderr | awk '/^step/ { n++; if (n > 1) { s += 1 / $8; k++ } } END { printf "%.1f", k / s }'
}

theirs() {
    local N=$1 d=$2 dff=$3 h=$4
    [ $have_torch = 1 ] || { echo 0; return; }
    local extra=()
    [ "${TORCH_COMPILE:-1}" = 0 ] && extra=(--no-compile)
    local cmd=($TORCH_PY tests/gpu/torch_train_gpu.py --layers $N --d-model $d --d-ff $dff --heads $h --vocab $V
               --batch $B --len $L --steps $((2 + STEPS)) --warm 2 "${extra[@]}")
    echo "  torch: ${cmd[*]}" >&2
    "${cmd[@]}" 2>/dev/null | awk '/tok\/s/ {print $3}'
}

printf '%-16s %-9s %11s %11s %7s %9s %9s\n' model ours_prec ours_tok/s torch_tok/s ratio ours_MFU torch_MFU
run_cfg() {
    local name=$1 N=$2 d=$3 dff=$4 h=$5
    local f b a
    f=$(flops_per_step $N $d $dff)
    b=$(theirs $N $d $dff $h)
    for prec in bf16 tf32; do
        a=$(ours $N $d $dff $h $prec)
        python3 -c "
f,a,b,p=$f,$a,${b:-0},$peak
tok=$B*$L
print('%-16s %-9s %11.0f %11.0f %7.2f %8.1f%% %8.1f%%' % ('$name', '$prec', a, b, a/b if b>0 else 0, 100*f*a/tok/p/1e12, 100*f*b/tok/p/1e12))"
    done
}
run_cfg "base d512 6+6" 6 512 2048 8
run_cfg "big d1024 6+6" 6 1024 4096 16
