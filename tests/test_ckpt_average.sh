#!/usr/bin/env bash
# transformer average: the mean of two checkpoints is the element-wise mean
# (checked independently with h5py/numpy), the average of one checkpoint is
# that checkpoint's parameters, --last K picks the newest K, and the output
# is itself a loadable checkpoint, --last K skips checkpoints written between
# the ckpt_steps intervals.  Also: checkpoints by wall time.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ckpt_lib.sh"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
$BIN train $CK_ARGS run_dir=$W/run train_steps=30 ckpt_steps=10 > $W/train.log 2>&1 || fail "train: $(tail -3 $W/train.log)"
A=$W/run/ckpt_00000020.h5 B=$W/run/ckpt_00000030.h5
$BIN average --output $W/avg2.h5 $A $B > /dev/null || fail "average of two"
$BIN average --output $W/avg1.h5 $A > /dev/null || fail "average of one"
$BIN average --output $W/last2.h5 --last 2 $W/run > /dev/null || fail "average --last 2"
res=$($PY - $A $B $W/avg2.h5 $W/avg1.h5 $W/last2.h5 <<'PY'
import sys, h5py, numpy as np
a, b, m2, m1, l2 = (h5py.File(p, "r") for p in sys.argv[1:])
names = []
a["params"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
assert len(names) > 20, names
changed = 0
for n in names:
    x, y = a["params"][n][()], b["params"][n][()]
    want = ((x.astype(np.float64) + y.astype(np.float64)) / 2).astype(np.float32)
    assert np.array_equal(m2["params"][n][()], want), n
    assert np.array_equal(l2["params"][n][()], want), n
    assert np.array_equal(m1["params"][n][()], x), n
    assert m2["params"][n].shape == x.shape
    changed += not np.array_equal(x, y)
assert changed > 0            # the two inputs differ: the test can fail
assert "adam_m" not in m2 and m2.attrs["has_adam"] == 0
assert m2.attrs["format"] == "transformer-checkpoint"
assert m2.attrs["averaged_from"].split("\n") == [sys.argv[1], sys.argv[2]]
print("yes", len(names))
PY
)
[ "${res%% *}" = yes ] || fail "averages differ from the element-wise mean"
ok "average of 2 = element-wise mean, of 1 = identity, --last 2 = the newest two (${res#* } tensors)"
# the average is a loadable checkpoint: averaging it again reproduces it
$BIN average --output $W/again.h5 $W/avg2.h5 > /dev/null || fail "average of an average"
h5diff -q $W/again.h5 $W/avg2.h5 /params /params || fail "average of an average changed"
ok "averaged checkpoint loads back"
# no output left behind on error; usage errors
expect_error 2 "error: average: --output" $BIN average $A
expect_error 2 "error: .*no checkpoints" $BIN average --output $W/x.h5 --last 3 $W
expect_error 2 "^error: $W/nodir: --last K needs a run directory: No such file or directory$" \
    $BIN average --output $W/x.h5 --last 3 $W/nodir
expect_error 2 "^error: $A: --last K needs a run directory: not a directory$" $BIN average --output $W/x.h5 --last 3 $A
# --last's K in int range: (int) of 2^32 + 1 was 1, one checkpoint averaged silently
for k in 0 4294967297 -2 3x ""; do
    expect_error 2 "^error: average: --last '$k': not an integer from 1 to 2147483647$" $BIN average --output $W/x.h5 --last "$k" $W/run
done
# a checkpoint given twice would count twice in the mean
expect_error 2 "^error: $W/run/./ckpt_00000020.h5: checkpoint given twice to average (also as $A): each counts once$" \
    $BIN average --output $W/x.h5 $A $B $W/run/./ckpt_00000020.h5
[ ! -e $W/x.h5 ] || fail "output written despite error"
# --last K takes the interval checkpoints (multiples of ckpt_steps and the
# final step; section 6.1) and skips one written in between by wall time or on
# preemption (simulated: a copy named ckpt_11 of a run with ckpt_steps=4 and
# train_steps=10); fewer than K is an error
$BIN train $CK_ARGS run_dir=$W/iv train_steps=10 ckpt_steps=4 keep_ckpts=3 > $W/iv.log 2>&1 || fail "train: $(tail -3 $W/iv.log)"
[ "$(ls $W/iv | grep '^ckpt_' | tr '\n' ' ')" = "ckpt_00000004.h5 ckpt_00000008.h5 ckpt_00000010.h5 " ] \
    || fail "ckpt_steps=4, train_steps=10 kept $(ls $W/iv | grep '^ckpt_' | tr '\n' ' ')"
cp $W/iv/ckpt_00000010.h5 $W/iv/ckpt_00000011.h5
$BIN average --output $W/iv3.h5 --last 3 $W/iv > /dev/null || fail "average --last 3 of the interval run"
got=$(h5dump -a /averaged_from $W/iv3.h5 | grep -o 'ckpt_000000[0-9]*' | tr '\n' ' ')
[ "$got" = "ckpt_00000004 ckpt_00000008 ckpt_00000010 " ] || fail "--last 3 averaged $got, want steps 4 8 10"
expect_error 2 "error: $W/iv: --last 4 asks for more checkpoints than the run kept (3 at multiples" \
    $BIN average --output $W/iv4.h5 --last 4 $W/iv
[ ! -e $W/iv4.h5 ] || fail "output written despite error"
ok "--last 3 = the interval checkpoints 4 8 10 (not 11, written in between); --last 4: one-line error"
# with a fixed end (no patience) and checkpoints by time for resuming, only
# the step checkpoints that averaging keeps are written (resume.c): 16 18 20
# of ckpt_steps=2 over 20 steps with keep_ckpts=3, said in one line; with
# ckpt_minutes=0 (steps are the only resume points) or patience (the end is
# not known), all 10
CK_W=$(echo "$CK_ARGS" | sed 's/ckpt_minutes=0/ckpt_minutes=10/')
$BIN train $CK_W run_dir=$W/win train_steps=20 ckpt_steps=2 keep_ckpts=3 > $W/win.log 2>&1 || fail "train: $(tail -3 $W/win.log)"
written() { grep -o '^checkpoint [^ ]*ckpt_[0-9]*\.h5' "$1" | sed 's/.*ckpt_0*//; s/\.h5//' | tr '\n' ' '; }
[ "$(written $W/win.log)" = "16 18 20 " ] || fail "written with keep_ckpts=3: $(written $W/win.log)"
grep -qx 'checkpoint: step checkpoints from step 16 on (the last keep_ckpts 3, for averaging); until then one every ckpt_minutes 10 min (for resuming)' \
    $W/win.log || fail "no line on the step checkpoints' window: $(grep -v '^step' $W/win.log)"
$BIN train $CK_ARGS run_dir=$W/win0 train_steps=20 ckpt_steps=2 keep_ckpts=3 > $W/win0.log 2>&1 || fail "train: $(tail -3 $W/win0.log)"
$BIN train $CK_W run_dir=$W/winp train_steps=20 ckpt_steps=2 keep_ckpts=3 eval_steps=10 patience=5 > $W/winp.log 2>&1 ||
    fail "train: $(tail -3 $W/winp.log)"
for l in win0 winp; do
    [ "$(written $W/$l.log)" = "2 4 6 8 10 12 14 16 18 20 " ] || fail "$l: written $(written $W/$l.log)"
done
same_state $W/win/ckpt_00000020.h5 $W/win0/ckpt_00000020.h5
ok "keep_ckpts=3 with checkpoints by time: step checkpoints 16 18 20 only (all 10 with ckpt_minutes=0 or patience), same final state"
# checkpoints by wall time (ckpt_minutes; 0.001 min = 60 ms) with ckpt_steps=0.
# The run must last several intervals whatever the machine's speed, and a
# write still in flight defers the next (under load a write alone can take
# several intervals): double the steps until a run of at least 0.3 s (5
# intervals) has >= 3 checkpoints.  Without checkpoints by time there is
# only the final one, at any length: the doubling runs out and fails.
CK_T=$(echo "$CK_ARGS" | sed 's/ckpt_minutes=0//')
steps=40
while :; do
    rm -rf $W/time
    $BIN train $CK_T run_dir=$W/time train_steps=$steps ckpt_steps=0 ckpt_minutes=0.001 keep_ckpts=100000 \
        > $W/time.log 2>&1 || fail "timed run: $(tail -2 $W/time.log)"
    el=$(grep -o 'elapsed [0-9.]*s' $W/time.log | tail -1 | tr -dc '0-9.')
    n=$(ls $W/time | grep -c '^ckpt_')
    awk -v e="$el" 'BEGIN { exit !(e >= 0.3) }' && [ "$n" -ge 3 ] && break
    [ $steps -lt 5120 ] || fail "ckpt_minutes=0.001 gave only $n checkpoints in a ${el}s run of $steps steps"
    steps=$((steps * 2))
done
[ -e $W/time/ckpt_$(printf %08d $steps).h5 ] || fail "no final checkpoint"
ok "ckpt_minutes: $n checkpoints by wall time in a ${el}s run of $steps steps (incl. the final one)"
