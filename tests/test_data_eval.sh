#!/usr/bin/env bash
# `transformer eval --checkpoint CKPT --data DATA.h5 --split S`:
#  - on the dev split it reproduces, to the printed digit, the dev perplexity
#    that `train` reported at the end of the run that wrote the checkpoint,
#    and the same loss_ls and nll (same model, no dropout);
#  - it prints train's dev quantities under train's names: loss_ls
#    (label-smoothed), nll (unsmoothed, per wordpiece) and ppl = exp(nll);
#  - 2 ranks give the same perplexity as 1;
#  - errors: dataset/model vocabulary mismatch (size; or same size, other
#    pieces, also for translate, attention and resuming train), unknown split, an architecture
#    key on the command line, a missing checkpoint -- one line each, also
#    under mpirun (an unknown argument or split).
set -u
. "$(dirname "$0")/lib.sh"
need_multi30k   # sets M (tests/lib.sh): shared data, a download, or a skip
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
head -n 120 "$M/test2017.en" >"$W/dev.en"; head -n 120 "$M/test2017.de" >"$W/dev.de"
"$BIN" prepare --out "$W/d.h5" --split train "$M/val.en" "$M/val.de" --split train "$M/test2016.en" "$M/test2016.de" \
    --split dev "$W/dev.en" "$W/dev.de" vocab_size=1000 max_len=48 >/dev/null || fail "prepare"
ARCH="vocab_size=1000 max_len=48 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16 n_layers=1"
"$BIN" train data="$W/d.h5" $ARCH max_tokens=512 train_steps=6 warmup=3 log_steps=3 ckpt_steps=6 \
    run_dir="$W/run" label_smoothing=0.1 >"$W/train.log" 2>&1 || { cat "$W/train.log"; fail "train"; }
ck=$(ls "$W"/run/ckpt_*.h5 | tail -1)
[ -f "$ck" ] || fail "no checkpoint written"
out=$("$BIN" eval --checkpoint "$ck" --data "$W/d.h5" --split dev threads=1) || fail "eval failed"
echo "$out"
# train's dev line and eval print the same quantities under the same names:
# loss_ls (label-smoothed), nll (unsmoothed), ppl = exp(nll), per target token
echo "$out" | grep -Eq '^eval dev loss_ls [0-9.]+ nll [0-9.]+ ppl [0-9.]+ tokens [0-9]+ pairs [0-9]+' ||
    fail "eval line lacks loss_ls, nll, ppl: $out"
for k in loss_ls nll ppl tokens; do
    want=$(field '^dev final' $k "$W/train.log"); got=$(echo "$out" | field '^eval dev' $k)
    [ -n "$want" ] && [ "$got" = "$want" ] || fail "eval $k $got, train's dev final line $want"
done
awk -v l="$(field '^dev final' loss_ls "$W/train.log")" -v n="$(field '^dev final' nll "$W/train.log")" \
    'BEGIN { exit !(l > n) }' || fail "train's dev loss_ls is not above its nll (label_smoothing=0.1)"
got=$(echo "$out" | field '^eval dev' ppl)
echo "$out" | awk '{ for (i = 1; i < NF; i++) v[$i] = $(i + 1) } END { exit !((v["nll"] - log(v["ppl"]))^2 < 1e-6) }' ||
    fail "nll is not log(ppl)"
ok "eval dev loss_ls, nll, ppl $got = train's final dev line"
out2=$(mpirun -np 2 "$BIN" eval --checkpoint "$ck" --data "$W/d.h5" --split dev threads=1 2>/dev/null) || fail "2-rank eval"
[ "$(echo "$out2" | field '^eval dev' ppl)" = "$got" ] || fail "2 ranks: $out2"
ok "2 ranks: same ppl"
"$BIN" eval --checkpoint "$ck" --data "$W/d.h5" --split train | grep -q "^eval train loss_ls" || fail "train split"

"$BIN" prepare --out "$W/other.h5" --split train "$M/val.en" "$M/val.de" vocab_size=900 >/dev/null || fail "prepare 2"
expect_error 2 "other.h5: dataset vocabulary has 900 pieces but the model in .* has vocab_size 1000" \
    "$BIN" eval --checkpoint "$ck" --data "$W/other.h5"
# same size, other pieces (learned on other text): refused by every reader
"$BIN" prepare --out "$W/same.h5" --split train "$M/val.de" "$M/val.en" --split dev "$W/dev.de" "$W/dev.en" \
    vocab_size=1000 max_len=48 >/dev/null || fail "prepare 3"
pat="same.h5: its vocabulary is not the one .*ckpt_00000006.h5 was trained with (same ids, other pieces)"
expect_error 2 "$pat" "$BIN" eval --checkpoint "$ck" --data "$W/same.h5"
expect_error 2 "$pat" "$BIN" translate --checkpoint "$ck" --data "$W/same.h5" --split dev --output "$W/t.txt"
expect_error 2 "$pat" "$BIN" attention --checkpoint "$ck" --data "$W/same.h5" --split dev --sentences 0 --output "$W/a.h5"
expect_error 2 "$pat" "$BIN" train data="$W/same.h5" $ARCH max_tokens=512 train_steps=12 run_dir="$W/run"
expect_error 2 "d.h5: dataset has no split 'test9'" "$BIN" eval --checkpoint "$ck" --data "$W/d.h5" --split test9
expect_error 2 "key 'd_model' is an architecture key" "$BIN" eval --checkpoint "$ck" --data "$W/d.h5" d_model=64
expect_error 2 "nockpt.h5" "$BIN" eval --checkpoint "$W/nockpt.h5" --data "$W/d.h5"
# under mpirun an argument or dataset error is rank 0's one line, not one per rank
for bad in "--bogus" "--checkpoint $ck --data $W/d.h5 --split test9"; do
    err=$(mpirun -np 2 "$BIN" eval $bad threads=1 2>&1 >/dev/null); rc=$?
    [ $rc -eq 2 ] && [ "$(echo "$err" | grep -c '^error:')" -eq 1 ] || fail "mpirun -np 2 eval $bad: exit $rc, stderr: $err"
done
ok "mpirun -np 2 eval: an unknown argument, an unknown split: one error line each"
echo "test_data_eval: all checks passed"
