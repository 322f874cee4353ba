#!/usr/bin/env bash
# Head importance and head masking (issue #23):
# - `transformer heads` writes the same file with 1, 2 and 3 ranks (h5diff),
#   per sentence (the default) and per batch, and with a sample of pairs;
# - planted heads: a head whose W^O columns are zero has importance exactly
#   0 and is pruned first; the one head left in a layer whose others are
#   zeroed has all of that layer's normalised importance;
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
H=(heads --checkpoint $C --data synthetic --split dev threads=1 max_tokens=64)
$BIN "${H[@]}" --output $W/h1.h5 > $W/h1.out || fail "heads (1 rank)"
for np in 2 3; do
    mpirun -np $np $BIN "${H[@]}" --output $W/h$np.h5 > /dev/null || fail "heads ($np ranks)"
    h5diff $W/h1.h5 $W/h$np.h5 > $W/diff.txt || fail "1-rank and $np-rank files differ: $(head -5 $W/diff.txt)"
done
grep -q ' 24 sentences,' $W/h1.out || fail "heads --split dev: not one batch per dev sentence: $(cat $W/h1.out)"
$BIN "${H[@]}" --per batch --output $W/b1.h5 > $W/b1.out || fail "heads --per batch"
mpirun -np 2 $BIN "${H[@]}" --per batch --output $W/b2.h5 > /dev/null || fail "heads --per batch (2 ranks)"
h5diff $W/b1.h5 $W/b2.h5 > $W/diff.txt || fail "--per batch: 1-rank and 2-rank files differ: $(head -5 $W/diff.txt)"
ok "heads: 1-, 2- and 3-rank files identical (h5diff), $(grep -o '[0-9]* sentences' $W/h1.out); per batch too ($(grep -o '[0-9]* batches' $W/b1.out))"
$BIN heads --checkpoint $C --data synthetic --output $W/s1.h5 --sample 25 threads=1 > $W/s1.out || fail "heads --sample 25"
mpirun -np 2 $BIN heads --checkpoint $C --data synthetic --output $W/s2.h5 --sample 25 threads=1 > /dev/null ||
    fail "heads --sample 25 (2 ranks)"
h5diff $W/s1.h5 $W/s2.h5 > $W/diff.txt || fail "--sample: 1-rank and 2-rank files differ: $(head -5 $W/diff.txt)"
grep -q '^heads: train 25 sentences,' $W/s1.out || fail "heads --sample 25 (default split train): $(cat $W/s1.out)"
$BIN heads --checkpoint $C --data synthetic --output $W/s3.h5 --sample 25 --sample-seed 2 threads=1 > /dev/null ||
    fail "heads --sample-seed 2"
! h5diff -q $W/s1.h5 $W/s3.h5 /enc/importance /enc/importance > /dev/null || fail "--sample-seed 2 drew the same sample"
expect_error 2 "heads: --sample-seed 'x' is not a number >= 0" $BIN heads --checkpoint $C --data synthetic \
    --output $W/x.h5 --sample-seed x
expect_error 2 "heads: --sample needs --per sentence" $BIN heads --checkpoint $C --data synthetic \
    --output $W/x.h5 --per batch --sample 5
ok "heads --sample 25: 25 training sentences, the same sample on 1 and 2 ranks, another with --sample-seed 2"
nll=$($BIN eval --checkpoint $C --data synthetic threads=1 max_tokens=64 | field '^eval dev' nll)
for f in h1 b1; do
    got=$(awk '{ for (i = 1; i < NF; i++) if ($i == "nll") print $(i + 1) }' $W/$f.out)
    [ -n "$nll" ] && [ "$got" = "$nll" ] || fail "heads ($f) nll $got, eval nll $nll"
done
ok "heads nll $got (through gates at 1, per sentence and per batch) = eval's"

# --- planted heads: encoder layer 0 head 1 gets zero W^O columns (its output
# cannot reach the loss: importance exactly 0, pruned first); in
# cross-attention layer 1 every head but 2 is zeroed (head 2 alone carries
# the layer: all of its normalised importance)
$PY - $C $W/planted.h5 <<'PY' || fail "planting heads"
import sys, shutil
import h5py
shutil.copy(sys.argv[1], sys.argv[2])
dv = 8
with h5py.File(sys.argv[2], "r+") as f:
    for name, heads in (("encoder/layer_00/self_attention/W_o", [1]),
                        ("decoder/layer_01/cross_attention/W_o", [0, 1, 3])):
        w = f["params/" + name]
        x = w[()]
        for h in heads:
            x[:, h * dv:(h + 1) * dv] = 0
        w[...] = x
        del w.attrs["checksum"]   # a file without it still reads (docs/checkpoint.md)
PY
$BIN heads --checkpoint $W/planted.h5 --data synthetic --sample 200 --output $W/planted_heads.h5 threads=1 > /dev/null ||
    fail "heads on the planted checkpoint"
