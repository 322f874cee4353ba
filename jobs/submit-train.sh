#!/usr/bin/env bash
# Submits one training run (jobs/train.sbatch) with the settings of
# jobs/cluster.env:
#   jobs/submit-train.sh RUN_DIR CONFIG [key=value ...]
# e.g. jobs/submit-train.sh runs/base input/table3/base.cfg train_steps=100000
# The config and the overrides are checked with `transformer params` (and
# the dataset file's existence) before anything is submitted: a job train
# would refuse is refused here in one line (exit 2).  Prints the job id.  The job log is RUN_DIR/slurm-<jobid>.out (appended to
# across requeues).  Extra sbatch options: SBATCH_EXTRA="..." (cluster.env).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: jobs/submit-train.sh RUN_DIR CONFIG [key=value ...]" >&2; exit 2; }
. "$(dirname "$0")/submit.sh"
RUN_DIR=$1 CONFIG=$2
[ -f "$CONFIG" ] || { echo "error: $CONFIG: no such config file" >&2; exit 2; }
# a missing dataset fails the job at its start, after its wait in the queue
data=$(job_data "$CONFIG" "${@:3}")
case $data in "" | synthetic) ;; *)
    [ -f "$data" ] || { echo "error: $data: no such dataset file (data of $CONFIG or the command line; input/prepare.sh makes one)" >&2; exit 2; } ;;
esac
# and so does a config that train refuses (an unknown key, a bad value)
why=$(config_refusal "$CONFIG" device="$DEVICE" "${@:3}") ||
    { echo "error: $why (transformer params; nothing submitted)" >&2; exit 2; }
mkdir -p "$RUN_DIR"
RUN_DIR=$(cd "$RUN_DIR" && pwd)
CONFIG=$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")
shift 2
mem=$(mem_request "$CONFIG" "$@")
sbatch --parsable "${SBATCH_OPTS[@]}" ${mem:+"$mem"} --job-name="train-$(basename "$RUN_DIR")" \
    --output="$RUN_DIR/slurm-%j.out" "$TRANSFORMER_HOME/jobs/train.sbatch" "$RUN_DIR" "$CONFIG" "$@"
