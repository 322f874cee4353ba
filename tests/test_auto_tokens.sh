#!/usr/bin/env bash
# max_tokens = 0 (device=cuda): the micro-batch size from the free device
# memory (src/auto_tokens.h), under the CUDA emulator whose cudaMemGetInfo
# reports CUDA_EMU_MEMORY less what is cudaMalloc'd.  A larger device gives
# a larger max_tokens, whose sentences of max_len fit it, and training
# runs with it; 2 ranks with different capacities agree on the smaller;
# eval resolves it too; device=cpu refuses it with one line, and so does
# a device too small for one sentence (exit 1); the logits in chunks
# (logits_chunk) are counted once, not per sentence; a run
# interrupted and resumed on a device of another size keeps the value of
# its checkpoint and ends bitwise equal to an uninterrupted run.
set -u
. "$(dirname "$0")/lib.sh"
EMU=$TOP/bin/tests/emu-transformer
need_emulator "$EMU"
export OMP_NUM_THREADS=1 CUDA_EMU_DEVICES=2
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
L=14
A="n_layers=1 d_model=24 d_ff=40 n_heads=2 d_k=8 d_v=12 max_len=$L synth_train=300 synth_dev=8 threads=1
   log_steps=1 ckpt_minutes=0 warmup=10 device=cuda max_tokens=0"
SMALL=4000000 LARGE=8000000   # bytes of emulated device memory