res=$($PY - $W/planted_heads.h5 <<'PY'
import sys
import h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
enc, cross = f["enc"]["importance"][()], f["cross"]["importance_norm"][()]
assert enc[0, 1] == 0 and (np.delete(enc[0], 1) > 0).all(), enc[0]
assert cross[1, 2] == 1 and (np.delete(cross[1], 2) == 0).all(), cross[1]
imp = np.stack([f[k]["importance_norm"][()] for k in ("enc", "dec_self", "cross")])
order = [tuple(int(x) for x in np.unravel_index(i, imp.shape)) for i in np.argsort(imp.reshape(-1), kind="stable")]
assert set(order[:4]) == {(0, 0, 1), (2, 1, 0), (2, 1, 1), (2, 1, 3)}, order[:4]
assert order[-1] == (2, 1, 2) or imp[2, 1, 2] == imp.max(), order[-1]
print("ok")
PY
) || fail "planted heads: $res"
ok "planted heads: zeroed enc:0:1 has importance 0 and is pruned among the first 4; cross:1:2 alone carries its layer (norm 1)"

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
    OMP_NUM_THREADS=1 $TOP/bin/tests/emu-transformer heads --checkpoint $C --data synthetic --split dev --output $W/hc.h5 \
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
for bad in "--split nosuch" "--sample x" "--bogus"; do
    err=$(mpirun -np 2 $BIN heads --checkpoint $C --data synthetic $bad --output $W/x.h5 threads=1 2>&1 >/dev/null)
    [ $? -eq 2 ] && [ "$(echo "$err" | grep -c '^error:')" -eq 1 ] || fail "mpirun -np 2 heads $bad: $err"
done
ok "mpirun -np 2 heads, an unknown split or argument, a bad --sample: one error line each"
[ ! -e $W/x.h5 ] || fail "a refused command wrote its output"

# --- pruning curves and figures
if [ -x $TOP/.venv/bin/python ]; then
    PRUNE=($TOP/.venv/bin/python $TOP/analysis/prune_heads.py)
    cp $W/h1.h5 $W/in_sample.h5
    expect_error 2 "importance was estimated on split 'dev', the split the curves would be scored on" \
        "${PRUNE[@]}" $W/in_sample.h5 --bin $BIN --levels 2 --random-orders 0 threads=1
    cp $W/s1.h5 $W/p.h5   # importance from 25 training sentences; the curves on dev
    "${PRUNE[@]}" $W/p.h5 --bin $BIN --levels 5 --random-orders 1 --min-per-layer 1 \
        --beam 1 threads=1 > $W/prune.out 2>&1 || fail "prune_heads.py: $(tail -2 $W/prune.out)"
    # a second order (raw importance) joins the file without replacing the
    # first; per kind at 2 levels (--single: analysis/tests/test_heads.py)
    "${PRUNE[@]}" $W/p.h5 --bin $BIN --levels 2 --random-orders 0 --score raw --per-kind --min-per-layer 1 \
        --beam 1 threads=1 > $W/prune2.out 2>&1 || fail "prune_heads.py --score raw: $(tail -2 $W/prune2.out)"
    res=$($PY - $W/p.h5 "$(awk -v n=$nll 'BEGIN { printf "%.3f", exp(n) }')" <<'PY'
import sys
import h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
c = f["prune/importance"]
# 24 heads at 0, 20, 40, 60, 80%: 0, 5, 10, 14, 19 -> 18, all but one head in each of the 6 layers
assert list(c["n_pruned"][()]) == [0, 5, 10, 14, 18], c["n_pruned"][()]
assert abs(c["ppl"][0] - float(sys.argv[2])) < 2e-3 * float(sys.argv[2]), (c["ppl"][0], sys.argv[2])
order = [tuple(r) for r in c["order"][()]]
assert len(order) == 18 and len(set(order)) == 18
left = {(k, l): 4 for k in range(3) for l in range(2)}
for k, l, h in order:
    left[(k, l)] -= 1
assert min(left.values()) == 1, left
for kind in ("enc", "dec_self", "cross"):
    ck = f[f"prune/importance_raw_{kind}"]
    assert list(ck["n_pruned"][()]) == [0, 4], (kind, ck["n_pruned"][()])
    assert {r[0] for r in ck["order"][()]} == {("enc", "dec_self", "cross").index(kind)}
    assert ck.attrs["kind"] == kind and ck.attrs["split"] == "dev" and ck.attrs["min_per_layer"] == 1
# Δ BLEU against the unpruned model: 0 at level 0 (p = 1), the interval around the estimate
assert c["d_bleu"][0] == 0 and c["d_bleu_p"][0] == 1
assert (c["d_bleu_lo"][()] <= c["d_bleu"][()] + 1e-9).all() and (c["d_bleu"][()] <= c["d_bleu_hi"][()] + 1e-9).all()
assert np.allclose(c["sacrebleu"][()] - c["sacrebleu"][0], c["d_bleu"][()])
assert f["prune/random_0/ppl"].shape == (5,)
assert list(f["prune/importance_raw/n_pruned"][()]) == [0, 12]
print("ok")
PY
) || fail "prune_heads.py results: $res"
    $TOP/.venv/bin/python $TOP/analysis/heads.py all $W/p.h5 --out $W/figs/h > /dev/null || fail "heads.py"
    for f in h_importance.png h_importance.pdf h_pruning.png h_pruning.pdf h_table.md h_table.csv; do
        [ -s $W/figs/$f ] || fail "heads.py wrote no $f"
    done
    ok "prune_heads.py: importance from train, curves on dev; 5 levels, per kind, min 1 head per layer, Δ BLEU by bootstrap; heads.py figures"
fi
echo "test_heads: all checks passed"
