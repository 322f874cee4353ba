#!/usr/bin/env bash
# A step checkpoint does not stall training behind a slow write: with the
# write of step 2 held 15 s (TRANSFORMER_CKPT_SLOW=2:15000, a slow file
# system), checkpoint 4 is skipped with one line after its grace (5 s plus
# 5% of the write's age: steps 3-4 would have to take over 9 s for it not to
# skip, so the verdict does not depend on load); training went on meanwhile
# (the skip is logged before checkpoint 2's write is), checkpoint 6 is
# written, and the final state equals an uninterrupted run's bit for bit.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ckpt_lib.sh"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
ARGS="$CK_ARGS train_steps=6 ckpt_steps=2 keep_ckpts=10 log_steps=1"

$BIN train $ARGS run_dir=$W/ref > $W/ref.log 2>&1 || fail "reference run: $(tail -3 $W/ref.log)"
TRANSFORMER_CKPT_SLOW=2:15000 $BIN train $ARGS run_dir=$W/slow > $W/slow.log 2>&1 || fail "slow-write run: $(tail -3 $W/slow.log)"
grep -qx 'checkpoint: step 4 skipped: the write of step 2 is still running (a slow file system or a short ckpt_steps; the next is due at step 6)' $W/slow.log ||
    fail "no skip line for step 4: $(cat $W/slow.log)"
skip=$(grep -n 'checkpoint: step 4 skipped' $W/slow.log | cut -d: -f1)
wrote2=$(grep -n '^checkpoint .*ckpt_00000002.h5: ' $W/slow.log | cut -d: -f1)
[ -n "$wrote2" ] && [ "$skip" -lt "$wrote2" ] || fail "checkpoint 2's write did not outlast the skip: $(cat $W/slow.log)"
[ -e $W/slow/ckpt_00000002.h5 ] && [ -e $W/slow/ckpt_00000006.h5 ] && [ ! -e $W/slow/ckpt_00000004.h5 ] ||
    fail "expected checkpoints 2 and 6 only: $(ls $W/slow)"
[ -e $W/ref/ckpt_00000004.h5 ] || fail "the reference run skipped checkpoint 4: $(cat $W/ref.log)"
same_state $W/ref/ckpt_00000006.h5 $W/slow/ckpt_00000006.h5
ok "write of step 2 held 15 s: checkpoint 4 skipped with one line while training went on, 2 and 6 written, final state bitwise equal"

# ---- checkpoints by time slow down to the file system (resume.c) -----------
# every write held 2 s (a slow file system) with ckpt_minutes 0.001: after the
# first write the interval becomes 2 s / 5% = 40 s, said in one line, so the
# run writes no more than one checkpoint by time per 40 s of its wall time
# (back to back without the rule: one every 2 s)
t0=$SECONDS
TRANSFORMER_CKPT_SLOW='*:2000' $BIN train $CK_ARGS train_steps=1500 log_steps=500 ckpt_minutes=0.001 keep_ckpts=100 \
    run_dir=$W/bytime > $W/bytime.log 2>&1 || fail "slow writes by time: $(tail -3 $W/bytime.log)"
wall=$((SECONDS - t0))
line=$(grep -m1 '^checkpoint: a write took' $W/bytime.log) ||
    fail "no line for the lengthened interval: $(cat $W/bytime.log)"
# the write's time is 2 s and whatever the load adds to it: the interval
# must be that time / 5% (within the two figures' rounding), not 2 s / 5% exactly
awk '{ t = $5 + 0; m = $10 + 0 }
     !/^checkpoint: a write took [0-9.]+s: checkpoints by time every [0-9.]+ min instead of ckpt_minutes 0\.001 \(at most 5% of the time writing\)$/ { exit 1 }
     t < 1.95 || m < 0.6 || (m - t / 0.05 / 60) ^ 2 > 0.07 ^ 2 { exit 1 }' <<< "$line" ||
    fail "unexpected line (want the write's time T >= 2 s and every T / 5% min): $line"
n=$(ls $W/bytime | grep -c '^ckpt_')   # the final one included
[ "$n" -ge 2 ] && [ "$n" -le $((2 + wall / 40)) ] ||
    fail "$n checkpoints in ${wall}s with a 40 s interval by time: $(ls $W/bytime)"
ok "writes of 2 s: checkpoints by time every 40 s instead of 0.06 s ($n in ${wall}s, the final one included): $line"
