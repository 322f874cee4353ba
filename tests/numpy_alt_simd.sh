#!/usr/bin/env bash
# Prints a value of NPY_DISABLE_CPU_FEATURES under which the venv's numpy
# runs one SIMD level below the one it picks on this CPU, and says on
# stderr which levels it leaves on: numpy dispatches its loops (sums,
# reductions) by CPU, so the last bits of a float result differ between
# CPUs, as they do between OpenBLAS kernels (tests/blas_alt_kernel.sh).  The
# analysis tests run again under it (tests/check.sh), so a verdict that
# held only on one SIMD level fails here and not on a user's machine.
# Prints nothing and exits 1 where numpy dispatches to nothing above its
# baseline.
set -euo pipefail
py=${PYTHON:-$(dirname "$0")/../.venv/bin/python}
"$py" - <<'PY'
import sys
from numpy._core._multiarray_umath import __cpu_dispatch__ as dispatch, __cpu_features__ as has
on = [f for f in dispatch if has.get(f)]          # dispatch is ordered from the lowest level up
levels = [f for f in on if f.startswith("X86_V")] or on
if not levels:
    sys.exit(1)
# the top level and everything after it in the dispatch order: numpy then
# runs the level below (the baseline where only one is on)
off = dispatch[dispatch.index(levels[-1]):]
print(" ".join(off))
print(f"numpy_alt_simd: on here {' '.join(on)}; with these off: {' '.join(f for f in on if f not in off) or 'baseline'}",
      file=sys.stderr)
PY
