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

# lr_decay linear / cosine: eq. 3's warmup, then from its peak P (at step =
# warmup) down to lr_final F at train_steps, computed here on its own:
#   u = (step - warmup) / (train_steps - warmup)
#   linear: F + (P - F) (1 - u);  cosine: F + (P - F) (1 + cos(pi u)) / 2
# check_decay LOG KIND PEAK FINAL WARMUP STEPS
check_decay() {
    awk -v k="$2" -v p="$3" -v f="$4" -v w="$5" -v T="$6" '
        /^step / { s = $2; lr = $6; n++
            if (s <= w) want = p * s / w
            else { u = (s - w) / (T - w); want = f + (p - f) * (k == "linear" ? 1 - u : (1 + cos(3.141592653589793 * u)) / 2) }
            if (lr < want * 0.999 || lr > want * 1.001) { printf "step %d: lr %s, %s decay gives %.4e\n", s, lr, k, want; bad = 1 } }
        END { if (n != T) { print "expected " T " step lines, got " n; bad = 1 }; exit bad }' "$1"
}
for kind in linear cosine; do
    out=$("$BIN" train $A lr_peak=2e-3 lr_decay=$kind lr_final=1e-4 2>&1) || fail "train lr_decay=$kind: $out"
    echo "$out" > $W/log
    check_decay $W/log $kind 2e-3 1e-4 5 12 || fail "lr_decay=$kind (lr_peak): lr is not the closed form"
    grep -q '^step 12 .* lr 1.000e-04 ' $W/log || fail "lr_decay=$kind: step 12 (= train_steps) is not at lr_final"
    # eq. 3's own peak (lr_factor, d_model) and a decay to 0
    p=$(awk 'BEGIN { printf "%.9g", 0.7 / sqrt(24) / sqrt(5) }')
    out=$("$BIN" train $A lr_factor=0.7 lr_decay=$kind 2>&1) || fail "train lr_decay=$kind lr_factor: $out"
    echo "$out" > $W/log
    check_decay $W/log $kind "$p" 0 5 12 || fail "lr_decay=$kind (lr_factor 0.7): lr is not the closed form"
done
ok "lr_decay linear and cosine: eq. 3's warmup, then the closed-form decay to lr_final at train_steps (lr_peak and lr_factor peaks)"
expect_error 2 "lr_final" "$BIN" train $A lr_final=1e-4
expect_error 2 "lr_final.*above the peak" "$BIN" train $A lr_peak=1e-3 lr_decay=cosine lr_final=2e-3
expect_error 2 "lr_decay.*train_steps" "$BIN" train $A lr_decay=linear warmup=12
expect_error 2 "lr_decay" "$BIN" train $A lr_decay=exp
ok "lr_final without a decay, above the peak, a decay with train_steps <= warmup, an unknown decay: refused"
