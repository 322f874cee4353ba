#!/usr/bin/env bash
# Broken inputs give one-line errors and exit 2: a truncated checkpoint, a
# foreign HDF5 file, a non-HDF5 file, a checkpoint of another architecture
# (average and train resume), --resume without checkpoints.  A truncated
# newest checkpoint in a run directory is skipped for the previous one.
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
expect_error 2 "error: .*--resume: no complete checkpoint" $BIN train --resume $CK_ARGS run_dir=$W/empty
# a truncated newest checkpoint (e.g. disk corruption) is skipped
cp $W/trunc.h5 $W/run/ckpt_00000030.h5
$BIN train $CK_ARGS run_dir=$W/run train_steps=20 > $W/r.log 2>&1 || fail "resume past a truncated file: $(tail -2 $W/r.log)"
grep -q "warning: .*ckpt_00000030.h5: skipped" $W/r.log && grep -q "resume: .*ckpt_00000020.h5" $W/r.log \
    || fail "truncated newest checkpoint not skipped: $(head -3 $W/r.log)"
ok "truncated newest checkpoint skipped with a warning"
