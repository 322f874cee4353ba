#!/usr/bin/env bash
# Dynamic loss scaling (src/loss_scale.h) on the CPU backend, with
# overflows planted by TRANSFORMER_GRAD_INF=RANK:STEP[:TIMES]:
# - a skipped step leaves parameters, Adam moments and the schedule's step
#   untouched: S is always a power of two, so in fp32 scaling and
#   unscaling are exact, and a run with skipped steps must end bitwise equal
#   to a run without loss scaling at all (1 rank, and 2 ranks where only
#   rank 1 overflows: the flag must reach rank 0 too);
# - S halves on a skip and doubles after loss_scale_window good steps;
# - S below loss_scale_min stops the run: exit 1, one line naming the step
#   and the last finite loss;
# - a run resumed from a checkpoint written after a skip ends bitwise equal
#   to the uninterrupted one, with the same S, good-step count and skip
#   count (checkpoint attributes), and a checkpoint without them still loads.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ckpt_lib.sh"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
A="$CK_ARGS synth_train=500 log_steps=1 train_steps=12"
DYN="loss_scale=dynamic loss_scale_window=4"

# the log line's "loss_scale S skipped K" at STEP of LOG
scale_at() { awk -v s="$1" '$1 == "step" && $2 == s { print $(NF-2), $NF }' "$2"; }
same_params() { cmp -s "$1" "$2" || fail "$3: parameters differ from the run without loss scaling"; }

"$BIN" train $A loss_scale=off --dump-params $W/off.bin > $W/off.log 2>&1 || fail "run without scaling: $(tail -2 $W/off.log)"
grep -q 'loss_scale' $W/off.log && fail "loss_scale off, but the log shows a scale"

# 1 rank: step 5 overflows twice (S 2048 -> 1024 -> 512), then runs
TRANSFORMER_GRAD_INF=0:5:2 "$BIN" train $A $DYN --dump-params $W/skip.bin > $W/skip.log 2>&1 \
    || fail "run with planted overflows: $(tail -2 $W/skip.log)"
same_params $W/off.bin $W/skip.bin "1 rank, step 5 skipped twice"
[ "$(scale_at 3 $W/skip.log)" = "1024 0" ] || fail "step 3: $(scale_at 3 $W/skip.log), expected S 1024, 0 skipped"
[ "$(scale_at 4 $W/skip.log)" = "2048 0" ] || fail "step 4: S did not double after the window of 4: $(scale_at 4 $W/skip.log)"
[ "$(scale_at 5 $W/skip.log)" = "512 2" ] || fail "step 5: $(scale_at 5 $W/skip.log), expected S halved twice to 512, 2 skipped"
[ "$(scale_at 9 $W/skip.log)" = "1024 2" ] || fail "step 9: $(scale_at 9 $W/skip.log), expected S doubled after 4 good steps"
# the schedule did not advance on the skips: same lr per step as without
[ "$(awk '$1 == "step" { print $2, $6 }' $W/skip.log)" = "$(awk '$1 == "step" { print $2, $6 }' $W/off.log)" ] \
    || fail "learning rates per step differ from the run without skips"
[ "$(grep -c '^step ' $W/skip.log)" -eq 12 ] || fail "expected 12 completed steps"
ok "1 rank: step 5 skipped twice (S 2048 -> 512), growth after 4 good steps, params bitwise equal to no scaling"

# 2 ranks: only rank 1 overflows; both skip
mpirun -np 2 "$BIN" train $A loss_scale=off --dump-params $W/off2.bin > $W/off2.log 2>&1 || fail "2 ranks without scaling"
TRANSFORMER_GRAD_INF=1:3 mpirun -np 2 "$BIN" train $A $DYN --dump-params $W/skip2.bin > $W/skip2.log 2>&1 \
    || fail "2 ranks with an overflow on rank 1: $(tail -2 $W/skip2.log)"
same_params $W/off2.bin $W/skip2.bin "2 ranks, step 3 skipped"
[ "$(scale_at 3 $W/skip2.log)" = "512 1" ] || fail "2 ranks, step 3: $(scale_at 3 $W/skip2.log), expected 512 1"
ok "2 ranks: rank 1's overflow skips step 3 on both (--dump-params checks they agree), params bitwise equal"

# the floor: overflow at every scale
err=$(TRANSFORMER_GRAD_INF=0:3:100 "$BIN" train $A $DYN loss_scale_init=1 loss_scale_min=0.01 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] || fail "floor: exit $rc, expected 1 ($err)"
[ "$(echo "$err" | wc -l)" -eq 1 ] || fail "floor: expected one line on stderr: $err"
echo "$err" | grep -Eq '^error: step 3: loss scale 0.0078125 fell below loss_scale_min 0.01 .*last finite loss [0-9.]+$' \
    || fail "floor message: $err"
