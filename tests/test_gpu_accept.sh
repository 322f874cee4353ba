#!/usr/bin/env bash
# make gpu-accept without a GPU (tests/gpu/accept.sh, issue 18): every stage
# fails with one clear line; stage selection and arguments; the header lines
# (with a stub nvidia-smi); the comparisons of tests/gpu/accept_lib.py on logs
# of device=cpu runs, both ways; and the train stage's whole logic (digits,
# tolerance, SIGUSR1 + resume bitwise, the Markdown summary) run on the CPU.
# (A && B || fail: fail when either fails, as meant)
# shellcheck disable=SC1091,SC2015
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$TOP"
W=$(mktemp -d /tmp/test_gpu_accept.XXXXXX)
trap 'rm -rf "$W"' EXIT
A=tests/gpu/accept.sh
# any python3 will do (standard library only); the system one starts fastest
ACCEPT_PY=python3
[ -x /usr/bin/python3 ] && ACCEPT_PY=/usr/bin/python3
export ACCEPT_PY
LIB=("$ACCEPT_PY" tests/gpu/accept_lib.py)
export ACCEPT_WORK=$W/work

# --- no GPU: one line per stage, exit 1, a FAIL summary per stage
export ACCEPT_NVIDIA_SMI=$W/no/nvidia-smi
for s in build test train mpi bench decode; do
    rc=0
    STAGE=$s $A "$W/o1" >"$W/out" 2>"$W/err" || rc=$?
    [ $rc -eq 1 ] || fail "STAGE=$s without a GPU exited $rc, expected 1"
    [ "$(cat "$W/err")" = "error: gpu-accept: stage $s: no CUDA GPU visible (nvidia-smi not found)" ] \
        || fail "STAGE=$s without a GPU: stderr is not the one line expected: $(cat "$W/err")"
    head -1 "$W/o1/$s.md" | grep -qx "# gpu-accept stage $s: FAIL" || fail "$s.md: $(head -1 "$W/o1/$s.md")"
    grep -qx -- "- GPU: none (nvidia-smi not found)" "$W/o1/$s.md" || fail "$s.md lacks the GPU line"
    grep -q -- "- FAIL: no CUDA GPU visible" "$W/o1/$s.md" || fail "$s.md lacks the failed check"
    [ -s "$W/o1/$s.log" ] || fail "no raw log $s.log"
done
ok "each stage without a GPU: exit 1, 'error: gpu-accept: stage S: no CUDA GPU visible (nvidia-smi not found)'"
# all stages: six lines, in order; summary.md lists exactly these
rc=0
$A "$W/o2" >"$W/out" 2>"$W/err" || rc=$?
[ $rc -eq 1 ] || fail "all stages without a GPU exited $rc"
[ "$(sed -E 's/.*stage ([a-z]+):.*/\1/' "$W/err" | tr '\n' ' ')" = "build test train mpi bench decode " ] \
    || fail "all stages: stderr $(cat "$W/err")"
[ "$(grep -c '| FAIL |' "$W/o2/summary.md")" -eq 6 ] || fail "summary.md: $(cat "$W/o2/summary.md")"
# a stub nvidia-smi that fails, and one that lists no GPU
mkdir -p "$W/bad" "$W/none" "$W/gpu"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it couldn'"'"'t communicate with the NVIDIA driver"; exit 9\n' >"$W/bad/nvidia-smi"
printf '#!/bin/sh\necho "No devices were found"\n' >"$W/none/nvidia-smi"
chmod +x "$W/bad/nvidia-smi" "$W/none/nvidia-smi"
rc=0; ACCEPT_NVIDIA_SMI=$W/bad/nvidia-smi STAGE=train $A "$W/o3" 2>"$W/err" >/dev/null || rc=$?
[ $rc -eq 1 ] && grep -qx "error: gpu-accept: stage train: no CUDA GPU visible (nvidia-smi -L failed: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver)" "$W/err" \
    || fail "failing nvidia-smi: exit $rc, $(cat "$W/err")"
rc=0; ACCEPT_NVIDIA_SMI=$W/none/nvidia-smi STAGE=mpi $A "$W/o3" 2>"$W/err" >/dev/null || rc=$?
[ $rc -eq 1 ] && grep -qx "error: gpu-accept: stage mpi: no CUDA GPU visible (nvidia-smi lists no GPU)" "$W/err" \
    || fail "nvidia-smi without GPUs: exit $rc, $(cat "$W/err")"
ok "a failing nvidia-smi and one listing no GPU: one line each, exit 1"

