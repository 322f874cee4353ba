#!/usr/bin/env bash
# Prints an OpenBLAS kernel (an OPENBLAS_CORETYPE value) that runs on this
# CPU and rounds differently from the one the environment gives: tests whose
# verdict depended on one kernel's rounding then fail here, in CI, and not on
# a user's machine with another CPU.  Haswell and Zen share their sgemm
# kernels; SkylakeX (AVX-512) and Sandybridge (AVX without FMA) differ from
# both.  Prints nothing and exits 1 where no second kernel runs.
set -u
core=${BLAS_CORE:-$(dirname "$0")/../bin/tests/blas_core}
default=$("$core" 2>/dev/null) || { echo "blas_alt_kernel: $core failed" >&2; exit 1; }
case $default in
    SkylakeX|Cooperlake|SapphireRapids) candidates="Haswell Sandybridge" ;;
    *) candidates="SkylakeX Sandybridge Haswell" ;;
esac
for k in $candidates; do
    [ "$k" = "$default" ] && continue
    got=$(OPENBLAS_CORETYPE=$k "$core" 2>/dev/null) && [ "$got" = "$k" ] && { echo "$k"; exit 0; }
done
exit 1
