# shellcheck shell=bash
# jobs/lib.sh: shell functions shared by the job scripts (sourced, bash).
#
#   job_init              find the project (TRANSFORMER_HOME), read cluster.env,
#                         load modules, install the signal traps
#   read_cluster_env      read CLUSTER_ENV (default jobs/cluster.env)
#   need_count NAME...    exit 2 with one line unless each $NAME is a
#                         positive integer
#   launch CMD...         run CMD as one MPI job: srun inside a Slurm job,
#                         mpirun -n LOCAL_RANKS outside (jobs/run-local.sh)
#   run_stage CMD...      launch CMD in the background and wait for it, passing
#                         a preemption signal on to it (see below); returns its
#                         exit status
#   preempted RC          true if RC (or a signal seen by this shell) means
#                         "checkpointed, continue in a new job"
#   requeue_self          requeue this job (or array element) and leave
#   config_refusal CONFIG [key=value ...]
#                         why `transformer params` refuses CONFIG with these
#                         overrides, as train would (nothing if it accepts)
#
# Preemption protocol (docs/jobs.md).  Slurm sends SIGUSR1 SIGNAL_LEAD seconds
# before the time limit: with --signal=USR1@T to every task of the running
# step, with --signal=B:USR1@T to this batch shell only.  Preemption,
# `scontrol requeue` and `scancel` send SIGTERM to every process of the job.
# On SIGUSR1 or SIGTERM `transformer train` finishes its step, writes a
# checkpoint and exits with REQUEUE_EXIT (99).  This shell traps both signals
# and sends SIGUSR1 to the launcher (srun and mpirun forward it to every
# rank), so both --signal forms work and a SIGTERM to a workstation run stops
# it cleanly too; the shell keeps waiting, so the checkpoint is complete
# before the job ends.
# After a stage that exited with REQUEUE_EXIT (or died of the forwarded
# SIGUSR1) the batch script calls requeue_self: `scontrol requeue` puts the job
# back into the queue with the same job id, and the new run resumes from the
# newest checkpoint in its run directory.

JOB_SIGNAL=""        # the last preemption signal this shell received
_STAGE_PID=""

# read_cluster_env: source CLUSTER_ENV (default TRANSFORMER_HOME/jobs/
# cluster.env) and set CLUSTER_FILE to it; exit 2 with one line if it is not
# a readable file or fails
read_cluster_env() {
    CLUSTER_FILE=${CLUSTER_ENV:-$TRANSFORMER_HOME/jobs/cluster.env}
    local why=""
    if [ ! -e "$CLUSTER_FILE" ]; then why="no such file"
    elif [ ! -f "$CLUSTER_FILE" ]; then why="not a regular file"
    elif [ ! -r "$CLUSTER_FILE" ]; then why="not readable"; fi
    [ -z "$why" ] || { echo "error: $CLUSTER_FILE: cannot read the cluster settings: $why${CLUSTER_ENV:+ (CLUSTER_ENV)}" >&2; exit 2; }
    # shellcheck source=jobs/cluster.env
    . "$CLUSTER_FILE" || { echo "error: $CLUSTER_FILE: cannot read the cluster settings" >&2; exit 2; }
}

# need_count NAME...: exit 2 with one line unless each $NAME is a positive
# integer (a count of ranks, GPUs, nodes, rows); says where it comes from
# once the cluster settings are read
need_count() {
    local v
    for v in "$@"; do
        case ${!v-} in
            "" | *[!0-9]* | 0*)
                echo "error: $v='${!v-}': not a positive integer${CLUSTER_FILE:+ (the environment or $CLUSTER_FILE)}" >&2
                exit 2 ;;
        esac
    done
}