# --- arguments and stage selection
exit2() {  # PATTERN CMD...: exit 2 and one line of stderr matching PATTERN
    local pat=$1 rc=0
    shift
    "$@" >/dev/null 2>"$W/err" || rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l <"$W/err")" -eq 1 ] && grep -q -- "$pat" "$W/err" \
        || fail "'$*' exited $rc (expected 2), stderr: $(cat "$W/err")"
}
exit2 "^error: gpu-accept: STAGE: unknown stage 'bogus'" env STAGE=train,bogus $A "$W/o4"
exit2 "^error: gpu-accept: usage:" $A
exit2 "^error: gpu-accept: usage:" $A "$W/o4" extra
exit2 "^error: gpu-accept: usage:" $A --bogus
[ ! -e "$W/o4" ] || fail "a refused invocation created its output directory"
rc=0; STAGE="build, decode" $A "$W/o5" >/dev/null 2>"$W/err" || rc=$?
[ "$(grep -c 'no CUDA GPU' "$W/err")" -eq 2 ] && [ -f "$W/o5/build.md" ] && [ -f "$W/o5/decode.md" ] && [ ! -e "$W/o5/train.md" ] \
    || fail "STAGE='build, decode' ran other stages: $(ls "$W/o5")"
ok "STAGE selects stages (comma or space separated); unknown stage and bad arguments: exit 2"

# --- the header lines, from a stub nvidia-smi that answers like an H100's
cat >"$W/gpu/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
    -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)" ;;
    *name*) echo "NVIDIA H100 80GB HBM3" ;;
    *memory.total*) echo "81559 MiB" ;;
    *compute_cap*) echo "9.0" ;;
    *driver_version*) echo "580.159.04" ;;
    "") echo "| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0     |" ;;
esac
EOF
chmod +x "$W/gpu/nvidia-smi"
ACCEPT_NVIDIA_SMI=$W/gpu/nvidia-smi $A --env "$W/env" >/dev/null
h=$W/env/env.md
grep -qx -- "- GPU: NVIDIA H100 80GB HBM3, 81559 MiB, compute capability 9.0, 1 visible" "$h" || fail "GPU line: $(cat "$h")"
grep -qx -- "- driver: 580.159.04" "$h" || fail "driver line: $(cat "$h")"
grep -q -- "^- CUDA: nvcc .*; driver supports CUDA 13.0$" "$h" || fail "CUDA line: $(cat "$h")"
grep -q -- "^- NCCL: " "$h" || fail "no NCCL line"
c=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
grep -q -- "^- commit: $c" "$h" || fail "commit line: $(grep commit "$h")"
[ "$(head -4 "$h" | cut -d: -f1 | tr '\n' ' ')" = "- GPU - driver - CUDA - NCCL " ] || fail "header order: $(cat "$h")"
ok "header: GPU, driver, CUDA, NCCL, commit ($(head -1 "$h"))"

# --- accept_lib.py on logs of device=cpu runs
T="train_steps=8 log_steps=1 threads=1 max_tokens=256 d_model=32 d_ff=64 n_layers=2 n_heads=2 d_k=16 d_v=16 synth_train=500 synth_dev=20"
# shellcheck disable=SC2086
{ "$BIN" train $T device=cpu >"$W/a.log" &
  "$BIN" train $T device=cpu >"$W/b.log" &
  "$BIN" train $T device=cpu seed=2 --dump-params "$W/p2.bin" >"$W/c.log" &
  "$BIN" train $T device=cpu train_steps=0 --dump-params "$W/p0.bin" >/dev/null &
  "$BIN" train $T device=cpu --dump-params "$W/p1.bin" >/dev/null & wait; } || fail "device=cpu runs"
"${LIB[@]}" digits "$W/a.log" "$W/b.log" 8 >"$W/r" || fail "digits of two equal runs: $(cat "$W/r")"
grep -q "^PASS: 8 of 8 step losses equal" "$W/r" || fail "digits: $(cat "$W/r")"
# the last printed digit of one loss changed: caught
awk '$1 == "step" && $2 == 5 { n = split($4, d, ""); $4 = substr($4, 1, length($4) - 1) ((d[n] + 1) % 10) } 1' "$W/b.log" >"$W/b5.log"
! "${LIB[@]}" digits "$W/a.log" "$W/b5.log" 8 >"$W/r" || fail "digits missed a changed last digit"
grep -q "^step 5: cpu " "$W/r" && grep -q "^FAIL: 7 of 8" "$W/r" || fail "digits, one digit off: $(cat "$W/r")"
! "${LIB[@]}" digits "$W/a.log" "$W/c.log" 8 >/dev/null || fail "digits: runs of another seed passed"
! "${LIB[@]}" digits "$W/a.log" "$W/b.log" 9 >"$W/r" || fail "digits: 9 steps asked, 8 logged, passed"
ok "digits: equal runs pass; one last digit changed, another seed, too few steps fail"
"${LIB[@]}" devloss "$W/a.log" "$W/b.log" 0 >/dev/null || fail "devloss of equal runs, tolerance 0"
da=$(awk '/^dev final/ {print $4}' "$W/a.log"); dc=$(awk '/^dev final/ {print $4}' "$W/c.log")
rel=$(awk -v a="$da" -v c="$dc" 'BEGIN {d = (c - a) / a; if (d < 0) d = -d; print d}')
awk -v r="$rel" 'BEGIN {exit !(r > 0)}' || fail "seeds 1 and 2 gave the same dev loss $da"
"${LIB[@]}" devloss "$W/a.log" "$W/c.log" "$(awk -v r="$rel" 'BEGIN {print r * 1.01}')" >/dev/null \
    || fail "devloss just inside the tolerance failed"
