# shellcheck shell=bash
# jobs/submit.sh: sbatch options from jobs/cluster.env (sourced by the
# submit scripts).  Sets the array SBATCH_OPTS for a GPU training job and
# ANALYSIS_OPTS for a CPU-only analysis job.
TRANSFORMER_HOME=${TRANSFORMER_HOME:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
export TRANSFORMER_HOME
# shellcheck source=jobs/cluster.env
. "${CLUSTER_ENV:-$TRANSFORMER_HOME/jobs/cluster.env}" || { echo "error: ${CLUSTER_ENV:-$TRANSFORMER_HOME/jobs/cluster.env}: cannot read the cluster settings" >&2; exit 2; }
command -v sbatch >/dev/null || { echo "error: sbatch: not found (no Slurm here? use jobs/run-local.sh)" >&2; exit 2; }

common_opts=(--chdir="$TRANSFORMER_HOME" --export=ALL)
[ -n "$ACCOUNT" ] && common_opts+=(--account="$ACCOUNT")
[ -n "$QOS" ] && common_opts+=(--qos="$QOS")
# shellcheck disable=SC2206
[ -n "$SBATCH_EXTRA" ] && common_opts+=($SBATCH_EXTRA)

SBATCH_OPTS=("${common_opts[@]}" --nodes="$NODES" --ntasks-per-node="$GPUS_PER_NODE"
             --cpus-per-task="$CPUS_PER_TASK" --time="$TIME_LIMIT" --signal="USR1@$SIGNAL_LEAD" --requeue)
[ -n "$PARTITION" ] && SBATCH_OPTS+=(--partition="$PARTITION")
# shellcheck disable=SC2206
[ -n "$GPU_REQUEST" ] && SBATCH_OPTS+=($GPU_REQUEST)

ANALYSIS_OPTS=("${common_opts[@]}" --nodes=1 --ntasks=1 --time="$ANALYSIS_TIME")
[ -n "$ANALYSIS_PARTITION" ] && ANALYSIS_OPTS+=(--partition="$ANALYSIS_PARTITION")
true
