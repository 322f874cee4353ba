#!/usr/bin/env bash
# Submits the Table 3 sweep: a job array with one element per row config
# (jobs/table3.sbatch) and an analysis job that runs when all of them
# completed (--dependency=afterok) and builds the table (jobs/analysis.sbatch).
#
#   jobs/submit-table3.sh SWEEP_DIR [ROW ...]
#
# SWEEP_DIR/ gets configs/ (a frozen copy of TABLE3_DIR/*.cfg), rows.txt (array
# index -> row), sweep.env (the overrides below), logs/ (one Slurm log per
# element: <arrayjob>_<index>.out), runs/<row>/ (checkpoints), results/<row>.h5
# and finally table3.{md,csv,tex}.  ROW names select rows (default: all); a
# second submission to an existing SWEEP_DIR reuses its configs and overrides,
# e.g. to rerun a failed row (its training resumes from its checkpoints); one
# that sets an override to another value is refused (exit 2, naming the row
# and the override): the rows' runs hold the sweep's settings.
#
# Environment (besides jobs/cluster.env):
#   TABLE3_DIR    row configs (default input/table3)
#   STEPS, WARMUP, MAX_TOKENS, UPDATE_FREQ, DATA, SHRINK, SEEDS, EXTRA
#                 sweep-wide overrides (jobs/table3-stages.sh), e.g. a small
#                 cluster: STEPS=2000 MAX_TOKENS=4096 SHRINK=4 DATA=data/multi30k.h5
#   MAX_PARALLEL  at most this many elements at once (sbatch --array=...%N)
# Prints the array job id and the analysis job id.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: jobs/submit-table3.sh SWEEP_DIR [ROW ...]" >&2; exit 2; }
. "$(dirname "$0")/submit.sh"
SWEEP=$1; shift
. "$TRANSFORMER_HOME/jobs/table3-stages.sh"
table3_prepare "$SWEEP" "$@"
array=$(IFS=,; echo "${IDX[*]}")${MAX_PARALLEL:+%$MAX_PARALLEL}
# one --mem for the array: its largest row's
mem="" best=0
for i in "${IDX[@]}"; do
    table3_overrides "$SWEEP/configs/${ROWS[$i]}.cfg"
    m=$(mem_request "$SWEEP/configs/${ROWS[$i]}.cfg" "${OVR[@]}")
    v=${m#--mem=}; v=${v%M}
    [ -n "$v" ] && [ "$v" -gt "$best" ] && { best=$v; mem=$m; }
done

array_id=$(sbatch --parsable "${SBATCH_OPTS[@]}" ${mem:+"$mem"} --job-name=table3 --array="$array" \
    --output="$SWEEP/logs/%A_%a.out" "$TRANSFORMER_HOME/jobs/table3.sbatch" "$SWEEP")
array_id=${array_id%%;*}
analysis_id=$(sbatch --parsable "${ANALYSIS_OPTS[@]}" --job-name=table3-analysis \
    --dependency="afterok:$array_id" --kill-on-invalid-dep=yes \
    --output="$SWEEP/logs/analysis-%j.out" "$TRANSFORMER_HOME/jobs/analysis.sbatch" "$SWEEP")
analysis_id=${analysis_id%%;*}
echo "table3: array job $array_id (rows: $(for i in "${IDX[@]}"; do printf '%s ' "${ROWS[$i]}"; done)), analysis job $analysis_id"
echo "$array_id $analysis_id" > "$SWEEP/jobs.txt"
echo "$array_id $analysis_id"
