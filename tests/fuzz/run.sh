#!/usr/bin/env bash
# tests/fuzz/run.sh [SECONDS] [TARGET ...]: run each fuzz target (bin/fuzz/,
# `make fuzz` builds them) for SECONDS (default 60) from its committed seeds
# (tests/fuzz/seeds/TARGET) and a working corpus in build/fuzz/corpus/TARGET
# (kept between runs), after replaying the committed regression inputs
# (tests/fuzz/regressions/TARGET).  Prints one line per target: executions,
# coverage (libFuzzer's edge count), new crash/timeout/OOM inputs in our
# code and in libhdf5, and those that do not fail again when replayed
# (each with its report: build/fuzz/artifacts/TARGET/).  Exit 1 if any
# target found one in our code.
set -u
cd "$(dirname "$0")/../.." || exit 2
SECS=${1:-60}; shift || true
TARGETS=${*:-config sentences translate_input dataset checkpoint}
# leaks: off (Open MPI and HDF5 keep allocations to exit, which would bury
# ours); ASan and UBSan reports, crashes, hangs and OOMs count
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self
# classify BIN INPUT DIR...: replay the input alone, and if it then runs
# clean, after each file of the DIRs (seeds, corpus) in turn: some libhdf5
# crashes need the library state an earlier file left (the harness turns
# our own leftovers, open HDF5 handles, into findings at the input that
# leaves them, and our readers keep no state between calls: fuzz_common.h).
# "unrepro" if it never fails again (a timeout on a machine busier during
# the run than now, or a crash that needed a sequence of inputs).  Else "hdf5" if the report's first
# frame outside the sanitizer's interceptors and libc is in libhdf5 (a
# library bug that a malformed file triggers: docs/readers.md), else "ours".
classify() {
    local bin=$1 input=$2
    shift 2
    replay() { "$bin" -timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=2048 "$@" > "$input.report" 2>&1; }
    if replay "$input"; then
        local f pairs=()
        for f in $(find "$@" -maxdepth 1 -type f | head -n 200); do pairs+=("$f" "$input"); done
        # (no files: libFuzzer given no input would start fuzzing)
        { [ ${#pairs[@]} -eq 0 ] || replay "${pairs[@]}"; } && { echo unrepro; return; }
    fi
    awk '/^ *#[0-9]+ / && !/__interceptor_|libc\.so|sysdeps\/|__sanitizer|__asan|libclang_rt|compiler-rt|fuzzer::| in (malloc|calloc|realloc|free) / { print; exit }' "$input.report" |
        grep -q 'libhdf5' && echo hdf5 || echo ours
}
bad=0
printf '%-16s %12s %8s %8s %8s %8s %9s  %s\n' target executions exec/s coverage ours in-hdf5 unrepro artifacts
for t in $TARGETS; do
    bin=bin/fuzz/fuzz_$t
    [ -x "$bin" ] || { echo "error: $bin: not built (make fuzz)" >&2; exit 2; }
    corpus=build/fuzz/corpus/$t art=build/fuzz/artifacts/$t
    mkdir -p "$corpus" "$art"
    ls "$art" > "build/fuzz/$t.before"
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
    ours=0 lib=0 unrepro=0
    # the findings of this run: files that were not there before it
    for a in $(ls "$art" | grep -v '\.report$' | comm -13 "build/fuzz/$t.before" -); do
        case $(classify "$bin" "$art/$a" "tests/fuzz/seeds/$t" "$corpus") in
            hdf5) lib=$((lib + 1)) ;;
            unrepro) unrepro=$((unrepro + 1)) ;;
            *) ours=$((ours + 1)); echo "$t: ours: $art/$a (report: $art/$a.report)" >&2 ;;
        esac
    done
    [ "$ours" -gt 0 ] && bad=1
    printf '%-16s %12s %8s %8s %8s %8s %9s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$ours" "$lib" "$unrepro" "$art"
done
exit $bad
