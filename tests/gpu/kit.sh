#!/usr/bin/env bash
# The GPU measurement kit of issue 32 (docs/gpu-accept.md, "The kit"): one
# short GPU run turned into per-call truth, in one device call that
# follows make gpu-accept's two on the machine they leave warm.
#
#   tests/gpu/kit.sh --plan            the calls, checked (make gpu-kit-plan)
#   CALL=N tests/gpu/kit.sh OUTDIR     call N: its gpu-accept stages
#                                      (tests/gpu/accept.sh into OUTDIR/accept),
#                                      then its kit stages under the clock and
#                                      power log (tests/gpu/gpu_clocks.sh)
#   STAGE=timing,sweep tests/gpu/kit.sh OUTDIR    kit stages by name only
#
# Kit stages (budgets below; each under `timeout`):
#   timing   base and big at the paper's batch: ours untimed (ms/step,
#            tok/s), then per-call timing (gpu_model --time-calls, with its
#            own trace) and the refit (gpu_model --fit) per class of call
#   sweep    the GEMM shape sweep of base and big (tests/gpu/gemm_sweep.sh,
#            median of KIT_REPS=20) and gemm_peak on constant and random data
#   torch    the strong PyTorch baseline (tests/gpu/torch_train_strong.py),
#            eager, base and big, at the same batch: ratios to ours
#   compile  the same with torch.compile
#   levers   the A/B pairs issue 44 asks a window to settle, each two runs
#            of --run-steps: base′ (Table 3's scaled base) without and
#            with CUDA Graphs (the speed-up; the parameters' hashes must
#            be equal), base with TRANSFORMER_ATTENTION=gemm and =fused
#            (tensor cores in 16-bit), base with TRANSFORMER_RELU_MASK=1
#            and =0 (the faster becomes the default)
# Results: OUTDIR/kit.md (one PASS/FAIL line per check and the figures) and
# OUTDIR/kit.tgz (every CSV and log, the clock log among them): with
# gpu-accept's files at most 8 per call.
#
# Environment (tests): KIT_GPU_MODEL, KIT_GEMM_PEAK (the emulator's builds
# in place of bin/gpu/...), KIT_MODEL_ARGS (default --batch 610 --len 41
# precision=bf16), KIT_MODELS (base big), KIT_PEAK_N, KIT_REPS, KIT_WORK
# (scratch, default build/gpu-kit), KIT_NO_ACCEPT=1 (skip the gpu-accept
# stages), KIT_BUDGET_<stage> (one budget, s), TORCH_PY, KIT_PRIME_ARGS
# (base′'s gpu_model arguments for levers), KIT_LEVER_STEPS (10).
set -uo pipefail
TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$TOP" || exit 2
err() { echo "error: gpu-kit: $*" >&2; }

# ------------------------------------------------------------------ the plan
CALL_LIMIT=540        # s: a call's worst case, inside the 600 s of one command
PLAN_LIMIT=360        # s: all calls, the kit's share of a session (accept/plan.sh)
CMD_LIMIT=2000        # characters of one device command
CALL_FILES=8          # files a call brings back
KIT_OVERHEAD=10       # s of a call's kit part outside its stages (kit.md, kit.tgz)
KIT_STAGES="timing sweep torch compile levers"
# budgets: about twice the times of the first GPU run (an H200, 2026-11-26:
# timing 14 s, sweep 8 s, torch 20 s, compile 44 + 49 s), compile 1.6x
declare -A KIT_BUDGET=(
    [timing]=30       # per model: ~5 s CUDA start and init, 10 + 5 steps of 36-84 ms, the fit ~1 s: 14 s
    [sweep]=20        # 327 GEMM calls x 21 per model (~1 s of GPU), gemm_peak 6 x 8192^3 sets + host RNG: 8 s
    [torch]=45        # per model: PyTorch import + 15 eager steps: 20 s for both
    [compile]=150     # per model: ours 10 steps ~5 s (for the ratio), torch.compile ~40 s, then 15 steps: 93 s
    [levers]=50       # 6 runs of ~5 s CUDA start and init + 12 steps (base′ ~1-2 ms, base ~36 ms): ~35 s (not yet run)
)
declare -A KIT_WHAT=(
    [timing]="ours untimed; per-call CUDA-event timing joined with the step's trace; --fit per class of call"
    [sweep]="every GEMM shape class of base and big through the backend's own call, median of 20; gemm_peak constant and random"
    [torch]="strong PyTorch (SDPA, bf16 logits, fused Adam) eager, base and big, same tokens per step: ratio to ours"
    [compile]="the strong PyTorch baseline under torch.compile, base and big: ratio to ours"
    [levers]="A/B in one window: base′ with and without CUDA Graphs (equal hashes); base's attention gemm vs fused; ReLU mask 1 vs 0"
)
# one call, after make gpu-accept's two in the same session (which checked
# the GPU's training step against the CPU before any speed is trusted): the
# build stage finds the binaries on the warm machine, or unpacks them
PLAN_ACCEPT=("build")
PLAN_KIT=("timing sweep torch compile levers")
PLAN_CARRY='["build/gpu-pack.tgz"]'
plan_command() { echo "CALL=$1 bash tests/gpu/kit.sh \"\$OUT\""; }

