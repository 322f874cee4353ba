#!/usr/bin/env bash
# make gpu-bench: training throughput of the base and big models on one GPU,
# ours (PRECS, default "bf16 fp32"; tf32 also possible) and PyTorch (bf16
# autocast, eager and torch.compile) side by side in the same run, each as
# target tokens/s, as model FLOP utilisation (MFU) against the bf16 GEMM peak
# measured here by cuBLAS, and as peak device memory (nvidia-smi's
# memory.used sampled every 0.2 s during the run, less its value before:
# the same measure for both sides, CUDA context included).
# Fixed-shape synthetic batches of B sentences x L tokens (source and
# target), vocabulary 37000 as the paper's WMT En-De BPE.
# TORCH_COMPILE=0 skips torch.compile (saves ~1 min per model).
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
TORCH_PY=${TORCH_PY:-python3}
B=${B:-300} L=${L:-41} V=37000 STEPS=${STEPS:-10}
PRECS=${PRECS:-bf16 fp32}
W=$(mktemp -d /tmp/gpu_bench.XXXXXX)
trap 'rm -rf "$W"' EXIT

# peak_mem FILE CMD...: runs CMD; FILE gets the largest rise of the GPU's
# memory.used (MiB) over its value before, sampled every 0.2 s
peak_mem() {
    local f=$1 base p rc=0
    shift
    base=$(timeout -k 5 20 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 200 >"$f.samples" 2>/dev/null &
    p=$!
    "$@" || rc=$?
    kill $p 2>/dev/null; wait $p 2>/dev/null
    awk -v b="$base" 'BEGIN {m = 0} {if ($1 - b > m) m = $1 - b} END {print m}' "$f.samples" >"$f"
    return $rc
}
# the constant-data peak (gpu-bench's MFU since 122cb66) and, beside it,
# the random-data one (issue 32: the peak a training step can reach)
bin/gpu/gemm_peak | tee /dev/stderr > "$W/peak.txt"
peak=$(awk '$2 == "bf16" && $7 != "random" {print $6}' "$W/peak.txt")
peak_random=$(awk '$2 == "bf16" && $7 == "random" {print $6}' "$W/peak.txt")
[ -n "$peak" ] || fail "gpu-bench: bin/gpu/gemm_peak measured no bf16 peak"
echo "GPU: $(timeout -k 5 20 nvidia-smi --query-gpu=name --format=csv,noheader | head -1); measured bf16 GEMM peak $peak TFLOP/s on constant data, ${peak_random:-?} on random data"
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
    peak_mem "$W/mem" "${cmd[@]}" >"$W/ours.log"
    cat "$W/ours.log" >&2
    awk '/^step/ { n++; if (n > 1) { s += 1 / $8; k++ } } END { if (k) printf "%.1f", k / s; else printf "0" }' "$W/ours.log"
}

theirs() {  # N d dff h eager|compile -> tok/s (0: not run); peak memory in $W/mem
    local N=$1 d=$2 dff=$3 h=$4 mode=$5
    echo 0 >"$W/mem"
    [ $have_torch = 1 ] || { echo 0; return; }
    [ "$mode" = compile ] && [ "${TORCH_COMPILE:-1}" = 0 ] && { echo 0; return; }
    local extra=()
    [ "$mode" = eager ] && extra=(--no-compile)
    local cmd=($TORCH_PY tests/gpu/torch_train_gpu.py --layers $N --d-model $d --d-ff $dff --heads $h --vocab $V
               --batch $B --len $L --steps $((2 + STEPS)) --warm 2 "${extra[@]}")
    echo "  torch ($mode): ${cmd[*]}" >&2
    peak_mem "$W/mem" "${cmd[@]}" 2>"$W/torch.err" >"$W/torch.log" || tail -3 "$W/torch.err" >&2
    cat "$W/torch.log" >&2
    awk '/tok\/s/ {print $3}' "$W/torch.log" | grep . || echo 0
}

printf '%-14s %-10s %11s %7s %8s %s\n' model side tok/s vs_eager MFU peak_MiB
run_cfg() {
    local name=$1 N=$2 d=$3 dff=$4 h=$5
    local f e c a prec
    f=$(flops_per_step $N $d $dff)
    row() {  # side tok/s
        python3 -c "
f,a,e,p=$f,$2,$e,$peak
tok=$B*$L
print('%-14s %-10s %11.0f %7s %7.1f%% %s' % ('$name', '$1', a, '%.2f' % (a/e) if e>0 else '-', 100*f*a/tok/p/1e12, '$(cat "$W/mem")'))"
    }
    # eager first (the yardstick of vs_eager), torch.compile last: it takes
    # about a minute per model, and a time limit (make gpu-accept's bench
    # budget) that stops the run there keeps our rows
    e=$(theirs $N $d $dff $h eager); row torch-eager "$e"
    for prec in $PRECS; do
        a=$(ours $N $d $dff $h $prec); row "ours-$prec" "$a"
    done
    c=$(theirs $N $d $dff $h compile); row torch-comp "$c"
}
run_cfg base-d512 6 512 2048 8
run_cfg big-d1024 6 1024 4096 16
