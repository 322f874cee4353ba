#!/usr/bin/env bash
# Ranks that share one emulated GPU (CUDA_EMU_DEVICES=1, allowed by
# TRANSFORMER_SHARE_GPU=1) under the strict emulator:
# - DEVMEM: the processes on one device share its memory: two ranks that
#   each fit alone run out of it together; a process killed without
#   cleaning up holds nothing; the accounting file goes with the last one;
# - NCCL_SAMEDEV: the emulated ncclCommInitRank refuses two ranks of one
#   communicator on one device, as NCCL does;
# - max_tokens=0 divides the device among the ranks that share it: the
#   two budgets together fit it (each rank reading all of it took ~2/3 of
#   3 GiB, 4/3 of the device together);
# - allreduce=auto takes the MPI fallback there, saying why; allreduce=nccl
#   is refused with one line.
set -u
. "$(dirname "$0")/lib.sh"
EMU=$TOP/bin/tests/emu-transformer
INIT=$TOP/bin/tests/emu-nccl-init
need_emulator "$EMU" "$INIT"
export OMP_NUM_THREADS=1 CUDA_EMU_DEVICES=1 CUDA_EMU_STRICT=${CUDA_EMU_STRICT:-1}
# this test's accounting files (/dev/shm/cuda-emu-SESSION-UUID), apart from any other run's
export CUDA_EMU_SESSION=test-shared-device-$$
W=$(mktemp -d); trap 'rm -rf "$W"; rm -f /dev/shm/cuda-emu-$CUDA_EMU_SESSION-*' EXIT
SHM=/dev/shm/cuda-emu-$CUDA_EMU_SESSION-emu-0
args="n_layers=1 d_model=24 d_ff=40 n_heads=2 d_k=8 d_v=12 max_len=14 synth_train=40 synth_dev=8 warmup=10
      threads=1 log_steps=1 ckpt_minutes=0 train_steps=1 device=cuda"
two=(mpirun -np 2 -x TRANSFORMER_SHARE_GPU=1)

# DEVMEM: 3 MB holds one rank's run (2.0-2.25 MB, 1 MiB of it the cuBLASLt
# workspace the emulated heuristic asks for), not two
"${two[@]}" -x CUDA_EMU_MEMORY=3000000 -x CUDA_EMU_STRICT_DEVMEM=0 "$EMU" train $args max_tokens=160 allreduce=mpi \
    run_dir=$W/apart > $W/apart.log 2>&1 || fail "2 ranks with a 3 MB device each (DEVMEM off): $(tail -3 $W/apart.log)"
expect_error 1 "error: .*out of .*memory" \
    "${two[@]}" -x CUDA_EMU_MEMORY=3000000 "$EMU" train $args max_tokens=160 allreduce=mpi run_dir=$W/together
ok "DEVMEM: 2 ranks that each fit a 3 MB device alone do not fit it together"
# a process killed at step 2 (its activations made) leaves its slot; the next one ignores it and
# the last one out removes the file
rm -f $SHM
# (in a subshell that says nothing about the kill)
(TRANSFORMER_FAIL_AT=0:2:KILL CUDA_EMU_MEMORY=3000000 "$EMU" train $args max_tokens=160 train_steps=3 \
    run_dir=$W/killed > $W/killed.log 2>&1; exit $?) 2>/dev/null && fail "TRANSFORMER_FAIL_AT=0:2:KILL: the run exited 0"
[ -s $SHM ] || fail "the killed process left no accounting file $SHM"
# (and a file of another run whose processes all died is swept away)
OLD=/dev/shm/cuda-emu-$CUDA_EMU_SESSION-old-emu-0
python3 -c 'import struct, sys; open(sys.argv[1], "wb").write(struct.pack("<qQ", int(sys.argv[2]), 1 << 20) + bytes(16 * 63))' \
    $OLD "$(sh -c 'echo $$')"
