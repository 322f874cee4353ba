#!/usr/bin/env bash
# tests/fuzz/run.sh [SECONDS] [TARGET ...]: run each fuzz target (bin/fuzz/,
# `make fuzz` builds them) for SECONDS (default 60) from its committed seeds
# (tests/fuzz/seeds/TARGET) and a working corpus in build/fuzz/corpus/TARGET
# (kept between runs), after replaying the committed regression inputs
# (tests/fuzz/regressions/TARGET).  Prints one line per target: executions,
# coverage (libFuzzer's edge count), new crash/timeout/OOM inputs in our
# code and in libhdf5 (each with its report: build/fuzz/artifacts/TARGET/).
# Exit 1 if any target found one in our code.
set -u
cd "$(dirname "$0")/../.." || exit 2
SECS=${1:-60}; shift || true
TARGETS=${*:-config sentences translate_input dataset checkpoint}
# leaks: off (Open MPI and HDF5 keep allocations to exit, which would bury
# ours); ASan and UBSan reports, crashes, hangs and OOMs count
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self
# classify BIN INPUT: "hdf5" if the report's first frame outside the
# sanitizer's interceptors and libc is in libhdf5 (a library bug that a
# malformed file triggers: docs/readers.md), else "ours"
classify() {
    "$1" -timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=2048 "$2" > "$2.report" 2>&1
    awk '/^ *#[0-9]+ / && !/__interceptor_|libc\.so|sysdeps\/|__sanitizer|__asan|libclang_rt|compiler-rt|fuzzer::| in (malloc|calloc|realloc|free) / { print; exit }' "$2.report" |
        grep -q 'libhdf5' && echo hdf5 || echo ours
}
bad=0
printf '%-16s %12s %8s %8s %8s %8s  %s\n' target executions exec/s coverage ours in-hdf5 artifacts
for t in $TARGETS; do
    bin=bin/fuzz/fuzz_$t
    [ -x "$bin" ] || { echo "error: $bin: not built (make fuzz)" >&2; exit 2; }
    corpus=build/fuzz/corpus/$t art=build/fuzz/artifacts/$t
    mkdir -p "$corpus" "$art"
    before=$(ls "$art" | wc -l)
    reg=tests/fuzz/regressions/$t
    if [ -d "$reg" ] && [ -n "$(ls -A "$reg")" ]; then
        "$bin" -close_fd_mask=3 "$reg"/* > "build/fuzz/$t.replay.log" 2>&1 ||
            { echo "error: $t: a committed regression input fails again (build/fuzz/$t.replay.log)" >&2; bad=1; }
    fi
    # -fork: a crash ends one child, not the run; every finding is kept
    "$bin" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -max_total_time="$SECS" -timeout=10 \
        -rss_limit_mb=2560 -malloc_limit_mb=2048 -close_fd_mask=3 -print_final_stats=1 \
        -artifact_prefix="$art/" "$corpus" "tests/fuzz/seeds/$t" > "build/fuzz/$t.log" 2>&1
    execs=$(grep -o '^#[0-9]*' "build/fuzz/$t.log" | tail -n 1 | tr -d '#')
    rate=$(grep -o 'exec/s:* [0-9]*' "build/fuzz/$t.log" | tail -n 1 | awk '{ print $NF }')
    cov=$(grep -o 'cov: [0-9]*' "build/fuzz/$t.log" | tail -n 1 | cut -d' ' -f2)
    ours=0 lib=0
    for a in $(ls "$art" | tail -n +$((before + 1))); do
        if [ "$(classify "$bin" "$art/$a")" = hdf5 ]; then lib=$((lib + 1)); else ours=$((ours + 1)); fi
    done
    [ "$ours" -gt 0 ] && bad=1
    printf '%-16s %12s %8s %8s %8s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$ours" "$lib" "$art"
done
exit $bad
