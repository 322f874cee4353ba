#!/usr/bin/env bash
# Attention maps: the file of `transformer attention` (reference and greedy
# teacher forcing) matches an independent NumPy forward pass of the
# checkpoint (rows sum to 1, decoder self-attention lower-triangular,
# shapes = token counts); 1-rank and 2-rank (MPI-IO) files are identical;
# the training probe file has one group per attn_steps; errors under mpirun
# are one line.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ckpt_lib.sh"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
$BIN train $CK_ARGS n_heads=2 run_dir=$W/run train_steps=30 ckpt_steps=0 attn_steps=10 > $W/train.log 2>&1 || fail "train: $(tail -3 $W/train.log)"
C=$W/run/ckpt_00000030.h5
[ -f $C ] || fail "no final checkpoint"
$BIN attention --checkpoint $C --data synthetic --split dev --sentences 0,2,5-7 --output $W/a1.h5 --greedy > $W/a1.out || fail "attention (1 rank)"
# the maps are computed on the CPU in fp32 whatever the job's device, and the device line says so
grep -qx "attention: device cpu, precision fp32 (this command computes on the CPU in fp32)" $W/a1.out \
    || fail "device line: $(head -1 $W/a1.out)"
mpirun -np 2 $BIN attention --checkpoint $C --data synthetic --split dev --sentences 0,2,5-7 --output $W/a2.h5 --greedy > /dev/null || fail "attention (2 ranks)"
res=$($PY "$(dirname "$0")/attention_check.py" $W/a2.h5 $C) || fail "2-rank maps: $res"
[ "${res%% *}" = ok ] || fail "check: $res"
ok "5 sentences x (reference + greedy): rows sum to 1, causal, shapes, = NumPy forward (max err ${res##* })"
h5diff $W/a1.h5 $W/a2.h5 > $W/diff.txt || fail "1-rank and 2-rank files differ: $(head -5 $W/diff.txt)"
ok "1-rank and 2-rank attention files identical (h5diff)"
res=$($PY - $W/a1.h5 <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
assert list(f["sentence_index"][()]) == [0, 2, 5, 6, 7]
assert sorted(f["sentences"]) == ["000000", "000002", "000005", "000006", "000007"]
fmt = f.attrs["format"]
assert (fmt.decode() if isinstance(fmt, bytes) else fmt) == "transformer-attention", fmt
print("ok")
PY
)
[ "$res" = ok ] || fail "sentence selection"
# the probe holds maps of earlier steps: only the step-30 group matches the final checkpoint
steps=$(h5ls $W/run/attention_probe.h5 | awk '{print $1}' | tr '\n' ' ')
[ "$steps" = "step_00000010 step_00000020 step_00000030 " ] || fail "probe groups: $steps"
$PY - $W/run/attention_probe.h5 $W/p30.h5 <<'PY'
import sys, h5py
src, dst = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "w")
src.copy("step_00000030/sentences", dst)
PY
res=$($PY "$(dirname "$0")/attention_check.py" $W/p30.h5 $C) || fail "probe maps: $res"
ok "training probe: groups $steps; step 30 maps = NumPy forward of the final checkpoint"
expect_error 2 "error: --sentences: index 999 is past" $BIN attention --checkpoint $C --sentences 999 --output $W/x.h5
expect_error 2 "error: $W/nope.h5: cannot open checkpoint" $BIN attention --checkpoint $W/nope.h5 --sentences 0 --output $W/x.h5
expect_error 2 "error: --sentences '0-999999': more than 100000 sentences" $BIN attention --checkpoint $C --sentences 0-999999 --output $W/x.h5
expect_error 2 "error: --sentences '0,3,1-4': sentence 3 is listed twice" $BIN attention --checkpoint $C --sentences 0,3,1-4 --output $W/x.h5
expect_error 2 "error: --sentences '99999999999999999999': expected indices" $BIN attention --checkpoint $C --sentences 99999999999999999999 --output $W/x.h5
[ ! -e $W/x.h5 ] || fail "output written despite an error"
# --sample K: K pairs spread evenly over the split's 40 (the sweep's fixed sample)
$BIN attention --checkpoint $C --data synthetic --split dev --sample 6 --output $W/s6.h5 > /dev/null || fail "attention --sample 6"
$BIN attention --checkpoint $C --data synthetic --split dev --sample 50 --output $W/s50.h5 > /dev/null || fail "attention --sample 50"
res=$($PY - $W/s6.h5 $W/s50.h5 <<'PY'
import sys, h5py
f, g = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert list(f["sentence_index"][()]) == [i * 40 // 6 for i in range(6)] == [0, 6, 13, 20, 26, 33], f["sentence_index"][()]
assert f.attrs["sample"] == 6 and len(f["sentences"]) == 6
assert list(g["sentence_index"][()]) == list(range(40)) and g.attrs["sample"] == 50   # K >= n: every pair
print("ok")
PY
)
[ "$res" = ok ] || fail "--sample: $res"
ok "--sample 6 of 40 dev pairs: indices floor(i*40/6), attribute sample; --sample 50: all 40"
expect_error 2 "error: --sample '0': expected a number of pairs" $BIN attention --checkpoint $C --sample 0 --output $W/x.h5
# under mpirun an error of the arguments, the checkpoint or the split is
# rank 0's one line, not one per rank
for bad in "--bogus" "--checkpoint $W/nope.h5 --sentences 0" "--checkpoint $C --split nosuch --sentences 0" \
           "--checkpoint $C --sentences 999" "--checkpoint $C --sentences 0 mask_heads=x"; do
    err=$(mpirun -np 2 $BIN attention $bad --output $W/x.h5 2>&1 >/dev/null); rc=$?
    [ $rc -eq 2 ] && [ "$(echo "$err" | grep -c '^error:')" -eq 1 ] || fail "mpirun -np 2 attention $bad: exit $rc, stderr: $err"
done
[ ! -e $W/x.h5 ] || fail "a refused attention wrote its output"
ok "mpirun -np 2 attention: argument, checkpoint, split, sentence and key errors are one line each"
expect_error 2 "give exactly one of --sentences and --sample" $BIN attention --checkpoint $C --sample 3 --sentences 1 --output $W/x.h5
[ ! -e $W/x.h5 ] || fail "output written despite an error"