ok "floor: exit 1, '$err'"
# a bad hook value is a one-line error
expect_error 2 'TRANSFORMER_GRAD_INF=x: expected RANK:STEP' env TRANSFORMER_GRAD_INF=x "$BIN" train $A $DYN

# resume across a skip: killed (here: stopped) after step 7, resumed to 12
TRANSFORMER_GRAD_INF=0:5 "$BIN" train $A $DYN run_dir=$W/ref ckpt_steps=100 > $W/ref.log 2>&1 || fail "reference run"
TRANSFORMER_GRAD_INF=0:5 "$BIN" train $A $DYN run_dir=$W/res ckpt_steps=100 train_steps=7 > $W/r1.log 2>&1 || fail "first part"
attr() { h5dump -a /$2 "$1" | awk '/\(0\)/ { print $2 }'; }
[ "$(attr $W/res/ckpt_00000007.h5 loss_scale)" = 1024 ] && [ "$(attr $W/res/ckpt_00000007.h5 loss_scale_good_steps)" = 3 ] \
    && [ "$(attr $W/res/ckpt_00000007.h5 loss_scale_skipped)" = 1 ] \
    || fail "checkpoint 7: loss_scale $(attr $W/res/ckpt_00000007.h5 loss_scale), good $(attr $W/res/ckpt_00000007.h5 loss_scale_good_steps), skipped $(attr $W/res/ckpt_00000007.h5 loss_scale_skipped); expected 1024, 3, 1"
"$BIN" train $A $DYN run_dir=$W/res ckpt_steps=100 > $W/r2.log 2>&1 || fail "resumed part: $(tail -2 $W/r2.log)"
grep -q '^resume: .*ckpt_00000007.h5' $W/r2.log || fail "did not resume from step 7"
same_state $W/ref/ckpt_00000012.h5 $W/res/ckpt_00000012.h5
for a in loss_scale loss_scale_good_steps loss_scale_skipped; do
    [ "$(attr $W/ref/ckpt_00000012.h5 $a)" = "$(attr $W/res/ckpt_00000012.h5 $a)" ] || fail "$a differs after resume"
done
[ "$(scale_at 12 $W/ref.log)" = "$(scale_at 12 $W/r2.log)" ] || fail "log at step 12: $(scale_at 12 $W/ref.log) vs $(scale_at 12 $W/r2.log)"
ok "resume after a skip: bitwise equal, S $(attr $W/res/ckpt_00000012.h5 loss_scale), $(scale_at 12 $W/r2.log | cut -d' ' -f2) skipped"
# metrics.h5 /loss_scale: one row per logged step, as the log lines, and the
# resumed run's rows equal the uninterrupted run's
rows() { h5dump -d /loss_scale/$2 -y -w 0 "$1/metrics.h5" | awk '/DATA/ { d = 1; next } d && /}/ { d = 0 } d' | tr -d ' ,\n'; }
[ "$(rows $W/ref step)" = "$(seq -s '' 1 12)" ] || fail "metrics /loss_scale/step: $(rows $W/ref step)"
[ "$(rows $W/ref scale)$(rows $W/ref skipped)" = "$(rows $W/res scale)$(rows $W/res skipped)" ] \
    || fail "metrics /loss_scale of the resumed run differs: $(rows $W/res scale) vs $(rows $W/ref scale)"
want=$(for s in $(seq 1 12); do scale_at $s $W/ref.log | cut -d' ' -f1; done | tr -d '\n')
[ "$(rows $W/ref scale)" = "$want" ] || fail "metrics /loss_scale/scale $(rows $W/ref scale), log $want"
ok "metrics.h5 /loss_scale: S and skips of every logged step, the same after a resume"

# a checkpoint without loss-scale attributes (scaling off) resumes with scaling on from loss_scale_init
"$BIN" train $A loss_scale=off run_dir=$W/old train_steps=5 > /dev/null 2>&1 || fail "run without scaling"
h5dump -a /loss_scale $W/old/ckpt_00000005.h5 > /dev/null 2>&1 && fail "loss_scale attribute written with scaling off"
h5ls $W/old/metrics.h5 | grep -q '^loss_scale' && fail "metrics /loss_scale written with scaling off"
"$BIN" train $A $DYN run_dir=$W/old > $W/old.log 2>&1 || fail "resume with scaling on: $(tail -2 $W/old.log)"
[ "$(scale_at 6 $W/old.log)" = "1024 0" ] || fail "resumed without attributes: $(scale_at 6 $W/old.log)"
ok "checkpoint without loss-scale attributes resumes, S from loss_scale_init"