job_init() {
    # the analysis's h5py opens files with HDF5's locks, which fail where
    # flock does (NFS without lockd); transformer itself opens without them
    export HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}
    if [ -z "${TRANSFORMER_HOME:-}" ]; then
        # sbatch runs a copy of the script from the spool directory, so the
        # project is found from the submit directory (the submit scripts
        # export TRANSFORMER_HOME explicitly)
        if [ -n "${SLURM_SUBMIT_DIR:-}" ] && [ -f "$SLURM_SUBMIT_DIR/jobs/lib.sh" ]; then
            TRANSFORMER_HOME=$SLURM_SUBMIT_DIR
        else
            TRANSFORMER_HOME=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
        fi
    fi
    export TRANSFORMER_HOME
    read_cluster_env
    # outside Slurm (or JOBS_NO_SRUN) the ranks are mpirun -n LOCAL_RANKS:
    # -n 0 would start one a slot, and a word Open MPI's banner
    if [ -z "${SLURM_JOB_ID:-}" ] || [ -n "${JOBS_NO_SRUN:-}" ]; then need_count LOCAL_RANKS; fi
    BIN=${BIN:-$TRANSFORMER_HOME/bin/transformer}
    if [ -n "${SLURM_JOB_ID:-}" ]; then
        local m
        for m in $MODULES; do
            module load "$m" || { echo "error: module load $m: failed (MODULES in cluster.env)" >&2; exit 2; }
        done
        if [ -n "$JOB_SETUP" ]; then eval "$JOB_SETUP"; fi
    fi
    [ -x "$BIN" ] || { echo "error: $BIN: not built (run make in $TRANSFORMER_HOME)" >&2; exit 2; }
    trap '_on_signal USR1' USR1
    trap '_on_signal TERM' TERM
}

# config_refusal CONFIG [key=value ...]: returns 0, printing nothing, if
# `BIN params` accepts CONFIG with the overrides (it checks the keys and
# values as train does); else prints its error line without "error: " (it
# names the config file and line, or "command line" for an override) and
# returns 1.  The submit scripts refuse such a job before its queue wait.
config_refusal() {
    local err line
    err=$("$BIN" params --config "$@" 2>&1 >/dev/null) && return 0
    line=$(grep -m 1 '^error: ' <<< "$err") || line=${err%%$'\n'*}
    echo "${line#error: }"
    return 1
}

# gpu_compute_cap: the major compute capability of this node's first GPU
# ("" when nvidia-smi cannot say; bounded: a wedged driver must not hold
# the job)
gpu_compute_cap() {
    local cc
    cc=$(timeout 20 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1) || true
    case $cc in [0-9]*.[0-9]*) echo "${cc%%.*}" ;; esac
}

# job_precision [CONFIG]: sets JOB_PRECISION to the trainer's precision for
# this job (PRECISION in cluster.env) and JOB_PRECISION_WHY to the reason;
# empty JOB_PRECISION where CONFIG sets precision itself and PRECISION is
# auto (the config's stands).  Exits 2 on a PRECISION it does not know.
job_precision() {
    local p=${PRECISION:-auto} cc
    JOB_PRECISION="" JOB_PRECISION_WHY=""
    case $p in
        fp32 | tf32 | bf16 | fp16) JOB_PRECISION=$p JOB_PRECISION_WHY="PRECISION=$p"; return 0 ;;
        auto) ;;
        *) echo "error: PRECISION='$p': not auto, fp32, tf32, bf16 or fp16 (jobs/cluster.env)" >&2; exit 2 ;;
    esac
    if [ -n "${1:-}" ] && grep -qE '^[[:space:]]*precision[[:space:]]*=' "$1" 2>/dev/null; then
        JOB_PRECISION_WHY="set by $1"; return 0
    fi
    if [ "${DEVICE:-cuda}" != cuda ]; then
        JOB_PRECISION=fp32 JOB_PRECISION_WHY="DEVICE=$DEVICE: the CPU backend is fp32"; return 0
    fi
    cc=${TRANSFORMER_COMPUTE_CAP:-$(gpu_compute_cap)}
    if [ -z "$cc" ]; then
        JOB_PRECISION=fp32 JOB_PRECISION_WHY="nvidia-smi did not give the GPU's compute capability; set PRECISION=bf16 or fp16"
    elif [ "$cc" -ge 8 ]; then
        JOB_PRECISION=bf16 JOB_PRECISION_WHY="sm_${cc}x supports bf16"
    elif [ "$cc" -ge 7 ]; then
        JOB_PRECISION=fp16 JOB_PRECISION_WHY="sm_${cc}x: fp16 with dynamic loss scaling (no bf16)"
    else
        JOB_PRECISION=fp32 JOB_PRECISION_WHY="sm_${cc}x has no fast 16-bit path here"
    fi
}

# print_precision: the log line that says which precision the job trains in
print_precision() {
    local what="the config's"
    echo "precision: ${JOB_PRECISION:-$what} (PRECISION=${PRECISION:-auto}: $JOB_PRECISION_WHY; PRECISION=fp32 for the exact reference)"
}

