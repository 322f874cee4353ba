#!/usr/bin/env bash
# The main job on the embedded default (README, first command): installs what
# is missing, builds, then on the synthetic task (no data files) trains with 2
# MPI ranks into runs/demo (checkpoints, metrics, attention probes), averages
# the last checkpoints, translates the dev set with beam search, writes the
# attention maps of a few sentences and plots them with the training curves.
#   bash jobs/demo.sh [RUN_DIR]      (RANKS=2, STEPS=... override)
# RUN_DIR is emptied first, so a directory that holds anything but an earlier
# demo's files (its marker .demo-run) is refused, never deleted.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${1:-runs/demo}
RANKS=${RANKS:-2}
STEPS=${STEPS:-2000}
die() { echo "error: $*" >&2; exit 2; }
case $RANKS in ''|*[!0-9]*|0*) die "RANKS='$RANKS': not a positive integer" ;; esac
case $STEPS in ''|*[!0-9]*|0*) die "STEPS='$STEPS': not a positive integer" ;; esac
[ "$STEPS" -ge 10 ] || die "STEPS=$STEPS: the demo checkpoints every STEPS/10 steps; give at least 10"
if [ -e "$RUN" ] && [ ! -e "$RUN/.demo-run" ] && [ -n "$(ls -A "$RUN" 2>/dev/null || echo x)" ]; then
    die "$RUN: exists and is not an earlier demo's directory (no $RUN/.demo-run): the demo empties its RUN_DIR; give a new one"
fi
bash tests/install-deps.sh
make -j2
. tests/lib.sh
rm -rf "$RUN"
mkdir -p "$RUN"
touch "$RUN/.demo-run"
echo "== train: $RANKS ranks, $STEPS steps, embedded synthetic task (reversal) -> $RUN"
mpirun -np "$RANKS" --bind-to none bin/transformer train run_dir="$RUN" train_steps="$STEPS" \
    ckpt_steps=$((STEPS / 10)) keep_ckpts=5 log_steps=100 eval_steps=500 attn_steps=250 threads=1 |
    tee "$RUN/train.log"
echo "== average the last 5 checkpoints (section 6.1)"
bin/transformer average --output "$RUN/average.h5" --last 5 "$RUN"
echo "== translate the dev set with beam 4 (section 6.1)"
mpirun -np "$RANKS" --bind-to none bin/transformer translate --checkpoint "$RUN/average.h5" --data synthetic \
    --split dev --output "$RUN/dev.beam4.txt" --reference "$RUN/dev.ref.txt"
echo "== attention maps of dev sentences 0-3"
mpirun -np "$RANKS" --bind-to none bin/transformer attention --checkpoint "$RUN/average.h5" --data synthetic \
    --split dev --sentences 0-3 --output "$RUN/attention.h5"
echo "== plots"
.venv/bin/python analysis/attention.py heatmap "$RUN/attention.h5" --kind cross --layer 1 --out "$RUN/cross_attention_layer1"
.venv/bin/python analysis/attention.py stats "$RUN/attention.h5" --out "$RUN/head_stats"
.venv/bin/python analysis/curves.py "$RUN" --out "$RUN/curves"
echo "== done: $RUN"
ls "$RUN"
cat <<EOF

What to look at:
  training log          $RUN/train.log
  training curves       $RUN/curves_steps.png, $RUN/curves_time.png (and .pdf)
  cross-attention maps  $RUN/cross_attention_layer1.png (and .pdf)
  attention head stats  $RUN/head_stats.png, $RUN/head_stats.md
  translations (beam 4) $RUN/dev.beam4.txt, reference $RUN/dev.ref.txt
  e.g.  paste $RUN/dev.beam4.txt $RUN/dev.ref.txt | head
EOF
