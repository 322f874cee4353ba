# shellcheck shell=bash
# tests/gpu/accept.sh (make gpu-accept): the plan of device calls.  The
# GPU machines lent here give 10 minutes per command and 15 minutes per
# session, the machine's start (about a minute) included, and are given
# back 30 s after a command ends (.library/device/README.md).  So the stages
# run in order of value, each under a time budget that run_one enforces
# (timeout), packed into calls of at most CALL_LIMIT seconds: the worst case
# of a call is the sum of its budgets and CALL_OVERHEAD, whatever the stages
# find.  A session's 900 s hold the start (SESSION_START), these calls
# (PLAN_LIMIT) and the measurement kit's (tests/gpu/kit.sh checks the sum).
# Sourced; docs/gpu-accept.md gives the same table.
CALL_LIMIT=540      # s: a call's worst case, inside the 600 s of one command
SESSION_LIMIT=900   # s: one session's device time
SESSION_START=90    # s of it a fresh machine's start takes (an H200: about a minute)
PLAN_LIMIT=450      # s: all calls, gpu-accept's share of the session
CALL_OVERHEAD=10    # s a call spends outside its stages: header, summary, logs.tgz
CALL_FILES=8        # files a call may bring back from $OUT
# The stages in order of value: a build and the multi-rank training step
# against the CPU first (issue 29: multi-rank runs were expected to die at
# their first update), then speed, then the rest.
ALL_STAGES="build step bench ops mpi train decode sanitize"
# The calls, in the order to make them.  Each starts with build: on a warm
# machine it finds the binaries in place (seconds), on a fresh one it builds
# or unpacks them again.
PLAN_CALLS=("build step bench" "build ops mpi train decode sanitize")
# Budgets in seconds, at least about twice the stage times of the first GPU
# run (an H200, 2026-11-26, the pack; docs/gpu-accept.md, "Results"), 20 at
# the least: build 3 (unpacking), step 5, bench 128 (with torch.compile,
# which the kit now measures), ops 6, mpi 7, train 23, decode 22-27,
# sanitize 3.  An H100 has
# 0.7x the memory bandwidth.
declare -A BUDGET=(
    [build]=45      # unpack the pack + a one-step run, 3 s; a build for one arch where the machine can, ~40 s
    [step]=20       # two test_cuda_step runs and two 6-step 2-rank trainings of a tiny model, 5 s
    [bench]=140     # gemm_peak ~10 s; per model ours bf16 + fp32 ~20 s, PyTorch eager ~15 s (TORCH_COMPILE=0): ~80 s
    [ops]=20        # test_cuda_kernels (53 op checks) and four 6-step tiny trainings, 6 s
    [mpi]=20        # three 20-step Multi30k runs, one of 2 ranks, 7 s
    [train]=50      # ~900 Multi30k steps of ~15 ms on the GPU, 10 on the CPU, 3 checkpoints, 23 s
    [decode]=45     # beam 4 on 1,000 sentences, ours ~3 s, PyTorch fp32 with its import ~20 s: 22-27 s
    [sanitize]=45   # the kernel test's sync subset under 3 compute-sanitizer tools, 10 s each at most: 3 s
)
declare -A STAGE_WHAT=(
    [build]="build for the GPU's compute capability only (or unpack build/gpu-pack.tgz); sm_XX code; a one-step device=cuda run"
    [step]="whole training step vs the CPU backend: 1 rank without NCCL; 2 ranks with NCCL on 2+ GPUs, else allreduce=mpi sharing the GPU; 2-rank train device=cuda vs device=cpu"
    [bench]="make gpu-bench: base and big, ours bf16 and fp32 vs PyTorch eager (torch.compile: the kit): tok/s, MFU, memory"
    [ops]="every op vs the CPU backend (test_cuda_kernels); train device=cuda fp32/tf32/bf16 vs device=cpu"
    [mpi]="Multi30k, 2 ranks on one GPU (allreduce=mpi) = 1 rank with update_freq=2: losses and parameters"
    [train]="Multi30k 300 steps: fp32 = CPU within 1e-5; bf16 dev loss within 1%; SIGUSR1 + resume bitwise"
    [decode]="beam 4 on test2016 from train's checkpoint, ours vs PyTorch: sentences/s, identical outputs"
    [sanitize]="compute-sanitizer memcheck, racecheck, synccheck on the kernel test (CUDA_TEST_SUBSET=sync)"
)
# the device tool's arguments for call N, as printed by --plan (through
# bash: the copy of the working tree there need not keep the execute bits)
PLAN_CARRY='["build/gpu-pack.tgz"]'
plan_command() { echo "CALL=$1 bash tests/gpu/accept.sh \"\$OUT\""; }

