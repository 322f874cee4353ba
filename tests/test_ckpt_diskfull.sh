#!/usr/bin/env bash
# A disk that fills up during training (a real tmpfs of 2 MB): the checkpoint
# that does not fit is one line naming the file and "No space left on
# device", the run stops with exit 1 (not a crash: HDF5 never writes to disk
# itself, h5io.h), no temporary is left, the earlier checkpoints, the metrics
# log and the attention probe stay readable, and after making room the same
# command resumes and ends bitwise equal to an uninterrupted run.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ckpt_lib.sh"
W=$(mktemp -d)
D=$W/small
mkdir -p $D
if ! mount -t tmpfs -o size=2000k tmpfs $D 2>/dev/null; then
    # not root: a private mount namespace of our own, if the kernel lets us
    if [ -z "${IN_UNSHARE:-}" ] && unshare --mount --map-root-user true 2>/dev/null; then
        rm -rf "$W"
        IN_UNSHARE=1 exec unshare --mount --map-root-user bash "$0" "$@"
    fi
    rm -rf "$W"
    skip "cannot mount a tmpfs here (needs root or user namespaces)"
fi
trap 'umount $D; rm -rf "$W"' EXIT
ARGS="$CK_ARGS keep_ckpts=100 ckpt_steps=10 train_steps=60 attn_steps=10"
$BIN train $ARGS run_dir=$W/ref > $W/ref.log 2>&1 || fail "reference run: $(tail -2 $W/ref.log)"

$BIN train $ARGS run_dir=$D/run > $W/full.log 2>&1
rc=$?
[ $rc -eq 1 ] || fail "disk-full run exited $rc, expected 1: $(tail -3 $W/full.log)"
grep -q "^error: $D/run/\.ckpt_000000[0-9]0\.h5\.[^ ]*\.tmp: cannot write .* MB: No space left on device$" $W/full.log \
    || fail "no one-line ENOSPC error: $(grep error $W/full.log)"
last=$(ls $D/run/ckpt_*.h5 | tail -1)
[ -n "$last" ] || fail "no checkpoint fitted: the disk is too small for this test"
grep -q "^error: $D/run: training stopped after step [0-9]* because a checkpoint could not be written (above); the newest complete one is $last: remove the cause" $W/full.log \
    || fail "no stop message naming $last: $(grep error $W/full.log)"
ok "disk full: exit 1, $(grep -c '^error' $W/full.log) error lines, newest complete checkpoint $(basename $last)"
ls -a $D/run | grep -q '\.tmp$' && fail "temporaries left: $(ls -a $D/run)"
$PY - $D/run "$last" <<'PY' || fail "a file in the full run directory is unreadable"
import sys, h5py
d, last = sys.argv[1], sys.argv[2]
with h5py.File(last, "r") as f: assert f["params"] and f.attrs["step"] > 0
with h5py.File(d + "/metrics.h5", "r") as f: assert len(f["train/step"]) > 0
with h5py.File(d + "/attention_probe.h5", "r") as f: assert any(k.startswith("step_") for k in f)
PY
ok "no temporary left; $(basename $last), metrics.h5 and attention_probe.h5 readable"

mount -o remount,size=20m $D || fail "remount"
$BIN train $ARGS run_dir=$D/run > $W/resume.log 2>&1 || fail "resume after making room: $(tail -2 $W/resume.log)"
grep -q "^resume: $last " $W/resume.log || fail "did not resume from $last: $(grep resume $W/resume.log)"
same_state $D/run/ckpt_00000060.h5 $W/ref/ckpt_00000060.h5
h5diff -q $D/run/metrics.h5 $W/ref/metrics.h5 /train/step /train/step || fail "metrics steps differ from the reference's"
ok "resumed from $(basename $last) after making room: final state bitwise equal to the uninterrupted run's, metrics steps equal"