! "${LIB[@]}" devloss "$W/a.log" "$W/c.log" "$(awk -v r="$rel" 'BEGIN {print r * 0.99}')" >/dev/null \
    || fail "devloss just outside the tolerance passed"
grep -v '^dev final' "$W/a.log" >"$W/nodev.log"
! "${LIB[@]}" devloss "$W/nodev.log" "$W/b.log" 1 >/dev/null || fail "devloss without a dev line passed"
ok "devloss: relative difference $rel of two seeds passes at 1.01x, fails at 0.99x; a missing line fails"
"${LIB[@]}" params "$W/p0.bin" "$W/p1.bin" "$W/p1.bin" 0 0 >/dev/null || fail "params: identical dumps"
! "${LIB[@]}" params "$W/p0.bin" "$W/p1.bin" "$W/p2.bin" 1e-6 1e-3 >/dev/null || fail "params: another seed passed"
! "${LIB[@]}" params "$W/p0.bin" "$W/p0.bin" "$W/p0.bin" 1 1 >/dev/null || fail "params: no update passed"
head -c 100 "$W/p1.bin" >"$W/short.bin"
! "${LIB[@]}" params "$W/p0.bin" "$W/p1.bin" "$W/short.bin" 1 1 >/dev/null || fail "params: sizes differ, passed"
"${LIB[@]}" losses "$W/a.log" "$W/b.log" 8 1e-6 >/dev/null || fail "losses of equal runs"
! "${LIB[@]}" losses "$W/a.log" "$W/c.log" 8 1e-6 >/dev/null || fail "losses of another seed passed"
[ "$("${LIB[@]}" same "$W/a.log" "$W/a.log")" = "$(wc -l <"$W/a.log") of $(wc -l <"$W/a.log")" ] || fail "same"
ok "params, losses, same: equal inputs pass, another seed, no update, truncated dump fail"

# --- the train stage's logic end to end on the CPU (ACCEPT_DEVICE=cpu: no
# GPU check, fp32 for the bf16 run) with a tiny model: 12 steps, SIGUSR1
# after checkpoint 6, resume; its summary holds the checks and the table
# (steps of at least 30 ms: the background write of checkpoint 6 ends
# before the run does)
export ACCEPT_DEVICE=cpu ACCEPT_BF16_PRECISION=fp32 TRAIN_STEPS=12 DIGIT_STEPS=4 JOBS=1 ACCEPT_STEP_SLEEP_MS=30
export ACCEPT_MODEL_ARGS="threads=1 max_tokens=256 d_model=32 d_ff=64 n_layers=2 n_heads=2 d_k=16 d_v=16 synth_train=2000 synth_dev=20"
STAGE=train $A "$W/o6" >"$W/out" 2>&1 || fail "train stage on the CPU: $(cat "$W/out")"
m=$W/o6/train.md
head -1 "$m" | grep -qx "# gpu-accept stage train: PASS" || fail "train.md: $(cat "$m")"
for c in "fp32 on the device = device=cpu to the printed digits, first 4 steps (4 of 4" \
         "bf16 dev loss at step 12 within 1e-2" "SIGUSR1 after step 6: checkpoint and exit 99" \
         "resume to step 12 (resume: " "the resumed run had steps left" "resumed = uninterrupted: params, adam_m, adam_v bitwise"; do
    grep -qF -- "- PASS: $c" "$m" || fail "train.md lacks '- PASS: $c': $(cat "$m")"
done
grep -q "^| fp32 | [0-9.]* |" "$m" || fail "train.md: no figures table"
grep -q "| train | PASS | train.md |" "$W/o6/summary.md" || fail "summary.md: $(cat "$W/o6/summary.md")"
# a failing check fails the stage: here every run fails at once (a bad key)
rc=0; ACCEPT_MODEL_ARGS="$ACCEPT_MODEL_ARGS no_such_key=1" STAGE=train $A "$W/o7" >/dev/null 2>&1 || rc=$?
[ $rc -eq 1 ] && head -1 "$W/o7/train.md" | grep -qx "# gpu-accept stage train: FAIL" \
    && grep -q -- "- FAIL: device=cpu fp32, 12 steps (exit 1: error: .*no_such_key" "$W/o7/train.md" \
    || fail "a failed check did not fail the stage (exit $rc): $(cat "$W/o7/train.md")"
ok "train stage on the CPU: digits, tolerance, SIGUSR1 + resume bitwise, summary; a failed check fails it"
