#!/usr/bin/env bash
# Broken inputs give one-line errors and exit 2: a truncated checkpoint, a
# foreign HDF5 file, a non-HDF5 file, a checkpoint of another architecture
# (average and train resume), --resume without checkpoints, a flipped byte in
# a tensor (its checksum), a run state or log interval out of range, --output naming an input,
# a run directory that is a file or in use by another run.  A truncated
# newest checkpoint in a run directory is skipped for the previous one and
# moved aside, an intact one of another format version stops the run; a
# directory none of whose checkpoints is intact is an error; a damaged
# metrics log, or another HDF5 file in its place or the attention probe's,
# is kept as metrics.h5.bad (.bad.1 when that is taken), never written into.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ckpt_lib.sh"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
$BIN train $CK_ARGS run_dir=$W/run train_steps=20 ckpt_steps=10 > /dev/null 2>&1 || fail "train"
C=$W/run/ckpt_00000020.h5
head -c $(( $(stat -c %s $C) / 2 )) $C > $W/trunc.h5
echo "not hdf5" > $W/text.h5
$PY -c "import h5py; f=h5py.File('$W/foreign.h5','w'); f['x']=[1,2,3]"
$BIN train $CK_ARGS d_model=48 run_dir=$W/other train_steps=10 ckpt_steps=10 > /dev/null 2>&1 || fail "train d_model=48"
O=$W/other/ckpt_00000010.h5
expect_error 2 "error: $W/trunc.h5: .*truncated" $BIN average --output $W/o.h5 $W/trunc.h5
expect_error 2 "error: $W/text.h5: not a checkpoint (not an HDF5 file)" $BIN average --output $W/o.h5 $W/text.h5
expect_error 2 "error: $W/foreign.h5: not a transformer checkpoint" $BIN average --output $W/o.h5 $W/foreign.h5
expect_error 2 "error: $W/nope.h5: cannot open checkpoint" $BIN average --output $W/o.h5 $W/nope.h5
expect_error 2 "error: .*cannot average with .*architecture key 'd_model' differs" $BIN average --output $W/o.h5 $C $O
[ ! -e $W/o.h5 ] || fail "output written despite errors"
# a checkpoint with a tensor removed (h5py copy without one dataset)
$PY - $C $W/missing.h5 <<'PY'
import sys, h5py
src, dst = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "w")
for k, v in src.attrs.items(): dst.attrs[k] = v
for g in src: src.copy(g, dst)
del dst["params/encoder/layer_01/ffn/W_1"]
PY
expect_error 2 "error: $W/missing.h5: checkpoint is missing tensor params/encoder/layer_01/ffn/W_1" $BIN average --output $W/o.h5 $W/missing.h5
# resume into a different architecture
expect_error 2 "error: .*ckpt_00000020.h5: cannot resume: architecture key 'd_model' differs: 32 vs 48" \
    $BIN train $CK_ARGS d_model=48 run_dir=$W/run train_steps=30
mkdir $W/empty
expect_error 2 "error: .*--resume: no complete checkpoint" $BIN train --resume $CK_ARGS run_dir=$W/empty
expect_error 2 "error: $W/nodir: --resume: no such run directory" $BIN train --resume $CK_ARGS run_dir=$W/nodir
[ ! -e $W/nodir ] || fail "--resume created the run directory it could not resume: $(ls -A $W/nodir)"
# a truncated newest checkpoint (e.g. disk corruption) is skipped, and moved
# aside beside an earlier .bad of the same name (kept: .bad.1)
cp $W/trunc.h5 $W/run/ckpt_00000030.h5 && echo earlier > $W/run/ckpt_00000030.h5.bad
$BIN train $CK_ARGS run_dir=$W/run train_steps=20 > $W/r.log 2>&1 || fail "resume past a truncated file: $(tail -2 $W/r.log)"
grep -q "^warning: .*ckpt_00000030.h5: skipped (damaged: cannot read checkpoint (truncated.*), moved to .*ckpt_00000030.h5.bad.1; resuming from .*ckpt_00000020.h5$" $W/r.log \
    && grep -q "resume: .*ckpt_00000020.h5" $W/r.log || fail "truncated newest checkpoint not skipped: $(head -3 $W/r.log)"
