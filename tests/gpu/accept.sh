#!/usr/bin/env bash
# make gpu-accept (issue 18): one command that checks and measures the GPU
# path in a short GPU window.  docs/gpu-accept.md says what each stage checks.
#
#   tests/gpu/accept.sh OUTDIR        run the stages named by STAGE (default: all)
#   STAGE=build,test tests/gpu/accept.sh OUTDIR     (comma- or space-separated)
#   tests/gpu/accept.sh --env DIR     only the header lines (GPU, driver, ...), to DIR/env.md
#   tests/gpu/accept.sh --pack        on a machine without a GPU: build for the
#                                     device (CUDA_ARCH, default 90), bundle the
#                                     MPI/HDF5/OpenBLAS libraries (and Open MPI's
#                                     components and mpirun), prepare
#                                     data/multi30k.h5, all into build/gpu-pack.tgz
#                                     (unpacked by the first stage run there)
#
# Stages, each under ACCEPT_STAGE_LIMIT seconds (default 470, < 8 min):
#   build   build for the GPU's compute capability (nvidia-smi; CUDA_ARCH overrides)
#   test    make gpu-test (ops and whole step vs CPU, fp32/tf32/bf16), then the
#           small kernel test (CUDA_TEST_SUBSET=sync) under compute-sanitizer
#           memcheck, racecheck and synccheck where compute-sanitizer exists
#   train   300 steps of input/multi30k.cfg on the GPU: fp32 = device=cpu to the
#           printed digits over the first 10 steps; bf16 dev loss within
#           BF16_TOL of fp32's; SIGUSR1 at step 150 + resume = uninterrupted
#           run, bitwise (parameters and Adam moments)
#   mpi     2 ranks on the one GPU (allreduce=mpi, TRANSFORMER_SHARE_GPU=1) =
#           1 rank with update_freq=2 (losses and parameters)
#   bench   make gpu-bench: base and big, bf16 and fp32, vs PyTorch bf16 autocast
#           eager and torch.compile; tokens/s, MFU, peak device memory
#   decode  beam 4 on Multi30k test2016 from the train stage's checkpoint, ours
#           vs tests/bench/torch_decode.py on the same GPU: sentences/s, same outputs
# Each stage writes OUTDIR/STAGE.md (GPU, driver, CUDA, NCCL, commit first,
# then its checks and figures) and OUTDIR/STAGE.log (raw); OUTDIR/summary.md
# lists the stages of this invocation.  Exit 0 only if every stage passed;
# without a GPU every stage fails with one line 'error: gpu-accept: stage S:
# no CUDA GPU visible (...)'.
#
# Through the device tool (10 min per command, at most 8 files back from
# $OUT, the working tree travels but not ../shared or ignored files):
#   here, once:   tests/gpu/accept.sh --pack        (writes build/gpu-pack.tgz, ~25 MB)
#   run 1: command 'STAGE=build,test tests/gpu/accept.sh $OUT', carry ["build/gpu-pack.tgz"]
#   run 2: command 'STAGE=train,mpi,decode tests/gpu/accept.sh $OUT', same carry
#   run 3: command 'STAGE=bench tests/gpu/accept.sh $OUT', same carry
# (about 5 + 8 + 7 minutes, estimated, not yet measured; the machine stays
# warm between calls, so the decode stage finds the train stage's checkpoint
# in build/gpu-accept, and trains one if not).  Each call's three stages
# give 7 files, inside the limit of 8.  Where the GPU
# machine has mpicc and HDF5 the build stage rebuilds there; otherwise it
# checks that the carried binaries hold code for the GPU's architecture.
#
# Environment: STAGE, ACCEPT_WORK (scratch, default build/gpu-accept), DATA
# (default data/multi30k.h5), TRAIN_STEPS (300), BF16_TOL (see below),
# ACCEPT_NVIDIA_SMI (the nvidia-smi to ask; tests point it elsewhere),
# ACCEPT_DEVICE=cpu (tests only: runs train/mpi/decode's logic on the CPU),
# ACCEPT_NO_BUILD=1 (use the packed binaries where the machine could build).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
cd "$TOP"
ALL_STAGES="build test train mpi bench decode"
LIB=("${ACCEPT_PY:-python3}" "$TOP/tests/gpu/accept_lib.py")   # standard library only
NVSMI=${ACCEPT_NVIDIA_SMI:-nvidia-smi}
LIMIT=${ACCEPT_STAGE_LIMIT:-470}
WORK=${ACCEPT_WORK:-$TOP/build/gpu-accept}
DATA=${DATA:-data/multi30k.h5}
PACK=$TOP/build/gpu-pack.tgz
BIN=${BIN:-$TOP/bin/transformer}
DEVICE=${ACCEPT_DEVICE:-cuda}
TRAIN_STEPS=${TRAIN_STEPS:-300}
STOP_STEP=${STOP_STEP:-$((TRAIN_STEPS / 2))}
DIGIT_STEPS=${DIGIT_STEPS:-10}
MPI_STEPS=${MPI_STEPS:-20}
JOBS=${JOBS:-$(nproc)}
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
    err "usage: [STAGE=$(echo "$ALL_STAGES" | tr ' ' ,)] tests/gpu/accept.sh OUTDIR | tests/gpu/accept.sh --pack"
    exit 2
}

