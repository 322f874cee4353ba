#!/usr/bin/env bash
# Exact resume on 1 rank: a run killed with SIGKILL after a checkpoint and
# resumed ends with parameters and Adam moments bitwise equal to those of an
# uninterrupted run; a run killed inside a checkpoint write (between the
# write and the rename) leaves the previous checkpoint intact and resumes.
# A resume with a changed schedule, optimiser or regularisation says which
# keys changed in one warning line; a longer train_steps says nothing.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ckpt_lib.sh"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
STEPS=40

# reference: uninterrupted
$BIN train $CK_ARGS run_dir=$W/ref train_steps=$STEPS ckpt_steps=10 keep_ckpts=3 > $W/ref.log 2>&1 || fail "reference run: $(tail -3 $W/ref.log)"
[ -f $W/ref/ckpt_00000040.h5 ] || fail "no final checkpoint"
# keep_ckpts=3 of 4 (10..40): the oldest is pruned
[ ! -e $W/ref/ckpt_00000010.h5 ] && [ -e $W/ref/ckpt_00000020.h5 ] || fail "keep_ckpts=3 not honoured: $(ls $W/ref)"
ok "uninterrupted run, last 3 checkpoints kept"

# kill -9 once the checkpoint of step 20 is in place (the test hook writes
# it in the foreground and freezes the process there, at step 20)
TRANSFORMER_CKPT_STOP_STEP=20 $BIN train $CK_ARGS run_dir=$W/k train_steps=$STEPS ckpt_steps=10 > $W/k1.log 2>&1 &
pid=$!
wait_stopped $pid || fail "run did not stop at checkpoint 20"
kill -9 $pid; wait $pid 2>/dev/null
grep -q "dev final" $W/k1.log && fail "run finished before it was killed"
last=$(ls $W/k | grep '^ckpt_' | tail -1)
ok "killed after checkpoint(s), newest $last"
$BIN train $CK_ARGS run_dir=$W/k train_steps=$STEPS ckpt_steps=10 > $W/k2.log 2>&1 || fail "resume: $(tail -3 $W/k2.log)"
grep -q "^resume: .*ckpt_" $W/k2.log || fail "did not resume: $(head -3 $W/k2.log)"
same_state $W/ref/ckpt_00000040.h5 $W/k/ckpt_00000040.h5
# the dev loss printed at the end agrees too
[ "$(grep 'dev final' $W/ref.log)" = "$(grep 'dev final' $W/k2.log)" ] || fail "dev loss differs"
ok "resumed run bitwise equal to the uninterrupted one ($(grep '^resume' $W/k2.log))"

# explicit --resume with a changed train_steps (allowed) continues to 40
$BIN train $CK_ARGS run_dir=$W/r train_steps=30 ckpt_steps=10 > /dev/null 2>&1 || fail "30-step run"
$BIN train --resume $CK_ARGS run_dir=$W/r train_steps=$STEPS ckpt_steps=10 > $W/r.log 2>&1 || fail "--resume: $(tail -3 $W/r.log)"
grep -q "resume: .*ckpt_00000030.h5 (step 30" $W/r.log || fail "--resume did not start at 30"
same_state $W/ref/ckpt_00000040.h5 $W/r/ckpt_00000040.h5
! grep -q "^warning: .*settings differ" $W/r.log || fail "a longer train_steps warned: $(grep '^warning' $W/r.log)"
ok "train --resume with a longer train_steps: bitwise equal, no warning"

# fault injection: the process dies between the write of checkpoint 30 and its rename
TRANSFORMER_CKPT_FAULT_STEP=30 $BIN train $CK_ARGS run_dir=$W/f train_steps=$STEPS ckpt_steps=10 > $W/f1.log 2>&1
rc=$?
[ $rc -eq 137 ] || fail "fault-injected run exited $rc, expected 137 (SIGKILL)"
ls $W/f/.ckpt_00000030.h5.*.tmp > /dev/null 2>&1 || fail "no temporary left by the killed write: $(ls -a $W/f)"
[ ! -e $W/f/ckpt_00000030.h5 ] || fail "checkpoint 30 in place although the rename never happened"
h5dump -H $W/f/ckpt_00000020.h5 > /dev/null || fail "previous checkpoint unreadable"
$BIN train $CK_ARGS run_dir=$W/f train_steps=$STEPS ckpt_steps=10 > $W/f2.log 2>&1 || fail "resume after fault: $(tail -3 $W/f2.log)"
grep -q "resume: .*ckpt_00000020.h5 (step 20" $W/f2.log || fail "did not resume from 20: $(head -2 $W/f2.log)"
ls $W/f/.ckpt_00000030.h5.*.tmp > /dev/null 2>&1 && fail "stale temporary not cleaned up: $(ls -a $W/f)"
same_state $W/ref/ckpt_00000040.h5 $W/f/ckpt_00000040.h5
ok "killed during a checkpoint write: previous checkpoint intact, resume bitwise equal"

