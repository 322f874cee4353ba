#!/usr/bin/env bash
# make gpu-accept (issues 18, 29): one command that checks and measures the
# GPU path in the time a GPU is lent.  docs/gpu-accept.md says what each stage
# checks and gives the calls in the order to make them.
#
#   tests/gpu/accept.sh OUTDIR        run call CALL of the plan (default 1)
#   CALL=2 tests/gpu/accept.sh OUTDIR
#   STAGE=train,mpi tests/gpu/accept.sh OUTDIR      named stages (comma- or
#                                     space-separated; STAGE=all: every stage)
#   tests/gpu/accept.sh --plan        the calls: their stages, budgets and the
#                                     device tool's arguments (make gpu-plan)
#   tests/gpu/accept.sh --env DIR     only the header lines (GPU, driver, ...), to DIR/env.md
#   tests/gpu/accept.sh --pack        on a machine without a GPU: build for the
#                                     device (CUDA_ARCH, default 90, only), bundle
#                                     the MPI/HDF5/OpenBLAS libraries (and Open
#                                     MPI's components and mpirun), prepare
#                                     data/multi30k.h5, all into build/gpu-pack.tgz
#                                     (unpacked by the build stage there)
#
# The stages, their budgets and the calls are in tests/gpu/accept/plan.sh
# (build, step, bench, ops, mpi, train, decode, sanitize, in order of value);
# the stages themselves in tests/gpu/accept/stages.sh.  Each stage runs under
# its budget (timeout) and writes OUTDIR/STAGE.md (GPU, driver, CUDA, NCCL,
# commit first, then its checks and figures, then the end of its log);
# OUTDIR/summary.md lists the stages of this invocation and OUTDIR/logs.tgz
# holds the raw logs (build/gpu-accept/logs/STAGE.log and the runs' logs):
# at most 8 files, the number a device call brings back.  Exit 0 only if
# every stage passed; without a GPU every stage fails with one line
# 'error: gpu-accept: stage S: no CUDA GPU visible (...)'.
#
# Environment: CALL, STAGE, ACCEPT_WORK (scratch, default build/gpu-accept),
# DATA (default data/multi30k.h5), TRAIN_STEPS (300), BF16_TOL (see below),
# ACCEPT_BUDGET_STAGE (one stage's budget, s), ACCEPT_NVIDIA_SMI (the
# nvidia-smi to ask; tests point it elsewhere), ACCEPT_NO_BUILD=1 (use the
# packed binaries where the machine could build), ACCEPT_NO_H5DIFF=1 (compare
# checkpoints with h5py even where h5diff exists).  Tests only:
# ACCEPT_DEVICE=cpu (train/mpi/decode's logic on the CPU), ACCEPT_BIN and
# ACCEPT_GPU_BIN (the emulator's binaries in place of the GPU's),
# ACCEPT_NCCL=0|1 (whether the binaries have NCCL), ACCEPT_STAGE_LIMIT (every
# budget), ACCEPT_STEP_ARGS.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
cd "$TOP"
LIB=("${ACCEPT_PY:-python3}" "$TOP/tests/gpu/accept_lib.py")   # standard library only
NVSMI=${ACCEPT_NVIDIA_SMI:-nvidia-smi}
WORK=${ACCEPT_WORK:-$TOP/build/gpu-accept}
DATA=${DATA:-data/multi30k.h5}
PACK=$TOP/build/gpu-pack.tgz
BIN=${BIN:-$TOP/bin/transformer}
DEVICE=${ACCEPT_DEVICE:-cuda}
TRAIN_STEPS=${TRAIN_STEPS:-300}
STOP_STEP=${STOP_STEP:-$((TRAIN_STEPS / 2))}
DIGIT_STEPS=${DIGIT_STEPS:-10}
DIGIT_TOL=${DIGIT_TOL:-1e-5}      # stage train: see stage_train
MPI_STEPS=${MPI_STEPS:-20}
JOBS=${JOBS:-$(nproc)}
GPU_DIR=${ACCEPT_GPU_BIN:-$TOP/bin/gpu}   # test_cuda_step, test_cuda_kernels, gemm_peak
# Python with h5py (the GPU machine's python3 has it) for checkpoints where
# h5diff is missing, and with PyTorch for the decode stage
H5PY=${ACCEPT_H5PY:-${TORCH_PY:-python3}}
# bf16 tolerance: relative difference of the step-300 dev loss, bf16 storage
# vs fp32, same seed and batches.  bf16 keeps 8 significant bits (relative
# rounding 2^-9 = 0.2%) in activations and GEMM inputs, while weights,
# gradients, Adam state and all reductions stay fp32; its rounding perturbs
# the trajectory like a change of seed, without a bias.  Measured here on the
# CPU (2026-11-23, input/multi30k.cfg, 300 steps, threads=1): seed 1 dev loss
# 5.7983, seed 2 5.7866, 0.20% apart.  1% is 5 times that spread, and at
# step 300 the loss still falls about 4% per 50 steps (train loss 6.056 at
# step 250, 5.803 at 300), so 1% is about 12 steps of training lost: a bf16
# defect that matters (a wrong rounding, a gradient term lost or doubled)
# costs more, while rounding noise stays well inside it.
BF16_TOL=${BF16_TOL:-1e-2}
BF16_PREC=${ACCEPT_BF16_PRECISION:-bf16}   # tests on the CPU: fp32 (the CPU has no bf16 storage)
MODEL_ARGS=(--config input/multi30k.cfg "data=$DATA")
[ -n "${ACCEPT_MODEL_ARGS:-}" ] && read -r -a MODEL_ARGS <<<"$ACCEPT_MODEL_ARGS"

