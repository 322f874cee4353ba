#!/usr/bin/env bash
# The embedded synthetic task learns (issue 2): a 2-layer Transformer trained
# with the paper's optimiser on string reversal (input/synthetic-test.cfg, a
# smaller version of the default task) reaches a dev perplexity near 1 and
# greedy decoding reproduces at least 95% of the dev targets exactly.
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
# one thread: the layers are tiny, and on shared, oversubscribed cores
# OpenMP teams of 2 spend most of their time in barriers
# 2400 steps, not the config's 800: at 800 the exact match of seeds 1-6
# ranged 0.51-1.00, and a rounding change (the 1/sqrt(d_k) scale moved
# into the score GEMM) took seed 1 from 0.965 to 0.875; at 2400 all 16
# runs measured (seeds 1-8, before and after that change) ended >= 0.99
"$BIN" train --config "$TOP/input/synthetic-test.cfg" threads=1 train_steps=2400 run_dir="$tmp/run" > "$tmp/log" 2>&1
rc=$?
[ "$rc" -eq 0 ] || { cat "$tmp/log"; fail "train exited $rc"; }
cat "$tmp/log"
# one log line per log_steps with step, loss_ls (label-smoothed), lr, tok/s,
# elapsed; dev lines name the label-smoothed loss, the NLL and ppl = exp(nll)
grep -Eq '^step 100 loss_ls [0-9.]+ lr [0-9.e+-]+ tok/s [0-9]+ elapsed [0-9.]+s$' "$tmp/log" || fail "no log line for step 100"
grep -Eq '^dev final loss_ls [0-9.]+ nll [0-9.]+ ppl [0-9.]+ tokens [0-9]+$' "$tmp/log" || fail "no final dev line"
first=$(awk '/^step / { print $4; exit }' "$tmp/log")
ppl=$(field '^dev final' ppl "$tmp/log")
nll=$(field '^dev final' nll "$tmp/log")
awk -v p="$ppl" -v n="$nll" 'BEGIN { exit !((p - exp(n))^2 < (1e-3 * p)^2) }' || fail "dev ppl $ppl is not exp(nll $nll)"
acc=$(awk '/^dev greedy exact match/ { print $5 }' "$tmp/log")
[ -n "$ppl" ] && [ -n "$acc" ] || fail "no dev results in the log"
# perplexity from the unsmoothed NLL: 1 is perfect, the uniform guess over
# the 10 symbols + EOS would be about 11
awk -v p="$ppl" 'BEGIN { exit !(p < 1.25) }' || fail "dev perplexity $ppl is not below 1.25"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.95) }' || fail "dev greedy exact match $acc is below 0.95"
awk -v f="$first" -v p="$ppl" 'BEGIN { exit !(f > 1.5) }' || fail "first logged loss $first: did training start from scratch?"
ok "synthetic reversal: first loss $first, dev ppl $ppl, greedy exact match $acc in $(( $(date +%s) - t0 ))s"
