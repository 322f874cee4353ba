# shellcheck shell=bash
# jobs/submit.sh: sbatch options from jobs/cluster.env (sourced by the
# submit scripts).  Sets the array SBATCH_OPTS for a GPU training job and
# ANALYSIS_OPTS for a CPU-only analysis job.
TRANSFORMER_HOME=${TRANSFORMER_HOME:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
export TRANSFORMER_HOME
# shellcheck source=jobs/lib.sh
. "$TRANSFORMER_HOME/jobs/lib.sh"
read_cluster_env
# counts that the options and the memory request compute with (SIGNAL_LEAD:
# seconds; sbatch would take 0 as no warning before the time limit)
need_count GPUS_PER_NODE NODES CPUS_PER_TASK SIGNAL_LEAD
command -v sbatch >/dev/null || { echo "error: sbatch: not found (no Slurm here? use jobs/run-local.sh)" >&2; exit 2; }
# the submit shell runs `transformer params` (memory request, layout, cost
# estimate): a binary that cannot start here (modules not loaded, not built)
# would drop those silently, so refuse in one line
BIN=${BIN:-$TRANSFORMER_HOME/bin/transformer}
if ! params_err=$("$BIN" params 2>&1 >/dev/null); then
    echo "error: $BIN params: cannot run in this shell (${params_err%%$'\n'*}): build it (make) and load the modules it was built with (MODULES in jobs/cluster.env)" >&2
    exit 2
fi

common_opts=(--chdir="$TRANSFORMER_HOME" --export=ALL)
[ -n "$ACCOUNT" ] && common_opts+=(--account="$ACCOUNT")
[ -n "$QOS" ] && common_opts+=(--qos="$QOS")
# shellcheck disable=SC2206
[ -n "$SBATCH_EXTRA" ] && common_opts+=($SBATCH_EXTRA)

# job_data CONFIG [key=value ...]: the dataset file a training job of
# CONFIG reads (its data key, or the last data= given), as the job sees it:
# a relative path from TRANSFORMER_HOME, where jobs run (--chdir); empty
# without a data key, "synthetic" as it is
job_data() {
    local data o
    data=$(awk '{ sub(/#.*/, "") } /^[ \t]*data[ \t]*=/ { sub(/^[^=]*=[ \t]*/, ""); sub(/[ \t]+$/, ""); v = $0 } END { print v }' "$1")
    for o in "${@:2}"; do case $o in data=*) data=${o#data=} ;; esac; done
    case $data in "" | synthetic | /*) ;; *) data=$TRANSFORMER_HOME/$data ;; esac
    echo "$data"
}

# mem_request CONFIG [key=value ...]: the --mem option for a training job of
# CONFIG on GPUS_PER_NODE ranks per node (MEM_PER_NODE=auto), in MB with a
# 25% margin: the node holds the dataset once (its file size: train maps
# the training split and the ranks share the pages, docs/dataset.md); each
# rank its batch plan (24 bytes a pair: under a fifth of the file's bytes
# per pair) and ~4 GiB of libraries, CUDA context and pinned buffers; rank
# 0 also ~24 bytes per parameter (host copies of params, Adam m and v, and
# the checkpoint's in-memory HDF5 image).  A file of the older layout (ids
# deflated, so not mappable; h5dump says CHUNKED) is read by every rank:
# twice its size per rank.  Nothing if the estimate cannot be made.
mem_request() {
    case ${MEM_PER_NODE:-} in auto) ;; "") return 0 ;; *) echo "--mem=$MEM_PER_NODE"; return 0 ;; esac
    local params data bytes=0
    params=$("$BIN" params --config "$@" 2>/dev/null |
             awk '$1 == "params" { print $2; exit }') || return 0
    [ -n "$params" ] || return 0
    data=$(job_data "$@")
    [ -f "$data" ] && bytes=$(stat -c %s "$data")
    local node=$bytes rank=$((bytes / 5))
    if [ "$bytes" -gt 0 ] && command -v h5dump >/dev/null &&
       grep -q CHUNKED < <(h5dump -p -H -d /splits/train/src_ids "$data" 2>/dev/null); then
        node=0; rank=$((2 * bytes))
    fi
    echo "--mem=$(( (node + ${MEM_RANKS:-$GPUS_PER_NODE} * (rank + (4 << 30)) + 24 * params) * 5 / 4 / (1 << 20) + 1 ))M"
}

# training_opts NODES RANKS_PER_NODE: SBATCH_OPTS for a training job of that
# shape; a GPU_REQUEST that names GPUS_PER_NODE (the default
# --gpus-per-node=GPUS_PER_NODE, or --gres=gpu:GPUS_PER_NODE) asks for
# RANKS_PER_NODE GPUs instead
training_opts() {
    local gpus=$GPU_REQUEST
    gpus=${gpus//=$GPUS_PER_NODE/=$2}; gpus=${gpus//gpu:$GPUS_PER_NODE/gpu:$2}
    SBATCH_OPTS=("${common_opts[@]}" --nodes="$1" --ntasks-per-node="$2"
                 --cpus-per-task="$CPUS_PER_TASK" --time="$TIME_LIMIT" --signal="USR1@$SIGNAL_LEAD" --requeue)
    [ -n "$PARTITION" ] && SBATCH_OPTS+=(--partition="$PARTITION")
    # shellcheck disable=SC2206
    [ -n "$gpus" ] && SBATCH_OPTS+=($gpus)
    return 0
}

training_opts "$NODES" "$GPUS_PER_NODE"

ANALYSIS_OPTS=("${common_opts[@]}" --nodes=1 --ntasks=1 --time="$ANALYSIS_TIME")
[ -n "$ANALYSIS_PARTITION" ] && ANALYSIS_OPTS+=(--partition="$ANALYSIS_PARTITION")
true