err() { echo "error: gpu-accept: $*" >&2; }
usage() {
    err "usage: [CALL=N | STAGE=$(echo "$ALL_STAGES" | tr ' ' ,)] tests/gpu/accept.sh OUTDIR | tests/gpu/accept.sh --plan | --pack | --env DIR"
    exit 2
}

# shellcheck source=tests/gpu/accept/env.sh
. "$TOP/tests/gpu/accept/env.sh"
# shellcheck source=tests/gpu/accept/stages.sh
. "$TOP/tests/gpu/accept/stages.sh"
# shellcheck source=tests/gpu/accept/plan.sh
. "$TOP/tests/gpu/accept/plan.sh"

# ------------------------------------------------------------ main

# run_one STAGE OUT: in a child process under the stage's budget; its log
# in $LOGS, its summary OUT/STAGE.md
run_one() {
    local s=$1 out=$2 why rc=0 status budget grace log=$LOGS/$1.log
    budget=$(stage_budget "$s")
    grace=$((budget >= 10 ? 5 : budget / 2))
    CHECKS=$AUX/$s.checks TABLES=$AUX/$s.tables.md
    : >"$CHECKS"; : >"$TABLES"; : >"$log"
    if why=$(no_gpu); then
        err "stage $s: no CUDA GPU visible ($why)"
        echo "- FAIL: no CUDA GPU visible ($why)" >>"$CHECKS"
        echo "error: gpu-accept: stage $s: no CUDA GPU visible ($why)" >>"$log"
        "${LIB[@]}" stage "$out" "$s" FAIL "$AUX" "$log"
        return 1
    fi
    echo "== stage $s ($(date -u +%H:%M:%S), budget ${budget}s)"
    SECONDS=0
    # the budget holds the grace of --kill-after too (SIGTERM, then SIGKILL
    # to the stage's whole process group: its training runs and mpirun)
    ACCEPT_STAGE_BUDGET=$budget timeout --kill-after=$grace $((budget - grace)) \
        bash "$0" --stage-run "$s" >"$log" 2>&1 || rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        echo "- FAIL: stage ran past its budget of ${budget}s" >>"$CHECKS"
    elif [ $rc -ne 0 ]; then
        echo "- FAIL: stage stopped early (exit $rc; see logs.tgz: logs/$s.log)" >>"$CHECKS"
    fi
    echo "- stage time: ${SECONDS}s of a budget of ${budget}s" >>"$CHECKS"
    status=PASS
    grep -q '^- FAIL' "$CHECKS" && status=FAIL
    "${LIB[@]}" stage "$out" "$s" "$status" "$AUX" "$log"
    echo "   $s: $status (${SECONDS}s of ${budget}s): $out/$s.md"
    [ $status = PASS ]
}

pack() {
    local arch=${CUDA_ARCH:-90}
    command -v nvcc >/dev/null || { err "--pack: nvcc not found"; exit 2; }
    # without NCCL unless asked (NCCL_HOME=...): one GPU needs none, and
    # libnccl is too large to carry (bundle_libs.sh leaves it out)
    make -j"$JOBS" CUDA_ARCH="$arch" NCCL_HOME="${NCCL_HOME:-/none}" all "${GPU_BIN[@]}"
    rm -rf build/gpu-libs
    tests/gpu/bundle_libs.sh build/gpu-libs >/dev/null
    # OpenBLAS too (bundle_libs.sh expects it there; the GPU image may lack it)
    ldd "$BIN" | awk '/libopenblas/ {print $3}' | xargs -r -I{} cp -L {} build/gpu-libs/
    # Open MPI's components and launcher: libmpi cannot even start a singleton
    # without them (seen here with the component folder hidden)
    local ompi
    ompi=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
    if [ -d "$ompi" ]; then
        mkdir -p build/gpu-libs/ompi/bin
        cp -r "$ompi" build/gpu-libs/ompi/components
        cp "$(command -v orterun)" "$(command -v orted)" build/gpu-libs/ompi/bin/
        ln -s orterun build/gpu-libs/ompi/bin/mpirun
    fi
    # SentencePiece's command-line tools: translate detokenises with
    # spm_decode, which the GPU image lacks (its python3 has the module only)
    mkdir -p build/gpu-libs/bin
    local t
    for t in spm_decode spm_encode; do
        cp "$(command -v $t)" build/gpu-libs/bin/
        ldd "$(command -v $t)" | awk '/libsentencepiece/ {print $3}' | xargs -r -I{} cp -L {} build/gpu-libs/
    done
    # sacremoses (analysis/bleu.py's Moses tokens, which every Table 3 row's
    # result imports): pure Python, absent from the GPU image, whose python3
    # has its dependencies (regex, click, joblib, tqdm); libs_env puts it on
    # PYTHONPATH
    local moses
    moses=$("$TOP/.venv/bin/python" -c 'import os, sacremoses; print(os.path.dirname(sacremoses.__file__))') ||
        { err "--pack: no sacremoses in .venv (make venv)"; return 1; }
    mkdir -p build/gpu-libs/python
    cp -r "$moses" build/gpu-libs/python/
    find build/gpu-libs/python -name __pycache__ -prune -exec rm -rf {} +
    git rev-parse --short=12 HEAD >build/gpu-libs/COMMIT
    [ -f "$DATA" ] || input/prepare.sh multi30k
    # the scaled Table 3's data (tests/gpu/table3.sh)
    local t3=data/multi30k-v2000.h5
    [ -f "$t3" ] || VOCAB=2000 MAX_LEN=128 input/prepare.sh multi30k "" "$t3"
    tar czf "$PACK" bin/transformer "${GPU_BIN[@]}" build/gpu-libs "$DATA" "$t3"
    du -sh "$PACK"
    echo "carry: [\"${PACK#"$TOP"/}\"] in each device call: make gpu-plan prints them"
}