# tokens LOG: N of the one "max_tokens: N from free device memory" line
tokens() {
    local n
    n=$(grep -c '^max_tokens: [0-9]* from free device memory' "$1")
    [ "$n" -eq 1 ] || fail "$1: $n 'max_tokens: N from free device memory' lines, expected 1: $(head -3 "$1")"
    sed -n 's/^max_tokens: \([0-9]*\) from free device memory.*/\1/p' "$1"
}
# fits LOG CAPACITY: the chosen sentences of max_len tokens times the
# measured bytes per sentence are within the device's capacity
fits() {
    python3 - "$1" "$2" "$L" <<'PY' || fail "$1: the chosen max_tokens does not fit $2 bytes: $(grep '^max_tokens' "$1")"
import re, sys
log, cap, L = open(sys.argv[1]).read(), int(sys.argv[2]), int(sys.argv[3])
m = re.search(r"^max_tokens: (\d+) from free device memory \(([0-9.e+-]+) GiB free, ([0-9.e+-]+) MiB per sentence", log, re.M)
n, free, per = int(m.group(1)), float(m.group(2)) * 2**30, float(m.group(3)) * 2**20
assert n % L == 0 and n > 0, n
# 3 significant digits printed: 0.5% slack on the per-sentence bytes
assert n // L * per * 0.995 <= free <= cap, (n, free, per, cap)
print("ok:", n // L, "sentences x", per, "bytes <=", free, "free of", cap)
PY
}

for cap in $SMALL $LARGE; do
    CUDA_EMU_MEMORY=$cap "$EMU" train $A train_steps=3 > $W/cap$cap.log 2>&1 || fail "train with $cap bytes: $(tail -3 $W/cap$cap.log)"
    grep -q "^dev final" $W/cap$cap.log || fail "train with $cap bytes did not finish"
    fits $W/cap$cap.log $cap
done
small=$(tokens $W/cap$SMALL.log) large=$(tokens $W/cap$LARGE.log)
[ "$small" -gt 0 ] && [ "$large" -gt "$small" ] || fail "max_tokens $small ($SMALL bytes) and $large ($LARGE bytes): not growing"
ok "max_tokens=0: $small tokens on $SMALL bytes, $large on $LARGE; they fit, and training completes"

# the logits in chunks of 3 target rows (logits_chunk): counted once, not
# per sentence, so at least as many tokens, which fit (training completes)
CUDA_EMU_MEMORY=$SMALL "$EMU" train $A train_steps=3 logits_chunk=3 > $W/chunk.log 2>&1 || fail "logits_chunk=3: $(tail -3 $W/chunk.log)"
grep -q "^dev final" $W/chunk.log || fail "train with logits_chunk=3 did not finish"
fits $W/chunk.log $SMALL
chunked=$(tokens $W/chunk.log)
[ "$chunked" -ge "$small" ] || fail "logits_chunk=3: max_tokens $chunked, fewer than one chunk's $small"
ok "max_tokens=0, logits_chunk=3: $chunked tokens on $SMALL bytes (one chunk: $small); training completes"

# 2 ranks, rank 0 on the larger device: both take the smaller device's value
mpirun -np 1 -x CUDA_EMU_MEMORY=$LARGE "$EMU" train $A train_steps=3 : -np 1 -x CUDA_EMU_MEMORY=$SMALL "$EMU" train $A train_steps=3 \
    > $W/mpi.log 2>&1 || fail "2 ranks: $(tail -3 $W/mpi.log)"
grep -q "^dev final" $W/mpi.log || fail "2-rank run did not finish"
[ "$(tokens $W/mpi.log)" = "$small" ] || fail "2 ranks chose $(tokens $W/mpi.log), expected the smaller device's $small"
ok "2 ranks on devices of $LARGE and $SMALL bytes: one max_tokens line, $small (the least), run completes"

# a device that holds the model but not one sentence of max_len: the
# measurement's own reservation fails, one line, exit 1 (no training)
expect_error 1 "^error: cuda: out of device memory allocating" env CUDA_EMU_MEMORY=230000 "$EMU" train $A train_steps=3
n=$(CUDA_EMU_MEMORY=230000 "$EMU" train $A train_steps=3 2>&1 >/dev/null | grep -c .)
[ "$n" -eq 1 ] || fail "max_tokens=0 on a device too small for a sentence: $n lines on stderr, expected 1"

expect_error 2 "^error: command line: key 'max_tokens': 0 (from free device memory) needs device=cuda" \
    "$EMU" train $A device=cpu
n=$("$EMU" train $A device=cpu 2>&1 >/dev/null | grep -c .)
[ "$n" -eq 1 ] || fail "max_tokens=0 device=cpu: $n lines on stderr, expected 1"

# uninterrupted, against 4 steps on the small device resumed on the large
# one (which alone would choose $large): the checkpoint's value is kept
CUDA_EMU_MEMORY=$SMALL "$EMU" train $A train_steps=8 run_dir=$W/ref > $W/ref.log 2>&1 || fail "reference: $(tail -3 $W/ref.log)"
CUDA_EMU_MEMORY=$SMALL "$EMU" train $A train_steps=4 run_dir=$W/k > $W/k1.log 2>&1 || fail "first part: $(tail -3 $W/k1.log)"
CUDA_EMU_MEMORY=$LARGE "$EMU" train $A train_steps=8 run_dir=$W/k > $W/k2.log 2>&1 || fail "resumed part: $(tail -3 $W/k2.log)"
grep -q "^resume: .*ckpt_00000004.h5 (step 4" $W/k2.log || fail "did not resume from step 4: $(head -3 $W/k2.log)"
grep -q "^max_tokens: $small from .*ckpt_00000004.h5 (max_tokens = 0 resumes with the value the run chose)$" $W/k2.log \
    || fail "the resumed run did not take max_tokens from its checkpoint: $(head -3 $W/k2.log)"
grep -q "from free device memory" $W/k2.log && fail "the resumed run measured the device again"
grep -q "warning" $W/k2.log && fail "resume warned: $(grep warning $W/k2.log)"
h5diff -q $W/ref/ckpt_00000008.h5 $W/k/ckpt_00000008.h5 /params /params > /dev/null \
    || fail "/params differ after the resume: $(h5diff -r $W/ref/ckpt_00000008.h5 $W/k/ckpt_00000008.h5 /params /params | head -5)"
ok "max_tokens=0 interrupted at step 4 and resumed with $LARGE bytes: its checkpoint's $small kept, /params bitwise equal"

# eval of that checkpoint with max_tokens=0 resolves it on its own device
CUDA_EMU_MEMORY=$LARGE "$EMU" eval --checkpoint $W/k/ckpt_00000008.h5 --data synthetic max_tokens=0 > $W/eval.log 2>&1 \
    || fail "eval max_tokens=0: $(tail -3 $W/eval.log)"
[ "$(tokens $W/eval.log)" = "$large" ] && grep -q "^eval dev " $W/eval.log || fail "eval max_tokens=0: $(cat $W/eval.log)"
ok "eval max_tokens=0: $large tokens on $LARGE bytes"
