#!/usr/bin/env bash
# The Slurm jobs without Slurm, for a workstation: the same scripts, launched
# with plain `mpirun -n LOCAL_RANKS` (jobs/cluster.env; one rank per GPU).
#
#   jobs/run-local.sh train RUN_DIR CONFIG [key=value ...]
#       one training run (jobs/train.sbatch); run it again to resume.
#   jobs/run-local.sh table3 SWEEP_DIR [ROW ...]
#       the Table 3 sweep (jobs/table3.sbatch), rows one after the other, then
#       the table (jobs/analysis.sbatch) if every row succeeded.  Same
#       overrides as jobs/submit-table3.sh (STEPS, MAX_TOKENS, DATA, SHRINK, ...).
#
# `kill -USR1 PID` or `kill PID` (PID of `run-local.sh train`): the training
# writes a checkpoint and stops (exit 99); the same command continues from
# there.  Exit status: 0 if everything
# succeeded, else the first failure's (1 for a failed row).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
export TRANSFORMER_HOME=${TRANSFORMER_HOME:-$(cd "$HERE/.." && pwd)}
# outside Slurm even inside an allocation would be surprising: force mpirun
export JOBS_NO_SRUN=${JOBS_NO_SRUN:-1}
usage() { echo "usage: jobs/run-local.sh train RUN_DIR CONFIG [key=value ...] | table3 SWEEP_DIR [ROW ...]" >&2; exit 2; }
[ $# -ge 1 ] || usage
cmd=$1; shift
case $cmd in
train)
    [ $# -ge 2 ] || usage
    exec bash "$HERE/train.sbatch" "$@"
    ;;
table3)
    [ $# -ge 1 ] || usage
    . "$HERE/lib.sh"
    BIN=/bin/true job_init
    . "$HERE/table3-stages.sh"
    table3_prepare "$@"
    failed=() rc=0
    for i in "${IDX[@]}"; do
        log=$SWEEP/logs/local_$i.out
        echo "table3: row ${ROWS[$i]} (log $log)"
        # the log is appended to, run after run: this run's part starts at
        # byte $start, on a line of its own (a killed run can leave its last
        # line without a newline)
        if [ -s "$log" ] && [ -n "$(tail -c 1 "$log")" ]; then echo >> "$log"; fi
        start=$(( $(stat -c %s "$log" 2>/dev/null || echo 0) + 1 ))
        bash "$HERE/table3.sbatch" "$SWEEP" "$i" >> "$log" 2>&1
        r=$?
        if [ "$r" -eq "$REQUEUE_EXIT" ]; then
            echo "table3: row ${ROWS[$i]} stopped after a checkpoint; run the same command again to continue" >&2
            exit "$r"
        fi
        if [ "$r" -ne 0 ]; then
            # this run's last error line (the element's "error: table3 row
            # ROW: STAGE: reason"), else its last line; not an earlier run's
            msg=$(tail -c "+$start" "$log" | grep '^error:' | tail -n 1)
            [ -n "$msg" ] || msg=$(tail -c "+$start" "$log" | grep . | tail -n 1)
            msg=${msg#"error: table3 row ${ROWS[$i]}: "}
            echo "error: table3 row ${ROWS[$i]}: failed (exit $r): ${msg:-no output} (log $log)" >&2
            failed+=("${ROWS[$i]}"); [ "$rc" -eq 0 ] && rc=$r
        fi
    done
    if [ ${#failed[@]} -gt 0 ]; then
        echo "error: $SWEEP: rows failed: ${failed[*]} (no table; rerun them with: jobs/run-local.sh table3 $SWEEP ${failed[*]})" >&2
        exit "$rc"
    fi
    bash "$HERE/analysis.sbatch" "$SWEEP"
    ;;
*) usage ;;
esac
