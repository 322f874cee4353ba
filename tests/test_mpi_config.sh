#!/usr/bin/env bash
# Ranks that disagree on the configuration are caught at start-up (MPMD
# launch with a different key on one rank): exit 2, one error line naming the
# rank and the differing key, no training step.
set -u
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
A="train_steps=5 log_steps=1 threads=1 synth_train=100 synth_dev=20 max_tokens=256
   n_layers=1 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16"

check() {   # check PATTERN mpirun-args...
    local pat=$1; shift
    timeout -s KILL 30 mpirun "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
    [ "$rc" -eq 2 ] || fail "mpirun $*: exit $rc, expected 2: $(cat "$tmp/err")"
    [ "$(grep -c '^error: ' "$tmp/err")" -eq 1 ] || fail "expected one error line: $(cat "$tmp/err")"
    grep -q "^error: ranks disagree on the configuration: $pat" "$tmp/err" || fail "error lacks '$pat': $(cat "$tmp/err")"
    grep -q '^step' "$tmp/out" && fail "training started despite the mismatch"
    ok "$(grep '^error' "$tmp/err")"
}
check "rank 1 has 'seed = 2', rank 0 has 'seed = 1'" \
    -np 1 "$BIN" train $A : -np 1 "$BIN" train $A seed=2
check "rank 2 has 'd_model = 64', rank 0 has 'd_model = 32'" \
    -np 2 "$BIN" train $A : -np 1 "$BIN" train $A d_model=64 d_k=32
# the same configuration from a file and from the command line is accepted
printf 'seed = 7\nd_model = 32\n' >"$tmp/a.cfg"
timeout -s KILL 30 mpirun -np 1 "$BIN" train $A --config "$tmp/a.cfg" : -np 1 "$BIN" train $A seed=7 >"$tmp/out" 2>"$tmp/err" \
    || fail "equal configurations rejected: $(cat "$tmp/err")"
grep -q '^step 5 ' "$tmp/out" || fail "equal configurations did not train"
ok "equal configurations from a file and the command line train"
# a bad key: one error line from 2 ranks (rank 0's), and from the one rank
# of an MPMD launch that has it
for launch in "-np 2 $BIN train $A bogus_key=1" "-np 1 $BIN train $A : -np 1 $BIN train $A bogus_key=1"; do
    timeout -s KILL 30 mpirun $launch >"$tmp/out" 2>"$tmp/err"; rc=$?
    [ "$rc" -eq 2 ] || fail "mpirun $launch: exit $rc, expected 2: $(cat "$tmp/err")"
    [ "$(grep -c '^error: ' "$tmp/err")" -eq 1 ] && grep -q "^error: command line: unknown key 'bogus_key'" "$tmp/err" \
        || fail "mpirun $launch: expected one error line: $(grep '^error' "$tmp/err")"
done
ok "a bad key under mpirun: one error line, whichever rank has it"
# batch_tokens that one micro-batch per rank already exceeds: the global
# batch grows with the ranks; rank 0 warns once with the max_tokens that
# keeps it, and a budget that fits gives no warning
timeout -s KILL 60 mpirun -np 2 "$BIN" train $A batch_tokens=300 >"$tmp/out" 2>"$tmp/err" \
    || fail "batch_tokens=300 on 2 ranks: $(cat "$tmp/err")"
[ "$(grep -c '^warning: batch_tokens' "$tmp/err")" -eq 1 ] \
    && grep -q '^warning: batch_tokens=300, but 2 ranks x max_tokens 256 make 512 tokens per step (1.7x): set max_tokens=150 to keep the global batch$' "$tmp/err" \
    || fail "expected one batch warning: $(cat "$tmp/err")"
timeout -s KILL 60 mpirun -np 2 "$BIN" train $A batch_tokens=1024 >"$tmp/out" 2>"$tmp/err" \
    || fail "batch_tokens=1024 on 2 ranks: $(cat "$tmp/err")"
grep -q '^warning: batch_tokens' "$tmp/err" && fail "a batch that fits warned: $(cat "$tmp/err")"
ok "a global batch past batch_tokens warns once, naming the max_tokens that keeps it"
# srun whose --mpi does not match the MPI library: every task is a 1-rank
# job (simulated: srun's variables on a plain process).  Task 0 says so in one
# line, every task exits 2, nothing is written; mpirun's ranks are left alone
for procid in 1 0; do
    SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=$procid timeout -s KILL 60 "$BIN" train $A run_dir="$tmp/single" \
        >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq 2 ] && [ ! -e "$tmp/single" ] || fail "srun task $procid as a singleton: exit $rc: $(cat "$tmp/err")"
    n=$(grep -c . "$tmp/err")
    [ "$n" -eq $((procid == 0 ? 1 : 0)) ] || fail "srun task $procid as a singleton: $n error lines: $(cat "$tmp/err")"
done
grep -q "^error: srun started 2 tasks, but MPI sees each as a job of 1 rank: srun's --mpi does not match" "$tmp/err" ||
    fail "no clear message for srun tasks that are 1-rank MPI jobs"
SLURM_STEP_NUM_TASKS=2 timeout -s KILL 60 mpirun -np 1 "$BIN" train $A train_steps=1 >"$tmp/out" 2>"$tmp/err" ||
    fail "mpirun -np 1 inside a 2-task srun step was refused: $(cat "$tmp/err")"
ok "srun tasks that MPI sees as 1-rank jobs are refused in one line (task 0), before writing anything"