! grep -q "^error:" $W/r.log || fail "a skipped checkpoint reported as an error: $(grep '^error:' $W/r.log)"
cmp -s $W/trunc.h5 $W/run/ckpt_00000030.h5.bad.1 && [ ! -e $W/run/ckpt_00000030.h5 ] || fail "unreadable newest not moved aside: $(ls $W/run)"
grep -qx earlier $W/run/ckpt_00000030.h5.bad || fail "the earlier ckpt_00000030.h5.bad was overwritten"
ok "truncated newest checkpoint skipped with a warning and moved to ckpt_00000030.h5.bad.1, the earlier .bad kept"
mkdir $W/allbad && cp $W/trunc.h5 $W/allbad/ckpt_00000010.h5
$BIN train $CK_ARGS run_dir=$W/allbad > /dev/null 2> $W/allbad.err && fail "a run directory of damaged checkpoints: exit 0"
[ "$(grep -c . $W/allbad.err)" -eq 1 ] && grep -q "^error: $W/allbad: none of its 1 checkpoints is intact (the newest, $W/allbad/ckpt_00000010.h5: cannot read checkpoint (truncated" $W/allbad.err \
    || fail "a run directory of damaged checkpoints: not one error line: $(cat $W/allbad.err)"
ok "a run directory of damaged checkpoints: $(cat $W/allbad.err)"
[ -e $W/allbad/ckpt_00000010.h5 ] || fail "the only checkpoint was moved or removed"
# a newest checkpoint that is intact but not ours to resume from (another
# format version) stops the run instead of being skipped and moved aside
mkdir $W/newer && cp $W/run/ckpt_00000010.h5 $C $W/newer/
$PY -c "import h5py; h5py.File('$W/newer/ckpt_00000020.h5', 'r+').attrs['format_version'] = 2"
expect_error 2 "error: $W/newer/ckpt_00000020.h5: checkpoint format version 2 is not 1" $BIN train $CK_ARGS run_dir=$W/newer train_steps=30
[ -e $W/newer/ckpt_00000020.h5 ] && [ ! -e $W/newer/ckpt_00000020.h5.bad ] || fail "an intact checkpoint was moved aside: $(ls $W/newer)"
ok "an intact checkpoint of another format version: exit 2, left in place"
# a metrics log that is not HDF5 is kept as metrics.h5.bad and a new log started
mkdir $W/badlog && cp $W/run/ckpt_00000010.h5 $W/badlog/ && echo "not hdf5" > $W/badlog/metrics.h5
$BIN train $CK_ARGS run_dir=$W/badlog train_steps=15 > $W/bl.log 2>&1 || fail "run with a damaged metrics log: $(tail -2 $W/bl.log)"
grep -q "^warning: $W/badlog/metrics.h5: not a readable HDF5 file; moved to $W/badlog/metrics.h5.bad, starting a new one" $W/bl.log \
    || fail "no warning for the damaged metrics log: $(grep -v '^step' $W/bl.log | head -3)"
grep -qx "not hdf5" $W/badlog/metrics.h5.bad && $PY -c "import h5py; assert list(h5py.File('$W/badlog/metrics.h5', 'r')['train/step'][:]) == [15]" \
    || fail "damaged metrics log not kept aside, or the new log wrong"
ok "a damaged metrics log is kept as metrics.h5.bad, a new one started"
# another HDF5 file as metrics.h5 or attention_probe.h5 (a dataset copied
# there) was taken over as the log and written into: now it is moved aside
# as a file that does not read is, untouched, beside an earlier .bad (kept),
# with one warning line each, and a new log with its format started
mkdir $W/forlog && cp $W/run/ckpt_00000010.h5 $W/forlog/ && cp $W/foreign.h5 $W/forlog/metrics.h5
cp $W/foreign.h5 $W/forlog/attention_probe.h5 && echo earlier > $W/forlog/metrics.h5.bad
$BIN train $CK_ARGS run_dir=$W/forlog train_steps=15 attn_steps=5 > $W/fl.log 2>&1 || fail "run with a foreign metrics log: $(tail -2 $W/fl.log)"
[ "$(grep -c '^warning:' $W/fl.log)" -eq 2 ] &&
grep -qx "warning: $W/forlog/metrics.h5: an HDF5 file but not a transformer-metrics log (no format attribute); moved to $W/forlog/metrics.h5.bad.1, starting a new one" $W/fl.log &&
grep -qx "warning: $W/forlog/attention_probe.h5: an HDF5 file but not a transformer-attention-probe log (no format attribute); moved to $W/forlog/attention_probe.h5.bad, starting a new one" $W/fl.log \
    || fail "no warning line for the foreign logs: $(grep -v '^step' $W/fl.log | head -4)"
