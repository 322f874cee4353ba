#!/usr/bin/env bash
# Exact resume with 2 MPI ranks and update_freq 2 (SIGKILL of the ranks after a checkpoint),
# and the preemption contract: SIGUSR1 (2 ranks, through mpirun) or SIGTERM
# (1 rank, test_ckpt_resume.sh) -> the step finishes, a checkpoint is written, exit code 99, and
# the resumed run is bitwise equal to an uninterrupted one.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ckpt_lib.sh"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
STEPS=30
MPI="mpirun -np 2"
# gradient accumulation too: the data position is (step, rank, micro-batch)
CK_ARGS="$CK_ARGS update_freq=2"

$MPI $BIN train $CK_ARGS run_dir=$W/ref train_steps=$STEPS ckpt_steps=10 > $W/ref.log 2>&1 || fail "2-rank reference: $(tail -3 $W/ref.log)"
grep -q "2 ranks" $W/ref.log || fail "not 2 ranks"
ok "2-rank uninterrupted run"

# SIGKILL both ranks once checkpoint 10 is in place
$MPI -x TRANSFORMER_CKPT_STOP_STEP=10 $BIN train $CK_ARGS run_dir=$W/k train_steps=$STEPS ckpt_steps=10 > $W/k1.log 2>&1 &
mp=$!
wait_file $W/k/ckpt_00000010.h5 $mp || fail "no checkpoint 10"
wait_stopped $(pgrep -P $mp) || fail "rank 0 did not stop at checkpoint 10"
for p in $(pgrep -P $mp); do kill -9 $p; done
wait $mp 2>/dev/null
grep -q "dev final" $W/k1.log && fail "run finished before it was killed"
$MPI $BIN train $CK_ARGS run_dir=$W/k train_steps=$STEPS ckpt_steps=10 > $W/k2.log 2>&1 || fail "2-rank resume: $(tail -3 $W/k2.log)"
grep -q "^resume: " $W/k2.log || fail "did not resume"
same_state $W/ref/ckpt_00000030.h5 $W/k/ckpt_00000030.h5
ok "2 ranks killed and resumed: bitwise equal ($(grep '^resume' $W/k2.log | sed 's|.*/||'))"

# preemption through mpirun: SIGUSR1 is forwarded to the ranks
# (rank 0 freezes at checkpoint 10 so the signal surely comes before the end)
$MPI -x TRANSFORMER_CKPT_STOP_STEP=10 $BIN train $CK_ARGS run_dir=$W/p train_steps=$STEPS ckpt_steps=10 > $W/p1.log 2>&1 &
mp=$!
wait_file $W/p/ckpt_00000010.h5 $mp || fail "no checkpoint 10 (preemption run)"
wait_stopped $(pgrep -P $mp) || fail "rank 0 did not stop at checkpoint 10"
kill -USR1 $mp
wait_usr1_pending $(pgrep -P $mp) || fail "mpirun did not forward SIGUSR1 to the stopped rank within 60 s"
for p in $(pgrep -P $mp); do kill -CONT $p; done
wait $mp; rc=$?
[ $rc -eq 99 ] || fail "preempted 2-rank run exited $rc, expected 99: $(tail -3 $W/p1.log)"
st=$(grep -o 'preempted: checkpoint of step [0-9]*' $W/p1.log | grep -o '[0-9]*$')
[ -n "$st" ] && [ "$st" -lt $STEPS ] || fail "no preemption message: $(tail -3 $W/p1.log)"
[ -f $W/p/$(printf 'ckpt_%08d.h5' $st) ] || fail "no checkpoint of the preempted step $st"
$MPI $BIN train $CK_ARGS run_dir=$W/p train_steps=$STEPS ckpt_steps=10 > $W/p2.log 2>&1 || fail "resume after preemption"
grep -q "resume: .*(step $st," $W/p2.log || fail "did not resume from step $st"
same_state $W/ref/ckpt_00000030.h5 $W/p/ckpt_00000030.h5
ok "SIGUSR1 -> checkpoint of step $st, exit 99; resumed bitwise equal"

