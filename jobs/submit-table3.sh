#!/usr/bin/env bash
# Submits the Table 3 sweep: a job array with one element per row config
# (jobs/table3.sbatch) and an analysis job that runs when all of them
# ended, whatever their outcome (--dependency=afterany), and tables what
# finished, the failed rows marked (jobs/analysis.sbatch).
# First it prints the rows' batch layout (GPUs per row, micro-batch tokens,
# update_freq, tokens a step against the paper's ~25000; the rule is
# table3_layout in jobs/table3-stages.sh) and the estimated GPU-hours from
# the measured step; a layout that would change the global batch without
# BATCH_TOKENS is refused (exit 2, one line).
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
# Nothing is frozen into SWEEP_DIR before every check passed (overrides,
# seeds.txt, ROW names, layouts, datasets, each row's config with the
# overrides through `transformer params`: table3_prepare): a refused first
# submission leaves nothing that the corrected one must match.
#
# Environment (besides jobs/cluster.env):
#   TABLE3_DIR    row configs (default input/table3)
#   STEPS, WARMUP, GPUS_PER_ROW, MAX_TOKENS, UPDATE_FREQ, BATCH_TOKENS, DATA,
#   SHRINK, SEEDS, EXTRA
#                 sweep-wide overrides (jobs/table3-stages.sh), e.g. a small
#                 cluster: STEPS=2000 BATCH_TOKENS=4096 SHRINK=4 DATA=data/multi30k.h5
#   GPUS_PER_ROW  GPUs (ranks) of each row (default 1: a base row's 25k-token
#                 step fits one GPU, and that is what was measured); above
#                 GPUS_PER_NODE a multiple of it (a row takes whole nodes)
#   MAX_PARALLEL  at most this many elements at once (sbatch --array=...%N)
# Prints the array job id and the analysis job id.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: jobs/submit-table3.sh SWEEP_DIR [ROW ...]" >&2; exit 2; }
. "$(dirname "$0")/submit.sh"
SWEEP=$1; shift
# before anything is frozen: sbatch would refuse %0 or %abc only after it
[ -z "${MAX_PARALLEL:-}" ] || need_count MAX_PARALLEL
. "$TRANSFORMER_HOME/jobs/table3-stages.sh"
# the elements run in TRANSFORMER_HOME (--chdir): their datasets are looked for there
# and every selected row's config with the overrides goes through `transformer params`
# and a row on several nodes fills them (GPUS_PER_NODE ranks on each)
TABLE3_NODE_GPUS=$GPUS_PER_NODE TABLE3_DATA_FROM=$TRANSFORMER_HOME TABLE3_CHECK_PARAMS=all table3_prepare "$SWEEP" "$@"
# the layout of the rows and the sweep's cost, before anything is submitted
table3_print_layout || { echo "error: $LAYOUT_ERR" >&2; exit 2; }
array=$(IFS=,; echo "${IDX[*]}")${MAX_PARALLEL:+%$MAX_PARALLEL}
# each element: GPUS_PER_ROW ranks, on as few nodes as hold them
rpn=$(( GPUS_PER_ROW < GPUS_PER_NODE ? GPUS_PER_ROW : GPUS_PER_NODE ))
training_opts $(( (GPUS_PER_ROW + rpn - 1) / rpn )) "$rpn"
MEM_RANKS=$rpn
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
    --dependency="afterany:$array_id" \
    --output="$SWEEP/logs/analysis-%j.out" "$TRANSFORMER_HOME/jobs/analysis.sbatch" "$SWEEP")
analysis_id=${analysis_id%%;*}
echo "table3: array job $array_id (rows: $(for i in "${IDX[@]}"; do printf '%s ' "${ROWS[$i]}"; done)), analysis job $analysis_id"
echo "$array_id $analysis_id" > "$SWEEP/jobs.txt"
echo "$array_id $analysis_id"