cmp -s $W/foreign.h5 $W/forlog/metrics.h5.bad.1 && cmp -s $W/foreign.h5 $W/forlog/attention_probe.h5.bad &&
grep -qx earlier $W/forlog/metrics.h5.bad || fail "a foreign log was changed, or the earlier .bad lost: $(ls $W/forlog)"
$PY -c "
import h5py
f = h5py.File('$W/forlog/metrics.h5', 'r')
fmt = lambda g: bytes(g.attrs['format']).decode()
assert fmt(f) == 'transformer-metrics' and list(f['train/step'][:]) == [15] and 'x' not in f, dict(f.attrs)
assert fmt(h5py.File('$W/forlog/attention_probe.h5', 'r')) == 'transformer-attention-probe'
" || fail "the new logs are not ours"
# a log written before the format attribute (train and dev only) is still ours
$PY -c "import h5py; del h5py.File('$W/forlog/metrics.h5', 'r+').attrs['format']"
$BIN train $CK_ARGS run_dir=$W/forlog train_steps=20 > $W/fl2.log 2>&1 || fail "resume with an old log: $(tail -2 $W/fl2.log)"
! grep -q '^warning:' $W/fl2.log && [ ! -e $W/forlog/metrics.h5.bad.2 ] &&
$PY -c "import h5py; assert list(h5py.File('$W/forlog/metrics.h5', 'r')['train/step'][:]) == [15, 20]" \
    || fail "a log without the format attribute not continued: $(grep '^warning' $W/fl2.log; ls $W/forlog)"
ok "a foreign HDF5 metrics.h5 and attention_probe.h5 moved aside untouched (an earlier .bad kept), new logs started; an old log continued"

# one flipped byte inside a tensor: the checksum catches it
cp $C $W/flip.h5
$PY - $W/flip.h5 <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    off = f["params/decoder/layer_00/ffn/W_1"].id.get_offset() + 100
with open(sys.argv[1], "r+b") as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x10]))
PY
expect_error 2 "error: $W/flip.h5: tensor params/decoder/layer_00/ffn/W_1 fails its checksum (the file is damaged)" \
    $BIN average --output $W/o.h5 $W/flip.h5
mkdir $W/fliprun && cp $W/run/ckpt_00000010.h5 $W/fliprun/ && cp $W/flip.h5 $W/fliprun/ckpt_00000020.h5
$BIN train $CK_ARGS run_dir=$W/fliprun train_steps=20 > $W/f.log 2>&1 || fail "resume past a damaged file: $(tail -2 $W/f.log)"
grep -q "resume: .*ckpt_00000010.h5" $W/f.log && [ -e $W/fliprun/ckpt_00000020.h5.bad ] \
    || fail "damaged newest checkpoint used: $(grep -v '^step' $W/f.log | head -5)"
ok "a flipped tensor byte is caught: average refuses it, resume takes the previous checkpoint"

cp $C $W/step.h5
$PY -c "import h5py; h5py.File('$W/step.h5', 'r+').attrs['step'] = -7"
expect_error 2 "error: $W/step.h5: checkpoint run state out of range (step -7" $BIN average --output $W/o.h5 $W/step.h5
cp $C $W/logint.h5
$PY -c "import h5py; f = h5py.File('$W/logint.h5', 'r+'); f.attrs['log_interval_loss'] = 1.0; f.attrs['log_interval_tokens'] = -3.0"
expect_error 2 "error: $W/logint.h5: log_interval attributes unreadable or out of range (loss 1, tokens -3)" \
    $BIN average --output $W/o.h5 $W/logint.h5
cp $C $W/in.h5
expect_error 2 "error: $W/in.h5: --output is also an input of average" $BIN average --output $W/in.h5 $C $W/in.h5
cmp -s $C $W/in.h5 || fail "average overwrote its input"

# the run directory: a file, or in use by a running training
touch $W/afile
expect_error 2 "error: $W/afile: cannot create run directory: Not a directory" $BIN train $CK_ARGS run_dir=$W/afile
TRANSFORMER_STEP_SLEEP_MS=100 $BIN train $CK_ARGS run_dir=$W/busy train_steps=200 > $W/busy.log 2>&1 &
busy=$!
# the lock is taken once the file names its holder (written after flock)
wait_until $busy grep -q "^pid $busy on " $W/busy/.lock || fail "first run did not take the lock: $(tail -2 $W/busy.log)"
expect_error 2 "error: $W/busy: another training run is using this run directory (pid $busy on " \
    $BIN train $CK_ARGS run_dir=$W/busy train_steps=200
