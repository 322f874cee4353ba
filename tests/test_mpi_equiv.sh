#!/usr/bin/env bash
# Data parallelism is exact: 1 rank with update_freq=4, 2 ranks with
# update_freq=2 and 4 ranks (oversubscribed) with update_freq=1 see the same
# global batches (batcher.c's global sequence), so after 10 steps with dropout
# on the losses and the parameters must agree to float32 rounding (relative
# 1e-6; only the summation order of the gradients differs).  Also checks that
# bucket allreduces start during backward and only once per update.
set -u
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
A="train_steps=10 log_steps=1 threads=1 dropout=0.1 synth_train=1000 synth_dev=20 max_tokens=256 warmup=10
   n_layers=2 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16 bucket_kb=8"
"$BIN" train $A update_freq=4 --dump-params "$tmp/p1.bin" >"$tmp/l1" || fail "1 rank run"
mpirun -np 2 "$BIN" train $A update_freq=2 --dump-params "$tmp/p2.bin" >"$tmp/l2" || fail "2 rank run"
mpirun -np 4 --oversubscribe "$BIN" train $A update_freq=1 --dump-params "$tmp/p4.bin" >"$tmp/l4" || fail "4 rank run"
grep -q '4 ranks x 1 threads' "$tmp/l4" || fail "4-rank run did not report 4 ranks: $(head -1 "$tmp/l4")"

# losses of the 10 steps: relative 1e-6 (+ half a unit of the printed 6 decimals)
for p in 2 4; do
    paste <(grep '^step' "$tmp/l1") <(grep '^step' "$tmp/l$p") | awk -v p=$p '
        { n++; a = $4; b = $(NF/2 + 4); d = a > b ? a - b : b - a
          if (d > 1e-6 * a + 5e-7) { print "step " $2 ": loss " a " (1 rank) vs " b " (" p " ranks)"; bad = 1 } }
        END { if (n != 10) { print "expected 10 logged steps, got " n; bad = 1 } exit bad }' \
        || fail "losses of 1 rank and $p ranks differ"
    ok "10 losses agree, 1 rank x update_freq 4 vs $p ranks"
done
# the model learnt something: the runs are not trivially equal
first=$(grep -m1 '^step' "$tmp/l1" | awk '{print $4}'); last=$(grep '^step 10 ' "$tmp/l1" | awk '{print $4}')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.1) }' || fail "loss did not fall: $first -> $last"

# parameters: ||p_P - p_1|| / ||p_1|| <= 1e-6, and they did move
for p in 2 4; do
    r=$(perl -e '
        sub rd { open(my $f, "<:raw", $_[0]) or die "$_[0]: $!"; local $/; my @v = unpack("f<*", <$f>); return \@v }
        my ($a, $b) = (rd($ARGV[0]), rd($ARGV[1]));
        die "sizes differ\n" unless @$a == @$b && @$a > 0;
        my ($d, $n) = (0, 0);
        for my $i (0 .. $#$a) { $d += ($a->[$i] - $b->[$i]) ** 2; $n += $a->[$i] ** 2 }
        printf "%.3e\n", sqrt($d / $n);' "$tmp/p1.bin" "$tmp/p$p.bin") || fail "cannot compare parameter dumps"
    awk -v r="$r" 'BEGIN { exit !(r <= 1e-6) }' || fail "parameters of 1 rank and $p ranks differ: relative $r"
    ok "parameters after 10 steps agree, 1 rank vs $p ranks: relative difference $r"
done
# training changed the parameters (the comparison is not of two initial states)
"$BIN" train $A train_steps=0 --dump-params "$tmp/p0.bin" >/dev/null || fail "0-step run"
cmp -s "$tmp/p0.bin" "$tmp/p1.bin" && fail "parameters did not change in 10 steps"

# overlap: buckets start inside backward, and once per update with update_freq 2
line=$(grep '^allreduce: .* buckets' "$tmp/l2") || fail "no allreduce statistics in the 2-rank log"
echo "$line"
nb=$(echo "$line" | sed -E 's/^allreduce: ([0-9]+) buckets.*/\1/')
per=$(echo "$line" | sed -E 's/.* ([0-9.]+) bucket starts\/update.*/\1/')
early=$(echo "$line" | sed -E 's/.* ([0-9]+) of ([0-9]+) started during backward.*/\1/')
[ "$nb" -ge 4 ] || fail "expected several buckets with bucket_kb=8, got $nb"
[ "$per" = "$nb.00" ] || fail "update_freq=2 should communicate once per update: $per starts/update for $nb buckets"
[ "$early" -ge $((10 * (nb - 1))) ] || fail "only $early bucket allreduces started during backward"
ok "$nb buckets, once per update, $early started during backward"
grep -q 'busbw' "$tmp/l2" || fail "no busbw figure"