# stages_of CALL STAGE: the stages to run, one a line: STAGE's if set
# (all: every stage), else call CALL's of the plan
stages_of() {
    local s
    if [ -z "$2" ]; then
        if ! [[ "$1" =~ ^[1-9][0-9]*$ ]] || [ "$1" -gt ${#PLAN_CALLS[@]} ]; then
            err "CALL: no call '$1' (calls 1-${#PLAN_CALLS[@]}; tests/gpu/accept.sh --plan)"; return 2
        fi
        # shellcheck disable=SC2086
        printf '%s\n' ${PLAN_CALLS[$(($1 - 1))]}
        return 0
    fi
    for s in $(echo "$2" | tr ',' ' '); do
        if [ "$s" = all ]; then
            # shellcheck disable=SC2086
            printf '%s\n' $ALL_STAGES
        elif [[ " $ALL_STAGES " == *" $s "* ]]; then
            echo "$s"
        else
            err "STAGE: unknown stage '$s' (stages: $ALL_STAGES, or all)"; return 2
        fi
    done
}

# logs.tgz: the stages' logs and the runs' logs and texts under $WORK
pack_logs() {
    (cd "$WORK" && find . -name '*.log' -o -name '*.txt' -o -name '*.ids' | sort | tar czf "$1/logs.tgz" -T -)
}

if [ "${1:-}" = --stage-run ]; then   # internal: one stage, output to the log
    s=$2
    AUX=$WORK/aux CHECKS=$WORK/aux/$s.checks TABLES=$WORK/aux/$s.tables.md
    # shellcheck disable=SC1091
    . "$TOP/tests/lib.sh"
    # shellcheck disable=SC1091
    . "$TOP/tests/ckpt_lib.sh"
    set -euo pipefail
    BIN=${ACCEPT_BIN:-$TOP/bin/transformer}
    libs_env
    "stage_$s"
    exit 0
fi
[ "${1:-}" = --pack ] && { pack; exit 0; }
if [ "${1:-}" = --plan ]; then
    plan_check || exit 1
    plan_print
    exit 0
fi
if [ "${1:-}" = --env ]; then   # only the header lines, into ${2}/env.md
    AUX=${2:?--env OUTDIR}
    mkdir -p "$AUX"
    write_env
    cat "$AUX/env.md"
    exit 0
fi
if [ $# -ne 1 ] || [ -z "$1" ] || [ "${1#-}" != "$1" ]; then usage; fi
OUT=$1
picked=$(stages_of "${CALL:-1}" "${STAGE:-}") || exit 2
mapfile -t stages <<<"$picked"
[ -n "${stages[0]}" ] || { err "STAGE: no stage named"; exit 2; }
[ -n "${STAGE:-}" ] || plan_check || exit 2
mkdir -p "$OUT" "$WORK/aux" "$WORK/logs"
OUT=$(cd "$OUT" && pwd)
AUX=$WORK/aux LOGS=$WORK/logs
export ACCEPT_WORK=$WORK
write_env
if [ -z "${STAGE:-}" ]; then
    echo "- call: ${CALL:-1} of ${#PLAN_CALLS[@]} (${stages[*]}; up to $(call_budget "${CALL:-1}") s)" >>"$AUX/env.md"
fi
rc=0
for s in "${stages[@]}"; do
    run_one "$s" "$OUT" || rc=1
done
"${LIB[@]}" index "$OUT" "$AUX" "${stages[@]}" || true
pack_logs "$OUT" || err "logs.tgz not written"
cat "$OUT/summary.md"
exit $rc