# preemption contract on 1 rank: SIGTERM -> checkpoint, exit 99, exact resume
TRANSFORMER_CKPT_STOP_STEP=10 $BIN train $CK_ARGS run_dir=$W/t train_steps=$STEPS ckpt_steps=10 > $W/t1.log 2>&1 &
pid=$!
wait_stopped $pid || fail "SIGTERM run did not stop at checkpoint 10"
kill -TERM $pid
kill -CONT $pid
wait $pid; rc=$?
[ $rc -eq 99 ] || fail "SIGTERM run exited $rc, expected 99"
$BIN train $CK_ARGS run_dir=$W/t train_steps=$STEPS ckpt_steps=10 > $W/t2.log 2>&1 || fail "resume after SIGTERM"
same_state $W/ref/ckpt_00000040.h5 $W/t/ckpt_00000040.h5
ok "SIGTERM on 1 rank -> exit 99; resumed bitwise equal"

# metrics log: one row per log interval, rows after the resumed checkpoint replaced
python_ok=$($PY - "$W/ref/metrics.h5" "$W/k/metrics.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
sa, sb = a["train/step"][:], b["train/step"][:]
assert list(sa) == list(range(5, 41, 5)), sa
assert list(sb) == list(sa), sb
assert np.array_equal(a["train/loss"][:], b["train/loss"][:])
# target tokens per interval: the same batches, so the same counts, all > 0
assert np.array_equal(a["train/tokens"][:], b["train/tokens"][:]) and (a["train/tokens"][:] > 0).all()
assert a["dev/step"][-1] == 40 and np.isfinite(a["dev/ppl"][:]).all()
print("yes")
PY
)
[ "$python_ok" = yes ] || fail "metrics.h5 check failed"
ok "metrics.h5: one row per 5 steps, resumed log equal to the uninterrupted one"
# resumed from a checkpoint between two log lines (14, with log_steps=5):
# the checkpoint carries the loss and tokens of steps 11-14, so the row of
# step 15 and the log line are the uninterrupted run's (not step 15's alone)
TRANSFORMER_CKPT_STOP_STEP=14 $BIN train $CK_ARGS run_dir=$W/m train_steps=$STEPS ckpt_steps=7 > $W/m1.log 2>&1 &
pid=$!
wait_stopped $pid || fail "run did not stop at checkpoint 14"
kill -9 $pid; wait $pid 2>/dev/null
[ -e $W/m/ckpt_00000014.h5 ] && [ ! -e $W/m/ckpt_00000021.h5 ] || fail "expected to resume from checkpoint 14: $(ls $W/m)"
$BIN train $CK_ARGS run_dir=$W/m train_steps=$STEPS ckpt_steps=7 > $W/m2.log 2>&1 || fail "resume from 14: $(tail -3 $W/m2.log)"
grep -q "^resume: .*ckpt_00000014.h5 (step 14" $W/m2.log || fail "did not resume from 14: $(head -2 $W/m2.log)"
[ "$(grep '^step 15 ' $W/ref.log | cut -d' ' -f1-4)" = "$(grep '^step 15 ' $W/m2.log | cut -d' ' -f1-4)" ] ||
    fail "log line of step 15 differs: $(grep '^step 15 ' $W/ref.log) / $(grep '^step 15 ' $W/m2.log)"
