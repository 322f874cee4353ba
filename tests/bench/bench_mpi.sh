#!/usr/bin/env bash
# Data-parallel scaling on this machine (weak scaling: the same batch per
# rank): 1 rank vs 2 ranks, one OpenMP thread per rank, on a d_model=512
# model (base dimensions, N=6 unless BENCH_MPI_LAYERS).  Prints, for each
# run, target tokens/s (median over the steps after the first), the 2-rank
# scaling efficiency = tok/s(2) / (2 * tok/s(1)), the allreduce time not
# hidden behind backward (per update, the least wait of any rank in
# GradSync), and the bus bandwidth of a blocking allreduce of the gradient
# buffer (nccl-tests: busbw = algbw * 2(n-1)/n).  Other load on the machine
# lowers all figures; the load average is printed with them.
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
layers=${BENCH_MPI_LAYERS:-6}
steps=${BENCH_MPI_STEPS:-6}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
CFG="n_layers=$layers d_model=512 d_ff=2048 n_heads=8 d_k=64 d_v=64 threads=1 update_freq=1
     max_tokens=512 synth_train=4000 synth_dev=1 synth_min_len=8 synth_max_len=16 max_len=28
     train_steps=$steps log_steps=1 eval_steps=0 bucket_kb=${BENCH_MPI_BUCKET_KB:-4096}"
CFG=$(echo $CFG)
echo "model: $("$BIN" params $CFG | head -1) (d_model=512, N=$layers, fp32 gradients)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), cpus $(nproc)"

# median target tokens/s of steps 2..: the first step pays allocation
toks() { grep '^step' "$1" | awk 'NR > 1 { print $8 }' | sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) print 0; else print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }

for P in 1 2; do
    cmd="mpirun -np $P $BIN train $CFG"
    echo "command: $cmd"
    t0=$(date +%s.%N)
    $cmd >"$tmp/log$P" 2>"$tmp/err$P" || { cat "$tmp/err$P"; echo "bench_mpi: $P-rank run failed"; exit 1; }
    echo "  $P rank(s): $(toks "$tmp/log$P") target tok/s (median of steps 2..$steps), wall $(echo "$(date +%s.%N) - $t0" | bc | cut -c1-6) s"
    grep '^allreduce:' "$tmp/log$P" | sed 's/^/  /'
done
t1=$(toks "$tmp/log1"); t2=$(toks "$tmp/log2")
awk -v a="$t1" -v b="$t2" 'BEGIN { printf "2-rank weak-scaling efficiency: %.1f%% (tok/s %.0f vs 2 x %.0f; aim >= 90%%)\n", 100 * b / (2 * a), b, a }'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