_on_signal() {
    JOB_SIGNAL=$1
    echo "job: received SIG$1 at $(date -u +%FT%TZ)${_STAGE_PID:+, passing SIGUSR1 to the running stage}" >&2
    # USR1 may have come to this shell only (--signal=B:USR1, scancel -b);
    # under Slurm TERM reached the tasks too, outside Slurm only this shell:
    # either way the launcher passes SIGUSR1 on to every rank (a rank that is
    # already stopping ignores the repeat)
    if [ -n "$_STAGE_PID" ]; then kill -USR1 "$_STAGE_PID" 2>/dev/null || true; fi
}

# the launcher command line for CMD, into the array _LAUNCH
launch_cmd() {
    if [ -n "${SLURM_JOB_ID:-}" ] && [ -z "${JOBS_NO_SRUN:-}" ]; then
        # one task per rank; the GPU request etc. come from the job
        # allocation, but Slurm 22.05+ srun does not inherit --cpus-per-task
        local cpt=()
        [ -n "${SLURM_CPUS_PER_TASK:-}" ] && cpt=(--cpus-per-task="$SLURM_CPUS_PER_TASK")
        # --kill-on-bad-exit: a rank that dies ends the step at once.  Without
        # it the others wait in their allreduce until the time limit (under
        # pmix too, across nodes: tests/slurm/test_two_node.sh).  The exit
        # 99 of a preemption is safe: every rank waits until rank 0's
        # checkpoint is in place before any leaves (rundir_checkpoint_sync)
        local extra=()   # SRUN_EXTRA: words, split without globbing
        read -ra extra <<< "${SRUN_EXTRA:-}"
        _LAUNCH=(srun --mpi="$SRUN_MPI" --kill-on-bad-exit=1 "${cpt[@]}" "${extra[@]}" "$@")
    else
        local extra=()
        read -ra extra <<< "${MPIRUN_EXTRA:-}"
        _LAUNCH=(mpirun -n "${LOCAL_RANKS:-1}" "${extra[@]}" "$@")
    fi
}

launch() {
    launch_cmd "$@"
    "${_LAUNCH[@]}"
}

run_stage() {
    # a simple command in the background: $! is srun/mpirun itself (not a
    # subshell around it, which would die of the forwarded signal and leave
    # the launcher running), so _on_signal reaches the launcher, which
    # forwards the signal to the ranks
    launch_cmd "$@"
    "${_LAUNCH[@]}" &
    _STAGE_PID=$!
    local rc
    while :; do
        wait "$_STAGE_PID"; rc=$?
        [ "$rc" -le 128 ] && break
        # wait was interrupted by a trapped signal: keep waiting while it runs
        kill -0 "$_STAGE_PID" 2>/dev/null && continue
        wait "$_STAGE_PID"; rc=$?     # it ended meanwhile: its own status
        break
    done
    _STAGE_PID=""
    return "$rc"
}

preempted() {
    [ "$1" -eq 0 ] && return 1            # finished anyway
    [ "$1" -eq "$REQUEUE_EXIT" ] || [ "$1" -eq $((128 + 10)) ] && return 0   # 10 = SIGUSR1
    # a signal reached this shell: under SIGTERM srun may report 255 while
    # the ranks still finish their checkpoint (KillWait); not a failure
    [ -n "$JOB_SIGNAL" ] && return 0
    return 1
}

requeue_self() {
    if [ -z "${SLURM_JOB_ID:-}" ] || [ -n "${JOBS_NO_SRUN:-}" ]; then
        echo "job: stopped after a checkpoint; run the same command again to resume" >&2
        exit "$REQUEUE_EXIT"
    fi
    if [ "$JOB_SIGNAL" = TERM ]; then
        # SIGTERM: Slurm is ending this job (preemption, `scontrol requeue`,
        # scancel) and requeues it itself if it should run again
        echo "job: stopped by SIGTERM; Slurm requeues or ends the job (a requeued job resumes from the newest checkpoint)" >&2
        exit "$REQUEUE_EXIT"
    fi
    echo "job: checkpoint written, requeueing job $SLURM_JOB_ID (restart $((${SLURM_RESTART_COUNT:-0} + 1)))" >&2
    if ! scontrol requeue "$SLURM_JOB_ID"; then
        # e.g. a preemption or `scontrol requeue` already requeued it
        echo "job: scontrol requeue $SLURM_JOB_ID failed; resubmit to resume from the checkpoint" >&2
        exit "$REQUEUE_EXIT"
    fi
    exit 0
}
