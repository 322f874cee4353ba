# shellcheck shell=bash
# tests/gpu/accept.sh (make gpu-accept): the stages, each a function
# stage_NAME run in a child process under its budget (plan.sh), and their
# plumbing.  Sourced; uses the settings of accept.sh and accept/env.sh.
# (the stage functions are called through "stage_$s", which shellcheck cannot follow)
# shellcheck disable=SC2317
# ------------------------------------------------------------ stage plumbing

# check WHAT CMD...: runs CMD (its output to the log); a PASS/FAIL line for
# the summary with the last line of its output
check() {
    local what=$1 o rc=0 last
    shift
    o=$("$@" 2>&1) || rc=$?
    if [ -n "$o" ]; then printf '%s\n' "$o"; fi
    # the detail: the last line, or on failure the last line that says why
    last=$(printf '%s\n' "$o" | awk -v rc="$rc" 'NF {l = $0} /^(FAIL|error)/ {e = $0}
        END {if (rc != 0 && e != "") l = e; sub(/^(PASS|FAIL|ok): /, "", l); print substr(l, 1, 300)}')
    if [ "$rc" -eq 0 ]; then
        echo "- PASS: $what${last:+ ($last)}" >>"$CHECKS"
    else
        echo "- FAIL: $what (exit $rc${last:+: $last})" >>"$CHECKS"
    fi
    echo "[$what: exit $rc]"
    return 0
}
to_log() {  # LOG CMD...: CMD's output to LOG; its last line printed
    local log=$1
    shift
    "$@" >"$log" 2>&1 || { tail -3 "$log"; return 1; }
    tail -1 "$log"
}
note() { echo "- $*" >>"$CHECKS"; echo "$*"; }
table() { printf '%s\n' "$@" >>"$TABLES"; }

# ------------------------------------------------------------ stages

stage_build() {
    local arch
    arch=$(cuda_arch)
    echo "CUDA_ARCH=$arch (from nvidia-smi's compute capability unless CUDA_ARCH is set)"
    if can_build; then
        check "build for CUDA_ARCH=$arch alone (make all ${GPU_BIN[*]})" build_all "$arch"
    elif [ -f "$PACK" ]; then
        check "unpack build/gpu-pack.tgz (no nvcc, mpicc or HDF5 here to build)" unpack
        libs_env
    else
        note "SKIP: no build here (nvcc, mpicc or HDF5 missing) and no build/gpu-pack.tgz: checking the binaries in place"
    fi
    check "binaries present" ls -l "$BIN" "${GPU_DIR}"/{test_cuda_kernels,test_cuda_step,gemm_peak}
    local cuobjdump
    cuobjdump=$(command -v cuobjdump || echo "$(cuda_home)/bin/cuobjdump")
    if [ -x "$cuobjdump" ] && [ "$arch" != native ]; then
        check "bin/transformer holds machine code for sm_$arch" has_sass "$cuobjdump" "$arch"
    else
        note "SKIP: no cuobjdump (or CUDA_ARCH=native): machine code for the GPU not checked"
    fi
    check "bin/transformer loads and reaches the device" to_log "$WORK/first-run.log" "$BIN" train device="$DEVICE" \
        train_steps=1 n_layers=1 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16 synth_train=100 synth_dev=8 max_tokens=256
}

build_all() {  # ARCH: make, its output to the log, one line back
    SECONDS=0
    make -j"$JOBS" CUDA_ARCH="$1" all "${GPU_BIN[@]}" >"$WORK/make.log" 2>&1 || { cat "$WORK/make.log"; return 1; }
    cat "$WORK/make.log"
    echo "built in ${SECONDS}s: $(grep -c '^  \(CC\|CXX\|NVCC\) ' "$WORK/make.log") compiler runs"
}

has_sass() {  # CUOBJDUMP ARCH
    local elf
    elf=$("$1" --list-elf "$BIN" 2>&1) || { echo "$elf"; return 1; }
    echo "$elf"
    grep -q "sm_$2" <<<"$elf" || { echo "error: no sm_$2 code in $BIN"; return 1; }
    echo "$(grep -c "sm_$2" <<<"$elf") sm_$2 images"
}

# the tiny model of make gpu-test's train comparisons (tests/gpu/gpu_test.sh)
STEP_ARGS="n_layers=2 d_model=64 d_ff=128 n_heads=4 d_k=16 d_v=16 train_steps=6 log_steps=1 max_tokens=600
           synth_train=2000 synth_dev=32 warmup=50 threads=4 run_dir="
[ -n "${ACCEPT_STEP_ARGS:-}" ] && STEP_ARGS=$ACCEPT_STEP_ARGS

step_run() {  # LOG CMD...: test_cuda_step's output to LOG; its loss lines and verdict back
    local log=$1 rc=0
    shift
    "$@" >"$log" 2>&1 || rc=$?
    grep -E '^(FAIL|error)' "$log" | head -5
    grep -E 'loss cpu' "$log" | head -2
    echo "$(grep -c '^ok ' "$log") checks ok, $(grep -c '^FAIL' "$log") failed"
    [ $rc -eq 0 ] && ! grep -q '^FAIL' "$log"
}

# train_vs_cpu NAME RTOL NP ARGS...: $STEP_ARGS trained on NP ranks with
# device=cuda and ARGS against device=cpu on as many ranks (each rank takes
# its own sentences): the step losses and the dev loss within relative RTOL
train_vs_cpu() {
    local name=$1 rtol=$2 np=$3 n run=("$BIN" train)
    shift 3
    [ "$np" -gt 1 ] && run=(mpirun -np "$np" "${MPI_X[@]}" "$BIN" train)
    n=$(sed -n 's/.*train_steps=\([0-9]*\).*/\1/p' <<<"$STEP_ARGS")
    # shellcheck disable=SC2086
    to_log "$W/$name.log" "${run[@]}" $STEP_ARGS device=cuda "$@" || return 1
    # shellcheck disable=SC2086
    [ -f "$W/cpu-$np.log" ] || to_log "$W/cpu-$np.log" "${run[@]}" $STEP_ARGS device=cpu || return 1
    "${LIB[@]}" losses "$W/cpu-$np.log" "$W/$name.log" "$n" "$rtol" && "${LIB[@]}" devloss "$W/cpu-$np.log" "$W/$name.log" "$rtol"
}

# issue 29: multi-rank CUDA runs were expected to die at their first update.
# Two ranks need two GPUs for NCCL (NCCL refuses two ranks of a communicator
# on one device): on one GPU they share it through the MPI fallback
# (allreduce=mpi, TRANSFORMER_SHARE_GPU=1), and NCCL is not checked.
stage_step() {
    ensure_built "$BIN" "$GPU_DIR/test_cuda_step"
    W=$WORK/step
    mkdir -p "$W"
    rm -f "$W"/*.log
    local n ar=mpi
    n=$(gpu_count)
    if [ "$n" -ge 2 ] && have_nccl; then ar=nccl; fi
    mapfile -t MPI_X < <(mpi_x)
    [ $ar = mpi ] && MPI_X+=(-x TRANSFORMER_SHARE_GPU=1)
    note "$n GPU(s), NCCL $(have_nccl && echo linked || echo absent): the 2-rank runs use allreduce=$ar"
    check "whole step vs the CPU backend, 1 rank, allreduce=mpi (no NCCL): loss, gradients, Adam" \
        step_run "$W/step-1rank.log" "$GPU_DIR/test_cuda_step" allreduce=mpi
    check "whole step vs the CPU backend, 2 ranks, allreduce=$ar" \
        step_run "$W/step-2ranks.log" mpirun -np 2 "${MPI_X[@]}" "$GPU_DIR/test_cuda_step" allreduce=$ar
    check "2-rank train device=cuda allreduce=$ar = device=cpu on 2 ranks (losses, dev loss, relative 1e-4)" \
        train_vs_cpu train-2ranks 1e-4 2 allreduce=$ar
    tail -n +1 "$W"/*.log
}

# every op against the CPU backend, and short trainings in each precision
# (the tolerances of tests/gpu/gpu_test.sh)
stage_ops() {
    ensure_built "$BIN" "$GPU_DIR/test_cuda_kernels"
    W=$WORK/ops
    mkdir -p "$W"
    rm -f "$W"/*.log
    check "every op vs the CPU backend (test_cuda_kernels)" to_log "$W/kernels.log" "$GPU_DIR/test_cuda_kernels"
    local p tol
    for p in fp32:1e-4 tf32:2e-2 bf16:5e-2; do
        tol=${p#*:} p=${p%%:*}
        # (the CPU run once, for all three)
        check "train device=cuda precision=$p = device=cpu (relative $tol)" \
            train_vs_cpu "$p" "$tol" 1 precision="$p"
    done
    tail -n +1 "$W"/*.log
}

stage_sanitize() {
    ensure_built "$GPU_DIR/test_cuda_kernels"
    local san t each
    san=${ACCEPT_SANITIZER:-$(command -v compute-sanitizer || true)}
    [ -z "$san" ] && [ -x "$(cuda_home)/bin/compute-sanitizer" ] && san=$(cuda_home)/bin/compute-sanitizer
    if [ -z "$san" ]; then
        note "SKIP: compute-sanitizer not found: no memcheck/racecheck/synccheck run"
        return 0
    fi
    each=$(((ACCEPT_STAGE_BUDGET - 15) / 3))
    for t in memcheck racecheck synccheck; do
        check "compute-sanitizer --tool $t, small kernel test (CUDA_TEST_SUBSET=sync), ${each}s at most" \
            env CUDA_TEST_SUBSET=sync timeout "$each" "$san" --tool "$t" --error-exitcode 9 "$GPU_DIR/test_cuda_kernels"
    done
}

train_run() {  # NAME ARGS...: a training run into $W/NAME.log, its run dir $W/NAME
    local name=$1
    shift
    rm -rf "${W:?}/$name"
    "$BIN" train "${MODEL_ARGS[@]}" run_dir="$W/$name" "$@" >"$W/$name.log" 2>&1 || { tail -3 "$W/$name.log"; return 1; }
    grep '^dev final' "$W/$name.log"
}

step_table() {  # logs... -> Markdown rows: loss at a few steps, dev loss, tok/s
    local steps="1 $DIGIT_STEPS $((TRAIN_STEPS / 2)) $TRAIN_STEPS" l s row
    table "| run | $(for s in $steps; do printf 'loss @%s | ' "$s"; done)dev loss @$TRAIN_STEPS | median tok/s |" \
          "|---|$(for s in $steps; do printf -- '---:|'; done)---:|---:|"
    for l in "$@"; do
        row="| $(basename "$l" .log) |"
        for s in $steps; do row="$row $(awk -v s="$s" '$1 == "step" && $2 == s {print $4}' "$l") |"; done
        row="$row $(awk '/^dev final/ {print $4}' "$l") | $(awk '$1 == "step" {print $8}' "$l" | sort -n | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]}') |"
        table "$row"
    done
}

verdict() {  # A OP B WHY: test A OP B, saying WHY when it fails
    test "$1" "$2" "$3" && return 0
    echo "error: $4"
    return 1
}

stopped_or_gone() {  # PID: wait until it is stopped (state T: succeeds) or gone (fails)
    local st
    while kill -0 "$1" 2>/dev/null; do
        st=$(ps -o stat= -p "$1" 2>/dev/null || true)
        case $st in T*) return 0 ;; esac
        sleep 0.05
    done
    return 1
}

resume_run() {
    "$BIN" train "${MODEL_ARGS[@]}" run_dir="$W/resume" device="$DEVICE" precision=fp32 "$@" >"$W/resume2.log" 2>&1
    grep '^resume:' "$W/resume2.log"
}

stage_train() {
    need_data
    ensure_built
    W=$WORK/train
    mkdir -p "$W"
    local common=(train_steps="$TRAIN_STEPS" log_steps=1 ckpt_steps="$STOP_STEP" ckpt_minutes=0)
    check "device=cpu reference, $DIGIT_STEPS steps" train_run cpu device=cpu train_steps="$DIGIT_STEPS" log_steps=1 ckpt_steps=0 threads="$JOBS"
    check "device=$DEVICE fp32, $TRAIN_STEPS steps" train_run fp32 device="$DEVICE" precision=fp32 "${common[@]}"
    # fp32 on the device sums in cuBLAS's order, not OpenBLAS's: an H200 gave
    # step losses 2e-6 (2 units of the 7th digit, 2e-7 relative) off the
    # CPU's (2026-11-26).  1e-5 is 50 times that, and 50 times below what a
    # gradient wrong by 1% does to the step-2 loss (the loss falls ~5% a step)
    check "fp32 on the device = device=cpu within relative $DIGIT_TOL, first $DIGIT_STEPS steps" \
        "${LIB[@]}" losses "$W/cpu.log" "$W/fp32.log" "$DIGIT_STEPS" "$DIGIT_TOL"
    check "device=$DEVICE precision=$BF16_PREC, $TRAIN_STEPS steps" train_run bf16 device="$DEVICE" precision="$BF16_PREC" "${common[@]}"
    check "bf16 dev loss at step $TRAIN_STEPS within $BF16_TOL (relative) of fp32's" \
        "${LIB[@]}" devloss "$W/fp32.log" "$W/bf16.log" "$BF16_TOL"
    # SIGUSR1 once checkpoint STOP_STEP is in place (the test hook writes it
    # in the foreground and freezes the process there, so the preemption
    # checkpoint follows one step later), then a resume to TRAIN_STEPS
    rm -rf "$W/resume"
    TRANSFORMER_STEP_SLEEP_MS=${ACCEPT_STEP_SLEEP_MS:-0} TRANSFORMER_CKPT_STOP_STEP=$STOP_STEP "$BIN" train "${MODEL_ARGS[@]}" run_dir="$W/resume" device="$DEVICE" \
        precision=fp32 "${common[@]}" >"$W/resume1.log" 2>&1 &
    local pid=$! rc=0 why
    if stopped_or_gone "$pid"; then
        kill -USR1 "$pid"; kill -CONT "$pid"
        wait "$pid" || rc=$?
        why="exit $rc after SIGUSR1, expected 99; $(tail -1 "$W/resume1.log")"
    else
        wait "$pid" || rc=$?
        why="the run did not stop at checkpoint $STOP_STEP (exit $rc; $(tail -1 "$W/resume1.log"))"
        rc=-1
    fi
    check "SIGUSR1 after step $STOP_STEP: checkpoint and exit 99" verdict "$rc" -eq 99 "$why"
    check "resume to step $TRAIN_STEPS" resume_run "${common[@]}"
    local from
    from=$(sed -nE 's/^resume: .* \(step ([0-9]+),.*/\1/p' "$W/resume2.log")
    check "the resumed run had steps left (resumed at step ${from:-none} < $TRAIN_STEPS)" \
        verdict "${from:-$TRAIN_STEPS}" -lt "$TRAIN_STEPS" "no resume before the last step"
    local f
    f=$(printf 'ckpt_%08d.h5' "$TRAIN_STEPS")
    local tool=h5diff
    if [ -n "${ACCEPT_NO_H5DIFF:-}" ] || ! command -v h5diff >/dev/null; then tool=h5py; fi
    check "resumed = uninterrupted: params, adam_m, adam_v bitwise ($tool)" same_ckpt "$tool" "$W/fp32/$f" "$W/resume/$f"
    step_table "$W/cpu.log" "$W/fp32.log" "$W/bf16.log" "$W/resume2.log"
    tail -n +1 "$W"/cpu.log "$W"/fp32.log "$W"/bf16.log "$W"/resume1.log "$W"/resume2.log
}

# same_ckpt h5diff|h5py A B: parameters and Adam moments of two checkpoints
# bitwise equal; h5py (the GPU machine's python3 has it) where h5diff is missing
same_ckpt() {
    if [ "$1" = h5diff ]; then
        same_state "$2" "$3" && echo "params, adam_m, adam_v equal (h5diff)"
    else
        "$H5PY" "$TOP/tests/gpu/accept_lib.py" h5same "$2" "$3" params adam_m adam_v
    fi
}

stage_mpi() {
    need_data
    ensure_built
    command -v mpirun >/dev/null || { note "FAIL: mpirun not found"; return 0; }
    W=$WORK/mpi
    mkdir -p "$W"
    local a=("${MODEL_ARGS[@]}" device="$DEVICE" train_steps="$MPI_STEPS" log_steps=1 run_dir= threads=4)
    check "1 rank, update_freq=2" to_log "$W/r1.log" "$BIN" train "${a[@]}" update_freq=2 --dump-params "$W/p1.bin"
    local x
    mapfile -t x < <(mpi_x)
    x+=(-x TRANSFORMER_SHARE_GPU=1)
    check "2 ranks on one GPU, allreduce=mpi, TRANSFORMER_SHARE_GPU=1" to_log "$W/r2.log" \
        mpirun -np 2 "${x[@]}" "$BIN" train "${a[@]}" allreduce=mpi update_freq=1 --dump-params "$W/p2.bin"
    check "parameters before training" to_log "$W/r0.log" "$BIN" train "${a[@]}" train_steps=0 --dump-params "$W/p0.bin"
    check "losses of the $MPI_STEPS steps agree (relative 1e-6)" "${LIB[@]}" losses "$W/r1.log" "$W/r2.log" "$MPI_STEPS" 1e-6
    # 1 rank accumulates the two micro-batches' gradients in its GEMMs
    # (beta = 1), 2 ranks add theirs after: rounding apart, which Adam's
    # 1/sqrt(v) carries into the update (an H200: 4.2e-4 of the update,
    # 1.4e-6 of the parameters, 2026-11-26); a defect is of the update's order
    check "parameters agree (1e-3 of the update)" "${LIB[@]}" params "$W/p0.bin" "$W/p1.bin" "$W/p2.bin" 1e-3
    tail -n +1 "$W/r1.log" "$W/r2.log"
}

stage_bench() {
    ensure_built "$BIN" "$GPU_DIR/gemm_peak"
    local o
    o=$WORK/bench.txt
    mkdir -p "$WORK"
    # torch.compile (a minute a model) is the kit's compile stage, against
    # the strong baseline; TORCH_COMPILE=1 puts it back here
    check "make gpu-bench (tests/gpu/gpu_bench.sh, PRECS='${PRECS:-bf16 fp32}', TORCH_COMPILE=${TORCH_COMPILE:-0})" \
        timeout $((ACCEPT_STAGE_BUDGET - 30)) bash -c "set -o pipefail; PRECS='${PRECS:-bf16 fp32}' TORCH_COMPILE='${TORCH_COMPILE:-0}' TORCH_PY='${TORCH_PY:-python3}' tests/gpu/gpu_bench.sh | tee '$o'"
    # (the rows measured so far, also when the budget stopped it)
    local rows
    rows=$(grep -E '^(model|base|big|GPU)' "$o" || true)
    if [ -n "$rows" ]; then table '```' "$rows" '```'; fi
}

newest_ckpt() {
    local f c=
    for f in "$WORK"/train/fp32/ckpt_*.h5; do [ -f "$f" ] && c=$f; done
    echo "$c"
}

stage_decode() {
    need_data
    ensure_built
    W=$WORK/decode
    mkdir -p "$W"
    local ck
    ck=$(newest_ckpt)
    if [ -z "$ck" ]; then
        echo "no checkpoint of the train stage in $WORK/train/fp32: training $TRAIN_STEPS fp32 steps for one"
        local W0=$W
        W=$WORK/train; mkdir -p "$W"
        check "device=$DEVICE fp32, $TRAIN_STEPS steps (for a checkpoint)" train_run fp32 device="$DEVICE" precision=fp32 \
            train_steps="$TRAIN_STEPS" log_steps=10 ckpt_steps="$TRAIN_STEPS" ckpt_minutes=0
        W=$W0
        ck=$(newest_ckpt)
        [ -n "$ck" ] || { note "FAIL: no checkpoint to decode from"; return 0; }
    fi
    local split=${DECODE_SPLIT:-test2016} batch=${DECODE_BATCH:-64}
    check "ours: translate device=$DEVICE beam=4, $split" to_log "$W/ours.log" \
        "$BIN" translate --checkpoint "$ck" --data "$DATA" --split "$split" --output "$W/ours.txt" --batch-size "$batch" device="$DEVICE" beam=4
    local tp=${TORCH_PY:-python3} have=1
    "$tp" -c "import torch, h5py, sentencepiece" 2>/dev/null || have=0
    if [ "$have" = 1 ] && [ "$DEVICE" = cuda ]; then
        "$tp" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || have=0
    fi
    if [ "$have" = 0 ]; then
        note "FAIL: $tp lacks torch (with CUDA), h5py or sentencepiece: no PyTorch side"
        return 0
    fi
    check "PyTorch: tests/bench/torch_decode.py --device $DEVICE --beam 4" to_log "$W/torch.log" \
        "$tp" tests/bench/torch_decode.py "$ck" "$DATA" "$split" --beam 4 --batch "$batch" --threads 4 --device "$DEVICE" --out "$W/torch.ids"
    check "PyTorch ids detokenised with the dataset's SentencePiece model" "$tp" -c "
import h5py, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_proto=h5py.File('$DATA', 'r')['vocab/spm_model'][()].tobytes())
with open('$W/torch.ids') as f, open('$W/torch.txt', 'w') as g:
    for line in f:
        g.write(sp.decode([int(t) for t in line.split()]) + '\n')
print('ok')"
    local same so st
    same=$("${LIB[@]}" same "$W/ours.txt" "$W/torch.txt")
    so=$(sed -nE 's/.* ([0-9.]+) sentences\/s.*/\1/p' "$W/ours.log" | sed -n 1p)
    st=$(sed -nE 's/.* ([0-9.]+) sentences\/s.*/\1/p' "$W/torch.log" | sed -n 1p)
    note "identical outputs, ours vs PyTorch: $same"
    table "| $split, beam 4, batch $batch | ours sentences/s | PyTorch sentences/s | ours / PyTorch | identical outputs |" \
          "|---|---:|---:|---:|---:|" \
          "| $(basename "$ck") | $so | $st | $(awk -v a="$so" -v b="$st" 'BEGIN {if (b > 0) printf "%.2f", a / b}') | $same |"
    cat "$W/ours.log" "$W/torch.log"
}

