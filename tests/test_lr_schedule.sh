#!/usr/bin/env bash
# The learning rate of every step against eq. 3, computed here on its own:
#   lrate = lr_factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
# (the +0.5 exponent of a widely copied text is a typo), and with lr_peak > 0
# the same shape scaled to peak at lr_peak at step = warmup for any d_model:
#   lrate = lr_peak * warmup^0.5 * min(step^-0.5, step * warmup^-1.5)
# The log prints 4 significant digits: relative 1e-3.
. "$(dirname "$0")/lib.sh"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
A="n_layers=1 d_model=24 d_ff=32 n_heads=2 d_k=8 d_v=8 synth_train=64 synth_dev=4 max_tokens=200
   train_steps=12 log_steps=1 warmup=5 threads=1"
# check_lr LOG FACTOR PEAK D_MODEL WARMUP: every step line's lr
check_lr() {
    awk -v f="$2" -v p="$3" -v d="$4" -v w="$5" '
        /^step / { s = $2; lr = $6; n++
            a = 1 / sqrt(s); b = s * w ^ -1.5; m = a < b ? a : b
            want = p > 0 ? p * sqrt(w) * m : f / sqrt(d) * m
            if (lr < want * 0.999 || lr > want * 1.001) { printf "step %d: lr %s, eq. 3 gives %.4e\n", s, lr, want; bad = 1 } }
        END { if (n != 12) { print "expected 12 step lines, got " n; bad = 1 }; exit bad }' "$1"
}
out=$("$BIN" train $A lr_factor=0.7 2>&1) || fail "train: $out"
echo "$out" > $W/log
check_lr $W/log 0.7 0 24 5 || { fail "lr_factor=0.7: lr is not eq. 3"; }
ok "lr of 12 steps = eq. 3 (lr_factor 0.7, d_model 24, warmup 5)"
for d in 24 48; do
    out=$("$BIN" train $A d_model=$d lr_factor=0.7 lr_peak=2e-3 2>&1) || fail "train lr_peak: $out"
    echo "$out" > $W/log
    check_lr $W/log 0 2e-3 $d 5 || { fail "lr_peak=2e-3 d_model=$d: lr is not the scaled eq. 3"; }
    grep -q '^step 5 .* lr 2.000e-03 ' $W/log || { fail "lr_peak=2e-3 d_model=$d: step 5 (= warmup) is not at the peak"; }
done
ok "lr_peak=2e-3: peak 2e-3 at step = warmup for d_model 24 and 48, eq. 3's shape, lr_factor ignored"
expect_error 2 "lr_peak" "$BIN" train $A lr_peak=2
ok "lr_peak=2 refused"