# stage_budget STAGE: its budget in seconds; ACCEPT_BUDGET_STAGE=N changes
# one, ACCEPT_STAGE_LIMIT=N all (tests: a stage that outruns its budget)
stage_budget() {
    local v="ACCEPT_BUDGET_$1"
    echo "${ACCEPT_STAGE_LIMIT:-${!v:-${BUDGET[$1]:-0}}}"
}

# call_timeout BUDGET: the device call's timeout_s, its budget and a margin
# of 60 s for the start-up and the transfer of $OUT (at most the tool's 600):
# a call that hangs then costs its budget, not 600 s (issue 44)
call_timeout() { local t=$(($1 + 60)); echo $((t > 600 ? 600 : t)); }

call_budget() {  # N: the worst case of call N, overhead included
    local s t=$CALL_OVERHEAD
    for s in ${PLAN_CALLS[$(($1 - 1))]}; do t=$((t + $(stage_budget "$s"))); done
    echo "$t"
}

# plan_check: every rule of the plan, one 'error: ...' line for each broken;
# fails when one is
plan_check() {
    local n s t total=0 bad=0 seen=" "
    for n in $(seq 1 ${#PLAN_CALLS[@]}); do
        t=$(call_budget "$n")
        total=$((total + t))
        [ "$t" -le "$CALL_LIMIT" ] || { err "plan: call $n takes up to ${t} s, over ${CALL_LIMIT} s"; bad=1; }
        # shellcheck disable=SC2086
        set -- ${PLAN_CALLS[$((n - 1))]}
        [ "$1" = build ] || { err "plan: call $n does not start with build"; bad=1; }
        [ $(($# + 2)) -le "$CALL_FILES" ] || { err "plan: call $n has $# stages: $(($# + 2)) files, over $CALL_FILES"; bad=1; }
        for s; do
            if [[ " $ALL_STAGES " != *" $s "* ]] || ! declare -F "stage_$s" >/dev/null; then
                err "plan: call $n: no stage '$s'"; bad=1
            fi
            seen="$seen$s "
        done
    done
    [ "$total" -le "$PLAN_LIMIT" ] || { err "plan: the calls take up to ${total} s, over ${PLAN_LIMIT} s"; bad=1; }
    [ "${PLAN_CALLS[0]}" = "build step bench" ] || { err "plan: call 1 is not build, step, bench"; bad=1; }
    for s in $ALL_STAGES; do
        [[ "$seen" == *" $s "* ]] || { err "plan: stage $s is in no call"; bad=1; }
    done
    return $bad
}

plan_print() {
    local n s total=0
    for n in $(seq 1 ${#PLAN_CALLS[@]}); do total=$((total + $(call_budget "$n"))); done
    echo "make gpu-accept: ${#PLAN_CALLS[@]} device calls, ${total} s at most (limits: ${CALL_LIMIT} s a call, ${PLAN_LIMIT} s in all, its share of a ${SESSION_LIMIT}-s session)"
    echo "Before call 1, here (no GPU): tests/gpu/accept.sh --pack  (build/gpu-pack.tgz: sm_${CUDA_ARCH:-90} binaries, libraries, data)"
    echo "Make the calls back to back: a machine kept warm (30 s) keeps the binaries and train's checkpoint."
    for n in $(seq 1 ${#PLAN_CALLS[@]}); do
        echo
        printf 'call %d: %d s = %d (header, summary)' "$n" "$(call_budget "$n")" "$CALL_OVERHEAD"
        for s in ${PLAN_CALLS[$((n - 1))]}; do printf ' + %s %d' "$s" "$(stage_budget "$s")"; done
        echo
        for s in ${PLAN_CALLS[$((n - 1))]}; do printf '  %-8s %4d s  %s\n' "$s" "$(stage_budget "$s")" "${STAGE_WHAT[$s]}"; done
        printf '  run {"command": "%s", "carry": %s, "timeout_s": %d}\n' "$(plan_command "$n" | sed 's/"/\\"/g')" "$PLAN_CARRY" \
            "$(call_timeout "$(call_budget "$n")")"
    done
}
