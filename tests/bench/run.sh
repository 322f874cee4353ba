#!/usr/bin/env bash
# make bench: runs every tests/bench/bench_*.sh in turn; each prints its
# figures (ratios measured side by side in the same run) and the command.
# BENCH=pattern runs only the matching ones.
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
rc=0
for b in tests/bench/bench_*.sh; do
    [ -f "$b" ] || continue
    name=$(basename "$b" .sh)
    if [ -n "${BENCH:-}" ] && [[ "$name" != *$BENCH* ]]; then continue; fi
    echo "=== $name"
    bash "$b" || { echo "bench $name failed"; rc=1; }
done
exit $rc