# shellcheck source=tests/gpu/accept/env.sh
. "$TOP/tests/gpu/accept/env.sh"
# shellcheck source=tests/gpu/accept/stages.sh
. "$TOP/tests/gpu/accept/stages.sh"

# ------------------------------------------------------------ main

# run_one STAGE OUT: in a child process under the stage's time limit
run_one() {
    local s=$1 out=$2 why rc=0 status
    CHECKS=$AUX/$s.checks TABLES=$AUX/$s.tables.md
    : >"$CHECKS"; : >"$TABLES"; : >"$out/$s.log"
    if why=$(no_gpu); then
        err "stage $s: no CUDA GPU visible ($why)"
        echo "- FAIL: no CUDA GPU visible ($why)" >>"$CHECKS"
        echo "error: gpu-accept: stage $s: no CUDA GPU visible ($why)" >>"$out/$s.log"
        "${LIB[@]}" stage "$out" "$s" FAIL "$AUX"
        return 1
    fi
    echo "== stage $s ($(date -u +%H:%M:%S), limit ${LIMIT}s)"
    SECONDS=0
    timeout --kill-after=10 "$LIMIT" "$0" --stage-run "$s" "$out" >"$out/$s.log" 2>&1 || rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        echo "- FAIL: stage ran past its limit of ${LIMIT}s" >>"$CHECKS"
    elif [ $rc -ne 0 ]; then
        echo "- FAIL: stage stopped early (exit $rc; see $s.log)" >>"$CHECKS"
    fi
    echo "- stage time: ${SECONDS}s" >>"$CHECKS"
    status=PASS
    grep -q '^- FAIL' "$CHECKS" && status=FAIL
    "${LIB[@]}" stage "$out" "$s" "$status" "$AUX"
    echo "   $s: $status (${SECONDS}s): $out/$s.md"
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
    git rev-parse --short=12 HEAD >build/gpu-libs/COMMIT
    [ -f "$DATA" ] || input/prepare.sh multi30k
    tar czf "$PACK" bin/transformer "${GPU_BIN[@]}" build/gpu-libs "$DATA"
    du -sh "$PACK"
    echo "carry: [\"${PACK#"$TOP"/}\"]; see the header of tests/gpu/accept.sh"
}

# the binaries, libraries and data of --pack, carried as one file: unpacked
# once on the GPU machine (build/gpu-libs is kept while the machine is warm)
unpack() {
    can_build && return 0
    [ -f "$PACK" ] && [ ! -f build/gpu-libs/COMMIT ] || return 0
    echo "unpacking $PACK ($(cd "$TOP" && tar tzf "$PACK" | wc -l) files, commit $(tar xzOf "$PACK" build/gpu-libs/COMMIT))"
    tar xzf "$PACK" -C "$TOP"
}

if [ "${1:-}" = --stage-run ]; then   # internal: one stage, output to the log
    s=$2 out=$3
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
if [ "${1:-}" = --env ]; then   # only the header lines, into ${2}/env.md
    AUX=${2:?--env OUTDIR}
    mkdir -p "$AUX"
    write_env
    cat "$AUX/env.md"
    exit 0
fi
if [ $# -ne 1 ] || [ -z "$1" ] || [ "${1#-}" != "$1" ]; then usage; fi
OUT=$1
stages=()
for s in $(echo "${STAGE:-all}" | tr ',' ' '); do
    if [ "$s" = all ]; then
        read -r -a more <<<"$ALL_STAGES"; stages+=("${more[@]}")
    elif [[ " $ALL_STAGES " == *" $s "* ]]; then
        stages+=("$s")
    else
        err "STAGE: unknown stage '$s' (stages: $ALL_STAGES, or all)"; exit 2
    fi
done
[ ${#stages[@]} -gt 0 ] || { err "STAGE: no stage named"; exit 2; }
unpack
mkdir -p "$OUT" "$WORK/aux"
OUT=$(cd "$OUT" && pwd)
AUX=$WORK/aux
export ACCEPT_WORK=$WORK
write_env
rc=0
for s in "${stages[@]}"; do
    run_one "$s" "$OUT" || rc=1
done
"${LIB[@]}" index "$OUT" "$AUX" "${stages[@]}" || true
cat "$OUT/summary.md"
exit $rc
