#!/usr/bin/env bash
# The scaled Table 3 (docs/results-multi30k.md) on a lent GPU, in one device
# call: the same protocol, rows and configs as the CPU sweep, device=cuda
# (fp32: the protocol's arithmetic, not a faster one), several rows at a
# time on the one GPU.  Issue 30: "the same protocol on the GPU with more
# seeds and epochs is the better table".
#
#   tests/gpu/table3.sh OUTDIR [ROW ...]      default: every row of the sweep
#
# It unpacks build/gpu-pack.tgz (tests/gpu/accept.sh --pack, which also packs
# data/multi30k-v2000.h5), runs jobs/run-local.sh table3 on the sweep folder
# SWEEP (default docs/results-multi30k/gpu, tracked, so its finished rows
# travel with the working tree and are skipped), stops starting rows
# TABLE3_GPU_BUDGET seconds (default 480) after it began, and writes
# OUTDIR/table3-gpu.tgz: the sweep's results/*.h5, attention/*.h5, logs and sweep.env, to
# untar here (tar xzf ... -C SWEEP) and commit.  A row still running at the
# budget is lost on the device machine and rerun by the next call.
#
# Environment: PARALLEL (rows at a time, default 6), SWEEP, TABLE3_GPU_BUDGET,
# TABLE3_DEVICE (cuda; tests: cpu), TABLE3_NO_UNPACK=1 (tests: use the
# binaries in place), PYTHON (default python3: the GPU image's has h5py,
# numpy and sacrebleu), and the sweep's overrides (jobs/table3-stages.sh).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
cd "$TOP"
err() { echo "error: gpu-table3: $*" >&2; }
[ $# -ge 1 ] || { err "usage: tests/gpu/table3.sh OUTDIR [ROW ...]"; exit 2; }
OUT=$1; shift
mkdir -p "$OUT" || { err "$OUT: cannot create"; exit 2; }
SWEEP=${SWEEP:-docs/results-multi30k/gpu}
BUDGET=${TABLE3_GPU_BUDGET:-480}

# the pack's binaries and libraries (gpu-accept's build stage: unpack, one
# device=cuda step); mpirun and spm_decode from the pack on PATH
DEVICE=${TABLE3_DEVICE:-cuda}
if [ -z "${TABLE3_NO_UNPACK:-}" ]; then
    STAGE=build bash tests/gpu/accept.sh "$OUT/accept" >"$OUT/build.log" 2>&1 \
        || { err "the build stage failed: $(tail -3 "$OUT/build.log")"; exit 1; }
fi
# shellcheck disable=SC2034  # PACK, JOBS, NVSMI: read by env.sh's functions
PACK=$TOP/build/gpu-pack.tgz JOBS=$(nproc) NVSMI=nvidia-smi
# shellcheck source=tests/gpu/accept/env.sh
. "$TOP/tests/gpu/accept/env.sh"
libs_env
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export PYTHON=${PYTHON:-python3} DEVICE TABLE3_DIR=${TABLE3_DIR:-$TOP/input/table3-m30k}
export PARALLEL=${PARALLEL:-6} OMP_WAIT_POLICY=passive

# the rows: those named, else every row the sweep has (base's seeds included)
if [ $# -eq 0 ]; then
    mapfile -t rows < <(cat "$TOP/docs/results-multi30k/sweep/rows.txt" 2>/dev/null)
    set -- "${rows[@]}"
fi
[ $# -ge 1 ] || { err "no rows (name them, or keep docs/results-multi30k/sweep/rows.txt)"; exit 2; }

# the sweep under the budget: timeout signals the dispatcher's whole process
# group, its rows too (SIGTERM: a checkpoint and exit 99, no result file);
# no setsid, which would outlive the device call
start=$SECONDS rc=0
timeout --kill-after=10 "$BUDGET" bash jobs/run-local.sh table3 "$SWEEP" "$@" >"$OUT/sweep.log" 2>&1 || rc=$?
n=$(find "$SWEEP/results" -name '*.h5' 2>/dev/null | wc -l)
echo "gpu-table3: $n result files in $SWEEP/results after $((SECONDS - start)) s (runner exit $rc; 124: budget reached)"
tar czf "$OUT/table3-gpu.tgz" -C "$SWEEP" results $([ -d "$SWEEP/attention" ] && echo attention) logs sweep.env 2>/dev/null \
    || tar czf "$OUT/table3-gpu.tgz" -C "$SWEEP" results
tail -5 "$OUT/sweep.log"
[ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]
