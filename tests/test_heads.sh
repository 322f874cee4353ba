#!/usr/bin/env bash
# Head importance and head masking (issue #23):
# - `transformer heads` writes the same file with 1, 2 and 3 ranks (h5diff);
# - its NLL, computed through the gates (at 1), is eval's to the printed digit;
# - its confidence and previous/next/self fractions equal those computed
#   with NumPy from `transformer attention` maps of every dev sentence, and
#   importance_norm has unit l2 norm per layer;
# - under the CUDA emulator (device=cuda) it matches the CPU backend;
# - mask_heads: eval, translate and attention take it; masking encoder
#   layer 0 leaves layer 0's attention weights unchanged and changes layer
#   1's (the gate acts after the softmax, before W^O); a malformed list is
#   one line and exit 2;
# - analysis/prune_heads.py: level 0 is eval's PPL, curves and single-head
#   results land in the file, and analysis/heads.py draws them.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ckpt_lib.sh"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
ARCH="n_heads=4 d_k=8 d_v=8 synth_dev=24"
$BIN train $CK_ARGS $ARCH run_dir=$W/run train_steps=60 ckpt_steps=0 > $W/train.log 2>&1 || fail "train: $(tail -3 $W/train.log)"
C=$W/run/ckpt_00000060.h5
[ -f $C ] || fail "no final checkpoint"

# --- the file, for any number of ranks
$BIN heads --checkpoint $C --data synthetic --output $W/h1.h5 threads=1 max_tokens=64 > $W/h1.out || fail "heads (1 rank)"
for np in 2 3; do
    mpirun -np $np $BIN heads --checkpoint $C --data synthetic --output $W/h$np.h5 threads=1 max_tokens=64 > /dev/null \
        || fail "heads ($np ranks)"
    h5diff $W/h1.h5 $W/h$np.h5 > $W/diff.txt || fail "1-rank and $np-rank files differ: $(head -5 $W/diff.txt)"
done
ok "heads: 1-, 2- and 3-rank files identical (h5diff), $(grep -o '[0-9]* batches' $W/h1.out)"
nll=$($BIN eval --checkpoint $C --data synthetic threads=1 max_tokens=64 | field '^eval dev' nll)
got=$(awk '{ for (i = 1; i < NF; i++) if ($i == "nll") print $(i + 1) }' $W/h1.out)
[ -n "$nll" ] && [ "$got" = "$nll" ] || fail "heads nll $got, eval nll $nll"
ok "heads nll $got (through gates at 1) = eval's"

# --- statistics against the attention maps of every dev sentence
$BIN attention --checkpoint $C --data synthetic --split dev --sentences 0-23 --output $W/maps.h5 > /dev/null || fail "attention"
res=$($PY - $W/h1.h5 $W/maps.h5 <<'PY'
import sys
import h5py, numpy as np
h, a = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
kinds = {"enc": "encoder_self", "dec_self": "decoder_self", "cross": "cross"}
worst = 0.0
for kind, name in kinds.items():
    acc = None
    for s in a["sentences"].values():
        P = s[name][()]                      # [N, h, Tq, Tk], real positions only
        arg = P.argmax(-1)
        q = np.arange(P.shape[2])[None, None, :]
        v = np.stack([P.max(-1).sum(-1), (arg == q - 1).sum(-1), (arg == q + 1).sum(-1), (arg == q).sum(-1),
                      np.full(P.shape[:2], P.shape[2])])
        acc = v if acc is None else acc + v
    want = {"confidence": acc[0] / acc[4], "frac_prev": acc[1] / acc[4], "frac_next": acc[2] / acc[4],
            "frac_self": acc[3] / acc[4]}
    for k, w in want.items():
        worst = max(worst, float(np.abs(h[kind][k][()] - w).max()))
    n = np.linalg.norm(h[kind]["importance_norm"][()], axis=1)
    assert np.allclose(n, 1, atol=1e-9), (kind, n)
    assert (h[kind]["importance"][()] > 0).all(), kind
assert h.attrs["format"] in (b"transformer-heads", "transformer-heads")
print("ok", worst)
PY
) || fail "statistics: $res"
awk -v w="${res##* }" 'BEGIN { exit !(w < 1e-6) }' || fail "confidence/positional fractions differ from the maps by $res"
ok "confidence, frac_prev/next/self = NumPy over the attention maps (max diff ${res##* }); importance_norm unit per layer"

# --- the CUDA backend (emulated) against the CPU
if [ -x $TOP/bin/tests/emu-transformer ]; then
    OMP_NUM_THREADS=1 $TOP/bin/tests/emu-transformer heads --checkpoint $C --data synthetic --output $W/hc.h5 \
        threads=1 max_tokens=64 device=cuda > /dev/null || fail "heads device=cuda (emulated)"
    res=$($PY - $W/h1.h5 $W/hc.h5 <<'PY'
import sys
import h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
worst = 0.0
for kind in ("enc", "dec_self", "cross"):
    for k in ("importance", "confidence", "frac_prev", "frac_next", "frac_self"):
        x, y = a[kind][k][()], b[kind][k][()]
        worst = max(worst, float((np.abs(x - y) / (1e-6 + np.abs(x).max())).max()))
print(worst)
PY
) || fail "compare emulated CUDA"
    # fp32 on both; the GPU sums the gate gradient in another order (block sums)
    awk -v w="$res" 'BEGIN { exit !(w < 1e-3) }' || fail "device=cuda differs from cpu by $res (relative)"
    ok "heads device=cuda (emulated) = cpu within $res relative"
fi

