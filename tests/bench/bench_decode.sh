#!/usr/bin/env bash
# Decoding throughput on Multi30k test2016 (1,000 sentences): sentences/s and
# target tokens/s for beam 1 and beam 4 (incremental decoding with cached
# keys/values), and the speed-up of incremental greedy decoding over greedy
# decoding by full recomputation of the decoder each step (src/greedy.c), all
# measured side by side in this run (and how many greedy outputs agree).
#   CKPT  checkpoint (default: runs/multi30k/average.h5, else the newest
#         runs/multi30k/ckpt_*.h5, else a model of input/multi30k.cfg trained
#         here for BENCH_STEPS steps: its outputs, and so the speed, are then
#         less representative than a trained model's)
#   DATA  dataset (default data/multi30k.h5, prepared if missing)
#   THREADS (default 2), BATCH sentences per batch (default 64)
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
cd "$TOP"
DATA=${DATA:-data/multi30k.h5}
THREADS=${THREADS:-2}
BATCH=${BATCH:-64}
W=$(mktemp -d /tmp/bench_decode.XXXXXX)
trap 'rm -rf "$W"' EXIT
[ -f "$DATA" ] || input/prepare.sh multi30k "$SHARED_DATA" "$DATA" >"$W/prep.log"
if [ -z "${CKPT:-}" ]; then
    if [ -f runs/multi30k/average.h5 ]; then CKPT=runs/multi30k/average.h5
    elif ls runs/multi30k/ckpt_*.h5 >/dev/null 2>&1; then CKPT=$(ls runs/multi30k/ckpt_*.h5 | tail -1)
    else
        echo "no trained Multi30k checkpoint: training input/multi30k.cfg for ${BENCH_STEPS:=300} steps first"
        "$BIN" train --config input/multi30k.cfg data="$DATA" train_steps="$BENCH_STEPS" run_dir="$W/run" \
            eval_steps=0 threads="$THREADS" >"$W/train.log"
        CKPT=$(ls "$W"/run/ckpt_*.h5 | tail -1)
    fi
fi
echo "checkpoint $CKPT, data $DATA, test2016, $THREADS threads, batches of $BATCH sentences"
run() {   # name, extra args...
    local name=$1; shift
    "$BIN" translate --checkpoint "$CKPT" --data "$DATA" --split test2016 --output "$W/$name.txt" \
        --batch-size "$BATCH" threads="$THREADS" "$@" >"$W/$name.log"
    local line; line=$(grep '^translate:' "$W/$name.log")
    echo "$line" | sed -E 's/.* in ([0-9.]+)s: ([0-9.]+) sentences\/s, ([0-9]+) target tokens\/s.*/\1 \2 \3/'
}
read -r t4 s4 k4 < <(run beam4 beam=4)
read -r t1 s1 k1 < <(run beam1 beam=1)
read -r tr sr kr < <(run recompute --recompute)
printf '%-44s %9s %13s %16s\n' "decoding" "time (s)" "sentences/s" "target tokens/s"
printf '%-44s %9.2f %13.1f %16.0f\n' "beam 4, incremental (K/V caches)" "$t4" "$s4" "$k4"
printf '%-44s %9.2f %13.1f %16.0f\n' "beam 1 (greedy), incremental" "$t1" "$s1" "$k1"
printf '%-44s %9.2f %13.1f %16.0f\n' "beam 1 (greedy), full recomputation" "$tr" "$sr" "$kr"
echo "speed-up of incremental decoding over recomputation (greedy): $(echo "scale=2; $tr / $t1" | bc)x"
# (they can differ only where a sentence reaches its maximum length: the
# recomputation reference uses one maximum per batch, decode.c one per sentence)
same=$(paste -d '\t' "$W/beam1.txt" "$W/recompute.txt" | awk -F '\t' '$1 == $2' | wc -l)
echo "greedy outputs identical (incremental vs recomputation): $same of $(wc -l <"$W/beam1.txt") lines"
echo "command: CKPT=$CKPT DATA=$DATA THREADS=$THREADS BENCH=decode make bench"