CUDA_EMU_MEMORY=3000000 "$EMU" train $args max_tokens=160 run_dir=$W/after > $W/after.log 2>&1 \
    || fail "a run after a killed one on the same 3 MB device: $(tail -3 $W/after.log)"
[ -e $SHM ] && fail "the accounting file $SHM outlived the last process"
[ -e $OLD ] && fail "the accounting file $OLD of dead processes was not swept"
ok "DEVMEM: a killed process's bytes are not counted; the file goes with the last process; dead runs' files are swept"

# NCCL_SAMEDEV: two ranks on device 0 (exit 3: ncclInvalidUsage)
mpirun -np 2 "$INIT" 0 > $W/init.log 2>&1; rc=$?
[ $rc = 3 ] && grep -q "ncclCommInitRank: invalid usage" $W/init.log || fail "NCCL_SAMEDEV: exit $rc: $(cat $W/init.log)"
mpirun -np 2 -x CUDA_EMU_STRICT_NCCL_SAMEDEV=0 "$INIT" 0 > $W/init.log 2>&1 || fail "NCCL_SAMEDEV=0: $(cat $W/init.log)"
mpirun -np 2 -x CUDA_EMU_DEVICES=2 "$INIT" > $W/init.log 2>&1 || fail "2 ranks on 2 devices: $(cat $W/init.log)"
ok "NCCL_SAMEDEV: ncclCommInitRank refuses 2 ranks on one device (ncclInvalidUsage), takes 2 devices"

# max_tokens=0 on a 3 GiB device that 2 ranks share: each budgets half of
# the free memory, so the two budgets fit the device together
CAP=3221225472
"${two[@]}" -x CUDA_EMU_MEMORY=$CAP "$EMU" train $args max_tokens=0 allreduce=mpi run_dir=$W/auto > $W/auto.log 2>&1 \
    || fail "max_tokens=0, 2 ranks on one device: $(tail -3 $W/auto.log)"
python3 - $W/auto.log $CAP 14 <<'PY' || fail "max_tokens=0, 2 ranks on one device: overcommitted: $(grep '^max_tokens' $W/auto.log)"
import re, sys
log, cap, L = open(sys.argv[1]).read(), int(sys.argv[2]), int(sys.argv[3])
m = re.search(r"^max_tokens: (\d+) from free device memory \(([0-9.e+-]+) GiB free, ([0-9.e+-]+) MiB per sentence", log, re.M)
n, per = int(m.group(1)), float(m.group(3)) * 2**20
both = 2 * (n // L) * per
print("2 ranks x", n // L, "sentences x", per, "bytes =", both, "of", cap)
assert both <= cap, (both, cap)
assert "1/2 of the" in m.string[m.start():m.string.index("\n", m.start())]
PY
ok "max_tokens=0, 2 ranks on one 3 GiB device: $(sed -n 's/^max_tokens: \([0-9]*\) .*/\1/p' $W/auto.log) tokens each, both budgets fit"

# allreduce=auto: the MPI fallback, said at start-up; allreduce=nccl: one line
out=$("${two[@]}" "$EMU" train $args max_tokens=160 run_dir=$W/ar 2>&1) || fail "allreduce=auto, shared device: $out"
echo "$out" | grep -q "^allreduce path: mpi on host copies (ranks share a GPU, which NCCL does not support)" \
    || fail "allreduce=auto, shared device: no 'allreduce path: mpi ...' line: $out"
ok "allreduce=auto with 2 ranks on one GPU: $(echo "$out" | grep '^allreduce path')"
expect_error 1 "^error: device=cuda: allreduce=nccl, but ranks 0 and 1 share GPU 0, which NCCL does not support" \
    "${two[@]}" "$EMU" train $args max_tokens=160 allreduce=nccl run_dir=$W/nccl
n=$("${two[@]}" "$EMU" train $args max_tokens=160 allreduce=nccl run_dir=$W/nccl 2>&1 >/dev/null | grep -c '^error:')
[ "$n" -eq 1 ] || fail "allreduce=nccl with a shared GPU: $n error lines, expected 1"
true