# --- mask_heads in eval, translate and attention
m0=$($BIN eval --checkpoint $C --data synthetic threads=1 mask_heads= | field '^eval dev' nll)
m1=$($BIN eval --checkpoint $C --data synthetic threads=1 "mask_heads=cross:*:*" | field '^eval dev' nll)
[ "$m0" = "$nll" ] && [ "$m1" != "$nll" ] || fail "eval mask_heads: empty $m0, cross:*:* $m1, unmasked $nll"
$BIN translate --checkpoint $C --data synthetic --split dev --output $W/t0.txt threads=1 beam=1 > /dev/null || fail "translate"
$BIN translate --checkpoint $C --data synthetic --split dev --output $W/t1.txt threads=1 beam=1 \
    "mask_heads=enc:*:*,dec_self:*:*,cross:*:*" > /dev/null || fail "translate mask_heads"
! cmp -s $W/t0.txt $W/t1.txt || fail "translate: masking every head changed no output"
$BIN attention --checkpoint $C --data synthetic --sentences 0-3 --output $W/m1.h5 "mask_heads=enc:0:*" > /dev/null ||
    fail "attention mask_heads"
$BIN attention --checkpoint $C --data synthetic --sentences 0-3 --output $W/m0.h5 > /dev/null || fail "attention"
res=$($PY - $W/m0.h5 $W/m1.h5 <<'PY'
import sys
import h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
same0 = all((a["sentences"][s]["encoder_self"][0] == b["sentences"][s]["encoder_self"][0]).all() for s in a["sentences"])
diff1 = any((a["sentences"][s]["encoder_self"][1] != b["sentences"][s]["encoder_self"][1]).any() for s in a["sentences"])
print("ok" if same0 and diff1 else f"layer 0 unchanged {same0}, layer 1 changed {diff1}")
PY
)
[ "$res" = ok ] || fail "attention mask_heads=enc:0:*: $res"
ok "mask_heads: eval (nll $nll -> $m1 without cross-attention), translate, attention (layer 0 weights kept, layer 1 changed)"
expect_error 2 "mask_heads': kind 'encoder' is not enc, dec_self or cross" \
    $BIN eval --checkpoint $C --data synthetic mask_heads=encoder:0:1
expect_error 2 "mask_heads': enc: layer '2' is not '\*' or in 0..1" $BIN eval --checkpoint $C --data synthetic mask_heads=enc:2:1
expect_error 2 "mask_heads': enc:0: head '4' is not '\*' or in 0..3" \
    $BIN translate --checkpoint $C --data synthetic --split dev --output $W/t.txt mask_heads=enc:0:4
expect_error 2 "mask_heads': 'cross:1' is not KIND:LAYER:HEAD" \
    $BIN attention --checkpoint $C --data synthetic --sentences 0 --output $W/x.h5 mask_heads=cross:1
expect_error 2 "mask_heads': empty entry" $BIN heads --checkpoint $C --data synthetic --output $W/x.h5 mask_heads=enc:0:1,,
expect_error 2 "heads: --checkpoint, --data and --output are required" $BIN heads --checkpoint $C --data synthetic
err=$(mpirun -np 2 $BIN heads --checkpoint $C --data synthetic --split nosuch --output $W/x.h5 threads=1 2>&1 >/dev/null)
[ $? -eq 2 ] && [ "$(echo "$err" | grep -c '^error:')" -eq 1 ] || fail "mpirun -np 2 heads --split nosuch: $err"
ok "mpirun -np 2 heads, unknown split: one error line ($(echo "$err" | grep '^error:'))"
[ ! -e $W/x.h5 ] || fail "a refused command wrote its output"

# --- pruning curves and figures
if [ -x $TOP/.venv/bin/python ]; then
    cp $W/h1.h5 $W/p.h5
    $TOP/.venv/bin/python $TOP/analysis/prune_heads.py $W/p.h5 --bin $BIN --levels 4 --random-orders 1 --single \
        --beam 1 threads=1 > $W/prune.out 2>&1 || fail "prune_heads.py: $(tail -2 $W/prune.out)"
    # a second order (raw importance) joins the file without replacing the first
    $TOP/.venv/bin/python $TOP/analysis/prune_heads.py $W/p.h5 --bin $BIN --levels 2 --random-orders 0 --score raw \
        --beam 1 threads=1 > $W/prune2.out 2>&1 || fail "prune_heads.py --score raw: $(tail -2 $W/prune2.out)"
    res=$($PY - $W/p.h5 "$(awk -v n=$nll 'BEGIN { printf "%.3f", exp(n) }')" <<'PY'
import sys
import h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
c = f["prune/importance"]
assert list(c["n_pruned"][()]) == [0, 6, 12, 18], c["n_pruned"][()]
assert abs(c["ppl"][0] - float(sys.argv[2])) < 2e-3 * float(sys.argv[2]), (c["ppl"][0], sys.argv[2])
assert c["order"].shape == (24, 3) and len({tuple(r) for r in c["order"][()]}) == 24
assert f["prune/random_0/ppl"].shape == (4,) and f["single/bleu"].shape == (3, 2, 4)
assert (f["single/ppl"][()] > 0).all()
assert list(f["prune/importance_raw/n_pruned"][()]) == [0, 12]
print("ok")
PY
) || fail "prune_heads.py results: $res"
    $TOP/.venv/bin/python $TOP/analysis/heads.py all $W/p.h5 --out $W/figs/h > /dev/null || fail "heads.py"
    for f in h_importance.png h_importance.pdf h_pruning.png h_pruning.pdf h_table.md h_table.csv; do
        [ -s $W/figs/$f ] || fail "heads.py wrote no $f"
    done
    ok "prune_heads.py: 4 levels x (importance + random), 24 single heads, level 0 = eval PPL; heads.py figures"
fi
echo "test_heads: all checks passed"
