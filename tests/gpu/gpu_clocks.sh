#!/usr/bin/env bash
# Clocks and power through a GPU run (issue 32): nvidia-smi's query loop
# every 200 ms in the background while COMMAND runs, stopped after it.
#   tests/gpu/gpu_clocks.sh OUT.csv COMMAND [ARGS...]
# OUT.csv: nvidia-smi's CSV (SM and memory clocks in MHz, power in W,
# temperature in C, utilisation in %); then a summary line on stderr:
# samples, SM clock median and minimum, power median and maximum,
# temperature maximum, so that a slow run shows whether the GPU throttled.
# Exits with COMMAND's status.  Without nvidia-smi it says so in one line
# and runs COMMAND alone.
set -u
[ $# -ge 2 ] || { echo "error: usage: $0 OUT.csv COMMAND [ARGS...]" >&2; exit 2; }
out=$1; shift
QUERY=clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu
if ! command -v nvidia-smi > /dev/null; then
    echo "gpu_clocks: no nvidia-smi on PATH: clocks and power not logged" >&2
    "$@"
    exit
fi
nvidia-smi --query-gpu=$QUERY --format=csv -lms 200 > "$out" 2> "$out.err" &
logger=$!
"$@"
rc=$?
kill "$logger" 2> /dev/null
wait "$logger" 2> /dev/null
# the summary: numbers only (nvidia-smi writes "1980 MHz", "690.12 W")
awk -F, 'NR > 1 && NF >= 5 {
        for (i = 1; i <= 5; i++) { v[i] = $i; gsub(/[^0-9.]/, "", v[i]) }
        if (v[1] == "") next
        n++; sm[n] = v[1] + 0; pw[n] = v[3] + 0; if (v[4] + 0 > tmax) tmax = v[4] + 0
    }
    function med(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
        if (!n) { print "gpu_clocks: no samples"; exit }
        smin = sm[1]; pmax = pw[1]
        for (i = 1; i <= n; i++) { if (sm[i] < smin) smin = sm[i]; if (pw[i] > pmax) pmax = pw[i] }
        printf "gpu_clocks: %d samples: SM clock median %g MHz, min %g; power median %g W, max %g; temperature max %g C\n",
               n, med(sm, n), smin, med(pw, n), pmax, tmax
    }' "$out" >&2
[ -s "$out.err" ] || rm -f "$out.err"
exit $rc
