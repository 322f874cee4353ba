#!/usr/bin/env bash
# The test command of the README, and what CI runs: install what is missing,
# build, run every test (make test), rerun the tests that train a model under
# a second OpenBLAS kernel and the analysis tests under a second numpy SIMD
# level, then the tests on a real Slurm.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_SLURM=1 bash tests/install-deps.sh
make -j2
make test
make test-sanitizers
# A trained model's exact figures depend on the BLAS kernel's rounding, and
# users' CPUs pick other kernels than this one: the tests that train must
# assert properties that hold under any of them (tests/blas_alt_kernel.sh).
# (the tests whose verdict holds a trained model to a margin; those that
# compare two computations made here, resume or 1 vs N ranks, run once)
TRAINING_TESTS="test_decode test_synthetic test_data_learn test_translate test_ckpt_errors test_fp16_learn test_table3_row"
if alt=$(bash tests/blas_alt_kernel.sh); then
    echo "check: the training tests again with OPENBLAS_CORETYPE=$alt (default here: $(bin/tests/blas_core))"
    OPENBLAS_CORETYPE=$alt TESTS="$TRAINING_TESTS" make test
else
    echo "check: no second OpenBLAS kernel runs on this CPU; training tests ran once"
fi
# numpy picks its SIMD loops by CPU, so a float sum's last bits differ
# between machines as a BLAS kernel's do: the analysis tests run again one
# SIMD level down (tests/numpy_alt_simd.sh)
if npy=$(bash tests/numpy_alt_simd.sh); then
    echo "check: the analysis tests again with NPY_DISABLE_CPU_FEATURES='$npy'"
    NPY_DISABLE_CPU_FEATURES=$npy TESTS="pytest-analysis" make test
else
    echo "check: numpy runs no SIMD level above its baseline on this CPU; analysis tests ran once"
fi
if grep -q '^test-slurm:' Makefile; then make test-slurm; fi
# the fuzz targets, briefly: a reader change that crashes on the seeds or a
# committed regression input fails here (docs/readers.md)
make -j2 fuzz FUZZ_SECONDS=15
