#!/usr/bin/env bash
# The GPU measurement kit (issue 32, docs/gpu-accept.md "The kit"), on the
# CUDA emulator (its times are the emulator's, not a GPU's: the plumbing):
# - per-call timing (gpu_model --run-steps N --time-calls CSV): the CSV has
#   one row per call of the dry-run trace of the same config, in order,
#   with the same op, call, kind and shape; timed calls have a device time,
#   syncs none; the real step's trace is the dry run's byte for byte; the
#   parameters after the steps are bitwise those of the same steps without
#   timing; gpu_model --fit joins the CSV; all under the strict emulator
#   (rule ELAPSED: the events are read after the stream's synchronisation).
#   The join with the dry run holds where cuBLASLt takes every fused plan
#   (the dry run assumes it does); rule LT_HEURISTIC refuses a seeded
#   quarter of them in a real run, as cuBLASLt may on a GPU, so that run's
#   own trace (--write-trace beside --time-calls) is what --fit joins, and
#   the test checks both.
set -u
. "$(dirname "$0")/lib.sh"
M=$TOP/bin/tests/gpu_model
[ -x "$M" ] || skip "bin/tests/gpu_model not built (no CUDA headers for the emulator)"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
cd "$TOP" || fail "cd $TOP"

# a small model, bf16 and fp32 storage (fp32 takes the plain cuBLAS path)
for prec in bf16 fp32; do
    SMALL="--model base --batch 4 --len 9 n_layers=1 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16 vocab_size=100 precision=$prec"
    # shellcheck disable=SC2086
    {
        $M $SMALL --run-steps 2 --time-calls $W/t_lt.csv --write-trace $W/real_lt.csv > /dev/null ||
            fail "$prec: --time-calls with cuBLASLt refusals"
        $M $SMALL --trace $W/real_lt.csv --fit $W/t_lt.csv > $W/fit_lt.txt ||
            fail "$prec: --fit on the timed run's own trace: $(tail -1 $W/fit_lt.txt)"
        export CUDA_EMU_STRICT_LT_HEURISTIC=0
        $M $SMALL --run-steps 3 --time-calls $W/t.csv --write-trace $W/real.csv > $W/timed.txt ||
            fail "$prec: --time-calls: $(tail -2 $W/timed.txt)"
        $M $SMALL --run-steps 3 > $W/plain.txt || fail "$prec: --run-steps: $(tail -2 $W/plain.txt)"
        $M $SMALL --write-trace $W/dry.csv > /dev/null || fail "$prec: --write-trace"
        $M $SMALL --trace $W/dry.csv --fit $W/t.csv > $W/fit.txt || fail "$prec: --fit on the timing CSV: $(tail -1 $W/fit.txt)"
        unset CUDA_EMU_STRICT_LT_HEURISTIC
    }
    h1=$(grep -o 'fnv1a [0-9a-f]*' $W/timed.txt) h0=$(grep -o 'fnv1a [0-9a-f]*' $W/plain.txt)
    [ -n "$h0" ] && [ "$h1" = "$h0" ] || fail "$prec: parameters after 3 steps: timed $h1, untimed $h0"
    ok "$prec: 3 steps timed per call leave the parameters bitwise as untimed ($h0)"
    cmp -s $W/real.csv $W/dry.csv || fail "$prec: the timed real step's trace differs from the dry run's"
    python3 - $W/t.csv $W/dry.csv <<'PY' > $W/join.txt || fail "$prec: the timing CSV does not join the trace: $(cat $W/join.txt)"
import csv, sys
t = list(csv.DictReader(open(sys.argv[1])))
tr = list(csv.DictReader(open(sys.argv[2])))
assert len(t) == len(tr) > 0, (len(t), len(tr))
timed = 0
for i, (a, b) in enumerate(zip(t, tr)):
    assert int(a["index"]) == i, (i, a)
    for key in ("op", "call", "kind", "m", "n", "k", "batch"):
        assert a[key] == b[key], (i, key, a[key], b[key])
    dev, host = float(a["measured_us"]), float(a["host_us"])
    assert host >= 0, (i, a)
    if a["kind"] in ("sync", "comm"):
        assert dev == 0, (i, a)
    else:
        assert dev > 0, ("a timed call without a device time", i, a)
        timed += 1
print("%d rows = the trace's %d, same op/call/kind/shape in order; %d timed calls with device time, syncs 0"
      % (len(t), len(tr), timed))
PY
    ok "$prec: $(cat $W/join.txt); the real step's trace = the dry run's; --fit joins it, and the run's own trace under cuBLASLt refusals"
done
