#!/usr/bin/env bash
# Multi30k English -> German, end to end on one machine (2 CPU cores):
#   1. prepare  data/multi30k.h5 (shared 8000-piece BPE; input/prepare.sh)
#   2. train    input/multi30k.cfg (checkpoints every 100 steps, last 5 kept)
#   3. average  the last 5 checkpoints (section 6.1)
#   4. translate test2016 with beam 4, alpha 0.6
#   5. BLEU     sacreBLEU (signature) + tokenised BLEU, analysis/bleu.py
#
#   input/recipe-multi30k.sh [key=value ...]     (overrides for train, e.g. train_steps=3000)
# Environment: ROOT (data root, default ../shared/data), RUN (default runs/multi30k),
# DATA (default data/multi30k.h5), PYTHON (default .venv/bin/python, else python3).
# Training resumes from RUN's checkpoints when re-run.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
cd "$TOP"
ROOT=${ROOT:-$TOP/../shared/data}
RUN=${RUN:-runs/multi30k}
DATA=${DATA:-data/multi30k.h5}
PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
BIN=bin/transformer
[ -x "$BIN" ] || make -s
mkdir -p "$(dirname "$RUN")"
t0=$(date +%s)
[ -f "$DATA" ] || VOCAB=8000 MAX_LEN=128 input/prepare.sh multi30k "$ROOT" "$DATA"
"$BIN" train --config input/multi30k.cfg data="$DATA" run_dir="$RUN" "$@" | tee -a "$RUN.train.log"
t1=$(date +%s)
"$BIN" average --output "$RUN/average.h5" --last 5 "$RUN"
"$BIN" translate --checkpoint "$RUN/average.h5" --data "$DATA" --split test2016 --output "$RUN/test2016.de"
"$PYTHON" analysis/bleu.py "$RUN/test2016.de" "$ROOT/multi30k/test2016.de" | tee "$RUN/test2016.bleu"
echo "recipe: training $(( (t1 - t0) / 60 )) min, total $(( ($(date +%s) - t0) / 60 )) min; translations in $RUN/test2016.de"