kill -9 $busy; wait $busy 2>/dev/null
$BIN train $CK_ARGS run_dir=$W/busy train_steps=5 > $W/b2.log 2>&1 || fail "lock not released by kill -9: $(tail -2 $W/b2.log)"
ok "run directory lock: a second run refused with the holder's pid, released by kill -9"
# a lock held by another host (a failed node's, kept by an NFS server until
# its lease runs out; simulated: the lock file names another host, flock(1)
# holds it): waited for up to lock_wait seconds, then refused naming the holder
# hold_elsewhere: flock(1) holds the lock of $W/elsewhere, the file naming
# another host, until $W/release exists (no sleep decides who holds it), or
# $W is gone (the test failed and its trap ran), or at most 300 s
hold_elsewhere() {
    mkdir -p $W/elsewhere && printf 'pid 1 on other-node-7\n' > $W/elsewhere/.lock
    rm -f $W/held $W/release
    flock -x $W/elsewhere/.lock timeout 300 sh -c \
        "touch $W/held; while [ ! -e $W/release ] && [ -d $W ]; do sleep 0.02; done" &
    holder=$!
    wait_file $W/held $holder || fail "flock(1) did not take the lock"
}
WAITING="warning: $W/elsewhere: the run directory is locked by pid 1 on other-node-7; waiting up to 30 s"
hold_elsewhere
$BIN train $CK_ARGS run_dir=$W/elsewhere train_steps=2 lock_wait=30 > $W/elsewhere.log 2>&1 &
run=$!
wait_until $run grep -q "$WAITING" $W/elsewhere.log || fail "no waiting line: $(head -3 $W/elsewhere.log)"
touch $W/release; wait $holder
wait $run || fail "a lock of another host released while the run waited: the run failed: $(tail -3 $W/elsewhere.log)"
hold_elsewhere
expect_error 2 "error: $W/elsewhere: another training run is using this run directory (pid 1 on other-node-7); waited lock_wait seconds" \
    timeout 120 $BIN train $CK_ARGS run_dir=$W/elsewhere train_steps=4 lock_wait=1
touch $W/release; wait $holder
ok "a lock held by another host: waited for (lock_wait), then refused naming the holder"

# a diverging run (eq. 3's rate x 1e6, the largest lr_factor): exit 1 and no
# checkpoint of a diverged state.  The step it diverges at follows the BLAS
# kernel's rounding (9-12 over kernels), and which check sees it first
# depends on timing: the loss of step N is not finite (one line naming N), or
# the parameters already were after step N-1 and the background writer
# refuses that step's checkpoint (one line naming the file and the tensor).
# The newest checkpoint is the last one written before either (every
# ckpt_steps: with ckpt_minutes=0 all step checkpoints are written, not only
# the last keep_ckpts).
C=2
$BIN train --config $TOP/input/synthetic-test.cfg threads=1 lr_factor=1e6 run_dir=$W/nan ckpt_steps=$C ckpt_minutes=0 train_steps=400 \
    > $W/nan.log 2>&1
rc=$?
[ $rc -eq 1 ] || fail "diverging run exited $rc, expected 1: $(tail -2 $W/nan.log)"
nanstep=$(sed -n 's/^error: step \([0-9]*\): the training loss is .* (not finite): training stopped; resume from.*/\1/p' $W/nan.log)
refused=$(sed -n 's/^error: .*ckpt_0*\([0-9]*\)\.h5: not written: parameter .* is not finite (the run diverged.*/\1/p' $W/nan.log | head -1)
[ -n "$nanstep$refused" ] || fail "no one-line divergence error: $(grep -v '^step\|^checkpoint' $W/nan.log | tail -3)"
if [ -n "$refused" ]; then expect=$((refused - C)); else expect=$(( (nanstep - 1) / C * C )); fi
newest=$(ls $W/nan/ckpt_*.h5 2>/dev/null | tail -1)
[ "$(basename "${newest:-none}")" = "$(printf 'ckpt_%08d.h5' $expect)" ] \
    || fail "newest checkpoint '${newest:-none}', expected step $expect (loss not finite at '$nanstep', write refused at '$refused')"
ok "a diverging run stops (loss not finite at step '${nanstep}', write refused at step '${refused}'), exit 1, newest checkpoint $(basename $newest)"