python_ok=$($PY - "$W/ref/metrics.h5" "$W/m/metrics.h5" "$W/m/ckpt_00000035.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
assert list(b["train/step"][:]) == list(a["train/step"][:]), b["train/step"][:]
assert np.array_equal(a["train/loss"][:], b["train/loss"][:]), (a["train/loss"][:], b["train/loss"][:])
assert np.array_equal(a["train/tokens"][:], b["train/tokens"][:]), (a["train/tokens"][:], b["train/tokens"][:])
# a checkpoint on a log line (35) carries no interval
assert "log_interval_tokens" not in h5py.File(sys.argv[3], "r").attrs
print("yes")
PY
)
[ "$python_ok" = yes ] || fail "metrics.h5 after a resume between two log lines: $python_ok"
ok "resumed from checkpoint 14, between log lines: the row and log line of step 15 equal the uninterrupted run's"
# a log begun by a version without /train/tokens, resumed: the new column
# reads NaN in the old rows and stays as long as /train/step
cp -r $W/k $W/old
$PY -c "import h5py; f = h5py.File('$W/old/metrics.h5', 'a'); del f['train/tokens']" || fail "h5py"
$BIN train $CK_ARGS run_dir=$W/old train_steps=50 > $W/old.log 2>&1 || fail "resume of an old log: $(tail -2 $W/old.log)"
$PY -c "
import h5py, numpy as np
f = h5py.File('$W/old/metrics.h5', 'r'); t = f['train/tokens'][:]
assert len(t) == len(f['train/step']) == 10 and np.isnan(t[:8]).all() and (t[8:] > 0).all(), t" \
    || fail "resumed old log: /train/tokens is not NaN in the old rows and counted in the new"
ok "metrics.h5 of an older version resumed: /train/tokens NaN before, counted after"
# the final dev evaluation is not logged twice when the last step had one
$BIN train $CK_ARGS run_dir=$W/ev train_steps=20 eval_steps=10 > $W/ev.log 2>&1 || fail "eval_steps run"
$PY -c "import h5py; s = list(h5py.File('$W/ev/metrics.h5', 'r')['dev/step'][:]); assert s == [10, 20], s" \
    || fail "dev rows of a run with eval_steps=10, train_steps=20"
grep -Eq '^dev step 10 loss_ls [0-9.]+ nll [0-9.]+ ppl [0-9.]+ tokens [0-9]+$' $W/ev.log || fail "no dev line for step 10: $(grep '^dev' $W/ev.log)"
[ "$(grep -c '^dev \(step\|final\) ' $W/ev.log)" -eq 3 ] || fail "expected dev step 10, dev step 20, dev final: $(grep '^dev' $W/ev.log)"
ok "eval_steps dividing train_steps: dev rows [10, 20], final figures printed once more, not recomputed"
# the same command again on the finished run: it resumes at step 20, runs
# no step, prints the final figures again, and logs no second dev row
$BIN train $CK_ARGS run_dir=$W/ev train_steps=20 eval_steps=10 > $W/ev2.log 2>&1 || fail "rerun of a finished run: $(tail -2 $W/ev2.log)"
grep -q "^resume: .*(step 20" $W/ev2.log || fail "the rerun did not resume at step 20: $(head -2 $W/ev2.log)"
[ "$(grep '^dev final' $W/ev2.log)" = "$(grep '^dev final' $W/ev.log)" ] || fail "the rerun's final dev figures differ"
$PY -c "import h5py; s = list(h5py.File('$W/ev/metrics.h5', 'r')['dev/step'][:]); assert s == [10, 20], s" \
    || fail "a finished run rerun logged its last dev evaluation twice"
ok "a finished run rerun: same final figures, dev rows still [10, 20]"
# resumed with a changed schedule, optimiser or regularisation: one warning
# line naming each key old->new (the run mixed them without a word); keys
# that only lengthen the run or change its logging, evaluations and
# checkpoints are left out (the FREE keys of src/config.c)
cp -r $W/ev $W/cd
$BIN train $CK_ARGS run_dir=$W/cd train_steps=22 eval_steps=0 log_steps=1 ckpt_steps=1 keep_ckpts=2 \
    lr_factor=2 warmup=10 dropout=0.3 label_smoothing=0 > $W/cd.log 2>&1 || fail "resume with changed settings: $(tail -2 $W/cd.log)"
[ "$(grep -c 'settings differ' $W/cd.log)" -eq 1 ] &&
grep -qx "warning: $W/cd/ckpt_00000020.h5: settings differ from the checkpoint's; the run continues with the new ones: dropout 0.1->0.3, label_smoothing 0.1->0, warmup 200->10, lr_factor 1->2" $W/cd.log \
    || fail "no one warning line naming the changed settings: $(grep '^warning' $W/cd.log)"
ok "resumed with changed settings: $(grep 'settings differ' $W/cd.log)"
# each change said once: a changed seed in the bitwise line only; keys this
# run does not use (loss scaling in fp32, the rate factor under lr_peak)
# not at all
cp -r $W/ev $W/cs
$BIN train $CK_ARGS run_dir=$W/cs train_steps=22 eval_steps=0 seed=7 loss_scale_window=50 > $W/cs.log 2>&1 \
    || fail "resume with a changed seed: $(tail -2 $W/cs.log)"
