#!/usr/bin/env bash
# CPU training throughput, ours vs PyTorch, side by side in one run, and each
# one's achieved GFLOP/s against the sgemm peak measured here (issue 10).
# Same model, same batch shape (fixed-length synthetic batches of B x L
# tokens, ~4000 target tokens), float32, dropout 0.1, label smoothing 0.1.
# QUICK=1 runs only the small config with 1 thread.
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
TORCH_ENV=${TORCH_ENV:-OMP_WAIT_POLICY=PASSIVE}
have_torch=1
$TORCH_PY -c "import torch" 2>/dev/null || { have_torch=0; echo "(PyTorch not found for $TORCH_PY: install python3-torch; ours only)"; }
make -s bin/bench/gemm_peak || exit 1
B=100 L=40 V=8000 STEPS=${STEPS:-6}
W=$(mktemp -d /tmp/bench_cpu_train.XXXXXX)
trap 'rm -rf "$W"' EXIT
# timed FILE CMD...: runs CMD, writes the CPU use of it and its children
# (100 = one core busy) to FILE, so each row shows how many cores each side
# really used.
timed() {
    local f=$1; shift
    if [ -x /usr/bin/time ]; then /usr/bin/time -f %P -o "$f" "$@"; else echo "?" > "$f"; "$@"; fi
}
declare -A peak
for t in 1 2; do peak[$t]=$(bin/bench/gemm_peak $t | awk '{print $5}'); done
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; sgemm peak 1 thread ${peak[1]} GFLOP/s, 2 threads ${peak[2]} GFLOP/s"

flops_per_step() {  # N d dff -> model FLOPs of one training step (fwd+bwd = 3x fwd)
    python3 -c "
N,d,dff,B,L,V=$1,$2,$3,$B,$L,$V
mm = N*(4*d*d+2*d*dff)*B*L + N*(8*d*d+2*d*dff)*B*L + V*d*B*L   # matmul params x tokens
att = N*4*L*L*d*B*3                                             # enc self, dec self, cross: 4*Tq*Tk*d each
print(6*mm + 3*att)"
}

ours() {  # N d dff h threads ranks -> tok/s (global)
    local N=$1 d=$2 dff=$3 h=$4 th=$5 np=$6
    local cmd=("$BIN" train data=synthetic n_layers=$N d_model=$d d_ff=$dff n_heads=$h d_k=$((d / h)) d_v=$((d / h))
               vocab_size=$V synth_vocab=$((V - 4)) synth_min_len=$((L - 1)) synth_max_len=$((L - 1)) max_len=$L
               max_tokens=$((B * L)) synth_train=$((B * 64)) synth_dev=8 train_steps=$((2 + STEPS)) log_steps=2
               threads=$th warmup=4000)
    echo "  ours: mpirun -np $np ${cmd[*]}" >&2
    timed "$W/ours.cpu" mpirun -np "$np" --bind-to none "${cmd[@]}" | awk '/^step/ { n++; if (n > 1) { s += 1 / $8; k++ } } END { printf "%.1f", k / s }'
}

theirs() {
    local N=$1 d=$2 dff=$3 h=$4 th=$5
    [ $have_torch = 1 ] || { echo 0; return; }
    local cmd=($TORCH_PY tests/bench/torch_train.py --layers $N --d-model $d --d-ff $dff --heads $h --vocab $V
               --batch $B --len $L --steps $((2 + STEPS)) --warm 2 --threads $th)
    # Debian's torch calls sgemm in libblas.so.3 = OpenBLAS (pthread build),
    # whose threads torch.set_num_threads does not govern: without these the
    # "1 thread" run used both cores (175% CPU), so they are pinned here.
    # OMP_WAIT_POLICY=PASSIVE is PyTorch's best setting here (its OpenMP
    # threads otherwise spin against OpenBLAS's: 2 threads 1319 -> 1944
    # tok/s on d256); ours runs with the default, its best.
    echo "  torch: $TORCH_ENV OPENBLAS_NUM_THREADS=$th OMP_NUM_THREADS=$th ${cmd[*]}" >&2
    (export $TORCH_ENV OPENBLAS_NUM_THREADS=$th OMP_NUM_THREADS=$th MKL_NUM_THREADS=$th
     timed "$W/torch.cpu" "${cmd[@]}") | awk '{print $3}'
}

printf '%-22s %-10s %10s %10s %7s %9s %9s %9s %9s %8s %8s\n' config threads ours_tok/s torch_tok/s ratio \
    ours_GF/s torch_GF/s ours_%peak torch_%peak ours_cpu torch_cpu
run_cfg() {
    local name=$1 N=$2 d=$3 dff=$4 h=$5 th=$6 np=$7
    local f a b
    f=$(flops_per_step $N $d $dff)
    a=$(ours $N $d $dff $h $th $np)
    b=$(theirs $N $d $dff $h $((th * np)))
    local cores=$((th * np))
    python3 -c "
f,a,b,p=$f,$a,$b,${peak[$cores]}
tok=$B*$L
ga=f*a/tok/1e9; gb=f*b/tok/1e9 if b>0 else 0
print('%-22s %-10s %10.0f %10.0f %7.2f %9.1f %9.1f %8.0f%% %8.0f%% %8s %8s' % ('$name', '${np}x${th}', a, b, a/b if b>0 else 0, ga, gb, 100*ga/p, 100*gb/p,
      '$(cat "$W/ours.cpu")', '$(cat "$W/torch.cpu" 2>/dev/null)'))"
}
run_cfg "d256 3+3" 3 256 1024 4 1 1
[ "${QUICK:-0}" = 1 ] && exit 0
run_cfg "d256 3+3" 3 256 1024 4 2 1
run_cfg "d256 3+3" 3 256 1024 4 1 2
run_cfg "base d512 6+6" 6 512 2048 8 1 1
run_cfg "base d512 6+6" 6 512 2048 8 2 1
run_cfg "base d512 6+6" 6 512 2048 8 1 2
