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
#       PARALLEL=N runs N rows at a time (each with LOCAL_RANKS ranks): on
#       small models, rows side by side use the cores better than ranks.
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
# shellcheck source=jobs/lib.sh
. "$HERE/lib.sh"
# local_row I: row I of the sweep in the foreground, its output appended to
# its log; on failure prints the row's last error line.  Returns its status.
local_row() {
    local i=$1 log=$SWEEP/logs/local_$1.out start r msg
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
    elif [ "$r" -ne 0 ]; then
        # this run's last error line (the element's "error: table3 row
        # ROW: STAGE: reason"), else its last line; not an earlier run's
        msg=$(tail -c "+$start" "$log" | grep '^error:' | tail -n 1)
        [ -n "$msg" ] || msg=$(tail -c "+$start" "$log" | grep . | tail -n 1)
        msg=${msg#"error: table3 row ${ROWS[$i]}: "}
        echo "error: table3 row ${ROWS[$i]}: failed (exit $r): ${msg:-no output} (log $log)" >&2
    fi
    return "$r"
}

# table3_local_rows: the rows IDX, PARALLEL at a time (default 1: one after
# the other; each with LOCAL_RANKS ranks).  Exits with the first failure's
# status (99 if a row stopped after a checkpoint) once all have ended.
table3_local_rows() {
    local par=${PARALLEL:-1} i r rc=0 stopped="" failed=() status
    # Open MPI binds rank 0 of every mpirun to core 0: parallel rows would
    # share one core
    [ "$par" -gt 1 ] && export MPIRUN_EXTRA="--bind-to none ${MPIRUN_EXTRA:-}"
    status=$(mktemp -d) || exit 1
    for i in "${IDX[@]}"; do
        if [ "$par" -eq 1 ]; then
            # one at a time, in the foreground; a stopped row (exit 99)
            # stops the sweep
            local_row "$i"; r=$?; echo "$r" > "$status/$i"
            [ "$r" -eq "$REQUEUE_EXIT" ] && break
            continue
        fi
        while [ "$(jobs -rp | wc -l)" -ge "$par" ]; do wait -n; done
        { local_row "$i"; echo $? > "$status/$i"; } &
    done
    wait
    for i in "${IDX[@]}"; do
        [ -f "$status/$i" ] || continue
        r=$(cat "$status/$i")
        if [ "$r" -eq "$REQUEUE_EXIT" ]; then stopped=1
        elif [ "$r" -ne 0 ]; then failed+=("${ROWS[$i]}"); [ "$rc" -eq 0 ] && rc=$r; fi
    done
    rm -rf "$status"
    [ -n "$stopped" ] && exit "$REQUEUE_EXIT"
    if [ ${#failed[@]} -gt 0 ]; then
        echo "error: $SWEEP: rows failed: ${failed[*]} (no table; rerun them with: jobs/run-local.sh table3 $SWEEP ${failed[*]})" >&2
        exit "$rc"
    fi
}

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
    PARALLEL=${PARALLEL:-1}
    need_count PARALLEL
    BIN=/bin/true job_init
    # the rows check the build themselves (table3.sbatch); the layout and
    # estimate lines below read the rows' parameter counts from it
    BIN=${BIN:-$TRANSFORMER_HOME/bin/transformer}
    . "$HERE/table3-stages.sh"
    # the rows run here: their datasets are looked for from here
    # (and overrides that break a row's config are refused before they are frozen)
    TABLE3_RANKS=${LOCAL_RANKS:-1} TABLE3_DATA_FROM=$PWD TABLE3_CHECK_PARAMS=overrides table3_prepare "$@"
    table3_print_layout
    table3_local_rows
    bash "$HERE/analysis.sbatch" "$SWEEP"
    ;;
*) usage ;;
esac
