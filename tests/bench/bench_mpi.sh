#!/usr/bin/env bash
# Data-parallel scaling (weak scaling: the same batch per rank, one OpenMP
# thread per rank) on a d_model=512 model with the base dimensions (N=6
# unless BENCH_MPI_LAYERS).  Runs
#   1. one rank alone,
#   2. two independent 1-rank jobs at once on different cores (no MPI
#      traffic: what the hardware gives two processes: shared memory
#      bandwidth, clocks),
#   3. two ranks under mpirun,
# and prints target tokens/s of each (measured over the second half of the
# steps, after allocation and warm-up), the 2-rank efficiency
# tok/s(2) / (2 * tok/s(1)) (aim >= 90%) and relative to run 2, the allreduce
# time backward did not hide (GradSync: the least total wait of any
# rank), time lost to load imbalance, and the bus bandwidth of a blocking
# allreduce of the gradient buffer (nccl-tests: busbw = algbw * 2(n-1)/n).
# Other load on the machine lowers every figure: the load average is printed.
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
layers=${BENCH_MPI_LAYERS:-6}
half=${BENCH_MPI_STEPS:-3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
CFG="n_layers=$layers d_model=512 d_ff=2048 n_heads=8 d_k=64 d_v=64 threads=1 update_freq=1
     max_tokens=512 synth_train=4000 synth_dev=1 synth_min_len=8 synth_max_len=16 max_len=28
     train_steps=$((2 * half)) log_steps=$half eval_steps=0 ${BENCH_MPI_ARGS:-}"
CFG=$(echo $CFG)
echo "model: $("$BIN" params $CFG | head -1) (d_model=512, N=$layers, fp32 gradients)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), cpus $(nproc)"
# target tok/s of the last log interval (steps half+1 .. 2*half)
toks() { grep '^step' "$1" | tail -1 | awk '{ print $8 }'; }
run() {   # run NAME cmd...
    local name=$1; shift
    echo "command: $*"
    "$@" >"$tmp/$name" 2>"$tmp/$name.err" || { cat "$tmp/$name.err"; echo "bench_mpi: $name failed"; exit 1; }
}

run one mpirun -np 1 "$BIN" train $CFG
t1=$(toks "$tmp/one")
echo "  1 rank: $t1 target tok/s"

pin0= pin1=
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    cpus=($(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' | awk -F- '{ if (NF == 1) print $1; else for (i = $1; i <= $2; i++) print i }'))
    pin0="taskset -c ${cpus[0]}" pin1="taskset -c ${cpus[1]}"
fi
echo "command: 2 x ($pin0 $BIN train $CFG) at once"
$pin0 "$BIN" train $CFG >"$tmp/ind0" 2>&1 &
p0=$!
$pin1 "$BIN" train $CFG seed=2 >"$tmp/ind1" 2>&1 || { cat "$tmp/ind1"; exit 1; }
wait $p0 || { cat "$tmp/ind0"; exit 1; }
ti=$(awk -v a="$(toks "$tmp/ind0")" -v b="$(toks "$tmp/ind1")" 'BEGIN { print a + b }')
echo "  2 independent 1-rank jobs: $(toks "$tmp/ind0") + $(toks "$tmp/ind1") = $ti target tok/s"

run two mpirun -np 2 "$BIN" train $CFG
t2=$(toks "$tmp/two")
echo "  2 ranks: $t2 target tok/s"
grep -E '^(rank|allreduce:)' "$tmp/two" | sed 's/^/  /'
awk -v a="$t1" -v b="$t2" -v i="$ti" 'BEGIN {
    printf "2-rank weak-scaling efficiency: %.1f%% of 2 x 1 rank (aim >= 90%%); %.1f%% of 2 independent jobs (hardware baseline %.1f%%)\n",
           100 * b / (2 * a), 100 * b / i, 100 * i / (2 * a) }'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