[ "$(grep -c '^warning' $W/cs.log)" -eq 1 ] &&
grep -qx "warning: $W/cs/ckpt_00000020.h5: changed from the checkpoint's: seed 1->7, the batch plan; training continues, not bitwise identical to an uninterrupted run" $W/cs.log \
    || fail "a changed seed (and an unused loss_scale_window) not said once: $(grep '^warning' $W/cs.log)"
# a text setting that changes after its 100th character is said (it was
# compared cut to 100), cut for display with '...'
mask=$(for k in enc dec_self cross; do for l in 0 1; do for h in 0 1 2; do printf '%s:%d:%d,' $k $l $h; done; done; done)
cp -r $W/ev $W/mh
$BIN train $CK_ARGS run_dir=$W/mh train_steps=22 eval_steps=0 ckpt_steps=1 mask_heads=${mask%,} > /dev/null 2>&1 \
    || fail "resume with a head mask"
$BIN train $CK_ARGS run_dir=$W/mh train_steps=24 eval_steps=0 ckpt_steps=1 mask_heads=${mask%,cross:1:2,} > $W/mh.log 2>&1 \
    || fail "resume with a changed head mask: $(tail -2 $W/mh.log)"
grep -q "^warning: $W/mh/ckpt_00000022.h5: settings differ from the checkpoint's; the run continues with the new ones: mask_heads 'enc:0:0,.*\.\.\.'->'enc:0:0,.*\.\.\.'$" $W/mh.log \
    || fail "a head mask changed after its 100th character not said: $(grep '^warning' $W/mh.log)"
ok "a changed seed said once, unused keys not at all, a text changed after 100 characters said"
# the same dataset under another path (relative, then absolute, from the
# same directory) is no change of setting
text_corpus 200 7 $W/tr.en $W/tr.de
(cd $W && $BIN prepare --out d.h5 --split train tr.en tr.de --split dev tr.en tr.de vocab_size=400 --jobs 1 > /dev/null 2>&1 &&
    $BIN train data=d.h5 vocab_size=400 n_layers=1 d_model=16 d_ff=32 n_heads=2 d_k=8 d_v=8 threads=1 train_steps=2 \
        run_dir=dd > /dev/null 2>&1) || fail "a run on a prepared dataset"
cp -r $W/dd $W/dd-other && cp -r $W/dd $W/dd-plan   # checkpoints naming data=d.h5
(cd $W && $BIN train data=$W/d.h5 vocab_size=400 n_layers=1 d_model=16 d_ff=32 n_heads=2 d_k=8 d_v=8 threads=1 train_steps=3 \
    run_dir=$W/dd) > $W/dd.log 2>&1 || fail "resume with the dataset's absolute path: $(tail -2 $W/dd.log)"
grep -q "^resume: " $W/dd.log && ! grep -q '^warning' $W/dd.log \
    || fail "the same dataset by another path said as a change: $(grep '^warning' $W/dd.log)"
ok "the same dataset by a relative and an absolute path: resumed without a warning"
# from another directory, the checkpoint's relative path names no file (or
# another one): the same dataset is still no change; one with another batch
# plan (max_tokens changed) is said
(cd / && $BIN train data=$W/d.h5 vocab_size=400 n_layers=1 d_model=16 d_ff=32 n_heads=2 d_k=8 d_v=8 threads=1 train_steps=3 \
    run_dir=$W/dd-other) > $W/dd2.log 2>&1 || fail "resume from another directory: $(tail -2 $W/dd2.log)"
grep -q "^resume: " $W/dd2.log && ! grep -q '^warning' $W/dd2.log \
    || fail "the same dataset from another directory said as a change: $(grep '^warning' $W/dd2.log)"
(cd / && $BIN train data=$W/d.h5 vocab_size=400 n_layers=1 d_model=16 d_ff=32 n_heads=2 d_k=8 d_v=8 threads=1 train_steps=3 \
    max_tokens=100 run_dir=$W/dd-plan) > $W/dd3.log 2>&1 || fail "resume with another batch plan: $(tail -2 $W/dd3.log)"
grep -q "^warning: .*settings differ.*data 'd.h5'->'$W/d.h5'" $W/dd3.log \
    || fail "another batch plan from another directory: data not said: $(grep '^warning' $W/dd3.log)"
ok "the same dataset from another directory: no warning; with another batch plan, data said"
