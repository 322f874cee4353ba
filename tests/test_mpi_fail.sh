#!/usr/bin/env bash
# A failed rank takes the whole job down within 10 s of the failure, non-zero, with a
# message naming the rank: an error (die -> MPI_Abort), a crash (SIGSEGV
# handler -> MPI_Abort) and a rank killed from outside with SIGKILL.  The
# surviving rank is then blocked in the gradient allreduce: without the abort
# the job would hang.
set -u
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
A="train_steps=100000 log_steps=1 threads=1 synth_train=500 synth_dev=20 max_tokens=256
   n_layers=1 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16"

# run_timed LIMIT cmd...: run it (a hang guard kills it after 300 s); set rc
# and secs, the seconds from the injected failure (its "rank R: injected
# failure" or "rank R: raising signal" line) to the job's end, which must be
# under LIMIT.  The launch and the steps before the failure are not counted:
# under load they take what they take, and the limit is about the abort.
FAILED_AT='^(error: )?rank [0-9]+: (injected failure|raising signal)'
run_timed() {
    local lim=$1; shift
    : > "$tmp/err"   # the last case's lines must not count as this one's failure
    local start=$SECONDS t0=
    timeout -s KILL 300 "$@" >"$tmp/out" 2>"$tmp/err" &
    local pid=$!
    while kill -0 $pid 2>/dev/null; do
        [ -z "$t0" ] && grep -Eq "$FAILED_AT" "$tmp/err" && t0=$(date +%s.%N)
        sleep 0.05
    done
    wait $pid; rc=$?
    [ -n "$t0" ] || t0=$(date +%s.%N)   # no failure line before the end (a refused start)
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    [ $((SECONDS - start)) -lt 299 ] || fail "job still running after 300 s (killed): $(tail -3 "$tmp/err")"
    awk -v s="$secs" -v l="$lim" 'BEGIN { exit !(s < l) }' ||
        fail "job ended ${secs}s after the failure (limit ${lim}s): $(tail -3 "$tmp/err")"
}

# 1. an error on rank 1 at step 3
TRANSFORMER_FAIL_AT=1:3 run_timed 10 mpirun -np 2 "$BIN" train $A
[ "$rc" -ne 0 ] || fail "injected error: job exited 0"
grep -q '^error: rank 1: injected failure at step 3' "$tmp/err" || fail "no error line naming rank 1: $(cat "$tmp/err")"
grep -q '^step 2 ' "$tmp/out" || fail "the job did not run up to the failure: $(cat "$tmp/out")"
ok "error on rank 1: exit $rc after ${secs}s: $(grep -m1 '^error' "$tmp/err")"

# 2. a crash (SIGSEGV) on rank 0
TRANSFORMER_FAIL_AT=0:3:SEGV run_timed 10 mpirun -np 2 "$BIN" train $A
[ "$rc" -ne 0 ] || fail "SIGSEGV: job exited 0"
grep -q '^error: rank 0: killed by signal 11 (SIGSEGV)' "$tmp/err" || fail "no line naming rank 0 and the signal: $(cat "$tmp/err")"
ok "SIGSEGV on rank 0: exit $rc after ${secs}s: $(grep -m1 '^error' "$tmp/err")"

# 3. rank 1 killed from outside with SIGKILL (no handler can run)
t0=$(date +%s.%N)
mpirun -np 2 "$BIN" train $A >"$tmp/out" 2>"$tmp/err" &
mp=$!
victim=
for _ in $(seq 1200); do   # wait until training runs (up to 120 s), then find rank 1 among mpirun's children
    kill -0 $mp 2>/dev/null || break
    if grep -q '^step 3 ' "$tmp/out" 2>/dev/null; then
        for c in $(pgrep -P $mp); do
            tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$c
        done
        break
    fi
    sleep 0.1
done
[ -n "$victim" ] || { kill $mp; fail "could not find rank 1 of mpirun $mp: $(cat "$tmp/err")"; }
t0=$(date +%s.%N)
kill -KILL "$victim"
for _ in $(seq 100); do kill -0 $mp 2>/dev/null || break; sleep 0.1; done
if kill -0 $mp 2>/dev/null; then kill $mp; fail "job still running 10 s after rank 1 was killed"; fi
wait $mp; rc=$?
secs=$(echo "$(date +%s.%N) - $t0" | bc)
[ "$rc" -ne 0 ] || fail "SIGKILL: job exited 0"
grep -q 'rank 1 .*exited on signal 9' "$tmp/err" || fail "no message naming rank 1 and signal 9: $(cat "$tmp/err")"
ok "rank 1 killed by SIGKILL: exit $rc after ${secs}s: $(grep -m1 'rank 1' "$tmp/err")"

# 4. a bad fault specification is an input error, not a silent no-op
TRANSFORMER_FAIL_AT=1 run_timed 10 "$BIN" train $A train_steps=1
[ "$rc" -eq 2 ] && grep -q '^error: TRANSFORMER_FAIL_AT=1: expected' "$tmp/err" || fail "bad TRANSFORMER_FAIL_AT: rc $rc $(cat "$tmp/err")"
ok "malformed TRANSFORMER_FAIL_AT rejected"

# 5. a peer that hangs (rank 1 stopped with SIGSTOP at step 3: alive, never
#    joining the allreduce): rank 0's watchdog ends the job after
#    allreduce_timeout seconds with a line saying so, not at the time limit
TRANSFORMER_FAIL_AT=1:3:STOP run_timed 15 mpirun -np 2 "$BIN" train $A allreduce_timeout=2
[ "$rc" -ne 0 ] || fail "stopped peer: job exited 0"
grep -q '^error: rank 0: the gradient allreduce made no progress for 2 s (allreduce_timeout)' "$tmp/err" ||
    fail "no watchdog line from rank 0: $(cat "$tmp/err")"
# (counted from when the poll saw rank 1's line, up to 50 ms late: 1.9 s)
awk -v s="$secs" 'BEGIN { exit !(s >= 1.9) }' || fail "the watchdog fired before its 2 s (${secs}s)"
ok "rank 1 stopped at step 3: rank 0's watchdog ended the job after ${secs}s: $(grep -m1 '^error' "$tmp/err")"
