#!/usr/bin/env bash
# Checkpoint write bandwidth of a base-size model (Table 3 base: 63M
# parameters + Adam moments = 757 MB) against the disk's sequential write
# bandwidth measured in the same run on the same file system (dd, 1 GiB,
# fsync).  Target: >= 1/2 for a checkpoint written alone.  Also prints the
# bandwidth of one written while training runs, and the time the training
# thread spends on a checkpoint (the device->host snapshot; the write runs
# in a thread).
set -u
. "$(dirname "$0")/../lib.sh"
D=${BENCH_DIR:-$TOP/build/bench-ckpt}
rm -rf "$D"; mkdir -p "$D"
trap 'rm -rf "$D"' EXIT
BASE="n_layers=6 d_model=512 d_ff=2048 n_heads=8 d_k=64 d_v=64 vocab_size=37000 max_len=64 max_tokens=64"

dd_bw() {   # MB/s of a 1 GiB sequential write with fsync
    sync
    dd if=/dev/zero of="$D/dd.bin" bs=1M count=1024 conv=fsync 2>&1 | tail -1 \
        | awk '{for (i=1;i<=NF;i++) if ($i ~ /^[GM]B\/s$/) { v=$(i-1); if ($i=="GB/s") v*=1000; print v }}'
    rm -f "$D/dd.bin"
}
bw1=$(dd_bw)
# two checkpoints: step 3 is written while steps 4-6 train (on this 2-core
# machine the writer thread then competes with the 2 training threads for
# the cores; on a GPU node training leaves the host cores free), step 6 after
# the last step, alone
cmd="$BIN train $BASE run_dir=$D/run train_steps=6 ckpt_steps=3 keep_ckpts=1 log_steps=1 ckpt_minutes=0 synth_train=2000 synth_dev=8"
$cmd > "$D/train.log" 2>&1 || { tail -5 "$D/train.log"; exit 1; }
bw2=$(dd_bw)
grep '^checkpoint ' "$D/train.log"
mbps() { grep "^checkpoint .*ckpt_0000000$1.h5" "$D/train.log" | sed 's/.*(\([0-9.]*\) MB\/s.*/\1/'; }
during=$(mbps 3)
alone=$(mbps 6)
snap=$(grep '^checkpoint ' "$D/train.log" | sed 's/.*; \([0-9.]*\)s on the training thread.*/\1/' | sort -n | tail -1)
disk=$(echo "$bw1 $bw2" | awk '{print ($1 > $2 ? $1 : $2)}')
ratio=$(echo "$alone $disk" | awk '{printf "%.2f", $1 / $2}')
echo "disk sequential write (dd 1 GiB, fsync): $bw1 / $bw2 MB/s (before / after)"
echo "checkpoint write, alone: $alone MB/s = $ratio x disk (target >= 0.5); while training: $during MB/s = $(echo "$during $disk" | awk '{printf "%.2f", $1 / $2}') x disk"
echo "training thread per checkpoint: ${snap}s (host snapshot)"
echo "command: $cmd"
awk -v r=$ratio 'BEGIN { exit !(r >= 0.5) }' || { echo "below target"; exit 1; }