kit_budget() {
    local v="KIT_BUDGET_$1"
    echo "${!v:-${KIT_BUDGET[$1]:-0}}"
}
accept_budget() {  # STAGE: gpu-accept's budget of it, from its plan
    (. "$TOP/tests/gpu/accept/plan.sh" && stage_budget "$1")
}
kit_call_timeout() { (. "$TOP/tests/gpu/accept/plan.sh" && call_timeout "$1"); }  # accept/plan.sh's rule
accept_overhead() { (. "$TOP/tests/gpu/accept/plan.sh" && echo "$CALL_OVERHEAD"); }

call_budget() {  # N: the worst case of call N
    local s t=0
    if [ -n "${PLAN_ACCEPT[$(($1 - 1))]}" ]; then
        t=$(accept_overhead)
        for s in ${PLAN_ACCEPT[$(($1 - 1))]}; do t=$((t + $(accept_budget "$s"))); done
    fi
    if [ -n "${PLAN_KIT[$(($1 - 1))]}" ]; then
        t=$((t + KIT_OVERHEAD))
        for s in ${PLAN_KIT[$(($1 - 1))]}; do t=$((t + $(kit_budget "$s"))); done
    fi
    echo "$t"
}

call_files() {  # N: gpu-accept's stage files, summary.md, logs.tgz; kit.md, kit.tgz
    local a k n=0
    read -r -a a <<<"${PLAN_ACCEPT[$(($1 - 1))]}"
    read -r -a k <<<"${PLAN_KIT[$(($1 - 1))]}"
    [ ${#a[@]} -gt 0 ] && n=$((${#a[@]} + 2))
    [ ${#k[@]} -gt 0 ] && n=$((n + 2))
    echo "$n"
}

plan_check() {
    local n s t c total=0 bad=0 seen=" "
    [ ${#PLAN_ACCEPT[@]} -le 3 ] || { err "plan: ${#PLAN_ACCEPT[@]} calls, over 3"; bad=1; }
    for n in $(seq 1 ${#PLAN_ACCEPT[@]}); do
        t=$(call_budget "$n")
        total=$((total + t))
        [ "$t" -le "$CALL_LIMIT" ] || { err "plan: call $n takes up to ${t} s, over ${CALL_LIMIT} s"; bad=1; }
        c=$(plan_command "$n")
        [ ${#c} -le "$CMD_LIMIT" ] || { err "plan: call $n's command has ${#c} characters, over $CMD_LIMIT"; bad=1; }
        [ "$(call_files "$n")" -le "$CALL_FILES" ] || { err "plan: call $n brings back $(call_files "$n") files, over $CALL_FILES"; bad=1; }
        for s in ${PLAN_KIT[$((n - 1))]}; do
            declare -F "stage_$s" >/dev/null || { err "plan: call $n: no kit stage '$s'"; bad=1; }
            seen="$seen$s "
        done
    done
    [ "$total" -le "$PLAN_LIMIT" ] || { err "plan: the calls take up to ${total} s, over ${PLAN_LIMIT} s"; bad=1; }
    # the two plans' shares and the machine's start fill one session at most
    local start accept session
    read -r start accept session <<<"$(. "$TOP/tests/gpu/accept/plan.sh" && echo "$SESSION_START $PLAN_LIMIT $SESSION_LIMIT")"
    [ $((start + accept + PLAN_LIMIT)) -le "$session" ] ||
        { err "plan: start $start s + gpu-accept $accept s + kit $PLAN_LIMIT s is over a session's $session s"; bad=1; }
    for s in $KIT_STAGES; do
        [[ "$seen" == *" $s "* ]] || { err "plan: kit stage $s is in no call"; bad=1; }
    done
    return $bad
}

plan_print() {
    local n s total=0
    for n in $(seq 1 ${#PLAN_ACCEPT[@]}); do total=$((total + $(call_budget "$n"))); done
    echo "make gpu-kit-plan: ${#PLAN_ACCEPT[@]} device call(s), ${total} s at most (limits: ${CALL_LIMIT} s a call, ${PLAN_LIMIT} s in all)"
    echo "Before call 1, here (no GPU): tests/gpu/accept.sh --pack  (build/gpu-pack.tgz, bin/gpu/gpu_model in it)"
    echo "A session has 15 minutes of device time, the machine's start included: make gpu-accept's calls (make gpu-plan), then these, back to back."
    for n in $(seq 1 ${#PLAN_ACCEPT[@]}); do
        echo
        printf 'call %d: %d s =' "$n" "$(call_budget "$n")"
        [ -n "${PLAN_ACCEPT[$((n - 1))]}" ] && printf ' gpu-accept %s' "$(tr ' ' ,<<<"${PLAN_ACCEPT[$((n - 1))]}")"
        [ -n "${PLAN_KIT[$((n - 1))]}" ] && printf ' + kit %s' "$(tr ' ' ,<<<"${PLAN_KIT[$((n - 1))]}")"
        printf ' (%d files)\n' "$(call_files "$n")"
        for s in ${PLAN_ACCEPT[$((n - 1))]}; do printf '  %-8s %4d s  gpu-accept stage (docs/gpu-accept.md)\n' "$s" "$(accept_budget "$s")"; done
        for s in ${PLAN_KIT[$((n - 1))]}; do printf '  %-8s %4d s  %s\n' "$s" "$(kit_budget "$s")" "${KIT_WHAT[$s]}"; done
        printf '  run {"command": "%s", "carry": %s, "timeout_s": %d}\n' "$(plan_command "$n" | sed 's/"/\\"/g')" "$PLAN_CARRY" \
            "$(kit_call_timeout "$(call_budget "$n")")"
    done
}

# ------------------------------------------------------------------ stages
GM=${KIT_GPU_MODEL:-bin/gpu/gpu_model}
PEAK=${KIT_GEMM_PEAK:-bin/gpu/gemm_peak}
TORCH_PY=${TORCH_PY:-python3}
read -r -a MODEL_ARGS <<<"${KIT_MODEL_ARGS:---batch 610 --len 41 precision=bf16}"
MODELS=${KIT_MODELS:-base big}
W=${KIT_WORK:-$TOP/build/gpu-kit}

check() {  # WHAT CMD...: PASS/FAIL line to the report, the output to the log
    local what=$1 rc=0
    shift
    echo "\$ $*" >>"$W/kit.log"
    "$@" >>"$W/kit.log" 2>&1 || rc=$?
    if [ $rc -eq 0 ]; then echo "- PASS $what" >>"$W/report.md"; else echo "- FAIL $what (exit $rc)" >>"$W/report.md"; fi
    return $rc
}
report() { printf '%s\n' "$@" >>"$W/report.md"; }

stage_timing() {
    local m ok=0
    for m in $MODELS; do
        check "$m: ours, 10 untimed steps" "$GM" --model "$m" "${MODEL_ARGS[@]}" --run-steps 10 &&
            report "  $(grep "^run-steps: $m" "$W/kit.log" | tail -1)" || ok=1
        check "$m: per-call timing, 5 steps" "$GM" --model "$m" "${MODEL_ARGS[@]}" --run-steps 5 \
            --time-calls "$W/time_$m.csv" --write-trace "$W/trace_$m.csv" || { ok=1; continue; }
        check "$m: --fit to the per-call timing" bash -c "'$GM' --model $m --trace '$W/trace_$m.csv' --fit '$W/time_$m.csv' \
            ${MODEL_ARGS[*]} > '$W/fit_$m.txt'" || { ok=1; continue; }
        report '```' "$(sed -n '/^after the fit:/,/^step:/p' "$W/fit_$m.txt")" '```'
    done
    return $ok
}

stage_sweep() {
    local ok=0
    check "GEMM shape sweep, base and big, median of ${KIT_REPS:-20}" \
        bash tests/gpu/gemm_sweep.sh "$GM" "$W/sweep.csv" "${KIT_REPS:-20}" || ok=1
    [ -f "$W/sweep.csv" ] && report '```' "$(python3 - "$W/sweep.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
rows.sort(key=lambda r: -float(r["ms"]) * int(r["calls"]))
print("model op call m x n x k x batch: calls, measured ms, TFLOP/s, predicted ms, measured/predicted (by time per step)")
for r in rows[:12]:
    ratio = float(r["ms"]) / float(r["predicted_ms"]) if float(r["predicted_ms"]) > 0 else 0
    print("%s %s %s %sx%sx%sx%s: %s, %s, %s, %s, %.2f" % (r["model"], r["op"], r["call"], r["m"], r["n"], r["k"], r["batch"],
          r["calls"], r["ms"], r["tflops"], r["predicted_ms"], ratio))
PY
)" '```'
    check "gemm_peak, constant and random data" bash -c "'$PEAK' ${KIT_PEAK_N:-8192} > '$W/peak.txt'" &&
        report '```' "$(cat "$W/peak.txt")" '```' || ok=1
    return $ok
}

torch_runs() {  # eager|compile
    local m ok=0 extra=() ours theirs
    [ "$1" = compile ] && extra=(--compile)
    for m in $MODELS; do
        check "$m: strong PyTorch ($1)" bash -c "'$TORCH_PY' tests/gpu/torch_train_strong.py --model $m ${extra[*]} \
            --batch ${KIT_TORCH_BATCH:-610} --len ${KIT_TORCH_LEN:-41} > '$W/torch_${1}_$m.txt'" || { ok=1; continue; }
        theirs=$(awk '/^torch-strong/ {print $4}' "$W/torch_${1}_$m.txt")
        grep -q "^run-steps: $m.*(wall clock)" "$W/kit.log" ||
            check "$m: ours, 10 untimed steps (for the ratio)" "$GM" --model "$m" "${MODEL_ARGS[@]}" --run-steps 10
        ours=$(grep "^run-steps: $m" "$W/kit.log" | grep -v events | tail -1 | sed -n 's/.* \([0-9.]*\) tok\/s.*/\1/p')
        report "  $(grep '^torch-strong' "$W/torch_${1}_$m.txt")"
        [ -n "$ours" ] && [ -n "$theirs" ] && report "  $m: ours / PyTorch $1 = $(python3 -c "print('%.2f' % ($ours / $theirs))")"
    done
    return $ok
}
stage_torch() { torch_runs eager; }
stage_compile() { torch_runs compile; }

# lever_run NAME "ENV" GM_ARGS...: one --run-steps run into $W/lever_NAME.txt
# (ENV: VAR=value words for env); prints its ms/step and parameters' hash
lever_run() {
    local name=$1 env=$2
    shift 2
    check "$name: ours, ${KIT_LEVER_STEPS:-10} untimed steps" \
        bash -c "env $env '$GM' $* --run-steps ${KIT_LEVER_STEPS:-10} > '$W/lever_$name.txt'" || return 1
    sed -n 's/^run-steps: .* \([0-9.]*\) ms\/step.*fnv1a \([0-9a-f]*\)$/\1 \2/p' "$W/lever_$name.txt"
}

# lever_pair WHAT NAME_A "ENV_A" "ARGS_A" NAME_B "ENV_B" "ARGS_B" GM_ARGS...:
# both runs; reports their times and B's speed-up over A; LEVER_HASHES="hA hB"
lever_pair() {
    local what=$1 na=$2 ea=$3 aa=$4 nb=$5 eb=$6 ab=$7 ta tb
    shift 7
    # shellcheck disable=SC2086
    ta=$(lever_run "$na" "$ea" "$@" $aa) && tb=$(lever_run "$nb" "$eb" "$@" $ab) && [ -n "$ta" ] && [ -n "$tb" ] || return 1
    report "  $what: ${ta% *} ms/step ($na), ${tb% *} ms/step ($nb): $nb is $(python3 -c \
        "print('%.2f' % (${ta% *} / ${tb% *}))")x as fast; parameters fnv1a ${ta#* } and ${tb#* }"
    LEVER_HASHES="${ta#* } ${tb#* }"
}

stage_levers() {
    local ok=0 prime h
    read -r -a prime <<<"${KIT_PRIME_ARGS:---config input/table3-m30k/base.cfg --batch 140 --len 14 precision=bf16}"
    # CUDA Graphs change no result: the same steps end in the same parameters
    if lever_pair "base′, CUDA Graphs" prime-eager "" "" prime-graphs "" "--graphs" "${prime[@]}"; then
        read -r -a h <<<"$LEVER_HASHES"
        check "base′: the same parameters with and without CUDA Graphs (${h[0]}, ${h[1]})" [ "${h[0]}" = "${h[1]}" ] || ok=1
    else
        ok=1
    fi
    lever_pair "base, attention" attention-gemm "TRANSFORMER_ATTENTION=gemm" "" attention-fused \
        "TRANSFORMER_ATTENTION=fused" "" --model base "${MODEL_ARGS[@]}" || ok=1
    lever_pair "base, feed-forward backward" relu-mask-1 "TRANSFORMER_RELU_MASK=1" "" relu-mask-0 \
        "TRANSFORMER_RELU_MASK=0" "" --model base "${MODEL_ARGS[@]}" || ok=1
    return $ok
}

# run_stages STAGE...: each under its budget, into $W/report.md
run_stages() {
    local s t0 rc all=0
    for s; do
        declare -F "stage_$s" >/dev/null || { err "no kit stage '$s' (stages: $KIT_STAGES)"; return 2; }
    done
    for s; do
        report "" "## $s (budget $(kit_budget "$s") s)"
        t0=$SECONDS
        # (a stage in a subshell under its budget; its report lines stay)
        KIT_STAGE_FN=stage_$s timeout --kill-after=10 "$(kit_budget "$s")" bash -c ". '$TOP/tests/gpu/kit.sh' --source && \$KIT_STAGE_FN"
        rc=$?
        [ $rc -eq 124 ] && report "- FAIL $s: stopped at its budget of $(kit_budget "$s") s"
        report "- stage time: $((SECONDS - t0)) s; $([ $rc -eq 0 ] && echo PASS || echo FAIL)"
        [ $rc -eq 0 ] || all=1
    done
    return $all
}

# kit OUTDIR STAGE...: the stages under the clock log, then kit.md, kit.tgz
kit() {
    local out=$1 rc
    shift
    rm -rf "$W" && mkdir -p "$W" "$out" || return 2
    : >"$W/report.md"
    bash tests/gpu/gpu_clocks.sh "$W/clocks.csv" bash "$TOP/tests/gpu/kit.sh" --stages "$@" 2>"$W/clocks.txt"
    rc=$?
    {
        echo "# gpu-kit: $*"
        echo "commit $(git rev-parse --short=12 HEAD 2>/dev/null || cat build/gpu-libs/COMMIT 2>/dev/null || echo unknown);" \
             "GPU $(timeout -k 5 20 nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader 2>/dev/null | head -1 || echo none)"
        grep -v '^$' "$W/clocks.txt" | tail -2
        cat "$W/report.md"
        echo; echo "## the end of the log"; echo '```'; tail -15 "$W/kit.log"; echo '```'
    } >"$out/kit.md"
    tar czf "$out/kit.tgz" -C "$W" . 2>/dev/null
    echo "gpu-kit: $([ $rc -eq 0 ] && echo PASS || echo FAIL): $out/kit.md, $out/kit.tgz"
    return $rc
}

libs_here() {  # the bundled libraries of --pack, where no build happened here:
    # gpu-accept's own test (an H200 had nvcc and mpicc but no parallel HDF5,
    # and a kit that asked only for the first two ran without the libraries)
    # shellcheck source=accept/env.sh
    . "$TOP/tests/gpu/accept/env.sh"
    libs_env
}

case "${1:-}" in
--source) return 0 2>/dev/null || exit 0 ;;
--plan)
    plan_check || exit 1
    plan_print
    exit 0 ;;
--stages)
    shift
    mkdir -p "$W"
    libs_here
    run_stages "$@"
    exit ;;
""|-*) err "usage: tests/gpu/kit.sh --plan | [CALL=N | STAGE=$(tr ' ' ,<<<"$KIT_STAGES")] tests/gpu/kit.sh OUTDIR"; exit 2 ;;
esac
OUT=$1
if [ -n "${STAGE:-}" ]; then
    read -r -a stages <<<"$(tr ',' ' ' <<<"$STAGE")"
    kit "$OUT" "${stages[@]}"
    exit
fi
n=${CALL:-1}
[[ "$n" =~ ^[1-9]$ ]] && [ "$n" -le ${#PLAN_ACCEPT[@]} ] || { err "CALL=$n: the plan has calls 1..${#PLAN_ACCEPT[@]}"; exit 2; }
rc=0
if [ -n "${PLAN_ACCEPT[$((n - 1))]}" ] && [ -z "${KIT_NO_ACCEPT:-}" ]; then
    STAGE=$(tr ' ' , <<<"${PLAN_ACCEPT[$((n - 1))]}") bash tests/gpu/accept.sh "$OUT/accept" || rc=1
fi
if [ -n "${PLAN_KIT[$((n - 1))]}" ]; then
    read -r -a stages <<<"${PLAN_KIT[$((n - 1))]}"
    kit "$OUT" "${stages[@]}" || rc=1
fi
exit $rc
